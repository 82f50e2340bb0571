"""Benchmarks of the replicated log: codec, leader and follower appends, recovery.

What is measured (100-byte records unless told otherwise):

- ``encode``: ``encode_batch`` of 1000- and 100-record batches;
- ``decode``: ``iter_batches`` (CRC checked) + ``RecordBatch.records()``, and ``iter_batches``
  alone (the CRC pass a follower append and recovery do);
- ``leader append``: ``FileLog.append_as_leader`` of 1000- and 100-record batches, with an fsync
  (``flush``) after every batch, every 10 batches, and never;
- ``follower append``: ``append_as_follower`` of pre-encoded ~1 MiB chunks (what one fetch
  returns), fsync after every chunk;
- ``read``: ``FileLog.read`` of a log written as 1000-record batches, in 1 MiB reads (what a
  Fetch serves a follower catching up) and one batch at a time (a follower at the tail); every
  batch returned is checked (CRC-32C and offsets);
- ``recovery``: open time of a log of ``--recovery-mib`` written in large batches, (a) after a
  clean ``close()`` and (b) after a crash (``abandon()``) with the recovery point moved back to
  the first roll, so that every batch after it is read and checked.

Files go to ``bench-data/`` at the repository root (or ``--dir``) and are deleted afterwards.
Numbers are with a warm page cache (recovery reads what was just written).

Run: ``.venv/bin/python tests/benchmarks/bench_log.py [--quick | --full] [--json]``
(``make bench`` runs ``--quick``, the default: well under 90 s on 2 cores).
Not collected by pytest (``bench_*.py``); speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from kraft.log import FileLog
from kraft.log.file import RECOVERY_POINT
from kraft.record import encode_batch, iter_batches, with_base_offset

REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
TIMESTAMP_MS = 1_700_000_000_000


@dataclass
class Result:
    benchmark: str
    config: str
    seconds: float
    records: int  # 0 when records are not the unit (recovery)
    bytes: int

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.records and self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds else 0.0

    def as_json(self) -> dict[str, object]:
        return {**asdict(self), "records_per_s": self.records_per_s, "mb_per_s": self.mb_per_s}


@dataclass
class Sizes:
    record_bytes: int
    codec_records: int
    leader_mib: int
    follower_mib: int
    recovery_mib: int
    segment_mib: int


QUICK = Sizes(
    record_bytes=100,
    codec_records=300_000,
    leader_mib=64,
    follower_mib=256,
    recovery_mib=1024,
    segment_mib=128,
)
FULL = Sizes(
    record_bytes=100,
    codec_records=2_000_000,
    leader_mib=256,
    follower_mib=1024,
    recovery_mib=1024,
    segment_mib=128,
)


def make_values(count: int, size: int) -> list[bytes]:
    rng = random.Random(42)
    return [rng.randbytes(size) for _ in range(count)]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# -- codec ---------------------------------------------------------------------------------


def bench_encode(sizes: Sizes, per_batch: int) -> Result:
    values = make_values(per_batch, sizes.record_bytes)
    batches = max(1, sizes.codec_records // per_batch)
    total = 0

    def run() -> None:
        nonlocal total
        for i in range(batches):
            total += len(encode_batch(i * per_batch, 1, values, timestamp_ms=TIMESTAMP_MS))

    seconds = timed(run)
    return Result("encode", f"{per_batch} records/batch", seconds, batches * per_batch, total)


def bench_decode(sizes: Sizes, per_batch: int) -> list[Result]:
    values = make_values(per_batch, sizes.record_bytes)
    batches = max(1, sizes.codec_records // per_batch)
    buf = b"".join(
        encode_batch(i * per_batch, 1, values, timestamp_ms=TIMESTAMP_MS) for i in range(batches)
    )
    count = 0

    def decode() -> None:
        nonlocal count
        for batch in iter_batches(buf):
            count += len(batch.records())

    seconds = timed(decode)
    records = Result("decode", f"{per_batch} records/batch, records()", seconds, count, len(buf))
    # The CRC pass is fast: repeat it for a measurable time.
    rounds = 0
    crc_only = 0.0
    while crc_only < 0.2 and rounds < 1000:
        crc_only += timed(lambda: sum(1 for _ in iter_batches(buf)))
        rounds += 1
    return [
        records,
        Result(
            "decode",
            f"{per_batch} records/batch, CRC only",
            crc_only,
            count * rounds,
            len(buf) * rounds,
        ),
    ]


# -- appends -------------------------------------------------------------------------------


def bench_leader_append(
    directory: Path, sizes: Sizes, per_batch: int, fsync_every: int | None
) -> Result:
    values = make_values(per_batch, sizes.record_bytes)
    batch_bytes = len(encode_batch(0, 1, values, timestamp_ms=TIMESTAMP_MS))
    batches = max(1, sizes.leader_mib * MIB // batch_bytes)
    log = FileLog.open(directory, segment_bytes=sizes.segment_mib * MIB)

    def run() -> None:
        for i in range(1, batches + 1):
            log.append_as_leader(values, 1, timestamp_ms=TIMESTAMP_MS)
            if fsync_every and i % fsync_every == 0:
                log.flush()
        if fsync_every:
            log.flush()

    seconds, written = timed_then_remove(log, directory, run)
    mode = {None: "no fsync", 1: "fsync/batch"}.get(fsync_every, f"fsync/{fsync_every} batches")
    return Result(
        "leader append", f"{per_batch} records/batch, {mode}", seconds, batches * per_batch, written
    )


def timed_then_remove(log: FileLog, directory: Path, run: Callable[[], None]) -> tuple[float, int]:
    """Time ``run`` on ``log``; return the seconds and the bytes it wrote, then delete the log."""
    try:
        return timed(run), log.size_in_bytes()
    finally:
        log.close()
        shutil.rmtree(directory)


def encode_chunks(
    total_bytes: int, chunk_bytes: int, per_batch: int, record_bytes: int
) -> Iterator[bytes]:
    """Whole batches of ``per_batch`` records, grouped into chunks of about ``chunk_bytes``,
    with consecutive offsets from 0 (a template batch moved with ``with_base_offset``)."""
    template = encode_batch(0, 1, make_values(per_batch, record_bytes), timestamp_ms=TIMESTAMP_MS)
    per_chunk = max(1, chunk_bytes // len(template))
    offset = 0
    for _ in range(max(1, total_bytes // (per_chunk * len(template)))):
        parts = []
        for _ in range(per_chunk):
            parts.append(with_base_offset(template, offset))
            offset += per_batch
        yield b"".join(parts)


def bench_follower_append(directory: Path, sizes: Sizes) -> Result:
    chunks = list(encode_chunks(sizes.follower_mib * MIB, MIB, 1000, sizes.record_bytes))
    records = sum(1000 * sum(1 for _ in iter_batches(c, verify_crc=False)) for c in chunks)
    log = FileLog.open(directory, segment_bytes=sizes.segment_mib * MIB)

    def run() -> None:
        for chunk in chunks:
            log.append_as_follower(chunk)
            log.flush()

    seconds, written = timed_then_remove(log, directory, run)
    size = len(chunks[0])
    return Result(
        "follower append",
        f"{len(chunks)} chunks of {size / MIB:.2f} MiB, fsync/chunk",
        seconds,
        records,
        written,
    )


# -- reads -----------------------------------------------------------------------------------


def next_offset(batches: bytes) -> int:
    """The offset after the last of ``batches`` (walking the length fields only)."""
    position = last = 0
    while position < len(batches):
        last = position
        position += int.from_bytes(batches[position + 8 : position + 12], "big") + 12
    base = int.from_bytes(batches[last : last + 8], "big")
    return base + int.from_bytes(batches[last + 23 : last + 27], "big") + 1


def bench_read(directory: Path, sizes: Sizes) -> list[Result]:
    log = FileLog.open(directory, segment_bytes=sizes.segment_mib * MIB)
    for chunk in encode_chunks(sizes.follower_mib * MIB, MIB, 1000, sizes.record_bytes):
        log.append_as_follower(chunk)
    end = log.log_end_offset
    size = log.size_in_bytes()
    results = []
    try:
        for label, max_bytes in (("1 MiB reads", MIB), ("one batch per read", 1)):
            reads = 0

            def run(max_bytes: int = max_bytes) -> None:
                nonlocal reads
                offset = 0
                while offset < end:
                    offset = next_offset(log.read(offset, max_bytes=max_bytes).records)
                    reads += 1

            seconds = timed(run)
            results.append(Result("read", f"{label} ({reads:,} reads)", seconds, end, size))
    finally:
        log.close()
        shutil.rmtree(directory)
    return results


# -- recovery ------------------------------------------------------------------------------


def bench_recovery(directory: Path, sizes: Sizes) -> list[Result]:
    segment_bytes = sizes.segment_mib * MIB
    log = FileLog.open(directory, segment_bytes=segment_bytes)
    chunk_bytes = 16 * MIB
    for chunk in encode_chunks(sizes.recovery_mib * MIB, chunk_bytes, 1000, sizes.record_bytes):
        log.append_as_follower(chunk)
    end = log.log_end_offset
    size = log.size_in_bytes()
    segments = log.segments()
    early_roll = segments[1].base_offset if len(segments) > 1 else 0
    rest = sum(s.size for s in segments[1:]) if len(segments) > 1 else size

    def crash_reopen() -> float:
        # A crash long after the first roll: every batch past the recovery point is checked.
        (directory / RECOVERY_POINT).write_text(f"0\n{early_roll}\n")
        reopened: list[FileLog] = []
        seconds = timed(
            lambda: reopened.append(FileLog.open(directory, segment_bytes=segment_bytes))
        )
        assert reopened[0].log_end_offset == end
        reopened[0].abandon()
        return seconds

    try:
        log.close()
        clean = timed(lambda: FileLog.open(directory, segment_bytes=segment_bytes).abandon())
        warm = crash_reopen()
        evicted = _evict_page_cache(directory)
        cold = crash_reopen()
    finally:
        shutil.rmtree(directory)
    label = f"{size / MIB:.0f} MiB, {len(segments)} segments"
    scan = f"crash: scan {rest / MIB:.0f} MiB"
    results = [
        Result("recovery", f"{label}, clean close", clean, 0, 0),
        Result("recovery", f"{label}, {scan}, warm cache", warm, 0, rest),
    ]
    if evicted:
        results.append(Result("recovery", f"{label}, {scan}, cold cache", cold, 0, rest))
    return results


def _evict_page_cache(directory: Path) -> bool:
    """Drop the (clean, fsynced) pages of the log's files from the page cache, if the OS can."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for path in directory.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


