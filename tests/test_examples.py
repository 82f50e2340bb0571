"""Every example runs as written (STYLE: examples are executable documentation)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_raft_in_memory_example_elects_replicates_and_fails_over() -> None:
    """The in-memory quorum example elects, replicates to all three nodes, fails over, and
    the old leader rejoins with every committed record."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "raft_in_memory.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "leads epoch 1" in out
    assert out.count("committed [b'alpha', b'beta', b'gamma']") == 3
    assert "rejoined as Follower and committed [b'alpha', b'beta', b'gamma', b'delta']" in out


@pytest.mark.parametrize("name", ["storage_demo.py", "simulation.py"])
def test_storage_example_runs(name: str, tmp_path: Path) -> None:
    """The examples that take ``--dir`` run without error: the storage demo formats, writes,
    recovers and dumps a log; the simulation fails over and validates its invariants."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
