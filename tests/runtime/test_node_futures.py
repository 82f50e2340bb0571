"""``RaftNode.append``, ``read_barrier`` and ``transfer_leadership``: three in-process nodes on
loopback, each with a listener, driven from the test's thread through the futures.

Each wait is a future's ``result(timeout)`` or a condition with a bound, never a sleep.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from kraft.config import Endpoint, QuorumConfig
from kraft.errors import IllegalStateError
from kraft.log.meta_properties import format_storage, random_uuid
from kraft.raft.listeners import BatchReader, LeaderAndEpoch, Listener, SnapshotReaderLike
from kraft.record.serde import StrSerde
from kraft.runtime.driver import RaftClientDriver
from kraft.runtime.node import RaftNode
from kraft.runtime.processes import free_ports

TIMEOUT_S = 30.0
#: Generous for the futures themselves: a test fails on a wrong result, not on a slow machine.
FUTURE_TIMEOUT_MS = 20_000


class Applied(Listener[str]):
    """The committed records of one node by offset, and its latest leader."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.records: dict[int, str] = {}
        self.leader = LeaderAndEpoch(None, 0)

    def handle_commit(self, reader: BatchReader[str]) -> None:
        with reader, self.changed:
            for batch in reader:
                for index, record in enumerate(batch.records):
                    self.records[batch.base_offset + index] = record
            self.changed.notify_all()

    def handle_load_snapshot(self, reader: SnapshotReaderLike[str]) -> None:
        reader.close()  # nothing here writes snapshots

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        with self.changed:
            self.leader = leader
            self.changed.notify_all()

    def applied(self, offset: int) -> str | None:
        with self.changed:
            return self.records.get(offset)

    def wait_for_leader(self, exclude: int | None = None) -> int:
        def elected() -> bool:
            return self.leader.leader_id not in (None, exclude)

        with self.changed:
            assert self.changed.wait_for(elected, TIMEOUT_S), self.leader
            leader = self.leader.leader_id
            assert leader is not None
            return leader


class Quorum:
    """Three voters in this process; ``started`` of them running."""

    def __init__(self, root: Path, started: tuple[int, ...] = (1, 2, 3)) -> None:
        cluster_id = random_uuid()
        ports = dict(zip((1, 2, 3), free_ports(3), strict=True))
        config = QuorumConfig(
            voters={n: Endpoint("127.0.0.1", port) for n, port in ports.items()},
            append_linger_ms=0,
        )
        self.states = {n: Applied() for n in ports}
        self.nodes: dict[int, RaftNode[str]] = {}
        for n in ports:
            format_storage(root / f"node-{n}", cluster_id, node_id=n)
            node: RaftNode[str] = RaftNode(
                node_id=n,
                data_dir=root / f"node-{n}",
                config=config,
                serde=StrSerde(),
                shutdown_timeout_ms=1000,
            )
            node.register(self.states[n])
            self.nodes[n] = node
        for n in started:
            self.nodes[n].start()

    def leader(self) -> int:
        return self.states[1].wait_for_leader()

    def close(self) -> None:
        for node in self.nodes.values():
            node.close()


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[Quorum]:
    quorum = Quorum(tmp_path)
    try:
        yield quorum
    finally:
        quorum.close()


def result(future: Future[int]) -> int:
    return future.result(TIMEOUT_S)


def test_append_completes_on_the_leader_and_a_follower_once_their_listeners_have_it(
    quorum: Quorum,
) -> None:
    leader = quorum.leader()
    follower = next(n for n in quorum.nodes if n != leader)
    offset = result(quorum.nodes[leader].append(["a", "b"], timeout_ms=FUTURE_TIMEOUT_MS))
    # Delivered before the future completed: no wait here.
    assert quorum.states[leader].applied(offset - 1) == "a"
    assert quorum.states[leader].applied(offset) == "b"
    forwarded = result(quorum.nodes[follower].append(["c"], timeout_ms=FUTURE_TIMEOUT_MS))
    assert forwarded > offset
    assert quorum.states[follower].applied(forwarded) == "c"


