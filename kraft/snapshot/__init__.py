"""Snapshots (KIP-630): snapshot files, raw byte-level snapshots, and typed writers and readers.

- :mod:`kraft.snapshot.files`: ``%020d-%010d.checkpoint`` names, listing, crash leftovers,
  deletion through ``.checkpoint.deleted``;
- :mod:`kraft.snapshot.raw`: ``RawSnapshotReader`` / ``RawSnapshotWriter``, in memory and on
  files (``.checkpoint.part``, fsync, atomic rename);
- :mod:`kraft.snapshot.writer` and :mod:`kraft.snapshot.reader`: ``SnapshotWriter[T]`` (header,
  data batches through a serde, footer) and ``SnapshotReader[T]`` (validated whole, then read
  batch by batch).

Like the log, this package does no I/O but file I/O, and reads no clock: timestamps are passed
in. It depends on :mod:`kraft.record` and :mod:`kraft.common` (the fsync helpers) only: the log
builds on it, never the reverse (tests/test_layering.py).
"""

from __future__ import annotations

from kraft.snapshot.files import (
    DELETED_SUFFIX,
    PART_SUFFIX,
    SNAPSHOT_SUFFIX,
    clean_snapshot_directory,
    delete_snapshot_file,
    list_snapshots,
    parse_snapshot_file_name,
    snapshot_file_name,
    snapshot_path,
)
from kraft.snapshot.raw import (
    FileRawSnapshotReader,
    FileRawSnapshotWriter,
    MemoryRawSnapshotReader,
    MemoryRawSnapshotWriter,
    OnFreeze,
    RawSnapshotReader,
    RawSnapshotWriter,
)
from kraft.snapshot.reader import SnapshotReader, read_snapshot_file, read_snapshot_header
from kraft.snapshot.writer import DEFAULT_MAX_BATCH_SIZE_BYTES, SnapshotWriter

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE_BYTES",
    "DELETED_SUFFIX",
    "PART_SUFFIX",
    "SNAPSHOT_SUFFIX",
    "FileRawSnapshotReader",
    "FileRawSnapshotWriter",
    "MemoryRawSnapshotReader",
    "MemoryRawSnapshotWriter",
    "OnFreeze",
    "RawSnapshotReader",
    "RawSnapshotWriter",
    "SnapshotReader",
    "SnapshotWriter",
    "clean_snapshot_directory",
    "delete_snapshot_file",
    "list_snapshots",
    "parse_snapshot_file_name",
    "read_snapshot_file",
    "read_snapshot_header",
    "snapshot_file_name",
    "snapshot_path",
]
