"""The ``Cluster`` API, behaviour by behaviour (docs/simulation.md), and the page's examples.

Every test drives real Raft clients in virtual time; a seed fixes the run, so each assertion is
about one deterministic run (times below are simulated milliseconds, not wall-clock).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kraft.config import ConfigError, Endpoint, QuorumConfig
from kraft.simulation import (
    Cluster,
    CounterIncrement,
    Event,
    LinkConfig,
    SimulationError,
    read_events,
)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
def elect(cluster: Cluster, timeout_ms: int = 10_000) -> int:
    """Run until there is a leader; its id."""
    assert cluster.run_until(lambda: cluster.leader() is not None, timeout_ms), "no leader"
    leader = cluster.leader()
    assert leader is not None
    return leader


def commit_everywhere(
    cluster: Cluster, offset: int, node_ids: Any = None, timeout_ms: int = 10_000
) -> None:
    """Run until every node of ``node_ids`` (all by default) has committed ``offset``."""
    ids = list(cluster.nodes) if node_ids is None else list(node_ids)
    assert cluster.run_until(
        lambda: all(cluster.node(i).high_watermark > offset for i in ids), timeout_ms
    ), f"offset {offset} not committed on {ids}: {list(cluster.nodes.values())}"


def converged(cluster: Cluster) -> bool:
    """A leader, and every running node at its high watermark and counter value."""
    leader = cluster.leader()
    if leader is None:
        return False
    top = cluster.node(leader)
    return all(
        n.high_watermark == top.high_watermark and n.counter_value == top.counter_value
        for n in cluster.nodes.values()
        if n.running
    )


def data(node_records: list[Any]) -> list[Any]:
    """The records a test appended (not the workload's counter increments)."""
    return [r for r in node_records if type(r) is not CounterIncrement]


def events_of(path: Path, kind: str) -> list[Event]:
    return [e for e in read_events(path) if e.kind == kind]


# ---------------------------------------------------------------------------------------------
# Elections and appends
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("voters", "seed"), [(3, 1), (3, 2), (5, 3), (5, 4)])
def test_a_leader_is_elected_and_every_voter_follows_it(voters: int, seed: int) -> None:
    """One leader in the highest epoch; ``leader()`` names the node whose role is Leader; every
    other voter ends up its Follower in that epoch."""
    cluster = Cluster(seed=seed, voters=voters)
    leader = elect(cluster)
    node = cluster.node(leader)
    assert node.role == "Leader"
    assert [i for i, n in cluster.nodes.items() if n.role == "Leader"] == [leader]
    assert cluster.run_until(
        lambda: all(
            n.role == "Follower"
            and n.client is not None
            and n.client.leader_id == leader
            and n.epoch == node.epoch
            for i, n in cluster.nodes.items()
            if i != leader
        ),
        5_000,
    )
    assert cluster.leader() == leader


def test_a_single_voter_elects_itself() -> None:
    cluster = Cluster(seed=0, voters=1)
    assert elect(cluster, timeout_ms=0) == 1


def test_append_returns_offsets_and_every_node_commits_the_records_in_order() -> None:
    """Each append is one batch after the last; every node's listener gets every record in
    offset order, observers included."""
    cluster = Cluster(seed=5, voters=3, observers=1)
    elect(cluster)
    first = cluster.append(["a", "b"])
    second = cluster.append(["c"])
    assert first is not None and second is not None
    assert second == first + 1
    commit_everywhere(cluster, second)
    for node in cluster.nodes.values():
        assert node.committed == ["a", "b", "c"], node
    assert cluster.validate() == []


def test_append_without_a_leader_is_refused(tmp_path: Path) -> None:
    """Before any election there is nobody to append through: None, and an append_refused
    event with the record count."""
    log = tmp_path / "events.jsonl"
    cluster = Cluster(seed=1, event_log=log)
    assert cluster.leader() is None
    assert cluster.append(["x", "y"]) is None
    assert cluster.increment() is None
    cluster.close()
    refused = events_of(log, "append_refused")
    assert [e.count for e in refused] == [2, 1]
    assert all(e.node == -1 for e in refused)


