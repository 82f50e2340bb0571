"""Raw snapshots: byte ranges, freezing, abandoning (kraft.snapshot.raw)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kraft.errors import IllegalStateError, StorageError
from kraft.record.offsets import OffsetAndEpoch
from kraft.snapshot import (
    PART_SUFFIX,
    FileRawSnapshotReader,
    FileRawSnapshotWriter,
    MemoryRawSnapshotReader,
    MemoryRawSnapshotWriter,
    RawSnapshotReader,
    RawSnapshotWriter,
    list_snapshots,
    snapshot_file_name,
)

SID = OffsetAndEpoch(100, 3)
DATA = bytes(range(256)) * 3 + b"tail"


def check_reads(reader: RawSnapshotReader, data: bytes) -> None:
    assert reader.size_in_bytes == len(data)
    assert reader.records() == data
    for max_bytes in (1, 7, 256, len(data), len(data) + 10):
        for position in range(len(data)):
            assert reader.read(position, max_bytes) == data[position : position + max_bytes]
        # Slices of max_bytes, one after another, rebuild the snapshot (a download).
        chunks = [reader.read(p, max_bytes) for p in range(0, len(data), max_bytes)]
        assert b"".join(chunks) == data
    for position in (-1, len(data), len(data) + 1):
        with pytest.raises(ValueError, match="outside"):
            reader.read(position, 10)
    with pytest.raises(ValueError, match="negative"):
        reader.read(0, -1)
    assert reader.read(0, 0) == b""


def write_in_pieces(writer: RawSnapshotWriter, data: bytes) -> None:
    for start in range(0, len(data), 100):  # unaligned pieces, bytes and memoryviews
        piece = data[start : start + 100]
        writer.append(memoryview(piece) if start % 200 else piece)
        assert writer.size_in_bytes == min(len(data), start + 100)


def test_memory_reader_reads_every_slice() -> None:
    check_reads(MemoryRawSnapshotReader(SID, DATA), DATA)


def test_memory_writer_freezes_once() -> None:
    frozen: list[RawSnapshotReader] = []
    writer = MemoryRawSnapshotWriter(SID, frozen.append)
    write_in_pieces(writer, DATA)
    states = [writer.is_frozen]
    reader = writer.freeze()
    states.append(writer.is_frozen)
    assert states == [False, True]
    assert frozen == [reader]
    assert reader.snapshot_id == SID
    check_reads(reader, DATA)
    with pytest.raises(IllegalStateError, match="frozen"):
        writer.append(b"x")
    with pytest.raises(IllegalStateError, match="frozen"):
        writer.freeze()
    writer.close()
    assert reader.records() == DATA


def test_memory_writer_closed_is_abandoned() -> None:
    frozen: list[RawSnapshotReader] = []
    writer = MemoryRawSnapshotWriter(SID, frozen.append)
    writer.append(b"abc")
    writer.close()
    writer.close()
    with pytest.raises(IllegalStateError, match="closed"):
        writer.append(b"x")
    with pytest.raises(IllegalStateError, match="closed"):
        writer.freeze()
    assert frozen == []


def test_file_writer_writes_a_part_file_then_renames_it(tmp_path: Path) -> None:
    frozen: list[RawSnapshotReader] = []
    writer = FileRawSnapshotWriter.create(tmp_path, SID, frozen.append)
    part = tmp_path / snapshot_file_name(SID, PART_SUFFIX)
    write_in_pieces(writer, DATA)
    assert [p.name for p in tmp_path.iterdir()] == [part.name]
    assert list_snapshots(tmp_path) == []
    reader = writer.freeze()
    assert writer.is_frozen
    assert frozen == [reader]
    final = tmp_path / snapshot_file_name(SID)
    assert [p.name for p in tmp_path.iterdir()] == [final.name]
    assert final.read_bytes() == DATA
    assert not os.stat(final).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    assert list_snapshots(tmp_path) == [SID]
    check_reads(reader, DATA)
    with pytest.raises(IllegalStateError):
        writer.append(b"x")
    writer.close()  # no-op once frozen
    assert final.exists()
    reader.close()
    reader.close()
    with pytest.raises(IllegalStateError, match="closed"):
        reader.read(0, 1)


def test_file_writer_closed_removes_its_part_file(tmp_path: Path) -> None:
    frozen: list[RawSnapshotReader] = []
    writer = FileRawSnapshotWriter.create(tmp_path, SID, frozen.append)
    writer.append(DATA)
    writer.close()
    writer.close()
    assert list(tmp_path.iterdir()) == []
    assert frozen == []
    with pytest.raises(IllegalStateError, match="closed"):
        writer.append(b"x")


def test_file_writer_replaces_a_stale_part_but_not_a_frozen_snapshot(tmp_path: Path) -> None:
    (tmp_path / snapshot_file_name(SID, PART_SUFFIX)).write_bytes(b"stale")
    writer = FileRawSnapshotWriter.create(tmp_path, SID)
    writer.append(b"new")
    writer.freeze()
    assert (tmp_path / snapshot_file_name(SID)).read_bytes() == b"new"
    with pytest.raises(StorageError, match="exists") as caught:
        FileRawSnapshotWriter.create(tmp_path, SID)
    assert isinstance(caught.value.__cause__, FileExistsError)


def test_file_reader_keeps_reading_a_deleted_snapshot(tmp_path: Path) -> None:
    writer = FileRawSnapshotWriter.create(tmp_path, SID)
    writer.append(DATA)
    writer.freeze().close()
    reader = FileRawSnapshotReader.open(tmp_path, SID)
    (tmp_path / snapshot_file_name(SID)).unlink()
    assert reader.read(10, 5) == DATA[10:15]
    reader.close()


def test_file_reader_of_a_missing_snapshot(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot open") as caught:
        FileRawSnapshotReader.open(tmp_path, SID)
    assert isinstance(caught.value.__cause__, FileNotFoundError)
