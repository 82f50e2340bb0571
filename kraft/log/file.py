"""``FileLog``: the replicated log as Kafka lays it out on disk.

A log directory (``<data_dir>/__cluster_metadata-0``) holds::

    00000000000000000000.log        v2 record batches, back to back
    00000000000000000000.index      sparse offset index of that segment
    00000000000001048576.log        the next segment, named by its base offset (and so on)
    leader-epoch-checkpoint         epoch -> start offset (Kafka's text format)
    recovery-point                  every byte below this offset was fsynced
    log-start-offset                the first offset the log holds (once it is past 0)
    00000000000000000100-0000000003.checkpoint   a snapshot: end offset 100, epoch 3
    .lock                           held (flock) while the log is open

Durability: :meth:`FileLog.flush` fsyncs the active segment; a roll fsyncs the segment it
closes. The *recovery point* is persisted when a segment rolls, when the log is truncated and
on close. Opening the log trusts what lies below the recovery point (checking that the end of
each segment is intact: a bad batch there is a :class:`~kraft.errors.CorruptLogError`) and
validates every batch after it: a torn or corrupt tail, the mark of a crash, is cut off and
logged. So a crash at any byte loses nothing that was flushed and keeps nothing that was not
whole.
"""

from __future__ import annotations

import bisect
import fcntl
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

from kraft.common.fsutil import fsync_directory, write_atomically
from kraft.common.limits import INT32_MAX
from kraft.errors import (
    CorruptLogError,
    CorruptRecordError,
    InvalidAppendError,
    LogDirectoryError,
    StorageError,
)
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
from kraft.log.epoch_cache import EpochCache, read_checkpoint, write_checkpoint
from kraft.log.segment import Segment
from kraft.record.batch import Buffer, SimpleRecord, encode_batch, iter_batches
from kraft.snapshot.files import clean_snapshot_directory, delete_snapshot_file, list_snapshots
from kraft.snapshot.raw import FileRawSnapshotReader, FileRawSnapshotWriter, RawSnapshotWriter

__all__ = ["FileLog"]

logger = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024  # metadata.log.segment.bytes
DEFAULT_INDEX_INTERVAL_BYTES = 4096  # index.interval.bytes
EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_POINT = "recovery-point"
LOG_START = "log-start-offset"
LOCK_FILE = ".lock"
_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")


