"""Frames of the controller's APIs (:mod:`kraft.protocol.controller_messages`).

The bytes are those of :mod:`kraft.protocol.frame` (a length prefix, then the msgpack array
``[header, body]`` with a :class:`~kraft.protocol.frame.RequestHeader` or
:class:`~kraft.protocol.frame.ResponseHeader`); only the body is a controller message, which a
Raft replica's decoder does not read. A controller node's listener reads both kinds with
:class:`NodeRequestFrameDecoder`: the header's API key says which decoder reads the body, so a
Raft request is decoded exactly as a Raft replica decodes it. A tool reads a controller's
answers with :class:`ControllerResponseFrameDecoder`.
"""

from __future__ import annotations

from typing import Final

import msgspec

from kraft.protocol.api import KRAFT_VERSION_FEATURE
from kraft.protocol.controller_messages import (
    CONTROLLER_MAX_VERSIONS,
    CONTROLLER_REQUEST_DECODER,
    ControllerRequest,
    ControllerResponse,
)
from kraft.protocol.errors import MalformedFrameError
from kraft.protocol.frame import (
    MAX_FRAME_SIZE_LIMIT,
    FrameDecoder,
    RequestFrame,
    RequestHeader,
    ResponseHeader,
    _frame_bytes,
)
from kraft.protocol.messages import ApiVersionsRequest, Request, UpdateFeaturesRequest

__all__ = [
    "ControllerRequestFrame",
    "ControllerResponseFrame",
    "ControllerResponseFrameDecoder",
    "NodeRequestFrameDecoder",
    "controller_request_header",
    "encode_controller_request",
    "encode_controller_response",
]


class ControllerRequestFrame(msgspec.Struct, frozen=True, array_like=True):
    """A controller request on the wire: header and body."""

    header: RequestHeader
    body: ControllerRequest


class ControllerResponseFrame(msgspec.Struct, frozen=True, array_like=True):
    """A controller response on the wire: header and body."""

    header: ResponseHeader
    body: ControllerResponse


class _RawRequestFrame(msgspec.Struct, frozen=True, array_like=True):
    header: RequestHeader
    body: msgspec.Raw


_ENCODER: Final = msgspec.msgpack.Encoder(uuid_format="bytes")
_RAW_REQUEST_DECODER: Final = msgspec.msgpack.Decoder(_RawRequestFrame)
_RAFT_REQUEST_DECODER: Final = msgspec.msgpack.Decoder(Request)
_RESPONSE_FRAME_DECODER: Final = msgspec.msgpack.Decoder(ControllerResponseFrame)


def controller_request_header(
    body: ControllerRequest, correlation_id: int, *, cluster_id: str | None = None
) -> RequestHeader:
    """The header of ``body`` from an anonymous client, at the version kraft speaks."""
    return RequestHeader(
        api_key=int(body.API_KEY),
        api_version=body.MAX_VERSION,
        correlation_id=correlation_id,
        cluster_id=cluster_id,
    )


def encode_controller_request(
    header: RequestHeader, body: ControllerRequest, *, max_frame_size: int = MAX_FRAME_SIZE_LIMIT
) -> bytes:
    """One controller request frame, length prefix included (errors as
    :func:`~kraft.protocol.frame.encode_request`)."""
    frame = ControllerRequestFrame(header, body)
    return _frame_bytes(_ENCODER, frame, type(body).__name__, max_frame_size)


def encode_controller_response(
    header: ResponseHeader, body: ControllerResponse, *, max_frame_size: int = MAX_FRAME_SIZE_LIMIT
) -> bytes:
    """One controller response frame, length prefix included."""
    frame = ControllerResponseFrame(header, body)
    return _frame_bytes(_ENCODER, frame, type(body).__name__, max_frame_size)


class NodeRequestFrameDecoder(FrameDecoder[RequestFrame | ControllerRequestFrame]):
    """A :class:`~kraft.protocol.frame.FrameDecoder` for a controller node's listener: Raft
    requests and controller requests, told apart by the header's API key; an UpdateFeatures
    that names a feature other than ``kraft.version``, and ApiVersions, are the
    controller's."""

    def _decode(self, payload: memoryview) -> RequestFrame | ControllerRequestFrame:
        raw = _RAW_REQUEST_DECODER.decode(payload)
        header, body_bytes = raw.header, raw.body
        # The raw body holds the caller's buffer, which must be free again when this returns
        # or raises (the caller then resizes it): no reference may stay in a traceback.
        del raw
        try:
            if header.api_key in CONTROLLER_MAX_VERSIONS:
                controller_body = CONTROLLER_REQUEST_DECODER.decode(body_bytes)
                _check_api_key(header, controller_body)
                return ControllerRequestFrame(header, controller_body)
            raft_body = _RAFT_REQUEST_DECODER.decode(body_bytes)
            _check_api_key(header, raft_body)
            if isinstance(raft_body, ApiVersionsRequest) or (
                isinstance(raft_body, UpdateFeaturesRequest)
                and any(u.feature != KRAFT_VERSION_FEATURE for u in raft_body.feature_updates)
            ):
                # The Raft client finalizes kraft.version alone; every other feature is the
                # controller's (Kafka's ControllerApis.handleUpdateFeatures), and so is the
                # answer naming them all (ControllerApis.handleApiVersionsRequest).
                return ControllerRequestFrame(header, raft_body)
            return RequestFrame(header, raft_body)
        finally:
            del body_bytes


def _check_api_key(header: RequestHeader, body: Request | ControllerRequest) -> None:
    if header.api_key != body.API_KEY:
        raise MalformedFrameError(
            f"header API key {header.api_key} but a "
            f"{type(body).__name__} body (API key {int(body.API_KEY)})"
        )


class ControllerResponseFrameDecoder(FrameDecoder[ControllerResponseFrame]):
    """A :class:`~kraft.protocol.frame.FrameDecoder` for a controller's answers."""

    def _decode(self, payload: memoryview) -> ControllerResponseFrame:
        return _RESPONSE_FRAME_DECODER.decode(payload)
