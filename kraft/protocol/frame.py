"""Frames: the bytes that carry one request or one response on a connection.

Theory of operation
    A frame is a 4-byte big-endian unsigned length ``n`` and then ``n`` bytes of msgpack: the
    array ``[header, body]`` (:class:`RequestFrame` / :class:`ResponseFrame`). The body is a
    message of :mod:`kraft.protocol.messages`, itself an array whose first item is its API key.
    Kafka's own framing is the same 4-byte size prefix; only the body encoding differs.

    Encoding is a function (:func:`encode_request`, :func:`encode_response`). Decoding is a
    sans-IO object in the manner of h11: :class:`FrameDecoder` is fed whatever byte chunks the
    transport read (``feed(data)``) and hands out complete frames (``next_frame()``, or iterate
    it). It never reads a socket, never blocks, and holds at most one frame's bytes plus one
    chunk. The runtime and the tests use the same code.

Memory
    The bytes of a frame still arriving are held in one ``bytearray``. Once a frame is handed
    out, its bytes are dropped from the buffer, which CPython then shrinks: a 15 MiB frame
    does not keep 15 MiB alive for the rest of the connection.
    :meth:`FrameDecoder.close` lets everything go at once.

    Decoders may share a :class:`FrameBudget` (the runtime gives one to every inbound
    connection: Kafka's ``queued.max.request.bytes``). A decoder holding a partial frame above
    its ``free_bytes`` reserves the excess from the budget as the bytes arrive, each time
    ``next_frame`` finds no complete frame; a reservation the budget cannot grant raises
    :class:`FrameBudgetExceededError`. Nothing is reserved upfront for a declared length, so
    a peer must send the bytes it makes the node hold. The free part keeps ordinary requests
    (a few hundred bytes, pipelined) away from the budget: a peer filling the budget cannot
    make another peer's small requests fail.

    Bad bytes raise a :class:`~kraft.protocol.errors.FrameError` and nothing else: a declared
    length above the decoder's maximum raises :class:`FrameTooLargeError` as soon as the 4
    length bytes are in (so the runtime stops reading before the body arrives), and a body that
    is not a well-formed frame raises :class:`MalformedFrameError` (msgspec's errors are
    translated, ``raise ... from exc``). After either, the decoder is broken: the byte stream
    cannot be trusted, so every later call raises the same error and the connection is to be
    closed (docs/transport.md).

    One encoder and one typed decoder per direction are built once, at import.
"""

from __future__ import annotations

import contextlib
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Generic, TypeVar

import msgspec

from kraft.common.limits import INT32_MAX
from kraft.common.uuids import ZERO_UUID
from kraft.protocol.errors import (
    FrameBudgetExceededError,
    FrameError,
    FrameTooLargeError,
    MalformedFrameError,
    MessageEncodeError,
)
from kraft.protocol.messages import Request, Response

__all__ = [
    "DEFAULT_FREE_PARTIAL_BYTES",
    "DEFAULT_MAX_FRAME_SIZE",
    "FRAME_LENGTH_SIZE",
    "MAX_FRAME_SIZE_LIMIT",
    "FrameBudget",
    "FrameDecoder",
    "RequestFrame",
    "RequestFrameDecoder",
    "RequestHeader",
    "ResponseFrame",
    "ResponseFrameDecoder",
    "ResponseHeader",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
]

#: Bytes of the length prefix.
FRAME_LENGTH_SIZE = 4
#: The largest length a frame may ever declare: Kafka sizes are int32.
MAX_FRAME_SIZE_LIMIT = INT32_MAX
#: The default maximum frame size: room for an 8 MiB fetch (KafkaRaftClient's
#: MAX_FETCH_SIZE_BYTES) or an 8 MiB batch, and the message around it.
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
#: Bytes of a partial frame a decoder holds without reserving them from its budget: far above
#: any request a replica sends (Vote, Fetch, ... are a few hundred bytes), so a full budget
#: never refuses a replica's ordinary, pipelined requests.
DEFAULT_FREE_PARTIAL_BYTES = 64 * 1024


class _Header(msgspec.Struct, frozen=True, array_like=True):
    """Base of the frame headers: frozen, a msgpack array."""


