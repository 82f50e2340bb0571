"""Each invariant catches a deliberate corruption of the real objects (a node's ``MemoryLog``,
its ``MemoryQuorumStateStore``, its listener), and the report of a violation says how to
replay it. No mocks: the corruption is what a bug in the client or a broken disk would do."""

from __future__ import annotations

from typing import Any

import pytest

from kraft.log.quorum_state import ElectionState
from kraft.raft.listeners import BatchReader, Listener
from kraft.simulation import (
    INVARIANTS,
    Cluster,
    CounterIncrement,
    InvariantViolationError,
    SimSerde,
    Violation,
)


def committed_cluster(seed: int = 11, **kwargs: Any) -> Cluster:
    """Three voters with a leader and two batches committed everywhere."""
    cluster = Cluster(seed=seed, voters=3, **kwargs)
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    first = cluster.append(["a", "b"])
    assert first is not None
    assert cluster.run_until(
        lambda: all(n.high_watermark > first for n in cluster.nodes.values()), 5_000
    )
    second = cluster.append(["c"])
    assert second is not None
    assert cluster.run_until(
        lambda: all(n.high_watermark > second for n in cluster.nodes.values()), 5_000
    )
    return cluster


def leader_and_followers(cluster: Cluster) -> tuple[int, list[int]]:
    leader = cluster.leader()
    assert leader is not None
    return leader, [i for i in cluster.voter_ids if i != leader]


def violation_of(cluster: Cluster, run_ms: int = 3_000) -> InvariantViolationError:
    """Run ``cluster`` (which stops on a violation) until the violation; the error."""
    with pytest.raises(InvariantViolationError) as caught:
        cluster.run_for(run_ms)
        cluster.validate()
    return caught.value


def names(violations: list[Violation]) -> list[str]:
    return [v.invariant for v in violations]


# ---------------------------------------------------------------------------------------------
# One corruption per invariant
# ---------------------------------------------------------------------------------------------
def test_committed_data_catches_a_rewritten_committed_batch() -> None:
    """A follower's disk changes the records of a committed batch, keeping its offsets and
    epoch (so Raft's log matching cannot see it). Once the restarted follower's high watermark
    passes the batch again, the CRC differs from the committed one."""
    cluster = committed_cluster()
    _, (follower, _) = leader_and_followers(cluster)
    node = cluster.node(follower)
    last_batch = node.log.batches_between(0, node.high_watermark)[-1]
    base, last = last_batch.base_offset, last_batch.last_offset
    epoch = node.log.batches()[-1].partition_leader_epoch
    assert base < node.high_watermark  # committed on this node
    cluster.kill(follower)
    node.log.truncate_to(base)
    serde = SimSerde()
    node.log.append_as_leader(
        [serde.encode(f"forged-{i}") for i in range(last - base + 1)],
        epoch,
        timestamp_ms=0,
    )
    node.log.flush()
    forged = node.log.batches_between(base, base + 1)[0]
    assert (forged.base_offset, forged.last_offset) == (base, last)
    cluster.restart(follower)
    failure = violation_of(cluster)
    assert failure.violation.invariant == "committed_data"
    assert failure.violation.nodes == (follower,)
    assert f"batch {base}..{last} epoch {epoch}" in failure.violation.message


def test_monotonic_epoch_catches_a_lower_persisted_epoch() -> None:
    cluster = committed_cluster()
    _, (follower, _) = leader_and_followers(cluster)
    node = cluster.node(follower)
    epoch = node.epoch
    assert epoch >= 1
    node.store.write_election_state(ElectionState(epoch - 1))
    failure = violation_of(cluster)
    assert failure.violation.invariant == "monotonic_epoch"
    assert failure.violation.nodes == (follower,)
    assert f"persisted epoch {epoch - 1} after {epoch}" in failure.violation.message


def test_single_leader_catches_two_leaders_in_one_epoch() -> None:
    """A follower's store records itself as the leader of the leader's epoch."""
    cluster = committed_cluster()
    leader, (follower, _) = leader_and_followers(cluster)
    epoch = cluster.node(leader).epoch
    cluster.node(follower).store.write_election_state(ElectionState(epoch, leader_id=follower))
    failure = violation_of(cluster)
    assert failure.violation.invariant == "single_leader"
    assert set(failure.violation.nodes) == {leader, follower}
    assert f"epoch {epoch} has two leaders" in failure.violation.message


def test_monotonic_high_watermark_catches_a_lowered_high_watermark() -> None:
    """A running follower's log forgets its high watermark (``MemoryLog.crash`` under a live
    client: the HW is reset to 0)."""
    cluster = committed_cluster()
    _, (follower, _) = leader_and_followers(cluster)
    node = cluster.node(follower)
    before = node.high_watermark
    assert before > 0
    node.log.crash()
    failure = violation_of(cluster)
    assert failure.violation.invariant == "monotonic_high_watermark"
    assert failure.violation.nodes == (follower,)
    assert f"went from {before} to 0" in failure.violation.message


def test_majority_high_watermark_catches_a_majority_losing_committed_records() -> None:
    """Both followers go down and their disks lose everything after the first batch: the
    leader's high watermark is now held by one voter of three."""
    cluster = committed_cluster()
    leader, followers = leader_and_followers(cluster)
    high_watermark = cluster.node(leader).high_watermark
    for follower in followers:
        cluster.kill(follower)
        cluster.node(follower).log.truncate_to(1)
    failure = violation_of(cluster)
    assert failure.violation.invariant == "majority_high_watermark"
    assert failure.violation.nodes == (leader,)
    assert f"high watermark {high_watermark}, but only 1 of 3 voters" in (failure.violation.message)


