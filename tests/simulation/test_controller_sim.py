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


def test_acknowledged_topics_survive_a_controller_failover() -> None:
    cluster = ready(3)
    futures: dict[str, Any] = {}
    killed = -1
    for i in range(100):
        futures[f"t{i}"] = cluster.create_topic(f"t{i}", 1, 3)
        cluster.run_for(100)
        if i == 10:
            killed = active_node(cluster) or -1
            cluster.kill(killed)
        if i == 60:
            cluster.restart(killed)
    assert cluster.run_until(lambda: all(f.done() for f in futures.values()), 40_000)
    acked = {name for name, f in futures.items() if f.exception() is None}
    failed = {name for name, f in futures.items() if f.exception() is not None}
    assert acked & {f"t{i}" for i in range(10)}
    assert acked & {f"t{i}" for i in range(61, 100)}
    assert failed, "some calls met the failover"
    new_active = active_node(cluster)
    assert new_active not in (None, killed)
    cluster.run_for(5_000)
    for node in cluster.nodes.values():
        assert node.image is not None
        assert acked <= set(node.image.topics), f"node {node.node_id} lost acknowledged topics"
    assert cluster.violations == []


def test_crashed_broker_is_fenced_after_its_session_and_loses_its_leaderships(
    tmp_path: Path,
) -> None:
    log = tmp_path / "events.jsonl"
    cluster = ready(2, event_log=log)
    result(cluster, cluster.create_topic("t", 6, 3))
    crashed_at = cluster.now_ms
    cluster.crash_broker(101)
    active = cluster.nodes[cluster.leader() or 1]
    assert cluster.run_until(
        lambda: active.image is not None and active.image.brokers[101].fenced, 20_000
    )
    # Kafka's broker.session.timeout.ms: 9 s after the last heartbeat (at most 2 s before).
    assert 7_000 <= cluster.now_ms - crashed_at <= 9_500
    image = active.image
    assert image is not None
    for partition in image.topics["t"].partitions.values():
        assert partition.leader != 101
        assert 101 not in partition.isr
    cluster.close()
    (fenced,) = events(log, "broker_fenced")
    assert fenced["details"] == {"broker": 101, "broker_epoch": image.brokers[101].epoch}
    assert fenced["time_ms"] - crashed_at == cluster.now_ms - crashed_at
    (fault,) = events(log, "fault_injected")
    assert fault["details"]["fault"] == "broker_crash"
    assert fault["details"]["targets"] == [101]
    moved = [
        e
        for e in events(log, "partition_leader_changed")
        if e["time_ms"] >= crashed_at and e["details"]["previous_leader"] == 101
    ]
    assert moved and all(e["details"]["leader"] != 101 for e in moved)


def test_restarted_broker_registers_again_and_is_unfenced() -> None:
    cluster = ready(4)
    first = cluster.node(1).image.brokers[102]  # type: ignore[union-attr]
    cluster.crash_broker(102)
    cluster.run_for(12_000)
    cluster.restart_broker(102)
    assert cluster.run_until(lambda: all_unfenced(cluster), 30_000)
    again = cluster.node(1).image.brokers[102]  # type: ignore[union-attr]
    assert again.incarnation_id != first.incarnation_id
    assert again.epoch > first.epoch


def test_controlled_shutdown_moves_leaderships_before_the_broker_stops() -> None:
    cluster = ready(2)
    result(cluster, cluster.create_topic("t", 6, 3))
    active = cluster.nodes[cluster.leader() or 1]
    assert active.image is not None
    assert any(p.leader == 102 for p in active.image.topics["t"].partitions.values())
    broker = cluster.controller_sim.brokers.brokers[102]  # type: ignore[union-attr]
    started = cluster.now_ms
    cluster.shutdown_broker(102)
    assert cluster.run_until(lambda: not broker.running, 20_000)
    # Well before its session would have run out: the controller let it go.
    assert cluster.now_ms - started < 9_000
    image = active.image
    assert all(p.leader != 102 for p in image.topics["t"].partitions.values())
    assert image.brokers[102].in_controlled_shutdown


def test_isolated_broker_is_fenced_and_healed_broker_unfenced() -> None:
    cluster = ready(6)
    cluster.isolate_broker(103)
    active = cluster.nodes[cluster.leader() or 1]
    assert cluster.run_until(lambda: active.image.brokers[103].fenced, 20_000)  # type: ignore[union-attr]
    cluster.heal_broker(103)
    assert cluster.run_until(lambda: all_unfenced(cluster), 20_000)


