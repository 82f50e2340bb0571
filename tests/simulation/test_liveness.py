"""Liveness under loss (docs/protocol.md §1.4.1, issue 17 hole 8): at 10 % loss the leader
stays and the load commits. Deterministic: the simulator is seeded. Before the Fetch had a
deadline of its own these four runs saw 10 leader changes in 80 simulated seconds and
committed 50-88 % of the load; tests/benchmarks/bench_loss.py measures the whole curve."""

from __future__ import annotations

import pytest

from kraft.simulation.liveness import run_under_loss


def test_a_lossy_network_keeps_its_leader_and_commits_the_load() -> None:
    runs = [run_under_loss(0.10, seed, seconds=20) for seed in (1, 2, 3, 4)]
    assert sum(run.leader_changes for run in runs) <= 1  # (0 today)
    assert min(run.committed_share for run in runs) >= 0.9
    assert all(run.offered == pytest.approx(20 * 50, rel=0.1) for run in runs)


def test_without_loss_everything_commits() -> None:
    run = run_under_loss(0.0, 1, seconds=10)
    assert run.leader_changes == 0
    assert run.committed_share >= 0.99
