"""Benchmark of liveness under message loss (issue 17, hole 8): leader changes per minute and
the committed share of the offered load.

Three voters with the default settings (Kafka's timers), the replicated-counter workload at
``--rate`` increments per simulated second for ``--seconds`` simulated seconds after the first
election, on a network whose every link drops a share d of the messages, duplicates d/2 and
reorders d, for d in ``--loss`` (percent), over ``--seeds`` seeds each
(:func:`kraft.simulation.liveness.run_under_loss`). The goal with the default settings: at 10 %
loss at most 1 leader change a minute and at least 90 % of the load committed.

Run: ``.venv/bin/python tests/benchmarks/bench_loss.py [--seeds N] [--seconds S] [--json]``
(``make bench`` runs it). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import time

from kraft.simulation.liveness import LossRun, run_under_loss


def summary(runs: list[LossRun]) -> dict[str, float]:
    per_minute = [r.leader_changes_per_minute for r in runs]
    shares = [r.committed_share for r in runs]
    return {
        "loss_percent": round(runs[0].loss * 100, 1),
        "seeds": len(runs),
        "leader_changes_per_minute": round(sum(per_minute) / len(runs), 2),
        "max_leader_changes_per_minute": round(max(per_minute), 2),
        "committed_share": round(sum(shares) / len(runs), 4),
        "min_committed_share": round(min(shares), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loss", type=float, nargs="+", default=[0, 1, 5, 10, 20])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = [
        summary(
            [
                run_under_loss(percent / 100, seed, rate_per_s=args.rate, seconds=args.seconds)
                for seed in range(1, args.seeds + 1)
            ]
        )
        for percent in args.loss
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"liveness under loss: 3 voters, {args.rate:g} increments per simulated s, "
        f"{args.seconds:g} s simulated, {args.seeds} seeds, drop d, duplicate d/2, reorder d "
        f"({time.perf_counter() - start:.0f} s wall)"
    )
    print("  loss   leader changes/min (max)   committed (min)")
    for row in rows:
        print(
            f"  {row['loss_percent']:>4g} %  {row['leader_changes_per_minute']:>8.2f} "
            f"({row['max_leader_changes_per_minute']:>5.2f})          "
            f"{row['committed_share']:>6.1%} ({row['min_committed_share']:.1%})"
        )


if __name__ == "__main__":
    main()