class FileLog(LogBase):
    """The replicated log in Kafka's on-disk layout. Open it with :meth:`FileLog.open`."""

    def __init__(
        self,
        directory: Path,
        segments: list[Segment],
        epochs: EpochCache,
        recovery_point: int,
        lock_fd: int,
        segment_bytes: int,
        index_interval_bytes: int,
    ) -> None:
        super().__init__(epochs, None)  # the retention is set by _recover_snapshots
        self.directory = directory
        self._log_start = 0  # settled by _recover_snapshots
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._recovery_point = recovery_point
        self._lock_fd = lock_fd
        self._segment_bytes = segment_bytes
        self._index_interval = index_interval_bytes
        self._flushed_offset = self.log_end_offset
        self._closed = False

    # -- opening and recovery --------------------------------------------------------------
    @classmethod
    def open(
        cls,
        log_dir: str | os.PathLike[str],
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        create: bool = True,
        retention: SnapshotRetention | None = None,
    ) -> FileLog:
        """Open (and recover) the log in ``log_dir``, creating the directory if ``create``."""
        if segment_bytes < 1024:
            raise ValueError(f"segment_bytes must be at least 1024, not {segment_bytes}")
        if index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must not be negative")
        directory = Path(log_dir)
        try:
            if create:
                directory.mkdir(parents=True, exist_ok=True)
            elif not directory.is_dir():
                raise LogDirectoryError(f"log directory {directory} does not exist")
            lock_fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LogDirectoryError(f"cannot open log directory {directory}: {exc}") from exc
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(lock_fd)
            raise LogDirectoryError(
                f"log directory {directory} is in use by another FileLog or process"
            ) from exc
        try:
            log = cls._recover(directory, lock_fd, segment_bytes, index_interval_bytes)
        except BaseException:
            os.close(lock_fd)
            raise
        try:
            log._recover_snapshots(retention)
        except BaseException:
            log.abandon()
            raise
        return log

    def _recover_snapshots(self, retention: SnapshotRetention | None) -> None:
        """Load the frozen snapshots and settle the log start against them: leftovers of a
        crash (a ``.part`` download, a ``.deleted`` file, segments or snapshots below the log
        start, a log behind its latest snapshot) are cleaned up."""
        if retention is not None:
            self.retention = retention
        for leftover in clean_snapshot_directory(self.directory):
            logger.info("recovery: removed %s", leftover)
        start = max(_read_offset_file(self.directory / LOG_START), self._segments[0].base_offset)
        snapshots = list_snapshots(self.directory)
        if start > 0 and all(s.offset != start for s in snapshots):
            # A log past 0 starts at a snapshot: a damaged log-start file (read as 0, so the
            # first segment's base counts) is corrected up to the next snapshot.
            start = next((s.offset for s in snapshots if s.offset > start), start)
        for snapshot_id in snapshots:
            if snapshot_id.offset < start:
                logger.info(
                    "recovery: deleting snapshot %s below the log start %d", snapshot_id, start
                )
                delete_snapshot_file(self.directory, snapshot_id)
                continue
            self._on_snapshot_frozen(FileRawSnapshotReader.open(self.directory, snapshot_id))
        if start > self._log_start:
            self._log_start = start
            self._drop_segments_below(start)
            if self._epochs.truncate_from_start(start):
                write_checkpoint(self.directory / EPOCH_CHECKPOINT, self._epochs)
        self._high_watermark = self._log_start
        if self.truncate_to_latest_snapshot():
            logger.info(
                "recovery: the log was behind its latest snapshot %s", self.latest_snapshot_id
            )

    @classmethod
    def _recover(
        cls, directory: Path, lock_fd: int, segment_bytes: int, index_interval_bytes: int
    ) -> FileLog:
        for stale in directory.glob("*.tmp"):
            stale.unlink()
        bases = sorted(
            int(m.group(1)) for name in os.listdir(directory) if (m := _SEGMENT_FILE.match(name))
        )
        recovery_point = _read_offset_file(directory / RECOVERY_POINT)
        segments: list[Segment] = []
        # (epoch, base offset) of every scanned batch whose epoch differs from the batch
        # before it. (Not the batches themselves: their views would pin every chunk read,
        # i.e. the whole tail of the log, in memory.)
        recovered: list[tuple[int, int]] = []
        cut = deleted = False
        segment: Segment | None = None
        try:
            for base in bases:
                segment = Segment(directory, base, index_interval_bytes)
                if segments and not cut and base != segments[-1].next_offset:
                    if base <= recovery_point:
                        raise CorruptLogError(
                            f"segment starts at {base}, but the previous one ends at "
                            f"{segments[-1].next_offset}",
                            path=str(segment.log_path),
                            offset=base,
                            position=0,
                        )
                    cut = True
                if cut:
                    # Everything after a cut tail is past a hole in the offsets: not ours to
                    # keep.
                    logger.warning(
                        "recovery: deleting segment %s after a truncated tail", segment.log_path
                    )
                    segment.delete()
                    segment = None
                    deleted = True
                    continue
                cut = cls._recover_segment(segment, recovery_point, recovered)
                segments.append(segment)
                segment = None
            if deleted:
                fsync_directory(directory)  # make the deletions durable (see truncate_to for why)
            if not segments:
                segments.append(Segment(directory, 0, index_interval_bytes))
            log_end = segments[-1].next_offset
            if recovery_point > log_end:
                raise CorruptLogError(
                    f"the log ends at offset {log_end}, below its recovery point {recovery_point}",
                    path=str(directory),
                    offset=log_end,
                    position=None,
                )
            # What was recovered may sit only in the page cache (a process crash, not a power
            # cut): make it durable before the recovery point moves past it.
            segments[-1].flush(index=True)
            epochs = cls._recover_epochs(directory, segments, recovered, recovery_point, log_end)
            log = cls(
                directory,
                segments,
                epochs,
                min(recovery_point, log_end),
                lock_fd,
                segment_bytes,
                index_interval_bytes,
            )
            log._write_recovery_point(log.log_end_offset)
        except BaseException:
            # A log that cannot be opened must not leak the segment files it opened.
            for opened in [*segments, *([segment] if segment is not None else [])]:
                opened.close()
            raise
        return log

    @staticmethod
    def _recover_segment(
        segment: Segment, recovery_point: int, recovered: list[tuple[int, int]]
    ) -> bool:
        """Load one segment, checking it against the recovery point. True if its tail was cut.

        Scanning starts at the last index entry below the recovery point (the index is derived
        data, so if that entry turns out not to point at a good batch the whole segment is
        rescanned before anything is called corrupt). Batches below the recovery point must
        be intact; from the first bad batch at or past it, the rest is a torn tail and is cut.
        """
        start, start_last_offset = 0, -1
        if segment.load_index():
            kept = [(off, pos) for off, pos in segment.index_entries() if off < recovery_point]
            if kept:
                start_last_offset, start = kept[-1]
        scanned_before = len(recovered)
        try:
            return FileLog._scan_segment(
                segment, start, recovery_point, recovered, start_last_offset
            )
        except _IndexMismatchError:
            # Forget what the failed scan of *this* segment noted (what earlier segments
            # noted stays), and scan the segment from its first byte.
            del recovered[scanned_before:]
            return FileLog._scan_segment(segment, 0, recovery_point, recovered)

    @staticmethod
    def _scan_segment(
        segment: Segment,
        start: int,
        recovery_point: int,
        recovered: list[tuple[int, int]],
        start_last_offset: int = -1,
    ) -> bool:
        """Scan ``segment`` from ``start``: 0, or the position of the index entry whose
        offset is ``start_last_offset``. Raises ``_IndexMismatchError`` if that entry is wrong.
        """
        segment.reset_index(start + 1 if start else 0)
        segment.next_offset = segment.base_offset
        expected = segment.base_offset if start == 0 else -1
        position = start
        entries = bytearray()
        try:
            for batch in segment.scan(start, verify_crc=True):
                if expected < 0 and batch.last_offset != start_last_offset:
                    # The base offset is not under the CRC: without this check a bit flip
                    # there (or a stale index entry) would go unnoticed and set a wrong LEO.
                    raise CorruptRecordError(
                        f"batch ends at offset {batch.last_offset}, but the index says "
                        f"{start_last_offset}",
                        offset=batch.base_offset,
                        position=batch.position,
                    )
                if expected >= 0 and batch.base_offset != expected:
                    raise CorruptRecordError(
                        f"batch has base offset {batch.base_offset}, expected {expected}",
                        offset=batch.base_offset,
                        position=batch.position,
                    )
                if batch.base_offset < recovery_point < batch.next_offset:
                    raise CorruptRecordError(
                        f"the recovery point {recovery_point} falls inside a batch",
                        offset=batch.base_offset,
                        position=batch.position,
                    )
                # Nor is the epoch under the CRC. A log's epochs never go back, so one that
                # does (or is negative) is damage, not something this log appended.
                epoch = batch.partition_leader_epoch
                if epoch < 0 or (recovered and epoch < recovered[-1][0]):
                    raise CorruptRecordError(
                        f"batch epoch {epoch} is below the epoch before it "
                        f"({recovered[-1][0] if recovered else 0})",
                        offset=batch.base_offset,
                        position=batch.position,
                    )
                if not recovered or recovered[-1][0] != epoch:
                    recovered.append((epoch, batch.base_offset))
                entries += segment.index_batch(
                    batch.last_offset, batch.position, batch.size_in_bytes
                )
                expected = batch.next_offset
                segment.next_offset = expected
                position = batch.position + batch.size_in_bytes
        except CorruptRecordError as exc:
            if expected < recovery_point:  # expected < 0: the scan never got going
                if start:
                    raise _IndexMismatchError from exc
                raise CorruptLogError(
                    f"corrupt batch below the recovery point {recovery_point}: {exc}",
                    path=str(segment.log_path),
                    offset=exc.offset,
                    position=exc.position,
                ) from exc
            logger.warning(
                "recovery: %s: cutting %d bytes from byte %d (offset %d): %s",
                segment.log_path,
                segment.size - position,
                position,
                segment.next_offset,
                exc,
            )
            segment.append_index(bytes(entries))
            segment.truncate(position, segment.next_offset)
            segment.flush(index=True)
            return True
        segment.append_index(bytes(entries))
        return False

    @staticmethod
    def _recover_epochs(
        directory: Path,
        segments: list[Segment],
        recovered: list[tuple[int, int]],
        recovery_point: int,
        log_end: int,
    ) -> EpochCache:
        path = directory / EPOCH_CHECKPOINT
        epochs = read_checkpoint(path)
        rebuilt = epochs is None
        try:
            if epochs is not None:
                epochs.truncate_from_end(log_end)
                # The checkpoint vouches for the epochs below the recovery point; the scan saw
                # where each epoch after it starts.
                for epoch, base in recovered:
                    if base >= recovery_point:
                        epochs.assign(epoch, base)
        except InvalidAppendError:
            rebuilt = True
        last_epoch = _last_batch_epoch(segments)
        if last_epoch is None and epochs is None:
            epochs = EpochCache()  # a new, empty log
            write_checkpoint(path, epochs)
            return epochs
        if not rebuilt and epochs is not None and epochs.latest_epoch == last_epoch:
            write_checkpoint(path, epochs)
            return epochs
        logger.info("recovery: rebuilding the epoch cache of %s from its batches", directory)
        epochs = EpochCache()
        for segment in segments:
            for batch in segment.scan(verify_crc=False):
                try:
                    epochs.assign(batch.partition_leader_epoch, batch.base_offset)
                except InvalidAppendError as exc:
                    # Only the end of each segment below the recovery point was checked: an
                    # epoch going back inside one is damage there, not a bad append.
                    raise CorruptLogError(
                        f"corrupt batch epoch below the recovery point: {exc}",
                        path=str(segment.log_path),
                        offset=batch.base_offset,
                        position=batch.position,
                    ) from exc
        write_checkpoint(path, epochs)
        return epochs

    # -- offsets ---------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def last_flushed_offset(self) -> int:
        return self._flushed_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    def segments(self) -> list[Segment]:
        """The segments, oldest first (for tools and tests)."""
        return list(self._segments)

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    # -- appends ---------------------------------------------------------------------------
    def append_as_leader(
        self,
        records: Sequence[bytes | SimpleRecord],
        epoch: int,
        *,
        timestamp_ms: int,
        control: bool = False,
    ) -> LogAppendInfo:
        self._check_open()
        self._check_leader_epoch(epoch)
        base = self.log_end_offset
        data = encode_batch(base, epoch, records, timestamp_ms=timestamp_ms, control=control)
        last = base + len(records) - 1
        self._assign_epoch(epoch, base)
        self._append_batches(data, [(last, 0, len(data))])
        return LogAppendInfo(base, last)

    def append_encoded(self, data: bytes) -> LogAppendInfo:
        self._check_open()
        batch = check_encoded_batch(data, self.log_end_offset, self._epoch_floor())
        self._assign_epoch(batch.partition_leader_epoch, batch.base_offset)
        self._append_batches(data, [(batch.last_offset, 0, len(data))])
        return LogAppendInfo(batch.base_offset, batch.last_offset)

    def append_as_follower(self, batches: Buffer) -> LogAppendInfo:
        self._check_open()
        views = validate_follower_batches(batches, self.log_end_offset, self._epoch_floor())
        for batch in views:
            self._assign_epoch(batch.partition_leader_epoch, batch.base_offset)
        data = batches if isinstance(batches, memoryview) else memoryview(batches)
        start = views[0].position
        spans = [(b.last_offset, b.position - start, b.size_in_bytes) for b in views]
        self._append_batches(data[start : views[-1].position + views[-1].size_in_bytes], spans)
        return LogAppendInfo(views[0].base_offset, views[-1].last_offset)

    def _append_batches(self, data: Buffer, spans: list[tuple[int, int, int]]) -> None:
        """Write whole batches, rolling segments as needed; ``spans`` = (last, pos, size)."""
        view = memoryview(data)
        i = 0
        while i < len(spans):
            segment = self._maybe_roll(spans[i][2], spans[i][0])
            # Take as many batches as fit in this segment, as one write.
            entries = bytearray()
            start_pos = spans[i][1]
            room = self._segment_bytes - segment.size
            j = i
            while j < len(spans):
                last, pos, size = spans[j]
                if j > i and (
                    pos + size - start_pos > room or last - segment.base_offset > INT32_MAX
                ):
                    break
                entries += segment.index_batch(last, segment.size + pos - start_pos, size)
                j += 1
            end_pos = spans[j - 1][1] + spans[j - 1][2]
            segment.append(view[start_pos:end_pos], bytes(entries), spans[j - 1][0])
            i = j

    def _maybe_roll(self, size: int, last_offset: int) -> Segment:
        active = self._segments[-1]
        if active.size and (
            active.size + size > self._segment_bytes or last_offset - active.base_offset > INT32_MAX
        ):
            active.flush(index=True)
            base = active.next_offset
            segment = Segment(self.directory, base, self._index_interval)
            fsync_directory(self.directory)
            self._segments.append(segment)
            self._bases.append(base)
            self._flushed_offset = max(self._flushed_offset, base)
            self._write_recovery_point(base)
            logger.info("rolled %s at offset %d", self.directory, base)
            return segment
        return active

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        if self._epochs.assign(epoch, start_offset):
            write_checkpoint(self.directory / EPOCH_CHECKPOINT, self._epochs)

    # -- reads -----------------------------------------------------------------------------
    def read(
        self,
        start_offset: int,
        isolation: Isolation = Isolation.UNCOMMITTED,
        max_bytes: int = DEFAULT_MAX_READ_BYTES,
    ) -> LogFetchInfo:
        self._check_open()
        if not self.log_start_offset <= start_offset <= self.log_end_offset:
            raise ValueError(
                f"offset {start_offset} is outside the log "
                f"[{self.log_start_offset}, {self.log_end_offset}]"
            )
        limit = self._high_watermark if isolation is Isolation.COMMITTED else self.log_end_offset
        if start_offset >= limit:
            return LogFetchInfo(b"", start_offset)
        k = bisect.bisect_right(self._bases, start_offset) - 1
        segment = self._segments[k]
        position, first = segment.find_position(start_offset)
        if first is None:  # the offset is the next segment's base
            k += 1
            segment = self._segments[k]
            position, first = segment.find_position(start_offset)
            if first is None:
                return LogFetchInfo(b"", start_offset)
        if first.next_offset > limit:
            return LogFetchInfo(b"", start_offset)
        # Whole batches below the limit, up to max_bytes (at least one), across segments.
        parts: list[bytes] = []
        total = 0
        want = max(min(max_bytes, segment.size - position), first.size_in_bytes)
        while True:
            chunk = segment.read_at(position, want)
            taken = 0
            reached_limit = False
            for batch in iter_batches(chunk[: _whole_batches_length(chunk)], verify_crc=False):
                if batch.next_offset > limit:
                    reached_limit = True
                    break
                taken += batch.size_in_bytes
            parts.append(chunk[:taken])
            total += taken
            k += 1
            if (
                reached_limit
                or position + taken < segment.size
                or total >= max_bytes
                or k == len(self._segments)
                or self._segments[k].base_offset >= limit
            ):
                break
            segment, position = self._segments[k], 0
            want = min(max_bytes - total, segment.size)
        return LogFetchInfo(b"".join(parts), first.base_offset)

    # -- truncation and durability ---------------------------------------------------------
    def initialize_leader_epoch(self, epoch: int) -> None:
        self._check_open()
        self._assign_epoch(epoch, self.log_end_offset)

    def truncate_to(self, offset: int) -> None:
        self._check_open()
        self._check_truncation(offset)
        if offset < self.log_end_offset:
            k = max(0, bisect.bisect_right(self._bases, offset) - 1)
            segment = self._segments[k]
            position, batch = segment.find_position(offset)
            new_end = segment.next_offset if batch is None else batch.base_offset
            self._check_truncation(offset, new_end)
            # Lower the recovery point before cutting, so that a crash in between never
            # leaves new appends below a recovery point that vouches for bytes now gone.
            if self._recovery_point > new_end:
                self._write_recovery_point(new_end)
            for dropped in self._segments[k + 1 :]:
                dropped.delete()
            if len(self._segments) > k + 1:
                # Make the deletions durable: a segment of the cut-off branch that comes back
                # after a crash would be taken as the continuation of the log once new
                # appends reach its base offset.
                fsync_directory(self.directory)
            del self._segments[k + 1 :]
            del self._bases[k + 1 :]
            segment.truncate(position, new_end)
            segment.flush(index=True)
            logger.info("truncated %s to offset %d", self.directory, new_end)
        if self._epochs.truncate_from_end(min(offset, self.log_end_offset)):
            write_checkpoint(self.directory / EPOCH_CHECKPOINT, self._epochs)
        self._flushed_offset = min(self._flushed_offset, self.log_end_offset)

    def flush(self, force: bool = False) -> None:
        """fsync the active segment: everything appended so far survives a crash."""
        self._check_open()
        if self._flushed_offset < self.log_end_offset or force:
            self._segments[-1].flush()
            self._flushed_offset = self.log_end_offset

    # -- snapshots and the log start ---------------------------------------------------------
    def _new_snapshot_writer(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter:
        self._check_open()
        return FileRawSnapshotWriter.create(self.directory, snapshot_id, self._on_snapshot_frozen)

    def _delete_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        delete_snapshot_file(self.directory, snapshot_id)

    def _advance_log_start(self, offset: int) -> None:
        self._check_open()
        # The log start is durable before anything below it goes: a crash in between leaves
        # files that recovery deletes, never a log start without its data or snapshot.
        self._write_offset_file(LOG_START, offset)
        self._log_start = offset
        self._drop_segments_below(offset)

    def _drop_segments_below(self, offset: int) -> None:
        """Delete the segments that hold only offsets below ``offset`` (never the active one)."""
        drop = 0
        while drop + 1 < len(self._segments) and self._segments[drop + 1].base_offset <= offset:
            drop += 1
        if not drop:
            return
        for segment in self._segments[:drop]:
            logger.info("deleting segment %s below the log start %d", segment.log_path, offset)
            segment.delete()
        del self._segments[:drop]
        del self._bases[:drop]
        fsync_directory(self.directory)

    def _reset_to(self, offset: int) -> None:
        self._check_open()
        self._write_offset_file(LOG_START, offset)
        self._write_recovery_point(offset)
        for segment in self._segments:
            segment.delete()
        fresh = Segment(self.directory, offset, self._index_interval)
        self._segments = [fresh]
        self._bases = [offset]
        fsync_directory(self.directory)
        self._log_start = offset
        self._flushed_offset = offset
        write_checkpoint(self.directory / EPOCH_CHECKPOINT, self._epochs)

    # TODO(disk branch): FileLog's side of the repair contract (replaced before merge).
    def _set_aside_from(self, offset: int) -> None:
        raise NotImplementedError

    def _set_aside_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        raise NotImplementedError

    def _persist_repair_target(self, target: OffsetAndEpoch | None) -> None:
        raise NotImplementedError

    def _is_batch_boundary(self, offset: int) -> bool:
        if offset == self.log_end_offset:
            return True
        k = bisect.bisect_right(self._bases, offset) - 1
        if k < 0:
            return False
        _, batch = self._segments[k].find_position(offset)
        return batch is not None and batch.base_offset == offset

    def _write_offset_file(self, name: str, offset: int) -> None:
        """Replace ``name`` (the recovery point or the log start) crash-safely: the format
        ``_read_offset_file`` reads."""
        path = self.directory / name
        try:
            write_atomically(path, f"0\n{offset}\n".encode("ascii"))
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc

    def close(self) -> None:
        """Flush, persist the recovery point and release the directory."""
        if self._closed:
            return
        self.flush()
        for segment in self._segments:
            segment.flush(index=True)
        self._write_recovery_point(self.log_end_offset)
        self._release()

    def abandon(self) -> None:
        """Release the files without flushing or checkpointing: what a crash leaves behind.

        For tests and tools that need to reopen a log as it would be found after a crash.
        """
        if not self._closed:
            self._release()

    def _release(self) -> None:
        self._close_snapshots()
        for segment in self._segments:
            segment.close()
        os.close(self._lock_fd)
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise LogDirectoryError(f"log {self.directory} is closed")

    def _write_recovery_point(self, offset: int) -> None:
        self._write_offset_file(RECOVERY_POINT, offset)
        self._recovery_point = offset

    def __enter__(self) -> FileLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"FileLog({str(self.directory)!r}, start={self.log_start_offset}, "
            f"end={self.log_end_offset}, hw={self._high_watermark}, "
            f"segments={len(self._segments)})"
        )


