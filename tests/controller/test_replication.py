"""ReplicationControlManager: Kafka's ``ReplicationControlManagerTest`` scenarios in kraft's
terms. Every operation's records are replayed (at consecutive offsets, with a timeline snapshot
at each, as the controller does) before the state is read: operations change nothing."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from kraft.common.uuids import ZERO_UUID
from kraft.controller.brokers_to_isrs import TopicIdPartition
from kraft.controller.cluster_control import ClusterControlManager
from kraft.controller.configs import (
    ConfigResource,
    ConfigResourceType,
    ConfigurationControlManager,
)
from kraft.controller.features import FeatureControlManager
from kraft.controller.replication import ReplicationControlManager
from kraft.controller.result import ControllerApiError, ControllerResult
from kraft.controller.topic_names import topic_name_error
from kraft.errors import IllegalStateError
from kraft.metadata.delta import MetadataDelta
from kraft.metadata.image import (
    MIGRATING_DIRECTORY,
    NO_LEADER,
    MetadataImage,
    MetadataProvenance,
    PartitionRegistration,
)
from kraft.metadata.records import (
    ApiMessageAndVersion,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)
from kraft.metadata.timeline import SnapshotRegistry
from kraft.protocol.controller_messages import (
    BrokerHeartbeatRequest,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DeleteTopicState,
)
from kraft.protocol.errors import Errors


class Env:
    """A replication manager over real cluster and config managers, fed by replay, on an
    active controller (the cluster manager keeps broker sessions) at time ``now_ms``."""

    def __init__(self, seed: int = 1, rng: random.Random | None = None) -> None:
        self.registry = SnapshotRegistry()
        self.features = FeatureControlManager(self.registry)
        self.cluster = ClusterControlManager(
            self.registry, cluster_id="c", feature_control=self.features
        )
        self.cluster.activate(0)
        self.configs = ConfigurationControlManager(self.registry)
        self.replication = ReplicationControlManager(
            self.registry,
            self.cluster,
            self.configs,
            rng or random.Random(seed),
            default_num_partitions=2,
            default_replication_factor=2,
        )
        self.offset = 0
        self.now_ms = 0
        #: Every record replayed, in order: the log.
        self.log: list[ApiMessageAndVersion] = []

    def replay(self, records: Iterable[ApiMessageAndVersion]) -> None:
        for record in records:
            self.log.append(record)
            message = record.message
            if isinstance(message, FeatureLevelRecord):
                self.features.replay(message, self.offset)
            elif isinstance(
                message, (TopicRecord, PartitionRecord, PartitionChangeRecord, RemoveTopicRecord)
            ):
                self.replication.replay(message, self.offset)
            elif isinstance(message, ConfigRecord):
                self.configs.replay(message, self.offset)
            else:
                self.cluster.replay(message, self.offset)  # type: ignore[arg-type]
            self.registry.get_or_create_snapshot(self.offset)
            self.offset += 1

    def apply(self, result: ControllerResult[Any]) -> Any:
        self.replay(result.records)
        return result.response

    def register(self, broker_id: int, rack: str | None = None, *, fenced: bool = False) -> int:
        """Register ``broker_id`` (unfenced unless ``fenced``); its epoch."""
        epoch = self.offset
        record = RegisterBrokerRecord(
            broker_id=broker_id,
            broker_epoch=epoch,
            incarnation_id=uuid.UUID(int=broker_id + 1),
            rack=rack,
            fenced=True,
            log_dirs=(uuid.UUID(int=0xD100 + broker_id),),
        )
        self.replay([ApiMessageAndVersion(record, 3)])
        if not fenced:
            self.replay([self.cluster.unfence_record(broker_id, epoch)])
        return epoch

    def epoch(self, broker_id: int) -> int:
        registration = self.cluster.registration(broker_id)
        assert registration is not None
        return registration.epoch

    def fence(self, broker_id: int) -> list[ApiMessageAndVersion]:
        records: list[ApiMessageAndVersion] = []
        self.replication.handle_broker_fenced(broker_id, records)
        self.replay(records)
        return records

    def unfence(self, broker_id: int) -> list[ApiMessageAndVersion]:
        records: list[ApiMessageAndVersion] = []
        self.replication.handle_broker_unfenced(broker_id, self.epoch(broker_id), records)
        self.replay(records)
        return records

    def shut_down(self, broker_id: int) -> list[ApiMessageAndVersion]:
        records: list[ApiMessageAndVersion] = []
        self.replication.handle_broker_in_controlled_shutdown(
            broker_id, self.epoch(broker_id), records
        )
        self.replay(records)
        # What the controller does once the records are appended (Kafka's
        # processBatchEndOffset): from now on the broker is not usable for placement.
        self.cluster.heartbeats.maybe_update_controlled_shutdown_offset(broker_id, self.offset - 1)
        return records

    def heartbeat(
        self,
        broker_id: int,
        offset: int | None = None,
        *,
        want_fence: bool = False,
        want_shut_down: bool = False,
    ) -> Any:
        """A heartbeat from ``broker_id`` having replayed up to ``offset`` (default: all)."""
        request = BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=self.epoch(broker_id),
            current_metadata_offset=self.offset if offset is None else offset,
            want_fence=want_fence,
            want_shut_down=want_shut_down,
        )
        return self.apply(self.replication.process_broker_heartbeat(request, self.now_ms))

    def create(self, *topics: CreatableTopic, validate_only: bool = False) -> dict[str, Any]:
        request = CreateTopicsRequest(topics=topics, validate_only=validate_only)
        names = {t.name for t in topics}
        response = self.apply(self.replication.create_topics(request, names))
        return {result.name: result for result in response.topics}

    def partition(self, name: str, index: int) -> PartitionRegistration:
        topic = self.replication.topic(name)
        assert topic is not None
        partition = self.replication.partition(topic.topic_id, index)
        assert partition is not None
        return partition


def topic(name: str, partitions: int = 1, rf: int = 3, **kw: Any) -> CreatableTopic:
    return CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf, **kw)


@pytest.fixture
def env() -> Env:
    env = Env()
    for broker in (0, 1, 2, 3):
        env.register(broker)
    return env


def partitions_of(env: Env) -> dict[str, dict[int, PartitionRegistration]]:
    """Every topic's partitions as the manager holds them."""
    state = {}
    for name in env.replication.topic_names():
        info = env.replication.topic(name)
        assert info is not None
        state[name] = {index: env.partition(name, index) for index in range(info.num_partitions)}
    return state


