"""The controller metrics on a crafted controller log whose answers are known by construction
(analysis_logs.controller_run), read as JSON Lines and as a Spark sweep's Parquet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from analysis_logs import controller_run, golden_run

from kraft.analysis import controller as c
from kraft.analysis import load_events
from kraft.analysis.events import SWEEP_EVENTS_DIR
from kraft.analysis.job import analyze
from kraft.simulation.scenario import run_scenario

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("controller")
    controller_run(root / "runs")
    golden_run(root / "runs").close(4000)  # no controller event: no row of its own
    return root / "runs"


@pytest.fixture(scope="module")
def events(spark: Any, runs: Path) -> Any:
    return load_events(spark, runs).cache()


def rows(frame: Any) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.collect()]


def test_time_to_fence_ends_at_the_brokers_next_fault(events: Any) -> None:
    found = sorted(rows(c.fencing(events)), key=lambda r: r["time_ms"])
    assert [(r["broker"], r["time_ms"], r["fenced_ms"], r["fence_ms"]) for r in found] == [
        (101, 1000, 10000, 9000),
        (101, 14000, None, None),  # restarted before it was fenced
    ]


def test_leader_elections_after_a_broker_fails(events: Any) -> None:
    found = sorted(
        rows(c.leader_elections(events)), key=lambda r: (r["time_ms"], r["topic"], r["partition"])
    )
    assert [
        (r["broker"], r["fault"], r["topic"], r["partition"], r["elected_ms"], r["election_ms"])
        for r in found
    ] == [
        (101, "broker_crash", "t", 0, 10000, 9000),  # its new epoch at 1500 is no election
        (101, "broker_crash", "t", 2, 12000, 11000),  # "no leader" at 10000 is none
        (103, "broker_shutdown", "t", 2, 16050, 50),
    ]  # u/0 was deleted before it got a new leader; the crash at 14000 led nothing


def test_failover_is_the_next_claim_on_any_node(events: Any) -> None:
    found = sorted(rows(c.failovers(events)), key=lambda r: r["time_ms"])
    assert [(r["node"], r["time_ms"], r["next_node"], r["failover_ms"]) for r in found] == [
        (1, 17000, 2, 300),
        (2, 19000, None, None),
    ]


def summary(frame: Any) -> dict[tuple[str, str | None], tuple[Any, ...]]:
    return {
        (r["metric"], r["op"]): (r["events"], r["measured"], r["p50_ms"], r["p99_ms"], r["max_ms"])
        for r in rows(frame)
        if r["scenario"] == "controller"
    }


EXPECTED = {
    ("time_to_fence", None): (2, 1, 9000, 9000, 9000),
    ("leader_election", None): (3, 3, 9000, 11000, 11000),
    ("write_latency", "create_topic"): (3, 2, 40, 60, 60),
    ("write_latency", "delete_topic"): (1, 1, 30, 30, 30),
    ("failover", None): (2, 1, 300, 300, 300),
}


def test_the_summary_by_scenario_from_json_and_from_a_spark_sweeps_parquet(
    spark: Any, events: Any, tmp_path: Path
) -> None:
    found = rows(c.controller_summary(events))
    assert {r["scenario"] for r in found} == {"controller"}
    assert summary(c.controller_summary(events)) == EXPECTED
    # The layout of `kraft sim sweep --engine spark --out DIR`: partitioned by scenario.
    events.write.partitionBy("scenario").parquet(str(tmp_path / SWEEP_EVENTS_DIR))
    assert summary(c.controller_summary(load_events(spark, tmp_path))) == EXPECTED


def test_the_report_has_a_controller_section_only_with_controller_events(
    spark: Any, runs: Path, tmp_path: Path
) -> None:
    analyze(spark, str(runs), tmp_path / "both")
    report = (tmp_path / "both" / "report.md").read_text()
    section = report[report.index("## Controller") :]
    section = section[: section.index("\n## ", 1)]
    assert "| controller | 2 | 1 | 9000 | 9000 | 9000 |" in section  # time to fence
    assert "| controller | create_topic | 3 | 2 | 40 | 60 | 60 |" in section
    assert "| controller | 2 | 1 | 300 | 300 | 300 |" in section  # failover
    assert "crafted" not in section
    table = spark.read.parquet(str(tmp_path / "both" / "tables" / "controller"))
    assert summary(table) == EXPECTED

    golden_run(tmp_path / "plain").close(4000)
    analyze(spark, str(tmp_path / "plain"), tmp_path / "plain-report")
    assert "## Controller" not in (tmp_path / "plain-report" / "report.md").read_text()


def test_a_simulated_controller_runs_metrics(spark: Any, tmp_path: Path) -> None:
    """End to end: the simulator's own controller events (not a crafted log) give every metric
    a measured value, each within what the simulated quorum's settings allow."""
    for scenario in ("controller_broker_churn", "controller_failover_storm"):
        assert run_scenario(scenario, 1, tmp_path / scenario / "seed-1").ok
    summary = {
        (r["scenario"], r["metric"], r["op"]): r
        for r in rows(c.controller_summary(load_events(spark, tmp_path)))
    }
    fence = summary["controller_broker_churn", "time_to_fence", None]
    # broker.session.timeout.ms is 9 s and heartbeats come every 2 s: a crashed broker's
    # session ends between 7 and 9 s after the crash, and the fencing commits soon after.
    assert fence["measured"] > 0 and 7_000 <= fence["p50_ms"] <= fence["max_ms"] < 12_000
    assert summary["controller_broker_churn", "leader_election", None]["measured"] > 0
    assert summary["controller_failover_storm", "write_latency", "create_topic"]["measured"] > 0
    assert summary["controller_failover_storm", "failover", None]["measured"] > 0
