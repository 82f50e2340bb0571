"""Benchmark of the simulator: simulated seconds per wall second (issue 4 §8).

Three voters, the replicated-counter workload at ``--rate`` appends per simulated second, Kafka's
default timers, the default network (1-5 ms latency, no loss), invariants checked after every
event, for ``--seconds`` simulated seconds after the first election. Measured twice: with
message events in the event log (the default) and without (``message_events=False``). No event
file is written (events are still built and hashed), so disk speed does not count. The ratio is
also given per CPU second of the process (``cpu_ratio``), which other work on a shared machine
disturbs less than the wall clock.

Run: ``.venv/bin/python tests/benchmarks/bench_sim.py [--seconds S] [--rate R] [--json]``
(``make bench`` runs it). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import time

from kraft.simulation import Cluster


def speed(seconds: int, rate: float, message_events: bool, seed: int = 1) -> dict[str, float]:
    cluster = Cluster(seed=seed, voters=3, message_events=message_events)
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    cluster.start_workload(rate)
    events_before = cluster.events.count
    start, cpu_start = time.perf_counter(), time.process_time()
    cluster.run_for(seconds * 1000)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    assert not cluster.validate()
    return {
        "simulated_s": seconds,
        "wall_s": round(wall, 3),
        "ratio": round(seconds / wall, 1),
        # Simulated seconds per CPU second: steadier than the wall ratio on a shared machine.
        "cpu_ratio": round(seconds / cpu, 1),
        "events_per_wall_s": round((cluster.events.count - events_before) / wall),
        "committed": cluster.node(1).counter_value,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {
        "with message events": speed(args.seconds, args.rate, True),
        "without message events": speed(args.seconds, args.rate, False),
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"simulator: 3 voters, {args.rate:g} appends per simulated s, {args.seconds} s simulated")
    for name, r in results.items():
        print(
            f"  {name:<24} {r['ratio']:>7.1f}x  ({r['cpu_ratio']}x of CPU time, "
            f"{r['wall_s']} s wall, {r['events_per_wall_s']} events/s, "
            f"{r['committed']} increments committed)"
        )


if __name__ == "__main__":
    main()
