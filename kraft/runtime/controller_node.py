"""A controller node: a :class:`~kraft.runtime.node.RaftNode` of the metadata log that runs
Kafka's :class:`~kraft.controller.quorum_controller.QuorumController` and answers the
controller's APIs on its listener (docs/controller.md, "Serving the controller's APIs").

The node's listener hands every controller request (:mod:`kraft.protocol.controller_frame`)
to :class:`ControllerApis` (Kafka's ``ControllerApis``) instead of the Raft client; Raft
requests go to the client as on any node. Each request becomes a call of the
``QuorumController`` method of the same name; its future's outcome is the answer. A refusal
(:class:`~kraft.controller.result.ControllerApiError`) is answered with its code and message,
on every item of the response (every topic of a CreateTopics, ...). A standby answers writes
NOT_CONTROLLER: a client finds the active controller as the Raft leader (DescribeQuorum) and
asks it. DescribeTopicPartitions is answered from the node's metadata image (what a broker
would answer from), on a standby too.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Final, TypeVar, assert_never

from kraft.common.clock import Clock
from kraft.common.ratelimit import LogLimiter
from kraft.config import Endpoint
from kraft.controller.configs import ConfigResource, ConfigResourceType, OpType
from kraft.controller.features import KRAFT_SUPPORTED_FEATURES, UpgradeType
from kraft.controller.quorum_controller import ControllerConfig, QuorumController
from kraft.controller.result import ApiError, ControllerApiError
from kraft.controller.topic_names import topic_name_error
from kraft.errors import FatalFaultError
from kraft.metadata.image import METADATA_VERSION_FEATURE, MetadataImage
from kraft.metadata.loader import MetadataLoader
from kraft.metadata.records import ApiMessageAndVersion
from kraft.metadata.serde import MetadataRecordSerde
from kraft.protocol.api import KRAFT_VERSION_FEATURE
from kraft.protocol.controller_frame import ControllerRequestFrame
from kraft.protocol.controller_messages import (
    CONTROLLER_MAX_VERSIONS,
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigsResourceResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControllerRequest,
    ControllerResponse,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    Cursor,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FeatureUpdateResult,
    FinalizedFeatureKey,
    SupportedFeature,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from kraft.queue import EventTimeoutError, KafkaEventQueue, RejectedExecutionError
from kraft.raft.reconfig import api_versions_response
from kraft.runtime.clock import SystemClock
from kraft.runtime.config import NodeConfig
from kraft.runtime.node import RaftNode

__all__ = [
    "ControllerApis",
    "ControllerNode",
    "controller_api_versions",
    "describe_configs",
    "describe_topic_partitions",
]

logger = logging.getLogger(__name__)

R = TypeVar("R")

#: How long a request without a timeout of its own (BrokerRegistration, BrokerHeartbeat, ...)
#: may wait in the controller's queue before it is answered REQUEST_TIMED_OUT.
DEFAULT_REQUEST_TIMEOUT_MS: Final = 30_000
#: Kafka's ``max.request.partition.size.limit`` default: the most partitions one
#: DescribeTopicPartitions answer holds, whatever the request's limit.
MAX_REQUEST_PARTITION_SIZE_LIMIT: Final = 2000
#: Kafka's internal topics (``Topic.isInternal``).
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})
#: Kafka's ``DescribeConfigsResponse.ConfigSource`` ids of the dynamic configs.
_TOPIC_CONFIG: Final = 1
_DYNAMIC_BROKER_CONFIG: Final = 2
_DYNAMIC_DEFAULT_BROKER_CONFIG: Final = 3
#: An unexpected failure (a bug) is logged at most this often.
_ERROR_LOG_INTERVAL_MS: Final = 60_000

Respond = Callable[[int, ControllerResponse], None]


class ControllerApis:
    """Answers controller requests with a :class:`QuorumController` (Kafka's
    ``ControllerApis``). ``image`` gives the node's latest metadata image (DescribeTopicPartitions,
    ApiVersions), ``kraft_version`` the level its Raft client has in force (ApiVersions).
    Sans-IO: :meth:`handle` takes a request and returns the future of its answer."""

    def __init__(
        self,
        controller: QuorumController,
        image: Callable[[], MetadataImage],
        clock: Clock,
        *,
        kraft_version: Callable[[], int],
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
    ) -> None:
        self.controller = controller
        self._image = image
        self._kraft_version = kraft_version
        self._clock = clock
        self._request_timeout_ms = request_timeout_ms
        self._error_log = LogLimiter(_ERROR_LOG_INTERVAL_MS)

    def serve(self, respond: Respond) -> Callable[[int, ControllerRequestFrame], None]:
        """A listener's sink (:data:`~kraft.runtime.inbound.ControllerRequestSink`) that
        answers each request with ``respond(channel_id, response)`` once it is known."""

        def sink(channel_id: int, frame: ControllerRequestFrame) -> None:
            self.handle(frame.body).add_done_callback(
                lambda done: respond(channel_id, done.result())
            )

        return sink

    def handle(  # noqa: PLR0911 (one return per API)
        self, body: ControllerRequest
    ) -> concurrent.futures.Future[ControllerResponse]:
        """The answer to ``body``; the future never fails (a failure is the answer's error)."""
        controller = self.controller
        timeout_ms = getattr(body, "timeout_ms", self._request_timeout_ms)
        match body:
            case BrokerRegistrationRequest():
                return self._answer(
                    body,
                    controller.register_broker(body, timeout_ms=timeout_ms),
                    lambda reply: BrokerRegistrationResponse(broker_epoch=reply.epoch),
                )
            case BrokerHeartbeatRequest():
                return self._answer(
                    body,
                    controller.process_broker_heartbeat(body, timeout_ms=timeout_ms),
                    lambda reply: BrokerHeartbeatResponse(
                        is_caught_up=reply.is_caught_up,
                        is_fenced=reply.is_fenced,
                        should_shut_down=reply.should_shut_down,
                    ),
                )
            case CreateTopicsRequest():
                return self._answer(
                    body, controller.create_topics(body, timeout_ms=timeout_ms), _same
                )
            case DeleteTopicsRequest():
                return self._answer(
                    body, controller.delete_topics(body, timeout_ms=timeout_ms), _same
                )
            case CreatePartitionsRequest():
                return self._answer(
                    body, controller.create_partitions(body, timeout_ms=timeout_ms), _same
                )
            case IncrementalAlterConfigsRequest():
                return self._answer(
                    body,
                    controller.incremental_alter_configs(
                        _config_changes(body),
                        validate_only=body.validate_only,
                        timeout_ms=timeout_ms,
                    ),
                    _alter_configs_response,
                )
            case AllocateProducerIdsRequest():
                return self._answer(
                    body,
                    controller.allocate_producer_ids(body, timeout_ms=timeout_ms),
                    lambda block: AllocateProducerIdsResponse(
                        producer_id_start=block.first_producer_id, producer_id_len=block.size
                    ),
                )
            case DescribeClusterRequest():
                return self._answer(
                    body, controller.describe_cluster(body, timeout_ms=timeout_ms), _same
                )
            case UpdateFeaturesRequest():
                return self._update_features(body, timeout_ms)
            case DescribeTopicPartitionsRequest() | DescribeConfigsRequest() | ApiVersionsRequest():
                answered: concurrent.futures.Future[ControllerResponse] = (
                    concurrent.futures.Future()
                )
                answered.set_result(self._read(body))
                return answered
            case _:
                assert_never(body)

    def _read(
        self, body: DescribeTopicPartitionsRequest | DescribeConfigsRequest | ApiVersionsRequest
    ) -> ControllerResponse:
        """The answers read from the node's image, not from the controller: a standby gives
        them too."""
        if isinstance(body, ApiVersionsRequest):
            return controller_api_versions(self._image(), self._kraft_version())
        if isinstance(body, DescribeConfigsRequest):
            return describe_configs(self._image(), body)
        try:
            return describe_topic_partitions(self._image(), body)
        except ControllerApiError as exc:
            return error_response(body, exc.api_error)

    def _update_features(
        self, body: UpdateFeaturesRequest, timeout_ms: int
    ) -> concurrent.futures.Future[ControllerResponse]:
        """UpdateFeatures of the controller's features (the listener kept those naming only
        ``kraft.version`` for the Raft client): all or none, as Kafka's
        ``QuorumController.updateFeatures``. ``kraft.version`` among them is refused: the Raft
        client finalizes it with records of its own, which cannot commit atomically with the
        controller's (docs/protocol-wire.md, "UpdateFeatures on a controller node")."""
        updates = {u.feature: u.max_version_level for u in body.feature_updates}
        if KRAFT_VERSION_FEATURE in updates:
            level = updates[KRAFT_VERSION_FEATURE]
            refused: concurrent.futures.Future[ApiError] = concurrent.futures.Future()
            refused.set_result(
                ApiError(
                    Errors.INVALID_UPDATE_VERSION,
                    f"Invalid update version {level} for feature {KRAFT_VERSION_FEATURE}. "
                    "It is upgraded alone, in a request naming no other feature.",
                )
            )
            return self._answer(body, refused, lambda error: _features_response(body, error))
        upgrade_types = {u.feature: _upgrade_type(u.downgrade_type) for u in body.feature_updates}
        return self._answer(
            body,
            self.controller.update_features(
                updates,
                upgrade_types=upgrade_types,
                validate_only=body.validate_only,
                timeout_ms=timeout_ms,
            ),
            lambda error: _features_response(body, error),
        )

    def _answer(
        self,
        body: ControllerRequest,
        future: concurrent.futures.Future[R],
        to_response: Callable[[R], ControllerResponse],
    ) -> concurrent.futures.Future[ControllerResponse]:
        answered: concurrent.futures.Future[ControllerResponse] = concurrent.futures.Future()

        def done(outcome: concurrent.futures.Future[R]) -> None:
            exc = outcome.exception()
            if exc is None:
                answered.set_result(to_response(outcome.result()))
                return
            error = _api_error(exc)
            if error.error is Errors.UNKNOWN_SERVER_ERROR and self._error_log.allow(
                self._clock.now_ms()
            ):
                logger.error("%s failed (logged at most once a minute)", body, exc_info=exc)
            answered.set_result(error_response(body, error))

        future.add_done_callback(done)
        return answered


def _api_error(exc: BaseException) -> ApiError:
    """The error a failed call is answered with: REQUEST_TIMED_OUT for an event that never
    ran (its deadline passed, or the queue is shutting down: Kafka's
    ``EventHandlerExceptionInfo`` makes both a ``TimeoutException``), else the call's own."""
    if isinstance(exc, EventTimeoutError | RejectedExecutionError):
        return ApiError(Errors.REQUEST_TIMED_OUT, str(exc))
    return ApiError.from_exception(exc)


def _upgrade_type(downgrade_type: int) -> UpgradeType:
    """kraft's ``downgrade_type`` (0 none, 1 safe, 2 unsafe) as Kafka's ``UpgradeType``;
    UNKNOWN, which the controller refuses, for any other value."""
    try:
        return UpgradeType(downgrade_type + 1)
    except ValueError:
        return UpgradeType.UNKNOWN


def _features_response(body: UpdateFeaturesRequest, error: ApiError) -> UpdateFeaturesResponse:
    """Kafka's answer to UpdateFeatures: a refusal at the top level only, prefixed as
    ``QuorumController.updateFeatures`` does; success with a result per feature (v1)."""
    if error.error is not Errors.NONE:
        return UpdateFeaturesResponse(
            error_code=int(error.error),
            error_message="The update failed for all features since the following feature "
            f"had an error: {error.message_or_default()}",
        )
    return UpdateFeaturesResponse(
        results=tuple(FeatureUpdateResult(u.feature) for u in body.feature_updates)
    )


def _same(response: ControllerResponse) -> ControllerResponse:
    return response


def _config_changes(
    body: IncrementalAlterConfigsRequest,
) -> Mapping[ConfigResource, Mapping[str, tuple[OpType, str | None]]]:
    return {
        ConfigResource(resource.resource_type, resource.resource_name): {
            config.name: (OpType(config.config_operation), config.value)
            for config in resource.configs
        }
        for resource in body.resources
    }


def _alter_configs_response(
    results: Mapping[ConfigResource, ApiError],
) -> IncrementalAlterConfigsResponse:
    return IncrementalAlterConfigsResponse(
        responses=tuple(
            AlterConfigsResourceResponse(
                resource_type=resource.type,
                resource_name=resource.name,
                error_code=int(error.error),
                error_message=error.message_or_default(),
            )
            for resource, error in results.items()
        )
    )


def error_response(  # noqa: PLR0911, PLR0912 (one return per API)
    body: ControllerRequest, error: ApiError
) -> ControllerResponse:
    """The answer to ``body`` refused as a whole with ``error``: on every item it names."""
    code, message = int(error.error), error.message_or_default()
    match body:
        case BrokerRegistrationRequest():
            return BrokerRegistrationResponse(error_code=code)
        case BrokerHeartbeatRequest():
            return BrokerHeartbeatResponse(error_code=code)
        case CreateTopicsRequest():
            return CreateTopicsResponse(
                topics=tuple(
                    CreatableTopicResult(name=t.name, error_code=code, error_message=message)
                    for t in body.topics
                )
            )
        case DeleteTopicsRequest():
            return DeleteTopicsResponse(
                responses=tuple(
                    DeletableTopicResult(
                        name=t.name, topic_id=t.topic_id, error_code=code, error_message=message
                    )
                    for t in body.topics
                )
            )
        case CreatePartitionsRequest():
            return CreatePartitionsResponse(
                results=tuple(
                    CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message)
                    for t in body.topics
                )
            )
        case IncrementalAlterConfigsRequest():
            return IncrementalAlterConfigsResponse(
                responses=tuple(
                    AlterConfigsResourceResponse(
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                        error_code=code,
                        error_message=message,
                    )
                    for r in body.resources
                )
            )
        case AllocateProducerIdsRequest():
            return AllocateProducerIdsResponse(error_code=code)
        case DescribeClusterRequest():
            return DescribeClusterResponse(error_code=code, error_message=message)
        case DescribeTopicPartitionsRequest():
            return DescribeTopicPartitionsResponse(
                topics=tuple(
                    DescribeTopicPartitionsResponseTopic(name=t.name, error_code=code)
                    for t in body.topics
                )
            )
        case UpdateFeaturesRequest():
            # Kafka's UpdateFeaturesRequest.getErrorResponse: the top level only.
            return UpdateFeaturesResponse(error_code=code, error_message=message)
        case ApiVersionsRequest():
            return ApiVersionsResponse(error_code=code)
        case DescribeConfigsRequest():
            return DescribeConfigsResponse(
                results=tuple(
                    DescribeConfigsResult(
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                        error_code=code,
                        error_message=message,
                    )
                    for r in body.resources
                )
            )
        case _:
            assert_never(body)