def test_leader_completeness_and_durability_catch_a_leader_missing_committed_batches() -> None:
    """Every node goes down; two lose their log after the first batch and come back: one of
    them is elected without the committed batches (and the last leader's log lacks them at
    the end: durability)."""
    cluster = committed_cluster(stop_on_violation=False)
    leader, followers = leader_and_followers(cluster)
    committed_base = cluster.node(leader).log.batches_between(1, 2)[0].base_offset
    for node_id in cluster.voter_ids:
        cluster.kill(node_id)
    for follower in followers:
        cluster.node(follower).log.truncate_to(1)
        cluster.restart(follower)
    assert cluster.run_until(lambda: cluster.leader() in followers, 10_000)
    new_leader = cluster.leader()
    cluster.run_for(1_000)
    found = cluster.validate()
    completeness = [v for v in found if v.invariant == "leader_completeness"]
    assert completeness, found
    assert completeness[0].nodes == (new_leader,)
    assert f"without committed batches [{committed_base}" in completeness[0].message
    assert "durability" in names(found)


def test_counter_catches_a_non_consecutive_increment() -> None:
    """The counter is at 0; a batch commits "the counter is now 5"."""
    cluster = committed_cluster()
    leader, _ = leader_and_followers(cluster)
    assert cluster.node(leader).counter_value == 0
    assert cluster.append([CounterIncrement(5)]) is not None
    failure = violation_of(cluster)
    assert failure.violation.invariant == "counter"
    assert "counter increment 5" in failure.violation.message and "after value 0" in (
        failure.violation.message
    )


class _FailingListener(Listener[Any]):
    """A listener that raises on its first commit (a state machine bug)."""

    def handle_commit(self, reader: BatchReader[Any]) -> None:
        reader.close()
        raise RuntimeError("the state machine broke")


def test_no_exception_catches_a_client_raising_out_of_poll() -> None:
    """The exception is a violation, and the node is taken down as a crash would."""
    cluster = committed_cluster()
    _, (follower, _) = leader_and_followers(cluster)
    node = cluster.node(follower)
    assert node.client is not None
    node.client.register(_FailingListener())
    failure = violation_of(cluster)
    assert failure.violation.invariant == "no_exception"
    assert "RuntimeError: the state machine broke" in failure.violation.message
    assert not node.running


# ---------------------------------------------------------------------------------------------
# Reports, recording, the invariant list
# ---------------------------------------------------------------------------------------------
def test_the_report_names_seed_invariant_replay_command_and_recent_events() -> None:
    cluster = committed_cluster(seed=23, scenario="corrupted_store")
    leader, (follower, _) = leader_and_followers(cluster)
    epoch = cluster.node(leader).epoch
    cluster.node(follower).store.write_election_state(ElectionState(epoch, leader_id=follower))
    failure = violation_of(cluster)
    report = failure.report
    assert str(failure) == report
    lines = report.splitlines()
    assert lines[0].startswith("invariant single_leader violated at ")
    assert "(seed 23, scenario corrupted_store)" in lines[0]
    assert f"nodes involved: {leader}, {follower}" in report  # the known leader first
    assert "  replay: kraft sim run --scenario corrupted_store --seed 23" in lines
    assert any("SimNode(" in line for line in lines)  # the cluster's nodes
    recent = lines[lines.index(next(x for x in lines if "the last" in x)) + 1 : -1]
    assert len(recent) == len(cluster.events.recent) > 10
    assert any("invariant_violated" in line for line in recent)
    assert any("FetchRequest" in line for line in recent)


def test_an_adhoc_report_says_how_to_rebuild_the_run() -> None:
    cluster = committed_cluster(seed=5)
    _, (follower, _) = leader_and_followers(cluster)
    # A store that forgets the epoch (a follower's lowered log high watermark is no longer a
    # violation to provoke: it follows the leader's again at the next Fetch, docs/protocol.md
    # §1.14).
    cluster.node(follower).store.write_election_state(ElectionState(0))
    report = violation_of(cluster).report
    assert "(seed 5, scenario adhoc)" in report
    assert report.splitlines()[-1] == "  replay: Cluster(seed=5, ...) with the same calls"


def test_without_stop_on_violation_violations_are_recorded_and_the_run_goes_on() -> None:
    cluster = committed_cluster(stop_on_violation=False)
    _, (follower, _) = leader_and_followers(cluster)
    cluster.node(follower).store.write_election_state(ElectionState(0))
    cluster.run_for(3_000)
    assert cluster.violations and set(names(cluster.violations)) == {"monotonic_epoch"}
    assert cluster.now_ms >= 3_000
    assert cluster.validate() == cluster.violations


def test_a_clean_run_has_no_violation_and_counts_its_checks() -> None:
    cluster = committed_cluster()
    cluster.start_workload(100)
    cluster.run_for(3_000)
    assert cluster.validate() == []
    assert cluster.checker.checks > 100


def test_every_reported_invariant_is_in_the_list() -> None:
    """The names tests and the event log use are the ones ``INVARIANTS`` publishes."""
    reported = {
        "single_leader",
        "monotonic_epoch",
        "monotonic_high_watermark",
        "majority_high_watermark",
        "committed_data",
        "leader_completeness",
        "durability",
        "counter",
        "no_exception",
    }
    assert reported <= set(INVARIANTS)


def test_violation_text_names_time_invariant_and_nodes() -> None:
    assert str(Violation(1500, "single_leader", (1, 2), "two")) == (
        "[1500 ms] single_leader (nodes 1,2): two"
    )
    assert str(Violation(0, "durability", (), "x")) == "[0 ms] durability (nodes -): x"
