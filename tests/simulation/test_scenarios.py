"""The scenario catalogue (``simulations/``): every scenario passes for a range of seeds, with
no invariant violated and no expectation failed, and a seed always gives the same run.

Each test runs one scenario for a block of seeds. ``make test`` runs ``CI_SEEDS`` (cheap
scenarios get more seeds than the long ones); ``make test-slow`` runs ``SLOW_SEEDS`` more seeds
of every scenario, from seed 1000. A failure prints each failing seed's report and the command
that replays it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kraft.simulation.scenario import RunResult, load_scenarios, run_scenario

SIMULATIONS = Path(__file__).resolve().parents[2] / "simulations"

#: Seeds per scenario in ``make test`` (390 runs; a chaos, storm or long_follower_isolation run
#: takes 1-7 s, the others 0.05-0.5 s), and how many one test runs.
CI_SEEDS = {
    "initial_election": 60,
    "leader_failure": 25,
    "all_nodes_killed": 25,
    "leader_partitioned_away": 25,
    "majority_reachable": 25,
    "back_to_back_leader_failures": 25,
    "wiped_node_recovery": 25,
    "lossy_network": 25,
    "rolling_restarts": 25,
    "asymmetric_partition": 25,
    "long_follower_isolation": 5,
    "chaos": 10,
    "storm": 5,
    "figure8": 25,
    "snapshot_catch_up": 15,
    "snapshot_download_interrupted": 15,
    "wiped_node_from_snapshot": 15,
    # The storage faults: 50 seeds each in test_storage_faults.py's sweep.
    "bitrot": 0,
    "lost_writes": 0,
    "misdirected_writes": 0,
    "corrupt_snapshots": 0,
    # Dynamic voters: 40 seeds each in test_reconfig.py's sweep.
    "rolling_replacement": 0,
    "remove_leader": 0,
    "add_voter_during_partition": 0,
    "grow_standalone_to_five": 0,
    "change_during_failover": 0,
    # The kv workload: 25 seeds each in test_kv_workload.py's sweep.
    "kv_partitions": 0,
    "kv_crashes": 0,
    "kv_leader_transfers": 0,
    "kv_nemesis": 0,
    # The controller (1-2 s each): 200 seeds each by kraft sim sweep, see simulations/README.md.
    "controller_broker_churn": 5,
    "controller_failover_storm": 5,
    "controller_fenced_partitions": 5,
}
CI_BLOCK = 10
#: Seeds per scenario in ``make test-slow`` (from ``SLOW_FIRST_SEED``), per test.
SLOW_SEEDS = 100
SLOW_FIRST_SEED = 1000
SLOW_BLOCK = 25


def _blocks(seeds: dict[str, int], first: int, block: int) -> list[tuple[str, int, int]]:
    """(scenario, first seed, stop) per test: ``seeds[name]`` seeds from ``first``, ``block``
    at a time."""
    return [
        (name, start, min(start + block, first + count))
        for name, count in seeds.items()
        for start in range(first, first + count, block)
    ]


def _ids(blocks: list[tuple[str, int, int]]) -> list[str]:
    return [f"{name}-{start}-{stop - 1}" for name, start, stop in blocks]


CI_BLOCKS = _blocks(CI_SEEDS, 0, CI_BLOCK)
SLOW_BLOCKS = _blocks(dict.fromkeys(CI_SEEDS, SLOW_SEEDS), SLOW_FIRST_SEED, SLOW_BLOCK)


def _run(name: str, seed: int) -> RunResult:
    return run_scenario(name, seed, message_events=False, scenario_dir=SIMULATIONS)


def _explain(result: RunResult) -> str:
    lines = [
        f"scenario {result.scenario}, seed {result.seed}: "
        f"replay with kraft sim run --scenario {result.scenario} --seed {result.seed}"
    ]
    lines += [f"  expectation failed: {message}" for message in result.expectations]
    lines += [f"  violation: {v['invariant']}: {v['message']}" for v in result.violations]
    if result.error:
        lines.append(f"  error: {result.error}")
    if result.report:
        lines.append(result.report)
    return "\n".join(lines)


def _check_block(name: str, start: int, stop: int) -> None:
    results = [_run(name, seed) for seed in range(start, stop)]
    failures = [result for result in results if not result.ok]
    assert not failures, "\n\n".join(_explain(result) for result in failures)


def test_the_catalogue_is_covered() -> None:
    """Every scenario of ``simulations/`` has seeds in CI and a description."""
    catalogue = {
        name: found
        for name, found in load_scenarios(SIMULATIONS).items()
        if Path(sys.modules[found.body.__module__].__file__ or "").parent == SIMULATIONS
    }
    assert set(catalogue) == set(CI_SEEDS)
    assert all(found.description and found.description != name for name, found in catalogue.items())
    assert sum(CI_SEEDS.values()) >= 200


@pytest.mark.parametrize(("name", "start", "stop"), CI_BLOCKS, ids=_ids(CI_BLOCKS))
def test_scenario(name: str, start: int, stop: int) -> None:
    _check_block(name, start, stop)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "start", "stop"), SLOW_BLOCKS, ids=_ids(SLOW_BLOCKS))
def test_scenario_many_seeds(name: str, start: int, stop: int) -> None:
    _check_block(name, start, stop)


@pytest.mark.parametrize(
    ("name", "seed"),
    [
        ("chaos", 3),
        ("lossy_network", 5),
        ("bitrot", 4),
        ("corrupt_snapshots", 2),
        ("controller_failover_storm", 2),
    ],
)
def test_a_seed_replays_byte_for_byte(name: str, seed: int, tmp_path: Path) -> None:
    first = run_scenario(name, seed, tmp_path / "first", scenario_dir=SIMULATIONS)
    second = run_scenario(name, seed, tmp_path / "second", scenario_dir=SIMULATIONS)
    assert first.ok, _explain(first)
    assert first.digest == second.digest
    assert (tmp_path / "first" / "events.jsonl").read_bytes() == (
        tmp_path / "second" / "events.jsonl"
    ).read_bytes()
    other = run_scenario(name, seed + 1, scenario_dir=SIMULATIONS)
    assert other.digest != first.digest
