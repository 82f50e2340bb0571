"""The analysis job: event logs in, Parquet tables, ``report.md`` and a summary out.

The same code runs three ways:

- ``kraft analyze RUNS_DIR --out REPORT_DIR`` (embedded local Spark, ``local[*]``);
- ``kraft analyze ... --master spark://host:7077`` (this process is the driver of a cluster);
- ``spark-submit --master spark://host:7077 $(python -m kraft.analysis.job --path) RUNS_DIR
  --out REPORT_DIR``: this file, unchanged, as the application.

Only DataFrame code runs on the executors (no Python UDF), so they need Spark and nothing of
kraft; the driver needs kraft and the ``spark`` extra. Paths must be readable by the driver and
every executor (one machine, a shared file system, or a URI such as ``hdfs://``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraft.analysis import controller, metrics, safety
from kraft.analysis.events import analysed, load_events, project, with_details
from kraft.analysis.report import SUMMARY_COLUMNS, ReportData, format_table, write_report
from kraft.analysis.session import DEFAULT_MASTER, SparkUnavailableError, spark_session

__all__ = ["TABLES", "AnalysisResult", "add_arguments", "analyze", "main"]

Progress = Callable[[str], None]

#: The Parquet tables written under ``REPORT_DIR/tables``, with what a row is.
TABLES: dict[str, str] = {
    "runs": "one run: shape, events, first leader, elections, unavailability, throughput",
    "elections": "one node becoming leader: epoch, when, campaign length",
    "faults": "one injected fault (not a repair): kind, targets, time until a leader commits again",
    "unavailability": "one window without a leader commit while the workload appended",
    "commit_latency": "latency percentiles by scenario, voters and scope (leader, voters)",
    "recovery_by_fault": "recovery percentiles by fault kind",
    "recovery_by_scenario": "recovery percentiles by scenario and fault kind",
    "by_scenario": "the summary per scenario",
    "scenario_parameters": "what a scenario's runs were given: shape, links, faults by kind",
    "by_cluster_size": "elections, latency and throughput by number of voters",
    "violations": "one safety violation found in the logs",
    "controller": "controller metrics by scenario, metric and call (empty without a controller)",
}

#: How many rows of violations and windows the report lists.
_LISTED = 20


@dataclass(frozen=True)
class AnalysisResult:
    """What :func:`analyze` found and wrote."""

    events: int
    runs: int
    violations: int
    summary: Sequence[Mapping[str, Any]]
    report: Path
    elapsed_s: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.elapsed_s if self.elapsed_s > 0 else 0.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's arguments (``kraft analyze`` and ``spark-submit job.py`` take the same)."""
    parser.add_argument(
        "runs_dir",
        metavar="RUNS_DIR",
        help="a sweep directory (<scenario>/seed-<N>/events.jsonl), a run "
        "directory, a Parquet directory of events, or a URI",
    )
    parser.add_argument(
        "--out",
        metavar="REPORT_DIR",
        type=Path,
        default=Path("report"),
        help="where report.md, plots/ and tables/ go (default: report)",
    )
    parser.add_argument(
        "--master",
        metavar="URL",
        default=None,
        help=f"local[N], local[*] or spark://host:port (default: "
        f"{DEFAULT_MASTER}, or what spark-submit set)",
    )
    parser.add_argument(
        "--format",
        choices=("auto", "json", "parquet"),
        default="auto",
        help="the input format (default: auto, Parquet for a directory of Parquet files)",
    )
    parser.add_argument(
        "--save-events",
        action="store_true",
        help="first convert the events to Parquet in REPORT_DIR/events, then "
        "analyse that (a later run can read it, much faster than JSON)",
    )
    parser.add_argument(
        "--gap-ms",
        type=int,
        default=metrics.DEFAULT_MIN_GAP_MS,
        metavar="MS",
        help="a commit gap this long while the workload appends is "
        f"unavailability (default: {metrics.DEFAULT_MIN_GAP_MS})",
    )
    parser.add_argument(
        "--timeline-run",
        metavar="RUN_ID",
        default=None,
        help="the run whose role timeline to draw, e.g. chaos/7 (default: "
        "the run with the most elections)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _rows(frame: Any) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.collect()]


def analyze(
    spark: Any,
    source: str,
    out_dir: Path,
    *,
    fmt: str = "auto",
    save_events: bool = False,
    min_gap_ms: int = metrics.DEFAULT_MIN_GAP_MS,
    timeline_run: str | None = None,
    progress: Progress | None = None,
) -> AnalysisResult:
    """Run the whole analysis of ``source`` on ``spark``; write ``out_dir``.

    Raises ``FileNotFoundError`` when a local ``source`` holds no event log.
    """
    from pyspark.sql import functions as sf

    say = progress or (lambda _message: None)
    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    tables_dir = out_dir / "tables"

    def step(message: str) -> None:
        say(f"[{time.perf_counter() - started:6.1f} s] {message}")

    step(f"reading {source}")
    raw = load_events(spark, source, fmt)
    if save_events:
        step(f"converting the events to Parquet in {out_dir / 'events'}")
        raw.write.mode("overwrite").parquet(str(out_dir / "events"))
        raw = load_events(spark, str(out_dir / "events"), "parquet")
    # One read of the input into a cache of atomic columns (read column by column): the run
    # counts and the analysed events (a quarter of them, cached the same way) come from it,
    # then it goes, and every later pass reads the smaller one.
    everything = project(raw).cache()
    runs = metrics.run_info(with_details(everything)).cache()
    counts = runs.agg(sf.sum("events").alias("events"), sf.count(sf.lit(1)).alias("runs")).first()
    total, run_count = int(counts["events"] or 0), int(counts["runs"])
    cached = analysed(everything).cache()
    cached.count()
    everything.unpersist()
    events = with_details(cached)
    step(f"{total:,} events read, the analysed ones cached; computing run metrics")

    elections = metrics.elections(events).cache()
    recoveries = metrics.fault_recovery(events).cache()
    windows = metrics.unavailability(events, min_gap_ms).cache()
    batches = metrics.committed_batches(events, runs).cache()
    table = metrics.run_table(runs, elections, windows, batches, recoveries).cache()
    step(f"{run_count} runs; checking safety across nodes")
    violations = safety.violations(events).cache()
    violation_counts = {
        r["check"]: int(r["n"])
        for r in _rows(violations.groupBy("check").count().withColumnRenamed("count", "n"))
    }

    step("aggregating by scenario, cluster size and fault kind")
    latency = metrics.commit_latency(batches)
    frames: dict[str, Any] = {
        "runs": table,
        "elections": elections,
        "faults": recoveries,
        "unavailability": windows,
        "commit_latency": latency,
        "recovery_by_fault": metrics.by_fault(recoveries),
        "recovery_by_scenario": metrics.by_fault(recoveries, ("scenario", "fault")),
        "by_scenario": metrics.by_scenario(
            table, metrics.commit_latency(batches, ("scenario",)), violations
        ),
        "by_cluster_size": metrics.by_cluster_size(table),
        "scenario_parameters": metrics.scenario_parameters(events),
        "violations": violations,
        "controller": controller.controller_summary(events),
    }
    # The aggregates are computed once, into the cache, collected from it for the report and
    # written from it: no Spark job reads a table back, and the report's order (each table's
    # key is unique) is set here, not by a distributed sort.
    small = {name: frames[name].cache() for name in _COLLECTED}
    collected = {name: _sorted(_rows(frame), _COLLECTED[name]) for name, frame in small.items()}
    step(f"writing Parquet tables to {tables_dir}")
    for name, frame in frames.items():
        small.get(name, frame).write.mode("overwrite").parquet(str(tables_dir / name))

    step("collecting the aggregates and drawing the plots")
    chosen = timeline_run or _most_eventful_run(table)
    timeline, timeline_faults = _timeline(events, chosen) if chosen else ([], [])
    data = ReportData(
        source=source,
        master=str(spark.sparkContext.master),
        runs=run_count,
        events=total,
        elapsed_s=0.0,
        by_scenario=collected["by_scenario"],
        scenario_parameters=collected["scenario_parameters"],
        by_cluster_size=collected["by_cluster_size"],
        commit_latency=collected["commit_latency"],
        recovery_by_fault=collected["recovery_by_fault"],
        longest_windows=_rows(
            windows.orderBy(windows["duration_ms"].desc(), "run_id").limit(_LISTED)
        ),
        violation_counts=violation_counts,
        violations=_rows(violations.orderBy("run_id", "time_ms", "check").limit(_LISTED)),
        election_histogram=_rows(metrics.election_histogram(elections)),
        commit_cdf=_rows(metrics.commit_latency_cdf(batches)),
        controller=collected["controller"],
        timeline_run=chosen,
        timeline=timeline,
        timeline_faults=timeline_faults,
        tables=TABLES,
    )
    data.elapsed_s = time.perf_counter() - started
    report = write_report(data, out_dir)
    for frame in (cached, runs, elections, recoveries, windows, batches, table, violations):
        frame.unpersist()
    for frame in small.values():
        frame.unpersist()
    elapsed = time.perf_counter() - started
    step(f"done: {report}")
    return AnalysisResult(
        events=total,
        runs=run_count,
        violations=sum(violation_counts.values()),
        summary=data.by_scenario,
        report=report,
        elapsed_s=elapsed,
    )


#: The aggregated tables the report shows whole, by the key (unique in each) it lists them by.
_COLLECTED: dict[str, tuple[str, ...]] = {
    "commit_latency": ("scenario", "voters", "scope"),
    "recovery_by_fault": ("fault",),
    "by_scenario": ("scenario",),
    "scenario_parameters": ("scenario",),
    "by_cluster_size": ("voters",),
    "controller": ("scenario", "metric", "op"),
}


def _sorted(rows: list[dict[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """``rows`` in the order of Spark's ``orderBy(*keys)``: ascending, nulls first."""
    return sorted(rows, key=lambda row: [(row[k] is not None, row[k]) for k in keys])


def _most_eventful_run(runs: Any) -> str | None:
    first = runs.orderBy(runs["elections"].desc(), runs["faults"].desc(), "run_id").first()
    return None if first is None else str(first["run_id"])


def _timeline(events: Any, run_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The states and the faults of one run (a few hundred rows: the run's role changes)."""
    from pyspark.sql import functions as sf

    one = events.where(sf.col("run_id") == run_id)
    states = one.where(sf.col("kind") == "state_changed").select("seq", "time_ms", "node", "role")
    faults = one.where(sf.col("kind") == "fault_injected").select(
        "seq", "time_ms", sf.col("details.fault").alias("fault")
    )
    # In seq order (unique within a run), sorted here: a few hundred rows need no Spark sort.
    return _sorted(_rows(states), ("seq",)), _sorted(_rows(faults), ("seq",))


def summary_text(result: AnalysisResult) -> str:
    """The table printed at the end, and where the report is."""
    return (
        format_table(result.summary, SUMMARY_COLUMNS)
        + f"\n{result.runs} runs, {result.events:,} events in {result.elapsed_s:.1f} s "
        f"({result.events_per_s:,.0f} events/s), {result.violations} safety violations"
        + f"\nreport: {result.report}"
    )


def run(args: argparse.Namespace) -> int:
    """Run the job for parsed :func:`add_arguments` arguments: 0, or 1 if the logs show a
    safety violation. Raises ``FileNotFoundError`` for a source without event logs."""

    def say(message: str) -> None:
        print(f"analyze: {message}", file=sys.stderr, flush=True)

    progress = None if args.quiet else say
    spark = spark_session(args.master, progress=not args.quiet and sys.stderr.isatty())
    result = analyze(
        spark,
        str(args.runs_dir),
        args.out,
        fmt=args.format,
        save_events=args.save_events,
        min_gap_ms=args.gap_ms,
        timeline_run=args.timeline_run,
        progress=progress,
    )
    print(summary_text(result))
    return 1 if result.violations else 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``spark-submit`` entry point (and ``python -m kraft.analysis.job``).
    ``--path`` prints this file's path, for ``spark-submit``."""
    if argv is None:
        argv = sys.argv[1:]
    if list(argv) == ["--path"]:
        print(Path(__file__).resolve())
        return 0
    parser = argparse.ArgumentParser(
        prog="kraft.analysis.job", description="Spark analysis of kraft simulation logs."
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (FileNotFoundError, SparkUnavailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, FileNotFoundError) else 1


if __name__ == "__main__":
    sys.exit(main())
