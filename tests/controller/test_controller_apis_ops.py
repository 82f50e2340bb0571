"""ControllerApis' operator requests without sockets (kraft.runtime.controller_node): which
UpdateFeatures the controller answers and how, and DescribeTopicPartitions' paging; each
request read from its frame bytes as a controller node's listener reads it."""

from __future__ import annotations

import pytest
from harness import ControllerQuorum
from test_controller_apis import CLUSTER_ID, Apis, standby, unfence_all

from kraft.protocol.api import MAX_VERSIONS, ApiKey
from kraft.protocol.controller_frame import ControllerRequestFrame, NodeRequestFrameDecoder
from kraft.protocol.controller_messages import (
    AlterableConfig,
    AlterConfigsResource,
    CreatableTopic,
    CreateTopicsRequest,
    Cursor,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsSynonym,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    IncrementalAlterConfigsRequest,
    TopicRequest,
)
from kraft.protocol.errors import Errors
from kraft.protocol.frame import RequestFrame, encode_request
from kraft.protocol.frame import RequestHeader as Header
from kraft.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FeatureUpdate,
    FeatureUpdateResult,
    FinalizedFeatureKey,
    SupportedFeature,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)

ALL_FAILED = "The update failed for all features since the following feature had an error: "


@pytest.fixture
def quorum() -> ControllerQuorum:
    return ControllerQuorum(3, cluster_id=CLUSTER_ID, default_replication_factor=3)


def features(*updates: tuple[str, int], downgrade_type: int = 0) -> UpdateFeaturesRequest:
    return UpdateFeaturesRequest(
        feature_updates=tuple(FeatureUpdate(n, level, downgrade_type) for n, level in updates)
    )


@pytest.mark.parametrize(
    ("updates", "controllers"),
    [
        ((("kraft.version", 1),), False),
        ((("metadata.version", 21),), True),
        ((("kraft.version", 1), ("metadata.version", 21)), True),
        ((("group.version", 1),), True),
    ],
)
def test_only_an_update_of_kraft_version_alone_goes_to_the_raft_client(
    updates: tuple[tuple[str, int], ...], controllers: bool
) -> None:
    body = features(*updates)
    decoder = NodeRequestFrameDecoder()
    decoder.feed(encode_request(Header.for_body(body, 1), body))
    frame = decoder.next_frame()
    assert isinstance(frame, ControllerRequestFrame if controllers else RequestFrame)
    assert frame.body == body


def test_metadata_version_goes_to_the_quorum_controller(quorum: ControllerQuorum) -> None:
    leader = quorum.wait_active().node_id
    apis = Apis(quorum)
    done = apis.ask(leader, features(("metadata.version", 21)))
    assert done == UpdateFeaturesResponse(results=(FeatureUpdateResult("metadata.version"),))

    # The controller writes only 3.9-IV0 records: another level is refused, all or none.
    refused = apis.ask(leader, features(("metadata.version", 22)))
    assert isinstance(refused, UpdateFeaturesResponse)
    assert refused.error_code == Errors.INVALID_UPDATE_VERSION and refused.results == ()
    assert refused.error_message == (
        ALL_FAILED + "Invalid update version 22 for feature metadata.version. "
        "The controller supports levels 21 to 21 of metadata.version."
    )
    unknown = apis.ask(leader, features(("group.version", 1)))
    assert isinstance(unknown, UpdateFeaturesResponse)
    assert unknown.error_code == Errors.INVALID_UPDATE_VERSION
    assert "supports levels 0 to 0 of group.version" in (unknown.error_message or "")

    # downgrade_type 3 is no UpgradeType: UNKNOWN, refused first.
    odd = apis.ask(leader, features(("metadata.version", 21), downgrade_type=3))
    assert isinstance(odd, UpdateFeaturesResponse)
    assert "does not support the given upgrade type" in (odd.error_message or "")


