"""Shrinking: ddmin on plain lists, then on a scenario's fault schedule."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.simulation import Cluster, SimulationError
from kraft.simulation.scenario import read_run, run_scenario
from kraft.simulation.shrink import ddmin, shrink

# -- ddmin ---------------------------------------------------------------------------------------


@given(
    size=st.integers(0, 40),
    data=st.data(),
)
def test_ddmin_finds_the_one_minimal_cause(size: int, data: st.DataObject) -> None:
    """With "fails iff it holds all of S", the only 1-minimal failing sublist is S."""
    items = list(range(size))
    cause = set(data.draw(st.sets(st.sampled_from(items), max_size=4))) if items else set()
    calls: list[tuple[int, ...]] = []

    def fails(candidate: Sequence[int]) -> bool:
        calls.append(tuple(candidate))
        return cause <= set(candidate)

    found, minimal = ddmin(items, fails)
    assert found == sorted(cause) and minimal
    assert len(calls) == len(set(calls))  # no candidate tested twice


def test_ddmin_tries_the_empty_list_first() -> None:
    calls: list[list[str]] = []

    def fails(candidate: Sequence[str]) -> bool:
        calls.append(list(candidate))
        return True

    assert ddmin(["a", "b", "c"], fails) == ([], True)
    assert calls == [[]]


def test_ddmin_stops_at_max_tests_with_the_smallest_failing_list_so_far() -> None:
    items = list(range(64))

    def fails(candidate: Sequence[int]) -> bool:
        return {3, 60} <= set(candidate)

    found, minimal = ddmin(items, fails, max_tests=3)
    assert not minimal and {3, 60} <= set(found)
    assert ddmin(items, fails, max_tests=0) == (items, False)


def test_ddmin_keeps_the_order_and_any_item_type() -> None:
    items = ["x", "kill", "y", "z", "heal"]
    found, _ = ddmin(items, lambda c: "kill" in c and "heal" in c)
    assert found == ["kill", "heal"]


# -- shrinking a scenario ------------------------------------------------------------------------

SCENARIOS = '''
from kraft.simulation.scenario import ScenarioRun, scenario


@scenario("shrink_lose_node_2")
def shrink_lose_node_2(run: ScenarioRun) -> None:
    """Ten harmless faults and one that loses node 2, which must still be running."""
    cluster = run.cluster(voters=3)
    cluster.start_workload(100)
    run.await_(lambda: cluster.leader() is not None, 10_000, "a leader")
    for step in range(3):
        cluster.set_network(latency_ms=(1, 3 + step))
        cluster.run_for(50)
    cluster.isolate(3)
    cluster.run_for(100)
    cluster.heal()
    cluster.run_for(100)
    cluster.kill(2)
    cluster.run_for(100)
    for _ in range(2):
        cluster.pause(3)
        cluster.run_for(50)
        cluster.resume(3)
        cluster.run_for(50)
    cluster.set_network(latency_ms=(1, 2))
    cluster.run_for(500)
    run.expect(cluster.node(2).client is not None, "node 2 is running")


@scenario("shrink_fails_without_faults")
def shrink_fails_without_faults(run: ScenarioRun) -> None:
    """Fails whatever the faults: the shrink ends with none."""
    cluster = run.cluster(voters=3)
    cluster.set_network(latency_ms=(1, 4))
    cluster.pause(2)
    cluster.run_for(200)
    run.expect(False, "never")


@scenario("shrink_passes")
def shrink_passes(run: ScenarioRun) -> None:
    """Passes."""
    run.cluster(voters=1).run_for(100)
'''


@pytest.fixture(scope="module")
def scenario_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("shrink-scenarios")
    (directory / "shrink_test_scenarios.py").write_text(textwrap.dedent(SCENARIOS))
    return directory


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_shrink_finds_the_kill(scenario_dir: Path, tmp_path: Path, seed: int) -> None:
    original = run_scenario("shrink_lose_node_2", seed, tmp_path / "run", scenario_dir=scenario_dir)
    assert not original.ok and original.failure_kinds == {"expectation"}
    assert len(original.faults) == 11

    shrunk = shrink(original, scenario_dir=scenario_dir, out_dir=tmp_path / "shrunk")

    assert shrunk.minimal
    assert [(f["kind"], f["targets"]) for f in shrunk.remaining_faults] == [("kill", [2])]
    assert shrunk.kept == (5,)
    assert shrunk.suppressed == tuple(i for i in range(11) if i != 5)
    assert 2 < shrunk.runs <= 20
    written = read_run(tmp_path / "shrunk")
    assert written == shrunk.result and not written.ok
    assert written.suppressed == list(shrunk.suppressed)


def test_shrink_respects_max_runs(scenario_dir: Path) -> None:
    original = run_scenario("shrink_lose_node_2", 1, scenario_dir=scenario_dir)
    shrunk = shrink(original, scenario_dir=scenario_dir, max_runs=4)
    assert shrunk.runs == 4 and not shrunk.minimal
    assert not shrunk.result.ok
    assert "kill" in [f["kind"] for f in shrunk.remaining_faults]


def test_a_failure_that_needs_no_fault_shrinks_to_none(scenario_dir: Path) -> None:
    original = run_scenario("shrink_fails_without_faults", 1, scenario_dir=scenario_dir)
    shrunk = shrink(original, scenario_dir=scenario_dir)
    assert shrunk.remaining_faults == [] and shrunk.minimal
    assert shrunk.runs == 3  # confirm, the empty schedule, the result


def test_shrink_refuses_a_passing_run_and_a_changed_scenario(scenario_dir: Path) -> None:
    passing = run_scenario("shrink_passes", 1, scenario_dir=scenario_dir)
    with pytest.raises(SimulationError, match="nothing to shrink"):
        shrink(passing, scenario_dir=scenario_dir)
    failing = run_scenario("shrink_lose_node_2", 1, scenario_dir=scenario_dir)
    failing.digest = "0" * 64  # as if recorded by another version of the scenario
    with pytest.raises(SimulationError, match="did not reproduce"):
        shrink(failing, scenario_dir=scenario_dir)


def test_suppressing_a_fault_does_not_renumber_the_later_ones() -> None:
    def schedule(suppress: set[int]) -> list[tuple[int, str]]:
        cluster = Cluster(seed=1, voters=3, suppress_faults=suppress)
        cluster.run_for(2000)
        cluster.pause(3)
        cluster.resume(3)
        cluster.kill(2)
        return [(f.index, f.kind) for f in cluster.faults]

    assert schedule(set()) == [(0, "pause"), (1, "resume"), (2, "kill")]
    assert schedule({0}) == [(0, "pause"), (1, "resume"), (2, "kill")]
