"""Rack-aware striped replica placement: Kafka's ``StripedReplicaPlacer``.

The placer is given every usable broker (registered and not in controlled shutdown; fenced or
not) and returns, for each new partition, its replica list. The rules, as Kafka's:

- the first replica (the preferred leader) is always an unfenced broker;
- racks are visited in turn, so the replicas of a partition spread over as many racks as there
  are, and the rack that supplies the first replica moves on by one for each partition;
- within a rack, brokers are visited in turn (unfenced ones before fenced ones), so leadership
  and replicas spread evenly over the brokers;
- once as many partitions have been placed as there are unfenced brokers, the racks and the
  brokers within them are shuffled, so that the same replica lists do not repeat for ever.

Deterministic for a given ``random.Random`` (the start offsets and the shuffles come from it).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Protocol

from kraft.protocol.errors import Errors, ProtocolError

__all__ = ["InvalidReplicationFactorError", "PlacementBroker", "StripedReplicaPlacer"]


class InvalidReplicationFactorError(ProtocolError):
    """INVALID_REPLICATION_FACTOR (38): the replication factor is not positive, is above the
    number of registered brokers, or every broker is fenced."""

    error_code = Errors.INVALID_REPLICATION_FACTOR


class PlacementBroker(Protocol):
    """What the placer needs to know of a broker (Kafka's ``UsableBroker``)."""

    @property
    def id(self) -> int: ...

    @property
    def rack(self) -> str | None: ...

    @property
    def fenced(self) -> bool: ...


class _BrokerList:
    """The brokers of one rack (fenced or unfenced ones), visited from a moving start.

    Each placement round is an *epoch*: within an epoch every broker is returned at most once;
    a new epoch starts one position further on.
    """

    def __init__(self) -> None:
        self.brokers: list[int] = []
        self._index = 0
        self._offset = 0
        self._epoch = 0

    def initialize(self, rng: random.Random) -> None:
        if self.brokers:
            self.brokers.sort()
            self._offset = rng.randrange(len(self.brokers))

    def shuffle(self, rng: random.Random) -> None:
        rng.shuffle(self.brokers)

    def next(self, epoch: int) -> int:
        """The next broker in this epoch, or -1 when every one has been returned."""
        if not self.brokers:
            return -1
        if self._epoch != epoch:
            self._epoch = epoch
            self._index = 0
            self._offset = (self._offset + 1) % len(self.brokers)
        if self._index >= len(self.brokers):
            return -1
        broker = self.brokers[(self._index + self._offset) % len(self.brokers)]
        self._index += 1
        return broker


class _Rack:
    def __init__(self) -> None:
        self.fenced = _BrokerList()
        self.unfenced = _BrokerList()

    def initialize(self, rng: random.Random) -> None:
        self.fenced.initialize(rng)
        self.unfenced.initialize(rng)

    def shuffle(self, rng: random.Random) -> None:
        self.fenced.shuffle(rng)
        self.unfenced.shuffle(rng)

    def next(self, epoch: int) -> int:
        """The next broker of this rack in this epoch, unfenced ones first; -1 when none."""
        broker = self.unfenced.next(epoch)
        return broker if broker >= 0 else self.fenced.next(epoch)


def _rack_order(name: str | None) -> tuple[bool, str]:
    # Kafka's OptionalStringComparator: the absent rack sorts before every named one.
    return (name is not None, name or "")


class _RackList:
    """Every rack of the cluster, visited in turn from a start that moves on per partition."""

    def __init__(self, rng: random.Random, brokers: Iterable[PlacementBroker]) -> None:
        self._rng = rng
        self._racks: dict[str | None, _Rack] = {}
        self.num_total_brokers = 0
        self.num_unfenced_brokers = 0
        for broker in brokers:
            rack = self._racks.setdefault(broker.rack, _Rack())
            if broker.fenced:
                rack.fenced.brokers.append(broker.id)
            else:
                rack.unfenced.brokers.append(broker.id)
                self.num_unfenced_brokers += 1
            self.num_total_brokers += 1
        # Racks draw their start offsets (and later their shuffles) in rack-name order, not in
        # the order the brokers came: the placement depends only on the set of brokers.
        self._sorted_racks = [self._racks[name] for name in sorted(self._racks, key=_rack_order)]
        for rack in self._sorted_racks:
            rack.initialize(rng)
        self.rack_names: list[str | None] = sorted(self._racks, key=_rack_order)
        self._epoch = 0
        self._offset = rng.randrange(len(self.rack_names)) if self.rack_names else 0

    def place(self, replication_factor: int) -> list[int]:
        _check(replication_factor, self.num_total_brokers, self.num_unfenced_brokers)
        # After as many partitions as there are unfenced brokers, reshuffle so that the same
        # replica lists do not come round again (not with one unfenced broker: every epoch
        # would end at once and the loop below would never find a first replica).
        if self._epoch == self.num_unfenced_brokers and self.num_unfenced_brokers > 1:
            self._shuffle()
            self._epoch = 0
        if self._offset == len(self.rack_names):
            self._offset = 0
        names = self.rack_names
        # The first replica: the next unfenced broker of the first rack, from the start rack
        # on, that still has one in this epoch.
        first_rack = self._offset
        while True:
            broker = self._racks[names[first_rack]].unfenced.next(self._epoch)
            if broker >= 0:
                replicas = [broker]
                break
            first_rack = (first_rack + 1) % len(names)
        # The others: one per rack in turn from the start rack, skipping the first replica's
        # rack once (it has already given a broker this round).
        rack_index = self._offset
        for _ in range(1, replication_factor):
            broker = -1
            while broker < 0:
                if rack_index == first_rack:
                    first_rack = -1
                else:
                    broker = self._racks[names[rack_index]].next(self._epoch)
                rack_index = (rack_index + 1) % len(names)
            replicas.append(broker)
        self._epoch += 1
        self._offset += 1
        return replicas

    def _shuffle(self) -> None:
        self._rng.shuffle(self.rack_names)
        for rack in self._sorted_racks:
            rack.shuffle(self._rng)


def _check(replication_factor: int, num_total: int, num_unfenced: int) -> None:
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(
            f"Invalid replication factor {replication_factor}: the replication factor must be "
            "positive."
        )
    if num_unfenced == 0:
        raise InvalidReplicationFactorError("All brokers are currently fenced.")
    if replication_factor > num_total:
        raise InvalidReplicationFactorError(
            f"The target replication factor of {replication_factor} cannot be reached because "
            f"only {num_total} broker(s) are registered."
        )


class StripedReplicaPlacer:
    """Kafka's ``StripedReplicaPlacer``: replica lists for new partitions (module docstring)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def place(
        self,
        num_partitions: int,
        replication_factor: int,
        usable_brokers: Iterable[PlacementBroker],
    ) -> list[list[int]]:
        """The replica lists of ``num_partitions`` new partitions, each of
        ``replication_factor`` distinct brokers, the first of them unfenced.

        Raises :class:`InvalidReplicationFactorError` when that cannot be done.
        """
        racks = _RackList(self._rng, usable_brokers)
        _check(replication_factor, racks.num_total_brokers, racks.num_unfenced_brokers)
        return [racks.place(replication_factor) for _ in range(num_partitions)]
