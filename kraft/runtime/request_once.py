"""``request_once``: one request on its own connection, for command-line tools
(``kraft quorum describe``); the replicas' long-lived connections are
:class:`~kraft.runtime.transport.TrioNetworkChannel`'s."""

from __future__ import annotations

import ssl

import trio

from kraft.config import Endpoint
from kraft.errors import TransportError
from kraft.protocol.errors import FrameError
from kraft.protocol.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    RequestHeader,
    ResponseFrameDecoder,
    encode_request,
)
from kraft.protocol.messages import Request, Response
from kraft.runtime.connection import IO_ERRORS, READ_CHUNK_SIZE, describe_error
from kraft.runtime.tls import TlsConfig

__all__ = ["request_once"]


def request_once(
    address: Endpoint,
    body: Request,
    *,
    cluster_id: str | None,
    timeout_s: float,
    tls: TlsConfig | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
) -> Response:
    """Send ``body`` to the replica at ``address`` as an anonymous replica (source id -1) and
    return the response body.

    Opens one connection in the calling thread (its own ``trio.run``) and closes it. Raises
    :class:`TransportError`, naming the address and what failed, when the connection cannot be
    opened, no answer arrives within ``timeout_s``, or the answer is not a response to
    ``body``. An error *in* the response (its ``error_code``) is returned, not raised.
    """
    context = tls.client_context() if tls is not None else None
    correlation_id = 1
    header = RequestHeader.for_body(body, correlation_id, cluster_id=cluster_id)
    try:
        data = encode_request(header, body, max_frame_size=max_frame_size)
    except FrameError as exc:
        raise TransportError(f"cannot send {type(body).__name__} to {address}: {exc}") from exc
    name = type(body).__name__
    try:
        frame_body = trio.run(
            _request_once, address, data, correlation_id, context, max_frame_size, timeout_s
        )
    except trio.TooSlowError:
        raise TransportError(f"{address}: no answer to {name} within {timeout_s} s") from None
    if frame_body.API_KEY != body.API_KEY:
        raise TransportError(f"{address} answered {name} with a {type(frame_body).__name__}")
    return frame_body


async def _request_once(
    address: Endpoint,
    data: bytes,
    correlation_id: int,
    context: ssl.SSLContext | None,
    max_frame_size: int,
    timeout_s: float,
) -> Response:
    with trio.fail_after(timeout_s):
        try:
            stream: trio.abc.Stream = await trio.open_tcp_stream(address.host, address.port)
        except OSError as exc:
            raise TransportError(f"cannot connect to {address}: {exc}") from exc
        try:
            if context is not None:
                stream = trio.SSLStream(stream, context, server_hostname=address.host)
                try:
                    await stream.do_handshake()
                except IO_ERRORS as exc:
                    raise TransportError(
                        f"TLS handshake with {address} failed: {describe_error(exc)}"
                    ) from exc
            try:
                await stream.send_all(data)
                return await _read_one_response(stream, correlation_id, max_frame_size, address)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise TransportError(
                    f"connection to {address} failed: {describe_error(exc)}"
                ) from exc
        finally:
            await trio.aclose_forcefully(stream)


async def _read_one_response(
    stream: trio.abc.Stream, correlation_id: int, max_frame_size: int, address: Endpoint
) -> Response:
    decoder = ResponseFrameDecoder(max_frame_size)
    try:
        while data := await stream.receive_some(READ_CHUNK_SIZE):
            decoder.feed(data)
            frame = decoder.next_frame()
            if frame is None:
                continue
            if frame.header.correlation_id != correlation_id:
                raise TransportError(
                    f"{address} answered correlation id {frame.header.correlation_id}, "
                    f"expected {correlation_id}"
                )
            return frame.body
        decoder.feed_eof()
    except FrameError as exc:
        raise TransportError(f"{address} sent a bad response: {exc}") from exc
    raise TransportError(f"{address} closed the connection without answering")
