"""The simulator's client operations (``Cluster.submit``, ``read_barrier``,
``transfer_leadership``), the kv workload, its events and its end-of-run linearizability check,
and the kv scenarios: a 200-run sweep with no violation, and a broken read path caught."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from kraft.analysis.events import _DETAILS_DDL
from kraft.errors import LeaderTransferError, NotLeaderError
from kraft.kv import KvCommand
from kraft.simulation import Cluster, InvariantViolationError, read_events
from kraft.simulation.linearizability import Operation
from kraft.simulation.operations import NodeCrashedError, NodeDownError
from kraft.simulation.scenario import load_scenarios, run_scenario, scenario
from kraft.simulation.sweep import sweep

SIMULATIONS = Path(__file__).resolve().parents[2] / "simulations"
KV_SCENARIOS = ("kv_partitions", "kv_crashes", "kv_leader_transfers", "kv_nemesis")


def elected(cluster: Cluster) -> int:
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    leader = cluster.leader()
    assert leader is not None
    return leader


# ---------------------------------------------------------------------------------------------
# Client operations
# ---------------------------------------------------------------------------------------------
def test_a_write_through_any_node_commits_once_and_a_barrier_covers_it() -> None:
    cluster = Cluster(seed=1, voters=3, observers=1)
    leader = elected(cluster)
    follower = next(i for i in cluster.voter_ids if i != leader)
    writes = {via: cluster.submit([f"via {via}"], via=via) for via in (leader, follower, 4)}
    assert cluster.run_until(lambda: all(w.done() for w in writes.values()), 5_000)
    offsets = {via: write.result() for via, write in writes.items()}
    barrier = cluster.read_barrier(follower)
    assert cluster.run_until(barrier.done, 5_000)
    assert barrier.result() >= max(offsets.values())
    assert cluster.node(follower).high_watermark > max(offsets.values())
    cluster.run_for(2_000)  # time for any duplicate to commit too
    for node in cluster.nodes.values():
        assert sorted(r for r in node.committed if isinstance(r, str)) == [
            f"via {via}" for via in sorted(writes, key=offsets.__getitem__)
        ]
    assert cluster.validate() == []


def test_without_a_leader_submit_and_transfer_fail_with_not_leader() -> None:
    cluster = Cluster(seed=1, voters=3)  # at time 0 nobody leads yet
    for future in (cluster.submit(["x"]), cluster.transfer_leadership()):
        assert future.done() and isinstance(future.exception(), NotLeaderError)


def test_a_call_to_a_down_node_fails_at_once_and_changes_nothing() -> None:
    cluster = Cluster(seed=2, voters=3)
    leader = elected(cluster)
    follower = next(i for i in cluster.voter_ids if i != leader)
    cluster.kill(follower)
    calls = [
        cluster.submit(["x"], via=follower),
        cluster.read_barrier(follower),
        cluster.transfer_leadership(via=follower),
    ]
    assert all(call.done() and isinstance(call.exception(), NodeDownError) for call in calls)
    cluster.run_for(1_000)
    assert "x" not in cluster.node(leader).committed


@pytest.mark.parametrize("how", ["kill", "shutdown"])
def test_calls_pending_on_a_node_that_goes_down_fail_as_unknown(how: str) -> None:
    cluster = Cluster(seed=3, voters=3)
    leader = elected(cluster)
    follower = next(i for i in cluster.voter_ids if i != leader)
    cluster.isolate(follower)  # its forward and its barrier wait for the leader
    write = cluster.submit(["x"], via=follower, timeout_ms=60_000)
    barrier = cluster.read_barrier(follower, timeout_ms=60_000)
    cluster.run_for(100)
    assert not write.done() and not barrier.done()
    if how == "kill":
        cluster.kill(follower)
    else:
        cluster.shutdown(follower)
        assert cluster.run_until(lambda: not cluster.node(follower).running, 5_000)
    for call in (write, barrier):
        assert isinstance(call.exception(), NodeCrashedError)
    cluster.heal()
    cluster.restart(follower)
    cluster.run_for(2_000)  # nothing completes a future twice, nothing raises
    assert cluster.validate() == []


def test_transfer_leadership_hands_over_to_the_voter_asked() -> None:
    cluster = Cluster(seed=4, voters=3)
    leader = elected(cluster)
    end = cluster.node(leader).log_end_offset
    assert cluster.run_until(
        lambda: all(n.high_watermark == end for n in cluster.nodes.values()), 5_000
    )
    target = max(i for i in cluster.voter_ids if i != leader)
    transfer = cluster.transfer_leadership(target)
    assert cluster.run_until(transfer.done, 10_000)
    assert transfer.result() == target == cluster.leader()
    refused = cluster.transfer_leadership(target)  # a leader cannot hand over to itself
    assert cluster.run_until(refused.done, 1_000)
    assert isinstance(refused.exception(), LeaderTransferError)


# ---------------------------------------------------------------------------------------------
# The kv workload
# ---------------------------------------------------------------------------------------------
def _kv_run(seed: int, path: Path | None = None) -> Cluster:
    cluster = Cluster(seed=seed, voters=3, observers=1, event_log=path, stop_on_violation=False)
    leader = elected(cluster)
    kv = cluster.start_kv_workload(clients=4)
    cluster.run_for(1_500)
    cluster.isolate(leader)
    cluster.run_for(3_000)
    cluster.heal()
    cluster.kill(cluster.leader() or 1)
    cluster.run_for(1_500)
    kv.stop()
    assert cluster.run_until(lambda: kv.idle, 30_000)
    cluster.validate()
    cluster.close()
    return cluster


def test_the_kv_workload_logs_every_operation_and_checks_its_history(tmp_path: Path) -> None:
    cluster = _kv_run(5, tmp_path / "events.jsonl")
    kv = cluster.kv_workload
    assert kv is not None
    assert cluster.violations == []
    assert kv.outcomes["ok"] > 50 and kv.outcomes["unknown"] + kv.outcomes["fail"] > 0
    events = read_events(tmp_path / "events.jsonl")
    invoked = [e for e in events if e.kind == "op_invoked"]
    completed = [e for e in events if e.kind == "op_completed"]
    assert len(invoked) == len(completed) == sum(kv.outcomes.values())
    assert {e.details["op"] for e in invoked if e.details} == {"put", "get", "cas"}
    # The history can be rebuilt from the log alone: pair each client's events in order.
    pending: dict[int, Operation] = {}
    rebuilt: list[Operation] = []
    for event in events:
        details = event.details or {}
        if event.kind == "op_invoked":
            pending[details["client"]] = Operation(
                client=details["client"],
                op=details["op"],
                key=details["key"],
                invoke_ms=event.time_ms,
                complete_ms=None,
                value=details.get("written"),
                expected=details.get("expected"),
            )
        elif event.kind == "op_completed":
            op = pending.pop(details["client"])
            assert (op.op, op.key) == (details["op"], details["key"])
            assert event.latency_ms == event.time_ms - op.invoke_ms
            if details["outcome"] == "ok":
                result = details.get("read", details.get("swapped"))
                rebuilt.append(
                    Operation(
                        client=op.client,
                        op=op.op,
                        key=op.key,
                        invoke_ms=op.invoke_ms,
                        complete_ms=event.time_ms,
                        value=op.value,
                        expected=op.expected,
                        result=result,
                    )
                )
            elif details["outcome"] == "unknown":
                rebuilt.append(op)
    assert not pending
    assert rebuilt == kv.history
    keys = {key for e in invoked + completed for key in e.details or {}}
    assert {"client", "op", "key", "written", "expected", "outcome", "read", "swapped"} <= keys
    assert all(f"{key}:" in _DETAILS_DDL or f"`{key}`:" in _DETAILS_DDL for key in keys)


def test_the_kv_workload_replays_byte_for_byte(tmp_path: Path) -> None:
    first = _kv_run(6, tmp_path / "a.jsonl")
    second = _kv_run(6, tmp_path / "b.jsonl")
    assert first.digest == second.digest
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_a_snapshot_carries_the_kv_map_to_a_node_that_loads_it() -> None:
    cluster = Cluster(seed=7, voters=3, snapshot_every=20)
    leader = elected(cluster)
    follower = next(i for i in cluster.voter_ids if i != leader)
    cluster.isolate(follower)
    for i in range(60):
        cluster.submit([KvCommand("put", f"k{i}", str(i))])
        cluster.run_for(20)
    cluster.heal()
    node = cluster.node(follower)
    assert cluster.run_until(
        lambda: node.high_watermark >= cluster.node(leader).log_end_offset, 20_000
    )
    assert KvCommand("put", "k0", "0") not in node.committed  # it loaded a snapshot past it
    assert node.kv is not None
    assert [node.kv.get(f"k{i}") for i in range(60)] == [str(i) for i in range(60)]


def test_a_non_linearizable_history_is_a_violation_with_the_replay_command() -> None:
    cluster = Cluster(seed=8, voters=3, scenario="kv_partitions")
    elected(cluster)
    kv = cluster.start_kv_workload(clients=2)
    cluster.run_for(500)
    kv.stop()
    assert cluster.run_until(lambda: kv.idle, 5_000)
    ok = next(op for op in kv.history if op.op == "put")
    kv.history.append(  # a get after that put, seeing the key absent
        Operation(
            client=99, op="get", key=ok.key, invoke_ms=10_000, complete_ms=10_001, result=None
        )
    )
    with pytest.raises(InvariantViolationError) as raised:
        cluster.validate()
    assert raised.value.violation.invariant == "linearizable"
    assert "client 99 [10000, 10001] get(" in raised.value.report
    assert "replay: kraft sim run --scenario kv_partitions --seed 8" in raised.value.report


# ---------------------------------------------------------------------------------------------
# The kv scenarios
# ---------------------------------------------------------------------------------------------
def test_a_forwarded_write_is_not_appended_again_by_a_new_leader() -> None:
    """Seed 113: node 3 forwards put('k0', '2.8') to leader 1, is elected leader by a
    transfer, and gets the answer (committed at offset 52); the put must not be appended a
    second time, after a cas that swapped it."""
    result = run_scenario("kv_leader_transfers", 113, scenario_dir=SIMULATIONS)
    assert result.ok, result.report


#: Seeds per kv scenario in ``make test``: 4 x 25 = 100 runs (0.2-0.5 s each). ``make
#: sim-sweep`` runs 200 seeds of each, and ``make test-slow`` 100 more (test_scenarios.py).
SWEEP_SEEDS = range(1, 26)


def test_the_kv_sweep_has_no_violation(tmp_path: Path) -> None:
    """The kv scenarios over 100 seeds, two worker processes: linearizable histories, no
    violation, no failed expectation, no error."""
    started = time.perf_counter()
    summary = sweep(
        KV_SCENARIOS,
        SWEEP_SEEDS,
        tmp_path,
        jobs=2,
        scenario_dir=SIMULATIONS,
        message_events=False,
        keep_passing=False,
    )
    elapsed = time.perf_counter() - started
    assert summary.total.runs == len(KV_SCENARIOS) * len(SWEEP_SEEDS)
    failures = [
        f"{run.scenario} seed {run.seed}: {run.error or ', '.join(run.failure_kinds)} "
        f"(kraft sim run --scenario {run.scenario} --seed {run.seed} --no-message-events)"
        for run in summary.failed
    ]
    assert not failures, "\n".join(failures)
    print(
        f"kv sweep: {summary.total.runs} runs, {summary.total.events} events, "
        f"{summary.total.simulated_s:.0f} s simulated, {elapsed:.1f} s wall"
    )


def test_reads_without_a_barrier_are_caught_within_50_seeds() -> None:
    """The same scenario with gets served from the node's state without a read barrier: the
    checker finds a stale read, reported as a ``linearizable`` violation."""
    load_scenarios(SIMULATIONS)
    module = sys.modules["kraft_simulations.kv"]
    scenario("test_kv_local_reads", "kv_partitions with reads from local state")(
        lambda run: module.kv_partitions(run, reads="local")
    )
    for seed in range(1, 51):
        result = run_scenario("test_kv_local_reads", seed, message_events=False)
        if not result.ok:
            break
    else:
        pytest.fail("50 seeds of stale reads passed the linearizability check")
    assert result.failure_kinds == {"linearizable"}, result.report
    assert result.report is not None and "admit no linearization" in result.report
    assert f"replay: kraft sim run --scenario test_kv_local_reads --seed {seed}" in result.report
    print(f"stale reads caught at seed {seed}: {json.dumps(result.violations[0]['message'])}")