def test_workload_increments_the_counter_on_every_node() -> None:
    """``start_workload`` increments through the leader; every node reaches the same value,
    and ``stop_workload`` stops it."""
    cluster = Cluster(seed=6, voters=3)
    cluster.start_workload(rate_per_s=200)
    assert cluster.workload_rate == 200
    cluster.run_for(3_000)
    cluster.stop_workload()
    assert cluster.workload_rate == 0.0
    cluster.run_for(1_000)  # the last appends linger, then commit
    assert converged(cluster)
    value = cluster.node(1).counter_value
    assert value > 100
    cluster.run_for(2_000)
    assert all(n.counter_value == value for n in cluster.nodes.values())
    assert cluster.node(1).committed == [CounterIncrement(v) for v in range(1, value + 1)]


# ---------------------------------------------------------------------------------------------
# Partitions
# ---------------------------------------------------------------------------------------------
def test_isolated_leader_is_replaced_cannot_commit_and_catches_up_after_heal() -> None:
    """An isolated leader keeps its role for a while but commits nothing; the majority elects
    another in a higher epoch and commits; after ``heal`` the old leader follows it, drops its
    uncommitted append and holds what the majority committed."""
    cluster = Cluster(seed=3, voters=3)
    old = elect(cluster)
    before = cluster.append(["before"])
    assert before is not None
    commit_everywhere(cluster, before)
    cluster.isolate(old)
    lost = cluster.append(["lost"])  # still the highest-epoch leader: accepted
    assert lost is not None
    assert cluster.run_until(lambda: cluster.leader() not in (None, old), 10_000)
    new = cluster.leader()
    assert new is not None and cluster.node(new).epoch > cluster.node(old).epoch
    after = cluster.append(["after"])
    assert after is not None
    others = [i for i in cluster.nodes if i != old]
    commit_everywhere(cluster, after, others)
    cluster.run_for(2_000)
    assert cluster.node(old).high_watermark <= lost  # "lost" was never committed
    assert "lost" not in cluster.node(old).committed
    cluster.heal()
    assert cluster.run_until(
        lambda: cluster.node(old).role == "Follower" and cluster.node(old).high_watermark > after,
        10_000,
    )
    for node in cluster.nodes.values():
        assert node.committed == ["before", "after"], node
    assert cluster.validate() == []


def test_partition_of_one_node_from_two() -> None:
    """``partition({1}, {2, 3})``: the pair keeps (or elects) a leader and commits; node 1
    commits nothing meanwhile, never leads a newer epoch, and catches up after ``heal``."""
    cluster = Cluster(seed=4, voters=3)
    elect(cluster)
    cluster.start_workload(100)
    cluster.run_for(500)
    cluster.partition({1}, {2, 3})
    assert cluster.network.blocked == {(1, 2), (1, 3), (2, 1), (3, 1)}
    cluster.run_for(1_000)
    cut_at = cluster.node(1).high_watermark
    cluster.run_for(4_000)
    assert cluster.node(1).high_watermark == cut_at
    leader = cluster.leader()
    assert leader in (2, 3)
    assert cluster.node(leader).high_watermark > cut_at + 100
    assert cluster.node(1).role != "Leader"
    cluster.heal()
    assert cluster.network.blocked == set()
    cluster.stop_workload()
    assert cluster.run_until(lambda: converged(cluster), 10_000)
    assert cluster.validate() == []


def test_partition_puts_unlisted_nodes_in_a_group_of_their_own() -> None:
    cluster = Cluster(seed=4, voters=5)
    cluster.partition({1}, {2, 3})
    blocked = cluster.network.blocked
    assert (4, 5) not in blocked and (5, 4) not in blocked  # {4, 5}: the unlisted group
    assert (2, 3) not in blocked
    assert {(1, 4), (4, 1), (2, 5), (5, 3)} <= blocked


