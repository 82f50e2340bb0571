"""Sweeps: many scenarios times many seeds, in worker processes, summed up per scenario.

Each run is :func:`~kraft.simulation.scenario.run_scenario` into ``OUT/<scenario>/seed-<N>``
in a worker process (started with ``forkserver`` where the platform has it, else ``spawn``: a
forked copy of a parent that already ran scenarios would share nothing useful and may hold
locks). A worker returns a small :class:`SweepRun`, never the event log; a run that raises
(a livelock, a scenario bug) is a failed run whose ``error`` says why, not a failed sweep.
:func:`parse_seeds` reads the seed syntax of ``kraft sim sweep --seeds``.
"""

from __future__ import annotations

import multiprocessing
import shutil
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path

import msgspec

from kraft.simulation.cluster import SimulationError
from kraft.simulation.scenario import run_scenario

__all__ = [
    "SWEEP_FILE",
    "ScenarioSummary",
    "SweepRun",
    "SweepSummary",
    "format_seeds",
    "parse_seeds",
    "run_dir",
    "run_one",
    "summarize",
    "sweep",
]

#: The summary a sweep writes next to its runs.
SWEEP_FILE = "sweep.json"
#: The most seeds one ``--seeds`` expression may name (a typo guard: ``1-10000000``).
MAX_SEEDS = 1_000_000


def parse_seeds(text: str) -> list[int]:
    """The seeds of ``5``, ``1-1000``, ``1,2,9`` or ``1-10,20``: ascending, without repeats.

    Raises :class:`ValueError` with a one-line message for anything else.
    """
    seeds: set[int] = set()
    for item in text.split(","):
        part = item.strip()
        if not part:
            raise ValueError(f"bad seeds {text!r}: an empty item")
        low_text, dash, high_text = part.partition("-")
        try:
            low = int(low_text)
            high = int(high_text) if dash else low
        except ValueError:
            raise ValueError(
                f"bad seeds {text!r}: {part!r} is not N or N-M (seeds are integers >= 0)"
            ) from None
        if high < low:
            raise ValueError(f"bad seeds {text!r}: the range {part!r} is empty")
        if high - low + 1 + len(seeds) > MAX_SEEDS:
            raise ValueError(f"bad seeds {text!r}: more than {MAX_SEEDS} seeds")
        seeds.update(range(low, high + 1))
    return sorted(seeds)


def format_seeds(seeds: Iterable[int]) -> str:
    """``seeds`` in the syntax :func:`parse_seeds` reads, runs collapsed: ``1-10,20``."""
    ordered = sorted(set(seeds))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def run_dir(out_dir: Path, scenario: str, seed: int) -> Path:
    """Where a sweep puts one run."""
    return out_dir / scenario / f"seed-{seed}"


class SweepRun(msgspec.Struct, frozen=True, kw_only=True):
    """One run of a sweep, as the worker reports it."""

    scenario: str
    seed: int
    ok: bool
    violations: int = 0
    expectations: int = 0
    failure_kinds: list[str] = msgspec.field(default_factory=list)
    events: int = 0
    simulated_ms: int = 0
    wall_s: float = 0.0
    digest: str = ""
    #: Set when the run raised instead of finishing: the exception's last line.
    error: str | None = None
    run_dir: str = ""


def run_one(
    scenario: str,
    seed: int,
    out_dir: str,
    scenario_dir: str | None,
    message_events: bool,
    keep_passing: bool = True,
) -> SweepRun:
    """Run one scenario and seed into ``out_dir`` (the worker's entry point: plain arguments,
    a plain result)."""
    directory = Path(out_dir)
    started = time.perf_counter()
    try:
        result = run_scenario(
            scenario,
            seed,
            directory,
            message_events=message_events,
            scenario_dir=scenario_dir,
        )
    except Exception as exc:  # a crashed run is a failed run, not a crashed sweep
        where = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return SweepRun(
            scenario=scenario,
            seed=seed,
            ok=False,
            failure_kinds=["error"],
            wall_s=round(time.perf_counter() - started, 3),
            error=where,
            run_dir=out_dir,
        )
    if result.ok and not keep_passing:
        shutil.rmtree(directory, ignore_errors=True)
    return SweepRun(
        scenario=scenario,
        seed=seed,
        ok=result.ok,
        violations=len(result.violations),
        expectations=len(result.expectations),
        failure_kinds=sorted(result.failure_kinds),
        events=result.events,
        simulated_ms=result.simulated_ms,
        wall_s=result.wall_s,
        digest=result.digest,
        error=None if result.error is None else result.error.splitlines()[-1],
        run_dir=out_dir,
    )


