"""The replicated key-value state machine: put and cas applied by offset, the outcome of each
command kept for its submitter, snapshots, and three replicas agreeing through the log."""

from __future__ import annotations

import pytest

from kraft.errors import CorruptRecordError
from kraft.kv import KvCommand, KvSerde, KvStateMachine
from kraft.raft.state_machine import SnapshotPolicy, StateMachineListener
from kraft.testing.cluster import LocalCluster


def test_put_and_cas_change_the_map_and_record_their_outcome() -> None:
    kv = KvStateMachine()
    kv.apply(1, KvCommand("cas", "x", "1"))  # absent -> "1": swaps
    kv.apply(2, KvCommand("cas", "x", "2"))  # absent expected, "1" found: no swap
    kv.apply(3, KvCommand("cas", "x", "3", expected="1"))
    kv.apply(5, KvCommand("put", "y", "a"))
    assert (kv.get("x"), kv.get("y"), kv.get("z")) == ("3", "a", None)
    assert [kv.result_at(offset) for offset in (1, 2, 3, 5)] == [True, False, True, True]
    with pytest.raises(KeyError):
        kv.result_at(4)


def test_outcomes_are_kept_for_a_bounded_window() -> None:
    kv = KvStateMachine(result_window=2)
    for offset in range(3):
        kv.apply(offset, KvCommand("put", "k", str(offset)))
    with pytest.raises(KeyError):
        kv.result_at(0)
    assert kv.result_at(1) and kv.result_at(2)
    with pytest.raises(ValueError, match="result_window"):
        KvStateMachine(result_window=0)


def test_a_snapshot_rebuilds_the_map_and_forgets_outcomes() -> None:
    kv = KvStateMachine()
    kv.apply(0, KvCommand("put", "a", "1"))
    kv.apply(1, KvCommand("put", "b", "2"))
    copy = KvStateMachine()
    copy.apply(7, KvCommand("put", "stale", "x"))
    copy.reset()
    copy.load_snapshot(kv.snapshot_records())
    assert (copy.get("a"), copy.get("b"), copy.get("stale"), len(copy)) == ("1", "2", None, 2)
    with pytest.raises(KeyError):
        copy.result_at(7)


def test_the_serde_round_trips_and_refuses_garbage() -> None:
    serde = KvSerde()
    command = KvCommand("cas", "k", "new", expected="old")
    assert serde.decode(serde.encode(command)) == command
    with pytest.raises(CorruptRecordError):
        serde.decode(b"\x93\xa3bad")


def test_replicas_agree_and_the_submitter_learns_the_cas_outcome() -> None:
    cluster: LocalCluster[KvCommand] = LocalCluster(3, seed=2, serde=KvSerde())
    machines = {node_id: KvStateMachine() for node_id in cluster.nodes}
    for node_id, client in cluster.nodes.items():
        client.register(StateMachineListener(client, machines[node_id], SnapshotPolicy()))
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    leader = cluster.leader()
    assert leader is not None
    offsets = [
        cluster.append([KvCommand("put", "x", "1")]),
        cluster.append([KvCommand("cas", "x", "2", expected="0")]),
        cluster.append([KvCommand("cas", "x", "3", expected="1")]),
    ]
    last = offsets[-1]
    assert last is not None
    assert cluster.run_until(
        lambda: all((c.high_watermark or 0) > last for c in cluster.nodes.values()), 5_000
    )
    cluster.run_for(100)
    for machine in machines.values():
        assert machine.get("x") == "3"
        assert [machine.result_at(o) for o in offsets if o is not None] == [True, False, True]


def test_a_write_through_any_node_learns_its_outcome_there_and_a_barrier_read_sees_it() -> None:
    """What the kv workload does: a cas appended through a follower completes once that
    node's state machine applied it, so ``result_at`` answers there; a read barrier on
    another node, then its local state, sees the write."""
    cluster: LocalCluster[KvCommand] = LocalCluster(3, seed=4, serde=KvSerde())
    machines = {node_id: KvStateMachine() for node_id in cluster.nodes}
    for node_id, client in cluster.nodes.items():
        client.register(StateMachineListener(client, machines[node_id], SnapshotPolicy()))
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    leader = cluster.leader()
    followers = [node_id for node_id in cluster.nodes if node_id != leader]
    values = ["1", "2"]  # both create k: one swaps, the other finds it there
    writes = [cluster.nodes[followers[0]].append([KvCommand("cas", "k", v)]) for v in values]
    assert cluster.run_until(lambda: all(w.done() for w in writes), 5_000)
    outcomes = [machines[followers[0]].result_at(w.result()) for w in writes]
    assert sorted(outcomes) == [False, True]
    barrier = cluster.nodes[followers[1]].read_barrier()
    assert cluster.run_until(barrier.done, 5_000)
    assert barrier.result() >= max(w.result() for w in writes)
    assert machines[followers[1]].get("k") == values[outcomes.index(True)]
