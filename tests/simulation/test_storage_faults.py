"""Storage faults (docs/simulation.md, "Storage faults"): each fault op takes effect on the
node's disk, is a registered, logged fault, and draws its defaults from the cluster's seeded
random source; the invariants made for them catch a planted violation; and the storage-fault
scenarios pass a sweep of 200 seeds."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kraft.errors import CorruptRecordError
from kraft.log.api import Isolation
from kraft.record.typed import Batch
from kraft.simulation import Cluster, InvariantViolationError, SimSerde, read_events
from kraft.simulation.invariants import AVAILABILITY_MS
from kraft.simulation.sweep import sweep
from kraft.snapshot.reader import SnapshotReader

SIMULATIONS = Path(__file__).resolve().parents[2] / "simulations"
STORAGE_SCENARIOS = ("bitrot", "lost_writes", "misdirected_writes", "corrupt_snapshots")


def committed(seed: int = 11, **kwargs: Any) -> Cluster:
    """Three voters, a leader, and ten batches committed on every node."""
    cluster = Cluster(seed=seed, voters=3, **kwargs)
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    for i in range(10):
        assert cluster.append([f"r{i}"]) is not None
        cluster.run_for(20)
    end = cluster.node(cluster.leader() or 0).log_end_offset
    assert cluster.run_until(
        lambda: all(n.high_watermark >= end for n in cluster.nodes.values()), 5_000
    )
    return cluster


def follower_of(cluster: Cluster) -> int:
    leader = cluster.leader()
    return next(i for i in cluster.voter_ids if i != leader)


def injected(cluster: Cluster, kind: str) -> list[dict[str, Any]]:
    """The details of the ``fault_injected`` events of ``kind`` still in the recent events."""
    return [
        e.details
        for e in cluster.events.recent
        if e.kind == "fault_injected" and e.details is not None and e.details["fault"] == kind
    ]


# ---------------------------------------------------------------------------------------------
# The fault operations
# ---------------------------------------------------------------------------------------------
def test_corrupt_flips_the_bits_asked_for_and_a_read_finds_them() -> None:
    cluster = committed()
    node = cluster.node(follower_of(cluster))
    base, last, batch = node.log.held_batches(3, 4)[0]
    assert batch is not None
    before = bytes(batch.buffer)
    assert cluster.corrupt(node.node_id, offset=3, position=30, mask=0x10) == 3
    after = node.log.held_batches(3, 4)[0]
    assert after[:2] == (base, last) and after[2] is None
    assert [f.kind for f in cluster.faults] == ["corrupt"]
    assert injected(cluster, "corrupt") == [
        {
            "fault": "corrupt",
            "index": 0,
            "targets": [node.node_id],
            "offset": 3,
            "position": 30,
            "mask": 0x10,
        }
    ]
    with pytest.raises(CorruptRecordError) as caught:
        node.log.read(base, Isolation.UNCOMMITTED)
    assert caught.value.offset == base
    # Exactly that bit: flipping it back gives the batch again.
    cluster.corrupt(node.node_id, offset=3, position=30, mask=0x10)
    again = node.log.held_batches(3, 4)[0][2]
    assert again is not None and bytes(again.buffer) == before


def test_corrupt_defaults_come_from_the_seed() -> None:
    def choices(seed: int) -> tuple[list[tuple[Any, ...]], str]:
        cluster = committed(seed)
        picks = []
        for _ in range(20):
            offset = cluster.corrupt(1)
            details = injected(cluster, "corrupt")[-1]
            picks.append((offset, details["position"], details["mask"]))
        cluster.run_for(500)
        return picks, cluster.digest

    first, digest = choices(5)
    assert choices(5) == (first, digest)
    assert choices(6)[0] != first
    assert all(bin(mask).count("1") == 1 for _, _, mask in first)


def test_corrupt_on_an_empty_log_changes_nothing_and_a_bad_offset_is_refused() -> None:
    cluster = Cluster(seed=3, voters=1)
    assert cluster.corrupt(1) is None
    assert injected(cluster, "corrupt")[-1]["offset"] is None
    assert cluster.run_until(lambda: cluster.leader() is not None, 5_000)
    cluster.append(["x"])
    cluster.run_for(100)
    faults = len(cluster.faults)
    with pytest.raises(ValueError, match="not 99"):
        cluster.corrupt(1, offset=99)
    with pytest.raises(ValueError, match="not 99"):
        cluster.misdirect_next_append(1, 99)
    assert len(cluster.faults) == faults


def test_a_suppressed_storage_fault_does_nothing() -> None:
    cluster = committed(suppress_faults=[0])
    node = cluster.node(follower_of(cluster))
    cluster.corrupt(node.node_id, offset=2)
    assert all(batch is not None for _, _, batch in node.log.held_batches(0, 20))
    assert cluster.faults[0].suppressed


def test_a_corrupt_batch_is_set_aside_at_restart_and_fetched_back() -> None:
    """Recovery finds the flipped batch, sets it and what follows aside, raises the repair
    target; the follower fetches it all back from the leader and is whole again."""
    cluster = committed()
    follower = follower_of(cluster)
    node = cluster.node(follower)
    end = node.log_end_offset
    cluster.corrupt(follower, offset=4)
    cluster.restart(follower)
    assert node.log.log_end_offset <= 4 and node.log.set_aside
    assert node.log.repair_target is not None and node.log.repair_target.offset == end
    assert cluster.run_until(lambda: node.log.repair_target is None, 10_000)
    assert all(batch is not None for _, _, batch in node.log.held_batches(0, end))


def test_a_flip_in_the_epoch_no_crc_covers_is_caught_by_the_epoch_cache() -> None:
    """Bytes 12-15 of a batch, its partition leader epoch, are outside Kafka's batch CRC (a
    leader rewrites them): the log compares them with its epoch cache."""
    cluster = committed()
    node = cluster.node(follower_of(cluster))
    cluster.corrupt(node.node_id, offset=3, position=15, mask=0x02)
    base, _, batch = node.log.held_batches(3, 4)[0]
    assert batch is None
    with pytest.raises(CorruptRecordError):
        node.log.read(base)


def test_corrupt_snapshot_is_caught_by_the_reader_and_set_aside_at_restart() -> None:
    cluster = committed(snapshot_every=3)
    follower = follower_of(cluster)
    log = cluster.node(follower).log
    ids = log.snapshot_ids()
    assert ids
    snapshot_id = cluster.corrupt_snapshot(follower, ids[-1], position=70, mask=0x04)
    assert snapshot_id == ids[-1]
    assert injected(cluster, "corrupt_snapshot")[-1] == {
        "fault": "corrupt_snapshot",
        "index": 0,
        "targets": [follower],
        "snapshot_offset": snapshot_id.offset,
        "snapshot_epoch": snapshot_id.epoch,
        "position": 70,
        "mask": 0x04,
    }
    raw = log.read_snapshot(snapshot_id)
    assert raw is not None
    with pytest.raises(CorruptRecordError):
        SnapshotReader(raw, SimSerde(), owns_raw=True)
    cluster.restart(follower)
    assert snapshot_id not in log.snapshot_ids()
    assert log.set_aside


def test_corrupt_snapshot_defaults_come_from_the_seed() -> None:
    def pick(seed: int) -> tuple[Any, ...]:
        cluster = committed(seed, snapshot_every=2)
        snapshot_id = cluster.corrupt_snapshot(1)
        details = injected(cluster, "corrupt_snapshot")[-1]
        return snapshot_id, details["position"], details["mask"], cluster.digest

    assert pick(8) == pick(8)
    assert Cluster(seed=1, voters=1).corrupt_snapshot(1) is None


def test_a_lost_flush_then_a_crash_loses_the_tail_and_the_log_knows() -> None:
    cluster = committed()
    leader = cluster.leader()
    assert leader is not None
    node = cluster.node(leader)
    cluster.lose_next_flush(leader)
    end = cluster.append(["lost"])
    assert end is not None
    # The leader appends and "flushes" (it flushes each append as it writes it).
    assert cluster.run_until(lambda: node.log.log_end_offset == end + 1, 1_000)
    cluster.kill(leader)
    assert node.log.log_end_offset <= end
    assert node.log.repair_target is not None and node.log.repair_target.offset == end + 1
    assert [f.kind for f in cluster.faults] == ["lose_next_flush", "kill"]


def test_a_misdirected_append_overwrites_an_older_batch_and_leaves_a_blank() -> None:
    # Without the client's reaction the listener would raise on the blank: no stopping.
    cluster = committed(stop_on_violation=False)
    follower = follower_of(cluster)
    node = cluster.node(follower)
    onto = node.log.held_batches(2, 3)[0][0]
    cluster.misdirect_next_append(follower, 2)
    assert injected(cluster, "misdirect_next_append")[-1]["onto_offset"] == 2
    before = node.log_end_offset
    cluster.append(["next"])
    assert cluster.run_until(lambda: node.log.log_end_offset > before, 1_000)
    bad = [base for base, _, batch in node.log.held_batches(0, before + 1) if not batch]
    assert bad == [onto, before]


# ---------------------------------------------------------------------------------------------
# The invariants for storage faults
# ---------------------------------------------------------------------------------------------
def test_committed_intact_catches_a_batch_corrupt_on_every_voter() -> None:
    cluster = committed(snapshot_every=None)
    for voter in cluster.voter_ids:
        cluster.corrupt(voter, offset=5)
    with pytest.raises(InvariantViolationError) as caught:
        cluster.run_for(1_000)  # seen at the next event (followers wait on long fetches)
    assert caught.value.violation.invariant == "committed_intact"
    assert "held intact by no voter" in caught.value.violation.message


def test_committed_intact_catches_a_batch_past_the_snapshots_corrupt_on_every_voter() -> None:
    """With snapshots, the rescan looks only past every voter's latest snapshot: a batch there
    corrupt on every voter is still found."""
    cluster = committed(snapshot_every=4)
    for record in ("past", "the snapshots"):
        assert cluster.append([record]) is not None
        cluster.run_for(20)
    end = cluster.node(cluster.leader() or 0).log_end_offset
    assert cluster.run_until(
        lambda: all(n.high_watermark >= end for n in cluster.nodes.values()), 5_000
    )
    covered = max(
        (ids[-1].offset for v in cluster.voter_ids if (ids := cluster.node(v).log.snapshot_ids())),
        default=0,
    )
    leader_log = cluster.node(cluster.leader() or 0).log
    past = [base for base, _, _ in leader_log.held_batches(covered, leader_log.high_watermark)]
    assert covered > 0 and past and past[-1] >= covered
    for voter in cluster.voter_ids:
        cluster.corrupt(voter, offset=past[-1])
    with pytest.raises(InvariantViolationError) as caught:
        cluster.run_for(1_000)
    assert caught.value.violation.invariant == "committed_intact"
    assert str(past[-1]) in caught.value.violation.message


def test_committed_intact_is_content_with_one_intact_copy_until_the_end() -> None:
    """Two of three voters hold a committed batch corrupt (never read): no violation while
    one copy remains, and at the end, with no voter under repair, too few copies are one."""
    cluster = committed(snapshot_every=None)
    leader = cluster.leader()
    for voter in [v for v in cluster.voter_ids if v != leader]:
        cluster.corrupt(voter, offset=5)
    cluster.run_for(500)
    with pytest.raises(InvariantViolationError) as caught:
        cluster.validate()
    assert caught.value.violation.invariant == "committed_intact"
    assert "fewer than 2 voters at the end" in caught.value.violation.message


def test_a_follower_under_repair_breaks_no_invariant() -> None:
    """A follower sets committed batches aside (its high watermark falls, its log ends below
    the leader's high watermark): no invariant minds, and it fetches them back."""
    cluster = committed()
    follower = follower_of(cluster)
    node = cluster.node(follower)
    target = node.log.quarantine_from(3, "a test")
    assert node.log.repair_target == target and node.log.high_watermark == 3
    cluster.start_workload(50)
    assert cluster.run_until(lambda: node.log.repair_target is None, 3_000)
    cluster.run_for(1_000)
    assert cluster.validate() == []


def test_a_voter_under_repair_counts_towards_the_majority_up_to_its_repair_target() -> None:
    """One follower down with a wiped disk, the other sets committed batches aside: only the
    leader's log reaches the high watermark, but the follower under repair votes for no log
    behind its repair target, so the majority that committed those batches still stands."""
    cluster = committed()
    down, repairing = [i for i in cluster.voter_ids if i != cluster.leader()]
    cluster.kill(down)
    cluster.wipe(down)
    log = cluster.node(repairing).log
    log.quarantine_from(3, "a test")
    assert log.log_end_offset < cluster.node(cluster.leader() or 0).high_watermark
    cluster.run_for(2_000)
    assert log.repair_target is None
    cluster.restart(down)
    cluster.run_for(2_000)
    assert cluster.validate() == []


def test_listener_data_catches_other_records_at_a_committed_offset() -> None:
    cluster = committed()
    follower = follower_of(cluster)
    counter = cluster.node(follower).counter
    assert counter is not None
    cluster.run_for(100)
    base = max(cluster.checker.deliveries)
    first = cluster.checker.deliveries[base]
    # What a listener handed other bytes at a committed offset would see.
    cluster.checker.on_commit(follower, Batch(base, first[0], first[1], 0, 0, ["forged"]))
    with pytest.raises(InvariantViolationError) as caught:
        cluster.run_for(1_000)
    assert caught.value.violation.invariant == "listener_data"
    assert "forged" in caught.value.violation.message


def test_availability_catches_a_healthy_majority_that_commits_nothing() -> None:
    """The leader's state machine stops appending (writable in no epoch): the quorum is
    healthy and connected, the workload runs, nothing commits."""
    cluster = committed()
    cluster.start_workload(100)
    cluster.run_for(1_000)
    leader = cluster.node(cluster.leader() or 0)
    assert leader.counter is not None
    leader.counter.writable_epoch = -1
    with pytest.raises(InvariantViolationError) as caught:
        cluster.run_for(AVAILABILITY_MS + 5_000)
    assert caught.value.violation.invariant == "availability"
    assert caught.value.violation.time_ms - 1_000 >= AVAILABILITY_MS


def test_availability_asks_nothing_of_a_cut_off_majority() -> None:
    """Two of three voters cut off from each other for longer than the bound: no majority is
    connected, so no commit is owed; healed, the quorum commits again."""
    cluster = committed()
    cluster.start_workload(100)
    a, b, c = cluster.voter_ids
    cluster.partition({a}, {b}, {c})
    cluster.run_for(AVAILABILITY_MS + 10_000)
    cluster.heal()
    cluster.run_for(10_000)
    assert cluster.validate() == []
    assert cluster.checker.longest_stall_ms < AVAILABILITY_MS


def test_the_event_log_of_a_storage_run_is_the_same_for_the_same_seed(tmp_path: Path) -> None:
    def run(path: Path) -> bytes:
        cluster = committed(9, event_log=path, snapshot_every=4, stop_on_violation=False)
        cluster.start_workload(100)
        cluster.corrupt(1)
        cluster.corrupt_snapshot(2)
        cluster.lose_next_flush(3)
        cluster.misdirect_next_append(2, 1)
        cluster.run_for(300)
        cluster.restart(3)
        cluster.restart(2)
        cluster.run_for(2_000)
        cluster.close()
        return path.read_bytes()

    first = run(tmp_path / "a.jsonl")
    assert first == run(tmp_path / "b.jsonl")
    kinds = {
        (e.details or {}).get("fault")
        for e in read_events(tmp_path / "a.jsonl")
        if e.kind == "fault_injected"
    }
    assert {"corrupt", "corrupt_snapshot", "lose_next_flush", "misdirect_next_append"} <= kinds


# ---------------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------------
#: Seeds per storage-fault scenario in ``make test``: 4 x 50 = 200 runs.
SWEEP_SEEDS = range(1, 51)


def test_the_storage_fault_sweep_has_no_violation(tmp_path: Path) -> None:
    """200 seeds over the storage-fault scenarios, two worker processes, as ``kraft sim sweep
    --scenario bitrot,lost_writes,misdirected_writes,corrupt_snapshots --seeds 1-50`` runs
    them: no violation, no failed expectation, no error."""
    started = time.perf_counter()
    summary = sweep(
        STORAGE_SCENARIOS,
        SWEEP_SEEDS,
        tmp_path,
        jobs=2,
        scenario_dir=SIMULATIONS,
        message_events=False,
        keep_passing=False,
    )
    elapsed = time.perf_counter() - started
    assert summary.total.runs == len(STORAGE_SCENARIOS) * len(SWEEP_SEEDS) >= 200
    failures = [
        f"{run.scenario} seed {run.seed}: {run.error or ', '.join(run.failure_kinds)} "
        f"(kraft sim run --scenario {run.scenario} --seed {run.seed} --no-message-events)"
        for run in summary.failed
    ]
    assert not failures, "\n".join(failures)
    assert summary.total.violations == 0
    print(
        f"storage sweep: {summary.total.runs} runs, {summary.total.events} events, "
        f"{summary.total.simulated_s:.0f} s simulated, {elapsed:.1f} s wall"
    )


def test_committed_intact_looks_again_at_a_snapshot_corrupt_since_the_last_rescan() -> None:
    """The rescan remembers which snapshots it found intact, by their bytes: every voter's
    snapshots found intact, then corrupt, leave the batches cleaned from the logs below them
    without an intact copy."""
    cluster = Cluster(seed=11, voters=3, snapshot_every=4)
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    cluster.start_workload(50)
    cluster.run_for(3_000)
    cluster.stop_workload()
    cluster.run_for(2_000)
    assert cluster.validate() == []  # a rescan: every snapshot found intact
    for voter in cluster.voter_ids:
        log = cluster.node(voter).log
        assert log.log_start_offset > 0
        for snapshot_id in log.snapshot_ids():
            cluster.corrupt_snapshot(voter, snapshot_id, position=20, mask=1)
    with pytest.raises(InvariantViolationError) as caught:
        cluster.run_for(1_000)
    assert caught.value.violation.invariant == "committed_intact"
    assert "under an intact snapshot" in caught.value.violation.message
