"""Reading event logs: the layouts found, defaults, torn lines, Parquet, and the missing extra."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from analysis_logs import golden_run

from kraft.analysis import SparkUnavailableError, find_event_logs, load_events, require_pyspark
from kraft.analysis.events import _DETAILS_DDL, SWEEP_EVENTS_DIR
from kraft.cli.main import main
from kraft.simulation.scenario import run_scenario


def test_find_event_logs_in_each_layout(tmp_path: Path) -> None:
    first = golden_run(tmp_path / "sweep", "a", 1).close(10)
    second = golden_run(tmp_path / "sweep", "b", 2).close(10)
    assert find_event_logs(tmp_path / "sweep") == [first, second]
    assert find_event_logs(first.parent) == [first]
    assert find_event_logs(first) == [first]
    assert find_event_logs(tmp_path) == [first, second]  # deeper: any tree of run dirs
    assert find_event_logs(tmp_path / "sweep" / "a" / "seed-9") == []


def test_a_missing_pyspark_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark raises ImportError
    with pytest.raises(SparkUnavailableError, match=r"pip install 'kraft\[spark\]'"):
        require_pyspark()
    golden_run(tmp_path / "runs").close(10)
    assert main(["analyze", str(tmp_path / "runs"), "--out", str(tmp_path / "r")]) == 1
    assert "pip install 'kraft[spark]'" in capsys.readouterr().err


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(tmp_path / "nothing"), "--out", str(tmp_path / "r")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["analyze", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert "no event log" in capsys.readouterr().err


@pytest.mark.spark
def test_a_torn_line_is_left_out_and_parquet_reads_the_same(spark: Any, tmp_path: Path) -> None:
    path = golden_run(tmp_path / "runs").close(4000)
    with path.open("ab") as log:
        log.write(b'{"v":1,"run_id":"crafted/1","seed":1,"scen')  # a run killed mid-write
    events = load_events(spark, tmp_path / "runs")
    lines = path.read_bytes().count(b"\n")
    assert events.count() == lines
    events.write.parquet(str(tmp_path / "parquet"))
    again = load_events(spark, tmp_path / "parquet")
    assert again.columns == events.columns
    assert sorted(again.collect()) == sorted(events.collect())


@pytest.mark.spark
def test_a_spark_sweeps_partitioned_parquet_is_read(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    golden_run(tmp_path / "runs", "a", 1).close(4000)
    golden_run(tmp_path / "runs", "b", 2).close(3000)
    events = load_events(spark, tmp_path / "runs")
    # The layout of `kraft sim sweep --engine spark --out DIR` (docs/analysis.md): DIR/events
    # partitioned by scenario, whose column the files leave out.
    sweep_dir = tmp_path / "sweep"
    events.write.partitionBy("scenario").parquet(str(sweep_dir / SWEEP_EVENTS_DIR))
    assert not any((sweep_dir / SWEEP_EVENTS_DIR).glob("*.parquet"))
    for source in (sweep_dir, sweep_dir / SWEEP_EVENTS_DIR):
        again = load_events(spark, source)
        assert again.columns == events.columns
        assert sorted(again.collect()) == sorted(events.collect())
    out = tmp_path / "report"
    assert main(["analyze", str(sweep_dir), "--out", str(out), "--quiet"]) == 0
    assert "2 runs" in capsys.readouterr().out


def _ddl_detail_keys() -> set[str]:
    """The top-level ``details`` keys of :data:`EVENT_SCHEMA_DDL` (nested structs skipped)."""
    keys, depth = set(), 0
    for part in _DETAILS_DDL.split(", "):
        if depth == 0:
            keys.add(part.split(":", 1)[0].strip("`"))
        depth += part.count("<") - part.count(">")
    return keys


def test_the_schema_names_every_details_key_the_simulator_writes(tmp_path: Path) -> None:
    """A ``details`` key missing from the explicit schema would be read as nothing at all."""
    assert run_scenario("snapshot_catch_up", 1, tmp_path / "run").ok
    written: dict[str, set[str]] = {}
    for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        written.setdefault(event["kind"], set()).update(event.get("details", {}))
    assert {"snapshot_created", "snapshot_loaded", "fault_injected"} <= set(written)
    known = _ddl_detail_keys()
    missing = {kind: keys - known for kind, keys in written.items() if keys - known}
    assert missing == {}
