"""Dynamic voters in the simulator (KIP-853, docs/simulation.md "Dynamic voters"): a
``kraft.version`` 1 cluster bootstraps its voters into the logs, grows and shrinks through the
admin client, the KIP-853 invariants catch a planted violation, and the reconfiguration
scenarios pass a sweep of 200 seeds."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from kraft.analysis.events import _DETAILS_DDL
from kraft.config import ConfigError
from kraft.log.memory import MemoryLog
from kraft.raft.states import ReplicaKey
from kraft.raft.voter_history import BOOTSTRAP_SNAPSHOT_ID, write_bootstrap_checkpoint
from kraft.raft.voter_set import VoterNode, VoterSet
from kraft.record.control import control_batch
from kraft.record.offsets import OffsetAndEpoch
from kraft.simulation import Cluster, InvariantViolationError, SimNode, read_events
from kraft.simulation.invariants import AVAILABILITY_MS
from kraft.simulation.scenario import run_scenario
from kraft.simulation.sweep import sweep
from kraft.simulation.voters import VoterChecks, snapshot_voters

SIMULATIONS = Path(__file__).resolve().parents[2] / "simulations"
RECONFIG_SCENARIOS = (
    "rolling_replacement",
    "remove_leader",
    "add_voter_during_partition",
    "grow_standalone_to_five",
    "change_during_failover",
)


def elected(cluster: Cluster) -> int:
    """The leader, once it committed the start of its epoch (it takes no change before)."""

    def committed_its_epoch() -> bool:
        leader = cluster.leader()
        return leader is not None and cluster.node(leader).high_watermark > 0

    assert cluster.run_until(committed_its_epoch, 10_000)
    leader = cluster.leader()
    assert leader is not None
    return leader


def answered(cluster: Cluster, count: int) -> None:
    assert cluster.run_until(lambda: len(cluster.voter_changes) >= count, 40_000)


def caught_up_observer(cluster: Cluster) -> int:
    """A new node, once it has fetched the leader's log up to the high watermark."""
    node_id = cluster.add_node()
    node = cluster.node(node_id)

    def caught_up() -> bool:
        leader = cluster.leader()
        return leader is not None and 0 < cluster.node(leader).high_watermark <= node.log_end_offset

    assert cluster.run_until(caught_up, 10_000)
    return node_id


# ---------------------------------------------------------------------------------------------
# Bootstrap
# ---------------------------------------------------------------------------------------------
def test_kraft_version_1_bootstraps_the_voters_into_their_logs() -> None:
    cluster = Cluster(seed=3, voters=3, observers=1, kraft_version=1)
    directories = {i: cluster.node(i).directory_id for i in cluster.nodes}
    assert all(isinstance(d, uuid.UUID) for d in directories.values())
    assert len(set(directories.values())) == 4
    for voter in (1, 2, 3):
        log = cluster.node(voter).log
        assert log.snapshot_ids() == [BOOTSTRAP_SNAPSHOT_ID]
        written = snapshot_voters(log, BOOTSTRAP_SNAPSHOT_ID)
        assert written is not None and written.keys == tuple(
            ReplicaKey(i, directories[i]) for i in (1, 2, 3)
        )
    assert cluster.node(4).log.snapshot_ids() == []
    assert all(cluster.node(i).bootstrap_servers for i in cluster.nodes)
    assert all(not cluster.node(i).client.config.voters for i in cluster.nodes)  # type: ignore[union-attr]
    elected(cluster)
    assert cluster.voter_ids == (1, 2, 3) and cluster.observer_ids == (4,)
    # The observer has no checkpoint: it learns kraft.version and the voters from the log,
    # where the first leader writes them (Kafka's appendStartOfEpochControlRecords).
    assert cluster.run_until(
        lambda: all(n.voter_ids == frozenset({1, 2, 3}) for n in cluster.nodes.values()), 5_000
    )
    assert cluster.node(4).client.kraft_version == 1  # type: ignore[union-attr]
    assert [cluster.node(i).is_voter for i in cluster.nodes] == [True, True, True, False]
    assert cluster.validate() == []