def image_of(records: Iterable[ApiMessageAndVersion]) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in records:
        delta.replay(record.message)
    return delta.apply(MetadataProvenance(0, 0, 0))


def check_index(env: Env) -> None:
    """The broker-to-ISR index equals what the partitions say."""
    replication = env.replication
    expected_isr: dict[int, set[TopicIdPartition]] = {}
    expected_led: dict[int, set[TopicIdPartition]] = {}
    for name in replication.topic_names():
        info = replication.topic(name)
        assert info is not None
        for index in range(info.num_partitions):
            key = TopicIdPartition(info.topic_id, index)
            partition = replication.partition(*key)
            assert partition is not None
            for broker in partition.isr:
                expected_isr.setdefault(broker, set()).add(key)
            expected_led.setdefault(partition.leader, set()).add(key)
    imbalanced = any(
        p.leader != p.replicas[0] for parts in partitions_of(env).values() for p in parts.values()
    )
    assert replication.partition_leaders_imbalanced() == imbalanced
    for broker in range(-1, 6):
        if broker >= 0:
            assert set(replication.partitions_in_isr(broker)) == expected_isr.get(broker, set())
        assert set(replication.partitions_led_by(broker)) == expected_led.get(broker, set())


# -- create topics ---------------------------------------------------------------------------


def test_create_topic_places_replicas_and_leads_with_the_first(env: Env) -> None:
    request = CreateTopicsRequest(topics=(topic("foo", partitions=3),))
    result = env.replication.create_topics(request, {"foo"})
    assert result.is_atomic
    assert env.replication.topic("foo") is None  # nothing changes before replay
    messages = [r.message for r in result.records]
    assert isinstance(messages[0], TopicRecord) and messages[0].name == "foo"
    assert [type(m) for m in messages[1:]] == [PartitionRecord] * 3
    (created,) = env.apply(result).topics
    assert created.error_code == Errors.NONE
    assert (created.num_partitions, created.replication_factor) == (3, 3)
    info = env.replication.topic("foo")
    assert info is not None and info.topic_id == created.topic_id == messages[0].topic_id
    leaders = set()
    for index in range(3):
        partition = env.partition("foo", index)
        assert len(set(partition.replicas)) == 3
        assert partition.isr == partition.replicas
        assert partition.leader == partition.replicas[0]
        assert (partition.leader_epoch, partition.partition_epoch) == (0, 0)
        assert partition.directories == tuple(uuid.UUID(int=0xD100 + b) for b in partition.replicas)
        leaders.add(partition.leader)
    assert len(leaders) == 3  # striped: three partitions, three leaders
    check_index(env)


def test_an_existing_topic_is_not_created_again(env: Env) -> None:
    assert env.create(topic("foo"))["foo"].error_code == Errors.NONE
    result = env.create(topic("foo"))["foo"]
    assert (result.error_code, result.error_message) == (
        Errors.TOPIC_ALREADY_EXISTS,
        "Topic 'foo' already exists.",
    )


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "the empty string is not allowed"),
        (".", "'.' is not allowed"),
        ("..", "'..' is not allowed"),
        ("a" * 250, "is longer than the max allowed length 249"),
        ("a b", "contains one or more characters other than ASCII alphanumerics"),
        ("caf\u00e9", "contains one or more characters other than ASCII alphanumerics"),
    ],
)
def test_invalid_topic_names_are_refused(env: Env, name: str, reason: str) -> None:
    result = env.create(topic(name))[name]
    assert result.error_code == Errors.INVALID_TOPIC_EXCEPTION
    assert reason in result.error_message


def test_valid_topic_names() -> None:
    for name in ("a", "a" * 249, "Foo.bar_baz-9", "..."):
        assert topic_name_error(name) is None


