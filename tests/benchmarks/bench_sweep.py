"""Benchmark of the sweep engines: runs per second and simulated seconds per wall second.

The same sweep (``--scenarios`` x ``--seeds``, no message events, events kept) runs on:

- ``local -j1`` and ``local -j2``: :func:`kraft.simulation.sweep.sweep`, worker processes;
- ``spark local[1]`` and ``spark local[2]``: ``kraft sim sweep --engine spark`` in its own
  process (a SparkContext's master is fixed for the life of the process);
- ``spark standalone 2x1``: the same through a standalone master and two one-core workers on
  127.0.0.1 (tests/simulation/test_sweep_cluster.py starts them).

Two wall times per engine: the sweep's own (``elapsed_s`` of ``sweep.json``: tasks, Parquet,
the summary), and the whole command (JVM and Python workers starting included), which is what a
small sweep pays. Output goes to ``--dir``, deleted at the end.

Run: ``.venv/bin/python tests/benchmarks/bench_sweep.py [--seeds 1-20] [--skip-cluster]``.
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kraft.simulation.sweep import parse_seeds, sweep

sys.path.insert(0, str(Path(__file__).parents[1] / "simulation"))
from spark_cluster import SPARK_HOME, standalone_cluster

SCENARIOS = ("leader_failure", "lossy_network", "rolling_restarts", "kv_nemesis")
KRAFT = Path(sys.executable).with_name("kraft")


def _spark(master: str, out: Path, args: argparse.Namespace, env: dict[str, str]) -> float:
    """``kraft sim sweep --engine spark`` in its own process; its whole wall time."""
    started = time.perf_counter()
    subprocess.run(
        [
            str(KRAFT),
            *("sim", "sweep", "--engine", "spark", "--master", master),
            *("--scenario", *args.scenarios, "--seeds", args.seeds, "--no-message-events"),
            *("--out", str(out), "--shrink-runs", "0"),
        ],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def _row(name: str, out: Path, whole_s: float) -> dict[str, Any]:
    summary = json.loads((out / "sweep.json").read_text())
    runs, simulated = summary["total"]["runs"], summary["total"]["simulated_s"]
    elapsed = summary["elapsed_s"]
    return {
        "engine": name,
        "runs": runs,
        "sweep_s": elapsed,
        "whole_s": round(whole_s, 1),
        "runs_per_s": round(runs / elapsed, 2),
        "sim_s_per_wall_s": round(simulated / elapsed, 1),
        "runs_per_s_whole": round(runs / whole_s, 2),
        "sim_s_per_wall_s_whole": round(simulated / whole_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    parser.add_argument("--seeds", default="1-20")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/kraft-bench-sweep"))
    parser.add_argument("--skip-cluster", action="store_true", help="no standalone cluster")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    seeds = parse_seeds(args.seeds)
    rows: list[dict[str, Any]] = []
    try:
        for jobs in (1, 2):
            out = args.dir / f"local-{jobs}"
            started = time.perf_counter()
            sweep(args.scenarios, seeds, out, jobs=jobs, message_events=False)
            rows.append(_row(f"local -j{jobs}", out, time.perf_counter() - started))
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        for master in ("local[1]", "local[2]"):
            out = args.dir / f"spark-{master[6]}"
            rows.append(_row(f"spark {master}", out, _spark(master, out, args, env)))
        if not args.skip_cluster:
            java = "-XX:TieredStopAtLevel=1"
            cluster_env = {
                **env,
                "SPARK_HOME": str(SPARK_HOME),
                "SPARK_LOG_DIR": str(args.dir / "logs"),
                "SPARK_NO_DAEMONIZE": "1",
                "SPARK_DAEMON_JAVA_OPTS": java,
                "PYSPARK_SUBMIT_ARGS": f"--conf spark.executor.extraJavaOptions={java} "
                "--conf spark.ui.enabled=false --executor-memory 512m pyspark-shell",
            }
            with standalone_cluster(args.dir, cluster_env, workers=2) as url:
                out = args.dir / "standalone"
                whole = _spark(url, out, args, cluster_env)
                rows.append(_row("spark standalone 2x1", out, whole))
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{len(args.scenarios)} scenarios x {len(seeds)} seeds, no message events "
        f"(load average {os.getloadavg()[0]:.1f})"
    )
    columns = (
        "runs_per_s",
        "sim_s_per_wall_s",
        "sweep_s",
        "runs_per_s_whole",
        "sim_s_per_wall_s_whole",
        "whole_s",
    )
    print(f"{'engine':<22}" + "".join(f"{name:>24}" for name in columns))
    for row in rows:
        print(f"{row['engine']:<22}" + "".join(f"{row[name]:>24}" for name in columns))


if __name__ == "__main__":
    main()
