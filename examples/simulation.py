"""A deterministic simulation: five voters under a counter workload lose their leader.

Elects a leader, runs the replicated-counter workload, kills the leader, shows the new leader
in a higher epoch, restarts the old one from its disk, waits until every node holds the same
counter, and runs the end-of-run invariant checks. The same seed prints the same lines, and
the same event-log digest, every time (docs/simulation.md).

    python examples/simulation.py [--seed N] [--dir DIR]

With ``--dir`` the event log is written to ``DIR/events.jsonl``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kraft.simulation import Cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--dir", type=Path, help="write DIR/events.jsonl")
    args = parser.parse_args()
    log = None if args.dir is None else args.dir / "events.jsonl"

    with Cluster(seed=args.seed, voters=5, event_log=log) as cluster:
        cluster.run_until(lambda: cluster.leader() is not None, timeout_ms=10_000)
        first = cluster.leader()
        assert first is not None
        print(f"t={cluster.now_ms} ms: node {first} leads epoch {cluster.node(first).epoch}")

        cluster.start_workload(rate_per_s=200)
        cluster.run_for(2_000)
        print(
            f"t={cluster.now_ms} ms: counter at {cluster.node(first).counter_value}; "
            f"killing node {first}"
        )
        cluster.kill(first)

        cluster.run_until(lambda: cluster.leader() not in (None, first), timeout_ms=10_000)
        second = cluster.leader()
        assert second is not None
        print(f"t={cluster.now_ms} ms: node {second} leads epoch {cluster.node(second).epoch}")

        cluster.run_for(2_000)
        cluster.restart(first)
        cluster.stop_workload()

        def converged() -> bool:
            values = {(n.high_watermark, n.counter_value) for n in cluster.nodes.values()}
            return cluster.leader() is not None and len(values) == 1

        assert cluster.run_until(converged, timeout_ms=10_000), list(cluster.nodes.values())
        node = cluster.node(first)
        print(
            f"t={cluster.now_ms} ms: node {first} rejoined as {node.role}; every node's "
            f"counter is {node.counter_value}"
        )

        violations = cluster.validate()
        assert violations == [], violations
        print(
            f"no invariant violated in {cluster.checker.checks} checks; "
            f"{cluster.events.count} events, digest {cluster.digest[:16]}"
        )


if __name__ == "__main__":
    main()