def test_a_name_colliding_with_an_existing_one_over_dot_and_underscore_is_refused(
    env: Env,
) -> None:
    env.create(topic("foo.bar"))
    result = env.create(topic("foo_bar"))["foo_bar"]
    assert result.error_code == Errors.INVALID_TOPIC_EXCEPTION
    assert result.error_message == "Topic 'foo_bar' collides with existing topic: foo.bar"
    assert env.create(topic("foo-bar"))["foo-bar"].error_code == Errors.NONE


def test_deleting_a_topic_frees_its_colliding_names(env: Env) -> None:
    created = env.create(topic("foo.bar"))["foo.bar"]
    env.apply(
        env.replication.delete_topics(
            DeleteTopicsRequest(topics=(DeleteTopicState(topic_id=created.topic_id),))
        )
    )
    assert env.create(topic("foo_bar"))["foo_bar"].error_code == Errors.NONE


@pytest.mark.parametrize(
    ("partitions", "rf", "error"),
    [
        (1, 5, Errors.INVALID_REPLICATION_FACTOR),
        (1, 0, Errors.INVALID_REPLICATION_FACTOR),
        (1, -2, Errors.INVALID_REPLICATION_FACTOR),
        (0, 3, Errors.INVALID_PARTITIONS),
        (-2, 3, Errors.INVALID_PARTITIONS),
    ],
)
def test_bad_counts_are_refused(env: Env, partitions: int, rf: int, error: Errors) -> None:
    result = env.create(topic("foo", partitions=partitions, rf=rf))["foo"]
    assert result.error_code == error
    assert env.replication.topic("foo") is None


def test_too_high_a_replication_factor_says_how_many_brokers_there_are(env: Env) -> None:
    result = env.create(topic("foo", rf=5))["foo"]
    assert result.error_message == (
        "Unable to replicate the partition 5 time(s): The target replication factor of 5 "
        "cannot be reached because only 4 broker(s) are registered."
    )


def test_minus_one_takes_the_defaults(env: Env) -> None:
    assert env.create(topic("foo", partitions=-1, rf=-1))["foo"].error_code == Errors.NONE
    info = env.replication.topic("foo")
    assert info is not None and info.num_partitions == 2
    assert len(env.partition("foo", 0).replicas) == 2


def test_one_bad_topic_does_not_stop_the_others(env: Env) -> None:
    results = env.create(topic("good"), topic("bad", rf=9), topic("also-good", partitions=2))
    assert {name: r.error_code for name, r in results.items()} == {
        "good": Errors.NONE,
        "bad": Errors.INVALID_REPLICATION_FACTOR,
        "also-good": Errors.NONE,
    }
    assert sorted(env.replication.topic_names()) == ["also-good", "good"]


def test_a_name_twice_in_one_request_is_refused(env: Env) -> None:
    request = CreateTopicsRequest(topics=(topic("foo"), topic("foo", rf=1), topic("bar")))
    response = env.apply(env.replication.create_topics(request, set()))
    assert [(r.name, r.error_code) for r in response.topics] == [
        ("foo", Errors.INVALID_REQUEST),
        ("bar", Errors.NONE),
    ]


def test_validate_only_answers_without_records(env: Env) -> None:
    request = CreateTopicsRequest(topics=(topic("foo"), topic("bar", rf=9)), validate_only=True)
    result = env.replication.create_topics(request, {"foo"})
    assert result.records == []
    assert [r.error_code for r in result.response.topics] == [
        Errors.NONE,
        Errors.INVALID_REPLICATION_FACTOR,
    ]


def test_fenced_brokers_are_replicas_but_not_in_the_isr_nor_leaders(env: Env) -> None:
    env.register(4, fenced=True)
    env.create(topic("foo", partitions=10, rf=5))
    for index in range(10):
        partition = env.partition("foo", index)
        assert 4 in partition.replicas
        assert 4 not in partition.isr
        assert partition.leader != 4 and partition.leader == partition.isr[0]
    check_index(env)


def test_no_unfenced_broker_means_no_topic() -> None:
    env = Env()
    env.register(0, fenced=True)
    result = env.create(topic("foo", rf=1))["foo"]
    assert result.error_code == Errors.INVALID_REPLICATION_FACTOR
    assert "All brokers are currently fenced." in result.error_message


def test_brokers_in_controlled_shutdown_are_not_placed_on(env: Env) -> None:
    env.shut_down(3)
    assert env.create(topic("foo", rf=4))["foo"].error_code == Errors.INVALID_REPLICATION_FACTOR
    env.create(topic("bar", partitions=8, rf=3))
    for index in range(8):
        assert 3 not in env.partition("bar", index).replicas


def test_results_carry_configs_only_for_describable_topics(env: Env) -> None:
    config = (CreatableTopicConfig(name="cleanup.policy", value="compact"),)
    request = CreateTopicsRequest(topics=(topic("foo", configs=config), topic("bar")))
    response = env.apply(env.replication.create_topics(request, {"foo"}))
    foo, bar = response.topics
    assert foo.topic_config_error_code == Errors.NONE
    assert [(c.name, c.value) for c in foo.configs] == [("cleanup.policy", "compact")]
    assert bar.topic_config_error_code == Errors.TOPIC_AUTHORIZATION_FAILED
    assert (bar.num_partitions, bar.replication_factor) == (-1, -1)


