"""Every example runs as written (STYLE: examples are executable documentation)."""

from __future__ import annotations

import re
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


@pytest.mark.slow
def test_controller_example_keeps_every_topic_across_a_kill_9(tmp_path: Path) -> None:
    """The controller example runs three controller processes and three simulated brokers,
    creates topics, kills the active controller with SIGKILL, finds the same topics described
    by the next one, and stops every process gracefully (each exits 0)."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "controller" / "run.py"), "--dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    first = re.search(r"^active controller: (\d)$", out, re.M)
    killed = re.search(r"^controller (\d) exited with status -9$", out, re.M)
    second = re.search(r"^new active controller: (\d)$", out, re.M)
    assert first and killed and second, out
    assert killed[1] == first[1] != second[1]
    assert "nothing lost: the same 3 topics (ids, partitions, replicas), brokers [1, 2, 3]" in out
    assert out.count("exited with status 0") == 4  # the brokers and the three controllers