def test_a_read_barrier_covers_every_acknowledged_append(quorum: Quorum) -> None:
    leader = quorum.leader()
    offset = result(quorum.nodes[leader].append(["x"], timeout_ms=FUTURE_TIMEOUT_MS))
    for node_id, node in quorum.nodes.items():
        barrier = result(node.read_barrier(timeout_ms=FUTURE_TIMEOUT_MS))
        assert barrier >= offset
        # This node's listener was handed everything up to the barrier: a read is current.
        assert quorum.states[node_id].applied(offset) == "x"


def test_transfer_leadership_to_a_follower_makes_it_leader(quorum: Quorum) -> None:
    leader = quorum.leader()
    result(quorum.nodes[leader].append(["before"], timeout_ms=FUTURE_TIMEOUT_MS))
    target = next(n for n in quorum.nodes if n != leader)
    result(quorum.nodes[target].read_barrier())  # the target has caught up
    new_leader = result(quorum.nodes[leader].transfer_leadership(target))
    assert new_leader == target
    assert quorum.states[target].wait_for_leader(exclude=leader) == target
    assert quorum.nodes[target].client.is_leader


def test_a_node_that_is_not_running_fails_the_future(tmp_path: Path) -> None:
    quorum = Quorum(tmp_path, started=())
    node = quorum.nodes[1]
    with pytest.raises(IllegalStateError, match="not running"):
        result(node.append(["never"]))
    node.start()
    node.close()
    for future in (node.append(["late"]), node.read_barrier(), node.transfer_leadership()):
        with pytest.raises(IllegalStateError, match="not running"):
            result(future)


def test_a_future_pending_when_the_node_closes_fails(tmp_path: Path) -> None:
    """One voter of three: no leader, so an append waits for one until its timeout, which is
    far away; closing the node fails it at once."""
    quorum = Quorum(tmp_path, started=(1,))
    node = quorum.nodes[1]
    future = node.append(["stranded"], timeout_ms=600_000)
    barrier = node.read_barrier(timeout_ms=600_000)
    node.close()
    assert future.done() and barrier.done()
    assert isinstance(future.exception(), IllegalStateError)
    assert isinstance(barrier.exception(), IllegalStateError)


class Faulty(Applied):
    """A listener with a bug: it raises on the record ``boom``."""

    def handle_commit(self, reader: BatchReader[str]) -> None:
        with reader:
            if any("boom" in batch.records for batch in reader):
                raise RuntimeError("a listener bug")


def test_a_future_pending_when_the_node_stops_on_a_fatal_fault_fails(tmp_path: Path) -> None:
    """The listener's bug stops the driver before the batch is delivered: nothing polls the
    core any more, and the node's stop fails the future (it does not hang)."""
    format_storage(tmp_path / "node-1", random_uuid(), node_id=1)
    config = QuorumConfig(voters={1: Endpoint("127.0.0.1", 0)}, append_linger_ms=0)
    node: RaftNode[str] = RaftNode(
        node_id=1, data_dir=tmp_path / "node-1", config=config, serde=StrSerde()
    )
    node.register(Faulty())
    with node:
        future = node.append(["boom"], timeout_ms=600_000)
        with pytest.raises(IllegalStateError):
            result(future)
        assert isinstance(node.failure, RuntimeError)


def test_a_call_the_driver_never_ran_fails_when_the_node_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver that stops drops the calls it had not run yet (the core never saw them):
    the node's close fails their futures."""
    quorum = Quorum(tmp_path, started=(1,))
    node = quorum.nodes[1]
    monkeypatch.setattr(RaftClientDriver, "call_soon", lambda self, fn: None)
    future = node.read_barrier()
    node.close()
    with pytest.raises(IllegalStateError, match="has stopped"):
        result(future)
