"""Three ``kraft controller start`` processes, three simulated brokers, topics, kill -9 of the
active controller: nothing is lost.

What it does, printing each step and the commands an operator would type:

1. copies ``controller1.toml``..``controller3.toml`` into a work directory (a fresh temporary
   one, or ``--dir``), on three ports the OS says are free (or ``--base-port`` ..
   ``--base-port + 2``), and formats each controller's data directory with
   ``kraft storage format`` (one new cluster id for all three);
2. starts the three controllers with ``kraft controller start`` and waits for an active one;
3. starts ``kraft broker simulate --count 3`` and waits until ``kraft cluster describe`` shows
   the three brokers registered and unfenced;
4. creates three topics with ``kraft topics create`` (replication factor 3), then shows
   ``kraft topics list`` and ``kraft topics describe``;
5. kills the active controller with SIGKILL, waits until another one is active, and checks
   that ``kraft topics describe`` shows the same topics (ids, partitions, replicas) and
   ``kraft cluster describe`` the same unfenced brokers;
6. creates one more topic through the new active controller;
7. restarts the killed controller and waits until its log has everything the quorum had
   committed, then shows ``kraft quorum describe --replication``;
8. stops the brokers and the controllers with SIGTERM (a graceful shutdown) and prints their
   exit statuses.

Each controller's log (stderr) is ``controller-<id>.log`` in the work directory, the brokers'
events ``brokers.out``. Whatever happens (an error, a timeout, Ctrl-C, SIGTERM), every process
still running is stopped before the script exits: SIGTERM, then SIGKILL if it has not exited
within 15 s.

    python examples/controller/run.py [--dir DIR] [--base-port N] [--timeout 60]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from kraft.runtime.config import load_node_config
from kraft.runtime.processes import NodeProcess, free_ports

HERE = Path(__file__).resolve().parent
NODE_IDS = (1, 2, 3)
#: The first port in the TOML files next to this script (controller n listens on 19190 + n).
CONFIG_BASE_PORT = 19191
KRAFT = [sys.executable, "-m", "kraft.cli"]
TOPICS = {"orders": 3, "payments": 2, "audit": 1}  # name: partitions


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def kraft(*args: str, timeout_s: float, quiet: bool = False) -> str:
    """Run ``kraft ARGS``, echoing the command line and its output unless ``quiet``; its
    stdout (raises if it fails)."""
    if not quiet:
        print("$ kraft " + " ".join(args), flush=True)
    done = subprocess.run(
        [*KRAFT, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"kraft {args[0]} {args[1]} exited {done.returncode}: {done.stderr.strip()}"
        )
    if not quiet:
        print(done.stdout.rstrip(), flush=True)
    return done.stdout


def until(what: str, check: Callable[[], Any], timeout_s: float) -> Any:
    """``check()``'s first truthy value, asked every 0.2 s (a controller prints no events to
    wait on); TimeoutError naming ``what`` after ``timeout_s``. A ``check`` that fails
    (RuntimeError: the tool exited 1, e.g. no active controller yet) counts as falsy."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = check()
        except (RuntimeError, subprocess.TimeoutExpired):
            value = None
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"no {what} within {timeout_s} s")


def write_configs(work: Path, ports: list[int]) -> dict[int, Path]:
    """The TOML files copied into ``work`` with controller n on ``ports[n - 1]``."""
    paths = {}
    for node_id in NODE_IDS:
        text = (HERE / f"controller{node_id}.toml").read_text()
        text = re.sub(
            r"127\.0\.0\.1:(\d+)",
            lambda m: f"127.0.0.1:{ports[int(m[1]) - CONFIG_BASE_PORT]}",
            text,
        )
        paths[node_id] = work / f"controller{node_id}.toml"
        paths[node_id].write_text(text)
    return paths