def test_block_is_one_way(tmp_path: Path) -> None:
    """``block([leader], [f])`` loses what the leader sends to f, not what f sends to the
    leader: f's requests keep arriving, no answer reaches it, it commits nothing; the other
    follower is unaffected, and f's pre-votes cannot unseat the leader (KIP-996)."""
    log = tmp_path / "events.jsonl"
    cluster = Cluster(seed=5, voters=3, event_log=log)
    leader = elect(cluster)
    blocked, other = (i for i in cluster.voter_ids if i != leader)
    epoch = cluster.node(leader).epoch
    cut_at = cluster.now_ms
    cluster.block([leader], [blocked])
    cluster.start_workload(50)
    cluster.run_for(5_000)
    assert cluster.node(blocked).high_watermark == 0
    assert cluster.node(other).counter_value > 100
    assert cluster.leader() == leader and cluster.node(leader).epoch == epoch
    cluster.close()
    later = [e for e in read_events(log) if e.time_ms > cut_at + 10]
    to_leader = [
        e for e in later if e.kind == "message_delivered" and (e.node, e.peer) == (leader, blocked)
    ]
    to_blocked = [
        e for e in later if e.kind == "message_delivered" and (e.node, e.peer) == (blocked, leader)
    ]
    assert to_leader and not to_blocked
    assert any(
        e.kind == "message_dropped"
        and (e.node, e.peer) == (leader, blocked)
        and e.details == {"reason": "partitioned"}
        for e in later
    )


def test_a_partition_also_cuts_messages_in_flight(tmp_path: Path) -> None:
    """Partitions are checked at delivery: a message sent before the cut and arriving after it
    is dropped (reason ``partitioned``)."""
    log = tmp_path / "events.jsonl"
    cluster = Cluster(seed=2, voters=3, event_log=log, network=LinkConfig(latency_ms=(20, 40)))
    leader = elect(cluster)
    cluster.start_workload(100)
    cluster.run_for(1_000)
    cut_at = cluster.now_ms
    cluster.isolate(leader)
    cluster.run_for(100)
    cluster.close()
    events = read_events(log)
    in_flight = {
        (e.node, e.peer, e.message)
        for e in events
        if e.kind == "message_sent" and cut_at - 20 < e.time_ms <= cut_at
    }
    dropped = [
        e
        for e in events
        if e.kind == "message_dropped"
        and e.time_ms > cut_at
        and (e.details or {}).get("reason") == "partitioned"
        and (e.node, e.peer, e.message) in in_flight
    ]
    assert dropped


# ---------------------------------------------------------------------------------------------
# Crashes and disks
# ---------------------------------------------------------------------------------------------
def test_kill_loses_unflushed_data_and_restart_recovers_from_disk() -> None:
    """An observer does not flush what it fetches: a kill loses its whole unflushed log and
    its high watermark; restarted, it fetches everything again. A voter flushes, so a killed
    voter keeps its log, and restarted delivers it again from disk."""
    cluster = Cluster(seed=2, voters=3, observers=1)
    elect(cluster)
    offset = cluster.append(["a", "b", "c"])
    assert offset is not None
    commit_everywhere(cluster, offset)
    observer = cluster.node(4)
    assert observer.log_end_offset == offset + 1
    assert observer.log.last_flushed_offset < observer.log_end_offset
    flushed = observer.log.last_flushed_offset
    cluster.kill(4)
    assert 4 not in cluster.running and observer.role == "Down"
    assert observer.log_end_offset == flushed
    assert observer.high_watermark == 0
    cluster.restart(4)
    assert 4 in cluster.running and observer.committed == []
    commit_everywhere(cluster, offset, [4])
    assert observer.committed == ["a", "b", "c"]

    voter = next(i for i in cluster.voter_ids if i != cluster.leader())
    node = cluster.node(voter)
    end = node.log_end_offset
    assert node.log.last_flushed_offset == end
    cluster.kill(voter)
    assert node.log_end_offset == end  # nothing was unflushed
    assert node.epoch == cluster.node(cluster.leader() or 1).epoch  # read from its store
    cluster.restart(voter)
    commit_everywhere(cluster, offset, [voter])
    assert node.committed == ["a", "b", "c"]
    assert cluster.validate() == []


