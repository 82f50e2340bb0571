"""The requests and responses of Kafka's controller APIs, as kraft wire messages.

The same shape as :mod:`kraft.protocol.messages` (frozen ``array_like`` msgspec structs, tagged
with Kafka's API key; fields only ever appended, with defaults): each message is Kafka's
``clients/src/main/resources/common/message/<Name>{Request,Response}.json`` at its highest
version below, with Kafka's field names in snake_case. ``ThrottleTimeMs`` is left out (kraft
has no quotas). Error codes are plain ``int`` on the wire, as in the Raft messages.

These messages are not in the Raft replicas' :data:`~kraft.protocol.messages.Request` and
``Response`` unions: a Raft replica does not serve them, and its ApiVersions answer
(``MAX_VERSIONS``) must not claim them. A controller's listener decodes them with
:data:`CONTROLLER_REQUEST_DECODER` / :data:`CONTROLLER_RESPONSE_DECODER`.

UpdateFeatures and ApiVersions are Raft messages (:mod:`kraft.protocol.messages`: the Raft
layer finalizes ``kraft.version`` and says its range), and also controller requests and
responses here: a controller node's listener hands an UpdateFeatures naming any other feature
(``metadata.version``, ...) and every ApiVersions to the controller's side
(:class:`~kraft.protocol.controller_frame.NodeRequestFrameDecoder`), which finalizes those
features and answers with them. Neither is in :data:`CONTROLLER_REQUEST_TYPES`, the APIs only
a controller speaks.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar, Final, TypeAlias

import msgspec

from kraft.common.uuids import ZERO_UUID
from kraft.protocol.api import ApiKey
from kraft.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
    _Message,
    _Wire,
)

__all__ = [
    "CONTROLLER_MAX_VERSIONS",
    "CONTROLLER_REQUEST_DECODER",
    "CONTROLLER_REQUEST_TYPES",
    "CONTROLLER_RESPONSE_DECODER",
    "CONTROLLER_RESPONSE_TYPES",
    "CONTROLLER_RESPONSE_TYPE_FOR",
    "AllocateProducerIdsRequest",
    "AllocateProducerIdsResponse",
    "AlterConfigsResourceResponse",
    "AlterableConfig",
    "AlterConfigsResource",
    "BrokerHeartbeatRequest",
    "BrokerHeartbeatResponse",
    "BrokerRegistrationRequest",
    "BrokerRegistrationResponse",
    "ControllerRequest",
    "ControllerResponse",
    "CreatableReplicaAssignment",
    "CreatableTopic",
    "CreatableTopicConfig",
    "CreatableTopicConfigs",
    "CreatableTopicResult",
    "Cursor",
    "CreatePartitionsAssignment",
    "CreatePartitionsRequest",
    "CreatePartitionsResponse",
    "CreatePartitionsTopic",
    "CreatePartitionsTopicResult",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeletableTopicResult",
    "DeleteTopicState",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DescribeClusterBroker",
    "DescribeClusterRequest",
    "DescribeClusterResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResource",
    "DescribeConfigsResourceResult",
    "DescribeConfigsResponse",
    "DescribeConfigsResult",
    "DescribeConfigsSynonym",
    "DescribeTopicPartitionsRequest",
    "DescribeTopicPartitionsResponse",
    "DescribeTopicPartitionsResponsePartition",
    "DescribeTopicPartitionsResponseTopic",
    "TopicRequest",
    "Listener",
    "RegistrationFeature",
]

# ---------------------------------------------------------------------------------------------
# Nested structs


class Listener(_Wire, frozen=True):
    """BrokerRegistration's ``Listeners``: a named endpoint of the broker."""

    name: str
    host: str
    port: int
    security_protocol: int = 0  # PLAINTEXT


class RegistrationFeature(_Wire, frozen=True):
    """BrokerRegistration's ``Features``: a feature the broker supports and its range."""

    name: str
    min_supported_version: int = 0
    max_supported_version: int = 0


class CreatableReplicaAssignment(_Wire, frozen=True):
    """CreateTopics' ``Assignments``: the replicas of one partition, chosen by the caller."""

    partition_index: int
    broker_ids: tuple[int, ...] = ()


class CreatableTopicConfig(_Wire, frozen=True):
    """CreateTopics' ``Configs``: a config of the new topic."""

    name: str
    value: str | None = None


class CreatableTopic(_Wire, frozen=True):
    """CreateTopics' ``Topics``: -1 partitions or replication factor takes the default, and
    must then come with no ``assignments``."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: tuple[CreatableReplicaAssignment, ...] = ()
    configs: tuple[CreatableTopicConfig, ...] = ()


class CreatableTopicConfigs(_Wire, frozen=True):
    """CreateTopicsResponse's ``Configs``: a config the new topic has (v5+)."""

    name: str
    value: str | None = None
    read_only: bool = False
    config_source: int = -1
    is_sensitive: bool = False


