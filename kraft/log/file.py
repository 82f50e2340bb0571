"""``FileLog``: the replicated log as Kafka lays it out on disk.

A log directory (``<data_dir>/__cluster_metadata-0``) holds::

    00000000000000000000.log        v2 record batches, back to back
    00000000000000000000.index      sparse offset index of that segment
    00000000000001048576.log        the next segment, named by its base offset (and so on)
    leader-epoch-checkpoint         epoch -> start offset (Kafka's text format)
    recovery-point                  (offset, epoch) the log had made durable, checksummed
    log-start-offset                the first offset the log holds (once it is past 0)
    repair-target                   where the log reached before it lost data (if it did)
    quarantine/000001/              what was set aside as corrupt or lost, never deleted
    00000000000000000100-0000000003.checkpoint   a snapshot: end offset 100, epoch 3
    .lock                           held (flock) while the log is open

Durability (docs/storage.md, "Durability and recovery"): :meth:`FileLog.flush` fsyncs the
active segment, then overwrites the *recovery point* in place with the log's (end offset,
epoch): no fsync of its own, so it costs one ``pwrite``; if a power cut loses that write the
mark is only older. It is lowered durably before anything below it is cut. Opening the log
checks the end of each segment below the recovery point and every batch after it, and tells
a torn tail (bad bytes above the recovery point, nothing intact after them: cut, a WARNING)
from corruption (a bad batch below it, or one followed by intact batches) and lost writes (a
log ending below it): those are set aside into ``quarantine/`` with the repair target raised
(an ERROR), so that the replica repairs from the quorum (docs/storage.md, "When a disk lies").
Every batch a read returns is checked first (CRC-32C, offsets, epoch).
"""

from __future__ import annotations

import bisect
import fcntl
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import crc32c

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
from kraft.log.quarantine import (
    intact_batches_after,
    later,
    new_quarantine,
    read_repair_target,
    set_aside_file,
    set_aside_tail,
    write_repair_target,
)
from kraft.log.segment import Segment, datasync, index_path, log_path, segment_name
from kraft.record.batch import Buffer, SimpleRecord, encode_batch, iter_batches
from kraft.snapshot.files import (
    clean_snapshot_directory,
    delete_snapshot_file,
    list_snapshots,
    snapshot_path,
)
from kraft.snapshot.raw import (
    FileRawSnapshotReader,
    FileRawSnapshotWriter,
    RawSnapshotReader,
    RawSnapshotWriter,
)

__all__ = ["FileLog", "format_recovery_point"]

logger = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024  # metadata.log.segment.bytes
DEFAULT_INDEX_INTERVAL_BYTES = 4096  # index.interval.bytes
EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_POINT = "recovery-point"
LOG_START = "log-start-offset"
LOCK_FILE = ".lock"
_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
_RECOVERY_POINT_VERSION = "1"
_SNAPSHOT_CHECK_CHUNK = 4 * 1024 * 1024


class _Damage(NamedTuple):
    """A bad batch found on open: where it is, the offset it should have started at, why."""

    segment: Segment
    position: int
    offset: int
    reason: str


