"""The listening half of :class:`~kraft.runtime.transport.TrioNetworkChannel`: accepting peers'
connections (with the TLS handshake when configured) and reading their requests.

Each request frame becomes an :class:`~kraft.protocol.envelope.InboundRequest` on the Raft
queue under a channel-unique correlation id; the table of unanswered requests maps that id to
the connection and the peer's own id, so that the channel's ``respond`` finds where the answer
goes. A connection that closes forgets its unanswered requests (a late response is dropped).
With TLS identity binding, every request of a connection carries the replica id its client
certificate proves (``InboundRequest.peer_id``).
Runs on the channel's trio thread only.
"""

from __future__ import annotations

import itertools
import logging
import ssl
from collections.abc import Callable, Mapping
from typing import Any, Final

import trio

from kraft.common.clock import Clock
from kraft.config import Endpoint
from kraft.protocol.envelope import InboundRequest
from kraft.protocol.errors import FrameError
from kraft.protocol.frame import RequestFrameDecoder
from kraft.raft.channel import RaftMessageQueue
from kraft.runtime.connection import (
    IO_ERRORS,
    READ_CHUNK_SIZE,
    InboundConnection,
    describe_error,
    failure_level,
    write_until_broken,
)

__all__ = ["InboundServer", "UnansweredRequests"]

# The transport's logger (see kraft.runtime.connection).
logger = logging.getLogger("kraft.runtime.transport")

#: Pause after the listener fails to accept for lack of resources (too many open files).
_ACCEPT_ERROR_PAUSE_S: Final = 0.1

#: Channel correlation id -> the connection a request came on and the peer's correlation id.
UnansweredRequests = dict[int, tuple[InboundConnection, int]]
#: The replica id a client's certificate binds (``TlsConfig.peer_id``).
PeerIdOf = Callable[[Mapping[str, Any] | None], int | None]


class InboundServer:
    """Serves the connections peers open to a channel's listener; ``unanswered`` is the
    channel's table, filled here and emptied by the channel as it answers."""

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
        handshake_timeout_s: float,
        tls_context: ssl.SSLContext | None,
        peer_id_of: PeerIdOf | None,
    ) -> None:
        self._address = address
        self._queue = queue
        self._clock = clock
        self._ids = ids
        self._unanswered = unanswered
        self._max_frame_size = max_frame_size
        self._write_limit = write_limit
        self._handshake_timeout_s = handshake_timeout_s
        self._tls_context = tls_context
        self._peer_id_of = peer_id_of
        #: The open connections (read by the channel's introspection from other threads).
        self.connections: set[InboundConnection] = set()

    async def accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        """Accept connections until cancelled, each served by a task in ``nursery``."""
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:  # out of file descriptors or memory: wait, retry
                    logger.error("listener on %s cannot accept: %s", self._address, exc)
                    await trio.sleep(_ACCEPT_ERROR_PAUSE_S)
                    continue
                nursery.start_soon(self._serve, stream)

    async def _serve(self, tcp_stream: trio.SocketStream) -> None:
        try:
            host, port = tcp_stream.socket.getpeername()[:2]
            label = f"from {host}:{port}"
        except OSError:
            label = "from an unknown peer"
        connection = InboundConnection(label, self._write_limit)
        stream: trio.abc.Stream = tcp_stream
        self.connections.add(connection)
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
            self.connections.discard(connection)
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
            with trio.fail_after(self._handshake_timeout_s):
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
        decoder = RequestFrameDecoder(self._max_frame_size)
        unanswered = self._unanswered
        pending = connection.pending
        queue = self._queue
        ids = self._ids
        try:
            while data := await stream.receive_some(READ_CHUNK_SIZE):
                decoder.feed(data)
                received_ms = self._clock.now_ms()
                for frame in decoder:
                    header = frame.header
                    channel_id = next(ids)
                    with connection.lock:
                        pending.add(channel_id)
                    unanswered[channel_id] = (connection, header.correlation_id)
                    queue.add(
                        InboundRequest(
                            correlation_id=channel_id,
                            source=header.source_replica_id,
                            source_directory_id=header.source_directory_id,
                            cluster_id=header.cluster_id,
                            body=frame.body,
                            received_ms=received_ms,
                            api_version=header.api_version,
                            peer_id=peer_id,
                        )
                    )
            decoder.feed_eof()
            connection.close("closed by the peer")
        except FrameError as exc:
            connection.close(f"bad request: {exc}", logging.ERROR)
        except IO_ERRORS as exc:
            connection.close(f"read failed: {describe_error(exc)}", failure_level(exc))