def test_directory_ids_come_from_the_seed_and_not_from_the_run() -> None:
    def directories(seed: int) -> list[uuid.UUID | None]:
        cluster = Cluster(seed=seed, voters=3, kraft_version=1)
        return [cluster.node(i).directory_id for i in cluster.nodes]

    assert directories(7) == directories(7) != directories(8)
    # Drawn aside from the run's random source: the election timers are those of kraft.version 0.
    static, dynamic = Cluster(seed=7, voters=3), Cluster(seed=7, voters=3, kraft_version=1)
    assert static.rand.random() == dynamic.rand.random()
    assert Cluster(seed=7, voters=3).node(1).directory_id is None


def test_a_wipe_formats_a_new_directory_id() -> None:
    cluster = Cluster(seed=3, voters=3, kraft_version=1)
    before = cluster.node(2).directory_id
    cluster.wipe(2)
    assert cluster.node(2).directory_id not in (None, before)
    assert cluster.node(2).log.snapshot_ids() == []


def test_an_unknown_kraft_version_is_refused() -> None:
    with pytest.raises(ConfigError, match="kraft_version"):
        Cluster(seed=1, kraft_version=2)


def test_a_standalone_node_elects_itself_and_commits() -> None:
    cluster = Cluster(seed=4, voters=1, kraft_version=1)
    assert elected(cluster) == 1
    offset = cluster.append(["x"])
    assert offset is not None
    assert cluster.run_until(lambda: cluster.node(1).high_watermark > offset, 5_000)
    assert cluster.node(1).committed == ["x"]


# ---------------------------------------------------------------------------------------------
# add_node, add_voter, remove_voter
# ---------------------------------------------------------------------------------------------
def test_add_voter_commits_and_the_answer_is_recorded_and_logged(tmp_path: Path) -> None:
    cluster = Cluster(seed=5, voters=3, kraft_version=1, event_log=tmp_path / "e.jsonl")
    leader = elected(cluster)
    cluster.start_workload(100)
    new = caught_up_observer(cluster)
    assert new == 4 and not cluster.node(new).is_voter
    assert cluster.add_voter(new)
    answered(cluster, 1)
    change = cluster.voter_changes[0]
    assert (change.kind, change.node_id, change.error, change.leader) == ("add", 4, "NONE", leader)
    assert change.sent_ms < change.time_ms == cluster.voter_changes[0].time_ms
    assert cluster.voter_ids == (1, 2, 3, 4)
    assert cluster.run_until(
        lambda: all(n.voter_ids == frozenset({1, 2, 3, 4}) for n in cluster.nodes.values()), 5_000
    )
    assert cluster.node(new).is_voter
    cluster.close()
    logged = [e for e in read_events(tmp_path / "e.jsonl") if e.kind.startswith("voter_change")]
    assert [(e.kind, e.node, e.peer, e.details) for e in logged] == [
        ("voter_change_requested", 4, leader, {"change": "add"}),
        ("voter_change_answered", 4, leader, {"change": "add", "error": "NONE"}),
    ]


def test_remove_voter_commits_and_the_node_becomes_an_observer() -> None:
    cluster = Cluster(seed=6, voters=3, kraft_version=1)
    leader = elected(cluster)
    follower = next(i for i in cluster.voter_ids if i != leader)
    assert cluster.remove_voter(follower)
    answered(cluster, 1)
    assert cluster.voter_changes[0].error == "NONE"
    assert cluster.voter_ids == tuple(sorted({1, 2, 3} - {follower}))
    assert follower in cluster.observer_ids
    assert cluster.run_until(lambda: not cluster.node(follower).is_voter, 5_000)
    assert cluster.validate() == []