def controller_api_versions(image: MetadataImage, kraft_version: int) -> ApiVersionsResponse:
    """A controller node's ApiVersions answer (Kafka's ``ControllerApis``
    ``handleApiVersionsRequest``): a Raft replica's (:func:`~kraft.raft.reconfig.
    api_versions_response`: its APIs and ``kraft.version`` range) with the controller's APIs,
    the features the controller supports, and the finalized levels: ``kraft.version`` as the
    Raft client has it, the others as ``image`` has them, its offset the epoch (Kafka's
    ``FinalizedFeaturesEpoch``). A level of 0 (a feature off) is left out."""
    raft = api_versions_response()
    levels = {
        KRAFT_VERSION_FEATURE: kraft_version,
        METADATA_VERSION_FEATURE: image.features.metadata_version,
        **image.features.finalized,
    }
    return ApiVersionsResponse(
        api_keys=raft.api_keys
        + tuple(ApiVersion(int(key), 0, top) for key, top in CONTROLLER_MAX_VERSIONS.items()),
        supported_features=raft.supported_features
        + tuple(
            SupportedFeature(name, low, high)
            for name, (low, high) in sorted(KRAFT_SUPPORTED_FEATURES.items())
        ),
        finalized_features_epoch=image.provenance.offset,
        finalized_features=tuple(
            FinalizedFeatureKey(name, level, level)
            for name, level in sorted(levels.items())
            if level > 0
        ),
    )


