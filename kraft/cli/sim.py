"""``kraft sim``: run, sweep, replay and shrink deterministic simulation scenarios.

- ``run``: one scenario and seed into a run directory (``events.jsonl`` and ``run.json``);
- ``sweep``: scenarios x seeds in worker processes or on Spark (``--engine spark``), a summary
  table and ``sweep.json``;
- ``replay``: re-run a run directory's run and check the event log is byte for byte the same;
- ``shrink``: delta-debug a failing run's faults down to the few that make it fail;
- ``list``: the scenarios there are.

Exit codes: 0 for a passing run (or an identical replay, a finished shrink), 1 for a failing
one, 2 for bad input (an unknown scenario, bad seeds, a directory that is not a run): one line
on stderr, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from kraft.analysis.session import SparkUnavailableError
from kraft.simulation.cluster import SimulationError
from kraft.simulation.scenario import (
    CATALOGUE_PACKAGE,
    EVENTS_FILE,
    RunResult,
    Scenario,
    default_scenario_dir,
    load_scenarios,
    read_run,
    run_scenario,
)
from kraft.simulation.shrink import DEFAULT_MAX_RUNS, injected_faults, shrink
from kraft.simulation.sweep import (
    SWEEP_FILE,
    ScenarioSummary,
    SweepRun,
    SweepSummary,
    parse_seeds,
    parse_shard,
    shard_seeds,
    sweep,
)
from kraft.simulation.sweep import replay_command as sweep_replay_command
from kraft.spark_sweep import build_zip, spark_sweep

__all__ = ["register"]

#: Where ``run`` and ``sweep`` write when not given ``--out``.
DEFAULT_OUT = Path("sim-runs")


class BadInputError(Exception):
    """Input the command cannot use: printed as one ``error:`` line, exit code 2."""


Handler = Callable[[argparse.Namespace], int]


def _exit_2_on_bad_input(handler: Handler) -> Handler:
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except BadInputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    run.__doc__ = handler.__doc__
    return run


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft sim ...`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "sim",
        help="run, sweep, replay and shrink simulation scenarios",
        description="Deterministic simulation: every node's Raft client in one process, in "
        "virtual time, under faults, with invariants checked after every event.",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="sim commands", metavar="COMMAND")

    def scenarios_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--scenarios",
            metavar="DIR",
            type=Path,
            help="the directory of scenario modules (default: $KRAFT_SCENARIOS, else "
            "./simulations, else the catalogue installed with kraft)",
        )

    run = commands.add_parser(
        "run",
        help="run one scenario with one seed",
        description="Run scenario NAME with seed N into the run directory DIR (events.jsonl "
        "and run.json). Exit code 1 if an invariant or an expectation failed.",
    )
    run.add_argument(
        "--scenario",
        required=True,
        metavar="NAME",
        help="the scenario to run (`kraft sim list` names them)",
    )
    run.add_argument(
        "--seed",
        required=True,
        metavar="N",
        help="the seed: the same seed replays the same run, event for event",
    )
    run.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        help=f"the run directory (default: {DEFAULT_OUT}/NAME/seed-N)",
    )
    run.add_argument(
        "--suppress",
        metavar="I,J,...",
        default="",
        help="skip the faults with these indices (as `kraft sim shrink` prints)",
    )
    run.add_argument(
        "--no-message-events",
        action="store_true",
        help="leave message events out of the event log (smaller, faster)",
    )
    scenarios_option(run)
    run.set_defaults(handler=_exit_2_on_bad_input(_run))

    sweep_parser = commands.add_parser(
        "sweep",
        help="run scenarios x seeds in worker processes or on Spark and sum them up",
        description="Run every scenario with every seed, JOBS at a time, into "
        "DIR/<scenario>/seed-<N> (or, --engine spark, as Spark tasks with the events in "
        "DIR/events/, Parquet); print a summary per scenario and the failed "
        "runs with their replay commands; write DIR/sweep.json. Runs already recorded in "
        "DIR are not run again (a sweep resumes). Exit code 1 if any run failed.",
    )
    sweep_parser.add_argument(
        "--scenario",
        required=True,
        nargs="+",
        action="extend",
        metavar="NAME",
        help="scenario names (or `all`), space- or comma-separated",
    )
    sweep_parser.add_argument(
        "--seeds", required=True, metavar="SEEDS", help="e.g. 1-1000, 5, 1,2,9 or 1-10,20"
    )
    sweep_parser.add_argument(
        "--jobs",
        "-j",
        default=str(_cpus()),
        metavar="N",
        help="worker processes; 1 runs in this process (default: the CPUs this process may "
        "use; --engine local only)",
    )
    sweep_parser.add_argument(
        "--engine",
        choices=("local", "spark"),
        default="local",
        help="local: worker processes of this machine, a run directory per run (default); "
        "spark: Spark tasks, events in Parquet (needs the spark extra)",
    )
    sweep_parser.add_argument(
        "--master",
        metavar="URL",
        help="the Spark master (--engine spark; default: spark-submit's, else local[*])",
    )
    sweep_parser.add_argument(
        "--py-files",
        metavar="ZIP",
        help="--engine spark: ship kraft to the executors as this zip, or `auto` to build it "
        "from this installation (default: executors run this interpreter, $PYSPARK_PYTHON)",
    )
    sweep_parser.add_argument(
        "--shard",
        metavar="K/N",
        default="1/1",
        help="run only the K-th of N shares of the seeds (every N-th seed from the K-th)",
    )
    sweep_parser.add_argument(
        "--shrink-runs",
        default="20",
        metavar="N",
        help="the most runs spent shrinking each failed run's faults (0: do not shrink; "
        "default: 20)",
    )
    sweep_parser.add_argument(
        "--out",
        metavar="DIR",
        default=str(DEFAULT_OUT),
        help=f"where the runs go, a path or (--engine spark) a URI every executor reaches "
        f"(default: {DEFAULT_OUT})",
    )
    sweep_parser.add_argument(
        "--no-message-events",
        action="store_true",
        help="leave message events out of the event logs",
    )
    sweep_parser.add_argument(
        "--keep-passing",
        choices=("yes", "no"),
        default="yes",
        help="keep the events of passing runs (default: yes; their summaries are always kept)",
    )
    scenarios_option(sweep_parser)
    sweep_parser.set_defaults(handler=_exit_2_on_bad_input(_sweep))

    replay = commands.add_parser(
        "replay",
        help="re-run a run directory and compare the event logs",
        description="Re-run the run recorded in RUN_DIR/run.json (same scenario, seed, "
        "suppressed faults and message events) and compare: print `identical`, "
        "or the first line where the event logs differ (exit code 1).",
    )
    replay.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=Path,
        help="a run directory (with run.json) written by run, sweep or shrink",
    )
    scenarios_option(replay)
    replay.set_defaults(handler=_exit_2_on_bad_input(_replay))

    shrink_parser = commands.add_parser(
        "shrink",
        help="find the fewest faults that still make a run fail",
        description="Delta-debug (ddmin) the faults a failing run injected: re-run with "
        "subsets of them suppressed, keeping a subset while the run still fails "
        "in one of the ways it did. Writes the smallest failing run to DIR.",
    )
    shrink_parser.add_argument(
        "run_dir", metavar="RUN_DIR", type=Path, help="the run directory of a failed run"
    )
    shrink_parser.add_argument(
        "--out", metavar="DIR", type=Path, help="the shrunk run directory (default: RUN_DIR-shrunk)"
    )
    shrink_parser.add_argument(
        "--max-runs",
        default=str(DEFAULT_MAX_RUNS),
        metavar="N",
        help=f"give up after N runs (default: {DEFAULT_MAX_RUNS})",
    )
    scenarios_option(shrink_parser)
    shrink_parser.set_defaults(handler=_exit_2_on_bad_input(_shrink))

    listing = commands.add_parser(
        "list",
        help="list the scenarios",
        description="Print every scenario's name and description.",
    )
    scenarios_option(listing)
    listing.set_defaults(handler=_exit_2_on_bad_input(_list))


# ==============================================================================================
# Input
# ==============================================================================================
def _int(text: str, option: str, minimum: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BadInputError(f"{option}: {text!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise BadInputError(f"{option}: {value} is less than {minimum}")
    return value


def _indices(text: str, option: str) -> list[int]:
    return sorted({_int(part.strip(), option, 0) for part in text.split(",") if part.strip()})


def _scenario_dir(args: argparse.Namespace) -> Path:
    directory: Path | None = args.scenarios
    if directory is not None:
        return directory.resolve()
    try:
        return default_scenario_dir().resolve()
    except SimulationError as exc:
        raise BadInputError(str(exc)) from None


def _is_default_dir(directory: Path) -> bool:
    """Whether ``kraft sim`` finds ``directory`` without ``--scenarios``."""
    try:
        return directory == default_scenario_dir().resolve()
    except SimulationError:
        return False


def _scenarios_in(directory: Path) -> dict[str, Scenario]:
    """The scenarios the modules of ``directory`` define (the registry is process-wide and
    may hold others, loaded from other directories)."""
    try:
        registry = load_scenarios(directory)
    except SimulationError as exc:
        raise BadInputError(str(exc)) from None
    except Exception as exc:  # a scenario module that does not import
        raise BadInputError(
            f"cannot load the scenarios of {directory}: {type(exc).__name__}: {exc}"
        ) from None
    modules = {f"{CATALOGUE_PACKAGE}.{path.stem}" for path in directory.glob("*.py")}
    return {name: s for name, s in sorted(registry.items()) if s.body.__module__ in modules}


def _check_scenario(name: str, directory: Path) -> None:
    known = _scenarios_in(directory)
    if name not in known:
        names = ", ".join(known) or "none"
        raise BadInputError(f"no scenario {name!r} in {directory} (known: {names})")


def _read_run(run_dir: Path) -> RunResult:
    if not run_dir.is_dir():
        raise BadInputError(f"no run directory {run_dir}")
    try:
        return read_run(run_dir)
    except SimulationError as exc:
        raise BadInputError(str(exc)) from None


# ==============================================================================================
# Output
# ==============================================================================================
def replay_command(
    scenario: str,
    seed: int,
    *,
    suppress: Sequence[int] = (),
    message_events: bool = True,
    scenario_dir: Path | None = None,
) -> str:
    """The ``kraft sim run`` command line that runs this again."""
    return sweep_replay_command(
        scenario,
        seed,
        suppress=suppress,
        message_events=message_events,
        scenarios=_named_dir(scenario_dir),
    )


def _named_dir(scenario_dir: Path | None) -> str | None:
    """The ``--scenarios`` a command must name: None for the directory found by default."""
    if scenario_dir is None or _is_default_dir(scenario_dir):
        return None
    return str(scenario_dir)


def _result_replay(result: RunResult, scenario_dir: Path) -> str:
    return replay_command(
        result.scenario,
        result.seed,
        suppress=result.suppressed,
        message_events=result.message_events,
        scenario_dir=scenario_dir,
    )


def result_line(result: RunResult) -> str:
    """One line: the outcome, the size, the speed, the fingerprint."""
    outcome = "ok" if result.ok else "FAILED"
    return (
        f"{outcome} {result.scenario} seed {result.seed}: {result.events} events, "
        f"{result.simulated_ms / 1000:.3f} s simulated, {result.wall_s:.3f} s wall, "
        f"digest {result.digest[:12]}"
    )


def failure_text(result: RunResult, replay: str) -> str:
    """What went wrong in a failed run: its report (the first violation, the cluster, the last
    events) or its violations, then its failed expectations and the replay command."""
    lines: list[str] = []
    if result.report:
        lines.append(result.report)
    else:
        lines += [
            f"invariant {v['invariant']} violated at {v['time_ms']} ms "
            f"(nodes {','.join(map(str, v['nodes'])) or '-'}): {v['message']}"
            for v in result.violations
        ]
    lines += [f"expectation failed: {message}" for message in result.expectations]
    lines.append(f"replay: {replay}")
    return "\n".join(lines)


def _fault_line(fault: dict[str, Any]) -> str:
    targets = ",".join(map(str, fault.get("targets", []))) or "-"
    return f"  #{fault['index']} at {fault['time_ms']} ms: {fault['kind']} (targets {targets})"


# ==============================================================================================
# Commands
# ==============================================================================================
def _run(args: argparse.Namespace) -> int:
    seed = _int(args.seed, "--seed")
    suppress = _indices(args.suppress, "--suppress")
    directory = _scenario_dir(args)
    _check_scenario(args.scenario, directory)
    out: Path = args.out or DEFAULT_OUT / args.scenario / f"seed-{seed}"
    result = run_scenario(
        args.scenario,
        seed,
        out,
        suppress=suppress,
        message_events=not args.no_message_events,
        scenario_dir=directory,
    )
    print(f"{result_line(result)} -> {out}")
    if result.ok:
        return 0
    print(failure_text(result, _result_replay(result, directory)))
    return 1


def _sweep_names(args: argparse.Namespace, directory: Path) -> list[str]:
    """The scenarios ``--scenario`` names, in order, without repeats (``all``: every one)."""
    known = _scenarios_in(directory)
    names: list[str] = []
    for item in args.scenario:
        for name in filter(None, (part.strip() for part in item.split(","))):
            wanted = list(known) if name == "all" else [name]
            for one in wanted:
                if one not in known:
                    raise BadInputError(
                        f"no scenario {one!r} in {directory} (known: {', '.join(known) or 'none'})"
                    )
                if one not in names:
                    names.append(one)
    if not names:
        raise BadInputError(f"no scenarios to sweep in {directory}")
    return names


def _sweep(args: argparse.Namespace) -> int:
    directory = _scenario_dir(args)
    names = _sweep_names(args, directory)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        raise BadInputError(f"--seeds: {exc}") from None
    jobs = _int(args.jobs, "--jobs", 1)
    try:
        shard = parse_shard(args.shard)
    except ValueError as exc:
        raise BadInputError(f"--shard: {exc}") from None
    shrink_runs = _int(args.shrink_runs, "--shrink-runs", 0)
    if args.engine == "local" and (args.master or args.py_files):
        raise BadInputError("--master and --py-files are for --engine spark")
    out: str = args.out
    if args.engine == "spark":  # progress is Spark's own bar (the runs return at the end)
        summary = _spark_sweep(args, names, seeds, directory, shard, shrink_runs)
    else:
        total = len(names) * len(shard_seeds(seeds, shard))
        with _progress(total, sys.stderr) as advance:
            summary = sweep(
                names,
                seeds,
                Path(out),
                jobs=jobs,
                scenario_dir=directory,
                message_events=not args.no_message_events,
                keep_passing=args.keep_passing == "yes",
                shard=shard,
                shrink_runs=shrink_runs,
                replay_scenarios=_named_dir(directory),
                on_run=advance,
            )
    print(_table([*summary.per_scenario, summary.total]))
    workers = summary.jobs
    how = (
        f"on Spark {summary.master} ({workers} cores)"
        if summary.engine == "spark"
        else f"with {workers} job{'s' if workers > 1 else ''}"
    )
    resumed = f", {summary.resumed} recorded before" if summary.resumed else ""
    print(
        f"{summary.total.runs} runs{resumed}, {len(summary.failed)} failed, in "
        f"{summary.elapsed_s:.1f} s {how}; summary in {out.rstrip('/')}/{SWEEP_FILE}"
    )
    if summary.failed:
        print("failed runs:")
        for run in summary.failed:
            print(_failed_line(run))
    return 1 if summary.failed else 0


def _spark_sweep(
    args: argparse.Namespace,
    names: Sequence[str],
    seeds: Sequence[int],
    directory: Path,
    shard: tuple[int, int],
    shrink_runs: int,
) -> SweepSummary:
    with tempfile.TemporaryDirectory(prefix="kraft-zip-") as scratch:
        py_files = [] if args.py_files is None else [args.py_files]
        if args.py_files == "auto":
            py_files = [str(build_zip(scratch))]
        try:
            return spark_sweep(
                names,
                seeds,
                args.out,
                master=args.master,
                scenario_dir=directory,
                message_events=not args.no_message_events,
                keep_passing=args.keep_passing == "yes",
                shard=shard,
                shrink_runs=shrink_runs,
                replay_scenarios=_named_dir(directory),
                py_files=py_files,
            )
        except SparkUnavailableError as exc:
            raise BadInputError(str(exc)) from None


def _failed_line(run: SweepRun) -> str:
    why = run.error or ", ".join(run.failure_kinds)
    where = run.run_dir or run.events_file
    line = f"  {run.scenario} seed {run.seed} ({why}): {run.replay}" + (
        f"  [{where}]" if where else ""
    )
    if run.shrunk_replay is not None:
        line += f"\n    shrunk to {run.shrunk_faults} fault(s): {run.shrunk_replay}"
    return line


def _table(rows: Sequence[ScenarioSummary]) -> str:
    header = (
        "scenario",
        "runs",
        "failed",
        "violations",
        "failed exp.",
        "simulated s",
        "wall s",
        "sim/wall",
    )
    cells = [header] + [
        (
            r.scenario,
            str(r.runs),
            str(r.failed),
            str(r.violations),
            str(r.expectations),
            f"{r.simulated_s:.1f}",
            f"{r.wall_s:.1f}",
            f"{r.speedup:.1f}",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        ).rstrip()
        for row in cells
    )


@contextmanager
def _progress(total: int, stream: TextIO) -> Iterator[Callable[[SweepRun], None]]:
    """A progress display on ``stream``: rich's bar on a terminal when rich is installed,
    else a text line (rewritten in place on a terminal, every tenth of the way otherwise)."""
    tty = stream.isatty()
    rich_progress = _optional("rich.progress") if tty else None
    rich_console = _optional("rich.console") if tty else None
    if rich_progress is not None and rich_console is not None:
        with rich_progress.Progress(
            *rich_progress.Progress.get_default_columns(),
            rich_progress.TextColumn("{task.fields[failed]} failed"),
            console=rich_console.Console(file=stream),
        ) as bar:
            task = bar.add_task("sweep", total=total, failed=0)
            failed = 0

            def advance_bar(run: SweepRun) -> None:
                nonlocal failed
                failed += not run.ok
                bar.update(task, advance=1, failed=failed)

            yield advance_bar
        return
    done = failed = 0
    shown = -1
    started = time.perf_counter()

    def advance(run: SweepRun) -> None:
        nonlocal done, failed, shown
        done += 1
        failed += not run.ok
        tenth = done * 10 // max(total, 1)
        if not tty and tenth == shown:
            return
        shown = tenth
        line = f"sweep: {done}/{total} runs, {failed} failed, {time.perf_counter() - started:.1f} s"
        stream.write(f"\r{line}" if tty else f"{line}\n")
        stream.flush()

    yield advance
    if tty and done:
        stream.write("\n")


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _replay(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    recorded = _read_run(run_dir)
    directory = _scenario_dir(args)
    _check_scenario(recorded.scenario, directory)
    with tempfile.TemporaryDirectory(prefix="kraft-replay-") as tmp:
        again = run_scenario(
            recorded.scenario,
            recorded.seed,
            tmp,
            suppress=recorded.suppressed,
            message_events=recorded.message_events,
            scenario_dir=directory,
        )
        if again.digest == recorded.digest and _outcome(again) == _outcome(recorded):
            print(f"identical: {result_line(again)}")
            return 0
        print(f"different: {result_line(recorded)} was recorded, the replay gives")
        print(f"           {result_line(again)}")
        print(
            _first_difference(
                run_dir / EVENTS_FILE, Path(tmp) / EVENTS_FILE, _outcome(recorded), _outcome(again)
            )
        )
    return 1


def _outcome(result: RunResult) -> tuple[Any, ...]:
    return (result.ok, result.violations, result.expectations, result.faults, result.events)


def _first_difference(
    recorded: Path, replayed: Path, recorded_outcome: Any, replayed_outcome: Any
) -> str:
    if not recorded.is_file():
        return f"(no {recorded} to compare line by line)"
    with recorded.open("rb") as a, replayed.open("rb") as b:
        number = 0
        while True:
            number += 1
            line_a, line_b = a.readline(), b.readline()
            if line_a != line_b:
                return (
                    f"the event logs differ first at line {number}:\n"
                    f"  recorded: {line_a.decode(errors='replace').rstrip() or '(end of log)'}\n"
                    f"  replayed: {line_b.decode(errors='replace').rstrip() or '(end of log)'}"
                )
            if not line_a:
                break
    if recorded_outcome != replayed_outcome:
        return "the event logs are the same, but run.json records another outcome"
    return "the event logs are the same, but run.json records another digest"


def _shrink(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    original = _read_run(run_dir)
    if original.ok:
        raise BadInputError(f"the run in {run_dir} passed: nothing to shrink")
    max_runs = _int(args.max_runs, "--max-runs", 2)
    directory = _scenario_dir(args)
    _check_scenario(original.scenario, directory)
    out: Path = args.out or run_dir.with_name(run_dir.name + "-shrunk")
    tty = sys.stderr.isatty()
    tried = 0

    def progress(result: RunResult) -> None:
        nonlocal tried
        tried += 1
        if tty:
            sys.stderr.write(
                f"\rshrink: run {tried}, {len(injected_faults(result))} faults injected, "
                f"{'failed' if not result.ok else 'passed'}   "
            )
            sys.stderr.flush()

    try:
        shrunk = shrink(
            original, scenario_dir=directory, out_dir=out, max_runs=max_runs, on_run=progress
        )
    finally:
        if tty and tried:
            sys.stderr.write("\n")
    before = len(injected_faults(original))
    remaining = shrunk.remaining_faults
    how = "1-minimal" if shrunk.minimal else f"stopped at --max-runs {max_runs}, not minimal"
    print(
        f"shrunk {original.scenario} seed {original.seed}: {before} faults -> {len(remaining)} "
        f"in {shrunk.runs} runs ({how}); failing with "
        f"{', '.join(sorted(shrunk.result.failure_kinds & original.failure_kinds))}"
    )
    print("remaining faults:" if remaining else "remaining faults: none")
    for fault in remaining:
        print(_fault_line(fault))
    print(f"{result_line(shrunk.result)} -> {out}")
    print(f"replay: {_result_replay(shrunk.result, directory)}")
    scenarios = "" if _is_default_dir(directory) else f" --scenarios {directory}"
    print(f"        kraft sim replay {out}{scenarios}")
    return 0


def _list(args: argparse.Namespace) -> int:
    scenarios = _scenarios_in(_scenario_dir(args))
    width = max((len(name) for name in scenarios), default=0)
    # Descriptions wrap at word boundaries under their column, to the terminal's width.
    text_width = max(40, shutil.get_terminal_size((100, 24)).columns - width - 2)
    for name, the_scenario in scenarios.items():
        lines = textwrap.wrap(the_scenario.description, text_width) or [""]
        print(f"{name.ljust(width)}  {lines[0]}".rstrip())
        for line in lines[1:]:
            print(f"{'':{width}}  {line}")
    return 0