class RequestHeader(_Header, frozen=True):
    """What precedes every request body.

    ``api_key`` and ``api_version`` are Kafka's request header's; ``api_key`` must equal the
    body's API key (checked on decode). The version is the sender's, normally the message's
    ``MAX_VERSION``: the receiver decides what to do with a version it does not speak (Kafka
    answers UNSUPPORTED_VERSION). ``source_replica_id`` (-1: anonymous) and
    ``source_directory_id`` name the sending replica. ``cluster_id`` is carried here for every
    API, where Kafka carries it in the body of the KRaft RPCs: a request naming another cluster
    is answered INCONSISTENT_CLUSTER_ID; ``None`` is accepted, as in Kafka.
    """

    api_key: int
    api_version: int
    correlation_id: int
    source_replica_id: int = -1
    source_directory_id: uuid.UUID = ZERO_UUID
    cluster_id: str | None = None

    @classmethod
    def for_body(
        cls,
        body: Request,
        correlation_id: int,
        *,
        source_replica_id: int = -1,
        source_directory_id: uuid.UUID = ZERO_UUID,
        cluster_id: str | None = None,
    ) -> RequestHeader:
        """The header for ``body`` at the highest version kraft speaks of its API."""
        return cls(
            api_key=int(body.API_KEY),
            api_version=body.MAX_VERSION,
            correlation_id=correlation_id,
            source_replica_id=source_replica_id,
            source_directory_id=source_directory_id,
            cluster_id=cluster_id,
        )


class ResponseHeader(_Header, frozen=True):
    """What precedes every response body: the correlation id of the request it answers.

    Like Kafka's response header it holds no error code: every response body has its own
    top-level ``error_code``.
    """

    correlation_id: int


class RequestFrame(_Header, frozen=True):
    """A request on the wire: header and body."""

    header: RequestHeader
    body: Request


class ResponseFrame(_Header, frozen=True):
    """A response on the wire: header and body."""

    header: ResponseHeader
    body: Response


# One encoder and one typed decoder per direction, built once. Directory and topic ids go out
# as 16-byte msgpack bin (the decoder also reads the canonical string form).
_REQUEST_ENCODER = msgspec.msgpack.Encoder(uuid_format="bytes")
_RESPONSE_ENCODER = msgspec.msgpack.Encoder(uuid_format="bytes")
_REQUEST_DECODER = msgspec.msgpack.Decoder(RequestFrame)
_RESPONSE_DECODER = msgspec.msgpack.Decoder(ResponseFrame)

# What msgspec raises on bytes it cannot read into the frame type; ValueError and
# RecursionError are listed in case a future msgspec lets one escape.
_DECODE_ERRORS = (msgspec.MsgspecError, ValueError, RecursionError, OverflowError)
_ENCODE_ERRORS = (msgspec.MsgspecError, TypeError, ValueError, OverflowError)


def _frame_bytes(
    encoder: msgspec.msgpack.Encoder,
    frame: msgspec.Struct,
    body_name: str,
    max_frame_size: int,
) -> bytes:
    """``frame`` (a header and a body: this module's frames, or the controller's,
    :mod:`kraft.protocol.controller_frame`) with its length prefix."""
    buffer = bytearray(FRAME_LENGTH_SIZE)
    try:
        encoder.encode_into(frame, buffer, FRAME_LENGTH_SIZE)
    except _ENCODE_ERRORS as exc:
        raise MessageEncodeError(f"cannot encode {body_name}: {exc}") from exc
    size = len(buffer) - FRAME_LENGTH_SIZE
    if size > min(max_frame_size, MAX_FRAME_SIZE_LIMIT):
        raise FrameTooLargeError(size, max_frame_size)
    buffer[:FRAME_LENGTH_SIZE] = size.to_bytes(FRAME_LENGTH_SIZE, "big")
    return bytes(buffer)


def encode_request(
    header: RequestHeader, body: Request, *, max_frame_size: int = MAX_FRAME_SIZE_LIMIT
) -> bytes:
    """One request frame, length prefix included.

    Raises :class:`FrameTooLargeError` if the frame would be above ``max_frame_size``, and
    :class:`MessageEncodeError` if a field cannot be encoded.
    """
    return _frame_bytes(
        _REQUEST_ENCODER, RequestFrame(header, body), type(body).__name__, max_frame_size
    )


