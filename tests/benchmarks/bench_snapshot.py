"""Benchmark of snapshots on files: write, validate, iterate, and the transfer a follower does.

What is measured, for a snapshot of ``--mib`` MiB (100 MiB by default) of 100-byte records,
appended 1000 records at a time with the default 8 MiB batch limit:

- ``write+freeze``: ``SnapshotWriter`` over ``FileRawSnapshotWriter`` (serde encode, batching,
  ``encode_batch``, ``os.write``), then ``freeze`` (fsync, rename, fsync of the directory);
- ``validate-on-open``: ``read_snapshot_file`` (reads the file, checks every CRC, the header,
  the footer, offsets and epochs);
- ``iterate``: decoding every batch of the open reader into ``Batch[bytes]``;
- ``transfer``: ``FileRawSnapshotReader.read(position, chunk)`` slices appended to a second
  ``FileRawSnapshotWriter`` in another directory, then frozen: the bytes a follower downloads
  with FetchSnapshot, without the network. The copy is then validated like the original.

Files go to ``bench-data/`` at the repository root (or ``--dir``) and are deleted afterwards.
Reads hit a warm page cache (the file was just written).

Run: ``.venv/bin/python tests/benchmarks/bench_snapshot.py [--mib N] [--chunk-kib N] [--json]``
Not collected by pytest (``bench_*.py``); speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from kraft.record.offsets import OffsetAndEpoch
from kraft.record.serde import BytesSerde
from kraft.snapshot import (
    FileRawSnapshotReader,
    FileRawSnapshotWriter,
    SnapshotWriter,
    read_snapshot_file,
    snapshot_path,
)

REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
RECORD_BYTES = 100
PER_APPEND = 1000
SNAPSHOT_ID = OffsetAndEpoch(1_000_000, 5)
TIMESTAMP_MS = 1_700_000_000_000


def write_snapshot(directory: Path, total_bytes: int) -> tuple[float, int, int]:
    """Seconds, file size and records of a snapshot of ``total_bytes`` of record values."""
    records = total_bytes // RECORD_BYTES
    group = [bytes([i % 251]) * RECORD_BYTES for i in range(PER_APPEND)]
    start = time.perf_counter()
    raw = FileRawSnapshotWriter.create(directory, SNAPSHOT_ID)
    with SnapshotWriter(
        raw, BytesSerde(), last_contained_log_timestamp_ms=TIMESTAMP_MS, timestamp_ms=TIMESTAMP_MS
    ) as writer:
        written = 0
        while written < records:
            chunk = group[: min(PER_APPEND, records - written)]
            writer.append(chunk)
            written += len(chunk)
        size = writer.freeze()
    return time.perf_counter() - start, size, records


def transfer(source: Path, target: Path, chunk_bytes: int) -> tuple[float, int, int]:
    """Seconds, bytes and chunks of copying ``source``'s snapshot into ``target`` by slices."""
    start = time.perf_counter()
    reader = FileRawSnapshotReader.open(source, SNAPSHOT_ID)
    writer = FileRawSnapshotWriter.create(target, SNAPSHOT_ID)
    position = chunks = 0
    size = reader.size_in_bytes
    while position < size:
        data = reader.read(position, chunk_bytes)
        writer.append(data)
        position += len(data)
        chunks += 1
    writer.freeze().close()
    reader.close()
    return time.perf_counter() - start, position, chunks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=100, help="record bytes to write (MiB)")
    parser.add_argument("--chunk-kib", type=int, default=1024, help="transfer chunk (KiB)")
    parser.add_argument("--dir", type=Path, default=REPO / "bench-data")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    base = args.dir / "snapshot-bench"
    shutil.rmtree(base, ignore_errors=True)
    source, target = base / "leader", base / "follower"
    source.mkdir(parents=True)
    target.mkdir()
    try:
        write_s, size, records = write_snapshot(source, args.mib * MIB)
        start = time.perf_counter()
        reader = read_snapshot_file(snapshot_path(source, SNAPSHOT_ID), BytesSerde())
        validate_s = time.perf_counter() - start
        start = time.perf_counter()
        count = sum(len(batch.records) for batch in reader)
        iterate_s = time.perf_counter() - start
        reader.close()
        assert count == records, (count, records)
        chunk_bytes = args.chunk_kib * 1024
        transfer_s, moved, chunks = transfer(source, target, chunk_bytes)
        with read_snapshot_file(snapshot_path(target, SNAPSHOT_ID), BytesSerde()) as copy:
            assert copy.size_in_bytes == size
    finally:
        shutil.rmtree(base, ignore_errors=True)

    mb = size / 1e6
    results = {
        "snapshot_bytes": size,
        "records": records,
        "record_bytes": RECORD_BYTES,
        "write_freeze_s": write_s,
        "write_freeze_mb_s": mb / write_s,
        "validate_on_open_s": validate_s,
        "validate_on_open_mb_s": mb / validate_s,
        "iterate_s": iterate_s,
        "iterate_mb_s": mb / iterate_s,
        "transfer_s": transfer_s,
        "transfer_mb_s": mb / transfer_s,
        "transfer_bytes": moved,
        "transfer_chunk_bytes": chunk_bytes,
        "transfer_chunks": chunks,
    }
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"snapshot: {size:,} bytes, {records:,} records of {RECORD_BYTES} B")
    print(f"write+freeze      {write_s:7.2f} s  {mb / write_s:8.1f} MB/s")
    print(f"validate-on-open  {validate_s:7.2f} s  {mb / validate_s:8.1f} MB/s")
    print(f"iterate           {iterate_s:7.2f} s  {mb / iterate_s:8.1f} MB/s")
    print(
        f"transfer          {transfer_s:7.2f} s  {mb / transfer_s:8.1f} MB/s  "
        f"({moved:,} bytes in {chunks} chunks of {chunk_bytes:,} B)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
