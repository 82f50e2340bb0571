"""Envelopes to frames and back, and the wire layer's place in the sans-IO core."""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

from kraft.protocol import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    InboundRequest,
    InboundResponse,
    OutboundRequest,
    OutboundResponse,
    RequestFrameDecoder,
    ResponseFrameDecoder,
    VoteRequest,
    encode_request,
    encode_response,
)

DIRECTORY_ID = uuid.UUID("8d6a1c86-6f4c-4d4f-9a53-1f7f9c2b0e11")


def test_outbound_request_arrives_as_inbound_request() -> None:
    body = BeginQuorumEpochRequest(leader_id=1, leader_epoch=4, voter_id=2)
    outbound = OutboundRequest(correlation_id=11, destination=2, body=body, created_ms=1000)
    frame = outbound.to_frame(
        source_replica_id=1, source_directory_id=DIRECTORY_ID, cluster_id="cluster-a"
    )
    decoder = RequestFrameDecoder()
    decoder.feed(encode_request(frame.header, frame.body))
    (received,) = list(decoder)

    inbound = InboundRequest.from_frame(received, received_ms=1005)
    assert inbound == InboundRequest(
        correlation_id=11,
        source=1,
        source_directory_id=DIRECTORY_ID,
        cluster_id="cluster-a",
        body=body,
        received_ms=1005,
        api_version=1,
    )
    assert inbound.version == BeginQuorumEpochRequest.MAX_VERSION


def test_outbound_response_arrives_as_inbound_response() -> None:
    body = BeginQuorumEpochResponse(leader_id=1, leader_epoch=4)
    outbound = OutboundResponse(correlation_id=11, destination=1, body=body)
    frame = outbound.to_frame()
    decoder = ResponseFrameDecoder()
    decoder.feed(encode_response(frame.header, frame.body))
    (received,) = list(decoder)
    assert InboundResponse.from_frame(received, source=2, received_ms=9) == InboundResponse(
        correlation_id=11, source=2, body=body, received_ms=9
    )


def test_simulated_request_reads_at_the_latest_version() -> None:
    body = VoteRequest(replica_epoch=1, replica_id=1, last_offset_epoch=0, last_offset=0)
    inbound = InboundRequest(1, 1, DIRECTORY_ID, None, body, 0)
    assert inbound.version == 2


FORBIDDEN = {"trio", "socket", "threading", "time", "random", "asyncio", "selectors"}
# The wire layer sits at the bottom of the stack with the record codec.
FORBIDDEN_KRAFT = ("kraft.log", "kraft.raft", "kraft.runtime", "kraft.simulation")


def test_protocol_is_part_of_the_sans_io_core() -> None:
    package = Path(__file__).parents[2] / "kraft" / "protocol"
    sources = sorted(package.glob("*.py"))
    assert sources
    for source in sources:
        tree = ast.parse(source.read_text(), filename=str(source))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{source.name} imports {name}"
                assert not name.startswith(FORBIDDEN_KRAFT), f"{source.name} imports {name}"
