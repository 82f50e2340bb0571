"""Opening a ``FileLog``: checking its segments against the recovery point (docs/storage.md,
"Durability and recovery").

Below the recovery point only the end of each segment is checked (from its last index entry);
from it on, every batch. A bad batch is told apart:

- a *torn tail*, what a crash leaves: above the recovery point, nothing intact after it in
  the segment or a later one. It is cut, with a WARNING;
- *corruption*: below the recovery point, or followed by intact batches. The rest of the log
  is set aside into ``quarantine/`` (never deleted) and the repair target raised, durably
  first, to how far the log reached (the recovery point, or the last intact batch found past
  the damage, whichever is later), with an ERROR.

A log that ends below its recovery point lost a write: the target is raised to it.

The recovery point itself (``format_recovery_point``) is a checksummed ``(offset, epoch)``
record of fixed size, overwritten in place by the log after every flush.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import NamedTuple

import crc32c

from kraft.common.fsutil import fsync_directory
from kraft.errors import (
    CorruptLogError,
    CorruptRecordError,
    InvalidAppendError,
    LogDirectoryError,
    StorageError,
)
from kraft.log.api import OffsetAndEpoch
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
from kraft.log.segment import Segment, index_path, log_path, segment_name

__all__ = [
    "EPOCH_CHECKPOINT",
    "RECOVERY_POINT",
    "RECOVERY_POINT_SIZE",
    "Recovered",
    "format_recovery_point",
    "move_aside",
    "read_recovery_point",
    "recover_segments",
]

logger = logging.getLogger(__name__)

EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_POINT = "recovery-point"
_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
_RECOVERY_POINT_VERSION = "1"
#: The size of the recovery-point file: ``1 <20 digits> <10 digits> <8 hex digits>\n``.
RECOVERY_POINT_SIZE = 43


class Recovered(NamedTuple):
    """What opening found: the segments (oldest first), the epoch cache, the recovery point
    (offset) and the repair target."""

    segments: list[Segment]
    epochs: EpochCache
    recovery_point: int
    target: OffsetAndEpoch | None


class _Damage(NamedTuple):
    """A bad batch found on open: where it is, the offset it should have started at, why."""

    segment: Segment
    position: int
    offset: int
    reason: str


def recover_segments(
    directory: Path, mark: OffsetAndEpoch | None, index_interval_bytes: int
) -> Recovered:
    """Open and check the segments of ``directory`` against the recovery point ``mark``:
    cut a torn tail, set aside corruption and notice a lost write (repair target raised,
    durably, before anything moves), and settle the epoch cache."""
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
        damage = _scan_segments(
            directory, bases, recovery_point, index_interval_bytes, segments, recovered
        )
        if not segments:
            segments.append(Segment(directory, 0, index_interval_bytes))
        target = read_repair_target(directory)
        prefix_epoch = recovered[-1][0] if recovered else 0
        if damage is not None:
            target = _set_aside_damage(directory, damage, bases, mark, prefix_epoch, target)
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
        epochs = _recover_epochs(directory, segments, recovered, recovery_point, log_end)
    except BaseException:
        # A log that cannot be opened must not leak the segment files it opened.
        for opened in segments:
            opened.close()
        raise
    return Recovered(segments, epochs, min(recovery_point, log_end), target)


def _scan_segments(
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
        found = _recover_segment(segment, recovery_point, recovered)
        if found is None:
            continue
        if not _is_torn_tail(found, recovery_point, [b for b in bases if b > base]):
            return found
        _cut_torn_tail(found)
        cut = True
    if deleted:
        fsync_directory(directory)  # make the deletions durable (see truncate_to for why)
    return None


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


def _set_aside_damage(
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
    event = move_aside(directory, segment, damage.position, damage.offset, later_paths)
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


def move_aside(
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
        return _scan_segment(segment, start, recovery_point, recovered, start_last_offset)
    except _IndexMismatchError:
        # Forget what the failed scan of *this* segment noted (what earlier segments
        # noted stays), and scan the segment from its first byte.
        del recovered[scanned_before:]
        return _scan_segment(segment, 0, recovery_point, recovered)


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
            entries += segment.index_batch(batch.last_offset, batch.position, batch.size_in_bytes)
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


class _IndexMismatchError(Exception):
    """Scanning from an index entry found garbage: the index, not the log, may be wrong."""


def _last_batch_epoch(segments: list[Segment]) -> int | None:
    for segment in reversed(segments):
        if segment.size:
            last = None
            for batch in segment.scan(segment.last_index_position(), verify_crc=False):
                last = batch
            if last is not None:
                return int(last.partition_leader_epoch)
    return None


def format_recovery_point(mark: OffsetAndEpoch) -> bytes:
    """The recovery-point file: ``1 <offset> <epoch> <crc32c>`` in fixed widths (so that it
    is overwritten in place, always whole or detectably torn)."""
    body = f"{_RECOVERY_POINT_VERSION} {mark.offset:020d} {mark.epoch:010d}"
    return f"{body} {crc32c.crc32c(body.encode('ascii')):08x}\n".encode("ascii")


def read_recovery_point(path: Path) -> OffsetAndEpoch | None:
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
