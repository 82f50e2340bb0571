"""The connections of :class:`~kraft.runtime.transport.TrioNetworkChannel`: a stream's queued
frames, its writer task and the direct writes of the fast path, and the state kept per
outbound connection (requests in flight), inbound connection (requests unanswered) and peer
(address, reconnect backoff). See the docstring of :mod:`kraft.runtime.transport`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from typing import Final

import trio

from kraft.config import Endpoint
from kraft.protocol.envelope import OutboundRequest
from kraft.protocol.errors import FrameError

# The transport's logger (kraft.runtime.transport's own): connection and channel events are one
# stream, under the name operators filter on (docs/operations.md).
logger = logging.getLogger("kraft.runtime.transport")

#: Bytes asked for per read: large, so that a burst of frames costs one system call.
READ_CHUNK_SIZE: Final = 256 * 1024

# What one connection's I/O may raise; ssl.SSLError is an OSError, and trio wraps the errors
# of a stream that broke in BrokenResourceError.
IO_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, FrameError)


def describe_error(exc: BaseException) -> str:
    """An exception and its cause in one line (trio's BrokenResourceError hides the ssl or
    socket error that broke the stream in ``__cause__``)."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    cause = exc.__cause__
    return f"{text} ({describe_error(cause)})" if cause is not None else text