def test_kraft_version_with_other_features_is_refused_whole(quorum: ControllerQuorum) -> None:
    leader = quorum.wait_active().node_id
    mixed = Apis(quorum).ask(leader, features(("metadata.version", 21), ("kraft.version", 1)))
    assert isinstance(mixed, UpdateFeaturesResponse)
    assert mixed.error_code == Errors.INVALID_UPDATE_VERSION and mixed.results == ()
    assert "feature kraft.version. It is upgraded alone" in (mixed.error_message or "")


def test_a_standby_answers_update_features_not_controller(quorum: ControllerQuorum) -> None:
    other = standby(quorum, quorum.wait_active())
    refused = Apis(quorum).ask(other, features(("metadata.version", 21)))
    assert isinstance(refused, UpdateFeaturesResponse)
    assert refused.error_code == Errors.NOT_CONTROLLER and refused.results == ()


@pytest.fixture
def paged(quorum: ControllerQuorum) -> tuple[Apis, int]:
    """Topics a (3 partitions), b (2) and c (1) in the active controller's image."""
    leader = quorum.wait_active().node_id
    apis = Apis(quorum)
    unfence_all(apis, leader)
    topics = tuple(
        CreatableTopic(name=n, num_partitions=k, replication_factor=1)
        for n, k in (("a", 3), ("b", 2), ("c", 1))
    )
    apis.ask(leader, CreateTopicsRequest(topics=topics))
    image = quorum.loaders[leader]
    assert quorum.run_until(lambda: {"a", "b", "c"} <= set(image.image.topics))
    return apis, leader