@pytest.mark.parametrize(
    ("name", "seed"),
    [("rolling_replacement", 1), ("grow_standalone_to_five", 1), ("change_during_failover", 131)],
)
def test_the_seeds_that_found_core_bugs_pass(name: str, seed: int) -> None:
    """rolling_replacement 1: the leader removed itself and was shut down, and the others
    livelocked in its epoch (each Prospective dropped the endpoints of the leader it followed,
    which the voter set no longer names, and went back to following it whenever a peer named
    it). grow_standalone_to_five 1: a voter added from an empty disk never learned
    kraft.version 1 (the bootstrap checkpoint's) and raised when it came to lead.
    change_during_failover 131: the leader died with its addition of node 4 on the other
    voters but not on node 4, an observer that had fetched from it and so refused every
    pre-vote forever (KIP-996 refuses them only while the leader answered within a fetch
    timeout), and the voters, counting node 4, could not win."""
    result = run_scenario(name, seed, message_events=False, scenario_dir=SIMULATIONS)
    assert result.ok, result.report or result.expectations


def test_the_leader_refuses_a_duplicate_and_an_unknown_voter() -> None:
    cluster = Cluster(seed=7, voters=3, kraft_version=1)
    elected(cluster)
    assert cluster.add_voter(2)
    answered(cluster, 1)
    observer = cluster.add_node()
    assert cluster.remove_voter(observer)
    answered(cluster, 2)
    assert [c.error for c in cluster.voter_changes] == ["DUPLICATE_VOTER", "VOTER_NOT_FOUND"]
    assert cluster.voter_ids == (1, 2, 3)


def test_a_static_quorum_refuses_voter_changes() -> None:
    cluster = Cluster(seed=8, voters=3)
    elected(cluster)
    observer = caught_up_observer(cluster)
    assert cluster.add_voter(observer)
    answered(cluster, 1)
    assert cluster.voter_changes[0].error == "UNSUPPORTED_VERSION"
    assert cluster.voter_ids == (1, 2, 3)


def test_no_leader_no_request() -> None:
    cluster = Cluster(seed=9, voters=3, kraft_version=1)
    assert cluster.leader() is None
    assert not cluster.add_voter(1) and not cluster.remove_voter(1)
    assert cluster.voter_changes == []
    cluster.run_for(60_000)  # nothing was sent: no answer, not even the admin's timeout
    assert cluster.voter_changes == []


def test_an_answer_that_never_comes_times_out_at_the_admin() -> None:
    cluster = Cluster(seed=10, voters=3, kraft_version=1)
    leader = elected(cluster)
    observer = caught_up_observer(cluster)
    cluster.pause(leader)  # the request waits in its queue, unanswered
    assert cluster.add_voter(observer)
    answered(cluster, 1)
    change = cluster.voter_changes[0]
    assert change.error == "REQUEST_TIMED_OUT"
    assert change.time_ms - change.sent_ms == 30_000 + cluster.config.request_timeout_ms


def test_a_new_node_starts_from_the_leaders_snapshot_once_the_log_was_cleaned() -> None:
    cluster = Cluster(seed=11, voters=3, kraft_version=1)
    leader = elected(cluster)
    cluster.start_workload(200)
    assert cluster.run_until(lambda: cluster.node(leader).log.log_start_offset > 0, 30_000)
    new = cluster.add_node()
    node = cluster.node(new)
    assert cluster.run_until(lambda: node.log.log_start_offset > 0, 10_000)
    assert cluster.run_until(lambda: node.counter_value > 0, 10_000)
    assert cluster.validate() == []


# ---------------------------------------------------------------------------------------------
# The KIP-853 invariants catch what they are for
# ---------------------------------------------------------------------------------------------
def voter_node(node_id: int) -> VoterNode:
    return VoterNode(ReplicaKey(node_id, uuid.UUID(int=node_id)), (("CONTROLLER", "sim", node_id),))


def voters(*ids: int) -> VoterSet:
    return VoterSet({i: voter_node(i) for i in ids})


def planted(initial: VoterSet, *later: VoterSet, node_id: int = 1) -> tuple[VoterChecks, SimNode]:
    """A node whose log starts from the bootstrap checkpoint ``initial`` and holds ``later``,
    one record each (epoch 1), every record committed; and the checks over it."""
    node = SimNode(node_id, initial.ids, directory_id=uuid.UUID(int=node_id))
    write_bootstrap_checkpoint(node.log, 1, initial, timestamp_ms=0)
    append(node.log, *later)
    return VoterChecks({node_id: node}, initial), node


