"""``kraft analyze``: the Spark analysis of simulation event logs (extra: ``kraft[spark]``).

``kraft analyze RUNS_DIR --out REPORT_DIR [--master local[*] | spark://host:port]`` reads the
event logs of a sweep, writes Parquet tables, plots and ``report.md`` to REPORT_DIR and prints a
summary per scenario. The job itself is :mod:`kraft.analysis.job`, which ``spark-submit`` also
runs unchanged.

Exit codes: 0 when the logs pass every safety check, 1 when they show a violation (or Spark is
missing), 2 for input the command cannot use (no event log under RUNS_DIR): one ``error:`` line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kraft.analysis.events import NOT_FOUND_HINT, find_event_logs, parquet_dataset
from kraft.analysis.job import add_arguments, run

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft analyze`` to the command line."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "analyze",
        help="analyse simulation event logs with Spark (needs kraft[spark])",
        description="Read the event logs under RUNS_DIR (a `kraft sim sweep` directory) with "
        "Spark, compute election, recovery, unavailability, latency and safety "
        "metrics, and write report.md, plots/ and Parquet tables/ to REPORT_DIR. "
        "Exit code 1 if the logs show a safety violation.",
    )
    add_arguments(parser)
    parser.set_defaults(handler=_analyze)


def _analyze(args: argparse.Namespace) -> int:
    source = str(args.runs_dir)
    if "://" not in source:
        local = Path(source)
        if not local.exists():
            print(f"error: {local} does not exist", file=sys.stderr)
            return 2
        if parquet_dataset(local) is None and not find_event_logs(local):
            print(f"error: no event log in {local}: {NOT_FOUND_HINT}", file=sys.stderr)
            return 2
    try:
        return run(args)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
