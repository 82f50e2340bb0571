"""The envelopes the Raft core sends and receives: a message plus who and when.

The core never sees frames or bytes. It hands an :class:`OutboundRequest` or an
:class:`OutboundResponse` to its ``NetworkChannel`` and reads :class:`InboundRequest` and
:class:`InboundResponse` from its message queue (docs/protocol.md). The runtime turns them into
frames and back (:meth:`OutboundRequest.to_frame`, :meth:`InboundRequest.from_frame`, ...); the
simulator passes them along as they are. Times are the core's clock, in milliseconds.
"""

from __future__ import annotations

import uuid

import msgspec

from kraft.common.uuids import ZERO_UUID
from kraft.protocol.frame import RequestFrame, RequestHeader, ResponseFrame, ResponseHeader
from kraft.protocol.messages import Request, Response

__all__ = ["InboundRequest", "InboundResponse", "OutboundRequest", "OutboundResponse"]


class OutboundRequest(msgspec.Struct, frozen=True):
    """A request the core sends to replica ``destination``, created at ``created_ms``.

    ``destination_address`` is where the core believes ``destination`` listens (host, port):
    from the voter set, the leader's endpoints or an AddRaftVoter request (KIP-853). ``None``:
    the core knows no address, and the channel uses the one it was configured with. The
    runtime's channel connects there (moving an existing connection when it changed); the
    simulator routes by id and ignores it.
    """

    correlation_id: int
    destination: int
    body: Request
    created_ms: int
    destination_address: tuple[str, int] | None = None

    def to_frame(
        self,
        *,
        source_replica_id: int,
        source_directory_id: uuid.UUID = ZERO_UUID,
        cluster_id: str | None = None,
    ) -> RequestFrame:
        """The frame that carries this request, at the body's highest version."""
        header = RequestHeader.for_body(
            self.body,
            self.correlation_id,
            source_replica_id=source_replica_id,
            source_directory_id=source_directory_id,
            cluster_id=cluster_id,
        )
        return RequestFrame(header, self.body)


class InboundRequest(msgspec.Struct, frozen=True):
    """A request from replica ``source`` (-1: anonymous), received at ``received_ms``.

    ``cluster_id`` is the sender's (``None``: not given, accepted as in Kafka).
    ``api_version`` is the version the sender used; ``None`` when the request did not cross a
    wire (the simulator), which means the body's ``MAX_VERSION``.
    ``peer_id`` is the replica id the sender proved with its TLS client certificate (identity
    binding, docs/operations.md "Security"): -1 when its certificate names no replica, ``None``
    when the transport does not authenticate replica ids (plaintext, TLS without identity
    binding, the simulator). The core refuses a request that claims another id
    (``kraft.raft.rpc.PeerCheck``).
    """

    correlation_id: int
    source: int
    source_directory_id: uuid.UUID
    cluster_id: str | None
    body: Request
    received_ms: int
    api_version: int | None = None
    peer_id: int | None = None

    @classmethod
    def from_frame(
        cls,
        frame: RequestFrame,
        received_ms: int,
        *,
        correlation_id: int | None = None,
        peer_id: int | None = None,
    ) -> InboundRequest:
        """The envelope of a decoded request frame: under the frame's correlation id, or
        under ``correlation_id`` (a transport numbers the requests of all its connections in
        one space), from the authenticated ``peer_id`` if the transport knows it."""
        header = frame.header
        return cls(
            correlation_id=header.correlation_id if correlation_id is None else correlation_id,
            source=header.source_replica_id,
            source_directory_id=header.source_directory_id,
            cluster_id=header.cluster_id,
            body=frame.body,
            received_ms=received_ms,
            api_version=header.api_version,
            peer_id=peer_id,
        )

    @property
    def version(self) -> int:
        """The API version to read the request at (see ``api_version``)."""
        return self.body.MAX_VERSION if self.api_version is None else self.api_version


class OutboundResponse(msgspec.Struct, frozen=True):
    """The core's response to request ``correlation_id`` from replica ``destination``."""

    correlation_id: int
    destination: int
    body: Response

    def to_frame(self) -> ResponseFrame:
        """The frame that carries this response."""
        return ResponseFrame(ResponseHeader(self.correlation_id), self.body)


class InboundResponse(msgspec.Struct, frozen=True):
    """A response from replica ``source`` to the core's request ``correlation_id``."""

    correlation_id: int
    source: int
    body: Response
    received_ms: int

    @classmethod
    def from_frame(cls, frame: ResponseFrame, source: int, received_ms: int) -> InboundResponse:
        """The envelope of a decoded response frame; ``source`` is the peer the connection
        leads to (a response does not name its sender)."""
        return cls(
            correlation_id=frame.header.correlation_id,
            source=source,
            body=frame.body,
            received_ms=received_ms,
        )