def test_topic_configs_are_written_between_the_topic_and_its_partitions(env: Env) -> None:
    config = (CreatableTopicConfig(name="retention.ms", value="1000"),)
    request = CreateTopicsRequest(topics=(topic("foo", partitions=2, configs=config),))
    result = env.replication.create_topics(request, set())
    assert [type(r.message) for r in result.records] == [
        TopicRecord,
        ConfigRecord,
        PartitionRecord,
        PartitionRecord,
    ]
    env.apply(result)
    resource = ConfigResource(ConfigResourceType.TOPIC, "foo")
    assert env.configs.config(resource) == {"retention.ms": "1000"}
    info = env.replication.topic("foo")
    assert info is not None
    env.apply(
        env.replication.delete_topics(DeleteTopicsRequest(topics=(DeleteTopicState(name="foo"),)))
    )
    assert env.configs.config(resource) == {}


def test_a_null_config_value_is_refused(env: Env) -> None:
    config = (CreatableTopicConfig(name="retention.ms", value=None),)
    result = env.create(topic("foo", configs=config))["foo"]
    assert result.error_code == Errors.INVALID_CONFIG


def test_manual_assignment(env: Env) -> None:
    assignments = (
        CreatableReplicaAssignment(partition_index=1, broker_ids=(3, 0)),
        CreatableReplicaAssignment(partition_index=0, broker_ids=(1, 2)),
    )
    env.fence(3)
    result = env.create(topic("foo", partitions=-1, rf=-1, assignments=assignments))["foo"]
    assert result.error_code == Errors.NONE
    assert (env.partition("foo", 0).replicas, env.partition("foo", 0).leader) == ((1, 2), 1)
    p1 = env.partition("foo", 1)
    assert (p1.replicas, p1.isr, p1.leader) == ((3, 0), (0,), 0)


@pytest.mark.parametrize(
    ("assignments", "error", "message"),
    [
        ([(0, (1, 9))], Errors.INVALID_REPLICA_ASSIGNMENT, "broker 9, but no such broker"),
        ([(0, (1, 1))], Errors.INVALID_REPLICA_ASSIGNMENT, "broker 1 more than once"),
        ([(0, ())], Errors.INVALID_REPLICA_ASSIGNMENT, "empty replica list"),
        ([(0, (1, 2)), (1, (1,))], Errors.INVALID_REPLICA_ASSIGNMENT, "not consistent"),
        ([(0, (1,)), (2, (2,))], Errors.INVALID_REPLICA_ASSIGNMENT, "consecutive 0-based"),
        ([(0, (1,)), (0, (2,))], Errors.INVALID_REPLICA_ASSIGNMENT, "multiple manual"),
    ],
)
def test_bad_manual_assignments(
    env: Env, assignments: Sequence[tuple[int, tuple[int, ...]]], error: Errors, message: str
) -> None:
    spec = tuple(
        CreatableReplicaAssignment(partition_index=i, broker_ids=b) for i, b in assignments
    )
    result = env.create(topic("foo", partitions=-1, rf=-1, assignments=spec))["foo"]
    assert result.error_code == error
    assert message in result.error_message


def test_manual_assignment_with_a_replication_factor_is_invalid(env: Env) -> None:
    spec = (CreatableReplicaAssignment(partition_index=0, broker_ids=(1,)),)
    assert env.create(topic("foo", partitions=-1, rf=1, assignments=spec))["foo"].error_code == (
        Errors.INVALID_REQUEST
    )
    assert env.create(topic("foo", partitions=1, rf=-1, assignments=spec))["foo"].error_code == (
        Errors.INVALID_REQUEST
    )


def test_manual_assignment_on_only_fenced_brokers_is_refused(env: Env) -> None:
    env.fence(1)
    spec = (CreatableReplicaAssignment(partition_index=0, broker_ids=(1,)),)
    result = env.create(topic("foo", partitions=-1, rf=-1, assignments=spec))["foo"]
    assert result.error_code == Errors.INVALID_REPLICA_ASSIGNMENT


class RepeatingRandom(random.Random):
    """Draws the same 128 bits (a topic id's) twice in a row."""

    def __init__(self) -> None:
        super().__init__(0)
        self._last: int | None = None

    def getrandbits(self, k: int) -> int:
        if k != 128:
            return super().getrandbits(k)
        if self._last is None:
            self._last = super().getrandbits(k)
            return self._last
        value, self._last = self._last, None
        return value


def test_a_topic_id_is_never_reused() -> None:
    env = Env(rng=RepeatingRandom())
    env.register(0)
    first = env.create(topic("foo", rf=1))["foo"].topic_id
    assert env.create(topic("bar", rf=1))["bar"].topic_id != first
    results = env.create(topic("a", rf=1), topic("b", rf=1))
    assert results["a"].topic_id != results["b"].topic_id


def test_topic_ids_are_drawn_from_the_rng_and_distinct() -> None:
    ids = []
    for _ in range(2):
        env = Env(seed=5)
        env.register(0)
        results = env.create(*(topic(f"t{i}", rf=1) for i in range(50)))
        ids.append([results[f"t{i}"].topic_id for i in range(50)])
    assert ids[0] == ids[1]
    assert len(set(ids[0])) == 50 and ZERO_UUID not in ids[0]


