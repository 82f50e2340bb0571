"""QuorumController with brokers: registration, heartbeats, unfencing, topic creation with
placement over unfenced brokers, fencing of a silent broker and the leader elections it
causes, and topic creation across a controller failover."""

from __future__ import annotations

import uuid
from functools import partial

import pytest
from harness import ControllerQuorum

from kraft.controller.configs import ConfigResource, ConfigResourceType, OpType
from kraft.controller.quorum_controller import QuorumController
from kraft.controller.result import ControllerResult
from kraft.metadata.records import PartitionChangeRecord, at_latest_version
from kraft.protocol.controller_messages import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatableTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DeleteTopicState,
    DescribeClusterRequest,
    Listener,
    RegistrationFeature,
)
from kraft.protocol.errors import Errors

CLUSTER_ID = "kraft-test-cluster-0001"
BROKERS = (1, 2, 3, 4)


class Brokers:
    """Simulated brokers: each registers once, then heartbeats every 2 s (Kafka's
    ``broker.heartbeat.interval.ms``) to whichever controller is active, reporting as its
    metadata offset what that controller last committed."""

    def __init__(self, quorum: ControllerQuorum) -> None:
        self.quorum = quorum
        self.epochs: dict[int, int] = {}
        self.silent: set[int] = set()

    def register_all(self) -> None:
        active = self.quorum.wait_active()
        for broker_id in BROKERS:
            request = BrokerRegistrationRequest(
                broker_id=broker_id,
                cluster_id=CLUSTER_ID,
                incarnation_id=uuid.UUID(int=broker_id),
                listeners=(Listener(name="PLAINTEXT", host="localhost", port=9000 + broker_id),),
                features=(RegistrationFeature(name="metadata.version", max_supported_version=21),),
                rack=f"rack-{broker_id % 2}",
                log_dirs=(uuid.UUID(int=1000 + broker_id),),
            )
            self.epochs[broker_id] = self.quorum.result(active.register_broker(request)).epoch

    def heartbeat_round(self) -> None:
        active = self.quorum.active()
        if active is None:
            return
        for broker_id, epoch in self.epochs.items():
            if broker_id in self.silent:
                continue
            active.process_broker_heartbeat(
                BrokerHeartbeatRequest(
                    broker_id=broker_id,
                    broker_epoch=epoch,
                    current_metadata_offset=active.last_committed_offset,
                )
            )

    def run_for(self, ms: int) -> None:
        end = self.quorum.clock.now_ms() + ms
        while self.quorum.clock.now_ms() < end:
            self.heartbeat_round()
            self.quorum.run_for(min(2_000, end - self.quorum.clock.now_ms()))


@pytest.fixture
def quorum() -> ControllerQuorum:
    return ControllerQuorum(3, cluster_id=CLUSTER_ID, default_replication_factor=3)


def with_unfenced_brokers(quorum: ControllerQuorum) -> tuple[Brokers, QuorumController]:
    """Every broker registered and heartbeating long enough to be unfenced; the active
    controller."""
    brokers = Brokers(quorum)
    brokers.register_all()
    brokers.run_for(6_000)
    return brokers, quorum.wait_active()


def has_topic(controller: QuorumController, name: str) -> bool:
    return controller.replication.topic(name) is not None


def has_config(controller: QuorumController, resource: ConfigResource, config: object) -> bool:
    return controller.configs.config(resource) == config


def unfenced(controller: QuorumController) -> set[int]:
    return {b for b in BROKERS if controller.cluster_control.is_unfenced(b)}


def test_brokers_are_registered_fenced_and_unfenced_by_heartbeats(quorum: ControllerQuorum) -> None:
    brokers = Brokers(quorum)
    brokers.register_all()
    active = quorum.wait_active()
    assert unfenced(active) == set()
    brokers.run_for(6_000)
    assert unfenced(active) == set(BROKERS)
    described = quorum.result(active.describe_cluster(DescribeClusterRequest()))
    assert sorted(b.broker_id for b in described.brokers) == list(BROKERS)
    assert described.controller_id == active.node_id


def test_a_topic_is_placed_on_unfenced_brokers_and_seen_by_every_controller(
    quorum: ControllerQuorum,
) -> None:
    _, active = with_unfenced_brokers(quorum)
    response = quorum.result(
        active.create_topics(
            CreateTopicsRequest(topics=(CreatableTopic(name="orders", num_partitions=4),))
        )
    )
    (result,) = response.topics
    assert result.error_code == Errors.NONE
    assert result.num_partitions == 4 and result.replication_factor == 3
    for controller in quorum.controllers.values():
        assert quorum.run_until(partial(has_topic, controller, "orders"))
        for index in range(4):
            partition = controller.replication.partition(result.topic_id, index)
            assert partition is not None
            assert len(set(partition.replicas)) == 3
            assert set(partition.isr) == set(partition.replicas)
            assert partition.leader == partition.replicas[0]
    again = quorum.result(
        active.create_topics(CreateTopicsRequest(topics=(CreatableTopic(name="orders"),)))
    )
    assert again.topics[0].error_code == Errors.TOPIC_ALREADY_EXISTS


