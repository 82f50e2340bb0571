"""A node out of file descriptors keeps running (kraft/raft/resources.py).

A lone voter with 1 KiB segments: its segment rolls fail with EMFILE (``os.open`` in
``kraft.log.segment`` refuses), or its quorum-state writes do; the node stays up, and once
descriptors are back every record commits, once, in order, and elections go on. Waits are bounded
condition waits on the listener.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kraft.common.fsutil
import kraft.log.quorum_state
import kraft.log.segment
from kraft.config import Endpoint, QuorumConfig
from kraft.log.meta_properties import CLUSTER_METADATA_DIR, format_storage, random_uuid
from kraft.raft.listeners import BatchReader, LeaderAndEpoch, Listener, SnapshotReaderLike
from kraft.record.serde import StrSerde
from kraft.runtime.node import RaftNode

TIMEOUT_S = 30.0


class Watcher(Listener[str]):
    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.records: list[str] = []
        self.leader: LeaderAndEpoch | None = None

    def handle_commit(self, reader: BatchReader[str]) -> None:
        with reader, self.changed:
            for batch in reader:
                self.records.extend(batch.records)
            self.changed.notify_all()

    def handle_load_snapshot(self, reader: SnapshotReaderLike[str]) -> None:
        reader.close()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        with self.changed:
            self.leader = leader
            self.changed.notify_all()

    def wait_for(self, predicate: Any) -> bool:
        with self.changed:
            return bool(self.changed.wait_for(predicate, TIMEOUT_S))


class OutOfDescriptors:
    """Stands in for ``os`` in one module: ``open`` fails with EMFILE while ``exhausted``."""

    def __init__(self) -> None:
        self.exhausted = threading.Event()
        self.refused = threading.Event()

    def open(self, *args: Any, **kwargs: Any) -> int:
        if self.exhausted.is_set():
            self.refused.set()
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return os.open(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[RaftNode[str]]:
    data_dir = tmp_path / "node-1"
    format_storage(data_dir, random_uuid(), node_id=1)
    config = QuorumConfig(
        voters={1: Endpoint("127.0.0.1", 0)}, append_linger_ms=0, election_timeout_ms=200
    )
    node = RaftNode(
        node_id=1,
        data_dir=data_dir,
        config=config,
        serde=StrSerde(),
        segment_bytes=1024,
        shutdown_timeout_ms=500,
    )
    yield node
    node.close()


def append(node: RaftNode[str], records: list[str]) -> None:
    client = node.client
    client.prepare_append(client.epoch, records)
    client.schedule_prepared_append()


def test_segment_rolls_out_of_descriptors_do_not_stop_the_leader(
    node: RaftNode[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = OutOfDescriptors()
    monkeypatch.setattr(kraft.log.segment, "os", fake)
    watcher = Watcher()
    node.register(watcher)
    node.start()
    assert watcher.wait_for(lambda: watcher.leader is not None and watcher.leader.leader_id == 1)
    expected = [f"record-{i:03d}-" + "x" * 100 for i in range(40)]  # ~5 KiB: several rolls
    append(node, expected[:5])
    assert watcher.wait_for(lambda: watcher.records == expected[:5])
    fake.exhausted.set()
    for i in range(5, 40, 5):
        append(node, expected[i : i + 5])
    assert fake.refused.wait(TIMEOUT_S)
    assert node.failure is None
    assert node.is_running
    fake.exhausted.clear()
    assert watcher.wait_for(lambda: watcher.records == expected)
    assert node.failure is None
    segments = list((node.data_dir / CLUSTER_METADATA_DIR).glob("*.log"))
    assert len(segments) >= 2  # the roll that failed happened once descriptors were back


def test_quorum_state_writes_out_of_descriptors_do_not_stop_the_election(
    node: RaftNode[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lone voter resigns; the first two writes of its next election fail: the driver
    polls again and the node is elected all the same."""
    watcher = Watcher()
    node.register(watcher)
    node.start()
    assert watcher.wait_for(lambda: watcher.leader is not None and watcher.leader.leader_id == 1)
    first_epoch = node.client.epoch
    real_write = kraft.common.fsutil.write_atomically
    refused = 0

    def write_atomically(path: Path, data: bytes) -> None:
        nonlocal refused
        if refused < 2:
            refused += 1
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        real_write(path, data)

    monkeypatch.setattr(kraft.log.quorum_state, "write_atomically", write_atomically)
    node.client.resign(first_epoch)
    assert watcher.wait_for(
        lambda: (
            watcher.leader is not None
            and watcher.leader.leader_id == 1
            and watcher.leader.epoch > first_epoch
        )
    )
    assert refused == 2
    assert node.failure is None
    append(node, ["after"])
    assert watcher.wait_for(lambda: watcher.records == ["after"])
