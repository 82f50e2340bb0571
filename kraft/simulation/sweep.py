"""Sweeps: many scenarios times many seeds, in worker processes, summed up per scenario.

Each run is :func:`~kraft.simulation.scenario.run_scenario` into ``OUT/<scenario>/seed-<N>``
in a worker process (started with ``forkserver`` where the platform has it, else ``spawn``: a
forked copy of a parent that already ran scenarios would share nothing useful and may hold
locks). A worker returns a small :class:`SweepRun`, never the event log; a run that raises
(a livelock, a scenario bug) is a failed run whose ``error`` says why, not a failed sweep.
:func:`parse_seeds` reads the seed syntax of ``kraft sim sweep --seeds``.

Both engines (this process pool and the Spark engine, :mod:`kraft.spark_sweep`) record every
finished run as one line of ``OUT/runs/*.jsonl`` as it finishes: a sweep started again into the
same ``OUT`` skips the runs recorded there (:func:`read_runs`), so a sweep killed half-way
resumes where it stopped. ``--shard K/N`` (:func:`shard_seeds`) runs every N-th seed, for
splitting one sweep across machines or clusters.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path

import msgspec

from kraft.simulation.cluster import SimulationError
from kraft.simulation.cluster import replay_command as cluster_replay_command
from kraft.simulation.scenario import RunResult, run_scenario
from kraft.simulation.shrink import injected_faults, shrink

__all__ = [
    "RUNS_DIR",
    "SWEEP_FILE",
    "RunOptions",
    "ScenarioSummary",
    "SweepRun",
    "SweepSummary",
    "decode_runs",
    "encode_run",
    "format_seeds",
    "parse_seeds",
    "parse_shard",
    "read_runs",
    "replay_command",
    "run_dir",
    "run_one",
    "shard_seeds",
    "summarize",
    "sweep",
    "write_summary",
]

logger = logging.getLogger(__name__)

#: The summary a sweep writes next to its runs.
SWEEP_FILE = "sweep.json"
#: The directory of ``OUT`` where each engine records the runs it finished (JSON Lines of
#: :class:`SweepRun`), what a resumed sweep skips.
RUNS_DIR = "runs"
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


def parse_shard(text: str) -> tuple[int, int]:
    """``K/N`` (1 <= K <= N) as ``(K, N)``; :class:`ValueError` with a one-line message else."""
    k_text, slash, n_text = text.partition("/")
    try:
        k, n = int(k_text), int(n_text)
    except ValueError:
        raise ValueError(f"bad shard {text!r}: expected K/N, such as 1/4") from None
    if not slash or not 1 <= k <= n:
        raise ValueError(f"bad shard {text!r}: expected K/N with 1 <= K <= N")
    return k, n


def shard_seeds(seeds: Sequence[int], shard: tuple[int, int]) -> list[int]:
    """Shard ``K/N`` of ``seeds``: every N-th seed from the K-th, so that the N shards of one
    ``--seeds`` are disjoint, cover it, and each gets its share of every scenario."""
    k, n = shard
    return list(seeds[k - 1 :: n])


def replay_command(
    scenario: str,
    seed: int,
    *,
    suppress: Sequence[int] = (),
    message_events: bool = True,
    scenarios: str | None = None,
) -> str:
    """The ``kraft sim run`` command line that runs this again (``scenarios``: the
    ``--scenarios`` directory to name, None when ``kraft sim`` finds it by default)."""
    command = cluster_replay_command(
        scenario, seed, suppress=suppress, message_events=message_events
    )
    return command if scenarios is None else f"{command} --scenarios {scenarios}"


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
    #: The ``kraft sim run`` command that runs it again, event for event.
    replay: str = ""
    #: For a failed run whose faults could be shrunk: the command that runs it with only the
    #: faults it needs to fail (``--suppress`` of the others), and how many faults that leaves.
    shrunk_replay: str | None = None
    shrunk_faults: int | None = None
    #: Where its events are: the run directory (local engine), or the Parquet file under
    #: ``OUT`` (Spark engine); empty when they were not kept.
    run_dir: str = ""
    events_file: str = ""


class RunOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What every run of one sweep is given besides its scenario and seed."""

    scenario_dir: str | None
    message_events: bool
    keep_passing: bool = True
    #: The most runs spent shrinking one failed run's faults (0: no shrinking).
    shrink_runs: int = 0
    #: The ``--scenarios`` a replay command names (None: the default catalogue).
    replay_scenarios: str | None = None


def run_one(scenario: str, seed: int, out_dir: str, options: RunOptions) -> SweepRun:
    """Run one scenario and seed into ``out_dir`` (the worker's entry point: plain arguments,
    a plain result)."""
    directory = Path(out_dir)
    replay = replay_command(
        scenario,
        seed,
        message_events=options.message_events,
        scenarios=options.replay_scenarios,
    )
    started = time.perf_counter()
    try:
        result = run_scenario(
            scenario,
            seed,
            directory,
            message_events=options.message_events,
            scenario_dir=options.scenario_dir,
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
            replay=replay,
            run_dir=out_dir,
        )
    kept = not result.ok or options.keep_passing
    if not kept:
        shutil.rmtree(directory, ignore_errors=True)
    shrunk = _shrink(result, options)
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
        replay=replay,
        shrunk_replay=None if shrunk is None else shrunk[0],
        shrunk_faults=None if shrunk is None else shrunk[1],
        run_dir=out_dir if kept else "",
    )


