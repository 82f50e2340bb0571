"""A real node process that makes snapshots: ``kraft node start --console`` with a state
machine (the list of every record committed) that snapshots itself every ``--every`` records,
and a snapshot retention that cleans the log below the latest snapshot.

    python tests/runtime/snapshotting_node.py node-1.toml --every 10 --segment-bytes 2048

``kraft node`` makes no snapshots, so its log never starts past 0; this one's does. It speaks
the console protocol of ``kraft.cli.node`` (``LocalQuorum(command=...)`` runs it), with two
additions: each ``commit`` event carries the log's start offset (``log_start``), and each
``snapshot`` event (a snapshot loaded into the state machine) carries the records it holds.
Exit status: 0 after a graceful shutdown (SIGTERM), 1 when the node could not start or stopped
on a fatal fault (the reason on stderr).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from kraft.cli.node import _console, _Printer
from kraft.errors import KraftError
from kraft.log.api import OffsetAndEpoch
from kraft.log.base import SnapshotRetention
from kraft.raft.listeners import BatchReader, LeaderAndEpoch, Listener, SnapshotReaderLike
from kraft.record.serde import BytesSerde
from kraft.runtime.config import load_node_config
from kraft.runtime.node import RaftNode


class SnapshottingState(Listener[bytes]):
    """Every committed record, in order; a snapshot of them every ``every`` records."""

    def __init__(self, node: RaftNode[bytes], emit: _Printer, every: int) -> None:
        self.node, self.emit, self.every = node, emit, every
        self.records: list[bytes] = []
        self.since_snapshot = 0

    def handle_commit(self, reader: BatchReader[bytes]) -> None:
        client = self.node.client
        with reader:
            for batch in reader:
                self.records.extend(batch.records)
                self.since_snapshot += len(batch.records)
                self.emit(
                    event="commit",
                    offset=batch.last_offset,
                    base_offset=batch.base_offset,
                    epoch=batch.epoch,
                    records=[r.decode() for r in batch.records],
                    log_start=client.log.log_start_offset,
                )
                if self.since_snapshot < self.every:
                    continue
                snapshot_id = OffsetAndEpoch(batch.last_offset + 1, batch.epoch)
                writer = client.create_snapshot(snapshot_id, batch.append_timestamp_ms)
                if writer is not None:
                    with writer:
                        writer.append(list(self.records))
                        writer.freeze()
                self.since_snapshot = 0

    def handle_load_snapshot(self, reader: SnapshotReaderLike[bytes]) -> None:
        try:
            self.records = [r for batch in reader for r in batch.records]
        finally:
            reader.close()
        self.since_snapshot = 0
        self.emit(
            event="snapshot",
            offset=reader.snapshot_id.offset,
            epoch=reader.snapshot_id.epoch,
            records=[r.decode() for r in self.records],
        )

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.emit(event="leader", leader=leader.leader_id, epoch=leader.epoch)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="the node's TOML file")
    parser.add_argument("--every", type=int, default=10, help="records between snapshots")
    parser.add_argument("--segment-bytes", type=int, default=2048)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = load_node_config(args.config)
    node: RaftNode[bytes] = RaftNode(
        node_id=config.node_id,
        data_dir=config.data_dir,
        config=config.quorum,
        serde=BytesSerde(),
        cluster_id=config.cluster_id,
        listen=config.listen,
        segment_bytes=args.segment_bytes,
        retention=SnapshotRetention(retained_snapshots=1, retention_bytes=0),
    )
    emit = _Printer(sys.stdout)
    node.register(SnapshottingState(node, emit, args.every))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    try:
        node.start()
        emit(event="started", node=node.node_id, listen=str(node.listen_address))
        threading.Thread(target=_console, args=(node, emit, sys.stdin), daemon=True).start()
        while not stop.is_set() and not node.wait(0.2):
            pass
    except KraftError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        node.close()
    return 0 if node.failure is None else 1


if __name__ == "__main__":
    sys.exit(main())
