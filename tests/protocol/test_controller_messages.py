"""The controller APIs' messages: Kafka's API keys and versions, tagged like the Raft messages,
and every message survives its decoder."""

from __future__ import annotations

from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.protocol.api import MAX_VERSIONS
from kraft.protocol.controller_messages import (
    CONTROLLER_MAX_VERSIONS,
    CONTROLLER_REQUEST_DECODER,
    CONTROLLER_REQUEST_TYPES,
    CONTROLLER_RESPONSE_DECODER,
    CONTROLLER_RESPONSE_TYPE_FOR,
    CONTROLLER_RESPONSE_TYPES,
    BrokerHeartbeatResponse,
    ControllerRequest,
    ControllerResponse,
    CreatableTopic,
    CreateTopicsRequest,
)


def strategy_for(tp: mi.Type) -> st.SearchStrategy[Any]:
    if isinstance(tp, mi.IntType):
        return st.integers(-(2**63), 2**63 - 1)
    if isinstance(tp, mi.BoolType):
        return st.booleans()
    if isinstance(tp, mi.StrType):
        return st.text(max_size=8)
    if isinstance(tp, mi.UUIDType):
        return st.uuids()
    if isinstance(tp, mi.NoneType):
        return st.none()
    if isinstance(tp, mi.UnionType):
        return st.one_of([strategy_for(t) for t in tp.types])
    if isinstance(tp, mi.VarTupleType):
        return st.lists(strategy_for(tp.item_type), max_size=2).map(tuple)
    if isinstance(tp, mi.StructType):
        fields = {f.name: strategy_for(f.type) for f in tp.fields}
        return st.fixed_dictionaries(fields).map(lambda kwargs: tp.cls(**kwargs))
    raise AssertionError(f"no strategy for {tp}")


requests: st.SearchStrategy[ControllerRequest] = st.one_of(
    [strategy_for(mi.type_info(c)) for c in CONTROLLER_REQUEST_TYPES]
)
responses: st.SearchStrategy[ControllerResponse] = st.one_of(
    [strategy_for(mi.type_info(c)) for c in CONTROLLER_RESPONSE_TYPES]
)


@given(body=requests)
def test_requests_round_trip_and_are_tagged_with_the_api_key(body: ControllerRequest) -> None:
    raw = msgspec.msgpack.encode(body)
    assert msgspec.msgpack.decode(raw)[0] == body.API_KEY
    assert CONTROLLER_REQUEST_DECODER.decode(raw) == body


@given(body=responses)
def test_responses_round_trip_and_are_tagged_with_the_api_key(body: ControllerResponse) -> None:
    raw = msgspec.msgpack.encode(body)
    assert msgspec.msgpack.decode(raw)[0] == body.API_KEY
    assert CONTROLLER_RESPONSE_DECODER.decode(raw) == body


def test_api_keys_and_versions_are_kafkas() -> None:
    # "apiKey" and the top of "validVersions" of clients/src/main/resources/common/message/;
    # DescribeCluster v2 is KIP-1073 (IncludeFencedBrokers).
    assert {k.name: (int(k), v) for k, v in CONTROLLER_MAX_VERSIONS.items()} == {
        "CREATE_TOPICS": (19, 7),
        "DELETE_TOPICS": (20, 6),
        "DESCRIBE_CONFIGS": (32, 4),
        "CREATE_PARTITIONS": (37, 3),
        "INCREMENTAL_ALTER_CONFIGS": (44, 1),
        "DESCRIBE_CLUSTER": (60, 2),
        "BROKER_REGISTRATION": (62, 4),
        "BROKER_HEARTBEAT": (63, 1),
        "ALLOCATE_PRODUCER_IDS": (67, 0),
        "DESCRIBE_TOPIC_PARTITIONS": (75, 0),
    }
    # A Raft replica's ApiVersions answer does not claim the controller's APIs.
    assert not set(CONTROLLER_MAX_VERSIONS) & set(MAX_VERSIONS)


@pytest.mark.parametrize(
    "cls", CONTROLLER_REQUEST_TYPES + CONTROLLER_RESPONSE_TYPES, ids=lambda c: c.__name__
)
def test_each_message_is_tagged_with_its_class_constant(cls: type[Any]) -> None:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    assert info.array_like and info.tag == int(cls.API_KEY) and cls.__struct_config__.frozen
    for f in info.fields:  # nested structs carry no tag of their own
        for t in f.type.types if isinstance(f.type, mi.UnionType) else (f.type,):
            item = t.item_type if isinstance(t, mi.VarTupleType) else t
            if isinstance(item, mi.StructType):
                assert item.tag is None, item.cls


def test_each_request_has_its_response() -> None:
    for request_type, response_type in CONTROLLER_RESPONSE_TYPE_FOR.items():
        assert request_type.API_KEY == response_type.API_KEY
    assert len({t.API_KEY for t in CONTROLLER_REQUEST_TYPES}) == len(CONTROLLER_REQUEST_TYPES)


def test_defaults_are_kafkas() -> None:
    topic = CreatableTopic(name="t")
    assert (topic.num_partitions, topic.replication_factor) == (-1, -1)
    assert CreateTopicsRequest(topics=(topic,)).timeout_ms == 60_000
    # A broker is fenced until the controller says otherwise.
    assert BrokerHeartbeatResponse().is_fenced
