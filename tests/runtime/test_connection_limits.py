"""The listener's limits (``kraft.runtime.inbound``, docs/transport.md "Limits") on loopback.

Each test runs the real :class:`InboundServer` and real TCP clients in one ``trio.run`` with
a :class:`trio.testing.MockClock` that jumps ahead whenever every task is blocked: an idle
timeout of ten minutes passes at once, nothing waits on the wall clock, and the time a
connection is closed at is exact. Clients from 127.0.0.2 and 127.0.0.3 are other hosts (all of
127/8 is loopback on Linux).
"""

from __future__ import annotations

import itertools
import logging
import resource
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import prometheus_client
import pytest
import trio
import trio.testing

from kraft.config import ConfigError, Endpoint
from kraft.metrics import PrometheusExporter, RaftMetrics
from kraft.protocol.envelope import InboundRequest
from kraft.protocol.frame import DEFAULT_MAX_FRAME_SIZE, RequestHeader, encode_request
from kraft.protocol.messages import DescribeQuorumRequest, FetchRequest
from kraft.runtime.config import load_node_config
from kraft.runtime.inbound import InboundServer
from kraft.runtime.limits import ConnectionLimits, ConnectionStats, default_max_connections
from kraft.runtime.queue import BlockingMessageQueue
from kraft.runtime.transport import TrioNetworkChannel
from kraft.testing import ManualClock

KIB = 1024
REQUEST_TIMEOUT_S = 5.0
OTHER_HOST = "127.0.0.2"
THIRD_HOST = "127.0.0.3"


def request(correlation_id: int = 1, padding: int = 0) -> bytes:
    body = FetchRequest(
        replica_id=2, current_leader_epoch=1, fetch_offset=0, last_fetched_epoch=0, max_wait_ms=0
    )
    header = RequestHeader.for_body(body, correlation_id, cluster_id="c" * padding or None)
    return encode_request(header, body)


class Harness:
    """A server on 127.0.0.1 and what it received."""

    def __init__(self, server: InboundServer, queue: BlockingMessageQueue, port: int) -> None:
        self.server = server
        self.queue = queue
        self.port = port

    @property
    def stats(self) -> ConnectionStats:
        return self.server.stats

    async def connect(self, host: str = "127.0.0.1") -> trio.SocketStream:
        return await trio.open_tcp_stream("127.0.0.1", self.port, local_address=host)

    def received(self) -> int:
        """Requests the server has put on the queue since the last call."""
        count = 0
        while isinstance(self.queue.poll(0), InboundRequest):
            count += 1
        return count


async def settle() -> None:
    """Let every task run until all are blocked (virtual time: the clock jumps 1 ms)."""
    await trio.sleep(0.001)


async def closed_by_server(stream: trio.SocketStream) -> bool:
    """Wait for the server to close ``stream`` (the clock jumps to its deadline); ``False`` if
    the server sent bytes instead."""
    try:
        return await stream.receive_some(1024) == b""
    except trio.BrokenResourceError:
        return True


def run(
    test: Callable[[Harness], Awaitable[None]],
    *,
    limits: ConnectionLimits,
    voter_hosts: frozenset[str] = frozenset(),
) -> None:
    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        queue = BlockingMessageQueue()
        server = InboundServer(
            address=Endpoint("127.0.0.1", port),
            queue=queue,
            clock=ManualClock(),
            ids=itertools.count(1),
            unanswered={},
            max_frame_size=DEFAULT_MAX_FRAME_SIZE,
            write_limit=64 * 1024 * KIB,
            request_timeout_s=REQUEST_TIMEOUT_S,
            tls_context=None,
            peer_id_of=None,
            limits=limits,
            max_connections=limits.max_connections or 1000,
            voter_hosts=voter_hosts,
            stats=ConnectionStats(),
        )
        # Virtual time: a limit that never acts fails the test at once instead of hanging it.
        with trio.fail_after(3600):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server.accept_loop, listeners[0], nursery)
                await test(Harness(server, queue, port))
                nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# -- idle and slow connections -------------------------------------------------------------------


