"""``kraft analyze`` end to end on local Spark: a small real sweep, one log corrupted, in; the
report, the tables, the converted events and the summary out. One job: Spark jobs are slow to
start, so one run checks everything."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kraft.analysis import load_events
from kraft.analysis.job import TABLES
from kraft.cli.main import main
from kraft.simulation.scenario import run_scenario

pytestmark = pytest.mark.spark


def corrupt_first_commit(log: Path) -> None:
    """Append a copy of the log's first ``batch_committed`` with another checksum: a node that
    says it committed another batch at that offset."""
    lines = log.read_text().splitlines(keepends=True)
    event = json.loads(next(line for line in lines if '"batch_committed"' in line))
    event.update(
        seq=len(lines),
        checksum=event["checksum"] ^ 1,
        high_watermark=10**9,
        time_ms=json.loads(lines[-1])["time_ms"],
    )
    lines.insert(len(lines) - 1, json.dumps(event, separators=(",", ":")) + "\n")
    log.write_text("".join(lines))


def _section(report: str, heading: str) -> str:
    """The text of ``report`` from ``heading`` to the next heading."""
    start = report.index(heading)
    end = report.find("\n## ", start + len(heading))
    return report[start:] if end < 0 else report[start:end]


def _row(section: str, first_cell: str) -> dict[str, str]:
    """The row of the section's Markdown table whose first cell is ``first_cell``, by header."""
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] == first_cell:
            return dict(zip(header, cells, strict=True))
    raise AssertionError(f"no row {first_cell!r} in {section}")


def test_analyze_writes_the_report(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = tmp_path / "sweep"
    for scenario in ("leader_failure", "lossy_network"):
        for seed in (1, 2):
            assert run_scenario(scenario, seed, sweep / scenario / f"seed-{seed}").ok
    corrupt_first_commit(sweep / "leader_failure" / "seed-2" / "events.jsonl")
    out = tmp_path / "report"

    # Exit code 1: the logs show a safety violation.
    assert (
        main(["analyze", str(sweep), "--out", str(out), "--master", "local[2]", "--save-events"])
        == 1
    )
    printed = capsys.readouterr()
    assert "reading" in printed.err and "done" in printed.err  # progress, on stderr
    lines = printed.out.splitlines()
    assert lines[0].split()[:3] == ["scenario", "runs", "events"]
    assert [line.split()[:2] for line in lines[1:3]] == [
        ["leader_failure", "2"],
        ["lossy_network", "2"],
    ]
    assert lines[1].split()[-1] == "1" and lines[2].split()[-1] == "0"  # violations
    assert "4 runs" in printed.out and "1 safety violations" in printed.out
    assert lines[-1] == f"report: {out / 'report.md'}"

    report = (out / "report.md").read_text()
    for heading in (
        "## Summary by scenario",
        "## Safety",
        "## Commit latency",
        "## Elections",
        "## Recovery by fault kind",
        "## Unavailability",
        "## Role timeline",
    ):
        assert heading in report
    assert "**1 violations**" in report and "| committed_data | leader_failure/2 |" in report
    for plot in ("commit_latency_cdf", "election_latency", "recovery_by_fault", "role_timeline"):
        assert (out / "plots" / f"{plot}.png").read_bytes()[:4] == b"\x89PNG"
        assert f"(plots/{plot}.png)" in report
    # What each scenario was given, so that its numbers can be read; repairs are no faults.
    scenarios = _section(report, "## Scenarios")
    lossy = _row(scenarios, "lossy_network")
    assert lossy["runs"] == "2" and lossy["links at the start"] == "1-5 ms"
    assert re.match(
        r"drop 0\.\d+-0\.\d+, duplicate 0\.\d+-0\.\d+, reorder 0\.\d+-0\.\d+",
        lossy["network faults set"],
    ), lossy
    assert lossy["faults injected"].startswith("network ")
    failure = _row(scenarios, "leader_failure")
    assert failure["network faults set"] == "none"
    assert "restart 2" in failure["faults injected"] and failure["repairs"] == "none"
    for table in TABLES:
        assert any((out / "tables" / table).glob("*.parquet")), table
    runs = spark.read.parquet(str(out / "tables" / "runs"))
    assert runs.count() == 4 and runs.where("elections < 1 OR events < 100").count() == 0

    # --save-events converted the logs to Parquet, which a later analysis can read instead.
    events = sum(1 for log in sweep.rglob("events.jsonl") for _ in log.open())
    assert load_events(spark, out / "events").count() == events
