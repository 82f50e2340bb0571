"""Snapshots as bytes: what the log stores and FetchSnapshot moves (Kafka's ``RawSnapshot*``).

A raw snapshot knows its id and its bytes, nothing of batches: a follower downloading a
snapshot appends whatever byte range the leader sent (``read(position, max_bytes)`` slices are
not aligned on batches) and only the frozen whole is checked, by
:class:`~kraft.snapshot.reader.SnapshotReader`.

Two implementations: in memory (the simulator's) and on files (``FileLog``'s). A writer is
abandoned by ``close()`` unless frozen; ``freeze()`` makes the snapshot durable and visible,
hands the frozen reader to ``on_freeze`` (the log registers it there) and returns it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from kraft.common.fsutil import fsync_directory
from kraft.errors import IllegalStateError, StorageError
from kraft.record.offsets import OffsetAndEpoch
from kraft.snapshot.files import PART_SUFFIX, SNAPSHOT_SUFFIX, snapshot_path

__all__ = [
    "FileRawSnapshotReader",
    "FileRawSnapshotWriter",
    "MemoryRawSnapshotReader",
    "MemoryRawSnapshotWriter",
    "OnFreeze",
    "RawSnapshotReader",
    "RawSnapshotWriter",
]

logger = logging.getLogger(__name__)


class RawSnapshotReader(Protocol):
    """The bytes of one frozen snapshot, readable by position."""

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        """The snapshot's end offset (exclusive) and epoch."""

    @property
    def size_in_bytes(self) -> int:
        """The snapshot's size."""

    def read(self, position: int, max_bytes: int) -> bytes:
        """Bytes ``[position, min(size, position + max_bytes))``, not aligned on batches.

        ``ValueError`` if ``position`` is outside ``[0, size)`` or ``max_bytes`` is negative.
        """

    def records(self) -> bytes:
        """The whole snapshot."""

    def reopen(self) -> RawSnapshotReader:
        """Another reader of the same bytes, owned (and closed) by the caller: it keeps reading
        after this one is closed or the snapshot is deleted."""

    def close(self) -> None:
        """Release what the reader holds (idempotent)."""


#: Called with the frozen reader when a writer freezes (the log registers the snapshot).
OnFreeze = Callable[[RawSnapshotReader], None]


class RawSnapshotWriter(Protocol):
    """A snapshot being written or downloaded: bytes appended in order, then frozen."""

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        """The id the snapshot will have."""

    @property
    def size_in_bytes(self) -> int:
        """The bytes appended so far."""

    @property
    def is_frozen(self) -> bool:
        """Whether :meth:`freeze` succeeded."""

    def append(self, data: bytes | memoryview) -> None:
        """Append ``data`` (any bytes). ``IllegalStateError`` once frozen or closed."""

    def freeze(self) -> RawSnapshotReader:
        """Make the snapshot durable and visible; return (and pass to ``on_freeze``) its reader.

        ``IllegalStateError`` if already frozen or closed.
        """

    def close(self) -> None:
        """Abandon the snapshot unless it is frozen (idempotent)."""


def _check_read(snapshot_id: OffsetAndEpoch, size: int, position: int, max_bytes: int) -> None:
    if not 0 <= position < size:
        raise ValueError(f"position {position} is outside snapshot {snapshot_id} of {size} bytes")
    if max_bytes < 0:
        raise ValueError(f"negative max_bytes {max_bytes}")


class _WriterState:
    """What both writers share: the id, the frozen and closed flags, the check that a writer
    is still open, and handing the frozen reader to ``on_freeze``."""

    __slots__ = ("_closed", "_frozen", "_on_freeze", "_snapshot_id")

    def __init__(self, snapshot_id: OffsetAndEpoch, on_freeze: OnFreeze | None) -> None:
        self._snapshot_id = snapshot_id
        self._on_freeze = on_freeze
        self._frozen = False
        self._closed = False

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._snapshot_id

    @property
    def is_frozen(self) -> bool:
        return self._frozen

    def _name(self) -> str:
        return f"snapshot {self._snapshot_id}"

    def _check_open(self, operation: str) -> None:
        if self._frozen or self._closed:
            state = "frozen" if self._frozen else "closed"
            raise IllegalStateError(f"{operation} on {self._name()}: it is {state}")

    def _publish(self, reader: RawSnapshotReader) -> RawSnapshotReader:
        if self._on_freeze is not None:
            self._on_freeze(reader)
        return reader