def _shrink(result: RunResult, options: RunOptions) -> tuple[str, int] | None:
    """The replay command of ``result``'s shrunk fault schedule and its number of faults, when
    the run failed with faults injected and shrinking finds a smaller schedule in budget."""
    faults = len(injected_faults(result))
    if result.ok or faults == 0 or options.shrink_runs < 2:
        return None
    try:
        shrunk = shrink(result, scenario_dir=options.scenario_dir, max_runs=options.shrink_runs)
    except SimulationError:  # not reproducible, or a livelock: no schedule to offer
        return None
    remaining = len(shrunk.remaining_faults)
    if remaining >= faults:
        return None
    command = replay_command(
        result.scenario,
        result.seed,
        suppress=shrunk.suppressed,
        message_events=result.message_events,
        scenarios=options.replay_scenarios,
    )
    return command, remaining


def read_runs(out_dir: Path | str) -> dict[tuple[str, int], SweepRun]:
    """The runs recorded in ``out_dir/runs/*.jsonl`` by scenario and seed."""
    runs: dict[tuple[str, int], SweepRun] = {}
    for path in sorted((Path(out_dir) / RUNS_DIR).glob("*.jsonl")):
        for run in decode_runs(path.read_bytes(), str(path)):
            runs[run.scenario, run.seed] = run
    return runs


def decode_runs(data: bytes, source: str) -> list[SweepRun]:
    """The runs of the ``runs/*.jsonl`` file ``source`` (a line torn by a killed sweep is
    skipped, with one log line: that run runs again)."""
    runs: list[SweepRun] = []
    skipped = 0
    for line in data.splitlines():
        try:
            runs.append(_run_decoder.decode(line))
        except msgspec.DecodeError:
            skipped += 1
    if skipped:
        logger.warning("%s: skipped %d unreadable line(s); their runs run again", source, skipped)
    return runs


_run_decoder = msgspec.json.Decoder(SweepRun)


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
    #: The seeds of this shard, in ``--seeds`` syntax (``1-1000``).
    seeds: str
    jobs: int
    scenario_dir: str | None
    message_events: bool
    per_scenario: list[ScenarioSummary]
    total: ScenarioSummary
    failed: list[SweepRun]
    #: Wall seconds of the whole sweep (the runs' own wall seconds are in ``total.wall_s``).
    elapsed_s: float
    #: ``local`` (worker processes) or ``spark``, and the Spark master.
    engine: str = "local"
    master: str | None = None
    #: ``K/N`` of ``--shard``.
    shard: str = "1/1"
    #: Runs found recorded in ``OUT`` and not run again (a resumed sweep).
    resumed: int = 0

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
    engine: str = "local",
    master: str | None = None,
    shard: tuple[int, int] = (1, 1),
    resumed: int = 0,
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
        engine=engine,
        master=master,
        shard=f"{shard[0]}/{shard[1]}",
        resumed=resumed,
    )


def write_summary(out_dir: Path, summary: SweepSummary) -> None:
    """``out_dir/sweep.json``."""
    (out_dir / SWEEP_FILE).write_bytes(msgspec.json.format(msgspec.json.encode(summary)) + b"\n")


def encode_run(run: SweepRun) -> bytes:
    """``run`` as one line of a ``runs/*.jsonl`` file."""
    return msgspec.json.encode(run) + b"\n"


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
    shard: tuple[int, int] = (1, 1),
    shrink_runs: int = 0,
    replay_scenarios: str | None = None,
    on_run: Callable[[SweepRun], None] | None = None,
) -> SweepSummary:
    """Run every scenario with every seed of ``shard`` into ``out_dir/<scenario>/seed-<N>``,
    ``jobs`` at a time in worker processes (``jobs=1`` runs them in this process), and write
    ``out_dir/sweep.json``. Runs already recorded in ``out_dir`` are not run again. ``on_run``
    hears of each run as it finishes (progress).

    ``keep_passing=False`` deletes the directories of the runs that passed; ``shrink_runs``
    bounds the runs spent shrinking each failed run's faults (0: none).
    """
    if jobs < 1:
        raise SimulationError(f"--jobs must be at least 1, got {jobs}")
    out = Path(out_dir)
    (out / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    directory = None if scenario_dir is None else str(Path(scenario_dir).resolve())
    options = RunOptions(
        scenario_dir=directory,
        message_events=message_events,
        keep_passing=keep_passing,
        shrink_runs=shrink_runs,
        replay_scenarios=replay_scenarios,
    )
    mine = shard_seeds(seeds, shard)
    recorded = read_runs(out)
    runs = [recorded[key] for key in ((n, s) for n in scenarios for s in mine) if key in recorded]
    tasks = [
        (name, seed, str(run_dir(out, name, seed)), options)
        for name in scenarios
        for seed in mine
        if (name, seed) not in recorded
    ]
    resumed = len(runs)
    # One file per process and shard: resumed sweeps append, parallel shards never share one.
    log_path = out / RUNS_DIR / f"local-{shard[0]}of{shard[1]}-{os.getpid()}.jsonl"

    started = time.perf_counter()
    with log_path.open("ab") as log:

        def finished(run: SweepRun) -> None:
            runs.append(run)
            log.write(encode_run(run))
            log.flush()
            if on_run is not None:
                on_run(run)

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
        mine,
        jobs=jobs,
        scenario_dir=directory,
        message_events=message_events,
        elapsed_s=time.perf_counter() - started,
        shard=shard,
        resumed=resumed,
    )
    write_summary(out, summary)
    return summary