class CreatableTopicResult(_Wire, frozen=True):
    """CreateTopicsResponse's ``Topics``: the outcome for one topic."""

    name: str
    topic_id: uuid.UUID = ZERO_UUID
    error_code: int = 0
    error_message: str | None = None
    topic_config_error_code: int = 0
    num_partitions: int = -1
    replication_factor: int = -1
    configs: tuple[CreatableTopicConfigs, ...] | None = None


class DeleteTopicState(_Wire, frozen=True):
    """DeleteTopics' ``Topics`` (v6): a topic by name, or by id when ``name`` is ``None``."""

    name: str | None = None
    topic_id: uuid.UUID = ZERO_UUID


class DeletableTopicResult(_Wire, frozen=True):
    """DeleteTopicsResponse's ``Responses``: the outcome for one topic."""

    name: str | None = None
    topic_id: uuid.UUID = ZERO_UUID
    error_code: int = 0
    error_message: str | None = None


class CreatePartitionsAssignment(_Wire, frozen=True):
    """CreatePartitions' ``Assignments``: the replicas of one new partition."""

    broker_ids: tuple[int, ...] = ()


class CreatePartitionsTopic(_Wire, frozen=True):
    """CreatePartitions' ``Topics``: grow ``name`` to ``count`` partitions in all."""

    name: str
    count: int
    assignments: tuple[CreatePartitionsAssignment, ...] | None = None


class CreatePartitionsTopicResult(_Wire, frozen=True):
    """CreatePartitionsResponse's ``Results``: the outcome for one topic."""

    name: str
    error_code: int = 0
    error_message: str | None = None


class AlterableConfig(_Wire, frozen=True):
    """IncrementalAlterConfigs' ``Configs``: ``config_operation`` is Kafka's
    ``AlterConfigOp.OpType`` id (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT)."""

    name: str
    config_operation: int
    value: str | None = None


class AlterConfigsResource(_Wire, frozen=True):
    """IncrementalAlterConfigs' ``Resources``: ``resource_type`` is Kafka's
    ``ConfigResource.Type`` id (2 TOPIC, 4 BROKER)."""

    resource_type: int
    resource_name: str
    configs: tuple[AlterableConfig, ...] = ()


class AlterConfigsResourceResponse(_Wire, frozen=True):
    """IncrementalAlterConfigsResponse's ``Responses``: the outcome for one resource."""

    resource_type: int
    resource_name: str
    error_code: int = 0
    error_message: str | None = None


class DescribeConfigsResource(_Wire, frozen=True):
    """DescribeConfigs' ``Resources``: a topic or broker (Kafka's ``ConfigResource.Type``
    id) and the keys to describe (``None``: every key)."""

    resource_type: int
    resource_name: str
    configuration_keys: tuple[str, ...] | None = None


class DescribeConfigsSynonym(_Wire, frozen=True):
    """DescribeConfigsResponse's ``Synonyms``: a config that sets the same value, and its
    ``ConfigSource`` id."""

    name: str
    value: str | None
    source: int


class DescribeConfigsResourceResult(_Wire, frozen=True):
    """DescribeConfigsResponse's ``Configs``: one config, its value and where it is set
    (``config_source``: Kafka's ``DescribeConfigsResponse.ConfigSource`` id)."""

    name: str
    value: str | None = None
    read_only: bool = False
    config_source: int = -1
    is_sensitive: bool = False
    synonyms: tuple[DescribeConfigsSynonym, ...] = ()
    config_type: int = 0
    documentation: str | None = None


class DescribeConfigsResult(_Wire, frozen=True):
    """DescribeConfigsResponse's ``Results``: the outcome for one resource (resource first,
    as in :class:`AlterConfigsResourceResponse`)."""

    resource_type: int
    resource_name: str
    error_code: int = 0
    error_message: str | None = None
    configs: tuple[DescribeConfigsResourceResult, ...] = ()


class DescribeClusterBroker(_Wire, frozen=True):
    """DescribeClusterResponse's ``Brokers``: a broker, its first listener and whether it is
    fenced (v2)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    is_fenced: bool = False


class TopicRequest(_Wire, frozen=True):
    """DescribeTopicPartitions' ``Topics``: a topic asked for by name."""

    name: str


class Cursor(_Wire, frozen=True):
    """DescribeTopicPartitions' ``Cursor`` and its response's ``NextCursor``: the first topic
    and partition of a page."""

    topic_name: str
    partition_index: int


