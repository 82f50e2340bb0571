"""Micro-benchmark: records/s through ``BatchAccumulator.append`` + ``drain``.

100-byte records, ``BytesSerde``, Kafka's defaults (8 MiB batches, 25 ms linger, 10 batches),
appended in groups of 1, 10 and 100 records (one ``prepare_append`` each), the poll thread
draining whenever ``needs_drain`` says so; the clock advances 1 ms every 100 appends. The
time counted covers append, drain and the v2 encoding of every batch -- everything the
accumulator does for a record before the log writes it.

Run: ``.venv/bin/python tests/benchmarks/bench_accumulator.py [--records N] [--repeat R]``.
Not collected by pytest (``bench_*.py``); speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import time

from kraft.raft.accumulator import BatchAccumulator
from kraft.record import BytesSerde

RECORD_SIZE = 100
MAX_BATCH_SIZE = 8 * 1024 * 1024
LINGER_MS = 25


def run(total_records: int, per_append: int, *, delay_drain: bool) -> tuple[float, int, int]:
    """Seconds to push ``total_records`` through append + drain; batches and bytes drained."""
    acc: BatchAccumulator[bytes] = BatchAccumulator(1, 0, LINGER_MS, MAX_BATCH_SIZE, BytesSerde())
    group = [bytes([i % 256]) * RECORD_SIZE for i in range(per_append)]
    appends = total_records // per_append
    append = acc.append
    now_ms = 0
    drained_batches = drained_bytes = drained_records = 0
    start = time.perf_counter()
    for i in range(appends):
        append(1, group, now_ms, delay_drain=delay_drain)
        if delay_drain:
            acc.allow_drain()
        if i % 100 == 99:
            now_ms += 1
            if acc.needs_drain(now_ms):
                for batch in acc.drain():
                    drained_batches += 1
                    drained_bytes += len(batch.data)
                    drained_records += batch.num_records
    for batch in acc.drain():
        drained_batches += 1
        drained_bytes += len(batch.data)
        drained_records += batch.num_records
    elapsed = time.perf_counter() - start
    assert drained_records == appends * per_append, (drained_records, appends * per_append)
    return elapsed, drained_batches, drained_bytes


def main() -> None:
    """Print records/s for each append size; the best of ``--repeat`` runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{RECORD_SIZE}-byte records, BytesSerde, {args.records:,} records, best of {args.repeat}"
    )
    for per_append in (1, 10, 100):
        for delay_drain in (False, True):
            best = min(
                (
                    run(args.records, per_append, delay_drain=delay_drain)
                    for _ in range(args.repeat)
                ),
                key=lambda result: result[0],
            )
            elapsed, batches, size = best
            records = args.records // per_append * per_append
            mode = "prepare+allow" if delay_drain else "append      "
            print(
                f"  {per_append:>3} record(s)/append, {mode}: {records / elapsed:>12,.0f} "
                f"records/s  ({elapsed * 1e9 / records:,.0f} ns/record, {batches} batches, "
                f"{size / elapsed / 2**20:,.0f} MiB/s)"
            )


if __name__ == "__main__":
    main()
