"""The trio TCP transport (``kraft.runtime.transport``) over real sockets on 127.0.0.1.

Every test is bounded: each wait is a ``queue.poll`` or a socket read with a timeout, and every
channel is closed (its thread joined) at teardown. Ports come from the OS.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trustme

from kraft.common.uuids import ZERO_UUID
from kraft.config import Endpoint
from kraft.errors import TransportError
from kraft.protocol.envelope import (
    InboundRequest,
    InboundResponse,
    OutboundRequest,
    OutboundResponse,
)
from kraft.protocol.errors import Errors
from kraft.protocol.frame import (
    RequestHeader,
    ResponseHeader,
    decode_response,
    encode_request,
    encode_response,
)
from kraft.protocol.messages import (
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    FetchRequest,
    FetchResponse,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.channel import InboundMessage
from kraft.runtime.queue import BlockingMessageQueue
from kraft.runtime.request_once import request_once
from kraft.runtime.tls import TlsConfig
from kraft.runtime.transport import TrioNetworkChannel
from kraft.testing import ManualClock

CLUSTER_ID = "test-cluster"
LOCALHOST = "127.0.0.1"
ANY_PORT = Endpoint(LOCALHOST, 0)
WAIT_MS = 5_000  # the longest any single wait in these tests may take


# ---------------------------------------------------------------------------------------------
# Helpers


def vote(epoch: int = 1, replica_id: int = 1) -> VoteRequest:
    return VoteRequest(
        replica_epoch=epoch, replica_id=replica_id, last_offset_epoch=0, last_offset=0
    )


def fetch(offset: int = 0) -> FetchRequest:
    return FetchRequest(
        replica_id=2,
        current_leader_epoch=1,
        fetch_offset=offset,
        last_fetched_epoch=0,
        max_wait_ms=0,
    )


def answer(request: InboundRequest) -> Response:
    """What the test "drivers" answer: a response that echoes something of the request."""
    body = request.body
    if isinstance(body, VoteRequest):
        return VoteResponse(leader_epoch=body.replica_epoch, vote_granted=True)
    if isinstance(body, FetchRequest):
        return FetchResponse(high_watermark=body.fetch_offset, records=b"r" * 100)
    if isinstance(body, DescribeQuorumRequest):
        return DescribeQuorumResponse(leader_id=7, leader_epoch=3, high_watermark=42)
    raise AssertionError(f"unexpected {body!r}")


def poll(queue: BlockingMessageQueue, timeout_ms: int = WAIT_MS) -> InboundMessage:
    message = queue.poll(timeout_ms)
    assert message is not None, f"nothing arrived within {timeout_ms} ms"
    return message


def poll_response(queue: BlockingMessageQueue, timeout_ms: int = WAIT_MS) -> InboundResponse:
    message = poll(queue, timeout_ms)
    assert isinstance(message, InboundResponse)
    return message


def poll_request(queue: BlockingMessageQueue, timeout_ms: int = WAIT_MS) -> InboundRequest:
    message = poll(queue, timeout_ms)
    assert isinstance(message, InboundRequest)
    return message


def send(channel: TrioNetworkChannel, destination: int, body: Request) -> int:
    correlation_id = channel.new_correlation_id()
    channel.send(OutboundRequest(correlation_id, destination, body, created_ms=0))
    return correlation_id


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        port: int = sock.getsockname()[1]
        return port


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def channel_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("kraft-test-")]


class Node:
    """A channel and its queue, as a test's stand-in for a replica."""

    def __init__(self, channel: TrioNetworkChannel, queue: BlockingMessageQueue) -> None:
        self.channel = channel
        self.queue = queue

    @property
    def address(self) -> Endpoint:
        assert self.channel.listen_address is not None
        return self.channel.listen_address

    def respond(self, request: InboundRequest, body: Response | None = None) -> None:
        body = answer(request) if body is None else body
        self.channel.respond(OutboundResponse(request.correlation_id, request.source, body))


MakeNode = Callable[..., Node]


@pytest.fixture
def make_node() -> Iterator[MakeNode]:
    """Builds started channels (listening on a free port unless ``listen=None``) and closes
    them all at the end of the test."""
    made: list[TrioNetworkChannel] = []

    def make(
        node_id: int | None = 1,
        peers: dict[int, Endpoint] | None = None,
        *,
        listen: Endpoint | None = ANY_PORT,
        start: bool = True,
        **kwargs: object,
    ) -> Node:
        queue = BlockingMessageQueue()
        channel = TrioNetworkChannel(
            node_id=node_id,
            cluster_id=CLUSTER_ID,
            listen=listen,
            peers=peers or {},
            queue=queue,
            clock=ManualClock(start_ms=1_000),
            thread_name=f"kraft-test-{node_id}-{len(made)}",
            **kwargs,  # type: ignore[arg-type]
        )
        made.append(channel)
        if start:
            channel.start()
        return Node(channel, queue)

    yield make
    for channel in made:
        channel.close()
    assert not channel_threads()


