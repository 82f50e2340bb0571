"""QuorumController on a three-node Raft quorum in virtual time (tests/controller/harness.py):
claim and bootstrap, writes answered on commit, standbys replaying, renounce reverting."""

from __future__ import annotations

import uuid
from functools import partial

import pytest
from harness import ControllerQuorum

from kraft.controller.errors import NotControllerError
from kraft.controller.quorum_controller import QuorumController
from kraft.controller.result import ControllerResult
from kraft.errors import FatalFaultError
from kraft.metadata.records import (
    FeatureLevelRecord,
    NoOpRecord,
    PartitionRecord,
    at_latest_version,
)
from kraft.protocol.controller_messages import (
    AllocateProducerIdsRequest,
    BrokerRegistrationRequest,
    Listener,
    RegistrationFeature,
)
from kraft.queue import RejectedExecutionError
from kraft.record.typed import Batch

CLUSTER_ID = "kraft-test-cluster-0001"


def registration(broker_id: int) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=CLUSTER_ID,
        incarnation_id=uuid.UUID(int=broker_id),
        listeners=(Listener(name="PLAINTEXT", host="localhost", port=9092 + broker_id),),
        features=(RegistrationFeature(name="metadata.version", max_supported_version=21),),
        log_dirs=(uuid.UUID(int=1000 + broker_id),),
    )


@pytest.fixture
def quorum() -> ControllerQuorum:
    return ControllerQuorum(3, cluster_id=CLUSTER_ID)


def has_committed_metadata_version(quorum: ControllerQuorum, node_id: int) -> bool:
    return any(isinstance(r, FeatureLevelRecord) for r in committed_records(quorum, node_id))


def is_registered(controller: QuorumController, broker_id: int) -> bool:
    return controller.cluster_control.registration(broker_id) is not None


def committed_records(quorum: ControllerQuorum, node_id: int) -> list[object]:
    return [r.message for batch in quorum.cluster.listeners[node_id].batches for r in batch.records]


def test_the_leader_claims_and_writes_metadata_version_on_an_empty_log(
    quorum: ControllerQuorum,
) -> None:
    active = quorum.wait_active()
    assert active.node_id == quorum.cluster.leader()
    for node_id, controller in quorum.controllers.items():
        assert quorum.run_until(partial(has_committed_metadata_version, quorum, node_id))
        assert controller.features.metadata_version() == 21
        assert controller.is_active == (controller is active)


def test_a_registration_answers_with_the_offset_of_its_record_once_committed(
    quorum: ControllerQuorum,
) -> None:
    active = quorum.wait_active()
    future = active.register_broker(registration(1))
    assert not future.done()
    reply = quorum.result(future)
    assert reply.epoch > 0
    assert active.last_committed_offset >= reply.epoch
    # Every standby has replayed the committed registration.
    for controller in quorum.controllers.values():
        assert quorum.run_until(partial(is_registered, controller, 1))
        assert controller.cluster_control.registration(1).epoch == reply.epoch  # type: ignore[union-attr]


def test_a_standby_refuses_writes_with_not_controller_naming_the_leader(
    quorum: ControllerQuorum,
) -> None:
    active = quorum.wait_active()
    standby = next(c for c in quorum.controllers.values() if c is not active)
    assert quorum.run_until(lambda: standby._latest_leader_id == active.node_id)
    future = standby.register_broker(registration(1))
    with pytest.raises(NotControllerError) as caught:
        quorum.result(future)
    assert caught.value.leader_id == active.node_id


def test_producer_id_blocks_grow_across_a_failover(quorum: ControllerQuorum) -> None:
    active = quorum.wait_active()
    epoch = quorum.result(active.register_broker(registration(1))).epoch
    first = quorum.result(active.allocate_producer_ids(AllocateProducerIdsRequest(1, epoch)))
    quorum.cluster.disconnected.add(active.node_id)
    assert quorum.run_until(
        lambda: (a := quorum.active()) is not None and a is not active and not active.is_active,
        60_000,
    )
    successor = quorum.active()
    assert successor is not None
    second = quorum.result(successor.allocate_producer_ids(AllocateProducerIdsRequest(1, epoch)))
    assert second.first_producer_id >= first.first_producer_id + first.size


def test_no_op_records_keep_coming_while_idle(quorum: ControllerQuorum) -> None:
    active = quorum.wait_active()
    quorum.run_for(5_000)
    no_ops = sum(isinstance(r, NoOpRecord) for r in committed_records(quorum, active.node_id))
    # One every 500 ms: about ten in 5 s (the first after activation).
    assert 8 <= no_ops <= 11


def test_a_renounce_reverts_what_never_committed_and_fails_the_waiting_writes(
    quorum: ControllerQuorum,
) -> None:
    active = quorum.wait_active()
    quorum.result(active.register_broker(registration(1)))
    committed = active.last_committed_offset
    # Cut the leader off: its next write replays at once but can never commit.
    quorum.cluster.disconnected.add(active.node_id)
    pending = active.register_broker(registration(2))
    quorum.step()
    assert active.cluster_control.registration(2) is not None  # replayed, uncommitted
    assert quorum.run_until(lambda: not active.is_active, 60_000)
    with pytest.raises(NotControllerError):
        pending.result(timeout=0)
    assert active.cluster_control.registration(2) is None  # reverted
    assert active.cluster_control.registration(1) is not None
    assert active.last_committed_offset == committed


def test_an_operation_that_writes_nothing_answers_at_once_when_nothing_waits(
    quorum: ControllerQuorum,
) -> None:
    active = quorum.wait_active()
    quorum.run_until(lambda: len(active._deferred) == 0)
    future = active.append_write_event("read", lambda: ControllerResult([], 7))
    queue = quorum.queues[active.node_id]
    queue.run_until_idle()
    assert future.result(timeout=0) == 7


def test_a_record_that_cannot_be_replayed_stops_the_controller(quorum: ControllerQuorum) -> None:
    active = quorum.wait_active()
    standby = next(c for c in quorum.controllers.values() if c is not active)
    faults: list[FatalFaultError] = []
    standby._on_fault = faults.append
    orphan = PartitionRecord(partition_id=0, topic_id=uuid.UUID(int=7), replicas=(1,), isr=(1,))
    batch = Batch(
        base_offset=10_000,
        last_offset=10_000,
        epoch=1,
        append_timestamp_ms=0,
        size_in_bytes=0,
        records=[at_latest_version(orphan)],
    )
    standby._enqueue_control("bogus", lambda: standby._handle_commit([batch]))
    quorum.step()
    assert standby.fault is not None and faults == [standby.fault]
    assert "PartitionRecord at offset 10000" in str(standby.fault)
    with pytest.raises(RejectedExecutionError):
        standby.register_broker(registration(1)).result(timeout=0)
