"""A standby controller rebuilt from a snapshot of the metadata image (written by the
MetadataLoader) holds the same state as one that replayed the log."""

from __future__ import annotations

import random

from harness import ControllerQuorum
from test_quorum_controller_topics import CLUSTER_ID, Brokers

from kraft.controller.configs import ConfigResource, ConfigResourceType, OpType
from kraft.controller.quorum_controller import ControllerConfig, QuorumController
from kraft.metadata.serde import MetadataRecordSerde
from kraft.protocol.controller_messages import (
    AllocateProducerIdsRequest,
    CreatableTopic,
    CreateTopicsRequest,
)
from kraft.queue import DeterministicEventQueue
from kraft.raft.state_machine import SnapshotPolicy
from kraft.snapshot.reader import SnapshotReader


def state(controller: QuorumController, offset: int) -> dict[str, object]:
    """Everything the managers hold as of ``offset``."""
    replication = controller.replication
    topics = {}
    for name in replication.topic_names(offset):
        info = replication.topic(name, offset)
        assert info is not None
        topics[name] = (
            info.topic_id,
            [replication.partition(info.topic_id, p, offset) for p in range(info.num_partitions)],
        )
    return {
        "features": controller.features.finalized(offset),
        "brokers": controller.cluster_control.registrations(offset),
        "topics": topics,
        "configs": {
            r: controller.configs.config(r, offset) for r in controller.configs.resources(offset)
        },
        "producer_ids": controller.producer_ids.next_producer_id(offset),
    }


def test_a_controller_loaded_from_a_snapshot_equals_one_that_replayed_the_log() -> None:
    quorum = ControllerQuorum(
        3,
        cluster_id=CLUSTER_ID,
        default_replication_factor=3,
        snapshot_policy=SnapshotPolicy(max_bytes_between_snapshots=1, max_interval_ms=0),
    )
    brokers = Brokers(quorum)
    brokers.register_all()
    brokers.run_for(6_000)
    active = quorum.wait_active()
    quorum.result(
        active.create_topics(
            CreateTopicsRequest(
                topics=tuple(CreatableTopic(name=f"t{i}", num_partitions=3) for i in range(5))
            )
        )
    )
    quorum.result(
        active.incremental_alter_configs(
            {ConfigResource(ConfigResourceType.TOPIC, "t1"): {"retention.ms": (OpType.SET, "5")}}
        )
    )
    quorum.result(active.allocate_producer_ids(AllocateProducerIdsRequest(1, brokers.epochs[1])))
    standby = next(c for c in quorum.controllers.values() if c is not active)
    log = quorum.cluster.logs[standby.node_id]
    assert quorum.run_until(
        lambda: (
            (sid := log.latest_snapshot_id) is not None
            and sid.offset > active.last_committed_offset
        )
    )
    snapshot_id = log.latest_snapshot_id
    assert snapshot_id is not None
    raw = log.read_snapshot(snapshot_id)
    assert raw is not None

    # A fresh controller, standing by, is handed the snapshot.
    queue = DeterministicEventQueue(quorum.clock)
    fresh = QuorumController(
        99,
        quorum.cluster.nodes[standby.node_id],
        queue,
        quorum.clock,
        config=ControllerConfig(cluster_id=CLUSTER_ID),
        rng=random.Random(0),
    )
    fresh._listener.handle_load_snapshot(SnapshotReader(raw, MetadataRecordSerde()))
    queue.run_until_idle()
    assert fresh.last_committed_offset == snapshot_id.offset - 1
    expected = state(standby, snapshot_id.offset - 1)
    assert state(fresh, fresh.last_committed_offset) == expected
    assert expected["topics"] and expected["configs"] and expected["brokers"]
