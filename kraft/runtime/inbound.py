"""The listening half of :class:`~kraft.runtime.transport.TrioNetworkChannel`: accepting peers'
connections (with the TLS handshake when configured) and reading their requests.

Each request frame becomes an :class:`~kraft.protocol.envelope.InboundRequest` on the Raft
queue under a channel-unique correlation id; the table of unanswered requests maps that id to
the connection and the peer's own id, so that the channel's ``respond`` finds where the answer
goes. A connection that closes forgets its unanswered requests (a late response is dropped).
With TLS identity binding, every request of a connection carries the replica id its client
certificate proves (``InboundRequest.peer_id``).
Runs on the channel's trio thread only.

Limits (:class:`~kraft.runtime.limits.ConnectionLimits`, docs/transport.md "Limits")
    A connection accepted beyond ``max_connections`` or ``max_connections_per_ip`` is closed
    at once, unless it comes from a voter's address and one of the connections kept for
    voters is free. A connection that sends nothing for ``connections_max_idle_ms``, or whose
    partial request makes no progress (no frame completes) for a request timeout, is closed:
    its peer has given up on that request anyway. Partial requests beyond each connection's
    free part share one :class:`~kraft.protocol.frame.FrameBudget`; the connection that
    cannot get its share is closed. Each of these is counted in
    :class:`~kraft.runtime.limits.ConnectionStats` and logged at most once a minute per cause.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import logging
import ssl
from collections.abc import Callable, Mapping
from typing import Any, Final

import trio

from kraft.common.clock import Clock
from kraft.common.ratelimit import LogLimiter
from kraft.config import Endpoint
from kraft.protocol.controller_frame import ControllerRequestFrame, NodeRequestFrameDecoder
from kraft.protocol.envelope import InboundRequest
from kraft.protocol.errors import FrameBudgetExceededError, FrameError
from kraft.protocol.frame import FrameBudget, RequestFrame, RequestFrameDecoder
from kraft.raft.channel import RaftMessageQueue
from kraft.runtime.connection import (
    IO_ERRORS,
    READ_CHUNK_SIZE,
    InboundConnection,
    describe_error,
    failure_level,
    write_until_broken,
)
from kraft.runtime.limits import VOTER_RESERVED_CONNECTIONS, ConnectionLimits, ConnectionStats

__all__ = ["ControllerRequestSink", "InboundServer", "UnansweredRequests"]

# The transport's logger (see kraft.runtime.connection).
logger = logging.getLogger("kraft.runtime.transport")

#: Pause after the listener fails to accept for lack of resources (too many open files).
_ACCEPT_ERROR_PAUSE_S: Final = 0.1
#: A line that can repeat for every connection (a refusal, a close on a limit) is logged at
#: most this often, per cause.
_LIMIT_LOG_INTERVAL_MS: Final = 60_000

#: A connection that held a partial request this large gives the memory back to the
#: operating system when it ends (see _release_freed_memory).
_TRIM_AFTER_BYTES: Final = 1024 * 1024

#: Channel correlation id -> the connection a request came on and the peer's correlation id.
UnansweredRequests = dict[int, tuple[InboundConnection, int]]
#: The replica id a client's certificate binds (``TlsConfig.peer_id``).
PeerIdOf = Callable[[Mapping[str, Any] | None], int | None]
#: Takes a controller request (kraft.runtime.controller_node) under its channel correlation id;
#: the answer goes back with ``TrioNetworkChannel.respond_controller``.
ControllerRequestSink = Callable[[int, ControllerRequestFrame], None]


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or ``None`` on another C library."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()


def _release_freed_memory() -> None:
    """Give freed heap memory back to the operating system. glibc keeps what a large buffer
    freed when it grew in its heap (its mmap threshold rises after a large free): 20 peers
    sending 14 MiB each left 50 MB of a node's RSS in place after they were gone."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class InboundServer:
    """Serves the connections peers open to a channel's listener; ``unanswered`` is the
    channel's table, filled here and emptied by the channel as it answers.

    ``max_connections`` is the resolved ``limits.max_connections``; ``voter_hosts`` are the
    addresses the voters' names resolve to, whose connections may use the reserved ones.
    """

    def __init__(
        self,
        *,
        address: Endpoint,
        queue: RaftMessageQueue,
        clock: Clock,
        ids: itertools.count[int],
        unanswered: UnansweredRequests,
        max_frame_size: int,
        write_limit: int,
        request_timeout_s: float,
        tls_context: ssl.SSLContext | None,
        peer_id_of: PeerIdOf | None,
        limits: ConnectionLimits,
        max_connections: int,
        voter_hosts: frozenset[str],
        stats: ConnectionStats,
        controller_requests: ControllerRequestSink | None = None,
    ) -> None:
        self._address = address
        #: Where a controller node's controller requests go; ``None``: a Raft replica only,
        #: whose decoder refuses them as malformed.
        self._controller_requests = controller_requests
        self._queue = queue
        self._clock = clock
        self._ids = ids
        self._unanswered = unanswered
        self._max_frame_size = max_frame_size
        self._write_limit = write_limit
        self._request_timeout_s = request_timeout_s
        self._tls_context = tls_context
        self._peer_id_of = peer_id_of
        self._limits = limits
        self._max_connections = max_connections
        self._idle_s = limits.connections_max_idle_ms / 1000
        self._voter_hosts = voter_hosts
        self._reserved_capacity = VOTER_RESERVED_CONNECTIONS * len(voter_hosts)
        self._reserved_in_use = 0
        self._per_host: dict[str, int] = {}
        self._budget = FrameBudget(limits.queued_max_request_bytes)
        self.stats = stats
        self._log_limiters = {
            cause: LogLimiter(_LIMIT_LOG_INTERVAL_MS)
            for cause in ("accept", "refused", "idle", "slow", "budget")
        }
        #: The open connections (read by the channel's introspection from other threads).
        self.connections: set[InboundConnection] = set()

    def set_voter_hosts(self, voter_hosts: frozenset[str]) -> None:
        """The voters changed (KIP-853): connections from these hosts may use the reserved
        slots from now on. Connections admitted on a reserved slot keep it until they close."""
        self._voter_hosts = voter_hosts
        self._reserved_capacity = VOTER_RESERVED_CONNECTIONS * len(voter_hosts)

    @property
    def budget(self) -> FrameBudget:
        """The budget the connections' partial requests share."""
        return self._budget

    async def accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        """Accept connections until cancelled, each served by a task in ``nursery``."""
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:  # out of file descriptors or memory: wait, retry
                    self._log_limited(
                        "accept",
                        logging.ERROR,
                        "listener on %s cannot accept, pausing %.1f s (logged at most once a "
                        "minute): %s",
                        self._address,
                        _ACCEPT_ERROR_PAUSE_S,
                        exc,
                    )
                    await trio.sleep(_ACCEPT_ERROR_PAUSE_S)
                    continue
                connection = self._admit(stream)
                if connection is None:
                    await trio.aclose_forcefully(stream)
                    continue
                nursery.start_soon(self._serve, connection, stream)

    def _admit(self, stream: trio.SocketStream) -> InboundConnection | None:
        """The connection ``stream`` becomes, counted against the limits; ``None`` (refused,
        counted and logged) when a limit is reached."""
        try:
            host, port = stream.socket.getpeername()[:2]
        except OSError:
            host, port = "", 0  # already reset by the peer: counted under no address
        limits = self._limits
        open_at_host = self._per_host.get(host, 0)
        over_host = open_at_host >= limits.max_connections_per_ip
        over_total = len(self.connections) - self._reserved_in_use >= self._max_connections
        reserved = False
        if over_host or over_total:
            if host not in self._voter_hosts or self._reserved_in_use >= self._reserved_capacity:
                if over_host:
                    self.stats.refused_per_ip += 1
                    limit = f"max_connections_per_ip ({limits.max_connections_per_ip})"
                    refused = self.stats.refused_per_ip
                else:
                    self.stats.refused_max_connections += 1
                    limit = f"max_connections ({self._max_connections})"
                    refused = self.stats.refused_max_connections
                self._log_limited(
                    "refused",
                    logging.WARNING,
                    "refusing a connection from %s: %s reached, %d connections open (%d "
                    "refused so far on this limit; logged at most once a minute)",
                    host,
                    limit,
                    len(self.connections),
                    refused,
                )
                return None
            reserved = True
            self._reserved_in_use += 1
        self._per_host[host] = open_at_host + 1
        connection = InboundConnection(
            f"from {host}:{port}" if host else "from an unknown peer",
            self._write_limit,
            host,
            reserved,
        )
        self.connections.add(connection)
        return connection

    def _forget(self, connection: InboundConnection) -> None:
        self.connections.discard(connection)
        if connection.reserved:
            self._reserved_in_use -= 1
        left = self._per_host[connection.host] - 1
        if left:
            self._per_host[connection.host] = left
        else:
            del self._per_host[connection.host]

    def _log_limited(self, cause: str, level: int, message: str, *args: object) -> None:
        if self._log_limiters[cause].allow(self._clock.now_ms()):
            logger.log(level, message, *args)

    async def _serve(self, connection: InboundConnection, tcp_stream: trio.SocketStream) -> None:
        stream: trio.abc.Stream = tcp_stream
        peer_id = None  # not authenticated: the core checks no claimed replica id
        try:
            with connection.scope:
                if self._tls_context is not None:
                    tls_stream = await self._accept_tls(connection, tcp_stream, self._tls_context)
                    if tls_stream is None:
                        return
                    stream = tls_stream
                    if self._peer_id_of is not None:
                        peer_id = self._peer_id_of(tls_stream.getpeercert())
                        logger.debug("connection %s is replica %s", connection.label, peer_id)
                async with trio.open_nursery() as nursery:
                    connection.enable_direct_writes(stream)
                    nursery.start_soon(write_until_broken, connection, stream)
                    await self._read_requests(connection, stream, peer_id)
        except Exception:
            logger.exception("connection %s failed", connection.label)
        finally:
            connection.close("ended")
            await trio.aclose_forcefully(stream)
            self._forget(connection)
            with connection.lock:
                pending = list(connection.pending)
                connection.pending.clear()
            for channel_id in pending:
                self._unanswered.pop(channel_id, None)

    async def _accept_tls(
        self,
        connection: InboundConnection,
        tcp_stream: trio.SocketStream,
        context: ssl.SSLContext,
    ) -> trio.SSLStream[trio.SocketStream] | None:
        """The TLS stream once the handshake is done; ``None`` (and the connection closed)
        when it fails or takes longer than a request may."""
        tls_stream = trio.SSLStream(tcp_stream, context, server_side=True)
        try:
            with trio.fail_after(self._request_timeout_s):
                await tls_stream.do_handshake()
        except (trio.TooSlowError, *IO_ERRORS) as exc:
            # Logged before the socket closes: the client learns of the refusal only from the
            # close (trio does not send the TLS alert of a failed handshake).
            connection.close(f"TLS handshake failed: {describe_error(exc)}", logging.WARNING)
            await trio.aclose_forcefully(tls_stream)
            return None
        return tls_stream

    async def _read_requests(
        self, connection: InboundConnection, stream: trio.abc.Stream, peer_id: int | None
    ) -> None:
        decoder = self._new_decoder()
        unanswered = self._unanswered
        pending = connection.pending
        ids = self._ids
        stats = self.stats
        idle_s = self._idle_s
        held = 0  # bytes of a partial request the decoder holds (counted in the stats)
        most_held = 0
        # When the partial request held began, or last made progress (a frame completed).
        partial_since: float | None = None
        try:
            # One scope for the whole loop, its deadline moved after each read: the idle
            # deadline, or the partial request's if it comes first.
            with trio.CancelScope(deadline=trio.current_time() + idle_s) as deadlines:
                while data := await stream.receive_some(READ_CHUNK_SIZE):
                    now = trio.current_time()
                    decoder.feed(data)
                    received_ms = self._clock.now_ms()
                    completed = False
                    for frame in decoder:
                        completed = True
                        header = frame.header
                        channel_id = next(ids)
                        with connection.lock:
                            pending.add(channel_id)
                        unanswered[channel_id] = (connection, header.correlation_id)
                        self._take(frame, channel_id, received_ms, peer_id)
                    buffered = decoder.buffered_bytes
                    stats.partial_request_bytes += buffered - held
                    held = buffered
                    most_held = max(most_held, held)
                    if not buffered:
                        partial_since = None
                    elif completed or partial_since is None:
                        partial_since = now
                    deadlines.deadline = (
                        now + idle_s
                        if partial_since is None
                        else min(now + idle_s, partial_since + self._request_timeout_s)
                    )
            if deadlines.cancelled_caught:
                self._close_on_deadline(connection, held, partial_since)
                return
            decoder.feed_eof()
            connection.close("closed by the peer")
        except FrameBudgetExceededError as exc:
            self._close_over_budget(connection, exc)
        except FrameError as exc:
            connection.close(f"bad request: {exc}", logging.ERROR)
        except IO_ERRORS as exc:
            connection.close(f"read failed: {describe_error(exc)}", failure_level(exc))
        finally:
            stats.partial_request_bytes -= held
            decoder.close()
            if most_held >= _TRIM_AFTER_BYTES:
                _release_freed_memory()

    def _new_decoder(self) -> RequestFrameDecoder | NodeRequestFrameDecoder:
        if self._controller_requests is None:
            return RequestFrameDecoder(self._max_frame_size, budget=self._budget)
        return NodeRequestFrameDecoder(self._max_frame_size, budget=self._budget)

    def _take(
        self,
        frame: RequestFrame | ControllerRequestFrame,
        channel_id: int,
        received_ms: int,
        peer_id: int | None,
    ) -> None:
        """A Raft request to the Raft queue, a controller request to the controller."""
        if isinstance(frame, ControllerRequestFrame):
            assert self._controller_requests is not None  # only its decoder makes such a frame
            self._controller_requests(channel_id, frame)
        else:
            self._queue.add(
                InboundRequest.from_frame(
                    frame, received_ms, correlation_id=channel_id, peer_id=peer_id
                )
            )

    def _close_over_budget(
        self, connection: InboundConnection, exc: FrameBudgetExceededError
    ) -> None:
        self.stats.closed_request_bytes += 1
        connection.close(f"request refused: {exc}")
        self._log_limited(
            "budget",
            logging.WARNING,
            "closing connection %s: %s (queued_max_request_bytes; %d closed so far, "
            "logged at most once a minute)",
            connection.label,
            exc,
            self.stats.closed_request_bytes,
        )

    def _close_on_deadline(
        self, connection: InboundConnection, held: int, partial_since: float | None
    ) -> None:
        stats = self.stats
        if partial_since is not None and (
            trio.current_time() >= partial_since + self._request_timeout_s
        ):
            stats.closed_slow_request += 1
            reason = (
                f"a request incomplete for {self._request_timeout_s:.3f} s ({held} bytes "
                "received; a request timeout)"
            )
            cause, level, count = "slow", logging.WARNING, stats.closed_slow_request
        else:
            stats.closed_idle += 1
            reason = f"idle for {self._limits.connections_max_idle_ms} ms (connections_max_idle_ms)"
            cause, level, count = "idle", logging.INFO, stats.closed_idle
        connection.close(reason)
        self._log_limited(
            cause,
            level,
            "closing connection %s: %s (%d closed so far, logged at most once a minute)",
            connection.label,
            reason,
            count,
        )