def page(
    apis: Apis,
    leader: int,
    limit: int,
    cursor: Cursor | None = None,
    names: tuple[str, ...] = (),
) -> tuple[list[tuple[str | None, int, list[int]]], Cursor | None]:
    body = DescribeTopicPartitionsRequest(
        topics=tuple(TopicRequest(n) for n in names),
        response_partition_limit=limit,
        cursor=cursor,
    )
    answer = apis.ask(leader, body)
    assert isinstance(answer, DescribeTopicPartitionsResponse)
    topics = [
        (t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in answer.topics
    ]
    return topics, answer.next_cursor


def test_describe_topic_partitions_pages_by_partition_as_kafka(paged: tuple[Apis, int]) -> None:
    apis, leader = paged
    first, cursor = page(apis, leader, 2)
    assert (first, cursor) == ([("a", 0, [0, 1])], Cursor("a", 2))
    second, cursor = page(apis, leader, 2, cursor)
    assert (second, cursor) == ([("a", 0, [2]), ("b", 0, [0])], Cursor("b", 1))
    third, cursor = page(apis, leader, 2, cursor)
    assert (third, cursor) == ([("b", 0, [1]), ("c", 0, [0])], None)

    # A page that ends with a whole topic points at partition 0 of the next one.
    assert page(apis, leader, 3) == ([("a", 0, [0, 1, 2])], Cursor("b", 0))
    # A limit below 1 is 1.
    assert page(apis, leader, 0) == ([("a", 0, [0])], Cursor("a", 1))


def test_describe_topic_partitions_of_named_topics(paged: tuple[Apis, int]) -> None:
    apis, leader = paged
    # By name, from the cursor's topic on; an unknown topic takes no room.
    topics, cursor = page(apis, leader, 2, Cursor("b", 1), ("c", "a", "b", "bz", "b"))
    unknown = Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert (topics, cursor) == ([("b", 0, [1]), ("bz", unknown, []), ("c", 0, [0])], None)
    invalid, _ = page(apis, leader, 10, None, ("no such!",))
    assert invalid == [("no such!", Errors.INVALID_TOPIC_EXCEPTION, [])]


@pytest.mark.parametrize(
    ("cursor", "names"), [(Cursor("b", 0), ("a", "c")), (Cursor("a", -1), ("a",))]
)
def test_a_bad_cursor_is_an_invalid_request(
    paged: tuple[Apis, int], cursor: Cursor, names: tuple[str, ...]
) -> None:
    apis, leader = paged
    topics, next_cursor = page(apis, leader, 10, cursor, names)
    assert topics == [(n, Errors.INVALID_REQUEST, []) for n in names] and next_cursor is None


def test_api_versions_of_a_controller_node_name_its_features(quorum: ControllerQuorum) -> None:
    leader = quorum.wait_active().node_id
    image = quorum.loaders[leader]
    assert quorum.run_until(lambda: image.image.features.metadata_version == 21)
    apis = Apis(quorum)
    for node_id in quorum.controllers:  # a standby answers from its image too
        answer = apis.ask(node_id, ApiVersionsRequest())
        assert isinstance(answer, ApiVersionsResponse) and answer.error_code == 0
        keys = {k.api_key: k.max_version for k in answer.api_keys}
        assert (
            keys[ApiKey.CREATE_PARTITIONS] == 3 and keys[ApiKey.VOTE] == MAX_VERSIONS[ApiKey.VOTE]
        )
        assert answer.supported_features == (
            SupportedFeature("kraft.version", 0, 1),
            SupportedFeature("metadata.version", 21, 21),
        )
        # kraft.version 0 (static voters) is off: only metadata.version is finalized.
        assert answer.finalized_features == (FinalizedFeatureKey("metadata.version", 21, 21),)
        assert (
            0 <= answer.finalized_features_epoch <= quorum.loaders[node_id].image.provenance.offset
        )


def test_api_versions_go_to_the_controller_side_of_a_node() -> None:
    body = ApiVersionsRequest()
    decoder = NodeRequestFrameDecoder()
    decoder.feed(encode_request(Header.for_body(body, 1), body))
    frame = decoder.next_frame()
    assert isinstance(frame, ControllerRequestFrame) and frame.body == body


def test_describe_configs_reads_the_dynamic_configs_of_the_image(
    quorum: ControllerQuorum, paged: tuple[Apis, int]
) -> None:
    apis, leader = paged
    changes = (
        AlterConfigsResource(2, "a", (AlterableConfig("retention.ms", 0, "1000"),
                                      AlterableConfig("cleanup.policy", 0, "compact"))),
        AlterConfigsResource(4, "", (AlterableConfig("log.retention.ms", 0, "5"),)),
    )  # fmt: skip
    apis.ask(leader, IncrementalAlterConfigsRequest(resources=changes))
    image = quorum.loaders[leader]
    assert quorum.run_until(lambda: (4, "") in image.image.configs)
    asked = (
        DescribeConfigsResource(2, "a"),
        DescribeConfigsResource(2, "a", ("retention.ms", "x")),
        DescribeConfigsResource(4, ""),
        DescribeConfigsResource(4, "1"),
        DescribeConfigsResource(2, "nope"),
        DescribeConfigsResource(2, "no such!"),
        DescribeConfigsResource(4, "one"),
        DescribeConfigsResource(8, "1"),
    )
    answer = apis.ask(leader, DescribeConfigsRequest(resources=asked, include_synonyms=True))
    assert isinstance(answer, DescribeConfigsResponse)
    results = answer.results
    assert [(r.resource_type, r.resource_name) for r in results] == [
        (r.resource_type, r.resource_name) for r in asked
    ]
    retention = DescribeConfigsResourceResult(
        "retention.ms", "1000", config_source=1,
        synonyms=(DescribeConfigsSynonym("retention.ms", "1000", 1),),
    )  # fmt: skip
    assert [c.name for c in results[0].configs] == ["cleanup.policy", "retention.ms"]
    assert results[0].configs[1] == retention and results[1].configs == (retention,)
    assert [(c.name, c.value, c.config_source) for c in results[2].configs] == [
        ("log.retention.ms", "5", 3)
    ]
    assert (results[3].error_code, results[3].configs) == (0, ())
    assert [r.error_code for r in results[4:]] == [
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        Errors.INVALID_TOPIC_EXCEPTION,
        Errors.INVALID_REQUEST,
        Errors.INVALID_REQUEST,
    ]