def encode_response(
    header: ResponseHeader, body: Response, *, max_frame_size: int = MAX_FRAME_SIZE_LIMIT
) -> bytes:
    """One response frame, length prefix included (errors as :func:`encode_request`)."""
    return _frame_bytes(
        _RESPONSE_ENCODER, ResponseFrame(header, body), type(body).__name__, max_frame_size
    )


class FrameBudget:
    """Bytes that decoders sharing it may hold in partial frames, beyond their free part.

    Not thread-safe: the decoders sharing one run on one thread (the runtime's trio thread).
    ``in_use`` may be read from another thread (a metrics scrape): an int read is atomic.
    """

    __slots__ = ("in_use", "limit")

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"a frame budget cannot be negative, got {limit}")
        self.limit = limit
        #: Bytes reserved now.
        self.in_use = 0

    def try_reserve(self, size: int) -> bool:
        """Reserve ``size`` more bytes; ``False`` (nothing reserved) if they do not fit."""
        if self.in_use + size > self.limit:
            return False
        self.in_use += size
        return True

    def release(self, size: int) -> None:
        """Give back ``size`` reserved bytes."""
        self.in_use -= size


#: What a decoder hands out: a frame of this module, or of kraft.protocol.controller_frame.
FrameT = TypeVar("FrameT")


