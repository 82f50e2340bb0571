"""Benchmark of the Spark analysis: events per second on local Spark, JSON Lines vs Parquet
(issue 7, item 5).

The input: a real sweep (scenarios x seeds, message events on), replicated under new run ids
(``seed`` + k x 100000 in ``run_id`` and ``seed``) until it holds ``--events`` events. Then the
whole job (:func:`kraft.analysis.job.analyze`: metrics, safety checks, tables, plots, report)
runs on the JSON Lines, then once more on the same events converted to Parquet. The Spark
session is started (and warmed on the base sweep) before timing. Each timed analysis also
reports how many Spark jobs and stages it ran (Spark's status tracker) and the CPU seconds the
Spark JVM spent on it (``/proc``: unlike wall time, the load of a shared machine does not
inflate it), and the output the load average (the wall-clock figures move with it). Files go
to ``--dir`` and are deleted at the end.

Run: ``.venv/bin/python tests/benchmarks/bench_analysis.py [--events N] [--master local[2]]``
(``make bench`` runs it with 2 million events). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kraft.analysis import spark_session
from kraft.analysis.job import AnalysisResult, analyze
from kraft.simulation.sweep import parse_seeds, sweep

SCENARIOS = ("leader_failure", "lossy_network", "rolling_restarts", "long_follower_isolation")


def replicate(base: Path, out: Path, events: int) -> int:
    """Copy the runs of ``base`` under new run ids into ``out`` until ``events`` events;
    the number written."""
    logs = sorted(base.glob("*/seed-*/events.jsonl"))
    written, copy = 0, 0
    while written < events:
        for log in logs:
            scenario, seed = log.parent.parent.name, int(log.parent.name.removeprefix("seed-"))
            new_seed = seed + copy * 100_000
            data = log.read_bytes().replace(
                f'"run_id":"{scenario}/{seed}","seed":{seed},'.encode(),
                f'"run_id":"{scenario}/{new_seed}","seed":{new_seed},'.encode(),
            )
            target = out / scenario / f"seed-{new_seed}" / "events.jsonl"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            written += data.count(b"\n")
            if written >= events:
                break
        copy += 1
    return written


def jvm_cpu_s(spark: Any) -> float:
    """The CPU seconds (user and system) the driver's JVM has used so far (Linux ``/proc``)."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    # The fields after the command name (which may hold spaces): utime and stime are 14, 15.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def counted(spark: Any, group: str, job: Callable[[], AnalysisResult]) -> dict[str, Any]:
    """Run ``job`` as Spark job group ``group``: its time, events/s, the JVM's CPU seconds
    and how many Spark jobs and stages it ran (stages whose shuffle output was reused,
    skipped, not counted)."""
    context = spark.sparkContext
    context.setJobGroup(group, group)
    cpu_before = jvm_cpu_s(spark)
    result = job()
    jvm_cpu = jvm_cpu_s(spark) - cpu_before
    tracker = context.statusTracker()
    jobs = tracker.getJobIdsForGroup(group)
    infos = [tracker.getJobInfo(job_id) for job_id in jobs]
    stages = {stage for info in infos if info is not None for stage in info.stageIds}
    ran = [s for s in map(tracker.getStageInfo, stages) if s is not None and s.numCompletedTasks]
    return {
        "s": round(result.elapsed_s, 1),
        "events_per_s": round(result.events_per_s),
        "events": result.events,
        "spark_jobs": len(jobs),
        "spark_stages": len(ran),
        "jvm_cpu_s": round(jvm_cpu, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--seeds", default="1-10", help="seeds of the base sweep")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/kraft-bench-analysis"))
    parser.add_argument("--keep", action="store_true", help="do not delete --dir at the end")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    base, runs = args.dir / "base", args.dir / "runs"
    try:
        started = time.perf_counter()
        sweep(list(SCENARIOS), parse_seeds(args.seeds), base, jobs=2)
        total = replicate(base, runs, args.events)
        generated_s = time.perf_counter() - started
        size = sum(p.stat().st_size for p in runs.rglob("events.jsonl"))
        spark = spark_session(args.master)
        analyze(spark, str(base), args.dir / "warm")  # JVM warm-up, not timed
        json_run = counted(
            spark, "json", lambda: analyze(spark, str(runs), args.dir / "report-json")
        )
        started = time.perf_counter()
        converted = args.dir / "report-parquet"
        parquet_run = analyze(spark, str(runs), converted, save_events=True)
        convert_and_analyze_s = time.perf_counter() - started
        parquet_only = counted(
            spark,
            "parquet",
            lambda: analyze(spark, str(converted / "events"), args.dir / "report-parquet2"),
        )
        results = {
            "events": total,
            "json_bytes": size,
            "generated_s": round(generated_s, 1),
            "master": args.master,
            "load": os.getloadavg()[0],
            "json": json_run,
            "json_to_parquet_then_analyze": {"s": round(convert_and_analyze_s, 1)},
            "parquet": parquet_only,
        }
        assert json_run["events"] == parquet_run.events == parquet_only["events"] == total
        spark.stop()
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"analysis: {total:,} events ({size / 1e6:,.0f} MB of JSON Lines) on {args.master}, "
        f"load average {results['load']:.1f}"
    )
    for name, label in (("json", "JSON Lines"), ("parquet", "Parquet")):
        run = results[name]
        print(
            f"  {label:<10}  {run['s']:>7} s  {run['events_per_s']:>10,} events/s  "
            f"{run['spark_jobs']} Spark jobs, {run['spark_stages']} stages, "
            f"{run['jvm_cpu_s']} JVM CPU s"
        )
    print(
        f"  (converting JSON to Parquet and analysing: "
        f"{results['json_to_parquet_then_analyze']['s']} s)"
    )


if __name__ == "__main__":
    main()