def test_killing_a_node_that_is_down_changes_nothing_but_keeps_the_numbering() -> None:
    """The second kill is recorded (so suppressing the first does not renumber later faults)
    but the node stays down in the same incarnation."""
    cluster = Cluster(seed=1)
    cluster.kill(2)
    incarnation = cluster.node(2).incarnation
    cluster.kill(2)
    assert [(f.index, f.kind, f.targets) for f in cluster.faults] == [
        (0, "kill", (2,)),
        (1, "kill", (2,)),
    ]
    assert cluster.node(2).client is None
    assert cluster.node(2).incarnation == incarnation


def test_killed_leader_is_replaced_and_loses_nothing_committed() -> None:
    """The committed records survive the leader's crash: the new leader has them, and the old
    one delivers them again after its restart."""
    cluster = Cluster(seed=8, voters=5)
    old = elect(cluster)
    offset = cluster.append(["x", "y"])
    assert offset is not None
    commit_everywhere(cluster, offset)
    cluster.kill(old)
    assert cluster.run_until(lambda: cluster.leader() not in (None, old), 10_000)
    new = cluster.leader()
    assert new is not None
    follow_up = cluster.append(["z"])
    assert follow_up is not None
    cluster.restart(old)
    commit_everywhere(cluster, follow_up)
    for node in cluster.nodes.values():
        assert node.committed == ["x", "y", "z"], node
    assert cluster.validate() == []


def test_restart_bounces_a_running_node(tmp_path: Path) -> None:
    """``restart`` of a running node is a kill then a start: a new incarnation over the same
    disk, logged as crashed then started, and as a healed kill."""
    log = tmp_path / "events.jsonl"
    cluster = Cluster(seed=9, voters=3, event_log=log)
    leader = elect(cluster)
    offset = cluster.append(["r"])
    assert offset is not None
    commit_everywhere(cluster, offset)
    follower = next(i for i in cluster.voter_ids if i != leader)
    node = cluster.node(follower)
    incarnation, end, client = node.incarnation, node.log_end_offset, node.client
    cluster.restart(follower)
    assert node.running and node.client is not client
    assert node.incarnation == incarnation + 2
    assert node.log_end_offset == end
    commit_everywhere(cluster, offset, [follower])
    assert node.committed == ["r"]
    cluster.close()
    kinds = [
        (e.kind, (e.details or {}).get("from_role"))
        for e in read_events(log)
        if e.node == follower or e.kind == "fault_healed"
    ]
    bounce = kinds[kinds.index(("state_changed", "crashed")) :]
    assert bounce[:2] == [("state_changed", "crashed"), ("node_started", None)]
    assert ("fault_healed", None) in bounce


def test_wipe_of_a_running_follower_restarts_it_empty_and_it_catches_up() -> None:
    cluster = Cluster(seed=7, voters=3)
    leader = elect(cluster)
    offset = cluster.append(["w"])
    assert offset is not None
    commit_everywhere(cluster, offset)
    follower = next(i for i in cluster.voter_ids if i != leader)
    node = cluster.node(follower)
    old_log, old_store = node.log, node.store
    cluster.wipe(follower)
    assert node.log is not old_log and node.store is not old_store
    assert node.running
    assert node.epoch == 0 and node.log_end_offset == 0
    commit_everywhere(cluster, offset, [follower])
    assert node.committed == ["w"]
    assert cluster.validate() == []