def describe_configs(image: MetadataImage, body: DescribeConfigsRequest) -> DescribeConfigsResponse:
    """The dynamic configs of each resource ``body`` names, as ``image`` has them (Kafka's
    ``ConfigHelper.handleDescribeConfigsRequest``, which a controller serves too). kraft
    keeps no brokers' ``LogConfig``/``KafkaConfig`` schemas, so there are no static or
    default values, nothing is sensitive, and the config type is UNKNOWN: what
    ``kafka-configs --describe`` prints (the dynamic configs) is all there is. Each config's
    source is Kafka's: TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, or DYNAMIC_DEFAULT_BROKER_CONFIG for
    the broker resource "" (the cluster default); with ``include_synonyms`` it is its own
    one synonym. A resource fails alone: an invalid topic name INVALID_TOPIC_EXCEPTION, an
    unknown topic UNKNOWN_TOPIC_OR_PARTITION, a broker name that is not an id or another
    type INVALID_REQUEST."""
    results = []
    for resource in body.resources:
        try:
            source = _config_source(image, resource.resource_type, resource.resource_name)
        except ControllerApiError as exc:
            results.append(
                DescribeConfigsResult(
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    error_code=int(exc.api_error.error),
                    error_message=exc.api_error.message,
                )
            )
            continue
        configs = image.configs.get((resource.resource_type, resource.resource_name), {})
        keys = resource.configuration_keys
        results.append(
            DescribeConfigsResult(
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=tuple(
                    DescribeConfigsResourceResult(
                        name=name,
                        value=value,
                        config_source=source,
                        synonyms=(DescribeConfigsSynonym(name, value, source),)
                        if body.include_synonyms
                        else (),
                    )
                    for name, value in sorted(configs.items())
                    if keys is None or name in keys
                ),
            )
        )
    return DescribeConfigsResponse(results=tuple(results))