class Cluster:
    """The three controller processes and the simulated brokers' process."""

    def __init__(self, work: Path, configs: dict[int, Path], timeout_s: float) -> None:
        self.work = work
        self.configs = configs
        self.timeout_s = timeout_s
        self.controllers = {
            node_id: NodeProcess(
                node_id,
                path,
                work / f"controller-{node_id}.log",
                command=[*KRAFT, "controller", "start", "--config", str(path)],
            )
            for node_id, path in configs.items()
        }
        self.bootstrap = ",".join(
            str(load_node_config(path).listen_address) for path in configs.values()
        )
        self.brokers: subprocess.Popen[str] | None = None

    def start_controller(self, node_id: int) -> None:
        print(
            f"$ kraft controller start --config {self.configs[node_id]} "
            f"2> controller-{node_id}.log &",
            flush=True,
        )
        self.controllers[node_id].start()

    def start_brokers(self) -> None:
        print(f"$ kraft broker simulate --count 3 -b {self.bootstrap} > brokers.out &", flush=True)
        with (self.work / "brokers.out").open("w") as out:
            self.brokers = subprocess.Popen(
                [*KRAFT, "broker", "simulate", "--count", "3", "-b", self.bootstrap],
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )

    def tool(self, *args: str, quiet: bool = False) -> str:
        """``kraft GROUP COMMAND ... -b BOOTSTRAP``."""
        return kraft(*args, "-b", self.bootstrap, timeout_s=self.timeout_s, quiet=quiet)

    def tool_json(self, *args: str) -> Any:
        return json.loads(self.tool(*args, "--json", quiet=True))

    def active_controller(self, exclude: int | None = None) -> int:
        """The id of the active controller (DescribeCluster's ``controller_id``), waiting
        for one other than ``exclude``."""

        def active() -> int | None:
            controller_id: int = self.tool_json("cluster", "describe")["controller_id"]
            return None if controller_id in (-1, exclude) else controller_id

        return int(until("active controller", active, self.timeout_s))

    def unfenced_brokers(self) -> list[int]:
        """Waits until three brokers are registered and unfenced; their ids."""

        def unfenced() -> list[int]:
            brokers = self.tool_json("cluster", "describe")["brokers"]
            ids = sorted(b["id"] for b in brokers if not b["fenced"])
            return ids if len(ids) == 3 else []

        return list(until("three unfenced brokers", unfenced, self.timeout_s))

    def topics(self) -> dict[str, Any]:
        """Every topic as ``kraft topics describe --json`` shows it, without the leaders and
        leader epochs (a failover of the controllers moves no broker's leadership, but what
        must survive is the topic, its partitions and their replicas)."""
        return {
            topic["topic"]: {
                "topic_id": topic["topic_id"],
                "replicas": [p["replicas"] for p in topic["partitions"]],
            }
            for topic in self.tool_json("topics", "describe")["topics"]
        }

    def stop(self, timeout_s: float = 15.0) -> dict[str, int]:
        """SIGTERM the brokers, then every running controller; their exit statuses (SIGKILL
        after ``timeout_s``)."""
        statuses = {}
        if self.brokers is not None and self.brokers.poll() is None:
            self.brokers.terminate()
            try:
                statuses["brokers"] = self.brokers.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.brokers.kill()
                statuses["brokers"] = self.brokers.wait()
        running = [node for node in self.controllers.values() if node.is_running()]
        for node in running:
            if node.pid is not None:
                os.kill(node.pid, signal.SIGTERM)
        for node in running:
            statuses[f"controller {node.node_id}"] = node.wait(timeout_s)
        return statuses

    def close(self) -> None:
        """Stop whatever is still running (used on every way out)."""
        self.stop()
        for node in self.controllers.values():
            if node.pid is not None:
                node.wait(15.0)  # closes its pipes and log file


def demo(cluster: Cluster, timeout_s: float) -> None:
    step("starting three controllers")
    for node_id in cluster.controllers:
        cluster.start_controller(node_id)
    active = cluster.active_controller()
    print(f"active controller: {active}")

    step("starting three simulated brokers")
    cluster.start_brokers()
    print(f"unfenced brokers: {cluster.unfenced_brokers()}")
    cluster.tool("cluster", "describe")

    step("creating topics (replication factor 3)")
    for name, partitions in TOPICS.items():
        cluster.tool(
            "topics", "create", "--topic", name, "--partitions", str(partitions),
            "--replication-factor", "3",
        )  # fmt: skip
    cluster.tool("topics", "list")
    cluster.tool("topics", "describe")
    before = cluster.topics()
    if sorted(before) != sorted(TOPICS):
        raise RuntimeError(f"the controller describes {sorted(before)}, not {sorted(TOPICS)}")

    step(f"kill -9 the active controller, controller {active}")
    killed = active
    cluster.controllers[killed].kill()
    print(f"controller {killed} exited with status {cluster.controllers[killed].wait(timeout_s)}")
    active = cluster.active_controller(exclude=killed)
    print(f"new active controller: {active}")
    cluster.tool("cluster", "describe")
    cluster.tool("topics", "describe")
    after = cluster.topics()
    if after != before:
        raise RuntimeError(f"topics before the failover: {before}; after: {after}")
    brokers = cluster.unfenced_brokers()
    print(
        f"nothing lost: the same {len(after)} topics (ids, partitions, replicas), brokers {brokers}"
    )

    step(f"creating one more topic through controller {active}")
    cluster.tool("topics", "create", "--topic", "after-failover", "--partitions", "2")
    cluster.tool("topics", "list")

    step(f"restarting controller {killed}")
    cluster.start_controller(killed)
    committed = cluster.tool_json("quorum", "describe", "--status")["high_watermark"]

    def caught_up() -> bool:
        replicas = cluster.tool_json("quorum", "describe", "--replication")["replicas"]
        [mine] = [r for r in replicas if r["id"] == killed]
        return bool(mine["log_end_offset"] >= committed)

    until(f"controller {killed} caught up to offset {committed}", caught_up, timeout_s)
    print(f"controller {killed} has the log through offset {committed}")
    cluster.tool("quorum", "describe", "--replication")

    step("stopping the brokers and the controllers with SIGTERM")
    for name, status in cluster.stop().items():
        print(f"{name} exited with status {status}")
        if status != 0:
            raise RuntimeError(f"{name} exited with status {status}")


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
        default=None,
        help="controller n listens on BASE_PORT + n - 1 (default: three free ports)",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for each step (default 60)"
    )
    args = parser.parse_args()
    if args.dir is not None and args.dir.exists() and any(args.dir.iterdir()):
        parser.error(f"{args.dir} is not empty")
    work = args.dir if args.dir is not None else Path(tempfile.mkdtemp(prefix="kraft-controller-"))
    work.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupted)  # run the clean-up below on SIGTERM too
    ports = (
        free_ports(len(NODE_IDS))
        if args.base_port is None
        else [args.base_port + i for i in range(len(NODE_IDS))]
    )

    step(f"formatting three data directories in {work}")
    configs = write_configs(work, ports)
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

    cluster = Cluster(work, configs, args.timeout)
    ok = False
    try:
        demo(cluster, args.timeout)
        ok = True
    except KeyboardInterrupt:
        print("\ninterrupted: stopping every process", file=sys.stderr)
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
        print(f"the controllers' logs are in {work}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