class DescribeTopicPartitionsResponsePartition(_Wire, frozen=True):
    """DescribeTopicPartitionsResponse's ``Partitions``: one partition of a topic."""

    partition_index: int
    error_code: int = 0
    leader_id: int = -1
    leader_epoch: int = -1
    replica_nodes: tuple[int, ...] = ()
    isr_nodes: tuple[int, ...] = ()
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None
    offline_replicas: tuple[int, ...] = ()


class DescribeTopicPartitionsResponseTopic(_Wire, frozen=True):
    """DescribeTopicPartitionsResponse's ``Topics``: a topic and its partitions."""

    name: str | None
    error_code: int = 0
    topic_id: uuid.UUID = ZERO_UUID
    is_internal: bool = False
    partitions: tuple[DescribeTopicPartitionsResponsePartition, ...] = ()
    topic_authorized_operations: int = -(2**31)


# ---------------------------------------------------------------------------------------------
# Requests


class BrokerRegistrationRequest(_Message, frozen=True, tag=ApiKey.BROKER_REGISTRATION.value):
    """BrokerRegistration (API key 62, v4): a broker process registers with the controller;
    the same ``incarnation_id`` registering again amends the registration."""

    API_KEY: ClassVar[ApiKey] = ApiKey.BROKER_REGISTRATION
    MAX_VERSION: ClassVar[int] = 4

    broker_id: int
    cluster_id: str
    incarnation_id: uuid.UUID
    listeners: tuple[Listener, ...] = ()
    features: tuple[RegistrationFeature, ...] = ()
    rack: str | None = None
    is_migrating_zk_broker: bool = False
    log_dirs: tuple[uuid.UUID, ...] = ()
    previous_broker_epoch: int = -1


class BrokerHeartbeatRequest(_Message, frozen=True, tag=ApiKey.BROKER_HEARTBEAT.value):
    """BrokerHeartbeat (API key 63, v1): a registered broker says it is alive, how far it has
    read the metadata log, and whether it wants to be fenced or to shut down."""

    API_KEY: ClassVar[ApiKey] = ApiKey.BROKER_HEARTBEAT
    MAX_VERSION: ClassVar[int] = 1

    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shut_down: bool = False
    offline_log_dirs: tuple[uuid.UUID, ...] = ()


class CreateTopicsRequest(_Message, frozen=True, tag=ApiKey.CREATE_TOPICS.value):
    """CreateTopics (API key 19, v7): create topics; each topic succeeds or fails alone."""

    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_TOPICS
    MAX_VERSION: ClassVar[int] = 7

    topics: tuple[CreatableTopic, ...]
    timeout_ms: int = 60_000
    validate_only: bool = False


class DeleteTopicsRequest(_Message, frozen=True, tag=ApiKey.DELETE_TOPICS.value):
    """DeleteTopics (API key 20, v6): delete topics by name or id."""

    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_TOPICS
    MAX_VERSION: ClassVar[int] = 6

    topics: tuple[DeleteTopicState, ...]
    timeout_ms: int = 60_000


class CreatePartitionsRequest(_Message, frozen=True, tag=ApiKey.CREATE_PARTITIONS.value):
    """CreatePartitions (API key 37, v3): add partitions to existing topics."""

    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_PARTITIONS
    MAX_VERSION: ClassVar[int] = 3

    topics: tuple[CreatePartitionsTopic, ...]
    timeout_ms: int = 60_000
    validate_only: bool = False


class IncrementalAlterConfigsRequest(
    _Message, frozen=True, tag=ApiKey.INCREMENTAL_ALTER_CONFIGS.value
):
    """IncrementalAlterConfigs (API key 44, v1): set, delete, append to or subtract from the
    configs of topics and brokers."""

    API_KEY: ClassVar[ApiKey] = ApiKey.INCREMENTAL_ALTER_CONFIGS
    MAX_VERSION: ClassVar[int] = 1

    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool = False


class AllocateProducerIdsRequest(_Message, frozen=True, tag=ApiKey.ALLOCATE_PRODUCER_IDS.value):
    """AllocateProducerIds (API key 67, v0): a broker asks for its next block of producer ids."""

    API_KEY: ClassVar[ApiKey] = ApiKey.ALLOCATE_PRODUCER_IDS
    MAX_VERSION: ClassVar[int] = 0

    broker_id: int
    broker_epoch: int = -1


