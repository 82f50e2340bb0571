"""``StateMachineListener`` drives a ``StateMachine`` on real clients (``LocalCluster``):
records applied in offset order, snapshots written by bytes and by time, and a replica that
loads a snapshot ends with the same state."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from kraft.log.base import SnapshotRetention
from kraft.raft.state_machine import SnapshotPolicy, StateMachine, StateMachineListener
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.serde import StrSerde
from kraft.snapshot.reader import SnapshotReader
from kraft.testing.cluster import LocalCluster

NO_TIME = 0  # max_interval_ms: no snapshot by time


class Journal(StateMachine[str]):
    """Every record applied, with its offset; a snapshot holds the records (not offsets)."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, str]] = []
        self.loaded: list[str] = []
        self.resets = 0

    @property
    def state(self) -> list[str]:
        return self.loaded + [record for _, record in self.applied]

    def apply(self, offset: int, record: str) -> None:
        self.applied.append((offset, record))

    def snapshot_records(self) -> Iterable[str]:
        return self.state

    def load_snapshot(self, records: Iterable[str]) -> None:
        self.loaded = list(records)

    def reset(self) -> None:
        self.resets += 1
        self.applied = []
        self.loaded = []


def cluster_with_machines(
    policy: SnapshotPolicy, voters: int = 3
) -> tuple[LocalCluster[str], dict[int, StateMachineListener[str]]]:
    cluster: LocalCluster[str] = LocalCluster(voters, seed=1, serde=StrSerde())
    listeners = {}
    for node_id, client in cluster.nodes.items():
        listeners[node_id] = StateMachineListener(client, Journal(), policy)
        client.register(listeners[node_id])
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    return cluster, listeners


def journal(listener: StateMachineListener[str]) -> Journal:
    assert isinstance(listener.machine, Journal)
    return listener.machine


def append_and_commit(cluster: LocalCluster[str], records: list[str]) -> int:
    offset = cluster.append(records)
    assert offset is not None
    nodes = cluster.nodes.values()
    assert cluster.run_until(lambda: all((c.high_watermark or 0) > offset for c in nodes), 5_000)
    cluster.run_for(100)  # the followers learn the high watermark and deliver it
    return offset


def snapshot_records(cluster: LocalCluster[str], node_id: int) -> list[str]:
    raw = cluster.logs[node_id].latest_snapshot()
    assert raw is not None
    reader = SnapshotReader(raw, StrSerde())
    try:
        return [record for batch in reader for record in batch.records]
    finally:
        reader.close()


def test_records_are_applied_once_in_offset_order_on_every_replica() -> None:
    cluster, listeners = cluster_with_machines(SnapshotPolicy(max_interval_ms=NO_TIME))
    assert {listener.applied_offset for listener in listeners.values()} == {0}  # LeaderChange
    for i in range(5):
        append_and_commit(cluster, [f"r{i}a", f"r{i}b"])
    for node_id, listener in listeners.items():
        expected = [
            (batch.base_offset + i, record)
            for batch in cluster.listeners[node_id].batches
            for i, record in enumerate(batch.records)
        ]
        assert journal(listener).applied == expected
        assert [r for _, r in expected] == [f"r{i}{x}" for i in range(5) for x in "ab"]
        assert listener.applied_offset == cluster.listeners[node_id].batches[-1].last_offset
        assert cluster.nodes[node_id].latest_snapshot_id is None  # 20 MiB not reached


def test_a_snapshot_is_written_once_the_applied_bytes_pass_the_policy() -> None:
    cluster, listeners = cluster_with_machines(
        SnapshotPolicy(max_bytes_between_snapshots=1000, max_interval_ms=NO_TIME)
    )
    leader = cluster.leader()
    assert leader is not None
    client = cluster.nodes[leader]
    applied_bytes = sum(b.size_in_bytes for b in cluster.listeners[leader].batches)
    record = "x" * 100
    while applied_bytes < 1000:
        append_and_commit(cluster, [record])
        applied_bytes += cluster.listeners[leader].batches[-1].size_in_bytes
        if applied_bytes < 1000:
            assert client.latest_snapshot_id is None
    end = listeners[leader].applied_offset + 1
    assert client.latest_snapshot_id == OffsetAndEpoch(end, client.epoch)
    assert snapshot_records(cluster, leader) == journal(listeners[leader]).state
    # The count restarts: the next record does not make another snapshot.
    append_and_commit(cluster, [record])
    assert client.latest_snapshot_id == OffsetAndEpoch(end, client.epoch)


