"""Benchmark of the Raft core's CPU cost: three real clients in one process (``LocalCluster``).

Messages are delivered in memory and time is virtual, so this measures what the core itself
costs per committed record -- the leader's accumulator and append, the fetch path, the HW,
and every node's listener decoding its records -- with no network and no fsync (MemoryLog).
The three nodes share one CPU here; in a real deployment each has its own process.

- ``throughput``: appends of ``--batch`` 100-byte records per ``prepare_append``, until
  ``--records`` are committed and delivered to all three listeners: records/s of wall time.
- ``single record``: one 1-record append at a time, waited for until every listener has it:
  CPU time per commit round trip (not a latency: virtual time does not advance in it).

Run: ``.venv/bin/python tests/benchmarks/bench_raft.py [--records N] [--batch N] [--json]``
(``make bench`` runs it with the defaults, a few seconds). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from kraft.testing import LocalCluster


def throughput(records: int, batch: int) -> float:
    cluster: LocalCluster[bytes] = LocalCluster(voters=3, seed=1, append_linger_ms=5)
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    payload = [b"x" * 100] * batch
    rounds = records // batch
    start = time.perf_counter()
    for _ in range(rounds):
        cluster.append(payload)
        cluster.run_for(5)
    total = rounds * batch
    done = cluster.run_until(
        lambda: all(len(r.records) == total for r in cluster.listeners.values()), 60_000
    )
    elapsed = time.perf_counter() - start
    assert done, "not every record was delivered"
    return total / elapsed


def single_record_round_trips(count: int) -> list[float]:
    cluster: LocalCluster[bytes] = LocalCluster(voters=3, seed=2, append_linger_ms=0)
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    samples = []
    for i in range(count):
        start = time.perf_counter()
        cluster.append([b"y" * 100])

        def replicated(n: int = i + 1) -> bool:
            return all(len(r.records) == n for r in cluster.listeners.values())

        assert cluster.run_until(replicated, 5_000)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--round-trips", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rate = throughput(args.records, args.batch)
    samples = single_record_round_trips(args.round_trips)
    result = {
        "throughput_records_per_s": round(rate),
        "batch": args.batch,
        "single_record_cpu_ms_p50": round(statistics.median(samples), 3),
        "single_record_cpu_ms_p99": round(sorted(samples)[int(len(samples) * 0.99) - 1], 3),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"3 clients in one process, 100-byte records, batches of {args.batch}: "
            f"{result['throughput_records_per_s']:,} committed records/s "
            "(delivered to all three listeners)"
        )
        print(
            f"single-record commit round trip, CPU: p50 {result['single_record_cpu_ms_p50']} "
            f"ms, p99 {result['single_record_cpu_ms_p99']} ms"
        )


if __name__ == "__main__":
    main()
