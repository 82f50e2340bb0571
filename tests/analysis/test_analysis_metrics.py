"""Golden tests of the run metrics on a crafted log whose answers are known by construction
(analysis_logs.golden_run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from analysis_logs import golden_run

from kraft.analysis import load_events
from kraft.analysis import metrics as m

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def events(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("golden")
    golden_run(root).close(4000)
    return load_events(spark, root).cache()


def rows(frame: Any) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.collect()]


def test_defaults_are_filled_in(events: Any) -> None:
    started = events.where("kind = 'run_started'").first()
    assert started["node"] == -1 and started["offset"] == -1 and started["latency_ms"] == -1
    assert started["details"]["voters"] == 3
    assert started["details"]["config"]["election_timeout_ms"] == 1000


def test_elections_are_the_winners_campaigns(events: Any) -> None:
    found = sorted(rows(m.elections(events)), key=lambda r: r["elected_ms"])
    assert [
        (
            r["leader"],
            r["epoch"],
            r["campaign_start_ms"],
            r["elected_ms"],
            r["election_ms"],
            r["candidacies"],
        )
        for r in found
    ] == [
        (1, 1, 1000, 1020, 20, 1),
        (2, 2, 3000, 3200, 200, 1),
    ]
    histogram = rows(m.election_histogram(m.elections(events), bucket_ms=50))
    assert sorted((r["bucket_ms"], r["elections"]) for r in histogram) == [(0, 1), (200, 1)]


def test_fault_recovery_is_the_next_leader_commit(events: Any) -> None:
    (fault,) = rows(m.fault_recovery(events))
    assert (fault["fault"], fault["targets"], fault["time_ms"]) == ("kill", [1], 2000)
    assert fault["recovered_ms"] == 3300 and fault["recovery_ms"] == 1300
    (by_kind,) = rows(m.by_fault(m.fault_recovery(events)))
    assert by_kind["faults"] == 1 and by_kind["recovered"] == 1 and by_kind["p99_ms"] == 1300


def test_unavailability_needs_a_long_gap_with_appends(events: Any) -> None:
    # 1190 -> 3300: no leader commit while appends were refused. 3400 -> the end (4000): long
    # enough, but nothing was appended, so the cluster was idle, not unavailable.
    (window,) = rows(m.unavailability(events, min_gap_ms=500))
    assert (window["start_ms"], window["end_ms"], window["duration_ms"]) == (1190, 3300, 2110)
    assert window["attempts"] == 9 and window["open"] is False
    assert rows(m.unavailability(events, min_gap_ms=3000)) == []


def test_commit_latency_percentiles(events: Any) -> None:
    batches = m.committed_batches(events, m.run_info(events))
    table = {r["scope"]: r for r in rows(m.commit_latency(batches))}
    leader = table["leader"]
    # On the leader: 10, 20, ..., 100 and 50 (offset 12); the control batch is not data.
    assert leader["batches"] == 11 and leader["voters"] == 3
    assert (leader["p50_ms"], leader["p90_ms"], leader["p99_ms"], leader["max_ms"]) == (
        50,
        90,
        100,
        100,
    )
    voters = table["voters"]
    assert voters["batches"] == 32 and voters["max_ms"] == 105
    assert voters["p50_ms"] == 55


def test_run_table(events: Any) -> None:
    runs = m.run_info(events)
    elections = m.elections(events)
    recoveries = m.fault_recovery(events)
    windows = m.unavailability(events)
    batches = m.committed_batches(events, runs)
    (run,) = rows(m.run_table(runs, elections, windows, batches, recoveries))
    assert run["run_id"] == "crafted/1" and run["scenario"] == "crafted" and run["seed"] == 1
    assert (run["voters"], run["observers"], run["simulated_ms"]) == (3, 0, 4000)
    assert run["first_leader_ms"] == 1020 and run["elections"] == 2
    assert run["unavailable_windows"] == 1 and run["unavailable_ms"] == 2110
    assert run["records"] == 11 and run["records_per_s"] == pytest.approx(2.75)
    assert run["faults"] == 1 and run["unrecovered_faults"] == 0 and run["finished"] is True


def test_redelivery_after_a_restart_is_not_a_latency(spark: Any, tmp_path: Path) -> None:
    run = golden_run(tmp_path)
    # Node 1 comes back and is handed its log again: offset 5 once more, 3 s "late".
    run.start(3500, 1, epoch=1, role="Resigned")
    run.commit(3600, 1, 5, epoch=1, latency_ms=3000, checksum=1_000_005)
    run.close(4000)
    events = load_events(spark, tmp_path)
    batches = m.committed_batches(events, m.run_info(events))
    assert rows(batches.where("latency_ms = 3000")) == []


def test_repairs_are_no_faults_and_each_scenario_says_what_it_was_given(
    spark: Any, tmp_path: Path
) -> None:
    run = golden_run(tmp_path)
    run.fault(3500, "isolate", [3], index=1)
    run.fault(3600, "heal", [], index=2)  # a repair: it ends the isolation
    run.log.emit(
        3700,
        "fault_injected",
        details={"fault": "network", "index": 3, "targets": [], "drop": 0.2, "latency_ms": [5, 50]},
    )
    run.log.emit(
        3800, "fault_injected", details={"fault": "network", "index": 4, "targets": [], "drop": 0.0}
    )
    run.close(4000)
    events = load_events(spark, tmp_path)
    assert sorted(r["fault"] for r in rows(m.fault_recovery(events))) == [
        "isolate",
        "kill",
        "network",
        "network",
    ]
    assert "heal" not in {r["fault"] for r in rows(m.by_fault(m.fault_recovery(events)))}
    assert rows(m.run_info(events))[0]["faults"] == 4

    (given,) = rows(m.scenario_parameters(events))
    assert (given["scenario"], given["runs"], given["min_voters"], given["max_voters"]) == (
        "crafted",
        1,
        3,
        3,
    )
    assert (given["min_drop"], given["max_drop"]) == (0.2, 0.2)  # the reset to 0 is no loss
    assert (given["latency_lo_ms"], given["latency_hi_ms"]) == (5, 50)
    assert [(i["fault"], i["count"], i["repair"]) for i in given["injected"]] == [
        ("isolate", 1, False),
        ("kill", 1, False),
        ("network", 2, False),
        ("heal", 1, True),
    ]