def test_a_silent_connection_is_closed_after_connections_max_idle_ms() -> None:
    async def test(h: Harness) -> None:
        opened_at = trio.current_time()
        silent = await h.connect()  # never sends a byte
        stream = await h.connect()
        await trio.sleep(100.0)
        await stream.send_all(request())
        await settle()
        assert h.received() == 1
        sent_at = trio.current_time()
        assert await closed_by_server(silent)
        assert trio.current_time() - opened_at == pytest.approx(600.0, abs=0.01)
        assert await closed_by_server(stream)
        assert trio.current_time() - sent_at == pytest.approx(600.0, abs=0.01)
        assert h.stats.closed_idle == 2
        assert h.stats.closed_slow_request == 0
        await settle()
        assert not h.server.connections

    run(test, limits=ConnectionLimits())  # Kafka's default: 600000 ms


def test_a_slowloris_connection_is_closed_within_a_request_timeout() -> None:
    """One byte a second never makes the connection idle, but its request never completes."""

    async def test(h: Harness) -> None:
        stream = await h.connect()
        started = trio.current_time()
        data = request(padding=100)
        async with trio.open_nursery() as nursery:

            async def drip() -> None:
                for i in range(len(data)):
                    try:
                        await stream.send_all(data[i : i + 1])
                    except trio.BrokenResourceError:
                        return
                    await trio.sleep(1.0)

            nursery.start_soon(drip)
            assert await closed_by_server(stream)
            closed_at = trio.current_time()
            nursery.cancel_scope.cancel()
        assert closed_at - started == pytest.approx(REQUEST_TIMEOUT_S, abs=0.01)
        assert h.stats.closed_slow_request == 1
        assert h.stats.closed_idle == 0
        assert h.received() == 0
        assert h.stats.partial_request_bytes == 0

    run(test, limits=ConnectionLimits())


def test_a_busy_connection_whose_reads_end_inside_frames_is_never_closed() -> None:
    """A voter's pipelined requests often leave a partial frame at the end of a read: the
    request deadline runs from the last completed frame, not from the first partial one."""

    async def test(h: Harness) -> None:
        stream = await h.connect()
        stream_bytes = b"".join(request(i) for i in range(1, 40))
        piece = len(stream_bytes) // 30 + 1  # each write ends inside a frame
        for start in range(0, len(stream_bytes), piece):
            await stream.send_all(stream_bytes[start : start + piece])
            await trio.sleep(1.0)  # 30 s in all, far past the request timeout
        await settle()
        assert h.received() == 39
        assert h.stats.closed_slow_request == 0
        assert len(h.server.connections) == 1

    run(test, limits=ConnectionLimits())


# -- how many connections ------------------------------------------------------------------------


def test_connections_beyond_max_connections_are_refused_until_one_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def test(h: Harness) -> None:
        kept = [await h.connect() for _ in range(3)]
        extra = [await h.connect() for _ in range(3)]
        for stream in extra:
            assert await closed_by_server(stream)
        assert h.stats.refused_max_connections == 3
        for i, stream in enumerate(kept):
            await stream.send_all(request(i))
        await settle()
        assert h.received() == 3  # the connections within the limit are served
        await kept[0].aclose()
        await settle()
        again = await h.connect()
        await again.send_all(request())
        await settle()
        assert h.received() == 1
        assert h.stats.refused_max_connections == 3

    with caplog.at_level(logging.WARNING, logger="kraft.runtime.transport"):
        run(test, limits=ConnectionLimits(max_connections=3))
    refusals = [r for r in caplog.records if "refusing a connection" in r.getMessage()]
    assert len(refusals) == 1  # three refusals, one line: rate-limited
    assert "max_connections (3)" in refusals[0].getMessage()


def test_max_connections_per_ip_counts_each_address_apart() -> None:
    async def test(h: Harness) -> None:
        first = [await h.connect(OTHER_HOST) for _ in range(2)]
        refused = await h.connect(OTHER_HOST)
        other = await h.connect(THIRD_HOST)
        assert await closed_by_server(refused)
        assert h.stats.refused_per_ip == 1
        for stream in [*first, other]:
            await stream.send_all(request())
        await settle()
        assert h.received() == 3

    run(test, limits=ConnectionLimits(max_connections_per_ip=2))


