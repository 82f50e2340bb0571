"""Every request and response survives encode -> FrameDecoder (fed in random chunks) unchanged,
carries Kafka's API key as its tag, and keeps its field order (fields are only appended)."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.common.limits import INT64_MAX, INT64_MIN
from kraft.common.uuids import ZERO_UUID
from kraft.log.api import OffsetAndEpoch
from kraft.protocol import (
    MAX_VERSIONS,
    METADATA_TOPIC_ID,
    METADATA_TOPIC_NAME,
    REQUEST_TYPES,
    RESPONSE_TYPE_FOR,
    RESPONSE_TYPES,
    ApiKey,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Request,
    RequestFrame,
    RequestFrameDecoder,
    RequestHeader,
    Response,
    ResponseFrame,
    ResponseFrameDecoder,
    ResponseHeader,
    SnapshotId,
    VoteRequest,
    VoteResponse,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

INT64 = st.integers(INT64_MIN, INT64_MAX)


def strategy_for(tp: mi.Type) -> st.SearchStrategy[Any]:
    """A strategy for any msgspec type the wire messages use, read from their annotations, so
    that a field appended later is covered without touching this file."""
    if isinstance(tp, mi.IntType):
        return INT64
    if isinstance(tp, mi.BoolType):
        return st.booleans()
    if isinstance(tp, mi.StrType):
        return st.text(max_size=12)
    if isinstance(tp, mi.BytesType):
        return st.binary(max_size=64)
    if isinstance(tp, mi.UUIDType):
        return st.uuids() | st.just(ZERO_UUID)
    if isinstance(tp, mi.NoneType):
        return st.none()
    if isinstance(tp, mi.UnionType):
        return st.one_of([strategy_for(t) for t in tp.types])
    if isinstance(tp, mi.VarTupleType):
        return st.lists(strategy_for(tp.item_type), max_size=3).map(tuple)
    if isinstance(tp, mi.StructType):
        return struct_strategy(tp.cls)
    raise AssertionError(f"no strategy for {tp}")


def struct_strategy(cls: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    fields = {f.name: strategy_for(f.type) for f in info.fields}
    return st.fixed_dictionaries(fields).map(lambda kwargs: cls(**kwargs))


requests: st.SearchStrategy[Request] = st.one_of([struct_strategy(c) for c in REQUEST_TYPES])
responses: st.SearchStrategy[Response] = st.one_of([struct_strategy(c) for c in RESPONSE_TYPES])
request_headers = struct_strategy(RequestHeader)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=300)
@given(
    frames=st.lists(st.tuples(request_headers, requests), min_size=1, max_size=5),
    cuts=st.lists(st.integers(0, 10**6), max_size=12),
)
def test_requests_round_trip_through_chunked_decoder(
    frames: list[tuple[RequestHeader, Request]], cuts: list[int]
) -> None:
    # The header must name the body's API key: the decoder checks it.
    frames = [(msgspec.structs.replace(h, api_key=int(b.API_KEY)), b) for h, b in frames]
    stream = b"".join(encode_request(h, b) for h, b in frames)
    decoder = RequestFrameDecoder()
    decoded: list[RequestFrame] = []
    for chunk in split(stream, cuts):
        decoder.feed(chunk)
        decoded.extend(decoder)
    decoder.feed_eof()
    assert [(f.header, f.body) for f in decoded] == frames
    assert decoder.buffered_bytes == 0


@settings(max_examples=300)
@given(
    frames=st.lists(st.tuples(INT64, responses), min_size=1, max_size=5),
    cuts=st.lists(st.integers(0, 10**6), max_size=12),
)
def test_responses_round_trip_through_chunked_decoder(
    frames: list[tuple[int, Response]], cuts: list[int]
) -> None:
    stream = b"".join(encode_response(ResponseHeader(c), b) for c, b in frames)
    decoder = ResponseFrameDecoder()
    decoded: list[ResponseFrame] = []
    for chunk in split(stream, cuts):
        decoder.feed(chunk)
        decoded.extend(decoder)
    decoder.feed_eof()
    assert [(f.header.correlation_id, f.body) for f in decoded] == frames


@given(body=requests)
def test_request_tag_is_the_kafka_api_key(body: Request) -> None:
    raw = encode_request(RequestHeader.for_body(body, 1), body)
    header, wire_body = msgspec.msgpack.decode(raw[4:])
    assert wire_body[0] == header[0] == body.API_KEY
    assert header[1] == body.MAX_VERSION == MAX_VERSIONS[body.API_KEY]


@given(body=responses)
def test_response_tag_is_the_kafka_api_key(body: Response) -> None:
    _header, wire_body = msgspec.msgpack.decode(encode_response(ResponseHeader(1), body)[4:])
    assert wire_body[0] == body.API_KEY


@pytest.mark.parametrize("cls", REQUEST_TYPES + RESPONSE_TYPES, ids=lambda c: c.__name__)
def test_struct_tag_and_class_constants_agree(cls: type[Request | Response]) -> None:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    assert info.array_like
    assert info.tag == int(cls.API_KEY)
    assert cls.__struct_config__.frozen


def test_nested_structs_are_not_tagged() -> None:
    # A nested struct that inherited a tag_field would be tagged with its class name.
    nested = {
        t.cls
        for cls in REQUEST_TYPES + RESPONSE_TYPES
        for f in mi.type_info(cls).fields  # type: ignore[attr-defined]
        for t in _structs_in(f.type)
    }
    assert nested
    for cls in nested:
        assert mi.type_info(cls).tag is None, cls  # type: ignore[attr-defined]


def _structs_in(tp: mi.Type) -> list[mi.StructType]:
    if isinstance(tp, mi.StructType):
        return [tp, *(s for f in tp.fields for s in _structs_in(f.type))]
    if isinstance(tp, mi.UnionType):
        return [s for t in tp.types for s in _structs_in(t)]
    if isinstance(tp, mi.VarTupleType):
        return _structs_in(tp.item_type)
    return []


def test_api_keys_are_kafkas() -> None:
    # The "apiKey" of clients/src/main/resources/common/message/*Request.json in apache/kafka.
    assert {k.name: k.value for k in ApiKey} == {
        "FETCH": 1,
        "API_VERSIONS": 18,
        "CREATE_TOPICS": 19,
        "DELETE_TOPICS": 20,
        "DESCRIBE_CONFIGS": 32,
        "CREATE_PARTITIONS": 37,
        "INCREMENTAL_ALTER_CONFIGS": 44,
        "VOTE": 52,
        "BEGIN_QUORUM_EPOCH": 53,
        "END_QUORUM_EPOCH": 54,
        "DESCRIBE_QUORUM": 55,
        "UPDATE_FEATURES": 57,
        "FETCH_SNAPSHOT": 59,
        "DESCRIBE_CLUSTER": 60,
        "BROKER_REGISTRATION": 62,
        "BROKER_HEARTBEAT": 63,
        "ALLOCATE_PRODUCER_IDS": 67,
        "DESCRIBE_TOPIC_PARTITIONS": 75,
        "ADD_RAFT_VOTER": 80,
        "REMOVE_RAFT_VOTER": 81,
        "UPDATE_RAFT_VOTER": 82,
        # kraft's own RPCs (docs/protocol-wire.md), outside Kafka's keys.
        "KRAFT_FORWARD_APPEND": 30000,
        "KRAFT_READ_INDEX": 30001,
    }
    # The top of each message's "validVersions".
    assert dict(MAX_VERSIONS) == {
        ApiKey.VOTE: 2,
        ApiKey.BEGIN_QUORUM_EPOCH: 1,
        ApiKey.END_QUORUM_EPOCH: 1,
        ApiKey.FETCH: 18,
        ApiKey.FETCH_SNAPSHOT: 1,
        ApiKey.DESCRIBE_QUORUM: 2,
        ApiKey.API_VERSIONS: 4,
        ApiKey.ADD_RAFT_VOTER: 1,
        ApiKey.REMOVE_RAFT_VOTER: 0,
        ApiKey.UPDATE_RAFT_VOTER: 0,
        ApiKey.UPDATE_FEATURES: 1,
        ApiKey.KRAFT_FORWARD_APPEND: 0,
        ApiKey.KRAFT_READ_INDEX: 0,
    }


def test_each_request_has_its_response() -> None:
    for request_type, response_type in RESPONSE_TYPE_FOR.items():
        assert request_type.API_KEY == response_type.API_KEY
    assert set(RESPONSE_TYPE_FOR) == set(REQUEST_TYPES)
    assert len({t.API_KEY for t in REQUEST_TYPES}) == len(REQUEST_TYPES)


@given(records=st.binary(max_size=4096))
def test_records_bytes_round_trip_unchanged(records: bytes) -> None:
    fetch = FetchResponse(high_watermark=10, records=records)
    snapshot = FetchSnapshotResponse(size=len(records), position=0, unaligned_records=records)
    for body in (fetch, snapshot):
        decoded = decode_response(encode_response(ResponseHeader(3), body)).body
        assert decoded == body
    assert decode_response(encode_response(ResponseHeader(3), fetch)).body.records == records  # type: ignore[union-attr]


def test_a_large_records_payload_round_trips() -> None:
    records = bytes(range(256)) * (8 * 1024 * 1024 // 256)  # an 8 MiB fetch
    frame = decode_response(encode_response(ResponseHeader(1), FetchResponse(records=records)))
    assert isinstance(frame.body, FetchResponse)
    assert frame.body.records == records


# Field order is the wire format. Pinned here: a change that reorders, renames or removes a
# field fails; appending a field (with a default) does not.
PINNED_FIELDS: dict[type[msgspec.Struct], tuple[str, ...]] = {
    VoteRequest: (
        "replica_epoch", "replica_id", "last_offset_epoch", "last_offset", "pre_vote",
        "replica_directory_id", "voter_id", "voter_directory_id", "topic_name",
        "partition_index",
    ),
    BeginQuorumEpochRequest: (
        "leader_id", "leader_epoch", "voter_id", "voter_directory_id", "leader_endpoints",
        "topic_name", "partition_index",
    ),
    EndQuorumEpochRequest: (
        "leader_id", "leader_epoch", "preferred_candidates", "leader_endpoints", "topic_name",
        "partition_index",
    ),
    FetchRequest: (
        "replica_id", "current_leader_epoch", "fetch_offset", "last_fetched_epoch",
        "max_wait_ms", "max_bytes", "log_start_offset", "replica_directory_id",
        "high_watermark", "topic_name", "topic_id", "partition_index",
    ),
    FetchSnapshotRequest: (
        "replica_id", "current_leader_epoch", "snapshot_id", "position", "max_bytes",
        "replica_directory_id", "topic_name", "partition_index",
    ),
    DescribeQuorumRequest: ("topic_name", "partition_index"),
    VoteResponse: (
        "error_code", "partition_error_code", "leader_id", "leader_epoch", "vote_granted",
        "node_endpoints", "topic_name", "partition_index",
    ),
    BeginQuorumEpochResponse: (
        "error_code", "partition_error_code", "leader_id", "leader_epoch", "node_endpoints",
        "topic_name", "partition_index",
    ),
    EndQuorumEpochResponse: (
        "error_code", "partition_error_code", "leader_id", "leader_epoch", "node_endpoints",
        "topic_name", "partition_index",
    ),
    FetchResponse: (
        "error_code", "partition_error_code", "high_watermark", "log_start_offset", "records",
        "diverging_epoch", "current_leader", "snapshot_id", "node_endpoints", "topic_name",
        "topic_id", "partition_index",
    ),
    FetchSnapshotResponse: (
        "error_code", "partition_error_code", "snapshot_id", "current_leader", "size",
        "position", "unaligned_records", "node_endpoints", "topic_name", "partition_index",
    ),
    DescribeQuorumResponse: (
        "error_code", "error_message", "partition_error_code", "partition_error_message",
        "leader_id", "leader_epoch", "high_watermark", "current_voters", "observers", "nodes",
        "topic_name", "partition_index",
    ),
    RequestHeader: (
        "api_key", "api_version", "correlation_id", "source_replica_id",
        "source_directory_id", "cluster_id",
    ),
    ResponseHeader: ("correlation_id",),
}  # fmt: skip


@pytest.mark.parametrize("cls", list(PINNED_FIELDS), ids=lambda c: c.__name__)
def test_fields_are_only_appended(cls: type[msgspec.Struct]) -> None:
    fields = cls.__struct_fields__
    pinned = PINNED_FIELDS[cls]
    assert fields[: len(pinned)] == pinned
    # Every field past the pinned ones, i.e. every appended field, must have a default.
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    assert all(not f.required for f in info.fields[len(pinned) :])


def test_an_older_peers_shorter_message_decodes_with_defaults() -> None:
    # A v0-era Vote without pre_vote and the fields after it: the defaults fill in.
    old_body = [int(ApiKey.VOTE), 5, 1, 4, 100]
    raw = msgspec.msgpack.encode([[52, 0, 9], old_body])
    frame = decode_request(len(raw).to_bytes(4, "big") + raw)
    assert frame.body == VoteRequest(
        replica_epoch=5, replica_id=1, last_offset_epoch=4, last_offset=100
    )
    assert frame.header.cluster_id is None
    assert frame.body.topic_name == METADATA_TOPIC_NAME


def test_a_newer_peers_appended_fields_are_ignored() -> None:
    body = FetchResponse(high_watermark=7, records=b"abc")
    wire = msgspec.msgpack.decode(encode_response(ResponseHeader(4), body)[4:])
    wire[1].extend([123, "a field from the future"])
    raw = msgspec.msgpack.encode(wire)
    assert decode_response(len(raw).to_bytes(4, "big") + raw).body == body


def test_defaults_name_the_metadata_partition() -> None:
    fetch = FetchRequest(
        replica_id=1, current_leader_epoch=3, fetch_offset=0, last_fetched_epoch=0, max_wait_ms=500
    )
    assert (fetch.topic_name, fetch.topic_id, fetch.partition_index) == (
        "__cluster_metadata",
        METADATA_TOPIC_ID,
        0,
    )
    # Kafka's Uuid.METADATA_TOPIC_ID is ONE_UUID = new Uuid(0L, 1L).
    assert uuid.UUID("00000000-0000-0000-0000-000000000001") == METADATA_TOPIC_ID


def test_offset_and_epoch_conversions() -> None:
    oe = OffsetAndEpoch(offset=100, epoch=3)
    assert SnapshotId.of(oe) == SnapshotId(end_offset=100, epoch=3)
    assert EpochEndOffset.of(oe) == EpochEndOffset(epoch=3, end_offset=100)


def test_messages_are_frozen_and_hashable() -> None:
    body = VoteResponse(leader_id=1, leader_epoch=2, vote_granted=True)
    with pytest.raises(AttributeError):
        body.vote_granted = False  # type: ignore[misc]
    assert hash(body) == hash(VoteResponse(leader_id=1, leader_epoch=2, vote_granted=True))