class DescribeConfigsRequest(_Message, frozen=True, tag=ApiKey.DESCRIBE_CONFIGS.value):
    """DescribeConfigs (API key 32, v4): the configs of topics and brokers. A controller
    answers from its metadata image (Kafka's controllers serve it too, KIP-919)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_CONFIGS
    MAX_VERSION: ClassVar[int] = 4

    resources: tuple[DescribeConfigsResource, ...]
    include_synonyms: bool = False
    include_documentation: bool = False


class DescribeClusterRequest(_Message, frozen=True, tag=ApiKey.DESCRIBE_CLUSTER.value):
    """DescribeCluster (API key 60, v2): the cluster id, the active controller and the brokers
    (the fenced ones too when ``include_fenced_brokers``, KIP-1073)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_CLUSTER
    MAX_VERSION: ClassVar[int] = 2

    include_cluster_authorized_operations: bool = False
    endpoint_type: int = 1  # 1: brokers, 2: controllers (KIP-919)
    include_fenced_brokers: bool = False


class DescribeTopicPartitionsRequest(
    _Message, frozen=True, tag=ApiKey.DESCRIBE_TOPIC_PARTITIONS.value
):
    """DescribeTopicPartitions (API key 75, v0, KIP-966): topics and their partitions as the
    node's metadata image has them; no ``topics`` means every topic. kraft serves it from a
    controller node's image (Kafka's brokers serve it; kraft has no broker that could). At
    most ``response_partition_limit`` partitions per answer, from ``cursor`` on; the answer's
    ``next_cursor`` is where the next page starts."""

    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_TOPIC_PARTITIONS
    MAX_VERSION: ClassVar[int] = 0

    topics: tuple[TopicRequest, ...] = ()
    response_partition_limit: int = 2000
    cursor: Cursor | None = None


# ---------------------------------------------------------------------------------------------
# Responses


class BrokerRegistrationResponse(_Message, frozen=True, tag=ApiKey.BROKER_REGISTRATION.value):
    """The answer to :class:`BrokerRegistrationRequest`: the broker's epoch (the offset of its
    registration record), -1 with an error."""

    API_KEY: ClassVar[ApiKey] = ApiKey.BROKER_REGISTRATION
    MAX_VERSION: ClassVar[int] = 4

    error_code: int = 0
    broker_epoch: int = -1


class BrokerHeartbeatResponse(_Message, frozen=True, tag=ApiKey.BROKER_HEARTBEAT.value):
    """The answer to :class:`BrokerHeartbeatRequest`."""

    API_KEY: ClassVar[ApiKey] = ApiKey.BROKER_HEARTBEAT
    MAX_VERSION: ClassVar[int] = 1

    error_code: int = 0
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


class CreateTopicsResponse(_Message, frozen=True, tag=ApiKey.CREATE_TOPICS.value):
    """The answer to :class:`CreateTopicsRequest`: one result per topic asked for."""

    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_TOPICS
    MAX_VERSION: ClassVar[int] = 7

    topics: tuple[CreatableTopicResult, ...] = ()


class DeleteTopicsResponse(_Message, frozen=True, tag=ApiKey.DELETE_TOPICS.value):
    """The answer to :class:`DeleteTopicsRequest`: one result per topic asked for."""

    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_TOPICS
    MAX_VERSION: ClassVar[int] = 6

    responses: tuple[DeletableTopicResult, ...] = ()


class CreatePartitionsResponse(_Message, frozen=True, tag=ApiKey.CREATE_PARTITIONS.value):
    """The answer to :class:`CreatePartitionsRequest`: one result per topic asked for."""

    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_PARTITIONS
    MAX_VERSION: ClassVar[int] = 3

    results: tuple[CreatePartitionsTopicResult, ...] = ()


class IncrementalAlterConfigsResponse(
    _Message, frozen=True, tag=ApiKey.INCREMENTAL_ALTER_CONFIGS.value
):
    """The answer to :class:`IncrementalAlterConfigsRequest`: one result per resource."""

    API_KEY: ClassVar[ApiKey] = ApiKey.INCREMENTAL_ALTER_CONFIGS
    MAX_VERSION: ClassVar[int] = 1

    responses: tuple[AlterConfigsResourceResponse, ...] = ()


class AllocateProducerIdsResponse(_Message, frozen=True, tag=ApiKey.ALLOCATE_PRODUCER_IDS.value):
    """The answer to :class:`AllocateProducerIdsRequest`: the ids ``producer_id_start`` to
    ``producer_id_start + producer_id_len - 1`` are the broker's."""

    API_KEY: ClassVar[ApiKey] = ApiKey.ALLOCATE_PRODUCER_IDS
    MAX_VERSION: ClassVar[int] = 0

    error_code: int = 0
    producer_id_start: int = -1
    producer_id_len: int = 0


