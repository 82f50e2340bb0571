"""``Cluster(controller=True, brokers=N)``: kraft's QuorumController and MetadataLoader on every
simulated node, simulated brokers, topic operations, broker faults and the controller events."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from kraft.controller.result import ControllerApiError
from kraft.protocol.errors import Errors
from kraft.simulation import Cluster, SimulationError
from kraft.simulation.brokers import BROKER_ID_BASE

BROKERS = tuple(BROKER_ID_BASE + k for k in (1, 2, 3))


def active_node(cluster: Cluster) -> int | None:
    for node_id, node in cluster.nodes.items():
        if node.controller is not None and node.controller.is_active:
            return node_id
    return None


def all_unfenced(cluster: Cluster, brokers: tuple[int, ...] = BROKERS) -> bool:
    for node in cluster.nodes.values():
        image = node.image
        if image is None:
            return False
        for broker_id in brokers:
            registration = image.brokers.get(broker_id)
            if registration is None or registration.fenced:
                return False
    return True


def ready(seed: int = 1, **options: Any) -> Cluster:
    """A controller cluster whose three brokers are registered and unfenced on every node."""
    cluster = Cluster(seed, voters=3, controller=True, brokers=3, **options)
    assert cluster.run_until(lambda: all_unfenced(cluster), 30_000)
    return cluster


def result(cluster: Cluster, future: Any, timeout_ms: int = 40_000) -> Any:
    assert cluster.run_until(future.done, timeout_ms)
    return future.result(timeout=0)


def events(path: Path, kind: str) -> list[dict[str, Any]]:
    with path.open() as lines:
        return [e for e in map(json.loads, lines) if e["kind"] == kind]


def test_brokers_register_and_are_unfenced_through_the_active_controller() -> None:
    cluster = Cluster(1, voters=3, controller=True, brokers=3)
    assert cluster.broker_ids == BROKERS
    assert cluster.run_until(lambda: active_node(cluster) is not None, 10_000)
    assert active_node(cluster) == cluster.leader()
    assert cluster.run_until(lambda: all_unfenced(cluster), 30_000)
    image = cluster.node(1).image
    assert image is not None
    registration = image.brokers[101]
    assert registration.rack == "r1"
    assert registration.listeners[0].host == "broker-101"
    # The brokers' epochs are the offsets of their registrations, the same on every node.
    assert {n.image.brokers[101].epoch for n in cluster.nodes.values() if n.image} == {
        registration.epoch
    }
    assert cluster.violations == []


def test_created_topic_is_in_every_nodes_image() -> None:
    cluster = ready()
    topic_id = result(cluster, cluster.create_topic("t", 3, 3))
    assert isinstance(topic_id, uuid.UUID)
    assert cluster.run_until(
        lambda: all(n.image is not None and "t" in n.image.topics for n in cluster.nodes.values()),
        5_000,
    )
    for node in cluster.nodes.values():
        assert node.image is not None
        topic = node.image.topics["t"]
        assert topic.id == topic_id
        assert sorted(topic.partitions) == [0, 1, 2]
        for partition in topic.partitions.values():
            assert sorted(partition.replicas) == list(BROKERS)
            assert partition.leader in BROKERS
    with pytest.raises(ControllerApiError) as refused:
        result(cluster, cluster.create_topic("t", 1, 1))
    assert refused.value.error_code == Errors.TOPIC_ALREADY_EXISTS
    assert result(cluster, cluster.delete_topic("t")) is None
    assert cluster.run_until(
        lambda: all(
            n.image is not None and "t" not in n.image.topics for n in cluster.nodes.values()
        ),
        5_000,
    )
    assert cluster.violations == []


def test_counter_operations_are_refused_in_a_controller_cluster() -> None:
    cluster = Cluster(1, voters=1, controller=True)
    for call in (
        lambda: cluster.append([1]),
        cluster.increment,
        cluster.start_workload,
        cluster.start_kv_workload,
    ):
        with pytest.raises(SimulationError, match="metadata records"):
            call()
    with pytest.raises(SimulationError, match="controller=True"):
        Cluster(1, voters=1).create_topic("t", 1, 1)


def test_same_seed_same_controller_run(tmp_path: Path) -> None:
    def run(seed: int) -> str:
        cluster = ready(seed)
        futures = [cluster.create_topic(f"t{i}", 2, 3) for i in range(3)]
        cluster.run_for(3_000)
        cluster.kill(cluster.leader() or 1)
        cluster.crash_broker(101)
        cluster.run_for(15_000)
        assert all(f.done() for f in futures)
        cluster.close()
        return cluster.digest

    assert run(5) == run(5)
    assert run(5) != run(6)
