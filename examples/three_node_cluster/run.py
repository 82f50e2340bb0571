"""Three ``kraft node start`` processes on this machine: replication, kill -9, failover, catch-up.

What it does, printing each step and the commands an operator would type:

1. copies ``node1.toml``..``node3.toml`` into a work directory (a fresh temporary one, or
   ``--dir``), moving the ports to ``--base-port`` .. ``--base-port + 2`` if asked, and formats
   each node's data directory with ``kraft storage format`` (one new cluster id for all three);
2. starts the three nodes with ``kraft node start --console`` and waits for a leader;
3. writes records through the leader and waits until every node has committed them;
4. shows ``kraft quorum describe --status``;
5. kills the leader with SIGKILL, waits for the new leader and shows the quorum again;
6. writes more records through the new leader;
7. restarts the killed node and waits until it has committed everything, then shows
   ``kraft quorum describe --replication``;
8. stops every node with SIGTERM (a graceful shutdown) and prints their exit statuses.

Each node's log (stderr) is ``node-<id>.log`` in the work directory. Whatever happens (an
error, a timeout, Ctrl-C, SIGTERM), every node still running is stopped before the script
exits: SIGTERM, then SIGKILL if it has not exited within 15 s.

    python examples/three_node_cluster/run.py [--dir DIR] [--base-port 19091] [--timeout 60]

The console protocol the script speaks to each node is documented in ``kraft.cli.node``; the
process handling comes from ``kraft.runtime.processes.NodeProcess``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType

from kraft.runtime.config import load_node_config
from kraft.runtime.processes import NodeProcess

HERE = Path(__file__).resolve().parent
NODE_IDS = (1, 2, 3)
#: The first port in the TOML files next to this script (node n listens on 19090 + n).
CONFIG_BASE_PORT = 19091
KRAFT = [sys.executable, "-m", "kraft.cli"]


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def kraft(*args: str, timeout_s: float) -> str:
    """Run ``kraft ARGS``, echoing the command line; its stdout (raises if it fails)."""
    print("$ kraft " + " ".join(args), flush=True)
    done = subprocess.run(
        [*KRAFT, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"kraft {args[0]} {args[1]} exited {done.returncode}: {done.stderr.strip()}"
        )
    print(done.stdout.rstrip(), flush=True)
    return done.stdout


def write_configs(work: Path, base_port: int) -> dict[int, Path]:
    """The TOML files copied into ``work`` with their ports moved to start at ``base_port``."""
    paths = {}
    for node_id in NODE_IDS:
        text = (HERE / f"node{node_id}.toml").read_text()
        text = re.sub(
            r"127\.0\.0\.1:(\d+)",
            lambda m: f"127.0.0.1:{int(m[1]) - CONFIG_BASE_PORT + base_port}",
            text,
        )
        paths[node_id] = work / f"node{node_id}.toml"
        paths[node_id].write_text(text)
    return paths


class Cluster:
    """The three node processes, and waits on what they report (every wait is bounded)."""

    def __init__(self, work: Path, configs: dict[int, Path]) -> None:
        self.changed = threading.Condition()
        self.nodes = {
            node_id: NodeProcess(node_id, path, work / f"node-{node_id}.log", changed=self.changed)
            for node_id, path in configs.items()
        }
        self.bootstrap = ",".join(
            str(load_node_config(path).listen_address) for path in configs.values()
        )

    def leader(self, timeout_s: float, exclude: int | None = None) -> tuple[int, int]:
        """``(leader id, epoch)``: a running node that says it leads (the highest epoch)."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while True:
                leaders = []
                for node_id, node in self.nodes.items():
                    change = node.last_leader_event()  # this life's, not a killed one's
                    if (
                        node_id != exclude
                        and node.is_running()
                        and change is not None
                        and (change["leader"] == node_id)
                    ):
                        leaders.append((change["epoch"], node_id))
                if leaders:
                    epoch, node_id = max(leaders)
                    return node_id, epoch
                if not any(
                    node.is_running() for node_id, node in self.nodes.items() if node_id != exclude
                ):
                    raise RuntimeError("every node has exited (see their logs)")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no leader within {timeout_s} s")
                # A node that dies prints nothing: look again at least every 0.1 s.
                self.changed.wait(min(remaining, 0.1))

    def append(self, records: list[str], timeout_s: float) -> int:
        """Write ``records`` through the leader, one batch each; the last offset."""
        deadline = time.monotonic() + timeout_s
        last = -1
        for record in records:
            while True:
                leader, _ = self.leader(max(0.1, deadline - time.monotonic()))
                answer = self.nodes[leader].request(
                    f"append {record}", ("appended", "error"), max(0.1, deadline - time.monotonic())
                )
                if answer["event"] == "appended":
                    last = answer["offset"]
                    break
                if time.monotonic() >= deadline:  # e.g. it lost the leadership meanwhile
                    raise TimeoutError(f"cannot append {record!r}: {answer}")
        return last

    def wait_committed(self, node_id: int, offset: int, timeout_s: float, since: int = 0) -> None:
        self.nodes[node_id].wait_for(
            lambda e: e.get("event") == "commit" and e["offset"] >= offset,
            timeout_s,
            f"the commit of offset {offset}",
            since,
        )

    def records(self, node_id: int, pid: int | None = None) -> list[str]:
        """The records ``node_id`` reported committed (by its process ``pid`` if given)."""
        return [
            record
            for event in self.nodes[node_id].events("commit")
            if pid is None or event["pid"] == pid
            for record in event["records"]
        ]

    def stop(self, timeout_s: float = 15.0) -> dict[int, int]:
        """SIGTERM every running node at once; their exit statuses (SIGKILL after timeout)."""
        running = [node for node in self.nodes.values() if node.is_running()]
        for node in running:
            if node.pid is not None:
                os.kill(node.pid, signal.SIGTERM)
        return {node.node_id: node.wait(timeout_s) for node in running}

    def close(self) -> None:
        """Stop whatever is still running (used on every way out)."""
        self.stop()
        for node in self.nodes.values():
            if node.pid is not None:
                node.wait(15.0)  # closes its pipes and log file


