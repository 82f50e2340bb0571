"""Benchmark of the trio TCP transport (``TrioNetworkChannel``) over loopback.

A client channel sends requests to a server channel whose "driver" (a thread polling its
``BlockingMessageQueue``) answers each at once; the client's driver is the benchmark's main
thread. By default the server runs in a child process (as replicas do); ``--same-process``
puts both channels in this process, where they share one GIL.

- ``round trip``: one Vote request at a time, answered: latency percentiles.
- ``pipelined``: Fetch requests with ``--window`` outstanding, each answered with a
  ``--payload``-byte record batch: answered requests/s and payload MB/s.

Run: ``.venv/bin/python tests/benchmarks/bench_transport.py [--tls] [--same-process] [--json]``.
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.connection
import statistics
import tempfile
import threading
import time
from pathlib import Path

from kraft.config import Endpoint
from kraft.protocol.envelope import (
    InboundRequest,
    InboundResponse,
    OutboundRequest,
    OutboundResponse,
)
from kraft.protocol.messages import FetchRequest, FetchResponse, VoteRequest, VoteResponse
from kraft.runtime.queue import BlockingMessageQueue
from kraft.runtime.tls import TlsConfig
from kraft.runtime.transport import TrioNetworkChannel
from kraft.testing import ManualClock

HOST = "127.0.0.1"


def make_tls(directory: Path) -> tuple[TlsConfig, TlsConfig]:
    import trustme  # noqa: PLC0415 - only for --tls

    ca = trustme.CA()
    configs = []
    for name in ("server", "client"):
        cert = ca.issue_cert(HOST)
        certfile, keyfile = directory / f"{name}.crt", directory / f"{name}.key"
        cert.private_key_pem.write_to_path(str(keyfile))
        for i, pem in enumerate(cert.cert_chain_pems):
            pem.write_to_path(str(certfile), append=i > 0)
        configs.append(TlsConfig(certfile, keyfile, cafile=directory / "ca.pem"))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    return configs[0], configs[1]


def serve(
    payload: int,
    tls: TlsConfig | None,
    stop: threading.Event,
    ready: multiprocessing.connection.Connection | None = None,
) -> TrioNetworkChannel:
    """Start the server channel and its answering thread; returns the channel (started)."""
    queue = BlockingMessageQueue()
    channel = TrioNetworkChannel(
        node_id=2,
        cluster_id="bench",
        listen=Endpoint(HOST, 0),
        peers={},
        queue=queue,
        clock=ManualClock(),
        tls=tls,
        thread_name="kraft-2-net",
    )
    channel.start()
    records = b"x" * payload

    def answer() -> None:
        respond = channel.respond
        while not stop.is_set():
            message = queue.poll(100)
            if not isinstance(message, InboundRequest):
                continue
            body = message.body
            if isinstance(body, FetchRequest):
                reply: VoteResponse | FetchResponse = FetchResponse(
                    high_watermark=body.fetch_offset, records=records
                )
            else:
                reply = VoteResponse(vote_granted=True)
            respond(OutboundResponse(message.correlation_id, message.source, reply))

    threading.Thread(target=answer, name="bench-server-driver", daemon=True).start()
    if ready is not None:
        assert channel.listen_address is not None
        ready.send(channel.listen_address.port)
    return channel


def serve_in_child(
    payload: int, tls: TlsConfig | None, conn: multiprocessing.connection.Connection
) -> None:
    stop = threading.Event()
    channel = serve(payload, tls, stop, conn)
    conn.recv()  # anything: stop
    stop.set()
    channel.close()


def round_trips(
    channel: TrioNetworkChannel, queue: BlockingMessageQueue, count: int
) -> list[float]:
    body = VoteRequest(replica_epoch=1, replica_id=1, last_offset_epoch=0, last_offset=0)
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        channel.send(OutboundRequest(channel.new_correlation_id(), 2, body, 0))
        message = queue.poll(5_000)
        assert isinstance(message, InboundResponse) and message.body.error_code == 0, message
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


def pipelined(
    channel: TrioNetworkChannel, queue: BlockingMessageQueue, total: int, window: int
) -> float:
    sent = answered = 0
    start = time.perf_counter()
    while answered < total:
        while sent < total and sent - answered < window:
            body = FetchRequest(
                replica_id=1,
                current_leader_epoch=1,
                fetch_offset=sent,
                last_fetched_epoch=0,
                max_wait_ms=0,
            )
            channel.send(OutboundRequest(channel.new_correlation_id(), 2, body, 0))
            sent += 1
        message = queue.poll(5_000)
        assert isinstance(message, InboundResponse) and message.body.error_code == 0, message
        answered += 1
    return total / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round-trips", type=int, default=5_000)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=1_000)
    parser.add_argument("--payload", type=int, default=100, help="bytes per Fetch response")
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--same-process", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        server_tls, client_tls = make_tls(Path(tmp)) if args.tls else (None, None)
        stop = threading.Event()
        child = parent_conn = server = None
        if args.same_process:
            server = serve(args.payload, server_tls, stop)
            assert server.listen_address is not None
            port = server.listen_address.port
        else:
            context = multiprocessing.get_context("spawn")
            parent_conn, child_conn = context.Pipe()
            child = context.Process(
                target=serve_in_child, args=(args.payload, server_tls, child_conn)
            )
            child.start()
            port = parent_conn.recv()
        queue = BlockingMessageQueue()
        client = TrioNetworkChannel(
            node_id=1,
            cluster_id="bench",
            listen=None,
            peers={2: Endpoint(HOST, port)},
            queue=queue,
            clock=ManualClock(),
            tls=client_tls,
            request_timeout_ms=30_000,
            thread_name="kraft-1-net",
        )
        client.start()
        try:
            round_trips(client, queue, 200)  # connect and warm up
            samples = sorted(round_trips(client, queue, args.round_trips))
            rate = pipelined(client, queue, args.requests, args.window)
        finally:
            client.close()
            stop.set()
            if server is not None:
                server.close()
            if child is not None and parent_conn is not None:
                parent_conn.send("stop")
                child.join(10)

    result = {
        "tls": args.tls,
        "same_process": args.same_process,
        "round_trip_us_p50": round(statistics.median(samples)),
        "round_trip_us_p99": round(samples[int(len(samples) * 0.99) - 1]),
        "pipelined_requests_per_s": round(rate),
        "pipelined_payload_mb_per_s": round(rate * args.payload / 1e6, 1),
        "window": args.window,
        "payload_bytes": args.payload,
    }
    if args.json:
        print(json.dumps(result))
        return
    where = "one process" if args.same_process else "two processes"
    print(f"loopback, {where}{', TLS' if args.tls else ''}:")
    print(
        f"  round trip (Vote, one at a time): p50 {result['round_trip_us_p50']} us, "
        f"p99 {result['round_trip_us_p99']} us"
    )
    print(
        f"  pipelined Fetch ({args.window} outstanding, {args.payload}-byte answers): "
        f"{result['pipelined_requests_per_s']:,} requests/s, "
        f"{result['pipelined_payload_mb_per_s']} MB/s of payload"
    )


if __name__ == "__main__":
    main()
