"""``kraft sim``: run, sweep, replay, shrink and list, in-process through ``main([...])``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kraft.cli.main import main
from kraft.simulation.scenario import read_run
from kraft.simulation.sweep import format_seeds, parse_seeds

SCENARIOS = '''
from kraft.simulation.scenario import ScenarioRun, scenario


@scenario("cli_passes")
def cli_passes(run: ScenarioRun) -> None:
    """Three voters elect a leader."""
    cluster = run.cluster(voters=3)
    run.await_(lambda: cluster.leader() is not None, 10_000, "a leader")


@scenario("cli_fails_on_even_seeds")
def cli_fails_on_even_seeds(run: ScenarioRun) -> None:
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


@scenario("cli_violation")
def cli_violation(run: ScenarioRun) -> None:
    """An invariant violation, reported by hand."""
    cluster = run.cluster(voters=3)
    cluster.run_for(300)
    cluster.checker.report("counter", (1,), "a problem made up by the test")
    cluster.run_for(300)


@scenario("cli_raises")
def cli_raises(run: ScenarioRun) -> None:
    """A scenario with a bug."""
    run.cluster(voters=1)
    raise RuntimeError("a bug in the scenario")
'''


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("cli-scenarios")
    (directory / "cli_sim_test_scenarios.py").write_text(textwrap.dedent(SCENARIOS))
    return directory


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


# -- list and run --------------------------------------------------------------------------------


def test_list(capsys: pytest.CaptureFixture[str], scenarios: Path) -> None:
    code, out, _ = run(capsys, "sim", "list")
    assert code == 0 and "initial_election" in out and "cli_passes" not in out
    code, out, _ = run(capsys, "sim", "list", "--scenarios", str(scenarios))
    assert code == 0
    assert out.splitlines() == [
        "cli_fails_on_even_seeds  Kills node 2 on even seeds, then expects it to be running.",
        "cli_passes               Three voters elect a leader.",
        "cli_raises               A scenario with a bug.",
        "cli_violation            An invariant violation, reported by hand.",
    ]


def test_sim_alone_prints_its_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "sim")
    assert code == 2 and "sweep" in err and "shrink" in err


def test_run_a_passing_scenario(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    code, out, _ = run(
        capsys, "sim", "run", "--scenario", "initial_election", "--seed", "1", "--out", str(out_dir)
    )
    assert code == 0
    result = read_run(out_dir)
    assert out.splitlines() == [
        f"ok initial_election seed 1: {result.events} events, "
        f"{result.simulated_ms / 1000:.3f} s simulated, {result.wall_s:.3f} s wall, "
        f"digest {result.digest[:12]} -> {out_dir}"
    ]
    assert (out_dir / "events.jsonl").stat().st_size > 0
    assert result.ok and result.message_events


def test_run_a_failed_expectation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scenarios: Path
) -> None:
    code, out, _ = run(
        capsys,
        "sim",
        "run",
        "--scenario",
        "cli_fails_on_even_seeds",
        "--seed",
        "2",
        "--out",
        str(tmp_path / "r"),
        "--no-message-events",
        "--scenarios",
        str(scenarios),
    )
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("FAILED cli_fails_on_even_seeds seed 2: ")
    assert lines[1:] == [
        "expectation failed: node 2 is running",
        "replay: kraft sim run --scenario cli_fails_on_even_seeds --seed 2 "
        f"--no-message-events --scenarios {scenarios.resolve()}",
    ]
    result = read_run(tmp_path / "r")
    assert not result.message_events and result.expectations == ["node 2 is running"]


def test_run_with_suppressed_faults(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scenarios: Path
) -> None:
    # Fault 1 is the kill of node 2: without it the run passes.
    code, _, _ = run(
        capsys,
        "sim",
        "run",
        "--scenario",
        "cli_fails_on_even_seeds",
        "--seed",
        "2",
        "--out",
        str(tmp_path),
        "--suppress",
        "1",
        "--scenarios",
        str(scenarios),
    )
    assert code == 0
    result = read_run(tmp_path)
    assert result.suppressed == [1]
    assert [(f["kind"], f["suppressed"]) for f in result.faults][:2] == [
        ("network", False),
        ("kill", True),
    ]


def test_run_an_invariant_violation_prints_the_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scenarios: Path
) -> None:
    code, out, _ = run(
        capsys,
        "sim",
        "run",
        "--scenario",
        "cli_violation",
        "--seed",
        "7",
        "--out",
        str(tmp_path),
        "--scenarios",
        str(scenarios),
    )
    assert code == 1
    assert "invariant counter violated at" in out
    assert "a problem made up by the test" in out and "the last" in out
    assert out.rstrip().endswith(
        f"replay: kraft sim run --scenario cli_violation --seed 7 --scenarios {scenarios.resolve()}"
    )


def test_run_defaults_its_directory_under_sim_runs(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    scenarios: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, _ = run(
        capsys,
        "sim",
        "run",
        "--scenario",
        "cli_passes",
        "--seed",
        "3",
        "--scenarios",
        str(scenarios),
    )
    assert code == 0 and read_run(tmp_path / "sim-runs" / "cli_passes" / "seed-3").ok


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["run", "--scenario", "no_such_scenario", "--seed", "1"],
            "no scenario 'no_such_scenario'",
        ),
        (["run", "--scenario", "initial_election", "--seed", "one"], "--seed: 'one'"),
        (
            ["run", "--scenario", "initial_election", "--seed", "1", "--suppress", "1,x"],
            "--suppress: 'x'",
        ),
        (
            ["run", "--scenario", "initial_election", "--seed", "1", "--scenarios", "/nonexistent"],
            "no scenario directory /nonexistent",
        ),
        (["sweep", "--scenario", "initial_election", "--seeds", "1-"], "bad seeds '1-'"),
        (["sweep", "--scenario", "initial_election", "--seeds", "9-3"], "is empty"),
        (["sweep", "--scenario", "initial_election", "--seeds", "1,,2"], "an empty item"),
        (["sweep", "--scenario", "initial_election", "--seeds", "-5"], "bad seeds '-5'"),
        (["sweep", "--scenario", "initial_election", "nope", "--seeds", "1"], "no scenario 'nope'"),
        (
            ["sweep", "--scenario", "initial_election", "--seeds", "1", "--jobs", "0"],
            "--jobs: 0 is less than 1",
        ),
        (["replay", "/nonexistent/run"], "no run directory /nonexistent/run"),
        (["shrink", "/nonexistent/run"], "no run directory /nonexistent/run"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, "sim", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err


def test_a_directory_that_is_not_a_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "sim", "replay", str(tmp_path))
    assert code == 2 and err.startswith("error: ") and "not a run directory" in err
    (tmp_path / "run.json").write_text('{"scenario": 3}')
    code, _, err = run(capsys, "sim", "shrink", str(tmp_path))
    assert code == 2 and err.startswith("error: malformed") and err.count("\n") == 1


def test_shrink_refuses_a_passing_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert (
        run(
            capsys,
            "sim",
            "run",
            "--scenario",
            "initial_election",
            "--seed",
            "1",
            "--out",
            str(tmp_path),
        )[0]
        == 0
    )
    code, _, err = run(capsys, "sim", "shrink", str(tmp_path))
    assert code == 2 and "passed: nothing to shrink" in err


def test_parse_and_format_seeds() -> None:
    assert parse_seeds("5") == [5]
    assert parse_seeds("1-4") == [1, 2, 3, 4]
    assert parse_seeds("1,2,9") == [1, 2, 9]
    assert parse_seeds("1-3,20, 2") == [1, 2, 3, 20]
    assert len(parse_seeds("1-1000")) == 1000
    for bad in ["", "a", "1-b", "3-1", "1--2", "1,,2", "-1"]:
        with pytest.raises(ValueError, match="bad seeds"):
            parse_seeds(bad)
    assert format_seeds([9, 1, 2, 3, 20, 21]) == "1-3,9,20-21"
    assert parse_seeds(format_seeds([9, 1, 2, 3, 20, 21])) == [1, 2, 3, 9, 20, 21]


# -- sweep ---------------------------------------------------------------------------------------


def test_sweep_two_scenarios_in_two_workers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scenarios: Path
) -> None:
    code, out, err = run(
        capsys,
        "sim",
        "sweep",
        "--scenario",
        "cli_passes,cli_fails_on_even_seeds",
        "--seeds",
        "1-3",
        "--jobs",
        "2",
        "--out",
        str(tmp_path),
        "--scenarios",
        str(scenarios),
    )
    assert code == 1
    assert "sweep: 6/6 runs, 1 failed" in err
    lines = out.splitlines()
    assert lines[0].split() == [
        "scenario",
        "runs",
        "failed",
        "violations",
        "failed",
        "exp.",
        "simulated",
        "s",
        "wall",
        "s",
        "sim/wall",
    ]
    assert lines[1].split()[:5] == ["cli_passes", "3", "0", "0", "0"]
    assert lines[2].split()[:5] == ["cli_fails_on_even_seeds", "3", "1", "0", "1"]
    assert lines[3].split()[:5] == ["total", "6", "1", "0", "1"]
    assert lines[4].startswith("6 runs, 1 failed, in ")
    assert lines[5:] == [
        "failed runs:",
        "  cli_fails_on_even_seeds seed 2 (expectation): kraft sim run --scenario "
        f"cli_fails_on_even_seeds --seed 2 --scenarios {scenarios.resolve()}  "
        f"[{tmp_path / 'cli_fails_on_even_seeds' / 'seed-2'}]",
        # The sweep shrinks a failed run's faults (--shrink-runs) to the one it needs.
        "    shrunk to 1 fault(s): kraft sim run --scenario cli_fails_on_even_seeds --seed 2 "
        f"--suppress 0,2,3 --scenarios {scenarios.resolve()}",
    ]
    for name in ("cli_passes", "cli_fails_on_even_seeds"):
        for seed in (1, 2, 3):
            assert read_run(tmp_path / name / f"seed-{seed}").seed == seed
    summary = json.loads((tmp_path / "sweep.json").read_text())
    assert summary["scenarios"] == ["cli_passes", "cli_fails_on_even_seeds"]
    assert summary["seeds"] == "1-3" and summary["jobs"] == 2
    assert summary["total"]["runs"] == 6 and summary["total"]["failed"] == 1
    per = {s["scenario"]: s for s in summary["per_scenario"]}
    assert per["cli_fails_on_even_seeds"]["expectations"] == 1
    assert per["cli_passes"]["simulated_s"] > 0 and per["cli_passes"]["wall_s"] > 0
    [failed] = summary["failed"]
    assert (failed["scenario"], failed["seed"], failed["failure_kinds"]) == (
        "cli_fails_on_even_seeds",
        2,
        ["expectation"],
    )


def test_sweep_all_in_this_process(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scenarios: Path
) -> None:
    code, out, _ = run(
        capsys,
        "sim",
        "sweep",
        "--scenario",
        "all",
        "--seeds",
        "1",
        "--jobs",
        "1",
        "--keep-passing",
        "no",
        "--out",
        str(tmp_path),
        "--scenarios",
        str(scenarios),
    )
    assert code == 1  # cli_violation always fails, cli_raises always raises
    assert "cli_violation seed 1 (counter)" in out
    assert "cli_raises seed 1 (RuntimeError: a bug in the scenario)" in out
    assert not (tmp_path / "cli_passes" / "seed-1").exists()  # passed, not kept
    assert read_run(tmp_path / "cli_violation" / "seed-1").violations
    summary = json.loads((tmp_path / "sweep.json").read_text())
    assert summary["scenarios"] == [
        "cli_fails_on_even_seeds",
        "cli_passes",
        "cli_raises",
        "cli_violation",
    ]
    assert summary["total"]["failed"] == 2
    raised = next(r for r in summary["failed"] if r["scenario"] == "cli_raises")
    assert raised["failure_kinds"] == ["error"] and "a bug" in raised["error"]


def test_a_sweep_that_passes_exits_0(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scenarios: Path
) -> None:
    code, out, _ = run(
        capsys,
        "sim",
        "sweep",
        "--scenario",
        "cli_passes",
        "--seeds",
        "4,5",
        "--jobs",
        "1",
        "--out",
        str(tmp_path),
        "--scenarios",
        str(scenarios),
    )
    assert code == 0 and "failed runs" not in out


# -- replay --------------------------------------------------------------------------------------


def test_replay_identical(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scenarios: Path
) -> None:
    run(
        capsys,
        "sim",
        "run",
        "--scenario",
        "cli_fails_on_even_seeds",
        "--seed",
        "2",
        "--suppress",
        "2",
        "--out",
        str(tmp_path),
        "--scenarios",
        str(scenarios),
    )
    code, out, _ = run(capsys, "sim", "replay", str(tmp_path), "--scenarios", str(scenarios))
    assert code == 0 and out.startswith("identical: FAILED cli_fails_on_even_seeds seed 2")


def test_replay_shows_the_first_different_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run(
        capsys,
        "sim",
        "run",
        "--scenario",
        "initial_election",
        "--seed",
        "4",
        "--out",
        str(tmp_path),
    )
    events = tmp_path / "events.jsonl"
    lines = events.read_bytes().splitlines(keepends=True)
    lines[5] = lines[5].replace(b'"time_ms":', b'"time_ms":1')
    events.write_bytes(b"".join(lines))
    run_json = tmp_path / "run.json"
    recorded = json.loads(run_json.read_text())
    recorded["digest"] = "f" * 64
    run_json.write_text(json.dumps(recorded))

    code, out, _ = run(capsys, "sim", "replay", str(tmp_path))
    assert code == 1
    assert out.startswith("different: ")
    assert "the event logs differ first at line 6:" in out
    recorded_line = next(line for line in out.splitlines() if line.startswith("  recorded: "))
    replayed_line = next(line for line in out.splitlines() if line.startswith("  replayed: "))
    assert recorded_line.removeprefix("  recorded: ").encode() == lines[5].rstrip()
    assert replayed_line != recorded_line


# -- shrink --------------------------------------------------------------------------------------


def test_shrink_a_failed_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scenarios: Path
) -> None:
    run_dir = tmp_path / "failing"
    run(
        capsys,
        "sim",
        "run",
        "--scenario",
        "cli_fails_on_even_seeds",
        "--seed",
        "4",
        "--out",
        str(run_dir),
        "--scenarios",
        str(scenarios),
    )
    code, out, _ = run(capsys, "sim", "shrink", str(run_dir), "--scenarios", str(scenarios))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("shrunk cli_fails_on_even_seeds seed 4: 4 faults -> 1 in ")
    assert lines[0].endswith("(1-minimal); failing with expectation")
    assert lines[1] == "remaining faults:"
    assert lines[2].startswith("  #1 at 500 ms: kill (targets 2)")
    shrunk_dir = tmp_path / "failing-shrunk"
    assert lines[3].startswith("FAILED cli_fails_on_even_seeds seed 4") and lines[3].endswith(
        f"-> {shrunk_dir}"
    )
    assert lines[4] == (
        "replay: kraft sim run --scenario cli_fails_on_even_seeds --seed 4 --suppress 0,2,3 "
        f"--scenarios {scenarios.resolve()}"
    )
    assert lines[5] == f"        kraft sim replay {shrunk_dir} --scenarios {scenarios.resolve()}"
    assert read_run(shrunk_dir).suppressed == [0, 2, 3]
    assert run(capsys, "sim", "replay", str(shrunk_dir), "--scenarios", str(scenarios))[0] == 0


# -- the installed console script ----------------------------------------------------------------


def test_console_script_runs_and_replays(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "kraft"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "kraft.cli"]
    ran = subprocess.run(
        [
            *command,
            "sim",
            "run",
            "--scenario",
            "initial_election",
            "--seed",
            "2",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert ran.returncode == 0 and ran.stdout.startswith("ok initial_election seed 2")
    replayed = subprocess.run(
        [*command, "sim", "replay", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert replayed.returncode == 0 and replayed.stdout.startswith("identical")
    bad = subprocess.run(
        [*command, "sim", "sweep", "--scenario", "all", "--seeds", "x"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: --seeds: bad seeds 'x'")
    assert "Traceback" not in bad.stderr


LONG_DESCRIPTION = '''
from kraft.simulation.scenario import ScenarioRun, scenario


@scenario("cli_long_description")
def cli_long_description(run: ScenarioRun) -> None:
    """A scenario whose description runs over two lines of its docstring, longer than any
    terminal is wide, so that the listing must wrap it between words and nowhere else at all.

    A second paragraph, which is not part of the description.
    """
    run.cluster(voters=1)
'''


def test_list_wraps_a_long_description_between_words(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cli_long_description_scenarios.py").write_text(textwrap.dedent(LONG_DESCRIPTION))
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "sim", "list", "--scenarios", str(tmp_path))
    assert code == 0
    first, *rest = out.splitlines()
    assert first.startswith("cli_long_description  A scenario whose")
    assert rest and all(line.startswith(" " * 22) for line in rest)
    assert all(len(line) <= 80 for line in out.splitlines())
    description = (
        "A scenario whose description runs over two lines of its docstring, longer than any "
        "terminal is wide, so that the listing must wrap it between words and nowhere else at "
        "all."
    )
    listed = " ".join(line.strip() for line in out.splitlines())
    assert listed == f"cli_long_description  {description}"