# -- delete topics ---------------------------------------------------------------------------


def test_delete_topics_by_name_and_by_id(env: Env) -> None:
    created = env.create(topic("foo", partitions=3), topic("bar"), topic("baz"))
    request = DeleteTopicsRequest(
        topics=(DeleteTopicState(name="foo"), DeleteTopicState(topic_id=created["bar"].topic_id))
    )
    result = env.replication.delete_topics(request)
    assert result.is_atomic
    assert [type(r.message) for r in result.records] == [RemoveTopicRecord] * 2
    response = env.apply(result)
    assert {(r.name, r.topic_id, r.error_code) for r in response.responses} == {
        ("foo", created["foo"].topic_id, Errors.NONE),
        ("bar", created["bar"].topic_id, Errors.NONE),
    }
    assert env.replication.topic_names() == ["baz"]
    assert env.replication.partition(created["foo"].topic_id, 0) is None
    check_index(env)


def test_delete_topics_errors(env: Env) -> None:
    created = env.create(topic("foo"), topic("bar"))
    foo_id, unknown = created["foo"].topic_id, uuid.uuid4()
    request = DeleteTopicsRequest(
        topics=(
            DeleteTopicState(name="nope"),
            DeleteTopicState(topic_id=unknown),
            DeleteTopicState(),
            DeleteTopicState(name="foo", topic_id=foo_id),
            DeleteTopicState(name="bar"),
            DeleteTopicState(name="bar"),
            DeleteTopicState(name="foo"),
            DeleteTopicState(topic_id=foo_id),
        )
    )
    result = env.replication.delete_topics(request)
    assert result.records == []
    errors = {
        (r.name, r.topic_id): (r.error_code, r.error_message) for r in result.response.responses
    }
    assert errors == {
        ("nope", ZERO_UUID): (Errors.UNKNOWN_TOPIC_OR_PARTITION, None),
        (None, unknown): (Errors.UNKNOWN_TOPIC_ID, None),
        (None, ZERO_UUID): (Errors.INVALID_REQUEST, "Neither topic name nor id were specified."),
        ("foo", foo_id): (
            Errors.INVALID_REQUEST,
            "The provided topic name maps to an ID that was already supplied.",
        ),
        ("bar", ZERO_UUID): (Errors.INVALID_REQUEST, "Duplicate topic name."),
    }
    assert sorted(env.replication.topic_names()) == ["bar", "foo"]


# -- create partitions -----------------------------------------------------------------------


def test_create_partitions_adds_placed_partitions(env: Env) -> None:
    env.create(topic("foo", partitions=2, rf=2))
    request = CreatePartitionsRequest(topics=(CreatePartitionsTopic(name="foo", count=5),))
    result = env.replication.create_partitions(request)
    assert result.is_atomic
    assert [r.message.partition_id for r in result.records] == [2, 3, 4]  # type: ignore[union-attr]
    (answer,) = env.apply(result).results
    assert (answer.name, answer.error_code) == ("foo", Errors.NONE)
    info = env.replication.topic("foo")
    assert info is not None and info.num_partitions == 5
    for index in range(5):
        partition = env.partition("foo", index)
        assert len(partition.replicas) == 2 and partition.leader == partition.replicas[0]
    check_index(env)


def test_create_partitions_errors(env: Env) -> None:
    env.create(topic("foo", partitions=2, rf=2))
    two = (
        CreatePartitionsAssignment(broker_ids=(0, 1)),
        CreatePartitionsAssignment(broker_ids=(1, 2)),
    )
    request = CreatePartitionsRequest(
        topics=(
            CreatePartitionsTopic(name="nope", count=3),
            CreatePartitionsTopic(name="foo", count=2),
            CreatePartitionsTopic(name="foo", count=1),
            CreatePartitionsTopic(name="foo", count=3, assignments=two),
            CreatePartitionsTopic(
                name="foo",
                count=3,
                assignments=(CreatePartitionsAssignment(broker_ids=(0,)),),
            ),
        )
    )
    result = env.replication.create_partitions(request)
    assert [(r.error_code, r.error_message) for r in result.response.results] == [
        (Errors.UNKNOWN_TOPIC_OR_PARTITION, None),
        (Errors.INVALID_PARTITIONS, "Topic already has 2 partition(s)."),
        (
            Errors.INVALID_PARTITIONS,
            "The topic foo currently has 2 partition(s); 1 would not be an increase.",
        ),
        (
            Errors.INVALID_REPLICA_ASSIGNMENT,
            "Attempted to add 1 additional partition(s), but only 2 assignment(s) were specified.",
        ),
        (
            Errors.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes a partition with 1 replica(s), but this "
            "is not consistent with previous partitions, which have 2 replica(s).",
        ),
    ]
    assert result.records == []


def test_create_partitions_with_manual_assignment_and_validate_only(env: Env) -> None:
    env.create(topic("foo", partitions=1, rf=2))
    spec = (CreatePartitionsAssignment(broker_ids=(3, 2)),)
    request = CreatePartitionsRequest(
        topics=(CreatePartitionsTopic(name="foo", count=2, assignments=spec),), validate_only=True
    )
    assert env.replication.create_partitions(request).records == []
    env.apply(env.replication.create_partitions(CreatePartitionsRequest(topics=request.topics)))
    assert env.partition("foo", 1).replicas == (3, 2)


