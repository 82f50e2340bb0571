"""Sweeps on the local engine: shards, resuming, ``keep_passing``, replay and shrunk commands."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kraft.cli.main import main
from kraft.simulation.scenario import run_scenario
from kraft.simulation.sweep import (
    RUNS_DIR,
    SweepRun,
    parse_shard,
    read_runs,
    replay_command,
    shard_seeds,
    sweep,
)

#: Two small scenarios (a few hundred simulated ms): one passes, one fails on even seeds by
#: killing node 2, among three other faults it does not need to fail.
SCENARIOS = '''
from kraft.simulation.scenario import ScenarioRun, scenario


@scenario("sweep_passes")
def sweep_passes(run: ScenarioRun) -> None:
    """Three voters elect a leader."""
    cluster = run.cluster(voters=3)
    run.await_(lambda: cluster.leader() is not None, 10_000, "a leader")


@scenario("sweep_fails_on_even_seeds")
def sweep_fails_on_even_seeds(run: ScenarioRun) -> None:
    """Kills node 2 on even seeds, then expects it to be running."""
    cluster = run.cluster(voters=3)
    cluster.set_network(latency_ms=(1, 4))
    cluster.run_for(500)
    if run.seed % 2 == 0:
        cluster.kill(2)
    cluster.pause(3)
    cluster.run_for(200)
    cluster.resume(3)
    run.expect(cluster.node(2).client is not None, "node 2 is running")
'''

NAMES = ["sweep_passes", "sweep_fails_on_even_seeds"]


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("sweep-scenarios")
    (directory / "sweep_test_scenarios.py").write_text(textwrap.dedent(SCENARIOS))
    return directory


def test_shards_are_disjoint_and_cover_the_seeds() -> None:
    seeds = list(range(1, 11))
    shards = [shard_seeds(seeds, (k, 3)) for k in (1, 2, 3)]
    assert shards == [[1, 4, 7, 10], [2, 5, 8], [3, 6, 9]]
    assert shard_seeds(seeds, (1, 1)) == seeds
    assert parse_shard("2/3") == (2, 3)
    for bad in ["0/3", "4/3", "1", "a/b", "1/0"]:
        with pytest.raises(ValueError, match="bad shard"):
            parse_shard(bad)


def test_a_shard_runs_only_its_seeds(tmp_path: Path, scenarios: Path) -> None:
    summary = sweep(NAMES, [1, 2, 3, 4], tmp_path, scenario_dir=scenarios, shard=(2, 2))
    assert summary.seeds == "2,4" and summary.shard == "2/2"
    assert sorted(read_runs(tmp_path)) == sorted((n, s) for n in NAMES for s in (2, 4))
    assert not (tmp_path / "sweep_passes" / "seed-1").exists()


def test_a_sweep_started_again_runs_only_the_runs_not_recorded(
    tmp_path: Path, scenarios: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = sweep(NAMES, [1, 2], tmp_path, scenario_dir=scenarios)
    assert first.total.runs == 4 and first.resumed == 0
    # A sweep killed while writing leaves a torn last line: that run is not recorded.
    [log] = (tmp_path / RUNS_DIR).glob("*.jsonl")
    log.write_bytes(log.read_bytes() + b'{"scenario": "sweep_passes", "se')
    ran: list[SweepRun] = []
    second = sweep(NAMES, [1, 2, 3], tmp_path, scenario_dir=scenarios, on_run=ran.append)
    assert sorted((r.scenario, r.seed) for r in ran) == [
        ("sweep_fails_on_even_seeds", 3),
        ("sweep_passes", 3),
    ]
    assert second.resumed == 4 and second.total.runs == 6 and second.seeds == "1-3"
    assert f"{log}: skipped 1 unreadable line(s); their runs run again" in caplog.messages
    assert [(r.scenario, r.seed) for r in second.failed] == [("sweep_fails_on_even_seeds", 2)]


def test_keep_passing_no_keeps_every_summary_and_the_failed_runs_events(
    tmp_path: Path, scenarios: Path
) -> None:
    summary = sweep(NAMES, [1, 2], tmp_path, jobs=2, scenario_dir=scenarios, keep_passing=False)
    assert summary.total.runs == 4
    recorded = read_runs(tmp_path)
    assert len(recorded) == 4 and all(run.digest for run in recorded.values())
    failed = recorded["sweep_fails_on_even_seeds", 2]
    assert not failed.ok and (Path(failed.run_dir) / "events.jsonl").is_file()
    passed = recorded["sweep_passes", 1]
    assert passed.ok and passed.run_dir == ""
    assert not (tmp_path / "sweep_passes" / "seed-1").exists()


def test_a_failed_run_comes_back_with_its_replay_and_shrunk_commands(
    tmp_path: Path, scenarios: Path
) -> None:
    summary = sweep(
        ["sweep_fails_on_even_seeds"],
        [2],
        tmp_path,
        scenario_dir=scenarios,
        message_events=False,
        shrink_runs=20,
        replay_scenarios=str(scenarios),
    )
    [failed] = summary.failed
    assert failed.replay == replay_command(
        "sweep_fails_on_even_seeds", 2, message_events=False, scenarios=str(scenarios)
    )
    assert failed.replay.endswith(f"--no-message-events --scenarios {scenarios}")
    # Of the four faults (a kill, a pause, its resume, the latency), the kill is enough.
    assert failed.shrunk_faults == 1
    assert failed.shrunk_replay is not None and "--suppress 0,2,3" in failed.shrunk_replay
    rerun = run_scenario(
        "sweep_fails_on_even_seeds",
        2,
        suppress=[0, 2, 3],
        message_events=False,
        scenario_dir=scenarios,
    )
    assert not rerun.ok and [f["kind"] for f in rerun.faults if not f.get("suppressed")] == ["kill"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--shard", "3/2"], "--shard: bad shard '3/2': expected K/N with 1 <= K <= N"),
        (["--master", "local[1]"], "--master and --py-files are for --engine spark"),
        (["--shrink-runs", "-1"], "--shrink-runs: -1 is less than 0"),
    ],
)
def test_bad_sweep_options_are_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, options: list[str], message: str
) -> None:
    argv = ["sim", "sweep", "--scenario", "leader_failure", "--seeds", "1", "--out"]
    assert main([*argv, str(tmp_path), *options]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