def test_wipe_of_a_stopped_node_leaves_it_stopped_with_an_empty_disk() -> None:
    cluster = Cluster(seed=7, voters=3)
    leader = elect(cluster)
    follower = next(i for i in cluster.voter_ids if i != leader)
    cluster.run_for(1_000)
    node = cluster.node(follower)
    assert node.log_end_offset > 0
    cluster.kill(follower)
    cluster.wipe(follower)
    assert not node.running and node.role == "Down"
    assert node.log_end_offset == 0 and node.store.read_election_state() is None
    assert node.epoch == 0
    assert [f.kind for f in cluster.faults] == ["kill", "wipe"]


# ---------------------------------------------------------------------------------------------
# Pause, resign, shutdown
# ---------------------------------------------------------------------------------------------
def test_a_paused_node_is_frozen_and_its_mail_waits() -> None:
    """A paused leader is not polled: its log and high watermark stand still while messages
    pile up in its queue, and the others elect a new leader."""
    cluster = Cluster(seed=6, voters=3)
    old = elect(cluster)
    cluster.start_workload(100)
    cluster.run_for(1_000)
    node = cluster.node(old)
    cluster.pause(old)
    assert node.paused and node.running
    frozen = (node.log_end_offset, node.high_watermark, node.role, node.epoch)
    assert cluster.run_until(
        lambda: any(n.role == "Leader" and n.epoch > frozen[3] for n in cluster.nodes.values()),
        10_000,
    )
    cluster.run_for(1_000)
    assert (node.log_end_offset, node.high_watermark, node.role, node.epoch) == frozen
    assert len(node.queue) > 0  # delivered, not handled
    cluster.pause(old)  # already paused: recorded, no effect
    assert [f.kind for f in cluster.faults] == ["pause", "pause"]
    assert node.paused


def test_a_resumed_node_handles_its_mail_and_rejoins() -> None:
    """After ``resume`` the old leader learns of the newer epoch, follows, and catches up."""
    cluster = Cluster(seed=6, voters=3)
    old = elect(cluster)
    cluster.start_workload(100)
    cluster.run_for(1_000)
    cluster.pause(old)
    assert cluster.run_until(lambda: cluster.leader() not in (None, old), 10_000)
    cluster.resume(old)
    assert not cluster.node(old).paused
    assert cluster.run_until(lambda: cluster.node(old).role == "Follower", 5_000)
    cluster.stop_workload()
    assert cluster.run_until(lambda: converged(cluster), 10_000)


def test_resign_hands_leadership_to_a_new_epoch() -> None:
    cluster = Cluster(seed=8, voters=3)
    assert cluster.resign() is None  # no leader yet: nothing to resign
    assert [(f.kind, f.targets) for f in cluster.faults] == [("resign", ())]
    leader = elect(cluster)
    epoch = cluster.node(leader).epoch
    assert cluster.resign() == leader
    assert cluster.faults[-1].kind == "resign" and cluster.faults[-1].targets == (leader,)
    assert cluster.run_until(
        lambda: (new := cluster.leader()) is not None and cluster.node(new).epoch > epoch,
        10_000,
    )
    assert cluster.node(leader).role in ("Follower", "Voted", "Unattached", "Resigned")
    assert cluster.validate() == []


def test_graceful_shutdown_of_the_leader_hands_over_without_loss(tmp_path: Path) -> None:
    """A leader shutting down resigns and tells the voters (EndQuorumEpoch): it stops long
    before its timeout, a new leader follows at once, and nothing it wrote is lost."""
    log = tmp_path / "events.jsonl"
    cluster = Cluster(seed=7, voters=3, event_log=log)
    leader = elect(cluster)
    cluster.start_workload(100)
    cluster.run_for(500)
    node = cluster.node(leader)
    asked_at = cluster.now_ms
    cluster.shutdown(leader, timeout_ms=5_000)
    assert cluster.run_until(lambda: not node.running, 5_000)
    assert cluster.now_ms - asked_at < 1_000  # an election timeout would take >= 1000
    assert node.role == "Down"
    assert node.log.last_flushed_offset == node.log_end_offset
    assert cluster.run_until(lambda: cluster.leader() not in (None, leader), 1_000)
    cluster.restart(leader)
    cluster.stop_workload()
    assert cluster.run_until(lambda: converged(cluster), 10_000)
    assert cluster.validate() == []
    cluster.close()
    ends = [e for e in events_of(log, "state_changed") if e.node == leader and e.role == "Down"]
    assert [e.details for e in ends] == [{"from_role": "shutdown"}]