class FileLog(LogBase):
    """The replicated log in Kafka's on-disk layout. Open it with :meth:`FileLog.open`."""

    def __init__(
        self,
        directory: Path,
        segments: list[Segment],
        epochs: EpochCache,
        recovery_point: int,
        lock_fd: int,
        mark_fd: int,
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
        #: The recovery-point file, open for in-place overwrites (see _write_mark).
        self._mark_fd = mark_fd
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
            mark = _read_recovery_point(directory / RECOVERY_POINT)
            mark_fd = os.open(directory / RECOVERY_POINT, os.O_RDWR | os.O_CREAT, 0o644)
        except (OSError, LogDirectoryError) as exc:
            os.close(lock_fd)
            raise LogDirectoryError(f"cannot open {directory / RECOVERY_POINT}: {exc}") from exc
        try:
            log = cls._recover(
                directory, lock_fd, mark_fd, mark, segment_bytes, index_interval_bytes
            )
        except BaseException:
            os.close(mark_fd)
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
        start, a log behind its latest snapshot) are cleaned up. A snapshot that fails its
        check is set aside (``quarantine_snapshot``); a log past 0 with no snapshot at its
        start is set aside and emptied to offset 0, to fetch the leader's snapshot first."""
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
        for snapshot_id in list(self._snapshot_ids):
            try:
                _check_snapshot(self._snapshots[snapshot_id])
            except CorruptRecordError as exc:
                self.quarantine_snapshot(snapshot_id, f"corrupt at open: {exc}")
        if self._log_start > 0 and all(s.offset != self._log_start for s in self._snapshot_ids):
            # The records below the log start are gone and nothing stands for them: without
            # this, the replica would deliver a state missing them to its listeners.
            self._start_over(
                f"recovery: {self.directory} starts at offset {self._log_start} and has no "
                "snapshot there (lost or set aside)"
            )
        if self.truncate_to_latest_snapshot():
            logger.info(
                "recovery: the log was behind its latest snapshot %s", self.latest_snapshot_id
            )

    @classmethod
    def _recover(
        cls,
        directory: Path,
        lock_fd: int,
        mark_fd: int,
        mark: OffsetAndEpoch | None,
        segment_bytes: int,
        index_interval_bytes: int,
    ) -> FileLog:
        for stale in directory.glob("*.tmp"):
            stale.unlink()
        bases = sorted(
            int(m.group(1)) for name in os.listdir(directory) if (m := _SEGMENT_FILE.match(name))
        )
        recovery_point = mark.offset if mark is not None else 0
        segments: list[Segment] = []
        # (epoch, base offset) of every scanned batch whose epoch differs from the batch
        # before it. (Not the batches themselves: their views would pin every chunk read,
        # i.e. the whole tail of the log, in memory.)
        recovered: list[tuple[int, int]] = []
        try:
            damage = cls._scan_segments(
                directory, bases, recovery_point, index_interval_bytes, segments, recovered
            )
            if not segments:
                segments.append(Segment(directory, 0, index_interval_bytes))
            target = read_repair_target(directory)
            prefix_epoch = recovered[-1][0] if recovered else 0
            if damage is not None:
                target = cls._set_aside_damage(directory, damage, bases, mark, prefix_epoch, target)
            log_end = segments[-1].next_offset
            if damage is None and mark is not None and log_end < mark.offset:
                target = later(mark, target)
                write_repair_target(directory, target)
                logger.error(
                    "recovery: %s ends at offset %d, below the %s it had made durable (a lost "
                    "write): repair target %s",
                    directory,
                    log_end,
                    mark,
                    target,
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
                mark_fd,
                segment_bytes,
                index_interval_bytes,
            )
            log._repair_target = target
            if mark is None:
                os.ftruncate(mark_fd, 0)  # an older format may be longer than the new record
            log._write_mark(log._end_and_epoch(), durable=True)
            fsync_directory(directory)  # the recovery-point file may be new
        except BaseException:
            # A log that cannot be opened must not leak the segment files it opened.
            for opened in segments:
                opened.close()
            raise
        return log

    @classmethod
    def _scan_segments(
        cls,
        directory: Path,
        bases: list[int],
        recovery_point: int,
        index_interval_bytes: int,
        segments: list[Segment],
        recovered: list[tuple[int, int]],
    ) -> _Damage | None:
        """Open and check the segments in order, into ``segments``: a torn tail is cut (and
        any segment after it deleted); corruption stops the scan and is returned, the
        segment holding it last in ``segments`` and later ones left unopened."""
        cut = deleted = False
        for base in bases:
            if segments and not cut and base != segments[-1].next_offset:
                previous = segments[-1]
                reason = f"segment {base} follows one that ends at {previous.next_offset}"
                if base <= recovery_point:
                    # A segment lost inside durable data: what follows is set aside.
                    return _Damage(previous, previous.size, previous.next_offset, reason)
                # Past the recovery point: the leftover of a truncation that a crash
                # interrupted (it deletes later segments first), not ours to keep.
                cut = True
            if cut:
                path = log_path(directory, base)
                logger.warning("recovery: deleting segment %s after a truncated tail", path)
                for leftover in (path, index_path(directory, base)):
                    leftover.unlink(missing_ok=True)
                deleted = True
                continue
            segment = Segment(directory, base, index_interval_bytes)
            segments.append(segment)  # closed by the caller if anything fails
            found = cls._recover_segment(segment, recovery_point, recovered)
            if found is None:
                continue
            if not cls._is_torn_tail(found, recovery_point, [b for b in bases if b > base]):
                return found
            cls._cut_torn_tail(found)
            cut = True
        if deleted:
            fsync_directory(directory)  # make the deletions durable (see truncate_to for why)
        return None

    @staticmethod
    def _is_torn_tail(found: _Damage, recovery_point: int, later_bases: list[int]) -> bool:
        """Whether a bad batch is what a crash leaves: above the recovery point (never made
        durable) with nothing intact after it, in this segment or a later one."""
        if found.offset < recovery_point:
            return False
        directory = found.segment.directory
        if any(log_path(directory, base).stat().st_size for base in later_bases):
            return False
        path = found.segment.log_path
        return next(intact_batches_after(path, found.position + 1, found.offset), None) is None

    @staticmethod
    def _cut_torn_tail(found: _Damage) -> None:
        segment = found.segment
        logger.warning(
            "recovery: %s: cutting %d bytes from byte %d (offset %d), a torn tail: %s",
            segment.log_path,
            segment.size - found.position,
            found.position,
            found.offset,
            found.reason,
        )
        segment.truncate(found.position, found.offset)
        segment.flush(index=True)

    @classmethod
    def _set_aside_damage(
        cls,
        directory: Path,
        damage: _Damage,
        bases: list[int],
        mark: OffsetAndEpoch | None,
        prefix_epoch: int,
        target: OffsetAndEpoch | None,
    ) -> OffsetAndEpoch | None:
        """Set aside corruption found on open: from the bad batch to the end of the log.

        The repair target is raised first (durably) to how far the log reached: the later of
        the recovery point and the last intact batch past the damage.
        """
        segment = damage.segment
        later_paths = [log_path(directory, b) for b in bases if b > segment.base_offset]
        reached = OffsetAndEpoch(damage.offset, prefix_epoch)
        if mark is not None:
            reached = later(mark, reached)
        start, floor = damage.position + 1, damage.offset
        for path in [segment.log_path, *later_paths]:
            for batch in intact_batches_after(path, start, floor):
                floor = batch.next_offset
                reached = later(OffsetAndEpoch(floor, batch.partition_leader_epoch), reached)
            start = 0
        if (reached.epoch, reached.offset) > (prefix_epoch, damage.offset):
            target = later(reached, target)
            write_repair_target(directory, target)
        event = cls._move_aside(directory, segment, damage.position, damage.offset, later_paths)
        logger.error(
            "recovery: %s: corrupt data from offset %d (%s), inside what the log had made "
            "durable or followed by intact batches: set aside into %s, not cut; repair target "
            "%s: this replica will not vote for a log behind it nor stand for election until "
            "it has fetched that far again from the quorum",
            segment.log_path,
            damage.offset,
            damage.reason,
            event,
            target,
        )
        return target

    @staticmethod
    def _move_aside(
        directory: Path, segment: Segment, position: int, offset: int, later_paths: list[Path]
    ) -> Path:
        """Move ``segment`` from ``position`` (where ``offset`` should start) and the later
        segment files (closed) into a new quarantine directory, then cut ``segment`` there:
        a crash in between leaves the bytes in both places, never in neither."""
        event = new_quarantine(directory)
        if position < segment.size:
            set_aside_tail(segment.log_path, position, event / f"{segment_name(offset)}.log")
        for path in later_paths:
            set_aside_file(path, event)
            index_path(directory, int(path.name.split(".")[0])).unlink(missing_ok=True)
        try:
            fsync_directory(event)
            fsync_directory(directory)
        except OSError as exc:
            raise StorageError(f"cannot fsync {event} and {directory}: {exc}") from exc
        segment.truncate(position, offset)
        segment.flush(index=True)
        return event

    @staticmethod
    def _recover_segment(
        segment: Segment, recovery_point: int, recovered: list[tuple[int, int]]
    ) -> _Damage | None:
        """Load one segment, checking it against the recovery point; the first bad batch, if
        any (the segment then ends before it; its bytes are still in the file).

        Scanning starts at the last index entry below the recovery point (the index is derived
        data, so if that entry turns out not to point at a good batch the whole segment is
        rescanned before anything is called corrupt).
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
    ) -> _Damage | None:
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
            if start and expected < recovery_point:  # expected < 0: the scan never got going
                raise _IndexMismatchError from exc
            segment.append_index(bytes(entries))
            return _Damage(segment, position, segment.next_offset, str(exc))
        segment.append_index(bytes(entries))
        return None

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
        self._check_repaired()
        return LogAppendInfo(base, last)

    def append_encoded(self, data: bytes) -> LogAppendInfo:
        self._check_open()
        batch = check_encoded_batch(data, self.log_end_offset, self._epoch_floor())
        self._assign_epoch(batch.partition_leader_epoch, batch.base_offset)
        self._append_batches(data, [(batch.last_offset, 0, len(data))])
        self._check_repaired()
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
        self._check_repaired()
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
            self._write_mark(self._mark_at(base), durable=False)
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
        position, first = segment.find_checked(start_offset)
        if first is None:  # the offset is the next segment's base
            k += 1
            segment = self._segments[k]
            position, first = segment.find_checked(start_offset)
            if first is None:
                return LogFetchInfo(b"", start_offset)
        if first.next_offset > limit:
            return LogFetchInfo(b"", start_offset)
        # Whole batches below the limit, up to max_bytes (at least one), across segments,
        # each checked before it is returned (see _checked_length).
        expected = first.base_offset
        parts: list[bytes] = []
        total = 0
        want = max(min(max_bytes, segment.size - position), first.size_in_bytes)
        while True:
            chunk = segment.read_at(position, want)
            taken, expected, stop, error = self._checked_length(chunk, position, expected, limit)
            if error is None and not (stop or taken or parts):
                error = CorruptRecordError("the batch is cut short", position=position)
            if error is not None:
                if not (parts or taken):
                    raise CorruptRecordError(
                        f"{segment.log_path}: {error}", offset=expected, position=error.position
                    ) from error
                stop = True  # return what was intact: the next read raises at the bad batch
            parts.append(chunk[:taken])
            total += taken
            k += 1
            if (
                stop
                or position + taken < segment.size
                or total >= max_bytes
                or k == len(self._segments)
                or self._segments[k].base_offset >= limit
            ):
                break
            segment, position = self._segments[k], 0
            want = min(max_bytes - total, segment.size)
        return LogFetchInfo(b"".join(parts), first.base_offset)

    def _checked_length(
        self, chunk: bytes, position: int, expected: int, limit: int
    ) -> tuple[int, int, bool, CorruptRecordError | None]:
        """How many bytes of ``chunk`` (read at ``position``) are whole batches below
        ``limit`` that pass their checks, the offset after them, whether the limit was
        reached, and what is wrong with the batch after them if anything. Checked: the CRC,
        the base offset following on from the batch before (``expected``: it is not under
        the CRC) and the epoch the epoch cache has for the batch (nor is the epoch: a flipped
        one would hand a follower another epoch's records)."""
        start_epoch = self._start_epoch()
        taken = 0
        try:
            for batch in iter_batches(memoryview(chunk)[: _whole_batches_length(chunk)]):
                if batch.next_offset > limit:
                    return taken, expected, True, None
                if batch.base_offset != expected:
                    return (
                        taken,
                        expected,
                        False,
                        CorruptRecordError(
                            f"batch has base offset {batch.base_offset}, expected {expected}",
                            position=position + batch.position,
                        ),
                    )
                epoch = self._epochs.epoch_at(expected, start_epoch)
                if batch.partition_leader_epoch != epoch:
                    return (
                        taken,
                        expected,
                        False,
                        CorruptRecordError(
                            f"batch has epoch {batch.partition_leader_epoch}, the log says {epoch}",
                            position=position + batch.position,
                        ),
                    )
                taken += batch.size_in_bytes
                expected = batch.next_offset
        except CorruptRecordError as exc:
            return taken, expected, False, exc
        return taken, expected, False, None

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
                self._write_mark(self._mark_at(new_end), durable=True)
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
            # No fsync of its own: lost, it leaves an older mark, never a later one (a lower
            # one is written durably, before anything below the old one is cut).
            self._write_mark(self._end_and_epoch(), durable=False)

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
        self._write_mark(OffsetAndEpoch(offset, self.last_fetched_epoch), durable=True)
        for segment in self._segments:
            segment.delete()
        fresh = Segment(self.directory, offset, self._index_interval)
        self._segments = [fresh]
        self._bases = [offset]
        fsync_directory(self.directory)
        self._log_start = offset
        self._flushed_offset = offset
        write_checkpoint(self.directory / EPOCH_CHECKPOINT, self._epochs)

    def _set_aside_from(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            return
        k = max(0, bisect.bisect_right(self._bases, offset) - 1)
        segment = self._segments[k]
        position, new_end = self._locate(segment, offset)
        if self._recovery_point > new_end:
            self._write_mark(self._mark_at(new_end), durable=True)
        later_segments = self._segments[k + 1 :]
        for closing in later_segments:
            closing.close()
        del self._segments[k + 1 :]
        del self._bases[k + 1 :]
        event = self._move_aside(
            self.directory, segment, position, new_end, [s.log_path for s in later_segments]
        )
        self._flushed_offset = min(self._flushed_offset, new_end)
        logger.error("set aside %s from offset %d into %s", self.directory, new_end, event)

    @staticmethod
    def _locate(segment: Segment, offset: int) -> tuple[int, int]:
        """Where the batch holding ``offset`` starts in ``segment`` and the offset it should
        start at, whether it is intact or not (the damage may be why we ask)."""
        try:
            position, batch = segment.find_checked(offset)
        except CorruptRecordError as exc:
            assert exc.position is not None and exc.offset is not None
            return exc.position, exc.offset
        return position, segment.next_offset if batch is None else batch.base_offset

    def _set_aside_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        event = new_quarantine(self.directory)
        set_aside_file(snapshot_path(self.directory, snapshot_id), event)
        try:
            fsync_directory(event)
            fsync_directory(self.directory)
        except OSError as exc:
            raise StorageError(f"cannot fsync {event} and {self.directory}: {exc}") from exc
        logger.error("set aside snapshot %s into %s", snapshot_id, event)

    def _persist_repair_target(self, target: OffsetAndEpoch | None) -> None:
        write_repair_target(self.directory, target)

    def _mark_at(self, offset: int) -> OffsetAndEpoch:
        """The recovery point for a log ending at ``offset``: with the epoch of the record
        before it."""
        return OffsetAndEpoch(offset, self._epoch_at(offset - 1))

    def _write_mark(self, mark: OffsetAndEpoch, *, durable: bool) -> None:
        """Overwrite the recovery point in place (fixed size): fsynced only if ``durable``."""
        try:
            os.pwrite(self._mark_fd, format_recovery_point(mark), 0)
            if durable:
                datasync(self._mark_fd)
        except OSError as exc:
            raise StorageError(f"cannot write {self.directory / RECOVERY_POINT}: {exc}") from exc
        self._recovery_point = mark.offset

    def _is_batch_boundary(self, offset: int) -> bool:
        if offset == self.log_end_offset:
            return True
        k = bisect.bisect_right(self._bases, offset) - 1
        if k < 0:
            return False
        _, batch = self._segments[k].find_position(offset)
        return batch is not None and batch.base_offset == offset

    def _write_offset_file(self, name: str, offset: int) -> None:
        """Replace ``name`` (the log start) crash-safely: the format ``_read_offset_file``
        reads."""
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
        self._write_mark(self._end_and_epoch(), durable=True)
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
        os.close(self._mark_fd)
        os.close(self._lock_fd)
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise LogDirectoryError(f"log {self.directory} is closed")

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


def format_recovery_point(mark: OffsetAndEpoch) -> bytes:
    """The recovery-point file: ``1 <offset> <epoch> <crc32c>`` in fixed widths (so that it
    is overwritten in place, always whole or detectably torn)."""
    body = f"{_RECOVERY_POINT_VERSION} {mark.offset:020d} {mark.epoch:010d}"
    return f"{body} {crc32c.crc32c(body.encode('ascii')):08x}\n".encode("ascii")


def _read_recovery_point(path: Path) -> OffsetAndEpoch | None:
    """The recovery point (offset, epoch); None if missing or damaged (a WARNING): every
    batch is then checked, and a lost write below it cannot be told."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LogDirectoryError(f"cannot read {path}: {exc}") from exc
    words = data.split()
    if (
        len(words) == 4
        and words[0] == _RECOVERY_POINT_VERSION.encode("ascii")
        and words[1].isdigit()
        and words[2].isdigit()
        and format_recovery_point(OffsetAndEpoch(int(words[1]), int(words[2]))) == data
    ):
        return OffsetAndEpoch(int(words[1]), int(words[2]))
    logger.warning("ignoring a damaged recovery point %s: checking every batch", path)
    return None


def _check_snapshot(reader: RawSnapshotReader) -> None:
    """Check every batch of a frozen snapshot (length, magic, CRC), a chunk at a time;
    ``CorruptRecordError`` at the first bad one, or a torn end."""
    size = reader.size_in_bytes
    position = 0
    while position < size:
        chunk = reader.read(position, _SNAPSHOT_CHECK_CHUNK)
        whole = _whole_batches_length(chunk)
        if whole == 0 and len(chunk) >= 12:
            # One batch larger than the chunk: read exactly enough for it.
            need = int.from_bytes(chunk[8:12], "big", signed=True) + 12
            if len(chunk) < need <= size - position:
                chunk = reader.read(position, need)
                whole = _whole_batches_length(chunk)
        if whole == 0:
            raise CorruptRecordError("a torn or damaged batch", position=position)
        for _ in iter_batches(memoryview(chunk)[:whole], base_position=position):
            pass
        position += whole
