"""Topics, partitions and their leaders: Kafka's ``ReplicationControlManager``.

The manager keeps the topics and every partition's registration in timeline collections, so
that the controller can read them as of its last committed offset and revert what it replayed
but never committed. Its operations (create and delete topics, create partitions, the broker
heartbeat, fencing and unregistering brokers) read that state and return a
:class:`~kraft.controller.result.ControllerResult`: the records to append and the response to
give when they commit. They never change the state themselves: only :meth:`replay` does, when
the controller replays each record at its offset.

Leadership follows Kafka's rules (:mod:`kraft.controller.partition_change`): a broker that is
fenced, unregistered or in controlled shutdown leaves every ISR it is in (unless it is the last
member) and gives up every leadership to the next ISR member that is active (registered,
unfenced, not in controlled shutdown), or to nobody (leader -1) when none is; a broker that is
unfenced becomes the leader of the leaderless partitions whose ISR it is in. A leader is never
elected from outside the ISR (kraft has no unclean leader election).
:meth:`ReplicationControlManager.maybe_balance_partition_leaders` gives leadership back to
preferred (first) replicas once they are in the ISR and active again.

The broker-to-partition index (:class:`BrokersToIsrs`, Kafka's) lets those moves visit only the
partitions the broker is in, and says whether a broker in controlled shutdown still leads
anything.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import NoReturn, TypeVar

import msgspec

from kraft.common.uuids import ZERO_UUID
from kraft.controller.assignment import ReplicaAssigner
from kraft.controller.brokers_to_isrs import BrokersToIsrs, TopicIdPartition
from kraft.controller.cluster_control import ClusterControlManager
from kraft.controller.configs import (
    ConfigResource,
    ConfigResourceType,
    ConfigurationControlManager,
    OpType,
)
from kraft.controller.heartbeats import BrokerControlState
from kraft.controller.partition_change import Election, PartitionChangeBuilder
from kraft.controller.placement import StripedReplicaPlacer
from kraft.controller.result import ApiError, ControllerApiError, ControllerResult
from kraft.controller.topic_names import (
    has_collision_chars,
    topic_name_error,
    unify_collision_chars,
)
from kraft.errors import IllegalStateError
from kraft.metadata.image import (
    MIGRATING_DIRECTORY,
    NO_LEADER,
    MetadataReplayError,
    PartitionRegistration,
)
from kraft.metadata.records import (
    ApiMessageAndVersion,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    at_latest_version,
)
from kraft.metadata.timeline import LATEST, SnapshotRegistry, TimelineHashMap, TimelineHashSet
from kraft.protocol.controller_messages import (
    BrokerHeartbeatRequest,
    CreatableTopic,
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kraft.protocol.errors import Errors

__all__ = [
    "BrokerHeartbeatReply",
    "ReplicationControlManager",
    "TopicControlInfo",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Kafka's ``DirectoryId.UNASSIGNED``: a replica on a broker with several log directories,
#: before the broker says which one holds it.
UNASSIGNED_DIRECTORY = uuid.UUID(int=1)
#: Kafka's ``QuorumController.MAX_ELECTIONS_PER_IMBALANCE``: preferred leader elections per
#: :meth:`ReplicationControlManager.maybe_balance_partition_leaders`.
MAX_ELECTIONS_PER_IMBALANCE = 1000
#: ``CreatableTopicConfigs.config_source`` of a config the topic creation set (Kafka's
#: ``DescribeConfigsResponse.ConfigSource.TOPIC_CONFIG``).
_TOPIC_CONFIG_SOURCE = 1


class BrokerHeartbeatReply(msgspec.Struct, frozen=True, kw_only=True):
    """What a heartbeat answers (Kafka's ``BrokerHeartbeatReply``): whether the broker has
    replayed its registration, and the state the heartbeat left it in."""

    is_caught_up: bool
    is_fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


class TopicControlInfo(msgspec.Struct, frozen=True):
    """A topic: its name, id and how many partitions it has (Kafka's ``TopicControlInfo``;
    the partitions themselves are in the manager's partition map)."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int


class ReplicationControlManager:
    """Kafka's ``ReplicationControlManager`` (module docstring).

    ``default_num_partitions`` and ``default_replication_factor`` are Kafka's
    ``num.partitions`` and ``default.replication.factor``: what a topic creation asking for -1
    gets. ``rng`` draws topic ids and the placer's start offsets and shuffles.
    """

    def __init__(
        self,
        snapshot_registry: SnapshotRegistry,
        cluster_control: ClusterControlManager,
        configuration_control: ConfigurationControlManager,
        rng: random.Random,
        *,
        default_num_partitions: int = 1,
        default_replication_factor: int = 1,
    ) -> None:
        self._cluster = cluster_control
        self._configs = configuration_control
        self._rng = rng
        self._assigner = ReplicaAssigner(
            cluster_control,
            StripedReplicaPlacer(rng),
            default_num_partitions=default_num_partitions,
            default_replication_factor=default_replication_factor,
        )
        self._topics: TimelineHashMap[uuid.UUID, TopicControlInfo] = TimelineHashMap(
            snapshot_registry
        )
        self._topics_by_name: TimelineHashMap[str, uuid.UUID] = TimelineHashMap(snapshot_registry)
        #: Names with '.' or '_' by their unified form, to refuse colliding new names.
        self._collision_names: TimelineHashMap[str, frozenset[str]] = TimelineHashMap(
            snapshot_registry
        )
        self._partitions: TimelineHashMap[TopicIdPartition, PartitionRegistration] = (
            TimelineHashMap(snapshot_registry)
        )
        self.brokers_to_isrs = BrokersToIsrs(snapshot_registry)
        #: The partitions not led by their preferred (first) replica.
        self._imbalanced: TimelineHashSet[TopicIdPartition] = TimelineHashSet(snapshot_registry)

    # -- reads ------------------------------------------------------------------------------

    def topic(self, name: str, offset: int = LATEST) -> TopicControlInfo | None:
        """The topic called ``name`` as of ``offset``, ``None`` if there is none."""
        topic_id = self._topics_by_name.get(name, offset)
        return None if topic_id is None else self._topics.get(topic_id, offset)

    def topic_by_id(self, topic_id: uuid.UUID, offset: int = LATEST) -> TopicControlInfo | None:
        return self._topics.get(topic_id, offset)

    def topic_names(self, offset: int = LATEST) -> list[str]:
        return self._topics_by_name.keys(offset)

    def partition(
        self, topic_id: uuid.UUID, partition_id: int, offset: int = LATEST
    ) -> PartitionRegistration | None:
        return self._partitions.get(TopicIdPartition(topic_id, partition_id), offset)

    def partitions_led_by(self, broker_id: int, offset: int = LATEST) -> list[TopicIdPartition]:
        """The partitions ``broker_id`` leads (``NO_LEADER``: the leaderless ones)."""
        return self.brokers_to_isrs.partitions_led_by(broker_id, offset)

    def partitions_in_isr(self, broker_id: int, offset: int = LATEST) -> list[TopicIdPartition]:
        """The partitions whose ISR holds ``broker_id``."""
        return self.brokers_to_isrs.partitions_with_broker_in_isr(broker_id, offset)

    # -- replay ------------------------------------------------------------------------------

    def replay(
        self,
        record: TopicRecord | PartitionRecord | PartitionChangeRecord | RemoveTopicRecord,
        offset: int,
    ) -> None:
        """Apply ``record`` (at ``offset``, for the log lines) to the state."""
        match record:
            case TopicRecord():
                self._replay_topic(record)
            case PartitionRecord():
                self._replay_partition(record)
            case PartitionChangeRecord():
                self._replay_partition_change(record)
            case RemoveTopicRecord():
                self._replay_remove_topic(record)
        logger.debug("replayed %s at offset %d", record, offset)

    def _replay_topic(self, record: TopicRecord) -> None:
        existing = self._topics_by_name.get(record.name)
        if existing is not None:
            raise MetadataReplayError(
                f"TopicRecord for {record.name!r} with id {record.topic_id}, but the topic "
                f"exists with id {existing}"
            )
        if record.topic_id in self._topics:
            raise MetadataReplayError(
                f"TopicRecord for {record.name!r} with id {record.topic_id}, an id another "
                "topic has"
            )
        self._topics_by_name.put(record.name, record.topic_id)
        self._topics.put(record.topic_id, TopicControlInfo(record.name, record.topic_id, 0))
        if has_collision_chars(record.name):
            unified = unify_collision_chars(record.name)
            names = self._collision_names.get(unified) or frozenset()
            self._collision_names.put(unified, names | {record.name})

    def _topic_or_fail(self, topic_id: uuid.UUID, what: str) -> TopicControlInfo:
        topic = self._topics.get(topic_id)
        if topic is None:
            raise MetadataReplayError(f"{what} for topic id {topic_id}, which does not exist")
        return topic

    def _replay_partition(self, record: PartitionRecord) -> None:
        topic = self._topic_or_fail(record.topic_id, f"PartitionRecord {record.partition_id}")
        key = TopicIdPartition(record.topic_id, record.partition_id)
        new = PartitionRegistration.from_record(record)
        prev = self._partitions.put(key, new)
        if prev is None:
            # A snapshot may list a topic's partitions in any order: the count is the highest
            # id plus one, as the partitions are numbered from 0 without gaps.
            count = max(topic.num_partitions, record.partition_id + 1)
            self._topics.put(record.topic_id, TopicControlInfo(topic.name, topic.topic_id, count))
        self._index(key, prev, new)

    def _replay_partition_change(self, record: PartitionChangeRecord) -> None:
        key = TopicIdPartition(record.topic_id, record.partition_id)
        prev = self._partitions.get(key)
        if prev is None:
            raise MetadataReplayError(
                f"PartitionChangeRecord for {record.topic_id}:{record.partition_id}, which "
                "does not exist"
            )
        new = prev.merge(record)
        self._partitions.put(key, new)
        self._index(key, prev, new)

    def _index(
        self,
        key: TopicIdPartition,
        prev: PartitionRegistration | None,
        new: PartitionRegistration | None,
    ) -> None:
        self.brokers_to_isrs.update(key, prev, new)
        if new is not None and new.leader != new.replicas[0]:
            self._imbalanced.add(key)
        else:
            self._imbalanced.discard(key)

    def _replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        topic = self._topic_or_fail(record.topic_id, "RemoveTopicRecord")
        self._topics.remove(record.topic_id)
        self._topics_by_name.remove(topic.name)
        unified = unify_collision_chars(topic.name)
        names = self._collision_names.get(unified)
        if names is not None:
            rest = names - {topic.name}
            if rest:
                self._collision_names.put(unified, rest)
            else:
                self._collision_names.remove(unified)
        for partition_id in range(topic.num_partitions):
            key = TopicIdPartition(record.topic_id, partition_id)
            prev = self._partitions.remove(key)
            if prev is not None:
                self._index(key, prev, None)
        # Its configs go with it (Kafka's ConfigurationControlManager.deleteTopicConfigs).
        self._configs.delete_topic_configs(topic.name)

    # -- create topics -----------------------------------------------------------------------

    def create_topics(
        self, request: CreateTopicsRequest, describable: Collection[str]
    ) -> ControllerResult[CreateTopicsResponse]:
        """Create the request's topics: one result per topic name, each on its own (one may
        fail while others succeed); the records of all go in one atomic batch.

        ``describable``: the topics whose configs the caller may see (the rest get
        TOPIC_AUTHORIZATION_FAILED as ``topic_config_error_code``).
        """
        errors: dict[str, ApiError] = {}
        counts: dict[str, int] = {}
        for topic in request.topics:
            counts[topic.name] = counts.get(topic.name, 0) + 1
        for name, count in counts.items():
            if count > 1:
                errors[name] = ApiError(Errors.INVALID_REQUEST, "Duplicate topic name.")
        for topic in request.topics:
            if topic.name not in errors:
                error = self._new_topic_name_error(topic.name)
                if error is not None:
                    errors[topic.name] = error
        records: list[ApiMessageAndVersion] = []
        successes: dict[str, CreatableTopicResult] = {}
        new_ids: set[uuid.UUID] = set()
        for topic in request.topics:
            if topic.name in errors:
                continue
            try:
                topic_records, result = self._create_topic(
                    topic, topic.name in describable, new_ids
                )
            except ControllerApiError as exc:
                errors[topic.name] = exc.api_error
                continue
            records.extend(topic_records)
            successes[topic.name] = result
        results = []
        for name in counts:
            error = errors.get(name)
            if error is None:
                results.append(successes[name])
            else:
                results.append(
                    CreatableTopicResult(
                        name=name, error_code=error.error, error_message=error.message
                    )
                )
        logger.info(
            "%sCreateTopics: %d created, %d refused",
            "validate-only " if request.validate_only else "",
            len(successes),
            len(errors),
        )
        response = CreateTopicsResponse(topics=tuple(results))
        return ControllerResult([] if request.validate_only else records, response, True)

    def _new_topic_name_error(self, name: str) -> ApiError | None:
        reason = topic_name_error(name)
        if reason is not None:
            return ApiError(Errors.INVALID_TOPIC_EXCEPTION, reason)
        if name in self._topics_by_name:
            return ApiError(Errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        colliding = self._collision_names.get(unify_collision_chars(name))
        if colliding:
            return ApiError(
                Errors.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with existing topic: {min(colliding)}",
            )
        return None

    def _create_topic(
        self, topic: CreatableTopic, describable: bool, new_ids: set[uuid.UUID]
    ) -> tuple[list[ApiMessageAndVersion], CreatableTopicResult]:
        """The records and result of one topic, or :class:`ControllerApiError`."""
        null_configs = [config.name for config in topic.configs if config.value is None]
        if null_configs:
            _fail(
                Errors.INVALID_CONFIG,
                "Null value not supported for topic configs: " + ",".join(null_configs),
            )
        config_records = self._topic_config_records(topic)
        if topic.assignments:
            assignments = self._assigner.manual(topic)
        else:
            assignments = self._assigner.placed(topic)
        topic_id = self._new_topic_id(new_ids)
        records = [at_latest_version(TopicRecord(name=topic.name, topic_id=topic_id))]
        # Kafka's order: the topic, its configs, then its partitions.
        records.extend(config_records)
        for partition_id, (replicas, isr) in enumerate(assignments):
            records.append(self._partition_record(topic_id, partition_id, replicas, isr))
        result = CreatableTopicResult(name=topic.name, topic_id=topic_id)
        if describable:
            result = msgspec.structs.replace(
                result,
                num_partitions=len(assignments),
                replication_factor=len(assignments[0][0]),
                configs=tuple(
                    CreatableTopicConfigs(
                        name=config.name, value=config.value, config_source=_TOPIC_CONFIG_SOURCE
                    )
                    for config in sorted(topic.configs, key=lambda c: c.name)
                ),
            )
        else:
            result = msgspec.structs.replace(
                result, topic_config_error_code=Errors.TOPIC_AUTHORIZATION_FAILED
            )
        return records, result

    def _topic_config_records(self, topic: CreatableTopic) -> list[ApiMessageAndVersion]:
        if not topic.configs:
            return []
        resource = ConfigResource(ConfigResourceType.TOPIC, topic.name)
        changes = {resource: {c.name: (OpType.SET, c.value) for c in topic.configs}}
        result = self._configs.incremental_alter_configs(
            changes, validate_only=False, newly_created_resource=True
        )
        error = result.response[resource]
        if not error.is_success():
            raise error.exception()
        return result.records

    def _new_topic_id(self, taken: set[uuid.UUID]) -> uuid.UUID:
        # A random (version 4) uuid, so never Kafka's reserved zero or metadata topic id; and
        # never one a topic has (its TopicRecord would be refused on replay).
        while True:
            topic_id = uuid.UUID(int=self._rng.getrandbits(128), version=4)
            if topic_id not in self._topics and topic_id not in taken:
                taken.add(topic_id)
                return topic_id

    def _partition_record(
        self,
        topic_id: uuid.UUID,
        partition_id: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
    ) -> ApiMessageAndVersion:
        return at_latest_version(
            PartitionRecord(
                partition_id=partition_id,
                topic_id=topic_id,
                replicas=replicas,
                isr=isr,
                leader=isr[0],
                leader_recovery_state=0,
                leader_epoch=0,
                partition_epoch=0,
                directories=tuple(self._default_dir(broker) for broker in replicas),
            )
        )

    def _default_dir(self, broker_id: int) -> uuid.UUID:
        """The log directory a new replica on ``broker_id`` goes to (Kafka's
        ``ClusterControlManager.defaultDir``): the broker's only one, else not yet known."""
        registration = self._cluster.registration(broker_id)
        if registration is None or not registration.directories:
            return MIGRATING_DIRECTORY
        if len(registration.directories) == 1:
            return registration.directories[0]
        return UNASSIGNED_DIRECTORY

    # -- delete topics -----------------------------------------------------------------------

    def delete_topics(self, request: DeleteTopicsRequest) -> ControllerResult[DeleteTopicsResponse]:
        """Delete the topics the request names (by name or by id, not both): one result per
        topic named, each on its own; the records of all go in one atomic batch."""
        results: list[DeletableTopicResult] = []
        records: list[ApiMessageAndVersion] = []
        names = [t.name for t in request.topics if t.name is not None and t.topic_id == ZERO_UUID]
        ids = [t.topic_id for t in request.topics if t.name is None and t.topic_id != ZERO_UUID]
        for state in request.topics:
            if state.name is None and state.topic_id == ZERO_UUID:
                results.append(_deleted(None, ZERO_UUID, Errors.INVALID_REQUEST, _NEITHER))
            elif state.name is not None and state.topic_id != ZERO_UUID:
                results.append(_deleted(state.name, state.topic_id, Errors.INVALID_REQUEST, _BOTH))
        deleting: dict[uuid.UUID, str] = {}
        for name in _unique(names, results, lambda n: _deleted(n, ZERO_UUID, *_DUP_NAME)):
            topic_id = self._topics_by_name.get(name)
            if topic_id is None:
                results.append(_deleted(name, ZERO_UUID, Errors.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                deleting[topic_id] = name
        for topic_id in _unique(ids, results, lambda i: _deleted(None, i, *_DUP_ID)):
            topic = self._topics.get(topic_id)
            if topic is None:
                results.append(_deleted(None, topic_id, Errors.UNKNOWN_TOPIC_ID))
            elif topic_id in deleting:
                del deleting[topic_id]
                results.append(
                    _deleted(
                        topic.name,
                        topic_id,
                        Errors.INVALID_REQUEST,
                        "The provided topic name maps to an ID that was already supplied.",
                    )
                )
            else:
                deleting[topic_id] = topic.name
        for topic_id, name in deleting.items():
            records.append(at_latest_version(RemoveTopicRecord(topic_id=topic_id)))
            results.append(_deleted(name, topic_id, Errors.NONE))
        logger.info("DeleteTopics: deleting %s", sorted(deleting.values()))
        return ControllerResult(records, DeleteTopicsResponse(responses=tuple(results)), True)

    # -- create partitions -------------------------------------------------------------------

    def create_partitions(
        self, request: CreatePartitionsRequest
    ) -> ControllerResult[CreatePartitionsResponse]:
        """Add partitions to existing topics: one result per topic, each on its own; the
        records of all go in one atomic batch (none when ``validate_only``)."""
        records: list[ApiMessageAndVersion] = []
        results = []
        for topic in request.topics:
            try:
                records.extend(self._create_partitions(topic))
            except ControllerApiError as exc:
                error = exc.api_error
            else:
                error = ApiError.NONE
            results.append(
                CreatePartitionsTopicResult(
                    name=topic.name, error_code=error.error, error_message=error.message
                )
            )
        response = CreatePartitionsResponse(results=tuple(results))
        return ControllerResult([] if request.validate_only else records, response, True)

    def _create_partitions(self, request: CreatePartitionsTopic) -> list[ApiMessageAndVersion]:
        topic = self.topic(request.name)
        if topic is None:
            _fail(Errors.UNKNOWN_TOPIC_OR_PARTITION, None)
        if request.count == topic.num_partitions:
            _fail(
                Errors.INVALID_PARTITIONS, f"Topic already has {topic.num_partitions} partition(s)."
            )
        if request.count < topic.num_partitions:
            _fail(
                Errors.INVALID_PARTITIONS,
                f"The topic {request.name} currently has {topic.num_partitions} partition(s); "
                f"{request.count} would not be an increase.",
            )
        additional = request.count - topic.num_partitions
        if request.assignments is not None and len(request.assignments) != additional:
            _fail(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"Attempted to add {additional} additional partition(s), but only "
                f"{len(request.assignments)} assignment(s) were specified.",
            )
        first = self.partition(topic.topic_id, 0)
        if first is None:
            raise IllegalStateError(f"topic {request.name} has no partition 0")
        replication_factor = len(first.replicas)
        if request.assignments is None:
            assignments = self._assigner.place(additional, replication_factor)
        else:
            assignments = []
            for index, assignment in enumerate(request.assignments):
                replicas = tuple(assignment.broker_ids)
                self._assigner.validate_manual(replicas, replication_factor)
                isr = tuple(broker for broker in replicas if self._cluster.is_active(broker))
                if not isr:
                    _fail(
                        Errors.INVALID_REPLICA_ASSIGNMENT,
                        "All brokers specified in the manual partition assignment for "
                        f"partition {topic.num_partitions + index} are fenced or in controlled "
                        "shutdown.",
                    )
                assignments.append((replicas, isr))
        return [
            self._partition_record(topic.topic_id, topic.num_partitions + index, replicas, isr)
            for index, (replicas, isr) in enumerate(assignments)
        ]

    # -- brokers coming and going ------------------------------------------------------------

    def process_broker_heartbeat(
        self, request: BrokerHeartbeatRequest, now_ms: int
    ) -> ControllerResult[BrokerHeartbeatReply]:
        """A broker's heartbeat (Kafka's ``processBrokerHeartbeat``): renews its session and
        moves it on (``BrokerHeartbeatManager.next_broker_state``): unfenced once it has
        replayed its own registration, fenced when it asks, into controlled shutdown while it
        still leads partitions, told to shut down once it may. STALE_BROKER_EPOCH when the
        broker is not registered at ``request.broker_epoch``.

        When the reply says ``in_controlled_shutdown``, the controller records the offset of
        this operation's last record (or the log end) as the broker's controlled shutdown offset
        (``BrokerHeartbeatManager.maybe_update_controlled_shutdown_offset``, Kafka's
        ``processBatchEndOffset``).
        """
        broker_id = request.broker_id
        register_offset = self._cluster.register_broker_record_offset(broker_id)
        if register_offset is None:
            _fail(
                Errors.STALE_BROKER_EPOCH,
                f"Receive a heartbeat from broker {broker_id} before registration",
            )
        self._cluster.check_broker_epoch(broker_id, request.broker_epoch)
        heartbeats = self._cluster.heartbeats
        states = heartbeats.next_broker_state(
            broker_id,
            request,
            register_offset,
            lambda: self.brokers_to_isrs.has_leaderships(broker_id),
        )
        records: list[ApiMessageAndVersion] = []
        if states.current is not states.next:
            match states.next:
                case BrokerControlState.FENCED | BrokerControlState.SHUTDOWN_NOW:
                    self.handle_broker_fenced(broker_id, records)
                case BrokerControlState.UNFENCED:
                    self.handle_broker_unfenced(broker_id, request.broker_epoch, records)
                case BrokerControlState.CONTROLLED_SHUTDOWN:
                    self.handle_broker_in_controlled_shutdown(
                        broker_id, request.broker_epoch, records
                    )
        heartbeats.touch(broker_id, states.next.fenced, request.current_metadata_offset, now_ms)
        reply = BrokerHeartbeatReply(
            is_caught_up=request.current_metadata_offset >= register_offset,
            is_fenced=states.next.fenced,
            in_controlled_shutdown=states.next.in_controlled_shutdown,
            should_shut_down=states.next.should_shut_down,
        )
        return ControllerResult(records, reply)

    def maybe_fence_stale_broker(self, now_ms: int) -> ControllerResult[None]:
        """Fence the unfenced broker whose session ran out longest ago, if any (Kafka's
        ``maybeFenceOneStaleBroker``: one at a time, so that each fencing's leadership moves
        are visible before the next is decided)."""
        records: list[ApiMessageAndVersion] = []
        # The session is marked fenced when the fencing record is replayed, not here: if the
        # write never happens (leadership lost), the broker is found stale again next time.
        stale = self._cluster.heartbeats.find_stale_brokers(now_ms)
        if stale:
            logger.info("fencing broker %d: its session timed out", stale[0])
            self.handle_broker_fenced(stale[0], records)
        return ControllerResult(records, None)

    def unregister_broker(self, broker_id: int) -> ControllerResult[None]:
        """Unregister ``broker_id`` (BROKER_ID_NOT_REGISTERED if it is not registered)."""
        records: list[ApiMessageAndVersion] = []
        self.handle_broker_unregistered(broker_id, records)
        return ControllerResult(records, None)

    def handle_broker_fenced(self, broker_id: int, records: list[ApiMessageAndVersion]) -> None:
        """Append the records fencing ``broker_id``: it leaves every ISR it is in, its
        leaderships move on, then its registration is fenced."""
        self._generate_leader_and_isr_updates(
            broker_id,
            NO_LEADER,
            records,
            self.brokers_to_isrs.partitions_with_broker_in_isr(broker_id),
        )
        records.append(self._cluster.fence_record(broker_id))

    def handle_broker_unfenced(
        self, broker_id: int, broker_epoch: int, records: list[ApiMessageAndVersion]
    ) -> None:
        """Append the records unfencing ``broker_id``: its registration first, then the
        leaderless partitions whose ISR holds it get it as leader (it counts as active here,
        although its registration is not unfenced until the first record is replayed)."""
        records.append(self._cluster.unfence_record(broker_id, broker_epoch))
        self._generate_leader_and_isr_updates(
            NO_LEADER, broker_id, records, self.brokers_to_isrs.partitions_with_no_leader()
        )

    def handle_broker_in_controlled_shutdown(
        self, broker_id: int, broker_epoch: int, records: list[ApiMessageAndVersion]
    ) -> None:
        """Append the records starting ``broker_id``'s controlled shutdown: its registration
        (unless already in controlled shutdown), then, as for fencing, it leaves every ISR and
        its leaderships move on."""
        change = self._cluster.controlled_shutdown_record(broker_id, broker_epoch)
        if change is not None:
            records.append(change)
        self._generate_leader_and_isr_updates(
            broker_id,
            NO_LEADER,
            records,
            self.brokers_to_isrs.partitions_with_broker_in_isr(broker_id),
        )

    def handle_broker_unregistered(
        self, broker_id: int, records: list[ApiMessageAndVersion]
    ) -> None:
        """Append the records unregistering ``broker_id``: as for fencing, it leaves every ISR
        and its leaderships move on, then its registration goes (BROKER_ID_NOT_REGISTERED if it
        is not registered)."""
        unregister = self._cluster.unregister_record(broker_id)
        self._generate_leader_and_isr_updates(
            broker_id,
            NO_LEADER,
            records,
            self.brokers_to_isrs.partitions_with_broker_in_isr(broker_id),
        )
        records.append(unregister)

    def partition_leaders_imbalanced(self) -> bool:
        """Whether some partition is not led by its preferred replica (Kafka's
        ``arePartitionLeadersImbalanced``)."""
        return len(self._imbalanced) > 0

    def maybe_balance_partition_leaders(
        self, max_elections: int = MAX_ELECTIONS_PER_IMBALANCE
    ) -> ControllerResult[bool]:
        """Give leadership back to preferred replicas that are in the ISR and active, at most
        ``max_elections`` of them (Kafka's ``maybeBalancePartitionLeaders``, which its
        controller runs every ``leader.imbalance.check.interval.seconds``); the response says
        whether it stopped at the limit, so that the caller runs it again at once."""
        records: list[ApiMessageAndVersion] = []
        for key in self._imbalanced:
            if len(records) >= max_elections:
                break
            partition = self._partitions.get(key)
            if partition is None:
                raise IllegalStateError(f"imbalanced partition {key} does not exist")
            builder = PartitionChangeBuilder(
                partition,
                key.topic_id,
                key.partition_id,
                self._cluster.is_active,
                self._default_dir,
            )
            builder.election = Election.PREFERRED
            change = builder.build()
            if change is not None:
                records.append(change)
        return ControllerResult(records, len(records) >= max_elections)

    def _generate_leader_and_isr_updates(
        self,
        broker_to_remove: int,
        broker_to_add: int,
        records: list[ApiMessageAndVersion],
        partitions: Iterable[TopicIdPartition],
    ) -> None:
        def acceptable(broker: int) -> bool:
            if broker == broker_to_remove:
                return False
            return broker == broker_to_add or self._cluster.is_active(broker)

        count = len(records)
        for key in partitions:
            partition = self._partitions.get(key)
            if partition is None:
                raise IllegalStateError(f"partition {key} is indexed but does not exist")
            builder = PartitionChangeBuilder(
                partition, key.topic_id, key.partition_id, acceptable, self._default_dir
            )
            builder.election = Election.ONLINE
            builder.target_isr = tuple(b for b in partition.isr if b != broker_to_remove)
            change = builder.build()
            if change is not None:
                records.append(change)
        if len(records) != count:
            logger.info(
                "broker %s: changing %d partition(s)",
                broker_to_remove if broker_to_remove != NO_LEADER else broker_to_add,
                len(records) - count,
            )


def _fail(error: Errors, message: str | None) -> NoReturn:
    raise ControllerApiError(error, message)


_NEITHER = "Neither topic name nor id were specified."
_BOTH = "You may not specify both topic name and topic id."
_DUP_NAME = (Errors.INVALID_REQUEST, "Duplicate topic name.")
_DUP_ID = (Errors.INVALID_REQUEST, "Duplicate topic id.")


def _deleted(
    name: str | None, topic_id: uuid.UUID, error: Errors, message: str | None = None
) -> DeletableTopicResult:
    return DeletableTopicResult(
        name=name, topic_id=topic_id, error_code=error, error_message=message
    )


def _unique(
    items: Sequence[_T],
    results: list[DeletableTopicResult],
    duplicate: Callable[[_T], DeletableTopicResult],
) -> list[_T]:
    """The items named once; appends an error result for each item named more than once."""
    counts = Counter(items)
    results.extend(duplicate(item) for item, count in counts.items() if count > 1)
    return [item for item, count in counts.items() if count == 1]
