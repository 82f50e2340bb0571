"""Three real ``kraft controller start`` processes on 127.0.0.1 with ``kraft broker simulate
--count 3``: the brokers are unfenced, ``kraft topics create`` places a topic on all three,
the active controller is killed with SIGKILL, and the new one still describes the topic.

Every wait is bounded; every process is stopped in ``finally``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kraft.cli.quorum import describe_quorum
from kraft.config import parse_bootstrap_servers
from kraft.runtime.processes import LOOPBACK_TIMERS, LocalQuorum

pytestmark = pytest.mark.slow

TIMEOUT_S = 60.0
_KRAFT = (sys.executable, "-m", "kraft.cli")


def _kraft(*args: str, timeout_s: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_KRAFT, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _until(what: str, check: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> Any:
    """``check()``'s first truthy value, polled (these are real processes: no event to wait
    on); TimeoutError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"no {what} within {timeout_s} s")


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(done.stdout) if done.returncode == 0 else None


def test_a_topic_survives_the_active_controller_killed(tmp_path: Path) -> None:
    def command(node_id: int, config: Path) -> list[str]:
        return [*_KRAFT, "controller", "start", "--config", str(config)]

    quorum = LocalQuorum(tmp_path, 3, quorum=LOOPBACK_TIMERS, command=command)
    bootstrap = quorum.bootstrap
    brokers: subprocess.Popen[str] | None = None
    try:
        for node in quorum.nodes.values():
            node.start()
        with (tmp_path / "brokers.out").open("w") as out:
            brokers = subprocess.Popen(
                [*_KRAFT, "broker", "simulate", "--count", "3", "-b", bootstrap],
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )

        def unfenced() -> list[int]:
            described = _json(_kraft("cluster", "describe", "--json", "-b", bootstrap))
            if described is None:
                return []
            ids = [b["id"] for b in described["brokers"] if not b["fenced"]]
            return ids if len(ids) == 3 else []

        assert _until("three unfenced brokers", unfenced) == [1, 2, 3]
        created = _kraft(
            "topics", "create", "--topic", "orders", "--partitions", "3",
            "--replication-factor", "3", "--json", "-b", bootstrap,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        assert json.loads(created.stdout)["replication_factor"] == 3

        old = describe_quorum(parse_bootstrap_servers(bootstrap)).leader_id
        quorum.nodes[old].kill()
        assert quorum.nodes[old].wait(TIMEOUT_S) == -9

        def described_by_new_controller() -> Any:
            cluster = _json(_kraft("cluster", "describe", "--json", "-b", bootstrap))
            if cluster is None or cluster["controller_id"] in (old, -1):
                return None
            return _json(
                _kraft("topics", "describe", "--topic", "orders", "--json", "-b", bootstrap)
            )

        topics = _until("the topic described by a new controller", described_by_new_controller)
        [orders] = topics["topics"]
        assert orders["topic"] == "orders" and len(orders["partitions"]) == 3
        for partition in orders["partitions"]:
            assert sorted(partition["replicas"]) == [1, 2, 3]
            assert partition["leader"] in partition["isr"]
        listed = _json(_kraft("topics", "list", "--json", "-b", bootstrap))
        assert listed == {"topics": ["orders"]}
        events = [json.loads(line) for line in (tmp_path / "brokers.out").read_text().splitlines()]
        assert {e["broker"] for e in events if e["event"] == "unfenced"} == {1, 2, 3}
    finally:
        if brokers is not None:
            brokers.kill()
            brokers.wait(TIMEOUT_S)
        quorum.close(kill=True)