def append(log: MemoryLog, *sets: VoterSet) -> None:
    for voter_set in sets:
        log.append_encoded(
            control_batch(log.log_end_offset, 1, [voter_set.to_record()], timestamp_ms=0)
        )
    log.update_high_watermark(log.log_end_offset)


def found(checks: VoterChecks, *nodes: SimNode) -> list[str]:
    problems: list[tuple[str, tuple[int, ...], str]] = []
    for node in nodes:
        checks.check_node(node, problems)
    return [name for name, _, _ in problems]


def test_a_record_that_changes_two_voters_breaks_voters_differ_by_one() -> None:
    checks, node = planted(voters(1, 2, 3), voters(1, 2, 3, 4))
    assert found(checks, node) == []
    append(node.log, voters(1, 2, 5))  # 3 and 4 gone, 5 in: three changes at once
    assert found(checks, node) == ["voters_differ_by_one"]


def test_one_change_at_a_time_passes_and_commits_the_latest_set() -> None:
    checks, node = planted(voters(1, 2, 3), voters(1, 2, 3, 4), voters(1, 2, 4))
    assert found(checks, node) == []
    assert checks.latest == voters(1, 2, 4)
    assert checks.committed_offsets == [-1, 0, 1]


def test_two_sets_committed_at_one_offset_break_voters_durable() -> None:
    checks, first = planted(voters(1, 2, 3), voters(1, 2, 3, 4))
    other = SimNode(2, frozenset({1, 2, 3}), directory_id=uuid.UUID(int=2))
    write_bootstrap_checkpoint(other.log, 1, voters(1, 2, 3), timestamp_ms=0)
    append(other.log, voters(1, 2))
    checks.nodes = {1: first, 2: other}
    assert set(found(checks, first, other)) == {"voters_durable"}


def test_a_snapshot_without_the_committed_set_breaks_voters_durable() -> None:
    checks, node = planted(voters(1, 2, 3), voters(1, 2, 3, 4))
    assert found(checks, node) == []
    lagging = SimNode(5, frozenset({1, 2, 3}), directory_id=uuid.UUID(int=5))
    # A snapshot past the committed change that still names the bootstrap voters.
    raw = lagging.log.create_new_snapshot_unchecked(OffsetAndEpoch(1, 1))
    assert raw is not None
    scratch = MemoryLog()
    write_bootstrap_checkpoint(scratch, 1, voters(1, 2, 3), timestamp_ms=0)
    bootstrap = scratch.read_snapshot(BOOTSTRAP_SNAPSHOT_ID)
    assert bootstrap is not None
    raw.append(bootstrap.read(0, bootstrap.size_in_bytes))
    raw.freeze()
    assert lagging.log.truncate_to_latest_snapshot()  # as a follower installs a download
    assert set(found(checks, lagging)) == {"voters_durable"}


def test_two_uncommitted_sets_in_the_leaders_log_break_voters_one_uncommitted() -> None:
    checks, node = planted(voters(1, 2, 3))
    node.log.append_encoded(control_batch(0, 1, [voters(1, 2, 3, 4).to_record()], timestamp_ms=0))
    node.log.append_encoded(control_batch(1, 1, [voters(1, 2, 4).to_record()], timestamp_ms=0))
    problems: list[tuple[str, tuple[int, ...], str]] = []
    checks.check_node(node, problems)
    checks.check_leader(node, problems)
    assert [name for name, _, _ in problems] == ["voters_one_uncommitted"]


def test_a_removed_voter_that_leads_breaks_removed_never_leads() -> None:
    checks, node = planted(voters(1, 2, 3), voters(2, 3))
    assert found(checks, node) == []
    problems: list[tuple[str, tuple[int, ...], str]] = []
    checks.became_leader(node, problems)
    assert [name for name, _, _ in problems] == ["removed_never_leads"]
    kept, voter = planted(voters(1, 2, 3), voters(1, 3), node_id=3)
    problems = []
    found(kept, voter)
    kept.became_leader(voter, problems)
    assert problems == []