# -- leadership when brokers come and go ----------------------------------------------------


def manual(env: Env, name: str, *replica_lists: tuple[int, ...]) -> uuid.UUID:
    spec = tuple(
        CreatableReplicaAssignment(partition_index=i, broker_ids=r)
        for i, r in enumerate(replica_lists)
    )
    result = env.create(topic(name, partitions=-1, rf=-1, assignments=spec))[name]
    assert result.error_code == Errors.NONE
    topic_id: uuid.UUID = result.topic_id
    return topic_id


def kinds(records: Sequence[ApiMessageAndVersion]) -> list[type]:
    return [type(record.message) for record in records]


def test_fencing_moves_leadership_to_the_next_isr_member_and_shrinks_the_isr(env: Env) -> None:
    manual(env, "foo", (1, 2, 3), (2, 1, 3))
    bar = manual(env, "bar", (1,))
    records = env.fence(1)
    # Kafka's order: the partitions first, then the broker's fencing.
    assert kinds(records) == [PartitionChangeRecord] * 3 + [BrokerRegistrationChangeRecord]
    assert not env.cluster.is_unfenced(1)
    p0, p1 = (env.partition("foo", i) for i in range(2))
    assert (p0.leader, p0.isr, p0.leader_epoch, p0.partition_epoch) == (2, (2, 3), 1, 1)
    # 1 was not the leader of partition 1: the ISR shrinks, the leader epoch stays.
    assert (p1.leader, p1.isr, p1.leader_epoch, p1.partition_epoch) == (2, (2, 3), 0, 1)
    # No ISR member left to lead: leaderless, and the ISR keeps its last member.
    solo = env.partition("bar", 0)
    assert (solo.leader, solo.isr, solo.leader_epoch) == (NO_LEADER, (1,), 1)
    check_index(env)
    assert env.replication.partitions_in_isr(1) == [TopicIdPartition(bar, 0)]
    assert env.replication.partitions_led_by(NO_LEADER) == [TopicIdPartition(bar, 0)]


def test_a_leader_is_never_elected_outside_the_isr(env: Env) -> None:
    manual(env, "foo", (1, 2, 3))
    env.fence(2)
    env.fence(3)
    assert env.partition("foo", 0).isr == (1,)
    env.unfence(2)
    env.unfence(3)
    env.fence(1)
    partition = env.partition("foo", 0)
    assert (partition.leader, partition.isr) == (NO_LEADER, (1,))


def test_unfencing_gives_leaderless_partitions_their_isr_member_back(env: Env) -> None:
    manual(env, "foo", (1, 2), (2, 1))
    env.fence(2)
    env.fence(1)
    assert [env.partition("foo", i).leader for i in range(2)] == [NO_LEADER, NO_LEADER]
    records = env.unfence(1)
    # Kafka's order: the broker's unfencing first, then the partitions.
    assert kinds(records) == [BrokerRegistrationChangeRecord] + [PartitionChangeRecord] * 2
    partitions = [env.partition("foo", i) for i in range(2)]
    assert [(p.leader, p.isr) for p in partitions] == [(1, (1,)), (1, (1,))]
    # One leader change per election: partition 1 changed leader three times, partition 0 twice.
    assert [p.leader_epoch for p in partitions] == [2, 3]
    assert env.replication.partitions_led_by(NO_LEADER) == []
    # Unfencing a broker that is in no ISR moves no partition.
    assert kinds(env.unfence(2)) == [BrokerRegistrationChangeRecord]
    check_index(env)


def test_fencing_a_broker_in_no_isr_moves_no_partition(env: Env) -> None:
    manual(env, "foo", (1, 2))
    assert kinds(env.fence(3)) == [BrokerRegistrationChangeRecord]


def test_controlled_shutdown_moves_leadership_away_first(env: Env) -> None:
    manual(env, "foo", (1, 2), (2, 1))
    records = env.shut_down(1)
    assert kinds(records) == [BrokerRegistrationChangeRecord] + [PartitionChangeRecord] * 2
    assert env.cluster.in_controlled_shutdown(1) and env.cluster.is_unfenced(1)
    assert [env.partition("foo", i).leader for i in range(2)] == [2, 2]
    assert [env.partition("foo", i).isr for i in range(2)] == [(2,), (2,)]
    # Already in controlled shutdown: no second registration change, nothing left to move.
    assert env.shut_down(1) == []
    check_index(env)


def test_unregistering_moves_leadership_then_removes_the_broker(env: Env) -> None:
    manual(env, "foo", (1, 2), (2, 1))
    result = env.replication.unregister_broker(2)
    assert kinds(result.records) == [PartitionChangeRecord] * 2 + [UnregisterBrokerRecord]
    env.apply(result)
    assert env.cluster.registration(2) is None
    assert [env.partition("foo", i).leader for i in range(2)] == [1, 1]
    check_index(env)
    with pytest.raises(ControllerApiError) as raised:
        env.replication.unregister_broker(2)
    assert raised.value.api_error.error == Errors.BROKER_ID_NOT_REGISTERED


