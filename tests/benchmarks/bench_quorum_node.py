"""One node of the quorum benchmark: a ``RaftNode`` with a load generator inside.

Started by ``bench_quorum.py`` (through ``kraft.runtime.processes.LocalQuorum``) as
``python bench_quorum_node.py CONFIG``. It prints the console protocol's ``started`` and
``leader`` events, and takes one command on stdin::

    load SECONDS RECORD_BYTES WINDOW RECORDS_PER_APPEND [prepare|futures|barriers]

On the leader this runs a closed loop for SECONDS: at most WINDOW appends outstanding, each of
RECORDS_PER_APPEND records of RECORD_BYTES bytes; an append counts when the leader's listener
sees it committed. It prints ``{"event": "result", ...}`` with committed records/s and the
commit latency of every append (p50, p90, p99, max, in ms). The appends are made the way an
embedding service makes them from a thread of its own: ``prepare_append`` +
``schedule_prepared_append`` ("prepare", the default), or ``RaftNode.append`` with its commit
future ("futures"). "barriers" times ``RaftNode.read_barrier`` instead, one at a time.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from kraft.errors import KraftError
from kraft.raft.listeners import BatchReader, LeaderAndEpoch, Listener
from kraft.record.serde import BytesSerde
from kraft.runtime.config import load_node_config
from kraft.runtime.node import RaftNode

_lock = threading.Lock()


def emit(**event: Any) -> None:
    event["t"] = time.time()
    with _lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


class CommitTracker(Listener[bytes]):
    """The highest committed offset, with a condition to wait on; reports leader changes."""

    def __init__(self) -> None:
        self.committed = -1
        self.changed = threading.Condition()

    def handle_commit(self, reader: BatchReader[bytes]) -> None:
        last = -1
        for batch in reader:
            last = batch.last_offset
        reader.close()
        if last >= 0:
            with self.changed:
                self.committed = last
                self.changed.notify_all()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        emit(event="leader", leader=leader.leader_id, epoch=leader.epoch)


def percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def run_load(
    node: RaftNode[bytes],
    tracker: CommitTracker,
    seconds: float,
    size: int,
    window: int,
    per_append: int,
) -> dict[str, Any]:
    client = node.client
    epoch = client.leader_and_epoch().epoch
    records = [b"x" * size] * per_append
    outstanding: deque[tuple[int, float]] = deque()  # (last offset, start time)
    latencies: list[float] = []
    committed_records = 0
    started = time.perf_counter()
    deadline = started + seconds
    changed = tracker.changed
    while True:
        now = time.perf_counter()
        if now >= deadline and not outstanding:
            break
        while now < deadline and len(outstanding) < window:
            offset = client.prepare_append(epoch, records)
            client.schedule_prepared_append()
            outstanding.append((offset, time.perf_counter()))
        with changed:
            if outstanding and tracker.committed < outstanding[0][0]:
                changed.wait(1.0)
            committed = tracker.committed
        now = time.perf_counter()
        while outstanding and outstanding[0][0] <= committed:
            _, began = outstanding.popleft()
            latencies.append((now - began) * 1000)
            committed_records += per_append
        if now > deadline + 30:
            raise TimeoutError("appends did not commit within 30 s of the end")
    return _summary(latencies, committed_records, size, time.perf_counter() - started)


def _summary(
    latencies: list[float], committed_records: int, size: int, elapsed: float
) -> dict[str, Any]:
    latencies.sort()
    return {
        "records": committed_records,
        "seconds": round(elapsed, 3),
        "records_per_s": round(committed_records / elapsed),
        "mb_per_s": round(committed_records * size / elapsed / 1e6, 2),
        "appends": len(latencies),
        "p50_ms": round(percentile(latencies, 0.50), 3),
        "p90_ms": round(percentile(latencies, 0.90), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
        "max_ms": round(latencies[-1], 3) if latencies else None,
    }


def run_futures(
    node: RaftNode[bytes], seconds: float, size: int, window: int, per_append: int
) -> dict[str, Any]:
    """The same closed loop on ``RaftNode.append``: the future says when each committed."""
    records = [b"x" * size] * per_append
    outstanding: deque[tuple[Future[int], float]] = deque()
    latencies: list[float] = []
    committed_records = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        now = time.perf_counter()
        if now >= deadline and not outstanding:
            break
        while now < deadline and len(outstanding) < window:
            outstanding.append((node.append(records), time.perf_counter()))
        future, began = outstanding.popleft()
        future.result(timeout=30)
        latencies.append((time.perf_counter() - began) * 1000)
        committed_records += per_append
    return _summary(latencies, committed_records, size, time.perf_counter() - started)


def run_barriers(node: RaftNode[bytes], seconds: float) -> dict[str, Any]:
    """Read barriers on the leader, one at a time: each is one heartbeat round trip."""
    latencies: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        began = time.perf_counter()
        node.read_barrier().result(timeout=30)
        latencies.append((time.perf_counter() - began) * 1000)
    return _summary(latencies, len(latencies), 0, time.perf_counter() - started)


def main() -> int:
    if os.environ.get("KRAFT_SWITCH_INTERVAL"):
        sys.setswitchinterval(float(os.environ["KRAFT_SWITCH_INTERVAL"]))
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = load_node_config(Path(sys.argv[1]))
    node: RaftNode[bytes] = RaftNode.from_config(config, BytesSerde())
    tracker = CommitTracker()
    node.start()
    node.client.register(tracker)
    emit(event="started", node=node.node_id, listen=str(node.listen_address))
    try:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "load":
                seconds, size, window, per_append = (
                    float(words[1]),
                    int(words[2]),
                    int(words[3]),
                    int(words[4]),
                )
                mode = words[5] if len(words) > 5 else "prepare"
                try:
                    if mode == "futures":
                        result = run_futures(node, seconds, size, window, per_append)
                    elif mode == "barriers":
                        result = run_barriers(node, seconds)
                    else:
                        result = run_load(node, tracker, seconds, size, window, per_append)
                except KraftError as exc:
                    emit(event="error", error=type(exc).__name__, message=str(exc))
                else:
                    emit(event="result", **result)
            elif words[0] == "metrics":
                emit(event="metrics", **node.metrics.snapshot())
    finally:
        node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