class DescribeConfigsResponse(_Message, frozen=True, tag=ApiKey.DESCRIBE_CONFIGS.value):
    """The answer to :class:`DescribeConfigsRequest`: one result per resource asked for."""

    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_CONFIGS
    MAX_VERSION: ClassVar[int] = 4

    results: tuple[DescribeConfigsResult, ...] = ()


class DescribeClusterResponse(_Message, frozen=True, tag=ApiKey.DESCRIBE_CLUSTER.value):
    """The answer to :class:`DescribeClusterRequest`."""

    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_CLUSTER
    MAX_VERSION: ClassVar[int] = 2

    error_code: int = 0
    error_message: str | None = None
    endpoint_type: int = 1
    cluster_id: str = ""
    controller_id: int = -1
    brokers: tuple[DescribeClusterBroker, ...] = ()
    cluster_authorized_operations: int = -(2**31)


class DescribeTopicPartitionsResponse(
    _Message, frozen=True, tag=ApiKey.DESCRIBE_TOPIC_PARTITIONS.value
):
    """The answer to :class:`DescribeTopicPartitionsRequest`: one entry per topic of the page
    (UNKNOWN_TOPIC_OR_PARTITION for a topic asked for that the image does not have), by name;
    ``next_cursor`` ``None`` on the last page."""

    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_TOPIC_PARTITIONS
    MAX_VERSION: ClassVar[int] = 0

    topics: tuple[DescribeTopicPartitionsResponseTopic, ...] = ()
    next_cursor: Cursor | None = None


#: Every request a controller answers; the union :data:`CONTROLLER_REQUEST_DECODER` reads.
ControllerRequest: TypeAlias = (
    BrokerRegistrationRequest
    | BrokerHeartbeatRequest
    | CreateTopicsRequest
    | DeleteTopicsRequest
    | CreatePartitionsRequest
    | IncrementalAlterConfigsRequest
    | AllocateProducerIdsRequest
    | DescribeClusterRequest
    | DescribeTopicPartitionsRequest
    | DescribeConfigsRequest
    | UpdateFeaturesRequest
    | ApiVersionsRequest
)

#: Every response a controller sends; the union :data:`CONTROLLER_RESPONSE_DECODER` reads.
ControllerResponse: TypeAlias = (
    BrokerRegistrationResponse
    | BrokerHeartbeatResponse
    | CreateTopicsResponse
    | DeleteTopicsResponse
    | CreatePartitionsResponse
    | IncrementalAlterConfigsResponse
    | AllocateProducerIdsResponse
    | DescribeClusterResponse
    | DescribeTopicPartitionsResponse
    | DescribeConfigsResponse
    | UpdateFeaturesResponse
    | ApiVersionsResponse
)

#: The APIs only a controller speaks (UpdateFeatures is a Raft API too).
CONTROLLER_REQUEST_TYPES: tuple[type[ControllerRequest], ...] = (
    BrokerRegistrationRequest,
    BrokerHeartbeatRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    CreatePartitionsRequest,
    IncrementalAlterConfigsRequest,
    AllocateProducerIdsRequest,
    DescribeClusterRequest,
    DescribeTopicPartitionsRequest,
    DescribeConfigsRequest,
)

CONTROLLER_RESPONSE_TYPES: tuple[type[ControllerResponse], ...] = (
    BrokerRegistrationResponse,
    BrokerHeartbeatResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    CreatePartitionsResponse,
    IncrementalAlterConfigsResponse,
    AllocateProducerIdsResponse,
    DescribeClusterResponse,
    DescribeTopicPartitionsResponse,
    DescribeConfigsResponse,
)

#: The response class that answers each controller request class.
CONTROLLER_RESPONSE_TYPE_FOR: Mapping[type[ControllerRequest], type[ControllerResponse]] = (
    MappingProxyType(dict(zip(CONTROLLER_REQUEST_TYPES, CONTROLLER_RESPONSE_TYPES, strict=True)))
)

#: The version of each controller API these messages are (the top of ``validVersions``;
#: DescribeCluster v2 is KIP-1073's ``IncludeFencedBrokers``, Kafka 3.9).
CONTROLLER_MAX_VERSIONS: Final[Mapping[ApiKey, int]] = MappingProxyType(
    {cls.API_KEY: cls.MAX_VERSION for cls in CONTROLLER_REQUEST_TYPES}
)

#: msgpack decoders of a controller request or response body (the array a frame carries).
CONTROLLER_REQUEST_DECODER: Final = msgspec.msgpack.Decoder(ControllerRequest)
CONTROLLER_RESPONSE_DECODER: Final = msgspec.msgpack.Decoder(ControllerResponse)
