"""The safety checks find each violation in a deliberately corrupted log, and nothing in good
logs: a crafted one with a restart and a wipe, and real simulated runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from analysis_logs import RunLog, checksum_of, golden_run

from kraft.analysis import load_events
from kraft.analysis import safety as s
from kraft.simulation.scenario import run_scenario

pytestmark = pytest.mark.spark


def found(spark: Any, root: Path) -> list[tuple[str, str, int, int, int]]:
    """(check, run, node, epoch, offset) of every violation in the logs under ``root``."""
    rows = s.violations(load_events(spark, root)).collect()
    return sorted((r["check"], r["run_id"], r["node"], r["epoch"], r["offset"]) for r in rows)


def corrupted(tmp_path: Path, corrupt: Callable[[RunLog], None]) -> Path:
    run = golden_run(tmp_path)
    corrupt(run)
    run.close(4000)
    return tmp_path


def test_good_logs_have_no_violation(spark: Any, tmp_path: Path) -> None:
    run = golden_run(tmp_path / "crafted")
    # A restart: the high watermark starts again from 0, the persisted epoch does not.
    run.start(3500, 1, epoch=1, role="Resigned")
    run.state(3510, 1, "Follower", 2, leader=2, high_watermark=0)
    # A wipe: node 3 starts again from epoch 0 with an empty log.
    run.fault(3600, "wipe", [3], index=1)
    run.state(3600, 3, "Down", 2)
    run.start(3600, 3, epoch=0)
    run.close(4000)
    for scenario in ("leader_failure", "wiped_node_recovery", "rolling_restarts"):
        result = run_scenario(scenario, 1, tmp_path / "sim" / scenario / "seed-1")
        assert result.ok
    assert found(spark, tmp_path) == []


def test_committed_data_differs(spark: Any, tmp_path: Path) -> None:
    def corrupt(run: RunLog) -> None:
        # Node 3 commits another batch at offset 12 than node 2 did.
        run.commit(3500, 3, 12, epoch=2, latency_ms=1, checksum=checksum_of(12) + 1)

    assert found(spark, corrupted(tmp_path, corrupt)) == [("committed_data", "crafted/1", 3, 2, 12)]


def test_committed_batches_cut_differently(spark: Any, tmp_path: Path) -> None:
    def corrupt(run: RunLog) -> None:
        # Node 3 commits offsets 11-12 as one batch; nodes 2 had them as two.
        run.commit(3500, 3, 12, base_offset=11, epoch=2, latency_ms=1, checksum=77, count=2)

    violations = found(spark, corrupted(tmp_path, corrupt))
    assert violations == [
        ("committed_data", "crafted/1", 3, 2, 11),
        ("committed_data", "crafted/1", 3, 2, 12),
    ]


def test_two_leaders_in_one_epoch(spark: Any, tmp_path: Path) -> None:
    def corrupt(run: RunLog) -> None:
        run.state(3500, 3, "Leader", 2, leader=3, high_watermark=13)

    assert found(spark, corrupted(tmp_path, corrupt)) == [("single_leader", "crafted/1", 3, 2, -1)]
    detail = s.single_leader(load_events(spark, tmp_path)).first()["detail"]
    assert detail == "epoch 2 has 2 leaders: nodes 2, 3"


def test_high_watermark_goes_back(spark: Any, tmp_path: Path) -> None:
    def corrupt(run: RunLog) -> None:
        run.state(3500, 3, "Follower", 2, leader=2, high_watermark=5)

    assert found(spark, corrupted(tmp_path, corrupt)) == [
        ("monotonic_high_watermark", "crafted/1", 3, 2, -1)
    ]


def test_epoch_goes_back(spark: Any, tmp_path: Path) -> None:
    def corrupt(run: RunLog) -> None:
        run.state(3500, 3, "Follower", 1, leader=1, high_watermark=13)

    assert found(spark, corrupted(tmp_path, corrupt)) == [
        ("monotonic_epoch", "crafted/1", 3, 1, -1)
    ]


def test_an_epoch_goes_back_across_a_restart_but_not_a_wipe(spark: Any, tmp_path: Path) -> None:
    def corrupt(run: RunLog) -> None:
        run.state(3500, 3, "Down", 2)
        run.start(3500, 3, epoch=0)  # a restart that forgot its persisted epoch

    assert found(spark, corrupted(tmp_path, corrupt)) == [
        ("monotonic_epoch", "crafted/1", 3, 0, -1)
    ]
