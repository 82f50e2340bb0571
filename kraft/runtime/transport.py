"""``TrioNetworkChannel``: the runtime's TCP transport (a Raft ``NetworkChannel``).

Theory of operation
    One ``trio.run`` in its own daemon thread (``kraft-<id>-net``) owns every connection. The
    driver thread (the Raft core) never waits on it. On the fast path ``send`` and ``respond``
    encode the frame and write it to the socket themselves: when the connection is established
    plain TCP and nothing is queued before the frame (see
    :class:`~kraft.runtime.connection.Connection`, which holds each connection's state and
    writer). Otherwise they put the envelope in an outbox under a lock and, when the outbox was
    empty, wake the trio thread with ``TrioToken.run_sync_soon``; a dispatcher task there takes
    everything queued at once. What comes in (requests, and responses to this node's requests)
    is handed to the core's :class:`~kraft.raft.channel.RaftMessageQueue` with ``queue.add``
    straight from the trio thread.

    Outbound, each destination id has at most one connection, opened on the first request to
    it and kept. Requests are pipelined on it, matched to responses by correlation id (the
    core's, from :meth:`TrioNetworkChannel.new_correlation_id`). As in Kafka's
    ``KafkaNetworkChannel`` over ``NetworkClient``, a request never goes unanswered: a
    destination with no address, a connection that cannot be opened, and a destination still
    backing off after such a failure all answer it locally with the request's response type
    carrying BROKER_NOT_AVAILABLE (the request never left); a connection that closes after it
    opened answers its requests in flight NETWORK_EXCEPTION (the peer may have read them: a
    forwarded write's outcome is unknown, kraft/raft/forwarding.py); a request unanswered after
    ``request_timeout_ms`` closes the connection (Kafka disconnects on a request timeout) and
    every request in flight on it is answered REQUEST_TIMED_OUT. Each request gets exactly one
    answer. After a failed connection attempt the peer backs off exponentially from
    ``reconnect_backoff_ms`` to ``reconnect_backoff_max_ms``, jittered by +-20 % (Kafka's
    ``reconnect.backoff.ms`` / ``reconnect.backoff.max.ms``); the backoff counts from the start
    of the last attempt and resets once a connection is established.

    Inbound, the listener (:class:`~kraft.runtime.inbound.InboundServer`) accepts connections
    within the limits of :class:`~kraft.runtime.limits.ConnectionLimits` (Kafka's
    ``max.connections``, ``max.connections.per.ip``, ``connections.max.idle.ms`` and
    ``queued.max.request.bytes``; docs/transport.md "Limits"); outbound connections, which
    this node opens to the voters, are not subject to them. Each request frame becomes an
    ``InboundRequest`` whose correlation id is
    replaced by a channel-unique one, remembered with the connection and the peer's own id, so
    that ``respond`` finds where the answer goes and under which id. Forgetting is what bounds
    this table: ``respond`` forgets its entry, and a closed connection forgets all of its own
    (a late response to it is dropped).

    Every connection has a writer task that takes all frames queued since its last write and
    sends them in one ``send_all``, and a reader that reads up to 256 KiB at a time into a
    sans-IO frame decoder; ``TCP_NODELAY`` is on (trio's default). A frame is msgpack-encoded
    once, by the thread that writes it (the driver on the fast path, else the trio thread).

Bad input
    Errors of one connection close that connection and nothing else: a declared length above
    ``max_frame_size`` (before its body is read), bytes that are not a frame, a stream that ends
    inside a frame, a response to no request in flight or of the wrong API, a failed TLS
    handshake, a peer that stops reading while more than ``max(4 x max_frame_size, 64 MiB)``
    waits for it. trio, ``OSError`` and ``ssl`` errors are caught at this boundary: none reaches
    the caller of ``send``/``respond`` or the driver thread. :class:`~kraft.errors.TransportError`
    is raised only by ``start`` (cannot bind, unreadable TLS files) and
    :func:`~kraft.runtime.request_once.request_once`.

The cluster id travels in every request header; checking it is the core's job.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
import socket
import ssl
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Final

import trio

from kraft.common.clock import Clock
from kraft.common.uuids import ZERO_UUID
from kraft.config import Endpoint
from kraft.errors import TransportError
from kraft.protocol.controller_frame import encode_controller_response
from kraft.protocol.controller_messages import ControllerResponse
from kraft.protocol.envelope import (
    InboundResponse,
    OutboundRequest,
    OutboundResponse,
)
from kraft.protocol.errors import Errors, FrameError
from kraft.protocol.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    RequestFrameDecoder,
    RequestHeader,
    ResponseFrameDecoder,
    ResponseHeader,
    encode_request,
    encode_response,
)
from kraft.protocol.messages import RESPONSE_TYPE_FOR, Request, Response
from kraft.raft.channel import RaftMessageQueue
from kraft.runtime.connection import (
    IO_ERRORS,
    READ_CHUNK_SIZE,
    InboundConnection,
    OutboundConnection,
    Peer,
    describe_error,
    failure_level,
    write_until_broken,
)
from kraft.runtime.inbound import ControllerRequestSink, InboundServer, UnansweredRequests
from kraft.runtime.limits import ConnectionLimits, ConnectionStats, default_max_connections
from kraft.runtime.tls import TlsConfig

__all__ = ["TrioNetworkChannel"]

logger = logging.getLogger(__name__)

#: Kafka's ExponentialBackoff jitter for reconnects.
_BACKOFF_JITTER: Final = 0.2
#: A connection whose peer leaves more than this many bytes unread is closed.
_MIN_WRITE_BUFFER_LIMIT: Final = 64 * 1024 * 1024
_LISTEN_BACKLOG: Final = 128


def _error_response(body: Request, error: Errors) -> Response:
    return RESPONSE_TYPE_FOR[type(body)](error_code=error)


class _UpdatePeer:
    """An outbox item: a destination's address changes (``None``: forget it)."""

    __slots__ = ("address", "peer_id")

    def __init__(self, peer_id: int, address: Endpoint | None) -> None:
        self.peer_id = peer_id
        self.address = address