def test_shutdown_without_a_successor_stops_at_its_timeout() -> None:
    """With both followers down no one can take over: the shutdown completes at its timeout
    (Kafka's graceful shutdown fails then), and the node stops."""
    cluster = Cluster(seed=7, voters=3)
    leader = elect(cluster)
    for i in cluster.voter_ids:
        if i != leader:
            cluster.kill(i)
    asked_at = cluster.now_ms
    cluster.shutdown(leader, timeout_ms=3_000)
    assert cluster.run_until(lambda: not cluster.node(leader).running, 10_000)
    assert cluster.now_ms - asked_at >= 3_000


# ---------------------------------------------------------------------------------------------
# The network, observers
# ---------------------------------------------------------------------------------------------
def test_a_lossy_network_still_converges() -> None:
    """20% loss, duplication and reordering slow the cluster down but break nothing; once the
    network is clean again every node converges."""
    cluster = Cluster(seed=9, voters=5, observers=2)
    cluster.set_network(drop=0.2, duplicate=0.1, reorder=0.1, latency_ms=(1, 20))
    assert cluster.network.default == LinkConfig((1, 20), 0.2, 0.1, 0.1)
    cluster.start_workload(100)
    cluster.run_for(10_000)
    cluster.stop_workload()
    cluster.set_network(drop=0.0, duplicate=0.0, reorder=0.0)
    assert cluster.run_until(lambda: converged(cluster), 30_000)
    assert cluster.node(1).counter_value > 0
    assert cluster.validate() == []


def test_observers_get_committed_data_but_never_lead(tmp_path: Path) -> None:
    """Observers replicate what the voters commit, even across leader changes, and never
    campaign: no observer is ever Prospective, Candidate or Leader."""
    log = tmp_path / "events.jsonl"
    cluster = Cluster(seed=10, voters=3, observers=2, event_log=log, message_events=False)
    elect(cluster)
    cluster.start_workload(100)
    for _ in range(3):
        cluster.run_for(1_500)
        leader = cluster.leader()
        if leader is not None:
            cluster.resign()
    cluster.isolate(1)
    cluster.run_for(3_000)
    cluster.heal()
    cluster.stop_workload()
    assert cluster.run_until(lambda: converged(cluster), 10_000)
    voter = cluster.node(cluster.leader() or 1)
    for observer in cluster.observer_ids:
        node = cluster.node(observer)
        # Since its last snapshot load (if any) it was handed what the voter was.
        assert node.counter_value == voter.counter_value
        assert node.committed and node.committed == voter.committed[-len(node.committed) :]
        assert not node.is_voter
    cluster.close()
    roles = {e.role for e in events_of(log, "state_changed") if e.node in cluster.observer_ids}
    assert roles.isdisjoint({"Prospective", "Candidate", "Leader"}), roles
    assert cluster.leader() in cluster.voter_ids


# ---------------------------------------------------------------------------------------------
# Determinism, shrinking support
# ---------------------------------------------------------------------------------------------
def _scripted_run(seed: int, path: Path | None = None) -> Cluster:
    cluster = Cluster(seed=seed, voters=3, observers=1, event_log=path)
    cluster.start_workload(100)
    cluster.run_for(2_000)
    cluster.set_network(drop=0.05, reorder=0.05)
    cluster.partition({1}, {2, 3})
    cluster.run_for(2_000)
    cluster.heal()
    cluster.restart(4)
    cluster.run_for(2_000)
    cluster.close()
    return cluster


def test_the_same_seed_and_calls_give_the_same_run_byte_for_byte(tmp_path: Path) -> None:
    first = _scripted_run(3, tmp_path / "a.jsonl")
    second = _scripted_run(3, tmp_path / "b.jsonl")
    assert first.digest == second.digest
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert first.events.count == second.events.count > 100