class _IndexMismatchError(Exception):
    """Scanning from an index entry found garbage: the index, not the log, may be wrong."""


def _whole_batches_length(chunk: bytes) -> int:
    """The length of the prefix of ``chunk`` made of whole batches (by their length fields)."""
    pos = 0
    end = len(chunk)
    while end - pos >= 12:
        size = int.from_bytes(chunk[pos + 8 : pos + 12], "big", signed=True) + 12
        if size < 12 or pos + size > end:
            break
        pos += size
    return pos


def _last_batch_epoch(segments: list[Segment]) -> int | None:
    for segment in reversed(segments):
        if segment.size:
            last = None
            for batch in segment.scan(segment.last_index_position(), verify_crc=False):
                last = batch
            if last is not None:
                return int(last.partition_leader_epoch)
    return None


def _read_offset_file(path: Path) -> int:
    try:
        text = path.read_text("ascii")
    except FileNotFoundError:
        return 0
    except UnicodeDecodeError:
        text = ""  # garbage bytes: malformed, handled below like any other damage
    except OSError as exc:
        raise LogDirectoryError(f"cannot read {path}: {exc}") from exc
    lines = text.split()
    if len(lines) != 2 or lines[0] != "0" or not lines[1].isdigit():
        # A damaged recovery point only costs time (the whole log is recovered); a damaged
        # log start only keeps more of the log.
        logger.warning("ignoring malformed offset file (recovery point or log start) %s", path)
        return 0
    return int(lines[1])