def test_a_voters_address_gets_reserved_connections_past_the_limit() -> None:
    """Strangers hold every connection max_connections allows: a voter's host still gets its
    reserved ones (two per voter), and no more."""

    async def test(h: Harness) -> None:
        strangers = [await h.connect(OTHER_HOST) for _ in range(2)]
        assert await closed_by_server(await h.connect(OTHER_HOST))
        voters = [await h.connect("127.0.0.1") for _ in range(2)]
        assert await closed_by_server(await h.connect("127.0.0.1"))
        assert h.stats.refused_max_connections == 2
        for stream in [*strangers, *voters]:
            await stream.send_all(request())
        await settle()
        assert h.received() == 4
        # A reserved connection that closes frees its slot for the voter's host only.
        await voters[0].aclose()
        await settle()
        assert await closed_by_server(await h.connect(OTHER_HOST))
        replacement = await h.connect("127.0.0.1")
        await replacement.send_all(request())
        await settle()
        assert h.received() == 1

    run(test, limits=ConnectionLimits(max_connections=2), voter_hosts=frozenset({"127.0.0.1"}))


def test_a_voter_learned_later_gets_the_reserved_connections() -> None:
    """KIP-853: a host that becomes a voter's after the start gets the reserved connections;
    one that stops being a voter's does not get them any more."""

    async def test(h: Harness) -> None:
        strangers = [await h.connect(OTHER_HOST) for _ in range(2)]
        assert await closed_by_server(await h.connect("127.0.0.1"))  # not a voter's yet
        h.server.set_voter_hosts(frozenset({"127.0.0.1"}))
        voter = await h.connect("127.0.0.1")
        await voter.send_all(request())
        await settle()
        assert h.received() == 1
        h.server.set_voter_hosts(frozenset())
        assert await closed_by_server(await h.connect("127.0.0.1"))
        assert len(strangers) == 2

    run(test, limits=ConnectionLimits(max_connections=2))


# -- bytes of partial requests -------------------------------------------------------------------


def test_partial_requests_past_queued_max_request_bytes_close_their_connection() -> None:
    """Two peers send most of a 4 MiB request with a budget of 1 MiB: the one that cannot get
    its share is closed; a third peer's small requests are still served; closing gives back
    every byte."""

    async def test(h: Harness) -> None:
        big = request(padding=4 * 1024 * KIB)
        first = await h.connect(OTHER_HOST)
        second = await h.connect(THIRD_HOST)
        small = await h.connect("127.0.0.1")
        await first.send_all(big[: 700 * KIB])
        await settle()
        await second.send_all(big[: 700 * KIB])
        assert await closed_by_server(second)
        assert h.stats.closed_request_bytes == 1
        assert h.stats.partial_request_bytes == 700 * KIB
        assert h.server.budget.in_use <= 1024 * KIB
        await small.send_all(b"".join(request(i) for i in range(50)))
        await settle()
        assert h.received() == 50
        await first.aclose()
        await settle()
        assert h.stats.partial_request_bytes == 0
        assert h.server.budget.in_use == 0

    run(test, limits=ConnectionLimits(queued_max_request_bytes=1024 * KIB))


def test_describe_quorum_from_an_anonymous_tool_is_served_within_the_limits() -> None:
    """A one-off request (``kraft quorum describe``) is an ordinary connection."""

    async def test(h: Harness) -> None:
        stream = await h.connect()
        body = DescribeQuorumRequest()
        await stream.send_all(encode_request(RequestHeader.for_body(body, 1), body))
        await settle()
        assert h.received() == 1

    run(test, limits=ConnectionLimits(max_connections=1, queued_max_request_bytes=0))


# -- configuration and metrics -------------------------------------------------------------------

NODE_FILE = 'node_id = 1\ndata_dir = "d"\nvoters = "1@127.0.0.1:9091"\n'


