"""Issue 17, holes 4 and 5 with real nodes: a byte flipped on the leader's disk while the
quorum runs (docs/protocol.md §1.14). The leader never serves the corrupt bytes, the cluster
keeps committing, no follower spins on them, and nothing acknowledged is lost.

Hole 4 runs three ``kraft node`` processes; hole 5 three voters and an observer as
``RaftNode``s in this process (a node program makes no snapshots), over loopback sockets with
``FileLog``s. Both are slow (seconds each)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft.config import Endpoint, QuorumConfig
from kraft.log.api import OffsetAndEpoch
from kraft.log.base import SnapshotRetention
from kraft.log.meta_properties import CLUSTER_METADATA_DIR, format_storage, random_uuid
from kraft.raft.listeners import BatchReader, Listener, SnapshotReaderLike
from kraft.record.batch import iter_batches
from kraft.record.serde import BytesSerde
from kraft.runtime.node import RaftNode
from kraft.runtime.processes import LocalQuorum, free_ports
from kraft.snapshot import snapshot_path

pytestmark = pytest.mark.slow

TIMEOUT_S = 60.0
#: How many ERROR lines a node may write about it: a few, not one per Fetch (the hole wrote
#: 2,946 in 84 s).
MAX_ERROR_LINES = 20


def records_of(local: LocalQuorum, node_id: int) -> list[str]:
    return [r for _, records in sorted(local.committed(node_id).items()) for r in records]


def flip_byte_in_batch(segment: Path, offset: int) -> None:
    """Flip a byte inside the CRC-covered part of the batch holding ``offset``."""
    data = segment.read_bytes()
    position = 0
    for batch in iter_batches(data):
        if batch.base_offset <= offset <= batch.last_offset:
            at = position + 40
            with segment.open("r+b") as f:
                f.seek(at)
                f.write(bytes([data[at] ^ 0xFF]))
            return
        position += batch.size_in_bytes
    raise AssertionError(f"no batch holds offset {offset} in {segment}")


def error_lines(local: LocalQuorum, node_id: int) -> int:
    return sum(" ERROR " in line for line in local.nodes[node_id].log_path.read_text().splitlines())


def test_hole_4_a_corrupt_batch_on_the_leader_is_repaired_from_the_quorum(
    quorum: LocalQuorum,
) -> None:
    leader = quorum.leader(TIMEOUT_S)
    lagging = next(n for n in quorum.nodes if n != leader)
    before = [f"a{i}" for i in range(5)]
    for record in before:
        quorum.append(record, timeout_s=TIMEOUT_S)
    quorum.nodes[lagging].kill()
    quorum.nodes[lagging].wait(TIMEOUT_S)
    missed = [f"b{i}" for i in range(5)]
    offsets = [quorum.append(record, timeout_s=TIMEOUT_S)[0] for record in missed]
    quorum.wait_committed(leader, offsets[-1], TIMEOUT_S)  # acknowledged
    segment = quorum.root / f"node-{leader}" / "__cluster_metadata-0" / (20 * "0" + ".log")
    flip_byte_in_batch(segment, offsets[0])
    quorum.nodes[lagging].start()  # it fetches the missed batches: through the corrupt one
    after, _ = quorum.append("after", timeout_s=TIMEOUT_S)
    for node_id in quorum.nodes:
        quorum.wait_committed(node_id, after, TIMEOUT_S)
    expected = [*before, *missed, "after"]
    for node_id in quorum.nodes:
        got = [r for r in records_of(quorum, node_id) if r in expected]
        assert got[-len(expected) :] == expected, (node_id, got)
    for node_id in quorum.nodes:
        assert error_lines(quorum, node_id) <= MAX_ERROR_LINES, node_id


# ---------------------------------------------------------------------------------------------
# Hole 5: a corrupt snapshot on the leader (three RaftNodes over loopback sockets, FileLog)
# ---------------------------------------------------------------------------------------------
class SnapshotAt(Listener[bytes]):
    """Snapshots the state (the records seen) once ``after`` records committed; keeps every
    record committed and every snapshot loaded."""

    def __init__(self, node: RaftNode[bytes], after: int) -> None:
        self.node, self.after = node, after
        self.records: list[bytes] = []
        self.loaded: list[OffsetAndEpoch] = []
        self.snapshot_id: OffsetAndEpoch | None = None

    def handle_commit(self, reader: BatchReader[bytes]) -> None:
        last = None
        with reader:
            for batch in reader:
                self.records.extend(batch.records)
                last = batch
        if last is None or self.snapshot_id is not None or last.last_offset + 1 < self.after:
            return
        snapshot_id = OffsetAndEpoch(last.last_offset + 1, last.epoch)
        writer = self.node.client.create_snapshot(snapshot_id, last.append_timestamp_ms)
        if writer is not None:
            with writer:
                writer.append(list(self.records))
                writer.freeze()
            self.snapshot_id = snapshot_id

    def handle_load_snapshot(self, reader: SnapshotReaderLike[bytes]) -> None:
        try:
            self.records = [r for batch in reader for r in batch.records]
        finally:
            reader.close()
        self.loaded.append(reader.snapshot_id)


class Count(logging.Handler):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.count = text, 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += self.text in record.getMessage()


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.01)


def test_hole_5_a_corrupt_snapshot_on_the_leader_is_not_served(tmp_path: Path) -> None:
    """The leader's log starts at its snapshot; a byte of the snapshot file flips. A new
    observer fetches from offset 0 and is sent the snapshot id: the leader finds the file
    corrupt at the first chunk, sets it aside and resigns (its log can no longer serve
    offset 0); the observer downloads a healthy voter's snapshot, once, and the cluster
    keeps committing."""
    cluster_id = random_uuid()
    ports = free_ports(4)
    config = QuorumConfig(
        voters={i: Endpoint("127.0.0.1", ports[i - 1]) for i in (1, 2, 3)},
        append_linger_ms=0,
        log_clean_interval_ms=100,
        election_timeout_ms=500,
        fetch_timeout_ms=1000,
        request_timeout_ms=1000,
    )
    for node_id in (1, 2, 3, 4):
        format_storage(tmp_path / f"node-{node_id}", cluster_id, node_id)
    retention = SnapshotRetention(retained_snapshots=1, retention_bytes=0)
    nodes = {
        i: RaftNode(
            node_id=i,
            data_dir=tmp_path / f"node-{i}",
            config=config,
            serde=BytesSerde(),
            retention=retention,
            listen=Endpoint("127.0.0.1", ports[i - 1]),
        )
        for i in (1, 2, 3, 4)
    }
    downloads = Count("downloading snapshot")
    logging.getLogger("kraft.raft.replica_fetcher").addHandler(downloads)
    listeners = {i: SnapshotAt(node, after=10) for i, node in nodes.items()}
    try:
        for i in (1, 2, 3):
            nodes[i].start()
            nodes[i].register(listeners[i])
        until(lambda: any(nodes[i].client.is_leader for i in (1, 2, 3)), "a leader")
        leader = next(i for i in (1, 2, 3) if nodes[i].client.is_leader)
        client = nodes[leader].client
        for k in range(10):
            client.prepare_append(client.epoch, [b"r%d" % k])
            client.schedule_prepared_append()
        until(
            lambda: all(
                (snapshot := listeners[i].snapshot_id) is not None
                and nodes[i].client.log.log_start_offset >= snapshot.offset
                for i in (1, 2, 3)
            ),
            "every voter snapshots and cleans its log",
        )
        snapshot_id = listeners[leader].snapshot_id
        assert snapshot_id is not None
        path = snapshot_path(tmp_path / f"node-{leader}" / CLUSTER_METADATA_DIR, snapshot_id)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        nodes[4].start()
        nodes[4].register(listeners[4])
        until(lambda: bool(listeners[4].loaded), "the observer loads a snapshot")
        until(lambda: not nodes[leader].client.is_leader, "the corrupt leader resigns")
        until(
            lambda: any(nodes[i].client.is_leader for i in (1, 2, 3) if i != leader),
            "a healthy leader",
        )
        new = next(i for i in (1, 2, 3) if nodes[i].client.is_leader)
        client = nodes[new].client
        client.prepare_append(client.epoch, [b"after"])
        client.schedule_prepared_append()
        until(
            lambda: all(listeners[i].records[-1:] == [b"after"] for i in nodes),
            "everyone commits after",
        )
        expected = [b"r%d" % k for k in range(10)] + [b"after"]
        for i in nodes:
            assert listeners[i].records == expected, i
        # The observer's download from the corrupt leader, then from the new one, and the old
        # leader's own (its log emptied): a few, not one every few milliseconds (the hole
        # downloaded, rejected and deleted 5,631 times in 42 s).
        assert downloads.count <= 6
    finally:
        logging.getLogger("kraft.raft.replica_fetcher").removeHandler(downloads)
        for node in nodes.values():
            node.close()