class Responder:
    """A tiny driver thread: answers every request that reaches ``node`` with :func:`answer`."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-responder", daemon=True)
        self.requests: list[InboundRequest] = []

    def __enter__(self) -> Responder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._node.queue.wakeup()
        self._thread.join(WAIT_MS / 1000)
        assert not self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self._node.queue.poll(100)
            if isinstance(message, InboundRequest):
                self.requests.append(message)
                self._node.respond(message)


class RawClient:
    """A plain socket to a listener, for bytes a well-behaved channel would never send."""

    def __init__(self, address: Endpoint | None, sock: socket.socket | None = None) -> None:
        if sock is None:
            assert address is not None
            sock = socket.create_connection((address.host, address.port), timeout=WAIT_MS / 1000)
        self.sock = sock

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send_request(self, body: Request, correlation_id: int) -> None:
        header = RequestHeader.for_body(body, correlation_id, cluster_id=CLUSTER_ID)
        self.sock.sendall(encode_request(header, body))

    def read_exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "the connection closed"
            data += chunk
        return data

    def read_response(self) -> tuple[int, Response]:
        prefix = self.read_exactly(4)
        frame = decode_response(prefix + self.read_exactly(int.from_bytes(prefix, "big")))
        return frame.header.correlation_id, frame.body

    def assert_closed_by_peer(self) -> None:
        """The other end closes the connection (reads end with EOF or a reset)."""
        try:
            while self.sock.recv(65536):
                pass
        except ConnectionResetError:
            pass


# ---------------------------------------------------------------------------------------------
# Requests and responses


def test_vote_and_fetch_both_ways(make_node: MakeNode) -> None:
    directory = uuid.uuid4()
    a = make_node(1, directory_id=directory)
    b = make_node(2, {1: a.address})
    a.channel.update_peer(2, b.address)

    vote_id = send(a.channel, 2, vote(epoch=5))
    request = poll_request(b.queue)
    assert request.body == vote(epoch=5)
    assert (request.source, request.source_directory_id, request.cluster_id) == (
        1,
        directory,
        CLUSTER_ID,
    )
    assert request.api_version == VoteRequest.MAX_VERSION
    assert request.received_ms == 1_000
    b.respond(request)
    response = poll_response(a.queue)
    assert (response.correlation_id, response.source) == (vote_id, 2)
    assert response.body == VoteResponse(leader_epoch=5, vote_granted=True)

    fetch_id = send(b.channel, 1, fetch(offset=17))
    request = poll_request(a.queue)
    assert (request.source, request.source_directory_id) == (2, ZERO_UUID)
    a.respond(request)
    response = poll_response(b.queue)
    assert (response.correlation_id, response.source) == (fetch_id, 1)
    assert response.body == FetchResponse(high_watermark=17, records=b"r" * 100)
    assert a.channel.connected_peer_ids == frozenset({2})
    assert b.channel.connected_peer_ids == frozenset({1})


def test_pipelined_responses_match_their_correlation_ids(make_node: MakeNode) -> None:
    b = make_node(2)
    a = make_node(1, {2: b.address})
    sent = {send(a.channel, 2, vote(epoch=i) if i % 2 else fetch(offset=i)): i for i in range(50)}
    requests = [poll_request(b.queue) for _ in range(50)]
    for request in reversed(requests):  # answered out of order
        b.respond(request)
    for _ in range(50):
        response = poll_response(a.queue)
        i = sent.pop(response.correlation_id)
        if i % 2:
            assert response.body == VoteResponse(leader_epoch=i, vote_granted=True)
        else:
            assert response.body == FetchResponse(high_watermark=i, records=b"r" * 100)
    assert b.queue.is_empty()


def test_inbound_correlation_ids_are_unique_per_channel(make_node: MakeNode) -> None:
    b = make_node(2)
    with RawClient(b.address) as first, RawClient(b.address) as second:
        first.send_request(vote(epoch=1), correlation_id=7)
        one = poll_request(b.queue)
        second.send_request(vote(epoch=2), correlation_id=7)  # the same id, another peer
        two = poll_request(b.queue)
        assert one.correlation_id != two.correlation_id
        assert one.source == two.source == -1
        b.respond(two)
        b.respond(one)
        for client, epoch in ((first, 1), (second, 2)):
            correlation_id, body = client.read_response()
            assert correlation_id == 7
            assert body == VoteResponse(leader_epoch=epoch, vote_granted=True)


def test_unknown_destination_is_answered_broker_not_available(make_node: MakeNode) -> None:
    a = make_node(1, listen=None)
    correlation_id = send(a.channel, 99, fetch())
    response = poll_response(a.queue)
    assert (response.correlation_id, response.source) == (correlation_id, 99)
    assert response.body == FetchResponse(error_code=Errors.BROKER_NOT_AVAILABLE)


def test_peer_down_then_up_reconnects(make_node: MakeNode) -> None:
    port = free_port()
    a = make_node(
        1,
        {2: Endpoint(LOCALHOST, port)},
        listen=None,
        reconnect_backoff_ms=0,
        reconnect_backoff_max_ms=0,
    )
    correlation_id = send(a.channel, 2, vote())
    response = poll_response(a.queue)
    assert response.correlation_id == correlation_id
    assert response.body == VoteResponse(error_code=Errors.BROKER_NOT_AVAILABLE)
    assert a.channel.connected_peer_ids == frozenset()

    b = make_node(2, listen=Endpoint(LOCALHOST, port))
    with Responder(b):
        correlation_id = send(a.channel, 2, vote(epoch=3))  # no backoff: connects at once
        response = poll_response(a.queue)
    assert response.correlation_id == correlation_id
    assert response.body == VoteResponse(leader_epoch=3, vote_granted=True)
    assert a.channel.connected_peer_ids == frozenset({2})


def test_backing_off_peer_fails_fast(make_node: MakeNode) -> None:
    port = free_port()
    a = make_node(
        1,
        {2: Endpoint(LOCALHOST, port)},
        listen=None,
        reconnect_backoff_ms=60_000,
        reconnect_backoff_max_ms=60_000,
    )
    send(a.channel, 2, vote())
    assert poll_response(a.queue).body.error_code == Errors.BROKER_NOT_AVAILABLE
    b = make_node(2, listen=Endpoint(LOCALHOST, port))
    send(a.channel, 2, fetch())  # the peer is up, but the backoff has a minute to go
    assert poll_response(a.queue).body == FetchResponse(error_code=Errors.BROKER_NOT_AVAILABLE)
    assert b.channel.inbound_connection_count == 0
    assert b.queue.is_empty()


def test_reconnect_backoff_grows_to_its_cap_with_jitter(make_node: MakeNode) -> None:
    a = make_node(
        1, listen=None, start=False, reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000
    )
    delay = a.channel._backoff_delay_s  # the schedule itself: no sockets needed
    for failures, base in (
        (0, 0.05),
        (1, 0.05),
        (2, 0.1),
        (3, 0.2),
        (5, 0.8),
        (6, 1.0),
        (1000, 1.0),
    ):
        assert base * 0.8 <= delay(failures) <= base * 1.2


def test_peer_closing_the_connection_fails_requests_in_flight(make_node: MakeNode) -> None:
    with socket.create_server((LOCALHOST, 0)) as server:
        a = make_node(1, {2: Endpoint(LOCALHOST, server.getsockname()[1])}, listen=None)
        first = send(a.channel, 2, vote())
        second = send(a.channel, 2, fetch())
        server.settimeout(WAIT_MS / 1000)
        conn, _ = server.accept()
        conn.close()
        errors = {}
        for _ in range(2):
            response = poll_response(a.queue)
            errors[response.correlation_id] = response.body
        # The connection had opened: the peer may have read them.
        assert errors == {
            first: VoteResponse(error_code=Errors.NETWORK_EXCEPTION),
            second: FetchResponse(error_code=Errors.NETWORK_EXCEPTION),
        }


def test_request_timeout_closes_and_reopens_the_connection(make_node: MakeNode) -> None:
    b = make_node(2)
    a = make_node(
        1,
        {2: b.address},
        listen=None,
        request_timeout_ms=200,
        reconnect_backoff_ms=0,
        reconnect_backoff_max_ms=0,
    )
    first = send(a.channel, 2, vote(epoch=1))
    second = send(a.channel, 2, fetch())
    for _ in range(2):
        poll_request(b.queue)  # B's "driver" never answers
    answers = {}
    for _ in range(2):
        response = poll_response(a.queue)
        answers[response.correlation_id] = response.body
    # Kafka marks every request in flight on a connection closed for a timeout as timed out.
    assert answers == {
        first: VoteResponse(error_code=Errors.REQUEST_TIMED_OUT),
        second: FetchResponse(error_code=Errors.REQUEST_TIMED_OUT),
    }
    assert a.queue.poll(300) is None  # one answer per request, never two

    # The next request opens a new connection and is answered.
    third = send(a.channel, 2, vote(epoch=9))
    request = poll_request(b.queue)
    b.respond(request)
    response = poll_response(a.queue)
    assert response.correlation_id == third
    assert response.body == VoteResponse(leader_epoch=9, vote_granted=True)


def test_request_timeout_while_connecting(
    make_node: MakeNode, ca: trustme.CA, tmp_path: Path
) -> None:
    # The peer's kernel completes the TCP handshake (backlog), but no TLS answer ever comes.
    with socket.create_server((LOCALHOST, 0)) as silent:
        a = make_node(
            1,
            {2: Endpoint(LOCALHOST, silent.getsockname()[1])},
            listen=None,
            request_timeout_ms=200,
            tls=tls_files(ca, tmp_path, "a"),
        )
        correlation_id = send(a.channel, 2, vote())
        response = poll_response(a.queue)
    assert response.correlation_id == correlation_id
    assert response.body == VoteResponse(error_code=Errors.REQUEST_TIMED_OUT)


def test_large_frames_cross_in_many_reads(make_node: MakeNode) -> None:
    b = make_node(2)
    a = make_node(1, {2: b.address}, listen=None)
    records = bytes(range(256)) * (16 * 1024)  # 4 MiB
    for _ in range(2):
        send(a.channel, 2, fetch())
    for _ in range(2):
        b.respond(poll_request(b.queue), FetchResponse(records=records))
    for _ in range(2):
        assert poll_response(a.queue).body == FetchResponse(records=records)


def test_frames_above_the_maximum_are_not_sent(make_node: MakeNode) -> None:
    b = make_node(2, max_frame_size=256)
    a = make_node(1, {2: b.address}, listen=None, max_frame_size=256)
    too_big = FetchRequest(
        replica_id=1,
        current_leader_epoch=1,
        fetch_offset=0,
        last_fetched_epoch=0,
        max_wait_ms=0,
        topic_name="t" * 300,
    )
    correlation_id = send(a.channel, 2, too_big)
    response = poll_response(a.queue)  # answered here: nothing went out
    assert response.correlation_id == correlation_id
    assert response.body == FetchResponse(error_code=Errors.UNKNOWN_SERVER_ERROR)
    assert b.queue.is_empty()

    # A response too large to send is replaced by an error response of its type.
    correlation_id = send(a.channel, 2, fetch())
    b.respond(poll_request(b.queue), FetchResponse(records=b"x" * 1000))
    response = poll_response(a.queue)
    assert response.correlation_id == correlation_id
    assert response.body == FetchResponse(error_code=Errors.UNKNOWN_SERVER_ERROR)


def test_response_to_a_closed_connection_is_dropped(make_node: MakeNode) -> None:
    b = make_node(2)
    with RawClient(b.address) as client:
        client.send_request(vote(), correlation_id=1)
        request = poll_request(b.queue)
    # Close seen by B before the answer: wait for it through an unrelated round trip.
    a = make_node(1, {2: b.address}, listen=None)
    with Responder(b):
        b.respond(request)  # the connection is gone (or going): dropped without harm
        send(a.channel, 2, vote(epoch=4))
        assert poll_response(a.queue).body == VoteResponse(leader_epoch=4, vote_granted=True)
    b.respond(request)  # answering twice, or an id never seen: dropped as well
    b.channel.respond(OutboundResponse(123456, 1, VoteResponse()))


def test_send_after_close_is_dropped(make_node: MakeNode) -> None:
    a = make_node(1, {2: Endpoint(LOCALHOST, 1)})
    a.channel.close()
    a.channel.close()  # idempotent
    send(a.channel, 2, vote())
    a.channel.respond(OutboundResponse(1, 2, VoteResponse()))
    assert a.queue.poll(100) is None
    with pytest.raises(TransportError, match="closed"):
        a.channel.start()


def test_send_before_start_goes_out_at_start(make_node: MakeNode) -> None:
    b = make_node(2)
    a = make_node(1, {2: b.address}, listen=None, start=False)
    correlation_id = send(a.channel, 2, vote(epoch=6))
    a.channel.start()
    b.respond(poll_request(b.queue))
    response = poll_response(a.queue)
    assert response.correlation_id == correlation_id
    assert response.body == VoteResponse(leader_epoch=6, vote_granted=True)


def test_update_peer_moves_and_forgets_destinations(make_node: MakeNode) -> None:
    b = make_node(2)
    c = make_node(3)
    a = make_node(1, {2: b.address}, listen=None)
    with Responder(b), Responder(c) as c_driver:
        send(a.channel, 2, vote(epoch=1))
        assert poll_response(a.queue).body.error_code == Errors.NONE
        a.channel.update_peer(2, c.address)  # id 2 now lives where C listens
        send(a.channel, 2, vote(epoch=2))
        assert poll_response(a.queue).body == VoteResponse(leader_epoch=2, vote_granted=True)
        assert [r.body.replica_epoch for r in c_driver.requests] == [2]  # type: ignore[union-attr]
        a.channel.update_peer(2, None)
        send(a.channel, 2, vote(epoch=3))
        assert poll_response(a.queue).body.error_code == Errors.BROKER_NOT_AVAILABLE


def send_to(channel: TrioNetworkChannel, destination: int, body: Request, at: Endpoint) -> int:
    """Send ``body`` to ``destination`` where the core believes it listens (KIP-853)."""
    correlation_id = channel.new_correlation_id()
    channel.send(
        OutboundRequest(
            correlation_id, destination, body, created_ms=0, destination_address=(at.host, at.port)
        )
    )
    return correlation_id


def test_a_request_goes_to_its_destination_address(make_node: MakeNode) -> None:
    b = make_node(2)
    c = make_node(3)
    a = make_node(1, {}, listen=None)  # knows no peer: the voter set names them
    with Responder(b) as b_driver, Responder(c) as c_driver:
        send_to(a.channel, 2, vote(epoch=1), b.address)  # unknown destination: added
        assert poll_response(a.queue).body == VoteResponse(leader_epoch=1, vote_granted=True)
        send(a.channel, 2, vote(epoch=2))  # no address given: where it was last
        assert poll_response(a.queue).body == VoteResponse(leader_epoch=2, vote_granted=True)
        send_to(a.channel, 2, vote(epoch=3), c.address)  # id 2 moved: the connection follows
        assert poll_response(a.queue).body == VoteResponse(leader_epoch=3, vote_granted=True)
        assert [r.body.replica_epoch for r in b_driver.requests] == [1, 2]  # type: ignore[union-attr]
        assert [r.body.replica_epoch for r in c_driver.requests] == [3]  # type: ignore[union-attr]


def test_set_voters_adds_voters_and_forgets_removed_ones(make_node: MakeNode) -> None:
    b = make_node(2)
    c = make_node(3)
    a = make_node(1, {2: b.address, -1: c.address}, listen=None)  # -1: a bootstrap server
    with Responder(b), Responder(c):
        send(a.channel, 2, vote(epoch=1))
        assert poll_response(a.queue).body.error_code == Errors.NONE
        a.channel.set_voters({3: c.address})  # 2 removed, 3 added
        send(a.channel, 3, vote(epoch=2))
        assert poll_response(a.queue).body == VoteResponse(leader_epoch=2, vote_granted=True)
        send(a.channel, 2, vote(epoch=3))
        assert poll_response(a.queue).body.error_code == Errors.BROKER_NOT_AVAILABLE
        assert 2 not in a.channel.connected_peer_ids
        send(a.channel, -1, vote(epoch=4))  # bootstrap servers are kept
        assert poll_response(a.queue).body == VoteResponse(leader_epoch=4, vote_granted=True)


# ---------------------------------------------------------------------------------------------
# Bad input: the connection closes, the node keeps serving


def assert_still_serving(b: Node, make_node: MakeNode) -> None:
    a = make_node(1, {2: b.address}, listen=None)
    correlation_id = send(a.channel, 2, vote(epoch=8))
    request = poll_request(b.queue)
    assert request.body == vote(epoch=8)
    b.respond(request)
    response = poll_response(a.queue)
    assert response.correlation_id == correlation_id
    assert response.body == VoteResponse(leader_epoch=8, vote_granted=True)


@pytest.mark.parametrize(
    ("data", "logged"),
    [
        pytest.param(b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1", "malformed frame", id="garbage"),
        pytest.param((1 << 20).to_bytes(4, "big"), "above the maximum", id="oversized-length"),
        pytest.param(b"\x00\x00\x00\x00", "length 0", id="zero-length"),
    ],
)
def test_bad_bytes_close_the_connection(
    make_node: MakeNode, caplog: pytest.LogCaptureFixture, data: bytes, logged: str
) -> None:
    b = make_node(2, max_frame_size=1024)
    with (
        caplog.at_level(logging.ERROR, logger="kraft.runtime.transport"),
        RawClient(b.address) as client,
    ):
        client.sock.sendall(data)
        client.assert_closed_by_peer()
    assert logged in caplog.text
    assert b.queue.is_empty()
    assert_still_serving(b, make_node)


def test_truncated_frame_at_eof_closes_the_connection(
    make_node: MakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    b = make_node(2)
    header = RequestHeader.for_body(vote(), 1)
    frame = encode_request(header, vote())
    with (
        caplog.at_level(logging.ERROR, logger="kraft.runtime.transport"),
        RawClient(b.address) as client,
    ):
        client.sock.sendall(frame[:-3])
        client.sock.shutdown(socket.SHUT_WR)
        client.assert_closed_by_peer()
    assert "stream ended inside a frame" in caplog.text
    assert b.queue.is_empty()
    assert_still_serving(b, make_node)


def test_frames_before_bad_bytes_are_served(make_node: MakeNode) -> None:
    b = make_node(2)
    good = encode_request(RequestHeader.for_body(vote(epoch=3), 1), vote(epoch=3))
    with RawClient(b.address) as client:
        client.sock.sendall(good + b"\x00\x00\x00\x02\xc1\xc1")
        assert poll_request(b.queue).body == vote(epoch=3)
        client.assert_closed_by_peer()


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(lambda cid: b"\x00\x00\x00\x03\xc1\xc1\xc1", id="garbage"),
        pytest.param(
            lambda cid: encode_response(ResponseHeader(cid + 1000), VoteResponse()),
            id="unknown-correlation-id",
        ),
        pytest.param(
            lambda cid: encode_response(ResponseHeader(cid), FetchResponse()), id="wrong-api"
        ),
    ],
)
def test_bad_response_closes_the_connection_and_fails_the_request(
    make_node: MakeNode, caplog: pytest.LogCaptureFixture, reply: Callable[[int], bytes]
) -> None:
    with socket.create_server((LOCALHOST, 0)) as server:
        a = make_node(1, {2: Endpoint(LOCALHOST, server.getsockname()[1])}, listen=None)
        with caplog.at_level(logging.ERROR, logger="kraft.runtime.transport"):
            correlation_id = send(a.channel, 2, vote())
            server.settimeout(WAIT_MS / 1000)
            conn, _ = server.accept()
            with conn:
                conn.settimeout(WAIT_MS / 1000)
                header = conn.recv(4)
                assert len(header) == 4
                conn.sendall(reply(correlation_id))
                response = poll_response(a.queue)
        assert response.correlation_id == correlation_id
        assert response.body == VoteResponse(error_code=Errors.NETWORK_EXCEPTION)
        assert "closing connection to 2" in caplog.text


# ---------------------------------------------------------------------------------------------
# Start and close


def test_close_leaves_no_thread_and_no_fd(make_node: MakeNode) -> None:
    before = open_fds()
    b = make_node(2)
    a = make_node(1, {2: b.address, 3: Endpoint(LOCALHOST, free_port())})
    with Responder(b):
        for _ in range(3):
            send(a.channel, 2, fetch())
            assert poll_response(a.queue).body.error_code == Errors.NONE
        send(a.channel, 3, vote())  # a refused connection
        assert poll_response(a.queue).body.error_code == Errors.BROKER_NOT_AVAILABLE
    with RawClient(b.address) as client:  # an inbound connection left open by the peer
        client.send_request(vote(), 5)
        poll_request(b.queue)
        assert len(channel_threads()) == 2
        a.channel.close()
        b.channel.close()
        client.assert_closed_by_peer()
    assert not channel_threads()
    assert open_fds() == before


def test_start_fails_cleanly_when_the_port_is_taken(make_node: MakeNode) -> None:
    with socket.create_server((LOCALHOST, 0)) as taken:
        before = open_fds()
        node = make_node(1, listen=Endpoint(LOCALHOST, taken.getsockname()[1]), start=False)
        with pytest.raises(TransportError, match=r"cannot listen on 127\.0\.0\.1:"):
            node.channel.start()
        assert not channel_threads()
        assert open_fds() == before
        assert node.channel.listen_address is None


def test_listen_on_port_zero_reports_the_bound_port(make_node: MakeNode) -> None:
    node = make_node(1)
    assert node.address.host == LOCALHOST
    assert node.address.port > 0
    assert node.channel.is_running


# ---------------------------------------------------------------------------------------------
# request_once (for command-line tools)


def test_request_once_describe_quorum(make_node: MakeNode) -> None:
    b = make_node(2)
    with Responder(b) as driver:
        body = request_once(b.address, DescribeQuorumRequest(), cluster_id=CLUSTER_ID, timeout_s=5)
    assert body == DescribeQuorumResponse(leader_id=7, leader_epoch=3, high_watermark=42)
    (request,) = driver.requests
    assert (request.source, request.cluster_id) == (-1, CLUSTER_ID)


def test_request_once_connection_refused() -> None:
    address = Endpoint(LOCALHOST, free_port())
    with pytest.raises(TransportError, match=f"cannot connect to {address}"):
        request_once(address, DescribeQuorumRequest(), cluster_id=None, timeout_s=5)


def test_request_once_times_out() -> None:
    with socket.create_server((LOCALHOST, 0)) as server:  # accepts (backlog), never answers
        address = Endpoint(LOCALHOST, server.getsockname()[1])
        with pytest.raises(TransportError, match=f"{address}: no answer to .* within 0.2 s"):
            request_once(address, DescribeQuorumRequest(), cluster_id=None, timeout_s=0.2)


def test_request_once_connection_closed_without_answer() -> None:
    with socket.create_server((LOCALHOST, 0)) as server:
        address = Endpoint(LOCALHOST, server.getsockname()[1])

        server.settimeout(WAIT_MS / 1000)

        def read_request_then_close() -> None:
            conn = server.accept()[0]
            conn.settimeout(WAIT_MS / 1000)
            with RawClient(None, conn) as peer:
                peer.read_exactly(int.from_bytes(peer.read_exactly(4), "big"))

        closer = threading.Thread(target=read_request_then_close, daemon=True)
        closer.start()
        with pytest.raises(TransportError, match="closed the connection without answering"):
            request_once(address, DescribeQuorumRequest(), cluster_id=None, timeout_s=5)
        closer.join(WAIT_MS / 1000)


# ---------------------------------------------------------------------------------------------
# TLS


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def tls_files(ca: trustme.CA, directory: Path, name: str) -> TlsConfig:
    """Certificate and key for 127.0.0.1 signed by ``ca``, trusting ``ca``."""
    directory.mkdir(parents=True, exist_ok=True)
    cert = ca.issue_cert(LOCALHOST, "localhost")
    certfile, keyfile, cafile = (directory / f"{name}.{ext}" for ext in ("crt", "key", "ca"))
    cert.cert_chain_pems[0].write_to_path(str(certfile))
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(str(certfile), append=True)
    cert.private_key_pem.write_to_path(str(keyfile))
    ca.cert_pem.write_to_path(str(cafile))
    return TlsConfig(certfile=certfile, keyfile=keyfile, cafile=cafile)


def test_tls_exchange(make_node: MakeNode, ca: trustme.CA, tmp_path: Path) -> None:
    b = make_node(2, tls=tls_files(ca, tmp_path, "b"))
    a = make_node(1, {2: b.address}, tls=tls_files(ca, tmp_path, "a"))
    b.channel.update_peer(1, a.address)
    for sender, receiver, destination in ((a, b, 2), (b, a, 1)):
        correlation_id = send(sender.channel, destination, fetch(offset=5))
        receiver.respond(poll_request(receiver.queue))
        response = poll_response(sender.queue)
        assert response.correlation_id == correlation_id
        assert response.body == FetchResponse(high_watermark=5, records=b"r" * 100)


def test_tls_untrusted_client_is_refused(
    make_node: MakeNode, ca: trustme.CA, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    b = make_node(2, tls=tls_files(ca, tmp_path, "b"))
    # A stranger's certificate comes from another CA; it trusts B's CA, so only B can refuse.
    stranger_tls = tls_files(trustme.CA(), tmp_path / "stranger", "s")
    stranger_tls = TlsConfig(stranger_tls.certfile, stranger_tls.keyfile, cafile=tmp_path / "b.ca")
    stranger = make_node(3, {2: b.address}, listen=None, tls=stranger_tls)
    with caplog.at_level(logging.WARNING, logger="kraft.runtime.transport"):
        send(stranger.channel, 2, vote())
        response = poll_response(stranger.queue)
    # TLS 1.3: the client's handshake completes before the server checks its certificate, so
    # the refusal closes a connection that had opened (the request's fate unknown to it).
    assert response.body == VoteResponse(error_code=Errors.NETWORK_EXCEPTION)
    assert "TLS handshake failed" in caplog.text
    assert b.queue.is_empty()

    trusted = make_node(1, {2: b.address}, listen=None, tls=tls_files(ca, tmp_path, "a"))
    send(trusted.channel, 2, vote(epoch=2))
    b.respond(poll_request(b.queue))
    assert poll_response(trusted.queue).body == VoteResponse(leader_epoch=2, vote_granted=True)


def test_tls_client_refuses_an_untrusted_server(
    make_node: MakeNode, ca: trustme.CA, tmp_path: Path
) -> None:
    impostor = make_node(2, tls=tls_files(trustme.CA(), tmp_path / "impostor", "i"))
    a = make_node(1, {2: impostor.address}, listen=None, tls=tls_files(ca, tmp_path, "a"))
    send(a.channel, 2, vote())
    assert poll_response(a.queue).body == VoteResponse(error_code=Errors.BROKER_NOT_AVAILABLE)
    assert impostor.queue.is_empty()


def test_tls_plaintext_client_is_refused(
    make_node: MakeNode, ca: trustme.CA, tmp_path: Path
) -> None:
    b = make_node(2, tls=tls_files(ca, tmp_path, "b"), request_timeout_ms=500)
    with RawClient(b.address) as client:
        client.send_request(vote(), 1)
        client.assert_closed_by_peer()
    assert b.queue.is_empty()


def test_request_once_over_tls(make_node: MakeNode, ca: trustme.CA, tmp_path: Path) -> None:
    b = make_node(2, tls=tls_files(ca, tmp_path, "b"))
    client_tls = tls_files(ca, tmp_path, "cli")
    with Responder(b):
        body = request_once(
            b.address, DescribeQuorumRequest(), cluster_id=CLUSTER_ID, timeout_s=5, tls=client_tls
        )
    assert body == DescribeQuorumResponse(leader_id=7, leader_epoch=3, high_watermark=42)
    stranger = tls_files(trustme.CA(), tmp_path / "stranger", "s")
    with pytest.raises(TransportError, match=r"TLS handshake with .* failed"):
        request_once(b.address, DescribeQuorumRequest(), cluster_id=None, timeout_s=5, tls=stranger)


def test_unreadable_tls_files_fail_start(make_node: MakeNode, tmp_path: Path) -> None:
    before = open_fds()
    tls = TlsConfig(certfile=tmp_path / "missing.crt", keyfile=tmp_path / "missing.key")
    node = make_node(1, tls=tls, start=False)
    with pytest.raises(TransportError, match=r"cannot load the TLS certificate .*missing\.crt"):
        node.channel.start()
    assert not channel_threads()
    assert open_fds() == before
    bad_ca = TlsConfig(certfile=tmp_path / "x", keyfile=tmp_path / "x", cafile=tmp_path / "x")
    with pytest.raises(TransportError):
        bad_ca.client_context()


# ---------------------------------------------------------------------------------------------
# The fast path: the caller's thread writes to an established plain TCP connection


def test_a_request_written_directly_times_out_too(make_node: MakeNode) -> None:
    """A request sent on an established connection (the fast path, which does not wake the
    trio thread) is still answered REQUEST_TIMED_OUT when the peer never answers it."""
    b = make_node(2)
    a = make_node(1, {2: b.address}, listen=None, request_timeout_ms=200)
    send(a.channel, 2, vote(epoch=1))
    b.respond(poll_request(b.queue))
    poll_response(a.queue)
    assert a.channel.connected_peer_ids == {2}
    silent = send(a.channel, 2, fetch())
    poll_request(b.queue)  # B's "driver" never answers
    response = poll_response(a.queue)
    assert (response.correlation_id, response.body) == (
        silent,
        FetchResponse(error_code=Errors.REQUEST_TIMED_OUT),
    )


def test_responses_to_a_slow_reader_arrive_whole_and_in_order(make_node: MakeNode) -> None:
    """Responses bigger than the socket buffer, to a peer that does not read for a while: the
    first is partly written by the driver, the rest of it and everything after go through
    the trio writer, and the peer reads every response whole, in the order answered."""
    b = make_node(2)
    records = [bytes([i]) * (3 * 1024 * 1024) for i in range(4)]  # 3 MiB each
    with RawClient(b.address) as client:
        for correlation_id in range(4):
            client.send_request(fetch(correlation_id), correlation_id)
        requests = [poll_request(b.queue) for _ in range(4)]
        for request, data in zip(requests, records, strict=True):
            b.respond(request, FetchResponse(records=data))  # nobody is reading yet
        client.sock.settimeout(WAIT_MS / 1000)
        got = [client.read_response() for _ in range(4)]
    assert [correlation_id for correlation_id, _ in got] == [0, 1, 2, 3]
    assert [body for _, body in got] == [FetchResponse(records=data) for data in records]