def failure_level(exc: BaseException) -> int:
    """How loudly to log a broken connection: a TLS failure (a certificate refused by either
    side) needs an operator; a peer going away does not."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    tls_failure = isinstance(cause, ssl.SSLError) and not isinstance(
        cause, ssl.SSLEOFError | ssl.SSLZeroReturnError
    )
    return logging.WARNING if tls_failure else logging.INFO


class Connection:
    """A stream, its writer and its cancel scope: what inbound and outbound connections share.

    Frames are written with :meth:`write` from the trio thread, or with :meth:`write_direct`
    from any thread. A plain TCP connection that is established and has nothing queued is
    written straight to its socket by the caller (``write_direct``): a frame from the driver
    thread then leaves without waiting for the trio thread, which matters for commit latency
    (each hop into trio costs tens of microseconds, more while the driver holds the GIL).
    Whatever cannot go out at once (a TLS stream, frames already queued, a full socket buffer)
    is queued for :meth:`run_writer`, which sends all of it in one ``send_all``. ``_lock``
    orders the two writers: the socket is written directly only while the trio writer holds
    nothing, so frames leave in the order they were written. :meth:`close` cancels the
    connection's tasks; the task that owns the stream closes it.
    """

    __slots__ = (
        "_buffered",
        "_fd",
        "_frames",
        "_token",
        "_write_limit",
        "_writer_lot",
        "_writing",
        "closed",
        "label",
        "lock",
        "scope",
    )

    def __init__(self, label: str, write_limit: int) -> None:
        self.label = label
        self.scope = trio.CancelScope()
        self.closed = False
        #: Guards ``closed``, ``_fd``, the queued frames and the outbound ``in_flight`` table.
        self.lock = threading.Lock()
        self._frames: list[bytes | memoryview] = []
        self._buffered = 0
        self._writing = False  # the trio writer has taken frames and is sending them
        self._fd = -1  # the socket's descriptor while it may be written directly
        self._token: trio.lowlevel.TrioToken | None = None
        self._write_limit = write_limit
        self._writer_lot = trio.lowlevel.ParkingLot()

    def enable_direct_writes(self, stream: trio.abc.Stream) -> None:
        """Let :meth:`write_direct` write to ``stream``'s socket (plain TCP only)."""
        if isinstance(stream, trio.SocketStream):
            self._token = trio.lowlevel.current_trio_token()
            with self.lock:
                if not self.closed:
                    self._fd = stream.socket.fileno()

    @property
    def direct_writable(self) -> bool:
        """Whether :meth:`write_direct` would write now (a hint, read without the lock: the
        caller encodes a frame only for a connection that can take it directly)."""
        return self._fd >= 0 and not self._frames and not self._writing

    def write(self, data: bytes) -> None:
        """Queue a frame for the writer (trio thread); a peer that has stopped reading is
        closed."""
        with self.lock:
            if self.closed:
                return
            self._frames.append(data)
            self._buffered += len(data)
            overflow = self._buffered > self._write_limit
        if overflow:
            self.close(f"more than {self._write_limit} bytes unread by the peer", logging.ERROR)
            return
        if self._writer_lot:
            self._writer_lot.unpark()

    def write_direct(self, data: bytes, before: Callable[[], object] | None = None) -> bool:
        """Write a frame to the socket from the calling thread, if the connection allows it
        now; ``False`` (nothing done) when it does not. ``before`` runs under the lock first
        (to register a request in flight before its answer can arrive). What the socket does
        not take at once is left to the trio writer."""
        with self.lock:
            if self.closed or self._fd < 0 or self._frames or self._writing:
                return False
            if before is not None:
                before()
            try:
                written = os.write(self._fd, data)
            except BlockingIOError:
                written = 0
            except OSError:
                # Broken: the trio writer meets the same error and closes the connection
                # (answering what is in flight); no more direct writes until then.
                self._fd = -1
                written = 0
            if written == len(data):
                return True
            rest = memoryview(data)[written:]
            self._frames.append(rest)
            self._buffered += len(rest)
            token = self._token
        if token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._wake_writer)
        return True

    def _wake_writer(self) -> None:
        if self._writer_lot:
            self._writer_lot.unpark()

    def close(self, reason: str, level: int = logging.DEBUG) -> None:
        """End the connection (idempotent, trio thread): its tasks are cancelled."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self._fd = -1
        logger.log(level, "closing connection %s: %s", self.label, reason)
        self.scope.cancel()

    async def run_writer(self, stream: trio.abc.Stream) -> None:
        """Send whatever is queued, all of it in one ``send_all``, until cancelled."""
        frames = self._frames
        lock = self.lock
        while True:
            with lock:
                self._writing = False
                if frames:
                    data = frames[0] if len(frames) == 1 else b"".join(frames)
                    frames.clear()
                    self._buffered = 0
                    self._writing = True
            if not self._writing:
                await self._writer_lot.park()
                continue
            try:
                await stream.send_all(data)
            except BaseException:
                with lock:
                    self._fd = -1  # a half-written frame: nothing may follow it
                raise


class OutboundConnection(Connection):
    """One connection to a peer, from the first request that needed it to its close.

    ``in_flight`` maps correlation ids to the request and its deadline (``time.monotonic``),
    in the order sent; with one timeout for all, the first entry is always the next to expire.
    It is written by the driver thread too (:meth:`TrioNetworkChannel.send`), so it is only
    touched under ``lock``.
    """

    __slots__ = ("established", "in_flight", "reaper_lot", "started_at", "timed_out")

    def __init__(self, label: str, write_limit: int, started_at: float) -> None:
        super().__init__(label, write_limit)
        self.in_flight: dict[int, tuple[OutboundRequest, float]] = {}
        self.started_at = started_at
        self.established = False
        self.timed_out = False
        self.reaper_lot = trio.lowlevel.ParkingLot()

    def track_locked(self, request: OutboundRequest, timeout_s: float) -> bool:
        """Enter ``request`` in flight, its deadline stamped now (the caller holds ``lock``,
        so deadlines stay in table order); whether the table was empty before."""
        was_idle = not self.in_flight
        self.in_flight[request.correlation_id] = (request, time.monotonic() + timeout_s)
        return was_idle


class InboundConnection(Connection):
    """A connection a peer opened; ``pending`` holds the channel ids of its unanswered requests.

    ``host`` is the peer's address (what ``max_connections_per_ip`` counts), ``reserved``
    whether it took one of the connections kept for voters beyond ``max_connections``.
    """

    __slots__ = ("host", "pending", "reserved")

    def __init__(self, label: str, write_limit: int, host: str = "", reserved: bool = False):
        super().__init__(label, write_limit)
        self.pending: set[int] = set()
        self.host = host
        self.reserved = reserved


class Peer:
    """A destination: its address, its connection (if one is open) and its reconnect backoff."""

    __slots__ = ("address", "backoff_until", "connection", "failures", "peer_id")

    def __init__(self, peer_id: int, address: Endpoint) -> None:
        self.peer_id = peer_id
        self.address = address
        self.connection: OutboundConnection | None = None
        self.failures = 0  # connection attempts failed in a row
        self.backoff_until = float("-inf")  # trio time before which no new attempt is made


async def write_until_broken(connection: Connection, stream: trio.abc.Stream) -> None:
    """Run ``connection``'s writer on ``stream``; a failed write closes the connection."""
    try:
        await connection.run_writer(stream)
    except IO_ERRORS as exc:
        connection.close(f"write failed: {describe_error(exc)}", failure_level(exc))
