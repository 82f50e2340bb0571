"""``MemoryLog``: the ``ReplicatedLog`` contract in memory, with crash semantics.

The simulator runs every node's real Raft client over a ``MemoryLog``. To make crashes honest
the log tracks what has been flushed: :meth:`MemoryLog.crash` drops every batch that was not,
exactly as a machine losing its page cache would, and forgets the (never persisted) high
watermark. Batches are kept as the v2 bytes they were appended as, so reads return the same
bytes a ``FileLog`` would.

It can also lie the way disks do, for the simulator's storage faults (docs/storage.md, "When a
disk lies"): :meth:`MemoryLog.corrupt_batch` and :meth:`MemoryLog.corrupt_snapshot` flip bits,
:meth:`MemoryLog.lose_next_flush` makes a flush report success and keep nothing, and
:meth:`MemoryLog.misdirect_next_append` writes a batch over another one. Reads check every
batch, and :meth:`MemoryLog.crash` recovers as ``FileLog`` opens: whatever it finds corrupt or
missing it sets aside and marks for repair from the quorum.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence

from kraft.errors import CorruptRecordError
from kraft.log.api import (
    DEFAULT_MAX_READ_BYTES,
    Isolation,
    LogAppendInfo,
    LogFetchInfo,
    OffsetAndEpoch,
)
from kraft.log.base import (
    LogBase,
    SnapshotRetention,
    check_encoded_batch,
    validate_follower_batches,
)
from kraft.log.epoch_cache import EpochCache
from kraft.record.batch import (
    Buffer,
    RecordBatch,
    SimpleRecord,
    encode_batch,
    iter_batches,
    read_batch,
)
from kraft.snapshot.raw import MemoryRawSnapshotReader, MemoryRawSnapshotWriter, RawSnapshotWriter

__all__ = ["MemoryLog"]

logger = logging.getLogger(__name__)


class MemoryLog(LogBase):
    """An in-memory replicated log that can lose its unflushed tail on :meth:`crash`."""

    def __init__(self, retention: SnapshotRetention | None = None) -> None:
        super().__init__(EpochCache(), retention)
        self._batches: list[bytes] = []
        self._base_offsets: list[int] = []
        self._last_offsets: list[int] = []
        self._start_offset = 0
        self._end_offset = 0
        self._flushed_offset = 0
        #: What the log believes it made durable, (end offset, epoch) at the last flush: a
        #: lying flush moves this and not ``_flushed_offset`` (FileLog's recovery point).
        self._flushed_mark = OffsetAndEpoch(0, 0)
        self._lose_next_flush = False
        self._misdirect_onto: int | None = None
        #: Batches and snapshots set aside as corrupt or cut off behind a corrupt one.
        self.set_aside: list[bytes] = []
        #: base offset -> (bytes, last offset, epoch, batch) of a batch found intact: held
        #: bytes never change in place (a fault replaces them), so the check is not redone.
        self._intact_seen: dict[int, tuple[bytes, int, int, RecordBatch]] = {}

    # -- offsets ---------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self._start_offset

    @property
    def log_end_offset(self) -> int:
        return self._end_offset

    @property
    def last_flushed_offset(self) -> int:
        return self._flushed_offset

    # -- appends ---------------------------------------------------------------------------
    def append_as_leader(
        self,
        records: Sequence[bytes | SimpleRecord],
        epoch: int,
        *,
        timestamp_ms: int,
        control: bool = False,
    ) -> LogAppendInfo:
        self._check_leader_epoch(epoch)
        base = self._end_offset
        # Encode first: a batch that cannot be encoded (no records) must not leave its epoch
        # in the cache (FileLog does the same).
        data = encode_batch(base, epoch, records, timestamp_ms=timestamp_ms, control=control)
        self._epochs.assign(epoch, base)
        self._add(data, base, base + len(records) - 1)
        self._check_repaired()
        return LogAppendInfo(base, base + len(records) - 1)

    def append_encoded(self, data: bytes) -> LogAppendInfo:
        batch = check_encoded_batch(data, self._end_offset, self._epoch_floor())
        self._epochs.assign(batch.partition_leader_epoch, batch.base_offset)
        self._add(bytes(data), batch.base_offset, batch.last_offset)
        self._check_repaired()
        return LogAppendInfo(batch.base_offset, batch.last_offset)

    def append_as_follower(self, batches: Buffer) -> LogAppendInfo:
        views = validate_follower_batches(batches, self._end_offset, self._epoch_floor())
        first = views[0].base_offset
        for batch in views:
            self._epochs.assign(batch.partition_leader_epoch, batch.base_offset)
            self._add(bytes(batch.buffer), batch.base_offset, batch.last_offset)
        self._check_repaired()
        return LogAppendInfo(first, views[-1].last_offset)

    def _add(self, data: bytes, base_offset: int, last_offset: int) -> None:
        onto = self._misdirect_onto
        if onto is not None and self._batches:
            # The bytes land on an older batch; where they belonged stays blank.
            self._misdirect_onto = None
            k = min(bisect.bisect_left(self._last_offsets, onto), len(self._batches) - 1)
            self._batches[k] = data
            data = bytes(len(data))
        self._batches.append(data)
        self._base_offsets.append(base_offset)
        self._last_offsets.append(last_offset)
        self._end_offset = last_offset + 1

    # -- reads -----------------------------------------------------------------------------
    def read(
        self,
        start_offset: int,
        isolation: Isolation = Isolation.UNCOMMITTED,
        max_bytes: int = DEFAULT_MAX_READ_BYTES,
    ) -> LogFetchInfo:
        if not self._start_offset <= start_offset <= self._end_offset:
            raise ValueError(
                f"offset {start_offset} is outside the log "
                f"[{self._start_offset}, {self._end_offset}]"
            )
        limit = self._high_watermark if isolation is Isolation.COMMITTED else self._end_offset
        i = bisect.bisect_left(self._last_offsets, start_offset)
        out: list[bytes] = []
        size = 0
        first_offset = start_offset
        while i < len(self._batches) and self._last_offsets[i] < limit:
            data = self._batches[i]
            if out and size + len(data) > max_bytes:
                break
            if self._intact(i) is None:
                if out:
                    break
                raise CorruptRecordError(
                    "the batch the log holds there is corrupt", offset=self._base_offsets[i]
                )
            if not out:
                first_offset = self._base_offsets[i]
            out.append(data)
            size += len(data)
            i += 1
        return LogFetchInfo(b"".join(out), first_offset)

    def _intact(self, i: int) -> RecordBatch | None:
        """Batch ``i`` if it is whole, passes its CRC and holds the offsets and the epoch it
        should (neither the base offset nor the epoch is under the CRC); else None."""
        data = self._batches[i]
        base, last = self._base_offsets[i], self._last_offsets[i]
        epoch = self._epochs.epoch_at(base, self._start_epoch())
        seen = self._intact_seen.get(base)
        if seen is not None and seen[0] is data and seen[1] == last and seen[2] == epoch:
            return seen[3]
        try:
            batch = read_batch(data)
        except CorruptRecordError:
            return None
        if (
            batch.base_offset == base
            and batch.last_offset == last
            and batch.partition_leader_epoch == epoch
        ):
            self._intact_seen[base] = (data, last, epoch, batch)
            return batch
        return None

    def batches_between(self, start_offset: int, end_offset: int) -> list[RecordBatch]:
        """Views of every batch that ends at or after ``start_offset`` and begins before
        ``end_offset`` (for the simulator's checks; CRCs were checked on append)."""
        i = bisect.bisect_left(self._last_offsets, start_offset)
        j = bisect.bisect_left(self._base_offsets, end_offset)
        return [read_batch(self._batches[k], verify_crc=False) for k in range(i, j)]

    def held_batches(
        self, start_offset: int, end_offset: int
    ) -> list[tuple[int, int, RecordBatch | None]]:
        """(base offset, last offset, batch) of every batch slot :meth:`batches_between`
        would visit; the batch is None where the bytes held there are not the intact batch
        the log expects (for the simulator's checks under storage faults)."""
        i = bisect.bisect_left(self._last_offsets, start_offset)
        j = bisect.bisect_left(self._base_offsets, end_offset)
        return [
            (
                self._base_offsets[k],
                self._last_offsets[k],
                self._intact(k),
            )
            for k in range(i, j)
        ]

    def batches(self) -> list[RecordBatch]:
        """Every batch in the log, as views (for tests and the simulator's checks)."""
        return [read_batch(data) for data in self._batches]

    # -- truncation and durability ---------------------------------------------------------
    def initialize_leader_epoch(self, epoch: int) -> None:
        self._epochs.assign(epoch, self._end_offset)

    def truncate_to(self, offset: int) -> None:
        keep = bisect.bisect_left(self._last_offsets, offset)
        self._check_truncation(
            offset, self._base_offsets[keep] if keep < len(self._batches) else None
        )
        if keep < len(self._batches):
            self._intact_seen.clear()
            del self._batches[keep:]
            del self._base_offsets[keep:]
            del self._last_offsets[keep:]
            self._end_offset = self._last_offsets[-1] + 1 if self._batches else self._start_offset
        self._epochs.truncate_from_end(min(offset, self._end_offset))
        self._lower_flushed(self._end_offset)

    def _lower_flushed(self, end: int) -> None:
        self._flushed_offset = min(self._flushed_offset, end)
        if self._flushed_mark.offset > end:
            self._flushed_mark = OffsetAndEpoch(end, self.last_fetched_epoch)

    def flush(self, force: bool = False) -> None:
        if self._lose_next_flush:
            self._lose_next_flush = False
        else:
            self._flushed_offset = self._end_offset
        self._flushed_mark = self._end_and_epoch()

    def crash(self) -> None:
        """Lose what a power cut would: unflushed batches and the high watermark.

        Epochs that started in the lost part are forgotten with it (Kafka's ``MockLog.reopen``).
        """
        keep = bisect.bisect_left(self._base_offsets, self._flushed_offset)
        self._intact_seen.clear()
        del self._batches[keep:]
        del self._base_offsets[keep:]
        del self._last_offsets[keep:]
        self._end_offset = self._last_offsets[-1] + 1 if self._batches else self._start_offset
        self._epochs.truncate_from_end(self._end_offset)
        self._high_watermark = self._start_offset
        self._recover()
        # A snapshot is durable once frozen; if the crash left the log behind it (records
        # not flushed yet), restart from it, as FileLog's recovery does.
        self.truncate_to_latest_snapshot()

    def _recover(self) -> None:
        """What FileLog's open does: check every snapshot and batch, set aside what is
        corrupt, and notice a log that ends below what it had made durable (a lost write)."""
        for snapshot_id in list(self._snapshot_ids):
            try:
                for _ in iter_batches(self._snapshots[snapshot_id].records()):
                    pass
            except CorruptRecordError as exc:
                self.quarantine_snapshot(snapshot_id, f"corrupt at recovery: {exc}")
        mark = self._flushed_mark
        bad = next((i for i in range(len(self._batches)) if self._intact(i) is None), None)
        if bad is not None:
            self.quarantine_from(self._base_offsets[bad], "corrupt batch found at recovery")
        if self._end_offset < mark.offset:
            target = self._raise_repair_target(mark)
            logger.error(
                "the log ends at %d, below the %d it had made durable (a lost write): "
                "repair target %s",
                self._end_offset,
                mark.offset,
                target,
            )
        self._flushed_mark = self._end_and_epoch()

    # -- storage faults, for the simulator --------------------------------------------------
    def corrupt_batch(self, offset: int, position: int, mask: int = 0x01) -> None:
        """Flip the bits ``mask`` of byte ``position`` (modulo the size) of the batch holding
        ``offset``: bit rot that nothing notices until the batch is read."""
        if not self._start_offset <= offset < self._end_offset:
            raise ValueError(f"offset {offset} is outside the log")
        k = bisect.bisect_left(self._last_offsets, offset)
        data = bytearray(self._batches[k])
        data[position % len(data)] ^= mask & 0xFF or 0x01
        self._batches[k] = bytes(data)

    def corrupt_snapshot(
        self, snapshot_id: OffsetAndEpoch, position: int, mask: int = 0x01
    ) -> None:
        """Flip bits of one byte of a frozen snapshot (readers handed out keep their bytes)."""
        reader = self._snapshots[snapshot_id]
        data = bytearray(reader.records())
        if not data:
            return
        data[position % len(data)] ^= mask & 0xFF or 0x01
        self._snapshots[snapshot_id] = MemoryRawSnapshotReader(snapshot_id, bytes(data))

    def lose_next_flush(self) -> None:
        """The next flush reports success and makes nothing durable."""
        self._lose_next_flush = True

    def misdirect_next_append(self, onto_offset: int) -> None:
        """The next batch appended is written over the batch holding ``onto_offset`` (or the
        last one), leaving blank bytes where it belonged."""
        self._misdirect_onto = onto_offset

    def _set_aside_from(self, offset: int) -> None:
        keep = bisect.bisect_left(self._last_offsets, offset)
        self.set_aside.extend(self._batches[keep:])
        self._intact_seen.clear()
        del self._batches[keep:]
        del self._base_offsets[keep:]
        del self._last_offsets[keep:]
        self._end_offset = self._last_offsets[-1] + 1 if self._batches else self._start_offset
        self._lower_flushed(self._end_offset)

    def _set_aside_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        self.set_aside.append(self._snapshots[snapshot_id].records())

    def _persist_repair_target(self, target: OffsetAndEpoch | None) -> None:
        pass  # the field itself survives crash(): memory stands for the disk here

    # -- snapshots: kept in memory, durable once frozen -------------------------------------
    def _new_snapshot_writer(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter:
        return MemoryRawSnapshotWriter(snapshot_id, self._on_snapshot_frozen)

    def _delete_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        pass  # the reader was dropped: the bytes go with it

    def _advance_log_start(self, offset: int) -> None:
        drop = bisect.bisect_left(self._last_offsets, offset)
        self._intact_seen.clear()
        del self._batches[:drop]
        del self._base_offsets[:drop]
        del self._last_offsets[:drop]
        self._start_offset = offset
        if not self._batches:
            self._end_offset = max(self._end_offset, offset)
        self._flushed_offset = max(self._flushed_offset, offset)

    def _reset_to(self, offset: int) -> None:
        self._intact_seen.clear()
        self._batches.clear()
        self._base_offsets.clear()
        self._last_offsets.clear()
        self._start_offset = self._end_offset = self._flushed_offset = offset
        self._flushed_mark = OffsetAndEpoch(offset, 0)

    def _is_batch_boundary(self, offset: int) -> bool:
        if offset == self._end_offset:
            return True
        i = bisect.bisect_left(self._base_offsets, offset)
        return i < len(self._base_offsets) and self._base_offsets[i] == offset

    def size_in_bytes(self) -> int:
        return sum(len(b) for b in self._batches)

    def close(self) -> None:
        self.flush()
        self._close_snapshots()