def test_different_seeds_give_different_runs() -> None:
    assert len({_scripted_run(seed).digest for seed in (1, 2, 3)}) == 3


def test_suppressed_faults_are_skipped_and_logged(tmp_path: Path) -> None:
    """Fault 0 (a kill) is suppressed: the node keeps running, the fault is recorded as
    suppressed and logged ``fault_suppressed``; later faults keep their indices and apply."""
    log = tmp_path / "events.jsonl"
    cluster = Cluster(seed=1, voters=3, suppress_faults={0}, event_log=log)
    leader = elect(cluster)
    follower = next(i for i in cluster.voter_ids if i != leader)
    cluster.kill(follower)
    assert cluster.node(follower).running
    cluster.isolate(follower)
    assert (leader, follower) in cluster.network.blocked
    assert [(f.index, f.kind, f.suppressed) for f in cluster.faults] == [
        (0, "kill", True),
        (1, "isolate", False),
    ]
    assert cluster.replay_command() == f"Cluster(seed={cluster.seed}, ...) with the same calls"
    cluster.close()
    suppressed = events_of(log, "fault_suppressed")
    injected = events_of(log, "fault_injected")
    assert [e.details for e in suppressed] == [
        {"fault": "kill", "index": 0, "targets": [follower]},
    ]
    assert [e.details for e in injected] == [
        {"fault": "isolate", "index": 1, "targets": [follower]},
    ]


def test_the_replay_command_of_a_scenario_names_its_seed_and_suppressed_faults() -> None:
    cluster = Cluster(seed=12, scenario="leader_failure", suppress_faults=[3, 1])
    assert cluster.replay_command() == (
        "kraft sim run --scenario leader_failure --seed 12 --suppress 1,3"
    )


# ---------------------------------------------------------------------------------------------
# Scheduling
# ---------------------------------------------------------------------------------------------
def test_call_at_and_every_run_at_their_simulated_times() -> None:
    cluster = Cluster(seed=1)
    seen: list[int] = []
    cluster.call_at(1_234, lambda: seen.append(cluster.now_ms))
    ticks: list[int] = []

    def tick() -> bool:
        ticks.append(cluster.now_ms)
        return len(ticks) < 5

    cluster.every((100, 200), tick)
    cluster.run_for(5_000)
    assert seen == [1_234]
    assert len(ticks) == 5
    gaps = [b - a for a, b in zip([0, *ticks], ticks, strict=False)]
    assert all(100 <= gap <= 200 for gap in gaps), gaps
    assert cluster.now_ms == 5_000


def test_run_until_returns_false_at_its_timeout() -> None:
    cluster = Cluster(seed=1)
    assert cluster.run_until(lambda: False, 700) is False
    assert cluster.now_ms == 700
    assert cluster.run_until(lambda: True, 0) is True


# ---------------------------------------------------------------------------------------------
# Misuse
# ---------------------------------------------------------------------------------------------
def test_unknown_node_ids_raise_simulation_error_and_change_nothing() -> None:
    cluster = Cluster(seed=1, voters=3)
    for call in (
        lambda: cluster.node(9),
        lambda: cluster.kill(9),
        lambda: cluster.restart(0),
        lambda: cluster.wipe(4),
        lambda: cluster.pause(9),
        lambda: cluster.resume(9),
        lambda: cluster.shutdown(9),
        lambda: cluster.isolate(9),
        lambda: cluster.partition({1}, {9}),
        lambda: cluster.block([1], [9]),
    ):
        with pytest.raises(SimulationError, match="no node"):
            call()
    assert cluster.faults == [] and cluster.network.blocked == set()