def test_availability_catches_an_electable_quorum_that_commits_nothing() -> None:
    """kraft.version 1: the leader's state machine stops appending; a leader could be (and
    is) elected, the workload runs, nothing commits."""
    cluster = Cluster(seed=12, voters=3, kraft_version=1)
    elected(cluster)
    cluster.start_workload(100)
    cluster.run_for(1_000)
    leader = cluster.node(cluster.leader() or 0)
    assert leader.counter is not None
    leader.counter.writable_epoch = -1
    with pytest.raises(InvariantViolationError) as caught:
        cluster.run_for(AVAILABILITY_MS + 5_000)
    assert caught.value.violation.invariant == "availability"


def test_availability_asks_nothing_while_no_leader_can_be_elected() -> None:
    """kraft.version 1: three voters cut off from one another for longer than the bound; no
    node has a majority that would vote for it, so no commit is owed."""
    cluster = Cluster(seed=13, voters=3, kraft_version=1)
    elected(cluster)
    cluster.start_workload(100)
    cluster.partition({1}, {2}, {3})
    cluster.run_for(AVAILABILITY_MS + 10_000)
    cluster.heal()
    cluster.run_for(10_000)
    assert cluster.validate() == []


def test_a_reconfiguration_seed_replays_byte_for_byte(tmp_path: Path) -> None:
    """New nodes, directory ids, admin requests and answers: all from the seed."""
    first = run_scenario("rolling_replacement", 3, tmp_path / "a", scenario_dir=SIMULATIONS)
    second = run_scenario("rolling_replacement", 3, tmp_path / "b", scenario_dir=SIMULATIONS)
    assert first.ok and first.digest == second.digest
    assert (tmp_path / "a" / "events.jsonl").read_bytes() == (
        tmp_path / "b" / "events.jsonl"
    ).read_bytes()
    assert run_scenario("rolling_replacement", 4, scenario_dir=SIMULATIONS).digest != first.digest


def test_the_catalogue_event_details_are_in_the_analysis_schema(tmp_path: Path) -> None:
    assert run_scenario("remove_leader", 1, tmp_path / "run", scenario_dir=SIMULATIONS).ok
    keys = {
        key
        for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()
        if (event := json.loads(line))["kind"].startswith(("voter_change", "run_started"))
        for key in event.get("details", {})
    }
    assert {"change", "error", "kraft_version"} <= keys
    assert all(f"{key}:" in _DETAILS_DDL or f"`{key}`:" in _DETAILS_DDL for key in keys)


# ---------------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------------
#: Seeds per reconfiguration scenario in ``make test``: 5 x 40 = 200 runs.
SWEEP_SEEDS = range(1, 41)


def test_the_reconfiguration_sweep_has_no_violation(tmp_path: Path) -> None:
    """200 seeds over the reconfiguration scenarios, two worker processes, as ``kraft sim sweep
    --scenario rolling_replacement,... --seeds 1-40`` runs them: no violation, no failed
    expectation, no error."""
    started = time.perf_counter()
    summary = sweep(
        RECONFIG_SCENARIOS,
        SWEEP_SEEDS,
        tmp_path,
        jobs=2,
        scenario_dir=SIMULATIONS,
        message_events=False,
        keep_passing=False,
    )
    elapsed = time.perf_counter() - started
    assert summary.total.runs == len(RECONFIG_SCENARIOS) * len(SWEEP_SEEDS) >= 200
    failures = [
        f"{run.scenario} seed {run.seed}: {run.error or ', '.join(run.failure_kinds)} "
        f"(kraft sim run --scenario {run.scenario} --seed {run.seed} --no-message-events)"
        for run in summary.failed
    ]
    assert not failures, "\n".join(failures)
    assert summary.total.violations == 0
    print(
        f"reconfiguration sweep: {summary.total.runs} runs, {summary.total.events} events, "
        f"{summary.total.simulated_s:.0f} s simulated, {elapsed:.1f} s wall"
    )