class _SetVoters:
    """An outbox item: the voters are now these (id -> address), see ``set_voters``."""

    __slots__ = ("voters",)

    def __init__(self, voters: Mapping[int, Endpoint]) -> None:
        self.voters = dict(voters)


class _ControllerAnswer:
    """An outbox item: a controller response, encoded, to inbound request ``channel_id``."""

    __slots__ = ("channel_id", "data")

    def __init__(self, channel_id: int, data: bytes) -> None:
        self.channel_id = channel_id
        self.data = data


_OutboxItem = OutboundRequest | OutboundResponse | _UpdatePeer | _SetVoters | _ControllerAnswer


class TrioNetworkChannel:
    """The runtime's :class:`~kraft.raft.channel.NetworkChannel`: TCP (optionally TLS) with trio.

    ``peers`` maps destination ids (negative ids for bootstrap servers) to their addresses;
    ``listen`` is where to accept peers' connections (``None``: accept none; port 0: any free
    port, see :attr:`listen_address`), within ``limits``. Requests go out as replica
    ``node_id`` (``None``: -1, anonymous) of ``cluster_id`` with ``directory_id``. See the
    module docstring for the behaviour; ``start`` before use, ``close`` at the end.
    """

    def __init__(
        self,
        *,
        node_id: int | None,
        cluster_id: str | None,
        listen: Endpoint | None,
        peers: Mapping[int, Endpoint],
        queue: RaftMessageQueue,
        clock: Clock,
        request_timeout_ms: int = 2000,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        tls: TlsConfig | None = None,
        directory_id: uuid.UUID = ZERO_UUID,
        thread_name: str | None = None,
        limits: ConnectionLimits | None = None,
        controller_requests: ControllerRequestSink | None = None,
    ) -> None:
        if request_timeout_ms <= 0:
            raise ValueError(f"request_timeout_ms must be positive, got {request_timeout_ms}")
        if not 0 <= reconnect_backoff_ms <= reconnect_backoff_max_ms:
            raise ValueError(
                "need 0 <= reconnect_backoff_ms <= reconnect_backoff_max_ms, got "
                f"{reconnect_backoff_ms} and {reconnect_backoff_max_ms}"
            )
        RequestFrameDecoder(max_frame_size)  # raises ValueError for a size out of range
        self._node_id = node_id
        self._source_replica_id = -1 if node_id is None else node_id
        self._cluster_id = cluster_id
        self._directory_id = directory_id
        self._listen = listen
        self._queue = queue
        self._clock = clock
        self._request_timeout_s = request_timeout_ms / 1000
        self._max_frame_size = max_frame_size
        self._write_limit = max(4 * max_frame_size, _MIN_WRITE_BUFFER_LIMIT)
        self._backoff_s = reconnect_backoff_ms / 1000
        self._backoff_max_s = reconnect_backoff_max_ms / 1000
        self._tls = tls
        self._limits = limits or ConnectionLimits()
        self._controller_requests = controller_requests
        #: What the listener's limits did (see :meth:`transport_metrics`).
        self.stats = ConnectionStats()
        self._random = random.Random()
        node_name = "anonymous" if node_id is None else str(node_id)
        self._thread_name = thread_name or f"kraft-{node_name}-net"

        # Shared between threads: guarded by _lock.
        self._lock = threading.Lock()
        self._outbox: deque[_OutboxItem] = deque()
        self._wake_scheduled = False
        self._token: trio.lowlevel.TrioToken | None = None
        self._started = False
        self._closed = False
        # next() on itertools.count is atomic under the GIL: ids for the driver and trio.
        self._ids = itertools.count(1)

        # Owned by the trio thread (read-only elsewhere, by the introspection properties).
        self._peers = {peer_id: Peer(peer_id, address) for peer_id, address in peers.items()}
        self._inbound: UnansweredRequests = {}
        self._server: InboundServer | None = None
        self._nursery: trio.Nursery | None = None
        self._dispatch_lot: trio.lowlevel.ParkingLot | None = None
        self._closing = False
        #: Counts ``set_voters`` calls: a resolution of voter hosts applies only if newest.
        self._voter_hosts_generation = 0

        self._thread: threading.Thread | None = None
        self._listen_socket: socket.socket | None = None
        self._listen_address: Endpoint | None = None
        self._client_context: ssl.SSLContext | None = None

    # ---------------------------------------------------------------------------------------
    # The driver's side

    def start(self) -> None:
        """Bind the listener, start the network thread, and return once it is serving.

        Raises :class:`TransportError` when the address cannot be bound or a TLS file cannot be
        read (nothing is left open then), or when the channel was started or closed before.
        """
        with self._lock:
            if self._started or self._closed:
                state = "closed" if self._closed else "started"
                raise TransportError(f"channel {self._thread_name} was already {state}")
            self._started = True
        server_context = None
        if self._tls is not None:
            server_context = self._tls.server_context()
            self._client_context = self._tls.client_context()
        if self._listen is not None:
            self._listen_socket = _bind(self._listen)
            port = self._listen_socket.getsockname()[1]
            self._listen_address = Endpoint(self._listen.host, port)
            max_connections = self._limits.max_connections or default_max_connections()
            self._server = InboundServer(
                address=self._listen_address,
                queue=self._queue,
                clock=self._clock,
                ids=self._ids,
                unanswered=self._inbound,
                max_frame_size=self._max_frame_size,
                write_limit=self._write_limit,
                request_timeout_s=self._request_timeout_s,
                tls_context=server_context,
                peer_id_of=None if self._tls is None else self._tls.peer_id,
                limits=self._limits,
                max_connections=max_connections,
                voter_hosts=_voter_hosts(self._peers.values()),
                stats=self.stats,
                controller_requests=self._controller_requests,
            )
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name=self._thread_name, daemon=True
        )
        try:
            self._thread.start()
        except RuntimeError as exc:  # the process cannot start another thread
            if self._listen_socket is not None:
                self._listen_socket.close()
            raise TransportError(f"cannot start the network thread: {exc}") from exc
        ready.wait()
        if self._token is None:  # trio could not even start; _run logged why
            self._thread.join()
            raise TransportError(f"the network thread {self._thread_name} failed to start")
        logger.info(
            "network channel %s started%s",
            self._thread_name,
            f", listening on {self._listen_address}" if self._listen_address else "",
        )

    @property
    def listen_address(self) -> Endpoint | None:
        """Where the listener is bound (the real port when ``listen`` asked for port 0);
        ``None`` before ``start`` or without a listener."""
        return self._listen_address

    @property
    def connected_peer_ids(self) -> frozenset[int]:
        """Destinations with an established outbound connection (a snapshot)."""
        peers = list(self._peers.values())  # one atomic copy: the trio thread changes the dict
        return frozenset(
            peer.peer_id
            for peer in peers
            if peer.connection is not None and peer.connection.established
        )

    @property
    def inbound_connection_count(self) -> int:
        """Connections peers have open to this node's listener."""
        return 0 if self._server is None else len(self._server.connections)

    def transport_metrics(self) -> dict[str, int]:
        """What the listener's limits did, by metric name (docs/metrics.md); safe from any
        thread."""
        stats = self.stats
        return {
            "connections-refused-max-connections-total": stats.refused_max_connections,
            "connections-refused-per-ip-total": stats.refused_per_ip,
            "connections-closed-idle-total": stats.closed_idle,
            "connections-closed-slow-request-total": stats.closed_slow_request,
            "connections-closed-request-bytes-total": stats.closed_request_bytes,
            "inbound-connections": self.inbound_connection_count,
            "partial-request-bytes": stats.partial_request_bytes,
        }

    @property
    def is_running(self) -> bool:
        """Whether the network thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def new_correlation_id(self) -> int:
        return next(self._ids)

    def send(self, request: OutboundRequest) -> None:
        """Send ``request`` to its destination; never blocks, never raises. Its answer (or
        an error response made here) arrives on the queue as an ``InboundResponse``."""
        if not self._send_direct(request):
            self._submit(request)

    def respond(self, response: OutboundResponse) -> None:
        """Send the answer to an ``InboundRequest``; never blocks, never raises. Dropped when
        the connection the request came on has closed."""
        if not self._respond_direct(response):
            self._submit(response)

    def respond_controller(self, channel_id: int, body: ControllerResponse) -> None:
        """Send the answer to a controller request (handed to ``controller_requests`` under
        ``channel_id``); never blocks, never raises. Dropped when its connection has closed,
        or (logged) when it is too large to send."""
        entry = self._inbound.get(channel_id)
        if entry is None:
            return
        try:
            data = encode_controller_response(
                ResponseHeader(entry[1]), body, max_frame_size=self._max_frame_size
            )
        except FrameError as exc:
            logger.error("cannot send %s: %s", type(body).__name__, exc)
            return
        self._submit(_ControllerAnswer(channel_id, data))

    def update_peer(self, peer_id: int, address: Endpoint | None) -> None:
        """Set (or with ``None`` forget) the address of a destination. A connection open to its
        old address is closed; its requests in flight are answered BROKER_NOT_AVAILABLE."""
        self._submit(_UpdatePeer(peer_id, address))

    def set_voters(self, voters: Mapping[int, Endpoint]) -> None:
        """The voter set changed (KIP-853): ``voters`` maps every voter but this node to its
        address. Each becomes a destination at that address (moved if it was elsewhere);
        every other destination with a replica id (not a bootstrap server, whose ids are
        negative) is forgotten and its connection closed, as in :meth:`update_peer`. The
        listener's connections from the voters' hosts may use the reserved slots from then on
        (the hosts are resolved off the network thread's loop)."""
        self._submit(_SetVoters(voters))

    def close(self, timeout_s: float = 5.0) -> None:
        """Close every connection and the listener and stop the thread (idempotent). Requests
        still in flight get no answer. Waits at most ``timeout_s`` for the thread."""
        with self._lock:
            already = self._closed
            self._closed = True
            self._outbox.clear()
            token = self._token
        if not already and token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._shutdown)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
            if thread.is_alive():
                logger.error(
                    "network thread %s did not stop within %.1f s", self._thread_name, timeout_s
                )
        if not already:
            logger.info("network channel %s closed", self._thread_name)

    # The fast path: the caller's thread writes to an established plain TCP connection
    # itself when nothing is queued before it (see Connection). Everything else, and every
    # error, takes the outbox to the trio thread, which handles it as before.

    def _nothing_queued(self) -> bool:
        """Nothing waits in the outbox or in the dispatcher's hands (``_wake_scheduled`` stays
        set while it handles a batch), so a direct write cannot overtake an earlier frame."""
        with self._lock:
            return (
                not self._closed
                and not self._outbox
                and not self._wake_scheduled
                and self._token is not None
            )

    def _encode_request(self, request: OutboundRequest) -> bytes:
        """The request's frame, as this node sends it; ``FrameError`` if it is too large."""
        header = RequestHeader.for_body(
            request.body,
            request.correlation_id,
            source_replica_id=self._source_replica_id,
            source_directory_id=self._directory_id,
            cluster_id=self._cluster_id,
        )
        return encode_request(header, request.body, max_frame_size=self._max_frame_size)

    def _send_direct(self, request: OutboundRequest) -> bool:
        peer = self._peers.get(request.destination)
        if peer is None or _moved(peer, request):
            return False  # the trio thread adds or moves the destination
        connection = peer.connection
        if connection is None or not connection.direct_writable or not self._nothing_queued():
            return False
        try:
            data = self._encode_request(request)
        except FrameError:
            return False  # the trio thread logs it and answers the request with an error
        timeout_s = self._request_timeout_s
        return connection.write_direct(data, lambda: connection.track_locked(request, timeout_s))

    def _respond_direct(self, response: OutboundResponse) -> bool:
        entry = self._inbound.get(response.correlation_id)
        if entry is None or not entry[0].direct_writable or not self._nothing_queued():
            return False
        connection, peer_correlation_id = entry
        if not connection.write_direct(self._encode_response(peer_correlation_id, response)):
            return False
        self._forget_inbound(response.correlation_id)
        return True

    def _encode_response(self, peer_correlation_id: int, response: OutboundResponse) -> bytes:
        """The response's frame; one too large to send becomes UNKNOWN_SERVER_ERROR."""
        header = ResponseHeader(peer_correlation_id)
        try:
            return encode_response(header, response.body, max_frame_size=self._max_frame_size)
        except FrameError as exc:
            logger.error(
                "cannot send %s in answer to request %d: %s",
                type(response.body).__name__,
                response.correlation_id,
                exc,
            )
            error_body = type(response.body)(error_code=Errors.UNKNOWN_SERVER_ERROR)
            return encode_response(header, error_body, max_frame_size=self._max_frame_size)

    def _forget_inbound(self, channel_id: int) -> tuple[InboundConnection, int] | None:
        """Take the connection and peer correlation id of an answered inbound request."""
        entry = self._inbound.pop(channel_id, None)
        if entry is not None:
            with entry[0].lock:
                entry[0].pending.discard(channel_id)
        return entry

    def _submit(self, item: _OutboxItem) -> None:
        with self._lock:
            if self._closed:
                logger.debug(
                    "channel %s is closed: dropping %s", self._thread_name, type(item).__name__
                )
                return
            self._outbox.append(item)
            token = self._token
            if self._wake_scheduled or token is None:
                return  # the dispatcher is already due to run (or will at start)
            self._wake_scheduled = True
        try:
            token.run_sync_soon(self._wake_dispatcher)
        except trio.RunFinishedError:
            logger.debug(
                "network thread %s has ended: dropping %s", self._thread_name, type(item).__name__
            )

    # ---------------------------------------------------------------------------------------
    # The trio thread: startup, dispatch, shutdown

    def _run(self, ready: threading.Event) -> None:
        try:
            trio.run(self._main, ready)
        except BaseException:
            logger.exception("network thread %s crashed", self._thread_name)
        finally:
            with self._lock:  # whatever is sent from now on is dropped, not kept forever
                self._closed = True
                self._outbox.clear()
            ready.set()
            if self._listen_socket is not None:
                self._listen_socket.close()

    async def _main(self, ready: threading.Event) -> None:
        self._dispatch_lot = trio.lowlevel.ParkingLot()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._dispatch)
                if self._server is not None and self._listen_socket is not None:
                    listener = trio.SocketListener(
                        trio.socket.from_stdlib_socket(self._listen_socket)
                    )
                    nursery.start_soon(self._server.accept_loop, listener, nursery)
                with self._lock:
                    self._token = trio.lowlevel.current_trio_token()
                ready.set()
        finally:
            self._closing = True

    def _shutdown(self) -> None:
        self._closing = True
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def _wake_dispatcher(self) -> None:
        if self._dispatch_lot is not None:
            self._dispatch_lot.unpark_all()

    async def _dispatch(self) -> None:
        assert self._dispatch_lot is not None
        lot = self._dispatch_lot
        while True:
            with self._lock:
                items = self._outbox
                self._outbox = deque()
                # Set while this batch is handled: no direct write may overtake it.
                self._wake_scheduled = bool(items)
            if not items:
                await lot.park()
                continue
            for item in items:
                try:
                    if isinstance(item, OutboundRequest):
                        self._send_request(item)
                    elif isinstance(item, OutboundResponse):
                        self._send_response(item)
                    elif isinstance(item, _ControllerAnswer):
                        self._send_controller_answer(item)
                    elif isinstance(item, _UpdatePeer):
                        self._update_peer(item)
                    else:
                        self._set_voters(item)
                except Exception:  # a bug here must not stop the transport
                    logger.exception(
                        "network thread %s failed to handle %s",
                        self._thread_name,
                        type(item).__name__,
                    )
            await trio.lowlevel.checkpoint()

    # ---------------------------------------------------------------------------------------
    # Outbound: requests to peers and their responses

    def _send_request(self, request: OutboundRequest) -> None:
        if self._closing:
            return
        peer = self._peers.get(request.destination)
        if request.destination_address is not None and (peer is None or _moved(peer, request)):
            # The core knows where the destination listens (the voter set, the leader's
            # endpoints, an AddRaftVoter request): connect there.
            self._update_peer(
                _UpdatePeer(request.destination, Endpoint(*request.destination_address))
            )
            peer = self._peers.get(request.destination)
        if peer is None:
            logger.debug("no address for destination %d", request.destination)
            self._answer_locally(request, Errors.BROKER_NOT_AVAILABLE)
            return
        connection = peer.connection
        now = trio.current_time()
        if (connection is None and now < peer.backoff_until) or (
            connection is not None and connection.closed
        ):
            # Backing off after a failure, or the connection is on its way down.
            self._answer_locally(request, Errors.BROKER_NOT_AVAILABLE)
            return
        try:
            data = self._encode_request(request)
        except FrameError as exc:
            logger.error(
                "cannot send %s to %d: %s", type(request.body).__name__, request.destination, exc
            )
            self._answer_locally(request, Errors.UNKNOWN_SERVER_ERROR)
            return
        if connection is None:
            connection = self._open_connection(peer, now)
        with connection.lock:
            was_idle = connection.track_locked(request, self._request_timeout_s)
        if was_idle:
            connection.reaper_lot.unpark_all()
        connection.write(data)

    def _answer_locally(self, request: OutboundRequest, error: Errors) -> None:
        if self._closing:
            return
        self._queue.add(
            InboundResponse(
                request.correlation_id,
                request.destination,
                _error_response(request.body, error),
                self._clock.now_ms(),
            )
        )

    def _open_connection(self, peer: Peer, now: float) -> OutboundConnection:
        connection = OutboundConnection(
            f"to {peer.peer_id} at {peer.address}", self._write_limit, now
        )
        peer.connection = connection
        assert self._nursery is not None
        self._nursery.start_soon(self._run_outbound, peer, connection)
        return connection

    async def _run_outbound(self, peer: Peer, connection: OutboundConnection) -> None:
        stream: trio.abc.Stream | None = None
        try:
            with connection.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._expire_requests, connection)
                    try:
                        stream = await self._connect(peer.address)
                    except IO_ERRORS as exc:
                        # Warn once per run of failures, and at every refused certificate.
                        quiet = peer.failures and failure_level(exc) != logging.WARNING
                        level = logging.DEBUG if quiet else logging.WARNING
                        connection.close(f"cannot connect: {describe_error(exc)}", level)
                        return
                    connection.established = True
                    peer.failures = 0
                    logger.debug("connected %s", connection.label)
                    connection.enable_direct_writes(stream)
                    nursery.start_soon(write_until_broken, connection, stream)
                    await self._read_responses(peer, connection, stream)
        except Exception:
            logger.exception("connection %s failed", connection.label)
        finally:
            connection.close("ended")
            if stream is not None:
                await trio.aclose_forcefully(stream)
            self._end_outbound(peer, connection)

    async def _connect(self, address: Endpoint) -> trio.abc.Stream:
        stream: trio.abc.Stream = await trio.open_tcp_stream(address.host, address.port)
        if self._client_context is None:
            return stream
        tls_stream = trio.SSLStream(stream, self._client_context, server_hostname=address.host)
        try:
            await tls_stream.do_handshake()
        except BaseException:
            await trio.aclose_forcefully(tls_stream)
            raise
        return tls_stream

    async def _read_responses(
        self, peer: Peer, connection: OutboundConnection, stream: trio.abc.Stream
    ) -> None:
        decoder = ResponseFrameDecoder(self._max_frame_size)
        in_flight = connection.in_flight
        queue = self._queue
        source = peer.peer_id
        try:
            while data := await stream.receive_some(READ_CHUNK_SIZE):
                decoder.feed(data)
                received_ms = self._clock.now_ms()
                for frame in decoder:
                    correlation_id = frame.header.correlation_id
                    with connection.lock:
                        entry = in_flight.pop(correlation_id, None)
                    if entry is None:
                        connection.close(
                            f"response to correlation id {correlation_id}, not in flight",
                            logging.ERROR,
                        )
                        return
                    if frame.body.API_KEY != entry[0].body.API_KEY:
                        with connection.lock:  # answered BROKER_NOT_AVAILABLE
                            in_flight[correlation_id] = entry
                        connection.close(
                            f"{type(frame.body).__name__} in answer to a "
                            f"{type(entry[0].body).__name__}",
                            logging.ERROR,
                        )
                        return
                    queue.add(InboundResponse(correlation_id, source, frame.body, received_ms))
            decoder.feed_eof()
            connection.close("closed by the peer", logging.INFO)
        except FrameError as exc:
            connection.close(f"bad response: {exc}", logging.ERROR)
        except IO_ERRORS as exc:
            connection.close(f"read failed: {describe_error(exc)}", failure_level(exc))

    async def _expire_requests(self, connection: OutboundConnection) -> None:
        in_flight = connection.in_flight
        # A request the driver thread sends directly does not wake this task. While nothing is
        # in flight it looks again after one timeout: a request sent meanwhile has a later
        # deadline, so the next look still comes before it and no request expires late.
        idle_check_s = self._request_timeout_s
        while True:
            with connection.lock:
                first = next(iter(in_flight.values()), None)
            if first is None:
                with trio.move_on_after(idle_check_s):
                    await connection.reaper_lot.park()
                continue
            request, deadline = first
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                connection.timed_out = True
                connection.close(
                    f"no answer to {type(request.body).__name__} (correlation id "
                    f"{request.correlation_id}) within {self._request_timeout_s:.3f} s",
                    logging.WARNING,
                )
                return
            await trio.sleep(remaining)

    def _end_outbound(self, peer: Peer, connection: OutboundConnection) -> None:
        if peer.connection is connection:
            peer.connection = None
        if not connection.established:
            peer.failures += 1
        # Kafka's ClusterConnectionStates: the next attempt waits the backoff from the start of
        # the last one, which grows with the failures in a row.
        peer.backoff_until = connection.started_at + self._backoff_delay_s(peer.failures)
        # A request on a connection that never opened was never sent: BROKER_NOT_AVAILABLE.
        # Once it opened, the peer may have read the request: NETWORK_EXCEPTION (Kafka's
        # "disconnected before a response was received"), so a write is not sent twice.
        if connection.timed_out:
            error = Errors.REQUEST_TIMED_OUT
        elif connection.established:
            error = Errors.NETWORK_EXCEPTION
        else:
            error = Errors.BROKER_NOT_AVAILABLE
        with connection.lock:  # closed: the driver thread adds nothing more
            requests = [request for request, _ in connection.in_flight.values()]
            connection.in_flight.clear()
        for request in requests:
            self._answer_locally(request, error)

    def _backoff_delay_s(self, failures: int) -> float:
        if self._backoff_s <= 0:
            return 0.0
        exponent = min(max(failures - 1, 0), 32)  # 2**32 times any backoff is past any cap
        delay = min(self._backoff_s * 2.0**exponent, self._backoff_max_s)
        return delay * self._random.uniform(1 - _BACKOFF_JITTER, 1 + _BACKOFF_JITTER)

    def _update_peer(self, update: _UpdatePeer) -> None:
        peer = self._peers.get(update.peer_id)
        if peer is not None and peer.address == update.address:
            return
        if peer is not None and peer.connection is not None:
            reason = "forgotten" if update.address is None else f"moved to {update.address}"
            peer.connection.close(f"destination {reason}", logging.INFO)
        if update.address is None:
            self._peers.pop(update.peer_id, None)
        else:
            self._peers[update.peer_id] = Peer(update.peer_id, update.address)

    def _set_voters(self, update: _SetVoters) -> None:
        gone = [i for i in self._peers if i >= 0 and i not in update.voters]
        for peer_id in gone:
            logger.info(
                "%s: %d is no longer a voter: closing its connection", self._thread_name, peer_id
            )
            self._update_peer(_UpdatePeer(peer_id, None))
        for peer_id, address in update.voters.items():
            self._update_peer(_UpdatePeer(peer_id, address))
        if self._server is not None and self._nursery is not None:
            self._voter_hosts_generation += 1
            voters = [Peer(i, address) for i, address in update.voters.items()]
            self._nursery.start_soon(
                self._refresh_voter_hosts, voters, self._voter_hosts_generation
            )

    async def _refresh_voter_hosts(self, voters: list[Peer], generation: int) -> None:
        hosts = await trio.to_thread.run_sync(_voter_hosts, voters, abandon_on_cancel=True)
        # A later change may have resolved first: only the newest applies.
        if self._server is not None and generation == self._voter_hosts_generation:
            self._server.set_voter_hosts(hosts)

    # ---------------------------------------------------------------------------------------
    # Inbound: this node's responses (peers' requests come in through InboundServer)

    def _send_response(self, response: OutboundResponse) -> None:
        entry = self._forget_inbound(response.correlation_id)
        if entry is None:
            logger.debug(
                "dropping the response to request %d: its connection has closed",
                response.correlation_id,
            )
            return
        connection, peer_correlation_id = entry
        if not connection.closed:
            connection.write(self._encode_response(peer_correlation_id, response))

    def _send_controller_answer(self, answer: _ControllerAnswer) -> None:
        entry = self._forget_inbound(answer.channel_id)
        if entry is not None and not entry[0].closed:
            entry[0].write(answer.data)