def test_a_silent_broker_is_fenced_and_loses_its_leaderships(quorum: ControllerQuorum) -> None:
    brokers, active = with_unfenced_brokers(quorum)
    response = quorum.result(
        active.create_topics(
            CreateTopicsRequest(topics=(CreatableTopic(name="events", num_partitions=8),))
        )
    )
    topic_id = response.topics[0].topic_id
    victim = 2
    led = [p for p in range(8) if active.replication.partition(topic_id, p).leader == victim]  # type: ignore[union-attr]
    assert led, "placement gave broker 2 no leadership"
    before = {p: active.replication.partition(topic_id, p) for p in range(8)}
    brokers.silent.add(victim)
    brokers.run_for(12_000)  # past broker.session.timeout.ms (9 s)
    assert victim not in unfenced(active)
    for index in range(8):
        after = active.replication.partition(topic_id, index)
        assert after is not None
        assert after.leader != victim
        assert victim not in after.isr
        assert after.leader in after.isr
        old = before[index]
        assert old is not None
        assert after.partition_epoch >= old.partition_epoch
        if index in led:
            assert after.leader_epoch > old.leader_epoch


def test_heartbeats_count_from_arrival_while_the_queue_is_busy(quorum: ControllerQuorum) -> None:
    # KAFKA-17793: one operation keeps the queue busy for 12 s, past broker.session.timeout.ms
    # (9 s), while brokers 1, 3 and 4 keep heartbeating and broker 2 stops. The fencing check
    # that runs first after it must count the heartbeats still waiting in the queue.
    brokers, active = with_unfenced_brokers(quorum)
    response = quorum.result(
        active.create_topics(
            CreateTopicsRequest(topics=(CreatableTopic(name="busy", num_partitions=8),))
        )
    )
    topic_id = response.topics[0].topic_id
    before = {p: active.replication.partition(topic_id, p) for p in range(8)}
    victim = 2
    brokers.silent.add(victim)

    def slow_operation() -> ControllerResult[None]:
        for _ in range(6):
            quorum.cluster.run_for(2_000)  # Raft goes on; no controller's queue runs
            brokers.heartbeat_round()  # as the network thread would, the queue being busy
        return ControllerResult([], None)

    quorum.result(active.append_write_event("slowOperation", slow_operation))
    brokers.run_for(2_000)
    assert unfenced(active) == set(BROKERS) - {victim}
    for index, old in before.items():
        after = active.replication.partition(topic_id, index)
        assert old is not None and after is not None
        assert victim not in after.isr
        if old.leader != victim:  # the healthy brokers kept their leaderships
            assert (after.leader, after.leader_epoch) == (old.leader, old.leader_epoch)


def test_topics_created_before_a_failover_survive_it(quorum: ControllerQuorum) -> None:
    _, active = with_unfenced_brokers(quorum)
    created = quorum.result(
        active.create_topics(CreateTopicsRequest(topics=(CreatableTopic(name="kept"),)))
    )
    assert created.topics[0].error_code == Errors.NONE
    quorum.cluster.disconnected.add(active.node_id)
    assert quorum.run_until(
        lambda: (a := quorum.active()) is not None and a is not active and not active.is_active,
        60_000,
    )
    successor = quorum.active()
    assert successor is not None
    assert successor.replication.topic("kept") is not None
    deleted = quorum.result(
        successor.delete_topics(DeleteTopicsRequest(topics=(DeleteTopicState(name="kept"),)))
    )
    assert deleted.responses[0].error_code == Errors.NONE
    assert successor.replication.topic("kept") is None


def test_config_changes_need_an_existing_topic_or_registered_broker(
    quorum: ControllerQuorum,
) -> None:
    _, active = with_unfenced_brokers(quorum)
    quorum.result(active.create_topics(CreateTopicsRequest(topics=(CreatableTopic(name="logs"),))))
    topic = ConfigResource(ConfigResourceType.TOPIC, "logs")
    missing = ConfigResource(ConfigResourceType.TOPIC, "nope")
    stranger = ConfigResource(ConfigResourceType.BROKER, "99")
    results = quorum.result(
        active.incremental_alter_configs(
            {
                topic: {"retention.ms": (OpType.SET, "1000")},
                missing: {"retention.ms": (OpType.SET, "1000")},
                stranger: {"log.retention.ms": (OpType.SET, "1000")},
            }
        )
    )
    assert results[topic].error == Errors.NONE
    assert results[missing].error == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert results[stranger].error == Errors.BROKER_ID_NOT_REGISTERED
    for controller in quorum.controllers.values():
        assert quorum.run_until(partial(has_config, controller, topic, {"retention.ms": "1000"}))


def test_leadership_goes_back_to_the_preferred_replica() -> None:
    quorum = ControllerQuorum(
        3,
        cluster_id=CLUSTER_ID,
        default_replication_factor=3,
        leader_imbalance_check_interval_ms=1_000,
    )
    brokers, active = with_unfenced_brokers(quorum)
    created = quorum.result(
        active.create_topics(CreateTopicsRequest(topics=(CreatableTopic(name="skewed"),)))
    )
    topic_id = created.topics[0].topic_id
    partition = active.replication.partition(topic_id, 0)
    assert partition is not None
    preferred, other = partition.replicas[0], partition.replicas[1]
    # Another replica of the ISR takes over, as an election elsewhere would have it.
    change = PartitionChangeRecord(partition_id=0, topic_id=topic_id, leader=other)
    quorum.result(
        active.append_write_event(
            "moveLeader", lambda: ControllerResult([at_latest_version(change)], None)
        )
    )
    assert active.replication.partition(topic_id, 0).leader == other  # type: ignore[union-attr]
    assert active.replication.partition_leaders_imbalanced()
    brokers.run_for(2_000)
    moved_back = active.replication.partition(topic_id, 0)
    assert moved_back is not None and moved_back.leader == preferred
    assert not active.replication.partition_leaders_imbalanced()