class FrameDecoder(ABC, Generic[FrameT]):
    """Turns a byte stream into frames, sans-IO: ``feed`` bytes, then take frames.

    ::

        decoder = RequestFrameDecoder(max_frame_size=config_max)
        decoder.feed(chunk)          # any size, any split
        for frame in decoder:        # every frame now complete
            handle(frame)
        decoder.feed_eof()           # at end of stream: raises if a frame was cut short

    See the module docstring for the errors and why the decoder stays broken after one.
    """

    def __init__(
        self,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        *,
        budget: FrameBudget | None = None,
        free_bytes: int = DEFAULT_FREE_PARTIAL_BYTES,
    ) -> None:
        if not 0 < max_frame_size <= MAX_FRAME_SIZE_LIMIT:
            raise ValueError(
                f"max_frame_size must be in [1, {MAX_FRAME_SIZE_LIMIT}], got {max_frame_size}"
            )
        if free_bytes < 0:
            raise ValueError(f"free_bytes cannot be negative, got {free_bytes}")
        self._max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._start = 0  # where the unconsumed bytes begin in _buffer
        self._length: int | None = None  # body length of the frame in progress, once known
        self._error: FrameError | None = None
        self._budget = budget
        self._free_bytes = free_bytes
        self._reserved = 0  # bytes this decoder holds reserved from the budget

    @property
    def max_frame_size(self) -> int:
        """The largest frame body this decoder accepts, in bytes."""
        return self._max_frame_size

    @property
    def buffered_bytes(self) -> int:
        """Bytes fed but not yet handed out as frames (length prefixes included)."""
        pending = len(self._buffer) - self._start
        return pending + (FRAME_LENGTH_SIZE if self._length is not None else 0)

    @property
    def reserved_bytes(self) -> int:
        """Bytes this decoder holds reserved from its budget (0 without one)."""
        return self._reserved

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes read from the stream.

        Raises :class:`FrameTooLargeError` at once if they complete a length prefix above the
        maximum, so that the caller never reads that frame's body.
        """
        self._raise_if_broken()
        self._buffer += data
        self._read_length()

    def feed_eof(self) -> None:
        """The stream has ended: raises :class:`MalformedFrameError` if a frame is incomplete."""
        self._raise_if_broken()
        if self.buffered_bytes:
            raise self._fail(
                MalformedFrameError(f"stream ended inside a frame ({self.buffered_bytes} bytes)")
            )

    def next_frame(self) -> FrameT | None:
        """The next complete frame, or ``None`` until more bytes are fed."""
        self._raise_if_broken()
        self._read_length()
        length = self._length
        if length is None or len(self._buffer) - self._start < length:
            self._settle_reservation()
            return None
        end = self._start + length
        view = memoryview(self._buffer)[self._start : end]
        try:
            frame = self._decode(view)
        except FrameError as exc:
            self._fail(exc)
            raise
        except _DECODE_ERRORS as exc:
            raise self._fail(MalformedFrameError(f"malformed frame: {exc}")) from exc
        finally:
            view.release()  # a bytearray cannot be resized while a view of it is alive
        self._start = end
        self._length = None
        self._compact()
        # Check the next length now (a too-large one breaks the decoder for the next call) so
        # that the caller stops reading before that frame's body; this frame is still handed out.
        with contextlib.suppress(FrameError):
            self._read_length()
        return frame

    def __iter__(self) -> Iterator[FrameT]:
        """Every frame that is complete now."""
        while (frame := self.next_frame()) is not None:
            yield frame

    def close(self) -> None:
        """Let go of the buffered bytes and give back the reservation (idempotent); the
        decoder is unusable afterwards. Call it when the connection ends."""
        if self._error is None:
            self._fail(MalformedFrameError("the decoder is closed"))

    @abstractmethod
    def _decode(self, payload: memoryview) -> FrameT:
        """Decode one frame body; raise a msgspec error or a FrameError when it is not one."""

    def _read_length(self) -> None:
        if self._length is not None or len(self._buffer) - self._start < FRAME_LENGTH_SIZE:
            return
        prefix_end = self._start + FRAME_LENGTH_SIZE
        length = int.from_bytes(self._buffer[self._start : prefix_end], "big")
        if length > self._max_frame_size:
            raise self._fail(FrameTooLargeError(length, self._max_frame_size))
        if length == 0:
            raise self._fail(MalformedFrameError("frame of length 0"))
        self._start = prefix_end
        self._length = length

    def _compact(self) -> None:
        # Drop consumed bytes once they are at least half the buffer: amortised O(1) per byte.
        # CPython reallocates a bytearray that shrinks below half its allocation, so a large
        # frame's memory goes back once it is handed out, not when the connection ends.
        if self._start and self._start * 2 >= len(self._buffer):
            del self._buffer[: self._start]
            self._start = 0

    def _settle_reservation(self) -> None:
        """Reserve (or give back) what the partial frame now holds beyond the free part."""
        budget = self._budget
        if budget is None:
            return
        held = self.buffered_bytes
        wanted = max(0, held - self._free_bytes)
        if wanted > self._reserved:
            if not budget.try_reserve(wanted - self._reserved):
                raise self._fail(FrameBudgetExceededError(held, budget.limit))
        elif wanted < self._reserved:
            budget.release(self._reserved - wanted)
        self._reserved = wanted

    def _fail(self, error: FrameError) -> FrameError:
        self._error = error
        self._buffer = bytearray()
        self._start = 0
        self._length = None
        if self._budget is not None:
            self._budget.release(self._reserved)
        self._reserved = 0
        return error

    def _raise_if_broken(self) -> None:
        if self._error is not None:
            raise self._error


class RequestFrameDecoder(FrameDecoder[RequestFrame]):
    """A :class:`FrameDecoder` for the requests a replica receives."""

    def _decode(self, payload: memoryview) -> RequestFrame:
        frame = _REQUEST_DECODER.decode(payload)
        if frame.header.api_key != frame.body.API_KEY:
            raise MalformedFrameError(
                f"header API key {frame.header.api_key} but a "
                f"{type(frame.body).__name__} body (API key {int(frame.body.API_KEY)})"
            )
        return frame


class ResponseFrameDecoder(FrameDecoder[ResponseFrame]):
    """A :class:`FrameDecoder` for the responses a replica receives."""

    def _decode(self, payload: memoryview) -> ResponseFrame:
        return _RESPONSE_DECODER.decode(payload)


def _decode_one(decoder: FrameDecoder[FrameT], data: bytes | bytearray | memoryview) -> FrameT:
    decoder.feed(data)
    frame = decoder.next_frame()
    decoder.feed_eof()  # raises for a cut-short frame, trailing bytes, or a broken decoder
    if frame is None:
        raise MalformedFrameError("no frame in 0 bytes")
    return frame


def decode_request(
    data: bytes | bytearray | memoryview, *, max_frame_size: int = MAX_FRAME_SIZE_LIMIT
) -> RequestFrame:
    """Decode bytes that hold exactly one whole request frame (length prefix included)."""
    return _decode_one(RequestFrameDecoder(max_frame_size), data)


def decode_response(
    data: bytes | bytearray | memoryview, *, max_frame_size: int = MAX_FRAME_SIZE_LIMIT
) -> ResponseFrame:
    """Decode bytes that hold exactly one whole response frame (length prefix included)."""
    return _decode_one(ResponseFrameDecoder(max_frame_size), data)
