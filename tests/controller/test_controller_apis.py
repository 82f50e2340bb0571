"""ControllerApis (kraft.runtime.controller_node) without sockets: each controller request, read
from its frame bytes as a controller node's listener reads it, answered by the QuorumController
of an in-memory quorum; refusals as the response's error codes."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from harness import ControllerQuorum

from kraft.controller.quorum_controller import QuorumController
from kraft.metadata.image import MetadataImage
from kraft.protocol.controller_frame import (
    ControllerRequestFrame,
    ControllerResponseFrameDecoder,
    NodeRequestFrameDecoder,
    controller_request_header,
    encode_controller_request,
    encode_controller_response,
)
from kraft.protocol.controller_messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterableConfig,
    AlterConfigsResource,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControllerRequest,
    ControllerResponse,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicState,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    Listener,
    RegistrationFeature,
    TopicRequest,
)
from kraft.protocol.errors import Errors, MalformedFrameError
from kraft.protocol.frame import RequestFrame, RequestFrameDecoder, ResponseHeader, encode_request
from kraft.protocol.frame import RequestHeader as Header
from kraft.protocol.messages import DescribeQuorumRequest
from kraft.runtime.controller_node import ControllerApis

CLUSTER_ID = "kraft-test-cluster-0001"
BROKERS = (1, 2, 3)


class Apis:
    """Every node's ControllerApis; ``ask`` sends a request through the wire's bytes."""

    def __init__(self, quorum: ControllerQuorum) -> None:
        self.quorum = quorum
        self.apis = {
            node_id: ControllerApis(
                controller,
                self._image_of(node_id),
                quorum.clock,
                kraft_version=self._kraft_version_of(node_id),
            )
            for node_id, controller in quorum.controllers.items()
        }

    def _image_of(self, node_id: int) -> Callable[[], MetadataImage]:
        return lambda: self.quorum.loaders[node_id].image

    def _kraft_version_of(self, node_id: int) -> Callable[[], int]:
        return lambda: self.quorum.cluster.nodes[node_id].kraft_version

    def ask(self, node_id: int, body: ControllerRequest) -> ControllerResponse:
        decoder = NodeRequestFrameDecoder()
        decoder.feed(encode_controller_request(controller_request_header(body, 7), body))
        frame = decoder.next_frame()
        assert isinstance(frame, ControllerRequestFrame)
        response = self.quorum.result(self.apis[node_id].handle(frame.body))
        # The answer goes back as bytes too.
        back = ControllerResponseFrameDecoder()
        back.feed(encode_controller_response(ResponseHeader(7), response))
        answer = back.next_frame()
        assert answer is not None and answer.header.correlation_id == 7
        return answer.body


def registration(broker_id: int) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=CLUSTER_ID,
        incarnation_id=uuid.UUID(int=broker_id),
        listeners=(Listener(name="PLAINTEXT", host="localhost", port=9000 + broker_id),),
        features=(RegistrationFeature(name="metadata.version", max_supported_version=21),),
        log_dirs=(uuid.UUID(int=1000 + broker_id),),
    )


def standby(quorum: ControllerQuorum, active: QuorumController) -> int:
    return next(n for n, c in quorum.controllers.items() if c is not active)


@pytest.fixture
def quorum() -> ControllerQuorum:
    return ControllerQuorum(3, cluster_id=CLUSTER_ID, default_replication_factor=3)


def unfence_all(apis: Apis, leader: int) -> dict[int, int]:
    epochs = {}
    for broker_id in BROKERS:
        answer = apis.ask(leader, registration(broker_id))
        assert isinstance(answer, BrokerRegistrationResponse) and answer.error_code == 0
        epochs[broker_id] = answer.broker_epoch
    for _ in range(5):
        fenced = False
        for broker_id, epoch in epochs.items():
            beat = apis.ask(
                leader,
                BrokerHeartbeatRequest(
                    broker_id=broker_id,
                    broker_epoch=epoch,
                    current_metadata_offset=apis.quorum.controllers[leader].last_committed_offset,
                ),
            )
            assert isinstance(beat, BrokerHeartbeatResponse) and beat.error_code == 0
            fenced |= beat.is_fenced
        if not fenced:
            return epochs
    raise AssertionError("the brokers stayed fenced")


def test_the_active_controller_answers_every_api(quorum: ControllerQuorum) -> None:
    leader = quorum.wait_active().node_id
    apis = Apis(quorum)
    epochs = unfence_all(apis, leader)

    created = apis.ask(
        leader,
        CreateTopicsRequest(topics=(CreatableTopic(name="orders", num_partitions=2),)),
    )
    assert isinstance(created, CreateTopicsResponse)
    [result] = created.topics
    assert (result.name, result.error_code, result.num_partitions) == ("orders", 0, 2)
    assert result.replication_factor == 3

    again = apis.ask(leader, CreateTopicsRequest(topics=(CreatableTopic(name="orders"),)))
    assert isinstance(again, CreateTopicsResponse)
    assert again.topics[0].error_code == Errors.TOPIC_ALREADY_EXISTS

    assert quorum.run_until(lambda: "orders" in quorum.loaders[leader].image.topics)
    described = apis.ask(
        leader, DescribeTopicPartitionsRequest(topics=(TopicRequest("orders"), TopicRequest("x")))
    )
    assert isinstance(described, DescribeTopicPartitionsResponse)
    orders, missing = described.topics
    assert orders.topic_id == result.topic_id and [
        p.partition_index for p in orders.partitions
    ] == [
        0,
        1,
    ]
    assert all(sorted(p.replica_nodes) == [1, 2, 3] for p in orders.partitions)
    assert all(p.leader_id in p.isr_nodes for p in orders.partitions)
    assert missing.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION

    cluster = apis.ask(leader, DescribeClusterRequest(include_fenced_brokers=True))
    assert isinstance(cluster, DescribeClusterResponse)
    assert cluster.cluster_id == CLUSTER_ID and cluster.controller_id == leader
    assert [(b.broker_id, b.port, b.is_fenced) for b in cluster.brokers] == [
        (1, 9001, False),
        (2, 9002, False),
        (3, 9003, False),
    ]

    ids = apis.ask(leader, AllocateProducerIdsRequest(broker_id=1, broker_epoch=epochs[1]))
    assert isinstance(ids, AllocateProducerIdsResponse)
    assert (ids.error_code, ids.producer_id_start, ids.producer_id_len) == (0, 0, 1000)

    configs = apis.ask(
        leader,
        IncrementalAlterConfigsRequest(
            resources=(
                AlterConfigsResource(
                    resource_type=2,
                    resource_name="orders",
                    configs=(AlterableConfig("retention.ms", 0, "1000"),),
                ),
                AlterConfigsResource(
                    resource_type=2,
                    resource_name="nope",
                    configs=(AlterableConfig("retention.ms", 0, "1000"),),
                ),
            )
        ),
    )
    assert isinstance(configs, IncrementalAlterConfigsResponse)
    assert [(r.resource_name, r.error_code == 0) for r in configs.responses] == [
        ("orders", True),
        ("nope", False),
    ]

    deleted = apis.ask(leader, DeleteTopicsRequest(topics=(DeleteTopicState(name="orders"),)))
    assert isinstance(deleted, DeleteTopicsResponse)
    assert deleted.responses[0].error_code == 0


def test_a_standby_refuses_writes_with_not_controller(quorum: ControllerQuorum) -> None:
    active = quorum.wait_active()
    apis = Apis(quorum)
    other = standby(quorum, active)

    refused = apis.ask(other, registration(1))
    assert isinstance(refused, BrokerRegistrationResponse)
    assert (refused.error_code, refused.broker_epoch) == (Errors.NOT_CONTROLLER, -1)

    topics = apis.ask(
        other, CreateTopicsRequest(topics=(CreatableTopic(name="a"), CreatableTopic(name="b")))
    )
    assert isinstance(topics, CreateTopicsResponse)
    assert [(t.name, t.error_code) for t in topics.topics] == [
        ("a", Errors.NOT_CONTROLLER),
        ("b", Errors.NOT_CONTROLLER),
    ]
    assert all("leader is node" in (t.error_message or "") for t in topics.topics)


def test_a_refused_heartbeat_carries_the_controllers_code(quorum: ControllerQuorum) -> None:
    leader = quorum.wait_active().node_id
    apis = Apis(quorum)
    beat = apis.ask(
        leader, BrokerHeartbeatRequest(broker_id=9, broker_epoch=5, current_metadata_offset=0)
    )
    assert isinstance(beat, BrokerHeartbeatResponse)
    assert beat.error_code not in (0, Errors.UNKNOWN_SERVER_ERROR)


def test_a_node_decoder_reads_raft_and_controller_requests_a_replica_only_raft() -> None:
    raft = DescribeQuorumRequest()
    raft_bytes = encode_request(Header.for_body(raft, 1), raft)
    body = DescribeClusterRequest()
    controller_bytes = encode_controller_request(controller_request_header(body, 2), body)

    decoder = NodeRequestFrameDecoder()
    decoder.feed(raft_bytes + controller_bytes)
    first, second = list(decoder)
    assert isinstance(first, RequestFrame) and first.body == raft
    assert isinstance(second, ControllerRequestFrame) and second.body == body

    replica = RequestFrameDecoder()
    replica.feed(controller_bytes)
    with pytest.raises(MalformedFrameError):
        replica.next_frame()


def test_a_header_naming_another_api_than_its_body_is_malformed() -> None:
    body = DescribeClusterRequest()
    header = controller_request_header(body, 3)
    lying = Header(api_key=62, api_version=0, correlation_id=header.correlation_id)
    decoder = NodeRequestFrameDecoder()
    decoder.feed(encode_controller_request(lying, body))
    with pytest.raises(MalformedFrameError, match="header API key 62"):
        decoder.next_frame()


def test_a_topic_is_created_with_its_configs(quorum: ControllerQuorum) -> None:
    leader = quorum.wait_active().node_id
    apis = Apis(quorum)
    unfence_all(apis, leader)
    created = apis.ask(
        leader,
        CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name="logs", configs=(CreatableTopicConfig("retention.ms", "1000"),)
                ),
            )
        ),
    )
    assert isinstance(created, CreateTopicsResponse)
    assert created.topics[0].error_code == 0, created.topics[0].error_message


def test_a_request_that_never_ran_is_answered_request_timed_out(quorum: ControllerQuorum) -> None:
    leader = quorum.wait_active().node_id
    apis = Apis(quorum)
    # The controller's queue runs nothing until the quorum steps: a 0 ms deadline passes.
    answer = apis.apis[leader].handle(
        CreateTopicsRequest(topics=(CreatableTopic(name="late"),), timeout_ms=0)
    )
    quorum.clock.advance(1)
    response = quorum.result(answer)
    assert isinstance(response, CreateTopicsResponse)
    assert response.topics[0].error_code == Errors.REQUEST_TIMED_OUT
