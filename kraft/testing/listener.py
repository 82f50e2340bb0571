"""``RecordingListener``: a listener that keeps everything a client tells it."""

from __future__ import annotations

from typing import TypeVar

from kraft.raft.listeners import Batch, BatchReader, LeaderAndEpoch, Listener, SnapshotReaderLike
from kraft.record.offsets import OffsetAndEpoch

__all__ = ["RecordingListener"]

T = TypeVar("T")


class RecordingListener(Listener[T]):
    """A listener that keeps everything it is told, closing every reader after reading it.

    ``auto_close=False`` leaves readers open (to test the "open reader blocks delivery" rule);
    close them through :attr:`open_readers`.
    """

    def __init__(self, auto_close: bool = True) -> None:
        self.auto_close = auto_close
        self.batches: list[Batch[T]] = []
        self.leader_changes: list[LeaderAndEpoch] = []
        #: Each leader change, with the listener's :attr:`next_offset` when it was announced
        #: (the client tells a new local leader only once the listener is past the epoch's
        #: LeaderChange record, as Kafka's ``MockListener`` checks with the claimed epoch's
        #: start offset). The client never announces the same value twice.
        self.leader_change_offsets: dict[LeaderAndEpoch, int] = {}
        self.open_readers: list[BatchReader[T]] = []
        self.snapshots: list[OffsetAndEpoch] = []
        #: The data records of each snapshot loaded, by snapshot id.
        self.snapshot_records: dict[OffsetAndEpoch, list[T]] = {}
        #: The offset after everything read: the last batch read, or a loaded snapshot's end.
        self.next_offset = 0
        self.shutdown_begun = False

    def handle_commit(self, reader: BatchReader[T]) -> None:
        if self.auto_close:
            self._read(reader)
        else:
            self.open_readers.append(reader)

    def read_open_readers(self) -> None:
        """Iterate and close every reader left open."""
        readers, self.open_readers = self.open_readers, []
        for reader in readers:
            self._read(reader)

    def _read(self, reader: BatchReader[T]) -> None:
        with reader:
            for batch in reader:
                self.batches.append(batch)
                self.next_offset = batch.last_offset + 1

    def handle_load_snapshot(self, reader: SnapshotReaderLike[T]) -> None:
        try:
            records = [record for batch in reader for record in batch.records]
        finally:
            reader.close()
        snapshot_id = reader.snapshot_id
        self.snapshots.append(snapshot_id)
        self.snapshot_records[snapshot_id] = records
        self.next_offset = snapshot_id.offset

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader_changes.append(leader)
        self.leader_change_offsets[leader] = self.next_offset

    def begin_shutdown(self) -> None:
        self.shutdown_begun = True

    @property
    def records(self) -> list[T]:
        """Every data record delivered in committed batches, in offset order."""
        return [record for batch in self.batches for record in batch.records]

    @property
    def last_offset(self) -> int | None:
        return self.batches[-1].last_offset if self.batches else None
