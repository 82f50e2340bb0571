"""What ``FileLog`` keeps of data it found corrupt or lost (docs/storage.md, "When a disk lies").

Nothing the log finds bad is deleted: it is *set aside* into ``quarantine/`` beside the segments,
one numbered directory per event (``quarantine/000001/``, ``000002/``, ...; the core reads no
clock, the files' own times say when), holding the segment tails and snapshot files as they
were, under the names they had (a segment tail is named by the offset it was expected to start
at), so that ``kraft log dump quarantine/000001`` reads them like a log directory.

The *repair target* lives in ``repair-target`` (``0``, then ``offset epoch``), replaced
atomically; no file means no target.

:func:`intact_batches_after` finds the batches that are still whole and pass their CRC past a
damaged one (garbage skipped): whether anything valid follows a bad batch is what tells a torn
tail (cut) from corruption (set aside), and the last of them says how far the log reached.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from kraft.common.fsutil import fsync_directory, write_atomically
from kraft.errors import CorruptRecordError, LogDirectoryError, StorageError
from kraft.log.api import OffsetAndEpoch
from kraft.record.batch import MAGIC_V2, RECORD_BATCH_OVERHEAD, RecordBatch, read_batch

__all__ = [
    "QUARANTINE_DIR",
    "REPAIR_TARGET",
    "intact_batches_after",
    "later",
    "new_quarantine",
    "read_repair_target",
    "set_aside_file",
    "set_aside_tail",
    "write_repair_target",
]

QUARANTINE_DIR = "quarantine"
REPAIR_TARGET = "repair-target"

_CHUNK = 4 * 1024 * 1024
_MAGIC_AT = 16  # the magic byte's position in a batch
_MAX_BATCH_BYTES = 256 * 1024 * 1024  # as Segment's: a length past it is garbage
_MAGIC = bytes([MAGIC_V2])


def later(a: OffsetAndEpoch, b: OffsetAndEpoch | None) -> OffsetAndEpoch:
    """The later of two log ends, compared as Raft compares logs: epoch, then offset."""
    if b is None or (a.epoch, a.offset) >= (b.epoch, b.offset):
        return a
    return b


# -- the repair target -----------------------------------------------------------------------


def read_repair_target(directory: Path) -> OffsetAndEpoch | None:
    """The repair target stored in ``directory``; None without the file.

    A damaged file is a :class:`LogDirectoryError`: the target keeps a replica that lost
    acknowledged records from electing a log without them, so it is never guessed.
    """
    path = directory / REPAIR_TARGET
    try:
        text = path.read_text("ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise LogDirectoryError(f"cannot read the repair target {path}: {exc}") from exc
    words = text.split()
    if len(words) != 3 or words[0] != "0" or not all(w.isdigit() for w in words[1:]):
        raise LogDirectoryError(
            f"the repair target {path} is damaged ({text[:40]!r}): it says how far this log "
            "reached before it lost data; restore it from a backup, or rebuild this replica "
            "with an empty data directory of a new directory id (docs/storage.md)"
        )
    return OffsetAndEpoch(int(words[1]), int(words[2]))


def write_repair_target(directory: Path, target: OffsetAndEpoch | None) -> None:
    """Store ``target`` durably (None removes the file, durably too)."""
    path = directory / REPAIR_TARGET
    try:
        if target is None:
            path.unlink(missing_ok=True)
            fsync_directory(directory)
        else:
            write_atomically(path, f"0\n{target.offset} {target.epoch}\n".encode("ascii"))
    except OSError as exc:
        raise StorageError(f"cannot write the repair target {path}: {exc}") from exc


# -- setting aside ---------------------------------------------------------------------------


def new_quarantine(directory: Path) -> Path:
    """Create the next numbered event directory under ``directory/quarantine``."""
    root = directory / QUARANTINE_DIR
    try:
        created = not root.is_dir()
        root.mkdir(exist_ok=True)
        if created:
            fsync_directory(directory)
        taken = [int(name) for name in os.listdir(root) if name.isdigit()]
        event = root / f"{max(taken, default=0) + 1:06d}"
        event.mkdir()
        fsync_directory(root)
    except OSError as exc:
        raise StorageError(f"cannot create a quarantine directory in {root}: {exc}") from exc
    return event


def set_aside_tail(source: Path, position: int, target: Path) -> int:
    """Copy ``source`` from byte ``position`` to the end into ``target``, durably; return the
    bytes copied. The caller cuts ``source`` afterwards: a crash in between leaves the bytes
    in both places, never in neither."""
    try:
        with open(source, "rb") as src, open(target, "xb") as dst:
            src.seek(position)
            copied = 0
            while chunk := src.read(_CHUNK):
                dst.write(chunk)
                copied += len(chunk)
            dst.flush()
            os.fsync(dst.fileno())
    except OSError as exc:
        raise StorageError(f"cannot set aside {source} into {target}: {exc}") from exc
    return copied


def set_aside_file(source: Path, event: Path) -> Path:
    """Move ``source`` into ``event`` under its own name (a rename: the same file system)."""
    target = event / source.name
    try:
        os.rename(source, target)
    except OSError as exc:
        raise StorageError(f"cannot set aside {source} into {event}: {exc}") from exc
    return target


# -- finding what is still intact --------------------------------------------------------------


def intact_batches_after(path: Path, position: int, min_offset: int) -> Iterator[RecordBatch]:
    """The batches of the file ``path`` from byte ``position`` on that are whole, pass their
    CRC and start at or after ``min_offset``, in order (each starting past the one before),
    skipping whatever garbage lies between them. A batch is only looked for where a magic
    byte is, so zeros and random bytes cost a ``bytes.find`` each."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    try:
        size = os.fstat(fd).st_size
        while position + RECORD_BATCH_OVERHEAD <= size:
            chunk = os.pread(fd, min(_CHUNK, size - position), position)
            found = _first_intact(fd, chunk, position, size, min_offset)
            if found is None:
                # Nothing starts in this chunk; a batch starting near its end is found
                # from the next read, which overlaps by a header.
                if position + len(chunk) >= size:
                    return
                position += max(1, len(chunk) - RECORD_BATCH_OVERHEAD)
                continue
            yield found
            min_offset = found.next_offset
            position = found.position + found.size_in_bytes
    finally:
        os.close(fd)


def _first_intact(
    fd: int, chunk: bytes, base: int, size: int, min_offset: int
) -> RecordBatch | None:
    """The first intact batch starting in ``chunk`` (read at ``base`` of a file of ``size``)."""
    at = chunk.find(_MAGIC, _MAGIC_AT)
    while at >= 0:
        start = at - _MAGIC_AT
        if start + RECORD_BATCH_OVERHEAD > len(chunk):
            return None  # the header is cut by the chunk's end: the next read sees it whole
        length = int.from_bytes(chunk[start + 8 : start + 12], "big", signed=True) + 12
        first = int.from_bytes(chunk[start : start + 8], "big", signed=True)
        if RECORD_BATCH_OVERHEAD <= length <= min(_MAX_BATCH_BYTES, size - base - start) and (
            first >= min_offset
        ):
            data = chunk if start + length <= len(chunk) else os.pread(fd, length, base + start)
            offset_in = start if data is chunk else 0
            try:
                return read_batch(
                    memoryview(data)[: offset_in + length],
                    offset_in,
                    base_position=base + start - offset_in,
                )
            except CorruptRecordError:
                pass
        at = chunk.find(_MAGIC, at + 1)
    return None