def _config_source(image: MetadataImage, resource_type: int, name: str) -> int:
    """Kafka's ``ConfigSource`` id of a resource's dynamic configs; ControllerApiError for a
    resource that cannot have any (ConfigHelper's checks)."""
    if resource_type == ConfigResourceType.TOPIC:
        why = topic_name_error(name)
        if why is not None:
            raise ControllerApiError(Errors.INVALID_TOPIC_EXCEPTION, why)
        if name not in image.topics:
            raise ControllerApiError(
                Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
            )
        return _TOPIC_CONFIG
    if resource_type == ConfigResourceType.BROKER:
        if not name:
            return _DYNAMIC_DEFAULT_BROKER_CONFIG
        if not name.isdigit():
            raise ControllerApiError(
                Errors.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
            )
        return _DYNAMIC_BROKER_CONFIG
    raise ControllerApiError(Errors.INVALID_REQUEST, f"Unsupported resource type: {resource_type}")


def describe_topic_partitions(
    image: MetadataImage, body: DescribeTopicPartitionsRequest
) -> DescribeTopicPartitionsResponse:
    """One page of the topics ``body`` asks for (all when it names none) as ``image`` has them
    (Kafka's ``DescribeTopicPartitionsRequestHandler`` and
    ``KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse``): the topics by name from
    the cursor's on, each from partition 0 but the cursor's, until the page holds
    ``response_partition_limit`` partitions (at least 1, at most
    :data:`MAX_REQUEST_PARTITION_SIZE_LIMIT`). ``next_cursor`` names the first partition left
    out: inside a topic, or partition 0 of the next topic. A topic asked for that the image
    lacks is UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an invalid name) and
    takes no room. Raises :class:`ControllerApiError` (INVALID_REQUEST) for a cursor naming a
    topic the list lacks or a partition below 0."""
    cursor = body.cursor
    start_name = cursor.topic_name if cursor is not None else ""
    asked = [t.name for t in body.topics]
    names = sorted({n for n in (asked or image.topics) if n >= start_name})
    if asked and cursor is not None and cursor.topic_name not in names:
        raise ControllerApiError(
            Errors.INVALID_REQUEST,
            "DescribeTopicPartitionsRequest topic list should contain the cursor topic: "
            f"{cursor.topic_name}",
        )
    if cursor is not None and cursor.partition_index < 0:
        raise ControllerApiError(
            Errors.INVALID_REQUEST,
            f"DescribeTopicPartitionsRequest cursor partition must be valid: {cursor}",
        )
    remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, body.response_partition_limit), 1)
    topics: list[DescribeTopicPartitionsResponseTopic] = []
    for name in names:
        if remaining == 0:
            # Every partition of the topics before is in: the next page starts here.
            next_cursor = Cursor(topic_name=name, partition_index=0)
            return DescribeTopicPartitionsResponse(topics=tuple(topics), next_cursor=next_cursor)
        topic = image.topics.get(name)
        if topic is None:
            error = Errors.INVALID_TOPIC_EXCEPTION if topic_name_error(name) else None
            topics.append(
                DescribeTopicPartitionsResponseTopic(
                    name=name,
                    error_code=int(error or Errors.UNKNOWN_TOPIC_OR_PARTITION),
                    is_internal=name in INTERNAL_TOPICS,
                )
            )
            continue
        first = cursor.partition_index if cursor is not None and name == start_name else 0
        end = min(len(topic.partitions), first + remaining)
        partitions = tuple(
            DescribeTopicPartitionsResponsePartition(
                partition_index=index,
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=tuple(p.replicas),
                isr_nodes=tuple(p.isr),
            )
            for index in range(first, end)
            if (p := topic.partitions.get(index)) is not None
        )
        topics.append(
            DescribeTopicPartitionsResponseTopic(
                name=name,
                topic_id=topic.id,
                is_internal=name in INTERNAL_TOPICS,
                partitions=partitions,
            )
        )
        if end < len(topic.partitions):
            next_cursor = Cursor(topic_name=name, partition_index=end)
            return DescribeTopicPartitionsResponse(topics=tuple(topics), next_cursor=next_cursor)
        remaining -= len(partitions)
    return DescribeTopicPartitionsResponse(topics=tuple(topics))