# -- driver --------------------------------------------------------------------------------

GROUPS = ("codec", "leader", "follower", "read", "recovery")


def run_all(sizes: Sizes, directory: Path, groups: set[str], progress: bool) -> list[Result]:
    results: list[Result] = []

    def note(found: Result | list[Result]) -> None:
        for r in found if isinstance(found, list) else [found]:
            results.append(r)
            if progress:
                print(f"  {r.benchmark}: {r.config}: {r.seconds:.2f} s", file=sys.stderr)

    if "codec" in groups:
        for per_batch in (1000, 100):
            note(bench_encode(sizes, per_batch))
        for per_batch in (1000, 100):
            note(bench_decode(sizes, per_batch))
    if "leader" in groups:
        for per_batch in (1000, 100):
            for fsync_every in (1, 10, None):
                note(bench_leader_append(directory / "leader", sizes, per_batch, fsync_every))
    if "follower" in groups:
        note(bench_follower_append(directory / "follower", sizes))
    if "read" in groups:
        note(bench_read(directory / "read", sizes))
    if "recovery" in groups:
        note(bench_recovery(directory / "recovery", sizes))
    return results


def table(results: list[Result]) -> str:
    rows = [("benchmark", "config", "records/s", "MB/s", "seconds")]
    for r in results:
        rows.append(
            (
                r.benchmark,
                r.config,
                f"{r.records_per_s:,.0f}" if r.records else "",
                f"{r.mb_per_s:,.1f}" if r.bytes else "",
                f"{r.seconds:.3f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = []
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [row[i].rjust(widths[i]) for i in range(2, 5)]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small sizes (default; make bench)")
    mode.add_argument("--full", action="store_true", help="larger sizes, steadier numbers")
    parser.add_argument(
        "--dir",
        type=Path,
        default=REPO / "bench-data",
        help="scratch directory, deleted afterwards (default: bench-data/)",
    )
    parser.add_argument(
        "--only", action="append", choices=GROUPS, help="run only these groups (repeatable)"
    )
    parser.add_argument("--record-bytes", type=int, help="record value size")
    parser.add_argument("--codec-records", type=int, help="records encoded / decoded")
    parser.add_argument("--leader-mib", type=int, help="MiB written per leader-append run")
    parser.add_argument("--follower-mib", type=int, help="MiB written by the follower run")
    parser.add_argument("--recovery-mib", type=int, help="size of the recovered log")
    parser.add_argument("--segment-mib", type=int, help="segment size")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--keep", action="store_true", help="keep --dir (empty) afterwards")
    args = parser.parse_args(argv)

    sizes = FULL if args.full else QUICK
    overrides = {
        name: getattr(args, name)
        for name in (
            "record_bytes",
            "codec_records",
            "leader_mib",
            "follower_mib",
            "recovery_mib",
            "segment_mib",
        )
        if getattr(args, name) is not None
    }
    sizes = Sizes(**{**asdict(sizes), **overrides})
    directory: Path = args.dir / f"bench-log-{time.time_ns()}"
    directory.mkdir(parents=True)
    try:
        started = time.perf_counter()
        results = run_all(sizes, directory, set(args.only or GROUPS), progress=not args.json)
        elapsed = time.perf_counter() - started
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        if not args.keep:
            with contextlib.suppress(OSError):
                args.dir.rmdir()  # only if nothing else lives there
    if args.json:
        print(
            json.dumps(
                {"sizes": asdict(sizes), "results": [r.as_json() for r in results]}, indent=2
            )
        )
    else:
        print(
            f"{sizes.record_bytes}-byte records; segments of {sizes.segment_mib} MiB; "
            f"total {elapsed:.1f} s"
        )
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