def demo(cluster: Cluster, configs: dict[int, Path], timeout_s: float) -> None:
    step("starting three nodes")
    for node_id, node in cluster.nodes.items():
        print(f"$ kraft node start --config {configs[node_id]} --console &", flush=True)
        node.start()
    for node in cluster.nodes.values():
        node.wait_for(lambda e: e.get("event") == "started", timeout_s, "start-up")
    leader, epoch = cluster.leader(timeout_s)
    print(f"leader: node {leader} (epoch {epoch})")

    step("writing five records through the leader")
    first = [f"before-{i}" for i in range(5)]
    last = cluster.append(first, timeout_s)
    for node_id in cluster.nodes:
        cluster.wait_committed(node_id, last, timeout_s)
    print(f"every node committed through offset {last}: {cluster.records(leader)}")
    kraft("quorum", "describe", "--bootstrap", cluster.bootstrap, "--status", timeout_s=timeout_s)

    step(f"kill -9 the leader, node {leader}")
    killed = leader
    cluster.nodes[killed].kill()
    print(f"node {killed} exited with status {cluster.nodes[killed].wait(timeout_s)}")
    leader, epoch = cluster.leader(timeout_s, exclude=killed)
    print(f"new leader: node {leader} (epoch {epoch})")
    kraft("quorum", "describe", "--bootstrap", cluster.bootstrap, "--status", timeout_s=timeout_s)

    step("writing three more records through the new leader")
    second = [f"after-{i}" for i in range(3)]
    last = cluster.append(second, timeout_s)
    cluster.wait_committed(leader, last, timeout_s)
    print(f"node {leader} committed through offset {last}")

    step(f"restarting node {killed}")
    node = cluster.nodes[killed]
    mark = node.mark()
    print(f"$ kraft node start --config {configs[killed]} --console &", flush=True)
    node.start()
    cluster.wait_committed(killed, last, timeout_s, since=mark)
    # A restarted node delivers its whole committed log again, from offset 0.
    replayed = cluster.records(killed, node.pid)
    if replayed != first + second:
        raise RuntimeError(f"node {killed} committed {replayed}, not {first + second}")
    print(
        f"node {killed} caught up: committed through offset {last}, "
        f"{len(replayed)} records: {replayed}"
    )
    kraft(
        "quorum", "describe", "--bootstrap", cluster.bootstrap, "--replication", timeout_s=timeout_s
    )

    step("stopping every node with SIGTERM")
    for node_id, status in sorted(cluster.stop().items()):
        print(f"node {node_id} exited with status {status}")


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="work directory, kept afterwards (must be empty or absent; "
        "default: a temporary one, removed on success)",
    )
    parser.add_argument(
        "--base-port",
        type=int,
        default=CONFIG_BASE_PORT,
        help=f"node n listens on BASE_PORT + n - 1 (default {CONFIG_BASE_PORT})",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for each step (default 60)"
    )
    args = parser.parse_args()
    if args.dir is not None and args.dir.exists() and any(args.dir.iterdir()):
        parser.error(f"{args.dir} is not empty")
    work = args.dir if args.dir is not None else Path(tempfile.mkdtemp(prefix="kraft-3-nodes-"))
    work.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupted)  # run the clean-up below on SIGTERM too

    step(f"formatting three data directories in {work}")
    configs = write_configs(work, args.base_port)
    cluster_id = kraft("storage", "random-uuid", timeout_s=args.timeout).strip()
    for node_id, path in configs.items():
        kraft(
            "storage",
            "format",
            "--cluster-id",
            cluster_id,
            "--node-id",
            str(node_id),
            str(load_node_config(path).data_dir),
            timeout_s=args.timeout,
        )

    cluster = Cluster(work, configs)
    ok = False
    try:
        demo(cluster, configs, args.timeout)
        ok = True
    except KeyboardInterrupt:
        print("\ninterrupted: stopping the nodes", file=sys.stderr)
    except (RuntimeError, TimeoutError, subprocess.TimeoutExpired) as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
    finally:
        # Nothing may interrupt the clean-up.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cluster.close()
    if ok and args.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    elif not ok:
        print(f"the nodes' logs are in {work}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