class ControllerNode:
    """A controller process's parts: the :class:`RaftNode` of the metadata log (serde
    :class:`~kraft.metadata.serde.MetadataRecordSerde`), its :class:`MetadataLoader`, and a
    :class:`QuorumController` on a :class:`~kraft.queue.KafkaEventQueue` thread, answering the
    controller's APIs on the node's listener. ``start``, then ``close``."""

    def __init__(self, config: NodeConfig, controller_config: ControllerConfig) -> None:
        self.config = config
        self._controller_config = controller_config
        #: The listener's sink once the controller runs (ControllerApis.serve).
        self._serve: Callable[[int, ControllerRequestFrame], None] | None = None
        self.node: RaftNode[ApiMessageAndVersion] = RaftNode.from_config(
            config, MetadataRecordSerde(), controller_requests=self._on_request
        )
        self.loader: MetadataLoader | None = None
        self.controller: QuorumController | None = None
        self._queue: KafkaEventQueue | None = None
        #: The controller's fatal fault (a record it could not replay), if any: the node
        #: stops, as Kafka's fatal fault handler stops the process.
        self.fault: FatalFaultError | None = None

    def _on_request(self, channel_id: int, frame: ControllerRequestFrame) -> None:
        serve = self._serve
        refusal = None
        if serve is None:  # still starting: no controller to answer yet
            refusal = ApiError(Errors.NOT_CONTROLLER, "the controller is starting")
        elif frame.header.cluster_id not in (None, self.node.cluster_id):
            # As a Raft request naming another cluster is (docs/protocol-wire.md).
            refusal = ApiError(
                Errors.INCONSISTENT_CLUSTER_ID,
                f"cluster {frame.header.cluster_id!r}, this is {self.node.cluster_id!r}",
            )
        if refusal is not None:
            if serve is None and isinstance(frame.body, ApiVersionsRequest):
                # Before the controller runs the node answers as a Raft replica: a leader
                # adding it as a voter asks for its kraft.version range (KIP-853).
                self.node.respond_controller(channel_id, api_versions_response())
                return
            self.node.respond_controller(channel_id, error_response(frame.body, refusal))
            return
        assert serve is not None
        serve(channel_id, frame)

    def start(self) -> None:
        """Start the node, then its loader and controller (errors as ``RaftNode.start``)."""
        self.node.start()
        client = self.node.client
        clock = SystemClock()
        self.loader = MetadataLoader(client)
        client.register(self.loader)
        self._queue = KafkaEventQueue(clock, f"kraft-{self.config.node_id}-controller-")
        cluster_id = self.node.cluster_id or ""
        # Brokers register with the cluster id of the node's meta.properties.
        config = dataclasses.replace(self._controller_config, cluster_id=cluster_id)
        self.controller = QuorumController(
            self.config.node_id,
            client,
            self._queue,
            clock,
            config=config,
            rng=random.Random(),
            on_fault=self._on_controller_fault,
        )
        loader = self.loader
        apis = ControllerApis(
            self.controller,
            lambda: loader.image,
            clock,
            # Read from the listener's thread: a level the Raft client had in force.
            kraft_version=lambda: client.kraft_version,
        )
        self._serve = apis.serve(self.node.respond_controller)

    def _on_controller_fault(self, fault: FatalFaultError) -> None:
        # Called on the controller's queue thread, which the node's close does not wait for;
        # a thread of its own still lets the caller return first.
        self.fault = fault
        threading.Thread(
            target=self.node.close, name=f"kraft-{self.config.node_id}-fault", daemon=True
        ).start()

    @property
    def failure(self) -> BaseException | None:
        """What stopped the node or its controller, if anything did."""
        return self.node.failure or self.fault

    @property
    def listen_address(self) -> Endpoint:
        return self.node.listen_address

    def wait(self, timeout_s: float | None = None) -> bool:
        return self.node.wait(timeout_s)

    def close(self) -> None:
        """Stop the node, then the controller's queue."""
        self.node.close()
        if self._queue is not None:
            self._queue.close()