def test_leadership_avoids_brokers_in_controlled_shutdown(env: Env) -> None:
    manual(env, "foo", (1, 2, 3))
    env.shut_down(2)
    env.fence(1)
    assert env.partition("foo", 0).leader == 3


def test_balancing_gives_leadership_back_to_preferred_replicas(env: Env) -> None:
    topic_id = manual(env, "foo", (1, 2), (2, 1), (1, 2))
    assert not env.replication.partition_leaders_imbalanced()
    env.fence(1)
    assert env.replication.partition_leaders_imbalanced()
    # The preferred replica is fenced, then back but out of the ISR: nothing to do yet.
    assert env.replication.maybe_balance_partition_leaders().records == []
    env.unfence(1)
    assert env.replication.maybe_balance_partition_leaders().records == []
    # Back in the ISR (as an AlterPartition would put it): two preferred leader elections.
    env.replay(
        ApiMessageAndVersion(
            PartitionChangeRecord(topic_id=topic_id, partition_id=i, isr=(2, 1)), 1
        )
        for i in (0, 2)
    )
    result = env.replication.maybe_balance_partition_leaders(max_elections=1)
    assert (len(result.records), result.response) == (1, True)
    result = env.replication.maybe_balance_partition_leaders()
    assert (len(result.records), result.response) == (2, False)
    env.apply(result)
    assert [env.partition("foo", i).leader for i in range(3)] == [1, 2, 1]
    assert not env.replication.partition_leaders_imbalanced()
    check_index(env)


# -- heartbeats --------------------------------------------------------------------------------


def test_a_broker_is_unfenced_once_it_has_replayed_its_registration() -> None:
    env = Env()
    epoch = env.register(1, fenced=True)
    reply = env.heartbeat(1, offset=epoch - 1)
    assert (reply.is_caught_up, reply.is_fenced) == (False, True)
    assert env.cluster.is_unfenced(1) is False
    reply = env.heartbeat(1, offset=epoch)
    assert (reply.is_caught_up, reply.is_fenced, reply.should_shut_down) == (True, False, False)
    assert env.cluster.is_unfenced(1)


def test_an_unfenced_heartbeat_gives_leaderless_partitions_a_leader(env: Env) -> None:
    manual(env, "foo", (1, 2))
    env.fence(2)
    env.fence(1)
    assert env.partition("foo", 0).leader == NO_LEADER
    assert env.heartbeat(1).is_fenced is False
    assert env.partition("foo", 0).leader == 1


def test_a_heartbeat_with_a_stale_epoch_or_from_nobody_is_refused(env: Env) -> None:
    request = BrokerHeartbeatRequest(broker_id=1, broker_epoch=999, current_metadata_offset=0)
    with pytest.raises(ControllerApiError) as raised:
        env.replication.process_broker_heartbeat(request, 0)
    assert raised.value.api_error.error == Errors.STALE_BROKER_EPOCH
    request = BrokerHeartbeatRequest(broker_id=7, broker_epoch=0, current_metadata_offset=0)
    with pytest.raises(ControllerApiError) as raised:
        env.replication.process_broker_heartbeat(request, 0)
    assert raised.value.api_error.error == Errors.STALE_BROKER_EPOCH


def test_asking_to_be_fenced_fences_and_moves_leadership(env: Env) -> None:
    manual(env, "foo", (1, 2))
    reply = env.heartbeat(1, want_fence=True)
    assert (reply.is_fenced, reply.should_shut_down) == (True, False)
    assert not env.cluster.is_unfenced(1)
    assert env.partition("foo", 0).leader == 2


def test_controlled_shutdown_through_heartbeats(env: Env) -> None:
    manual(env, "foo", (1, 2))
    # The leader asks to shut down: it goes into controlled shutdown, its leadership moves.
    result = env.replication.process_broker_heartbeat(
        BrokerHeartbeatRequest(
            broker_id=1,
            broker_epoch=env.epoch(1),
            current_metadata_offset=env.offset,
            want_shut_down=True,
        ),
        env.now_ms,
    )
    assert result.response.in_controlled_shutdown and not result.response.should_shut_down
    env.apply(result)
    env.cluster.heartbeats.maybe_update_controlled_shutdown_offset(1, env.offset - 1)
    assert env.partition("foo", 0).leader == 2
    # Not yet: broker 2 (and 0, 3) have not replayed past the shutdown offset.
    for broker in (0, 2, 3):
        env.heartbeat(broker, offset=0)
    assert env.heartbeat(1, want_shut_down=True).should_shut_down is False
    for broker in (0, 2, 3):
        env.heartbeat(broker)
    reply = env.heartbeat(1, want_shut_down=True)
    assert (reply.should_shut_down, reply.is_fenced) == (True, True)
    assert not env.cluster.is_unfenced(1)


def test_a_broker_without_leaderships_shuts_down_at_once(env: Env) -> None:
    manual(env, "foo", (1, 2))
    reply = env.heartbeat(3, want_shut_down=True)
    assert (reply.should_shut_down, reply.is_fenced) == (True, True)


