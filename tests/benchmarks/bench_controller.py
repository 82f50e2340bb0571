"""Benchmark: committed topic creations per second on a quorum of three controller processes.

    python tests/benchmarks/bench_controller.py [--seconds 10] [--topics-per-request 1 100]
        [--connections 4] [--window N] [--linger-ms 25] [--py-spy DIR] [--json FILE]

Three ``kraft controller start`` processes on 127.0.0.1 (``LocalQuorum``; Kafka's default
timers and log level INFO, as ``kraft controller start`` runs without a ``[quorum]`` table;
``--linger-ms`` sets ``append_linger_ms``). The log is always fsynced (there is no setting to
turn it off): the leader's append and each follower's fetched records are flushed before they
count for the high watermark (docs/storage.md). ``kraft broker simulate --count 3`` registers
three brokers, unfenced before the load starts.

The load runs in this process on one trio loop: ``--connections`` TCP connections to the
active controller, each with ``--window`` CreateTopics requests in flight (a new one is sent
as soon as one is answered; by default 32 topics' worth: 32 requests of one topic, 1 of
100), each request creating ``--topics-per-request`` topics of one
partition with replication factor 3. The controller answers a creation only once its records
are committed, so every topic answered without error is a committed creation. The first
second is a warm-up; the rate counts the creations answered during the next ``--seconds``.

Reported per case: committed creations/s, requests/s, the answers' latency (p50, p99), the
errors by name, the wall time, and the CPU time of the active controller, of each standby and
of this process (from ``/proc``): the machine may be shared, so the load average (``uptime``)
is printed with each case. Each case uses a fresh quorum. ``--py-spy DIR`` records each
controller's stacks during each case with py-spy (on the PATH or in the venv; Linux may need
``ptrace`` permission) as ``DIR/<topics per request>-<active|standby>-<node id>.folded``,
collapsed stacks per thread for ``flamegraph.pl`` or speedscope.

Not collected by pytest; speed is measured here, never asserted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import trio

from kraft.cli.controller_client import ControllerClient
from kraft.cli.quorum import describe_quorum
from kraft.config import Endpoint, parse_bootstrap_servers
from kraft.protocol.controller_frame import (
    ControllerResponseFrameDecoder,
    controller_request_header,
    encode_controller_request,
)
from kraft.protocol.controller_messages import (
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
)
from kraft.protocol.errors import Errors, error_name
from kraft.runtime.connection import READ_CHUNK_SIZE
from kraft.runtime.processes import LocalQuorum

KRAFT = [sys.executable, "-m", "kraft.cli"]
TIMEOUT_S = 60.0
WARMUP_S = 1.0
#: A CreateTopics request's own timeout: long, so that a slow answer is counted, not refused.
REQUEST_TIMEOUT_MS = 30_000
BROKERS = 3


@dataclass
class Result:
    topics_per_request: int
    connections: int
    window: int
    seconds: float
    creations_per_s: float = 0.0
    requests_per_s: float = 0.0
    latency_p50_ms: float = 0.0
    latency_p99_ms: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    active_cpu_s: float = 0.0
    #: CPU time per committed creation, of the active controller and of all three: what the
    #: rate would be on idle cores, less sensitive to the machine's load than the rate.
    active_cpu_us_per_creation: float = 0.0
    quorum_cpu_us_per_creation: float = 0.0
    standby_cpu_s: list[float] = field(default_factory=list)
    client_cpu_s: float = 0.0
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)


class Load:
    """The CreateTopics requests of one case and what their answers said."""

    def __init__(self, topics_per_request: int, start: float, end: float) -> None:
        self.topics_per_request = topics_per_request
        self.start, self.end = start, end
        self.names = itertools.count()
        #: Creations answered in the measured window / from the first request to the last.
        self.created = 0
        self.created_in_all = 0
        self.requests = 0
        self.latencies_ms: list[float] = []
        self.errors: dict[str, int] = {}

    def request(self) -> CreateTopicsRequest:
        return CreateTopicsRequest(
            topics=tuple(
                CreatableTopic(name=f"t{next(self.names)}", num_partitions=1, replication_factor=3)
                for _ in range(self.topics_per_request)
            ),
            timeout_ms=REQUEST_TIMEOUT_MS,
        )

    def answered(self, response: CreateTopicsResponse, sent: float, now: float) -> None:
        self.created_in_all += sum(t.error_code == Errors.NONE for t in response.topics)
        if not self.start <= now < self.end:
            return
        self.requests += 1
        self.latencies_ms.append((now - sent) * 1000)
        for topic in response.topics:
            if topic.error_code == Errors.NONE:
                self.created += 1
            else:
                name = error_name(topic.error_code)
                self.errors[name] = self.errors.get(name, 0) + 1


async def connection(address: Endpoint, load: Load, window: int) -> None:
    """One connection with ``window`` requests in flight until ``load.end``, then waits for
    the answers still due."""
    stream = await trio.open_tcp_stream(address.host, address.port)
    sent_at: dict[int, float] = {}
    slots = trio.Semaphore(window)
    decoder = ControllerResponseFrameDecoder()

    async def receive() -> None:
        while sent_at or time.monotonic() < load.end:
            data = await stream.receive_some(READ_CHUNK_SIZE)
            if not data:
                raise RuntimeError(f"{address} closed the connection")
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                assert isinstance(frame.body, CreateTopicsResponse)
                sent = sent_at.pop(frame.header.correlation_id)
                load.answered(frame.body, sent, time.monotonic())
                slots.release()

    async with stream, trio.open_nursery() as nursery:
        nursery.start_soon(receive)
        for correlation_id in itertools.count(1):
            await slots.acquire()
            if time.monotonic() >= load.end:
                break
            body = load.request()
            header = controller_request_header(body, correlation_id)
            sent_at[correlation_id] = time.monotonic()
            await stream.send_all(encode_controller_request(header, body))


async def run_load(address: Endpoint, load: Load, connections: int, window: int) -> None:
    drain_s = REQUEST_TIMEOUT_MS / 1000 + TIMEOUT_S
    with trio.move_on_after(load.end - time.monotonic() + drain_s) as waited:
        async with trio.open_nursery() as nursery:
            for _ in range(connections):
                nursery.start_soon(connection, address, load, window)
    if waited.cancelled_caught:
        raise TimeoutError(f"requests still unanswered {drain_s} s after the load stopped")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_unfenced(client: ControllerClient) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        response = client.send(DescribeClusterRequest(include_fenced_brokers=True), TIMEOUT_S)
        assert isinstance(response, DescribeClusterResponse)
        if sum(not b.is_fenced for b in response.brokers) == BROKERS:
            return
        time.sleep(0.2)
    raise TimeoutError(f"no {BROKERS} unfenced brokers within {TIMEOUT_S} s")


def run_case(args: argparse.Namespace, topics_per_request: int, root: Path) -> Result:
    # About as many topics in flight in each case: a queue of 12,800 topics (32 requests of
    # 100 on each of 4 connections) takes seconds to drain, longer than a broker's session,
    # which measures an overload, not the rate.
    window = args.window if args.window is not None else max(1, 32 // topics_per_request)

    def command(node_id: int, config: Path) -> list[str]:
        return [*KRAFT, "controller", "start", "--config", str(config), "--log-level", "INFO"]

    # Kafka's default timers, not the loopback ones: on a busy machine a 1 s fetch timeout
    # makes the leader resign mid-run, and a failover is not what this measures.
    timers = {} if args.linger_ms is None else {"append_linger_ms": args.linger_ms}
    quorum = LocalQuorum(root, 3, quorum=timers, command=command)
    bootstrap = parse_bootstrap_servers(quorum.bootstrap)
    brokers: subprocess.Popen[bytes] | None = None
    profilers: list[subprocess.Popen[bytes]] = []
    try:
        for node in quorum.nodes.values():
            node.start()
        with (root / "brokers.out").open("w") as out:
            brokers = subprocess.Popen(
                [*KRAFT, "broker", "simulate", "--count", str(BROKERS), "-b", quorum.bootstrap],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        client = ControllerClient(bootstrap)
        wait_unfenced(client)
        active = describe_quorum(bootstrap, timeout_s=TIMEOUT_S).leader_id
        pids = {node_id: node.pid for node_id, node in quorum.nodes.items()}
        assert all(pid is not None for pid in pids.values())
        address = parse_bootstrap_servers(quorum.addresses[active])[0]

        start = time.monotonic() + WARMUP_S
        load = Load(topics_per_request, start, start + args.seconds)
        if args.py_spy is not None:
            for node_id, pid in pids.items():
                role = "active" if node_id == active else "standby"
                profilers.append(
                    subprocess.Popen(
                        [
                            args.py_spy_binary,
                            "record",
                            "--pid",
                            str(pid),
                            "--duration",
                            str(int(WARMUP_S + args.seconds)),
                            "--rate",
                            "100",
                            "--threads",
                            "--format",
                            "raw",
                            "--output",
                            str(args.py_spy / f"{topics_per_request}-{role}-{node_id}.folded"),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        result = Result(topics_per_request, args.connections, window, args.seconds)
        result.load_before = os.getloadavg()
        cpu_before = {node_id: cpu_seconds(pid) for node_id, pid in pids.items() if pid}
        client_before = time.process_time()
        wall_before = time.monotonic()
        trio.run(run_load, address, load, args.connections, window)
        result.wall_s = time.monotonic() - wall_before
        result.client_cpu_s = time.process_time() - client_before
        cpu = {
            node_id: cpu_seconds(pid) - cpu_before[node_id] for node_id, pid in pids.items() if pid
        }
        result.load_after = os.getloadavg()
        if load.created_in_all:
            result.active_cpu_us_per_creation = cpu[active] / load.created_in_all * 1e6
            result.quorum_cpu_us_per_creation = sum(cpu.values()) / load.created_in_all * 1e6
        result.active_cpu_s = cpu.pop(active)
        result.standby_cpu_s = sorted(cpu.values())
        result.creations_per_s = load.created / args.seconds
        result.requests_per_s = load.requests / args.seconds
        if load.latencies_ms:
            result.latency_p50_ms = statistics.median(load.latencies_ms)
            result.latency_p99_ms = statistics.quantiles(load.latencies_ms, n=100)[98]
        result.errors = load.errors
        if describe_quorum(bootstrap, timeout_s=TIMEOUT_S).leader_id != active:
            result.errors["FAILOVER_DURING_RUN"] = 1
        for profiler in profilers:
            profiler.wait(TIMEOUT_S)
        return result
    finally:
        for profiler in profilers:
            if profiler.poll() is None:
                profiler.kill()
                profiler.wait()
        if brokers is not None:
            brokers.kill()
            brokers.wait(TIMEOUT_S)
        quorum.close(kill=True)


def print_result(r: Result) -> None:
    load = (
        " ".join(f"{x:.2f}" for x in r.load_before)
        + " -> "
        + " ".join(f"{x:.2f}" for x in r.load_after)
    )
    print(
        f"topics/request {r.topics_per_request:>4}: {r.creations_per_s:>8,.0f} creations/s "
        f"({r.requests_per_s:,.0f} requests/s, {r.connections} connections x {r.window} in "
        f"flight), latency p50 {r.latency_p50_ms:.1f} ms p99 {r.latency_p99_ms:.1f} ms; "
        f"wall {r.wall_s:.1f} s, CPU active {r.active_cpu_s:.1f} s, standbys "
        f"{', '.join(f'{c:.1f}' for c in r.standby_cpu_s)} s, client {r.client_cpu_s:.1f} s "
        f"(CPU per creation: active {r.active_cpu_us_per_creation:.0f} us, quorum "
        f"{r.quorum_cpu_us_per_creation:.0f} us); "
        f"load {load}" + (f"; errors {r.errors}" if r.errors else ""),
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per case")
    parser.add_argument(
        "--topics-per-request", type=int, nargs="+", default=[1, 100], help="one case each"
    )
    parser.add_argument("--connections", type=int, default=4, help="connections (default 4)")
    parser.add_argument(
        "--window",
        type=int,
        default=None,
        help="requests in flight per connection (default: 32 topics' worth, at least 1)",
    )
    parser.add_argument(
        "--linger-ms",
        type=int,
        default=None,
        help="the quorum's append_linger_ms (default: the node's, Kafka's 25)",
    )
    parser.add_argument("--py-spy", type=Path, default=None, metavar="DIR", help="flame graphs")
    parser.add_argument("--json", type=Path, default=None, help="append results as JSON lines")
    parser.add_argument("--dir", type=Path, default=None, help="data directories (kept)")
    args = parser.parse_args()
    if args.py_spy is not None:
        args.py_spy.mkdir(parents=True, exist_ok=True)
        venv_py_spy = Path(sys.executable).with_name("py-spy")
        args.py_spy_binary = str(venv_py_spy) if venv_py_spy.exists() else shutil.which("py-spy")
        if args.py_spy_binary is None:
            parser.error("--py-spy: no py-spy on the PATH or next to this python")
    print(
        f"controller benchmark: 3 controller processes, {BROKERS} simulated brokers, fsync on, "
        f"{os.cpu_count()} cores",
        flush=True,
    )
    for topics_per_request in args.topics_per_request:
        root = Path(tempfile.mkdtemp(prefix="kraft-bench-controller-", dir=args.dir))
        try:
            result = run_case(args, topics_per_request, root)
        finally:
            if args.dir is None:
                shutil.rmtree(root, ignore_errors=True)
        print_result(result)
        if args.json is not None:
            with args.json.open("a") as out:
                out.write(json.dumps(asdict(result)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