@pytest.mark.parametrize(
    "settings",
    [
        {"drop": 1.0},
        {"drop": -0.1},
        {"duplicate": 1.5},
        {"reorder": 2.0},
        {"latency_ms": (5, 1)},
        {"latency_ms": (-1, 3)},
    ],
)
def test_bad_network_settings_raise_config_error_before_anything_changes(
    settings: dict[str, Any],
) -> None:
    cluster = Cluster(seed=1)
    default = cluster.network.default
    with pytest.raises(ConfigError):
        cluster.set_network(**settings)
    assert cluster.faults == [] and cluster.network.default == default


@pytest.mark.parametrize(
    "make",
    [
        lambda: Cluster(voters=0),
        lambda: Cluster(voters=-1),
        lambda: Cluster(observers=-1),
        lambda: Cluster(network=LinkConfig(drop=1.0)),
        lambda: Cluster(voters=3, config=QuorumConfig(voters={7: Endpoint("h", 1)})),
    ],
)
def test_a_bad_cluster_shape_raises_config_error(make: Any) -> None:
    with pytest.raises(ConfigError):
        make()


def test_bad_run_arguments_raise_value_error() -> None:
    cluster = Cluster(seed=1)
    with pytest.raises(ValueError, match="negative timeout"):
        cluster.run_until(lambda: True, -1)
    with pytest.raises(ValueError, match="positive"):
        cluster.start_workload(0)


def test_a_config_keeps_its_timeouts_with_the_simulated_voters() -> None:
    config = QuorumConfig(
        voters={i: Endpoint("elsewhere", 9000 + i) for i in (1, 2, 3)},
        election_timeout_ms=300,
        fetch_timeout_ms=600,
    )
    cluster = Cluster(seed=1, voters=3, config=config)
    assert cluster.config.election_timeout_ms == 300
    assert sorted(cluster.config.voters) == [1, 2, 3]
    assert cluster.config.voters[1] != config.voters[1]  # the simulated endpoints
    elect(cluster, timeout_ms=2_000)


# ---------------------------------------------------------------------------------------------
# fetch_high_watermark_linger_ms: when followers hear of commits, never what is committed
# ---------------------------------------------------------------------------------------------
def linger_config() -> QuorumConfig:
    """Low-latency settings: no append linger, a 3 ms high watermark linger (the simulated
    voters' endpoints replace these)."""
    return QuorumConfig(
        voters={i: Endpoint("sim", 1) for i in (1, 2, 3)},
        fetch_high_watermark_linger_ms=3,
        append_linger_ms=0,
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_with_a_linger_the_quorum_survives_faults_and_converges(seed: int) -> None:
    config = linger_config()
    cluster = Cluster(seed, voters=3, observers=1, config=config)
    try:
        cluster.start_workload(200.0)
        first = elect(cluster)
        cluster.run_for(2_000)
        cluster.kill(first)
        assert cluster.run_until(lambda: cluster.leader() not in (None, first), 15_000), (
            "no new leader after the kill"
        )
        cluster.set_network(drop=0.05, duplicate=0.05, reorder=0.1)
        cluster.run_for(5_000)
        cluster.set_network(drop=0.0, duplicate=0.0, reorder=0.0)
        cluster.restart(first)
        cluster.run_for(3_000)
        cluster.stop_workload()
        assert cluster.run_until(lambda: converged(cluster), 30_000), list(cluster.nodes.values())
        assert cluster.validate() == []
        leader = cluster.leader()
        assert leader is not None and cluster.node(leader).high_watermark > 100
    finally:
        cluster.close()


def test_with_a_linger_an_idle_followers_high_watermark_arrives_within_the_linger() -> None:
    """Once the workload stops, every follower holds the leader's HW within a few ms (the
    linger plus a link's latency), not after the leader's fetch max wait (500 ms)."""
    config = linger_config()
    cluster = Cluster(7, voters=3, config=config)
    try:
        cluster.start_workload(100.0)
        elect(cluster)
        cluster.run_for(1_000)
        cluster.stop_workload()
        assert cluster.run_until(lambda: converged(cluster), 200), list(cluster.nodes.values())
    finally:
        cluster.close()