def test_kill_restart_and_wipe_rebuild_a_nodes_controller() -> None:
    cluster = ready(7)
    result(cluster, cluster.create_topic("t", 1, 3))
    node = cluster.node(3)
    before = node.controller
    cluster.kill(3)
    assert (node.controller, node.image) == (None, None)
    cluster.restart(3)
    assert node.controller not in (None, before)
    assert cluster.run_until(lambda: node.image is not None and "t" in node.image.topics, 10_000)
    rebuilt = node.controller
    cluster.wipe(3)
    assert node.controller is not rebuilt
    assert cluster.run_until(lambda: node.image is not None and "t" in node.image.topics, 20_000)
    assert node.log.log_end_offset > 0
    assert cluster.violations == []


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def image_published(self, node_id: int, image: Any) -> None:
        self.calls.append(("image", node_id, image.provenance.offset))

    def claimed(self, node_id: int, epoch: int) -> None:
        self.calls.append(("claimed", node_id, epoch))

    def renounced(self, node_id: int, epoch: int, reason: str) -> None:
        self.calls.append(("renounced", node_id, epoch, reason))

    def topic_op(self, op: str, topic: str, outcome: str | None) -> None:
        self.calls.append(("topic", op, topic, outcome))


def test_observers_hear_images_claims_renounces_and_topic_operations(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    cluster = Cluster(1, voters=3, controller=True, brokers=3, event_log=log)
    assert cluster.controller_sim is not None
    recorder = Recorder()
    cluster.controller_sim.observe(recorder)
    assert cluster.run_until(lambda: all_unfenced(cluster), 30_000)
    result(cluster, cluster.create_topic("t", 2, 3))
    active = active_node(cluster)
    assert active is not None
    cluster.kill(active)
    assert cluster.run_until(lambda: active_node(cluster) is not None, 20_000)
    claims = [c for c in recorder.calls if c[0] in ("claimed", "renounced")]
    epoch = claims[0][2]
    assert claims[:2] == [("claimed", active, epoch), ("renounced", active, epoch, "crashed")]
    assert claims[2][0] == "claimed" and claims[2][1] != active and claims[2][2] > epoch
    assert ("topic", "create_topic", "t", None) in recorder.calls
    assert ("topic", "create_topic", "t", "ok") in recorder.calls
    images = {c[1] for c in recorder.calls if c[0] == "image"}
    assert images == {1, 2, 3}
    cluster.close()
    kinds = [
        e["kind"] for e in events(log, "controller_claimed") + events(log, "controller_renounced")
    ]
    assert kinds.count("controller_claimed") == 2 and kinds.count("controller_renounced") == 1
    registered = events(log, "broker_registered")
    assert sorted(e["details"]["broker"] for e in registered) == list(BROKERS)
    assert all(e["node"] == active for e in registered)
    unfenced = events(log, "broker_unfenced")
    assert sorted(e["details"]["broker"] for e in unfenced) == list(BROKERS)
    created = [
        e for e in events(log, "partition_leader_changed") if e["details"]["previous_leader"] == -1
    ]
    assert sorted(e["details"]["partition"] for e in created) == [0, 1]
    ops = [
        e for e in events(log, "controller_op_completed") if e["details"]["op"] == "create_topic"
    ]
    assert [e["details"]["outcome"] for e in ops] == ["ok"]
    assert ops[0]["node"] == active and ops[0]["latency_ms"] > 0


def test_a_controller_write_wakes_its_node_at_once(tmp_path: Path) -> None:
    # A lone voter has no follower fetching to wake it: the controller's append must.
    log = tmp_path / "events.jsonl"
    cluster = Cluster(1, voters=1, controller=True, brokers=1, event_log=log)
    assert cluster.run_until(lambda: all_unfenced(cluster, (101,)), 30_000)
    for name in ("a", "b", "c"):
        result(cluster, cluster.create_topic(name, 1, 1))
    cluster.close()
    latencies = [e["latency_ms"] for e in events(log, "controller_op_completed")]
    # Two trips of 1-5 ms and the append linger: no wait for a poll that happens to come.
    assert len(latencies) >= 4 and max(latencies) <= 100


def test_a_broker_the_controller_forgot_registers_again() -> None:
    cluster = ready(8)
    node = cluster.nodes[cluster.leader() or 1]
    assert node.controller is not None and node.image is not None
    epoch = node.image.brokers[101].epoch
    forgotten = node.controller.unregister_broker(101)
    assert cluster.controller_sim is not None
    cluster.controller_sim.run(node)  # the call queued an event: run it as the cluster would
    assert cluster.run_until(forgotten.done, 5_000)
    # Its next heartbeat meets STALE_BROKER_EPOCH: it registers again, and is unfenced again.
    assert cluster.run_until(
        lambda: 101 in node.image.brokers and node.image.brokers[101].epoch > epoch,  # type: ignore[union-attr]
        10_000,
    )
    assert cluster.run_until(lambda: all_unfenced(cluster), 10_000)