def test_the_limits_are_top_level_keys_with_kafkas_defaults(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(NODE_FILE)
    defaults = load_node_config(path).limits
    assert defaults == ConnectionLimits()
    assert defaults.max_connections is None  # derived from RLIMIT_NOFILE at start
    assert defaults.max_connections_per_ip == 2**31 - 1  # Kafka's Int.MaxValue
    assert defaults.connections_max_idle_ms == 600_000
    assert defaults.queued_max_request_bytes == 32 * 1024 * KIB
    path.write_text(
        NODE_FILE + "max_connections = 100\nmax_connections_per_ip = 5\n"
        "connections_max_idle_ms = 30000\nqueued_max_request_bytes = 1048576\n"
    )
    assert load_node_config(path).limits == ConnectionLimits(100, 5, 30_000, 1024 * KIB)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("max_connections = 0", "max_connections must be at least 1"),
        ("max_connections_per_ip = 0", "max_connections_per_ip must be at least 1"),
        ("connections_max_idle_ms = 0", "connections_max_idle_ms must be positive"),
        ("queued_max_request_bytes = -1", "kraft has no unbounded setting"),
        ('max_connections = "many"', "max_connections: expected int"),
    ],
)
def test_a_bad_limit_names_its_key(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "node.toml"
    path.write_text(NODE_FILE + line + "\n")
    with pytest.raises(ConfigError, match=message):
        load_node_config(path)


def test_max_connections_defaults_to_half_the_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))
    assert default_max_connections() == 512
    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, 256))
    assert default_max_connections() == 128


def test_the_counters_are_metrics_and_prometheus_counters() -> None:
    class Transport:
        def transport_metrics(self) -> dict[str, int]:
            return {"connections-refused-max-connections-total": 3, "partial-request-bytes": 7}

    metrics = RaftMetrics(ManualClock())
    metrics.bind_transport(Transport())
    values = metrics.snapshot()
    assert values["connections-refused-max-connections-total"] == 3
    assert values["partial-request-bytes"] == 7
    registry = prometheus_client.CollectorRegistry()
    registry.register(PrometheusExporter(metrics, node_id=1))
    text = prometheus_client.generate_latest(registry).decode()
    assert 'kraft_raft_connections_refused_max_connections_total{node_id="1"} 3.0' in text
    assert "# TYPE kraft_raft_connections_refused_max_connections_total counter" in text
    assert 'kraft_raft_partial_request_bytes{node_id="1"} 7.0' in text


def test_max_connections_default_without_a_descriptor_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    infinity = resource.RLIM_INFINITY
    monkeypatch.setattr(resource, "getrlimit", lambda _: (infinity, infinity))
    assert default_max_connections() == 65_536


def test_the_channel_reserves_connections_for_its_voters_not_its_bootstrap_servers() -> None:
    """Through the real channel (its own thread): the voters come from ``peers`` (ids >= 0),
    a bootstrap server (a negative id) is no voter; the refusal shows in its metrics."""
    queue = BlockingMessageQueue()
    channel = TrioNetworkChannel(
        node_id=1,
        cluster_id=None,
        listen=Endpoint("127.0.0.1", 0),
        peers={2: Endpoint("127.0.0.1", 9), -1: Endpoint(THIRD_HOST, 9)},
        queue=queue,
        clock=ManualClock(),
        limits=ConnectionLimits(max_connections=1),
    )
    channel.start()
    opened: list[socket.socket] = []
    try:
        address = channel.listen_address
        assert address is not None

        def connect(host: str) -> socket.socket:
            sock = socket.create_connection((address.host, address.port), 5, (host, 0))
            opened.append(sock)
            return sock

        connect(OTHER_HOST).sendall(request())
        assert isinstance(queue.poll(5_000), InboundRequest)  # within max_connections
        refused = connect(THIRD_HOST)  # a bootstrap server's address: no reserved slot
        assert refused.recv(1) == b""
        connect("127.0.0.1").sendall(request())  # a voter's address: a reserved slot
        assert isinstance(queue.poll(5_000), InboundRequest)
        metrics = channel.transport_metrics()
        assert metrics["connections-refused-max-connections-total"] == 1
        assert metrics["inbound-connections"] == 2
    finally:
        for sock in opened:
            sock.close()
        channel.close()
