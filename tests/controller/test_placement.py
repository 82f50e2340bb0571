"""StripedReplicaPlacer: Kafka's placement scenarios, with Kafka's exact replica lists.

``JavaMockRandom`` draws the numbers Kafka's tests draw (``MockRandom``'s generator behind
``java.util.Random.nextInt`` and ``Collections.shuffle``), so the placements below are the
ones ``StripedReplicaPlacerTest`` expects, which pins the visiting order down exactly.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import MutableSequence
from typing import Any, NamedTuple

import pytest

from kraft.controller.placement import (
    InvalidReplicationFactorError,
    StripedReplicaPlacer,
    _BrokerList,
    _RackList,
)
from kraft.protocol.errors import Errors


class Broker(NamedTuple):
    id: int
    rack: str | None
    fenced: bool


class JavaMockRandom(random.Random):
    """Kafka's ``MockRandom`` (a fixed linear congruential generator) seen through
    ``java.util.Random.nextInt(bound)`` and ``Collections.shuffle``."""

    def __init__(self, state: int = 17) -> None:
        super().__init__(0)
        self._state = state

    def _next31(self) -> int:
        self._state = (self._state * 2862933555777941757 + 3037000493) % (1 << 64)
        return self._state >> 33

    def randrange(self, start: int, stop: Any = None, step: int = 1) -> int:
        assert stop is None and step == 1
        bound = start
        r = self._next31()
        if bound & (bound - 1) == 0:
            return (bound * r) >> 31
        u = r
        while True:
            r = u % bound
            # Java's int overflow test: u - r + (bound - 1) wrapped below zero.
            if (u - r + bound - 1) < (1 << 31):
                return r
            u = self._next31()

    def shuffle(self, x: MutableSequence[Any]) -> None:
        for i in range(len(x), 1, -1):
            j = self.randrange(i)
            x[i - 1], x[j] = x[j], x[i - 1]


def test_broker_list_visits_each_broker_once_per_epoch_from_a_moving_start() -> None:
    assert _BrokerList().next(1) == -1
    brokers = _BrokerList()
    brokers.brokers.extend([0, 1, 2, 3])
    assert [brokers.next(0) for _ in range(6)] == [0, 1, 2, 3, -1, -1]
    assert [brokers.next(1) for _ in range(5)] == [1, 2, 3, 0, -1]


def test_single_rack_avoids_the_fenced_broker_when_it_can() -> None:
    racks = _RackList(
        JavaMockRandom(),
        [
            Broker(3, None, False),
            Broker(1, None, True),
            Broker(0, None, False),
            Broker(4, None, False),
            Broker(2, None, False),
        ],
    )
    assert (racks.num_total_brokers, racks.num_unfenced_brokers) == (5, 4)
    assert racks.rack_names == [None]
    for bad in (0, -1):
        with pytest.raises(InvalidReplicationFactorError):
            racks.place(bad)
    assert [racks.place(4) for _ in range(5)] == [
        [3, 4, 0, 2],
        [4, 0, 2, 3],
        [0, 2, 3, 4],
        [2, 3, 4, 0],
        [0, 4, 3, 2],  # after four partitions (four unfenced brokers) the lists reshuffle
    ]


def test_single_rack_uses_the_fenced_broker_when_it_must() -> None:
    racks = _RackList(
        JavaMockRandom(), [Broker(3, None, False), Broker(1, None, True), Broker(2, None, False)]
    )
    assert [racks.place(3) for _ in range(4)] == [[3, 2, 1], [2, 3, 1], [3, 2, 1], [2, 3, 1]]


def test_several_partitions_on_one_unfenced_broker() -> None:
    placer = StripedReplicaPlacer(JavaMockRandom())
    brokers = [Broker(0, None, False), Broker(1, None, True)]
    assert placer.place(3, 1, brokers) == [[0], [0], [0]]


def test_replicas_stripe_over_racks() -> None:
    racks = _RackList(
        JavaMockRandom(),
        [
            Broker(11, "1", False),
            Broker(10, "1", False),
            Broker(30, "3", False),
            Broker(31, "3", False),
            Broker(21, "2", False),
            Broker(20, "2", True),
        ],
    )
    assert (racks.num_total_brokers, racks.num_unfenced_brokers) == (6, 5)
    assert racks.rack_names == ["1", "2", "3"]
    assert [racks.place(4) for _ in range(3)] == [
        [11, 21, 31, 10],
        [21, 30, 10, 20],
        [31, 11, 21, 30],
    ]


def test_leader_comes_from_a_rack_with_an_unfenced_broker() -> None:
    racks = _RackList(
        JavaMockRandom(),
        [
            Broker(11, "1", False),
            Broker(10, "1", False),
            Broker(30, "3", True),
            Broker(31, "3", True),
            Broker(20, "2", True),
            Broker(21, "2", True),
            Broker(41, "4", False),
            Broker(40, "4", True),
        ],
    )
    assert (racks.num_total_brokers, racks.num_unfenced_brokers) == (8, 3)
    assert racks.rack_names == ["1", "2", "3", "4"]
    assert [racks.place(4) for _ in range(3)] == [
        [41, 11, 21, 30],
        [10, 20, 31, 41],
        [41, 21, 30, 11],
    ]


def test_the_rackless_sort_before_named_racks() -> None:
    racks = _RackList(
        JavaMockRandom(), [Broker(1, "b", False), Broker(2, None, False), Broker(3, "a", False)]
    )
    assert racks.rack_names == [None, "a", "b"]


def test_successful_placement() -> None:
    placer = StripedReplicaPlacer(JavaMockRandom())
    brokers = [
        Broker(0, None, False),
        Broker(3, None, False),
        Broker(2, None, False),
        Broker(1, None, False),
    ]
    assert placer.place(5, 3, brokers) == [[2, 3, 0], [3, 0, 1], [0, 1, 2], [1, 2, 3], [1, 0, 2]]


def test_even_distribution() -> None:
    placer = StripedReplicaPlacer(JavaMockRandom())
    brokers = [Broker(i, None, False) for i in range(4)]
    counts = Counter(tuple(replicas) for replicas in placer.place(200, 2, brokers))
    assert counts == {
        (0, 1): 14,
        (0, 2): 22,
        (0, 3): 14,
        (1, 0): 17,
        (1, 2): 17,
        (1, 3): 16,
        (2, 0): 13,
        (2, 1): 17,
        (2, 3): 20,
        (3, 0): 20,
        (3, 1): 19,
        (3, 2): 11,
    }


@pytest.mark.parametrize(
    ("brokers", "replication_factor", "message"),
    [
        (
            [Broker(11, "1", True), Broker(10, "1", True)],
            1,
            "All brokers are currently fenced.",
        ),
        (
            [Broker(11, "1", False), Broker(10, "1", False)],
            3,
            "The target replication factor of 3 cannot be reached because only 2 broker(s) "
            "are registered.",
        ),
        (
            [Broker(11, "1", False), Broker(10, "1", False)],
            0,
            "Invalid replication factor 0: the replication factor must be positive.",
        ),
        ([], 1, "All brokers are currently fenced."),
    ],
)
def test_impossible_placements_raise_invalid_replication_factor(
    brokers: list[Broker], replication_factor: int, message: str
) -> None:
    placer = StripedReplicaPlacer(random.Random(1))
    with pytest.raises(InvalidReplicationFactorError) as raised:
        placer.place(1, replication_factor, brokers)
    assert str(raised.value) == message
    assert raised.value.error_code is Errors.INVALID_REPLICATION_FACTOR


def test_any_placement_has_distinct_replicas_and_an_unfenced_first_replica() -> None:
    rng = random.Random(7)
    for _ in range(200):
        brokers = [
            Broker(i, rng.choice([None, "a", "b", "c"]), rng.random() < 0.3)
            for i in rng.sample(range(100), rng.randint(1, 12))
        ]
        if all(b.fenced for b in brokers):
            continue
        fenced = {b.id for b in brokers if b.fenced}
        rf = rng.randint(1, len(brokers))
        for replicas in StripedReplicaPlacer(rng).place(rng.randint(1, 20), rf, brokers):
            assert len(replicas) == rf == len(set(replicas))
            assert replicas[0] not in fenced
