"""A 100 MB snapshot sent from one real node to another over TCP (issue 5's measurement).

    python tests/benchmarks/bench_snapshot_transfer.py [--records 1048576] [--chunk-mib 8]

Node 1, a single voter, commits a few records, then writes a snapshot of ``--records``
100-byte records (about 116 MB with Kafka v2 batch overhead) at its high watermark; its
cleaner moves the log start to the snapshot. Node 2 then starts as an observer with an empty
data directory: its first Fetch is answered with the snapshot id, and it downloads the
snapshot with FetchSnapshot in chunks of ``fetch_snapshot_max_bytes``, checks it, and hands
it to its listener. Measured: the time from node 2's start to its listener's
``handle_load_snapshot``, the bytes on disk, and the number of chunks. Both nodes run in
this process (two RaftNodes, real sockets on 127.0.0.1, fsync on).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from kraft.config import Endpoint, QuorumConfig
from kraft.log.api import OffsetAndEpoch
from kraft.log.base import SnapshotRetention
from kraft.log.meta_properties import CLUSTER_METADATA_DIR, format_storage, random_uuid
from kraft.raft.listeners import BatchReader, Listener, SnapshotReaderLike
from kraft.record.serde import BytesSerde
from kraft.runtime.node import RaftNode
from kraft.runtime.processes import free_ports
from kraft.snapshot import snapshot_path

WAIT_S = 300.0


class SnapshotMaker(Listener[bytes]):
    """On the leader: once ``after`` records committed, snapshot ``records`` records there."""

    def __init__(self, node: RaftNode[bytes], after: int, records: int) -> None:
        self.node, self.after, self.records = node, after, records
        self.snapshot_id: OffsetAndEpoch | None = None
        self.seconds = 0.0
        self.done = threading.Event()

    def handle_commit(self, reader: BatchReader[bytes]) -> None:
        last = None
        for batch in reader:
            last = batch
        reader.close()
        if last is None or self.done.is_set() or last.last_offset + 1 < self.after:
            return
        snapshot_id = OffsetAndEpoch(last.last_offset + 1, last.epoch)
        started = time.perf_counter()
        writer = self.node.client.create_snapshot(snapshot_id, last.append_timestamp_ms)
        assert writer is not None
        chunk = [b"s" * 100] * 1000
        for _ in range(self.records // 1000):
            writer.append(chunk)
        writer.freeze()
        writer.close()
        self.seconds = time.perf_counter() - started
        self.snapshot_id = snapshot_id
        self.done.set()


class SnapshotLoaded(Listener[bytes]):
    def __init__(self) -> None:
        self.loaded_at = 0.0
        self.snapshot_id: OffsetAndEpoch | None = None
        self.done = threading.Event()

    def handle_commit(self, reader: BatchReader[bytes]) -> None:
        reader.close()

    def handle_load_snapshot(self, reader: SnapshotReaderLike[bytes]) -> None:
        self.loaded_at = time.perf_counter()
        self.snapshot_id = reader.snapshot_id
        reader.close()
        self.done.set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1024 * 1024)
    parser.add_argument(
        "--chunk-mib",
        type=float,
        default=8.0,
        help="fetch_snapshot_max_bytes in MiB (default 8, Kafka's)",
    )
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="kraft-snapshot-transfer-"))
    cluster_id = random_uuid()
    port1, port2 = free_ports(2)
    chunk = int(args.chunk_mib * 1024 * 1024)
    config = QuorumConfig(
        voters={1: Endpoint("127.0.0.1", port1)},
        append_linger_ms=0,
        log_clean_interval_ms=100,
        fetch_snapshot_max_bytes=chunk,
        max_batch_size_bytes=8 * 1024 * 1024,
    )
    for node_id in (1, 2):
        format_storage(root / f"node-{node_id}", cluster_id, node_id)
    leader: RaftNode[bytes] = RaftNode(
        node_id=1,
        data_dir=root / "node-1",
        config=config,
        serde=BytesSerde(),
        retention=SnapshotRetention(retained_snapshots=1, retention_bytes=0),
    )
    observer: RaftNode[bytes] = RaftNode(
        node_id=2,
        data_dir=root / "node-2",
        config=config,
        serde=BytesSerde(),
        listen=Endpoint("127.0.0.1", port2),
    )
    with leader:
        maker = SnapshotMaker(leader, after=10, records=args.records)
        leader.client.register(maker)
        deadline = time.monotonic() + WAIT_S
        while not leader.client.is_leader:
            if time.monotonic() > deadline:
                raise TimeoutError("node 1 did not become leader")
            time.sleep(0.01)
        epoch = leader.client.leader_and_epoch().epoch
        for i in range(10):
            leader.client.prepare_append(epoch, [b"r%d" % i])
            leader.client.schedule_prepared_append()
        if not maker.done.wait(WAIT_S):
            raise TimeoutError("no snapshot")
        assert maker.snapshot_id is not None
        snapshot_file = snapshot_path(root / "node-1" / CLUSTER_METADATA_DIR, maker.snapshot_id)
        size = snapshot_file.stat().st_size
        while leader.client.log.log_start_offset < maker.snapshot_id.offset:
            if time.monotonic() > deadline:
                raise TimeoutError("the cleaner did not move the log start")
            time.sleep(0.01)
        print(f"snapshot {maker.snapshot_id}: {size:,} bytes, written in {maker.seconds:.2f} s")
        loaded = SnapshotLoaded()
        started = time.perf_counter()
        with observer:
            observer.client.register(loaded)
            if not loaded.done.wait(WAIT_S):
                raise TimeoutError("node 2 did not load the snapshot")
            elapsed = loaded.loaded_at - started
        received = (root / "node-2" / CLUSTER_METADATA_DIR / snapshot_file.name).stat().st_size
    assert received == size and loaded.snapshot_id == maker.snapshot_id
    chunks = -(-size // chunk)
    print(
        f"transfer: {size:,} bytes in {elapsed:.2f} s ({size / elapsed / 1e6:.1f} MB/s), "
        f"{chunks} FetchSnapshot chunks of {chunk:,} bytes, node 2 start -> "
        f"handle_load_snapshot"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