def test_a_snapshot_is_written_when_the_interval_passed_and_something_was_applied() -> None:
    cluster, listeners = cluster_with_machines(
        SnapshotPolicy(max_bytes_between_snapshots=1 << 30, max_interval_ms=60_000)
    )
    leader = cluster.leader()
    assert leader is not None
    client = cluster.nodes[leader]
    append_and_commit(cluster, ["early"])
    snapshots = [client.latest_snapshot_id]
    cluster.run_for(60_000)
    snapshots.append(client.latest_snapshot_id)  # nothing new was applied: none yet
    append_and_commit(cluster, ["late"])
    snapshots.append(client.latest_snapshot_id)
    end = listeners[leader].applied_offset + 1
    assert snapshots == [None, None, OffsetAndEpoch(end, client.epoch)]
    assert snapshot_records(cluster, leader) == ["early", "late"]


def test_no_snapshot_is_started_once_the_client_shuts_down() -> None:
    """As Kafka's SnapshotGenerator after ``beginShutdown``."""
    cluster, listeners = cluster_with_machines(
        SnapshotPolicy(max_bytes_between_snapshots=100, max_interval_ms=NO_TIME)
    )
    leader = cluster.leader()
    assert leader is not None
    before = cluster.nodes[leader].latest_snapshot_id
    listeners[leader].begin_shutdown()
    append_and_commit(cluster, ["x" * 200])
    assert cluster.nodes[leader].latest_snapshot_id == before
    follower = next(node_id for node_id in cluster.nodes if node_id != leader)
    end = listeners[follower].applied_offset + 1
    assert cluster.nodes[follower].latest_snapshot_id == OffsetAndEpoch(end, 1)


def test_a_replica_that_loads_a_snapshot_ends_with_the_same_state() -> None:
    """Node 3 is cut off while the others snapshot and clean their logs below the snapshot: it
    catches up by downloading the snapshot, which replaces its state, then the log after it."""
    cluster, listeners = cluster_with_machines(
        SnapshotPolicy(max_bytes_between_snapshots=500, max_interval_ms=NO_TIME)
    )
    leader = cluster.leader()
    assert leader is not None
    lagging = next(node_id for node_id in cluster.nodes if node_id != leader)
    append_and_commit(cluster, ["before"])
    cluster.disconnected.add(lagging)
    for node_id in cluster.nodes:
        cluster.logs[node_id].retention = SnapshotRetention(
            retained_snapshots=1, retention_bytes=None, retention_ms=None
        )
    for i in range(20):
        cluster.append([f"record {i}" * 5])
        cluster.run_for(50)
    cluster.run_for(cluster.config.log_clean_interval_ms)
    assert cluster.logs[leader].log_start_offset > cluster.logs[lagging].log_end_offset
    cluster.disconnected.clear()
    append_and_commit(cluster, ["after"])
    behind = journal(listeners[lagging])
    assert behind.resets == 1
    assert behind.loaded  # part of the state came from the snapshot
    assert behind.state == journal(listeners[leader]).state
    assert behind.state[0] == "before" and behind.state[-1] == "after"
    assert listeners[lagging].applied_offset == listeners[leader].applied_offset


def test_a_new_machine_on_a_restarted_node_starts_from_the_latest_snapshot() -> None:
    """A state machine registered on a node whose log starts at a snapshot (as after a restart)
    loads that snapshot, then applies the log after it, to the same state as the others."""
    cluster, listeners = cluster_with_machines(
        SnapshotPolicy(max_bytes_between_snapshots=300, max_interval_ms=NO_TIME)
    )
    leader = cluster.leader()
    assert leader is not None
    for i in range(10):
        append_and_commit(cluster, [f"record {i}" * 5])
    client = cluster.nodes[leader]
    snapshot_id = client.latest_snapshot_id
    assert snapshot_id is not None
    restarted: StateMachineListener[str] = StateMachineListener(
        client, Journal(), SnapshotPolicy(max_interval_ms=NO_TIME)
    )
    client.register(restarted)
    assert cluster.run_until(
        lambda: restarted.applied_offset == listeners[leader].applied_offset, 10_000
    )
    assert journal(restarted).resets == 1
    assert journal(restarted).applied[0][0] == snapshot_id.offset
    assert journal(restarted).state == journal(listeners[leader]).state


def test_the_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="max_bytes_between_snapshots"):
        SnapshotPolicy(max_bytes_between_snapshots=0)
    with pytest.raises(ValueError, match="max_interval_ms"):
        SnapshotPolicy(max_interval_ms=-1)