def test_a_broker_silent_past_its_session_is_fenced_and_loses_its_leaderships(env: Env) -> None:
    manual(env, "foo", (1, 2))
    env.now_ms = 1_000
    for broker in (0, 1, 2, 3):
        env.heartbeat(broker)
    env.now_ms = 5_000
    for broker in (0, 2, 3):
        env.heartbeat(broker)
    env.now_ms = 10_001  # broker 1's session (9 s from its heartbeat at 1 s) ran out
    result = env.replication.maybe_fence_stale_broker(env.now_ms)
    assert kinds(result.records) == [PartitionChangeRecord, BrokerRegistrationChangeRecord]
    env.apply(result)
    assert env.partition("foo", 0).leader == 2
    assert env.replication.maybe_fence_stale_broker(env.now_ms).records == []


# -- timeline --------------------------------------------------------------------------------


def test_reads_as_of_an_offset_and_revert(env: Env) -> None:
    before = env.offset - 1
    topic_id = manual(env, "foo", (1, 2))
    middle = env.offset - 1
    env.fence(1)
    assert env.replication.topic("foo", before) is None
    old = env.replication.partition(topic_id, 0, middle)
    assert old is not None and old.leader == 1
    assert env.replication.partitions_led_by(1, middle) == [TopicIdPartition(topic_id, 0)]
    assert env.replication.partitions_led_by(1) == []
    env.registry.revert_to_snapshot(middle)
    assert env.partition("foo", 0).leader == 1
    check_index(env)
    env.registry.revert_to_snapshot(before)
    assert env.replication.topic("foo") is None
    check_index(env)
    assert env.create(topic("foo"))["foo"].error_code == Errors.NONE


def test_replay_refuses_what_cannot_be() -> None:
    env = Env()
    topic_id = uuid.UUID(int=7)
    env.replay([ApiMessageAndVersion(TopicRecord(name="foo", topic_id=topic_id), 0)])
    with pytest.raises(IllegalStateError):
        env.replication.replay(TopicRecord(name="foo", topic_id=uuid.UUID(int=8)), 1)
    with pytest.raises(IllegalStateError):
        env.replication.replay(TopicRecord(name="bar", topic_id=topic_id), 1)
    with pytest.raises(IllegalStateError):
        env.replication.replay(PartitionRecord(topic_id=uuid.UUID(int=9), partition_id=0), 1)
    with pytest.raises(IllegalStateError):
        env.replication.replay(PartitionChangeRecord(topic_id=topic_id, partition_id=0), 1)
    with pytest.raises(IllegalStateError):
        env.replication.replay(RemoveTopicRecord(topic_id=uuid.UUID(int=9)), 1)


def test_partitions_replayed_out_of_order_count_up_to_the_highest(env: Env) -> None:
    topic_id = uuid.UUID(int=7)
    records = [TopicRecord(name="foo", topic_id=topic_id)] + [
        PartitionRecord(
            topic_id=topic_id,
            partition_id=index,
            replicas=(1,),
            isr=(1,),
            leader=1,
            leader_epoch=0,
            partition_epoch=0,
        )
        for index in (2, 0, 1)
    ]
    env.replay(ApiMessageAndVersion(r, 0) for r in records)
    info = env.replication.topic("foo")
    assert info is not None and info.num_partitions == 3
    assert env.partition("foo", 2).directories == (MIGRATING_DIRECTORY,)
    check_index(env)


def test_random_operations_keep_the_index_true() -> None:
    rng = random.Random(3)
    env = Env(seed=3)
    for broker in range(5):
        env.register(broker, rack=f"r{broker % 2}")
    fenced: set[int] = set()
    for step in range(150):
        action = rng.random()
        if action < 0.3:
            env.create(topic(f"t{step}", partitions=rng.randint(1, 4), rf=rng.randint(1, 3)))
        elif action < 0.45 and env.replication.topic_names():
            name = rng.choice(sorted(env.replication.topic_names()))
            env.apply(
                env.replication.delete_topics(
                    DeleteTopicsRequest(topics=(DeleteTopicState(name=name),))
                )
            )
        elif action < 0.75:
            broker = rng.randrange(5)
            if broker in fenced:
                env.unfence(broker)
                fenced.discard(broker)
            elif len(fenced) < 4:
                env.fence(broker)
                fenced.add(broker)
        else:
            names = sorted(env.replication.topic_names())
            if names:
                name = rng.choice(names)
                info = env.replication.topic(name)
                assert info is not None
                env.apply(
                    env.replication.create_partitions(
                        CreatePartitionsRequest(
                            topics=(
                                CreatePartitionsTopic(name=name, count=info.num_partitions + 1),
                            )
                        )
                    )
                )
        check_index(env)
        for name in env.replication.topic_names():
            info = env.replication.topic(name)
            assert info is not None
            for index in range(info.num_partitions):
                partition = env.partition(name, index)
                assert partition.leader == NO_LEADER or (
                    partition.leader in partition.isr and partition.leader not in fenced
                )
                assert partition.isr and set(partition.isr) <= set(partition.replicas)
    # The manager's state is the image a broker builds from the same log, and a controller
    # that loads that image as a snapshot gets the same state back.
    image = image_of(env.log)
    state = partitions_of(env)
    assert {name: dict(t.partitions) for name, t in image.topics.items()} == state
    standby = Env()
    standby.replay(image.records())
    assert partitions_of(standby) == state
    check_index(standby)
