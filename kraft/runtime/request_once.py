"""``request_once``: one request on its own connection, for command-line tools
(``kraft quorum describe``); ``controller_request_once`` the same for the controller's APIs
(``kraft topics``, ``kraft broker simulate``). The replicas' long-lived connections are
:class:`~kraft.runtime.transport.TrioNetworkChannel`'s."""

from __future__ import annotations

import ssl
from typing import TypeVar

import trio

from kraft.config import Endpoint
from kraft.errors import TransportError
from kraft.protocol.controller_frame import (
    ControllerResponseFrame,
    ControllerResponseFrameDecoder,
    controller_request_header,
    encode_controller_request,
)
from kraft.protocol.controller_messages import ControllerRequest, ControllerResponse
from kraft.protocol.errors import FrameError
from kraft.protocol.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    RequestHeader,
    ResponseFrame,
    ResponseFrameDecoder,
    encode_request,
)
from kraft.protocol.messages import Request, Response
from kraft.runtime.connection import IO_ERRORS, READ_CHUNK_SIZE, describe_error
from kraft.runtime.tls import TlsConfig

__all__ = ["controller_request_once", "request_once"]

F = TypeVar("F", ResponseFrame, ControllerResponseFrame)


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
    header = RequestHeader.for_body(body, _CORRELATION_ID, cluster_id=cluster_id)
    try:
        data = encode_request(header, body, max_frame_size=max_frame_size)
    except FrameError as exc:
        raise TransportError(f"cannot send {type(body).__name__} to {address}: {exc}") from exc
    frame = _exchange(
        address, data, type(body).__name__, context, ResponseFrameDecoder(max_frame_size), timeout_s
    )
    if frame.body.API_KEY != body.API_KEY:
        raise TransportError(
            f"{address} answered {type(body).__name__} with a {type(frame.body).__name__}"
        )
    return frame.body


def controller_request_once(
    address: Endpoint,
    body: ControllerRequest,
    *,
    cluster_id: str | None,
    timeout_s: float,
    tls: TlsConfig | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
) -> ControllerResponse:
    """:func:`request_once` for a controller's API (a controller node answers it)."""
    context = tls.client_context() if tls is not None else None
    header = controller_request_header(body, _CORRELATION_ID, cluster_id=cluster_id)
    try:
        data = encode_controller_request(header, body, max_frame_size=max_frame_size)
    except FrameError as exc:
        raise TransportError(f"cannot send {type(body).__name__} to {address}: {exc}") from exc
    decoder = ControllerResponseFrameDecoder(max_frame_size)
    frame = _exchange(address, data, type(body).__name__, context, decoder, timeout_s)
    if frame.body.API_KEY != body.API_KEY:
        raise TransportError(
            f"{address} answered {type(body).__name__} with a {type(frame.body).__name__}"
        )
    return frame.body


#: The one request of a connection goes under this correlation id.
_CORRELATION_ID = 1


def _exchange(
    address: Endpoint,
    data: bytes,
    name: str,
    context: ssl.SSLContext | None,
    decoder: FrameDecoder[F],
    timeout_s: float,
) -> F:
    try:
        return trio.run(_request_once, address, data, context, decoder, timeout_s)
    except trio.TooSlowError:
        raise TransportError(f"{address}: no answer to {name} within {timeout_s} s") from None


async def _request_once(
    address: Endpoint,
    data: bytes,
    context: ssl.SSLContext | None,
    decoder: FrameDecoder[F],
    timeout_s: float,
) -> F:
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
                return await _read_one_response(stream, decoder, address)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise TransportError(
                    f"connection to {address} failed: {describe_error(exc)}"
                ) from exc
        finally:
            await trio.aclose_forcefully(stream)


async def _read_one_response(
    stream: trio.abc.Stream, decoder: FrameDecoder[F], address: Endpoint
) -> F:
    try:
        while data := await stream.receive_some(READ_CHUNK_SIZE):
            decoder.feed(data)
            frame = decoder.next_frame()
            if frame is None:
                continue
            if frame.header.correlation_id != _CORRELATION_ID:
                raise TransportError(
                    f"{address} answered correlation id {frame.header.correlation_id}, "
                    f"expected {_CORRELATION_ID}"
                )
            return frame
        decoder.feed_eof()
    except FrameError as exc:
        raise TransportError(f"{address} sent a bad response: {exc}") from exc
    raise TransportError(f"{address} closed the connection without answering")
