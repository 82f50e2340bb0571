"""ControllerInvariants fed hand-made images and acknowledgements: each invariant reports the
bad image or answer it exists for, and stays quiet on the good ones next to it."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import msgspec
import pytest

from kraft.controller.state_view import MetadataState
from kraft.metadata.delta import MetadataDelta
from kraft.metadata.image import MetadataImage, MetadataProvenance, read_only
from kraft.metadata.records import (
    BrokerEndpoint,
    BrokerRegistrationChangeRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)
from kraft.simulation import INVARIANTS, Cluster
from kraft.simulation.controller_invariants import CONTROLLER_INVARIANTS, ControllerInvariants

T1 = uuid.UUID(int=0x11)
T2 = uuid.UUID(int=0x22)

Problems = list[tuple[str, tuple[int, ...], str]]


def image(
    records: Iterable[MetadataRecord], offset: int, base: MetadataImage = MetadataImage.EMPTY
) -> MetadataImage:
    delta = MetadataDelta(base)
    for record in records:
        delta.replay(record)
    return delta.apply(MetadataProvenance(offset, 1, offset))


def register(broker_id: int, epoch: int, fenced: bool = False) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=broker_id,
        broker_epoch=epoch,
        incarnation_id=uuid.UUID(int=broker_id),
        end_points=(BrokerEndpoint(name="PLAINTEXT", host="h", port=9092, security_protocol=0),),
        fenced=fenced,
    )


def partition(topic_id: uuid.UUID = T1, leader: int = 1, **epochs: int) -> PartitionRecord:
    return PartitionRecord(
        partition_id=0,
        topic_id=topic_id,
        replicas=(1, 2),
        isr=(1, 2),
        leader=leader,
        leader_epoch=epochs.get("leader_epoch", 0),
        partition_epoch=epochs.get("partition_epoch", 0),
    )


#: Two unfenced brokers and topic "a" (T1) led by broker 1, at offset 10.
BASE = image([register(1, 1), register(2, 2), TopicRecord(name="a", topic_id=T1), partition()], 10)


@pytest.fixture
def problems() -> Problems:
    return []


@pytest.fixture
def checks(problems: Problems) -> ControllerInvariants:
    return ControllerInvariants(
        lambda invariant, nodes, message: problems.append((invariant, nodes, message))
    )


def names(problems: Problems) -> list[str]:
    return [invariant for invariant, _, _ in problems]


def test_the_names_are_published_with_the_others() -> None:
    assert set(CONTROLLER_INVARIANTS) <= set(INVARIANTS)


def test_images_at_the_same_offset_must_hold_the_same_metadata(checks, problems) -> None:
    checks.on_image(1, BASE)
    # The same content at another epoch and time is the same metadata.
    checks.on_image(2, BASE.with_provenance(MetadataProvenance(10, 3, 99)))
    assert problems == []
    moved = image([PartitionChangeRecord(topic_id=T1, partition_id=0, leader=2)], 9, BASE)
    checks.on_image(3, moved.with_provenance(BASE.provenance))
    assert names(problems) == ["image_agreement"]
    assert problems[0][1] == (3, 1)


def test_images_are_kept_only_while_a_running_node_has_not_passed_them(checks, problems) -> None:
    later = image([register(3, 11)], 11, BASE)
    checks.on_image(1, BASE)
    checks.on_image(1, later)
    checks.on_image(2, BASE)
    assert checks.offsets_kept == 2
    checks.on_image(2, later)
    assert checks.offsets_kept == 1
    # A stopped node holds nothing back; until then its old offsets stay.
    checks.on_image(3, BASE)
    checks.on_image(1, image([], 12, later))
    assert checks.offsets_kept == 3
    checks.node_stopped(3)
    checks.on_image(2, image([], 12, later))
    assert checks.offsets_kept == 1
    assert problems == []


def test_a_broker_epoch_never_decreases(checks, problems) -> None:
    checks.on_image(1, image([register(1, 9)], 10))
    # A node replaying from the start (an older registration) is not compared backwards.
    checks.on_image(2, image([register(1, 3)], 5))
    assert problems == []
    checks.on_image(1, image([register(1, 4)], 11))
    assert names(problems) == ["broker_epoch_monotonic"]


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        ([BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, fenced=1)], True),
        ([UnregisterBrokerRecord(broker_id=1, broker_epoch=1)], True),
        # Kafka lets a broker in controlled shutdown lead until its leaderships move.
        (
            [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, in_controlled_shutdown=1)],
            False,
        ),
        ([PartitionChangeRecord(topic_id=T1, partition_id=0, leader=-1)], False),
        ([PartitionChangeRecord(topic_id=T1, partition_id=0, leader=3)], True),
    ],
)
def test_a_fenced_or_unregistered_broker_never_leads(checks, problems, records, expected) -> None:
    checks.on_image(1, BASE)
    # Only the broker changes: the topic is the same object, the leader must still be checked.
    checks.on_image(1, image(records, 11, BASE))
    assert names(problems) == (["fenced_never_leads"] if expected else [])


def test_partition_epochs_never_go_back(checks, problems) -> None:
    checks.on_image(
        1, image([PartitionChangeRecord(topic_id=T1, partition_id=0, leader=2)], 11, BASE)
    )
    # A node behind (at offset 10) has older epochs: not compared backwards.
    checks.on_image(3, BASE)
    assert problems == []
    # A node whose image at a later offset has the partition at older epochs.
    checks.on_image(2, BASE.with_provenance(MetadataProvenance(12, 1, 12)))
    assert names(problems) == ["partition_epochs_monotonic"]
    # A re-created topic (a new id) starts over.
    checks.on_image(1, image([TopicRecord(name="b", topic_id=T2), partition(T2)], 13, BASE))
    assert len(problems) == 1


def test_an_acknowledged_topic_stays_until_its_deletion_is_sent(checks, problems) -> None:
    empty = image([register(1, 1)], 8)
    checks.on_image(1, empty)
    checks.on_image(2, BASE)
    checks.topic_acked("a")
    # Below the offset it was acknowledged at, a missing topic is fine.
    checks.on_image(3, empty)
    assert problems == []
    checks.on_image(1, BASE)
    checks.on_image(3, empty.with_provenance(MetadataProvenance(11, 1, 11)))
    assert names(problems) == ["acked_topic_durable"]
    problems.clear()
    recreated = image([TopicRecord(name="a", topic_id=T2)], 5)
    checks.on_image(3, recreated.with_provenance(MetadataProvenance(12, 1, 12)))
    assert names(problems) == ["acked_topic_durable"]
    problems.clear()
    checks.topic_deletion_sent("a")
    checks.on_image(1, empty.with_provenance(MetadataProvenance(13, 1, 13)))
    checks.topic_acked("a")
    assert problems == []


def test_an_acknowledged_topic_is_in_the_highest_committed_image(checks, problems) -> None:
    checks.on_image(1, BASE)
    checks.on_image(2, image([register(1, 1)], 20))
    checks.topic_acked("a")
    assert names(problems) == ["acked_topic_durable"]


def test_producer_id_blocks_never_overlap(checks, problems) -> None:
    checks.producer_ids_handed_out(101, 0, 1000)
    checks.producer_ids_handed_out(102, 2000, 1000)
    checks.producer_ids_handed_out(103, 1000, 1000)
    assert problems == []
    checks.producer_ids_handed_out(104, 2999, 1000)
    assert names(problems) == ["producer_ids_disjoint"]


def test_the_next_producer_id_never_decreases(checks, problems) -> None:
    checks.on_image(1, image([ProducerIdsRecord(next_producer_id=2000)], 11, BASE))
    checks.on_image(2, image([ProducerIdsRecord(next_producer_id=1000)], 10, BASE))
    assert problems == []
    checks.on_image(1, image([ProducerIdsRecord(next_producer_id=1000)], 12, BASE))
    assert names(problems) == ["producer_ids_disjoint"]


def test_a_renounced_controller_holds_the_committed_state(checks, problems) -> None:
    checks.on_image(1, BASE)
    checks.on_renounce(2, 10, MetadataState.of_image(BASE))
    assert (problems, checks.reverts_checked) == ([], 1)
    uncommitted = image([TopicRecord(name="b", topic_id=T2), partition(T2)], 11, BASE)
    checks.on_renounce(2, 10, MetadataState.of_image(uncommitted))
    assert names(problems) == ["revert_to_committed"]
    assert "'b'" in problems[0][2]
    # No image at that offset is known any more: nothing to compare with.
    checks.on_renounce(2, 7, MetadataState.of_image(uncommitted))
    assert (len(problems), checks.reverts_unchecked) == (1, 1)


def test_a_controller_cluster_checks_every_renounce_and_acknowledgement() -> None:
    cluster = Cluster(3, voters=3, controller=True, brokers=3)
    invariants = cluster.controller_sim.invariants  # type: ignore[union-attr]

    def unfenced() -> bool:
        leader = cluster.leader()
        image = None if leader is None else cluster.node(leader).image
        return image is not None and all(
            b in image.brokers and not image.brokers[b].fenced for b in cluster.broker_ids
        )

    assert cluster.run_until(unfenced, 30_000)
    created = cluster.create_topic("t", 2, 3)
    assert cluster.run_until(created.done, 40_000)
    created.result(timeout=0)
    old = cluster.resign()
    assert cluster.run_until(lambda: cluster.leader() not in (None, old), 30_000)
    assert (invariants.reverts_checked, invariants.reverts_unchecked) == (1, 0)
    # The acknowledged topic is now checked against every image: lose it from one.
    node = cluster.node(cluster.leader())  # type: ignore[arg-type]
    assert node.image is not None
    without = msgspec.structs.replace(node.image, topics=read_only({}))
    cluster.stop_on_violation = False
    invariants.image_published(node.node_id, without)
    cluster.run_for(500)  # the checker turns reports into violations after the next event
    assert "acked_topic_durable" in {v.invariant for v in cluster.violations}