def _moved(peer: Peer, request: OutboundRequest) -> bool:
    """Whether ``request`` names another address for its destination than ``peer``'s."""
    address = request.destination_address
    return address is not None and (peer.address.host, peer.address.port) != tuple(address)


def _voter_hosts(peers: Iterable[Peer]) -> frozenset[str]:
    """The addresses the voters' hosts resolve to (bootstrap servers, with negative ids, are
    not voters): their connections may use the ones reserved beyond ``max_connections``."""
    hosts: set[str] = set()
    for peer in peers:
        if peer.peer_id < 0:
            continue
        try:
            infos = socket.getaddrinfo(
                peer.address.host, peer.address.port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            logger.warning(
                "cannot resolve voter %d's host %s (its connections get no reserved slot): %s",
                peer.peer_id,
                peer.address.host,
                exc,
            )
            continue
        hosts.update(str(info[4][0]) for info in infos)
    return frozenset(hosts)


def _bind(address: Endpoint) -> socket.socket:
    """A listening socket on ``address`` (the first address its host resolves to)."""
    try:
        infos = socket.getaddrinfo(
            address.host or None, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as exc:
        raise TransportError(f"cannot listen on {address}: {exc}") from exc
    family, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(_LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise TransportError(f"cannot listen on {address}: {exc}") from exc
    return sock
