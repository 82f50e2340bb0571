"""One log segment: a ``.log`` file of v2 batches and its sparse ``.index``.

Files are named by the segment's base offset, 20 digits (Kafka's naming), e.g.
``00000000000000000000.log`` and ``00000000000000000000.index``. The index is Kafka's offset
index: 8-byte entries ``(int32 last offset of a batch - base offset, int32 byte position of that
batch)``, one every ``index_interval_bytes`` of log. It is derived data: never fsynced on the
append path, checked on open and rebuilt from the log whenever it disagrees.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path

from kraft.errors import CorruptRecordError, StorageError
from kraft.record.batch import LOG_OVERHEAD, RecordBatch, read_batch

__all__ = ["Segment", "datasync", "index_path", "log_path", "segment_name"]

logger = logging.getLogger(__name__)

_INDEX_ENTRY = struct.Struct(">ii")
_LENGTH = struct.Struct(">i")
_SCAN_CHUNK = 4 * 1024 * 1024
_SEEK_CHUNK = 64 * 1024
# No sane batch is this large (KRaft's maximum is 8 MiB); a length past it is garbage.
_MAX_BATCH_BYTES = 256 * 1024 * 1024


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def log_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{segment_name(base_offset)}.log"


def index_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{segment_name(base_offset)}.index"


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


#: ``os.fdatasync`` where the platform has it (Linux), ``os.fsync`` elsewhere (macOS).
datasync = getattr(os, "fdatasync", os.fsync)


class Segment:
    """A segment's files, its size, its next offset and its in-memory index."""

    __slots__ = (
        "_bytes_since_index",
        "_fd",
        "_index_fd",
        "_index_interval",
        "_index_offsets",
        "_index_positions",
        "base_offset",
        "directory",
        "next_offset",
        "size",
    )

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self._index_interval = index_interval_bytes
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_APPEND
            self._fd = os.open(log_path(directory, base_offset), flags, 0o644)
            self._index_fd = os.open(index_path(directory, base_offset), flags, 0o644)
            self.size = os.fstat(self._fd).st_size
            if self.size == 0:
                # An empty log has no index entries. An index left behind by a deleted segment
                # of the same name (a crash between the two unlinks of delete()) must not
                # prefix the entries of the new one.
                os.ftruncate(self._index_fd, 0)
        except OSError as exc:
            path = log_path(directory, base_offset)
            raise StorageError(f"cannot open segment {path}: {exc}") from exc
        self.next_offset = base_offset
        self._index_offsets: list[int] = []
        self._index_positions: list[int] = []
        self._bytes_since_index = 0

    @property
    def log_path(self) -> Path:
        return log_path(self.directory, self.base_offset)

    @property
    def index_path(self) -> Path:
        return index_path(self.directory, self.base_offset)

    def __repr__(self) -> str:
        return (
            f"Segment(base_offset={self.base_offset}, next_offset={self.next_offset}, "
            f"size={self.size})"
        )

    # -- index -----------------------------------------------------------------------------
    def load_index(self) -> bool:
        """Load the index file; False (and an empty index) if it is missing or inconsistent."""
        raw = os.pread(self._index_fd, os.fstat(self._index_fd).st_size, 0)
        self._index_offsets, self._index_positions = [], []
        if len(raw) % _INDEX_ENTRY.size:
            return False
        last_rel, last_pos = -1, -1
        offsets, positions = [], []
        for rel, pos in _INDEX_ENTRY.iter_unpack(raw):
            if rel <= last_rel or pos <= last_pos or pos >= self.size:
                return False
            offsets.append(self.base_offset + rel)
            positions.append(pos)
            last_rel, last_pos = rel, pos
        self._index_offsets, self._index_positions = offsets, positions
        return True

    def reset_index(self, upto_position: int = 0) -> None:
        """Forget index entries at or after ``upto_position`` and rewrite the index file."""
        keep = bisect.bisect_left(self._index_positions, upto_position)
        del self._index_offsets[keep:]
        del self._index_positions[keep:]
        os.ftruncate(self._index_fd, keep * _INDEX_ENTRY.size)
        self._bytes_since_index = 0

    def index_batch(self, batch_last_offset: int, position: int, size: int) -> bytes:
        """Account for a batch at ``position``; return the index entry to write (or b"")."""
        entry = b""
        if self._bytes_since_index > self._index_interval:
            entry = _INDEX_ENTRY.pack(batch_last_offset - self.base_offset, position)
            self._index_offsets.append(batch_last_offset)
            self._index_positions.append(position)
            self._bytes_since_index = 0
        self._bytes_since_index += size
        return entry

    def append_index(self, entries: bytes) -> None:
        """Write index entries produced by :meth:`index_batch` (recovery writes them at once)."""
        if entries:
            _write_all(self._index_fd, entries)

    def last_index_position(self) -> int:
        return self._index_positions[-1] if self._index_positions else 0

    def index_entries(self) -> list[tuple[int, int]]:
        return list(zip(self._index_offsets, self._index_positions, strict=True))

    # -- reading ---------------------------------------------------------------------------
    def read_at(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def scan(
        self,
        position: int = 0,
        *,
        verify_crc: bool = True,
        end: int | None = None,
        chunk_bytes: int = _SCAN_CHUNK,
    ) -> Iterator[RecordBatch]:
        """Yield the batches from ``position`` to ``end`` (the file size by default).

        Raises :class:`CorruptRecordError` at the first batch that is malformed, torn or (with
        ``verify_crc``) fails its CRC; its ``position`` is the byte position in the file.
        """
        stop = self.size if end is None else end
        want = chunk_bytes
        while position < stop:
            count = min(want, stop - position)
            chunk = os.pread(self._fd, count, position)
            if len(chunk) < count:
                # The file is shorter than its recorded size (cut by someone else): without
                # this the loop below would never advance.
                raise CorruptRecordError(
                    "unexpected end of the segment file", position=position + len(chunk)
                )
            view = memoryview(chunk)
            p = 0
            while p < len(view):
                remaining = len(view) - p
                if remaining >= LOG_OVERHEAD:
                    need = _LENGTH.unpack_from(view, p + 8)[0] + LOG_OVERHEAD
                else:
                    need = LOG_OVERHEAD
                if need > _MAX_BATCH_BYTES:
                    raise CorruptRecordError(
                        f"implausible batch length {need - LOG_OVERHEAD}", position=position + p
                    )
                if need > remaining and position + len(view) < stop:
                    break  # the batch continues past this chunk: read on from its start
                batch = read_batch(view, p, base_position=position, verify_crc=verify_crc)
                yield batch
                p += batch.size_in_bytes
            if p == 0:
                # One batch larger than the chunk: read exactly enough for it.
                want = max(want, need)
                continue
            position += p
            want = chunk_bytes

    def find_position(self, offset: int) -> tuple[int, RecordBatch | None]:
        """The first batch whose last offset is ``>= offset``, and its position.

        Returns ``(self.size, None)`` when every batch in the segment ends before ``offset``.
        """
        i = bisect.bisect_right(self._index_offsets, offset) - 1
        start = self._index_positions[i] if i >= 0 else 0
        for batch in self.scan(start, verify_crc=False, chunk_bytes=_SEEK_CHUNK):
            if batch.last_offset >= offset:
                return batch.position, batch
        return self.size, None

    def find_checked(self, offset: int) -> tuple[int, RecordBatch | None]:
        """:meth:`find_position`, checking on the way that every batch's base offset follows
        on from the batch before (or the segment base): the base offset is not under the
        CRC, so a damaged one would otherwise be read as another batch.

        Raises :class:`CorruptRecordError` at the first batch that is malformed or out of
        place, with the exact ``offset`` it should have started at. An index entry that does
        not point at the batch it names is derived data gone stale: the segment is then
        scanned from its first byte before anything is called corrupt.
        """
        i = bisect.bisect_right(self._index_offsets, offset) - 1
        if i >= 0:
            found = self._find_from(offset, self._index_positions[i], self._index_offsets[i])
            if found is not None:
                return found
        found = self._find_from(offset, 0, None)
        assert found is not None  # from the first byte, damage raises
        return found

    def _find_from(
        self, offset: int, start: int, start_last: int | None
    ) -> tuple[int, RecordBatch | None] | None:
        """Scan from ``start``, where a batch ending at ``start_last`` is (None: the first
        byte); None if that batch is not there."""
        expected = self.base_offset
        try:
            for batch in self.scan(start, verify_crc=False, chunk_bytes=_SEEK_CHUNK):
                if start_last is not None:
                    if batch.last_offset != start_last:
                        return None
                    start_last = None
                elif batch.base_offset != expected:
                    raise CorruptRecordError(
                        f"{self.log_path}: batch has base offset {batch.base_offset}, "
                        f"expected {expected}",
                        offset=expected,
                        position=batch.position,
                    )
                if batch.last_offset >= offset:
                    return batch.position, batch
                expected = batch.next_offset
        except CorruptRecordError as exc:
            if start_last is not None:
                return None
            if exc.offset == expected:
                raise
            raise CorruptRecordError(
                f"{self.log_path}: {exc}", offset=expected, position=exc.position
            ) from exc
        return self.size, None

    # -- writing ---------------------------------------------------------------------------
    def append(self, data: bytes | memoryview, index_entries: bytes, last_offset: int) -> None:
        """Append whole batches (already accounted for with :meth:`index_batch`)."""
        try:
            _write_all(self._fd, data)
        except OSError as exc:
            # Cut whatever part was written so the file ends on a batch boundary again.
            try:
                os.ftruncate(self._fd, self.size)
            except OSError:
                logger.exception("cannot cut a failed append from %s", self.log_path)
            raise StorageError(f"append to {self.log_path} failed: {exc}") from exc
        self.size += len(data)
        self.next_offset = last_offset + 1
        if index_entries:
            try:
                _write_all(self._index_fd, index_entries)
            except OSError:
                # The index is derived data; it is checked and rebuilt on open.
                logger.exception("cannot write index %s", self.index_path)

    def truncate(self, position: int, next_offset: int) -> None:
        """Cut the log file at ``position`` (a batch boundary) and drop later index entries."""
        try:
            os.ftruncate(self._fd, position)
            self.reset_index(position)
        except OSError as exc:
            raise StorageError(f"cannot truncate {self.log_path} at {position}: {exc}") from exc
        self.size = position
        self.next_offset = next_offset

    def flush(self, *, index: bool = False) -> None:
        # fdatasync: the appended bytes and the file size (which reading them needs) reach the
        # disk, without the inode's timestamps; a third cheaper than fsync on this path.
        try:
            datasync(self._fd)
            if index:
                datasync(self._index_fd)
        except OSError as exc:
            raise StorageError(f"fsync of {self.log_path} failed: {exc}") from exc

    def close(self) -> None:
        for fd in (self._fd, self._index_fd):
            try:
                os.close(fd)
            except OSError:
                logger.exception("closing a file of segment %s", self.log_path)

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
