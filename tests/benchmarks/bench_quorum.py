"""The quorum benchmark: real node processes on loopback, fsync on (issue 6, item 7).

    python tests/benchmarks/bench_quorum.py [--seconds 10] [--quick] [--only NAME ...]

Each case starts a fresh quorum (``LocalQuorum`` with ``bench_quorum_node.py`` as the node
program), waits for a leader, and tells the leader to run a closed-loop load (see
``bench_quorum_node.py``): committed records/s, and the commit latency of each append as the
leader's listener sees it. The failover case kills the leader with SIGKILL and measures the
time until a new leader has committed its LeaderChange record (its listeners are told it
leads only then). Results print as a table and as JSON lines (``--json FILE``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraft.runtime.processes import Event, LocalQuorum

NODE = Path(__file__).with_name("bench_quorum_node.py")
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Case:
    name: str
    voters: int = 3
    size: int = 100
    window: int = 1
    per_append: int = 1
    linger_ms: int = 0
    #: fetch_high_watermark_linger_ms (0: Kafka's KIP-1166 behaviour, the default).
    hw_linger_ms: int = 0
    #: How the load appends: "prepare" (prepare_append + the listener) or "futures"
    #: (RaftNode.append, each future waited on), or "barriers" (RaftNode.read_barrier in a
    #: closed loop: its latency is the read's).
    mode: str = "prepare"


CASES = [
    Case("latency-1x100B", window=1, per_append=1),
    Case("latency-1x100B-futures", window=1, per_append=1, mode="futures"),
    Case("read-barrier-leader", window=1, per_append=1, mode="barriers"),
    Case("latency-1x100B-hwlinger1", window=1, per_append=1, hw_linger_ms=1),
    Case("throughput-100B-window64x1", window=64, per_append=1),
    Case("throughput-100B-window16x100", window=16, per_append=100),
    Case("throughput-100B-window16x100-futures", window=16, per_append=100, mode="futures"),
    Case("throughput-100B-window8x1000", window=8, per_append=1000),
    Case("latency-1x1KiB", size=1024, window=1, per_append=1),
    Case("throughput-1KiB-window16x100", size=1024, window=16, per_append=100),
    Case("latency-1x100B-5voters", voters=5, window=1, per_append=1),
    Case("throughput-100B-window16x100-5voters", voters=5, window=16, per_append=100),
]


def _quorum(root: Path, voters: int, linger_ms: int, hw_linger_ms: int = 0) -> LocalQuorum:
    return LocalQuorum(
        root,
        voters,
        quorum={
            "append_linger_ms": linger_ms,
            "election_timeout_ms": 500,
            "fetch_high_watermark_linger_ms": hw_linger_ms,
            "fetch_timeout_ms": 1000,
            "request_timeout_ms": 1000,
        },
        command=lambda node_id, config: [sys.executable, str(NODE), str(config)],
    )


def run_case(case: Case, seconds: float, root: Path) -> dict[str, Any]:
    with _quorum(root / case.name, case.voters, case.linger_ms, case.hw_linger_ms) as local:
        local.start(TIMEOUT_S)
        leader = local.leader(TIMEOUT_S)
        answer = local.nodes[leader].request(
            f"load {seconds} {case.size} {case.window} {case.per_append} {case.mode}",
            ("result", "error"),
            seconds + TIMEOUT_S,
        )
        if answer["event"] == "error":
            raise RuntimeError(f"{case.name}: {answer}")
        metrics = local.nodes[leader].request("metrics", ("metrics",), TIMEOUT_S)
    return {
        "case": case.name,
        "voters": case.voters,
        "record_bytes": case.size,
        "window": case.window,
        "records_per_append": case.per_append,
        **{k: v for k, v in answer.items() if k not in ("event", "pid")},
        "poll_idle_ratio": metrics.get("poll-idle-ratio-avg"),
        "commit_latency_avg_ms": metrics.get("commit-latency-avg"),
    }


def run_failover(root: Path, rounds: int) -> dict[str, Any]:
    times: list[float] = []
    with _quorum(root / "failover", 3, 0) as local:
        local.start(TIMEOUT_S)
        for _ in range(rounds):
            leader = local.leader(TIMEOUT_S)
            marks = {i: n.mark() for i, n in local.nodes.items()}
            killed_at = time.time()
            local.nodes[leader].kill()
            local.nodes[leader].wait(TIMEOUT_S)
            new = local.leader(TIMEOUT_S, exclude=[leader])

            def elected(e: Event, new: int = new) -> bool:
                return e.get("event") == "leader" and e["leader"] == new

            event = local.nodes[new].wait_for(elected, TIMEOUT_S, since=marks[new])
            times.append((event["t"] - killed_at) * 1000)
            restart_mark = local.nodes[leader].mark()
            local.nodes[leader].start()
            local.nodes[leader].wait_for(
                lambda e: e.get("event") == "started", TIMEOUT_S, since=restart_mark
            )
    times.sort()
    return {
        "case": "failover-kill-9",
        "voters": 3,
        "rounds": rounds,
        "p50_ms": round(times[len(times) // 2], 1),
        "max_ms": round(times[-1], 1),
        "all_ms": [round(t, 1) for t in times],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="3 s per case, 3 failovers")
    parser.add_argument("--only", nargs="*", default=None, help="case names to run")
    parser.add_argument("--failovers", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None, help="append results here")
    parser.add_argument("--dir", type=Path, default=None, help="where the nodes keep data")
    args = parser.parse_args()
    seconds = 3.0 if args.quick else args.seconds
    failovers = 3 if args.quick else args.failovers
    root = args.dir or Path(tempfile.mkdtemp(prefix="kraft-bench-"))
    results = []
    for case in CASES:
        if args.only is not None and case.name not in args.only:
            continue
        result = run_case(case, seconds, root)
        results.append(result)
        print(
            f"{case.name:<40} {result['records_per_s']:>9,} rec/s  {result['mb_per_s']:>7} MB/s"
            f"  p50 {result['p50_ms']:>7} ms  p99 {result['p99_ms']:>7} ms",
            flush=True,
        )
    if args.only is None or "failover-kill-9" in args.only:
        result = run_failover(root, failovers)
        results.append(result)
        print(
            f"{'failover-kill-9':<40} p50 {result['p50_ms']} ms  max {result['max_ms']} ms "
            f"over {failovers} kills",
            flush=True,
        )
    if args.json is not None:
        with args.json.open("a") as out:
            for result in results:
                out.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