# -- in memory ---------------------------------------------------------------------------------


class MemoryRawSnapshotReader:
    """A frozen snapshot held as one ``bytes`` object; a read copies only its slice."""

    __slots__ = ("_data", "_snapshot_id")

    def __init__(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self._snapshot_id = snapshot_id
        self._data = data

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._snapshot_id

    @property
    def size_in_bytes(self) -> int:
        return len(self._data)

    def read(self, position: int, max_bytes: int) -> bytes:
        _check_read(self._snapshot_id, len(self._data), position, max_bytes)
        return self._data[position : position + max_bytes]

    def records(self) -> bytes:
        return self._data

    def reopen(self) -> MemoryRawSnapshotReader:
        return MemoryRawSnapshotReader(self._snapshot_id, self._data)

    def close(self) -> None:
        # Nothing to release; the bytes stay readable for whoever still holds this reader.
        pass

    def __repr__(self) -> str:
        return f"MemoryRawSnapshotReader({self._snapshot_id}, size={len(self._data)})"


class MemoryRawSnapshotWriter(_WriterState):
    """A snapshot built in a ``bytearray``; freezing copies it once into ``bytes``."""

    __slots__ = ("_buffer",)

    def __init__(self, snapshot_id: OffsetAndEpoch, on_freeze: OnFreeze | None = None) -> None:
        super().__init__(snapshot_id, on_freeze)
        self._buffer = bytearray()

    @property
    def size_in_bytes(self) -> int:
        return len(self._buffer)

    def append(self, data: bytes | memoryview) -> None:
        self._check_open("append")
        self._buffer += data

    def freeze(self) -> RawSnapshotReader:
        self._check_open("freeze")
        reader = MemoryRawSnapshotReader(self._snapshot_id, bytes(self._buffer))
        self._buffer = bytearray()
        self._frozen = True
        return self._publish(reader)

    def close(self) -> None:
        if not self._frozen:
            self._buffer = bytearray()
        self._closed = True

    def __repr__(self) -> str:
        return (
            f"MemoryRawSnapshotWriter({self._snapshot_id}, size={len(self._buffer)}, "
            f"frozen={self._frozen})"
        )


# -- on files ----------------------------------------------------------------------------------


class FileRawSnapshotReader:
    """A frozen snapshot file, read by position through one descriptor (``os.pread``).

    The descriptor stays valid if the file is deleted meanwhile: a snapshot being served to a
    follower can be cleaned away without breaking the transfer in progress.
    """

    __slots__ = ("_fd", "_size", "_snapshot_id", "path")

    def __init__(self, path: Path, snapshot_id: OffsetAndEpoch, fd: int, size: int) -> None:
        self.path = path
        self._snapshot_id = snapshot_id
        self._fd: int | None = fd
        self._size = size

    @classmethod
    def open(cls, directory: Path, snapshot_id: OffsetAndEpoch) -> FileRawSnapshotReader:
        """Open the frozen snapshot ``snapshot_id`` in ``directory``; ``StorageError`` if it
        cannot be opened (``FileNotFoundError`` underneath when it does not exist)."""
        return cls.open_path(snapshot_path(directory, snapshot_id), snapshot_id)

    @classmethod
    def open_path(cls, path: Path, snapshot_id: OffsetAndEpoch) -> FileRawSnapshotReader:
        """Open the snapshot file ``path`` as ``snapshot_id`` whatever its name (for tools)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise StorageError(f"cannot open the snapshot {path}: {exc}") from exc
        try:
            size = os.fstat(fd).st_size
        except OSError as exc:
            os.close(fd)
            raise StorageError(f"cannot read the snapshot {path}: {exc}") from exc
        return cls(path, snapshot_id, fd, size)

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._snapshot_id

    @property
    def size_in_bytes(self) -> int:
        return self._size

    def read(self, position: int, max_bytes: int) -> bytes:
        _check_read(self._snapshot_id, self._size, position, max_bytes)
        return self._pread(position, min(max_bytes, self._size - position))

    def records(self) -> bytes:
        return self._pread(0, self._size)

    def _pread(self, position: int, count: int) -> bytes:
        fd = self._fd
        if fd is None:
            raise IllegalStateError(f"read of the closed snapshot reader {self.path}")
        try:
            data = os.pread(fd, count, position)
            if len(data) < count:  # a short read: gather the rest
                parts = [data]
                got = len(data)
                while got < count:
                    part = os.pread(fd, count - got, position + got)
                    if not part:
                        break
                    parts.append(part)
                    got += len(part)
                data = b"".join(parts)
        except OSError as exc:
            raise StorageError(f"cannot read the snapshot {self.path}: {exc}") from exc
        if len(data) < count:
            raise StorageError(
                f"the snapshot {self.path} is shorter than its {self._size} bytes: it changed "
                "after it was frozen"
            )
        return data

    def reopen(self) -> FileRawSnapshotReader:
        # A duplicate descriptor, not a new open: it reads the same file even once the
        # snapshot has been renamed away and unlinked by the cleaner.
        fd = self._fd
        if fd is None:
            raise IllegalStateError(f"reopen of the closed snapshot reader {self.path}")
        try:
            duplicate = os.dup(fd)
        except OSError as exc:
            raise StorageError(f"cannot reopen the snapshot {self.path}: {exc}") from exc
        return FileRawSnapshotReader(self.path, self._snapshot_id, duplicate, self._size)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError as exc:
                raise StorageError(f"cannot close the snapshot {self.path}: {exc}") from exc

    def __repr__(self) -> str:
        return f"FileRawSnapshotReader({self.path}, size={self._size})"


class FileRawSnapshotWriter(_WriterState):
    """A snapshot written to ``<id>.checkpoint.part`` and frozen by fsync and rename.

    Freezing: fsync the file, make it read-only, rename it to ``<id>.checkpoint`` (atomic), fsync
    the directory so the rename survives a crash. Closing an unfrozen writer removes the
    ``.part`` file. A crash leaves at most a ``.part`` file, which recovery removes.
    """

    __slots__ = ("_fd", "_size", "directory", "path")

    def __init__(
        self, directory: Path, snapshot_id: OffsetAndEpoch, fd: int, on_freeze: OnFreeze | None
    ) -> None:
        super().__init__(snapshot_id, on_freeze)
        self.directory = directory
        self.path = snapshot_path(directory, snapshot_id, PART_SUFFIX)
        self._fd = fd
        self._size = 0

    @classmethod
    def create(
        cls, directory: Path, snapshot_id: OffsetAndEpoch, on_freeze: OnFreeze | None = None
    ) -> FileRawSnapshotWriter:
        """Start writing snapshot ``snapshot_id`` in ``directory``.

        A stale ``.part`` of the same id (an earlier attempt) is replaced; an existing frozen
        snapshot of that id is a ``StorageError`` (it would be overwritten on freeze).
        """
        frozen = snapshot_path(directory, snapshot_id, SNAPSHOT_SUFFIX)
        part = snapshot_path(directory, snapshot_id, PART_SUFFIX)
        try:
            if frozen.exists():
                raise FileExistsError(f"{frozen} exists")
            part.unlink(missing_ok=True)
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create the snapshot {part}: {exc}") from exc
        return cls(directory, snapshot_id, fd, on_freeze)

    @property
    def size_in_bytes(self) -> int:
        return self._size

    def _name(self) -> str:
        return f"snapshot {self.path}"

    def append(self, data: bytes | memoryview) -> None:
        self._check_open("append")
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                self._size += written
                view = view[written:]
        except OSError as exc:
            raise StorageError(f"cannot write the snapshot {self.path}: {exc}") from exc

    def freeze(self) -> RawSnapshotReader:
        self._check_open("freeze")
        destination = snapshot_path(self.directory, self._snapshot_id, SNAPSHOT_SUFFIX)
        try:
            os.fsync(self._fd)
            os.close(self._fd)
            self._closed = True  # the descriptor is gone: a failure from here abandons
            # Read-only, as Kafka leaves it: a frozen snapshot never changes.
            os.chmod(self.path, 0o444)
            os.replace(self.path, destination)
            self._frozen = True
            fsync_directory(self.directory)
        except OSError as exc:
            if not self._frozen:
                self._abandon_quietly()
            raise StorageError(f"cannot freeze the snapshot {self.path}: {exc}") from exc
        return self._publish(FileRawSnapshotReader.open(self.directory, self._snapshot_id))

    def _abandon_quietly(self) -> None:
        """Abandon after a failure that is already being reported."""
        if not self._closed:
            self._closed = True
            with contextlib.suppress(OSError):
                os.close(self._fd)
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            os.close(self._fd)
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot abandon the snapshot {self.path}: {exc}") from exc

    def __repr__(self) -> str:
        return f"FileRawSnapshotWriter({self.path}, size={self._size}, frozen={self._frozen})"