class ScenarioSummary(msgspec.Struct, kw_only=True):
    """The sums over the runs of one scenario (or of the whole sweep)."""

    scenario: str
    runs: int = 0
    failed: int = 0
    violations: int = 0
    expectations: int = 0
    events: int = 0
    simulated_s: float = 0.0
    wall_s: float = 0.0

    @property
    def speedup(self) -> float:
        """Simulated seconds per wall second (0 when nothing ran)."""
        return self.simulated_s / self.wall_s if self.wall_s > 0 else 0.0

    def add(self, run: SweepRun) -> None:
        self.runs += 1
        self.failed += not run.ok
        self.violations += run.violations
        self.expectations += run.expectations
        self.events += run.events
        self.simulated_s += run.simulated_ms / 1000
        self.wall_s += run.wall_s


class SweepSummary(msgspec.Struct, kw_only=True):
    """``sweep.json``: what was swept, the sums per scenario and in total, the failed runs."""

    scenarios: list[str]
    #: The seeds, in ``--seeds`` syntax (``1-1000``).
    seeds: str
    jobs: int
    scenario_dir: str | None
    message_events: bool
    per_scenario: list[ScenarioSummary]
    total: ScenarioSummary
    failed: list[SweepRun]
    #: Wall seconds of the whole sweep (the runs' own wall seconds are in ``total.wall_s``).
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return not self.failed


def summarize(
    runs: Iterable[SweepRun],
    scenarios: Sequence[str],
    seeds: Sequence[int],
    *,
    jobs: int,
    scenario_dir: str | None,
    message_events: bool,
    elapsed_s: float,
) -> SweepSummary:
    """Sum ``runs`` per scenario (in ``scenarios`` order) and in total."""
    ordered = sorted(runs, key=lambda r: (scenarios.index(r.scenario), r.seed))
    per = {name: ScenarioSummary(scenario=name) for name in scenarios}
    total = ScenarioSummary(scenario="total")
    for run in ordered:
        per[run.scenario].add(run)
        total.add(run)
    for summary in [*per.values(), total]:
        summary.simulated_s = round(summary.simulated_s, 3)
        summary.wall_s = round(summary.wall_s, 3)
    return SweepSummary(
        scenarios=list(scenarios),
        seeds=format_seeds(seeds),
        jobs=jobs,
        scenario_dir=scenario_dir,
        message_events=message_events,
        per_scenario=list(per.values()),
        total=total,
        failed=[r for r in ordered if not r.ok],
        elapsed_s=round(elapsed_s, 3),
    )


def _pool_context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def sweep(
    scenarios: Sequence[str],
    seeds: Sequence[int],
    out_dir: Path | str,
    *,
    jobs: int = 1,
    scenario_dir: Path | str | None = None,
    message_events: bool = True,
    keep_passing: bool = True,
    on_run: Callable[[SweepRun], None] | None = None,
) -> SweepSummary:
    """Run every scenario with every seed into ``out_dir/<scenario>/seed-<N>``, ``jobs`` at a
    time in worker processes (``jobs=1`` runs them in this process), and write
    ``out_dir/sweep.json``. ``on_run`` hears of each run as it finishes (progress).

    ``keep_passing=False`` deletes the directories of the runs that passed.
    """
    if jobs < 1:
        raise SimulationError(f"--jobs must be at least 1, got {jobs}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    directory = None if scenario_dir is None else str(Path(scenario_dir).resolve())
    tasks = [
        (name, seed, str(run_dir(out, name, seed)), directory, message_events, keep_passing)
        for name in scenarios
        for seed in seeds
    ]
    runs: list[SweepRun] = []

    def finished(run: SweepRun) -> None:
        runs.append(run)
        if on_run is not None:
            on_run(run)

    started = time.perf_counter()
    if jobs == 1:
        for task in tasks:
            finished(run_one(*task))
    else:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=_pool_context()) as pool:
            # At most a few tasks per worker in flight: Ctrl-C stops soon, memory stays flat.
            pending: set[Future[SweepRun]] = set()
            queue = iter(tasks)
            for task in queue:
                pending.add(pool.submit(run_one, *task))
                if len(pending) >= 4 * jobs:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        finished(future.result())
            for future in wait(pending).done:
                finished(future.result())
    summary = summarize(
        runs,
        scenarios,
        seeds,
        jobs=jobs,
        scenario_dir=directory,
        message_events=message_events,
        elapsed_s=time.perf_counter() - started,
    )
    (out / SWEEP_FILE).write_bytes(msgspec.json.format(msgspec.json.encode(summary)) + b"\n")
    return summary
