"""Which partitions each broker is in the ISR of, and leads: Kafka's ``BrokersToIsrs``.

The replication manager asks it which partitions a fenced or shutting-down broker must leave,
which partitions have no leader when a broker is unfenced, and whether a broker in controlled
shutdown still leads anything.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

from kraft.metadata.image import NO_LEADER, PartitionRegistration
from kraft.metadata.timeline import LATEST, SnapshotRegistry, TimelineHashMap

__all__ = ["BrokersToIsrs", "TopicIdPartition"]


class TopicIdPartition(NamedTuple):
    """One partition of one topic, by the topic's id (Kafka's ``TopicIdPartition``)."""

    topic_id: uuid.UUID
    partition_id: int


class BrokersToIsrs:
    """For each broker, the partitions whose ISR holds it and whether it leads each (Kafka's
    ``BrokersToIsrs``). Leaderless partitions are listed under the pseudo-broker ``NO_LEADER``
    (-1) as its "leaderships", so that an unfenced broker can find them.

    One timeline map per broker, kept in a plain dict for ever once made: the maps revert
    themselves, and an empty map reads as no partitions at any offset.
    """

    def __init__(self, registry: SnapshotRegistry) -> None:
        self._registry = registry
        self._members: dict[int, TimelineHashMap[TopicIdPartition, bool]] = {}

    def update(
        self,
        partition: TopicIdPartition,
        prev: PartitionRegistration | None,
        new: PartitionRegistration | None,
    ) -> None:
        """Index ``partition`` changing from ``prev`` to ``new`` (``None``: absent)."""
        before = _isr_entries(prev)
        after = _isr_entries(new)
        for broker, leads in before.items():
            if broker not in after:
                self._members[broker].remove(partition)
            elif after[broker] != leads:
                self._members[broker].put(partition, after[broker])
        for broker, leads in after.items():
            if broker not in before:
                members = self._members.get(broker)
                if members is None:
                    members = self._members[broker] = TimelineHashMap(self._registry)
                members.put(partition, leads)

    def partitions_with_broker_in_isr(
        self, broker_id: int, offset: int = LATEST
    ) -> list[TopicIdPartition]:
        members = self._members.get(broker_id)
        return [] if members is None else members.keys(offset)

    def partitions_led_by(self, broker_id: int, offset: int = LATEST) -> list[TopicIdPartition]:
        members = self._members.get(broker_id)
        if members is None:
            return []
        return [partition for partition, leads in members.items(offset) if leads]

    def partitions_with_no_leader(self, offset: int = LATEST) -> list[TopicIdPartition]:
        return self.partitions_led_by(NO_LEADER, offset)

    def has_leaderships(self, broker_id: int) -> bool:
        members = self._members.get(broker_id)
        return members is not None and any(members.values())


def _isr_entries(partition: PartitionRegistration | None) -> dict[int, bool]:
    if partition is None:
        return {}
    entries = {broker: broker == partition.leader for broker in partition.isr}
    if partition.leader == NO_LEADER:
        entries[NO_LEADER] = True
    return entries
