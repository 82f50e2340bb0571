"""MetadataImage, MetadataDelta and PartitionRegistration.merge: Kafka's image rules, and the
image written as records and replayed onto EMPTY giving the same image."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.common.uuids import ZERO_UUID
from kraft.metadata.codec import decode_record, encode_record
from kraft.metadata.delta import MetadataDelta
from kraft.metadata.image import (
    InvalidReplicaDirectoriesError,
    MetadataImage,
    MetadataProvenance,
    MetadataReplayError,
    PartitionRegistration,
)
from kraft.metadata.records import (
    AccessControlEntryRecord,
    ApiMessageAndVersion,
    BeginTransactionRecord,
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    EndTransactionRecord,
    EntityData,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    ZkMigrationStateRecord,
)

AT = MetadataProvenance(10, 2, 1000)
T1 = uuid.UUID(int=0x11)
T2 = uuid.UUID(int=0x22)
D1 = uuid.UUID(int=0xD1)
D2 = uuid.UUID(int=0xD2)


def image_of(
    records: Iterable[MetadataRecord],
    base: MetadataImage = MetadataImage.EMPTY,
    at: MetadataProvenance = AT,
) -> MetadataImage:
    delta = MetadataDelta(base)
    for record in records:
        delta.replay(record)
    return delta.apply(at)


def register(broker_id: int, epoch: int = 5, **fields) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=broker_id,
        broker_epoch=epoch,
        incarnation_id=uuid.UUID(int=broker_id),
        end_points=(BrokerEndpoint(name="PLAINTEXT", host="h", port=9092, security_protocol=0),),
        **fields,
    )


def partition(topic_id=T1, index=0, **fields) -> PartitionRecord:
    values: dict[str, Any] = {"replicas": (1, 2, 3), "isr": (1, 2, 3), "leader": 1}
    values.update(leader_epoch=0, partition_epoch=0)
    values.update(fields)
    return PartitionRecord(partition_id=index, topic_id=topic_id, **values)


BASE = image_of([TopicRecord(name="a", topic_id=T1), partition(directories=(D1, D2, D1))])
A0 = BASE.topics["a"].partitions[0]


# -- PartitionRegistration.merge ---------------------------------------------------------------


def test_merge_of_a_record_that_changes_nothing_bumps_only_the_partition_epoch() -> None:
    merged = A0.merge(PartitionChangeRecord(partition_id=0, topic_id=T1))
    assert merged == PartitionRegistration(
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        leader=1,
        leader_epoch=0,
        partition_epoch=1,
        directories=(D1, D2, D1),
    )


def test_merge_of_a_new_leader_bumps_the_leader_epoch_even_to_the_same_broker() -> None:
    to_two = A0.merge(PartitionChangeRecord(topic_id=T1, partition_id=0, leader=2, isr=(2, 3)))
    assert (to_two.leader, to_two.leader_epoch, to_two.partition_epoch, to_two.isr) == (
        2,
        1,
        1,
        (2, 3),
    )
    same = to_two.merge(PartitionChangeRecord(topic_id=T1, partition_id=0, leader=2))
    assert (same.leader, same.leader_epoch, same.partition_epoch) == (2, 2, 2)
    none = same.merge(PartitionChangeRecord(topic_id=T1, partition_id=0, leader=-1))
    assert (none.leader, none.leader_epoch) == (-1, 3)


def test_merge_sets_every_field_the_record_carries() -> None:
    merged = A0.merge(
        PartitionChangeRecord(
            topic_id=T1,
            partition_id=0,
            replicas=(4, 5),
            directories=(D2, D2),
            removing_replicas=(1,),
            adding_replicas=(5,),
            leader_recovery_state=1,
        )
    )
    assert merged.replicas == (4, 5)
    assert merged.directories == (D2, D2)
    assert (merged.removing_replicas, merged.adding_replicas) == ((1,), (5,))
    assert merged.leader_recovery_state == 1
    assert merged.merge(PartitionChangeRecord()).leader_recovery_state == 1


def test_records_without_directories_mean_one_migrating_directory_per_replica() -> None:
    assert PartitionRegistration.from_record(partition()).directories == (ZERO_UUID,) * 3
    unknown = PartitionRegistration.from_record(partition())
    grown = unknown.merge(PartitionChangeRecord(replicas=(1, 2, 3, 4)))
    assert grown.directories == (ZERO_UUID,) * 4


def test_directories_that_do_not_match_the_replicas_are_refused() -> None:
    with pytest.raises(InvalidReplicaDirectoriesError, match="2 directories for 3 replicas"):
        PartitionRegistration.from_record(partition(directories=(D1, D2)))
    with pytest.raises(InvalidReplicaDirectoriesError, match="1 directories for 2 replicas"):
        A0.merge(PartitionChangeRecord(replicas=(1, 2), directories=(D1,)))


# -- MetadataDelta ---------------------------------------------------------------------------


def test_an_image_holds_what_its_records_say() -> None:
    image = image_of(
        [
            FeatureLevelRecord(name="metadata.version", feature_level=21),
            FeatureLevelRecord(name="kraft.version", feature_level=1),
            register(1, rack="r1", features=(BrokerFeature(name="metadata.version"),)),
            TopicRecord(name="a", topic_id=T1),
            partition(),
            ConfigRecord(resource_type=2, resource_name="a", name="retention.ms", value="1"),
            ProducerIdsRecord(broker_id=1, broker_epoch=5, next_producer_id=1000),
            NoOpRecord(),
        ]
    )
    assert image.provenance == AT
    assert (image.features.metadata_version, dict(image.features.finalized)) == (
        21,
        {"kraft.version": 1},
    )
    broker = image.brokers[1]
    assert (broker.epoch, broker.rack, broker.fenced, broker.listeners[0].port) == (
        5,
        "r1",
        True,
        9092,
    )
    assert image.topics["a"] is image.topics_by_id[T1]
    assert image.topics["a"].partitions[0].isr == (1, 2, 3)
    assert image.configs == {(2, "a"): {"retention.ms": "1"}}
    assert image.producer_ids.next_producer_id == 1000


def test_an_image_cannot_be_changed_in_place() -> None:
    with pytest.raises(TypeError):
        BASE.topics["b"] = BASE.topics["a"]  # type: ignore[index]
    with pytest.raises(AttributeError):
        BASE.provenance = AT  # type: ignore[misc]


def test_apply_shares_every_part_no_record_touched() -> None:
    two = image_of([TopicRecord(name="b", topic_id=T2), partition(T2)], BASE)
    assert two.topics["a"] is BASE.topics["a"]
    assert two.features is BASE.features and two.brokers is BASE.brokers
    three = image_of([PartitionChangeRecord(topic_id=T2, partition_id=0, leader=2)], two)
    assert three.topics["a"] is BASE.topics["a"]
    assert three.topics["b"].partitions[0].leader == 2
    assert two.topics["b"].partitions[0].leader == 1  # the old image is untouched


def test_removing_a_topic_removes_its_partitions_and_configs() -> None:
    configured = image_of(
        [
            ConfigRecord(resource_type=2, resource_name="a", name="x", value="1"),
            ConfigRecord(resource_type=4, resource_name="1", name="y", value="2"),
        ],
        BASE,
    )
    removed = image_of([RemoveTopicRecord(topic_id=T1)], configured)
    assert dict(removed.topics) == {} and dict(removed.topics_by_id) == {}
    assert removed.configs == {(4, "1"): {"y": "2"}}
    # ...and the name can be used again, in the same delta.
    again = image_of([RemoveTopicRecord(topic_id=T1), TopicRecord(name="a", topic_id=T2)], BASE)
    assert again.topics["a"].id == T2 and dict(again.topics["a"].partitions) == {}


def test_a_config_set_to_null_goes_and_an_empty_resource_with_it() -> None:
    image = image_of([ConfigRecord(resource_type=4, resource_name="1", name="y", value="2")])
    image = image_of([ConfigRecord(resource_type=4, resource_name="1", name="y")], image)
    assert dict(image.configs) == {}


def test_a_feature_at_level_zero_goes() -> None:
    image = image_of([FeatureLevelRecord(name="group.version", feature_level=1)])
    image = image_of([FeatureLevelRecord(name="group.version", feature_level=0)], image)
    assert dict(image.features.finalized) == {}


def test_broker_fencing_and_controlled_shutdown() -> None:
    image = image_of([register(1, epoch=7)])
    image = image_of([UnfenceBrokerRecord(id=1, epoch=7)], image)
    assert not image.brokers[1].fenced
    image = image_of([BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=7, fenced=1)], image)
    assert image.brokers[1].fenced
    image = image_of(
        [
            BrokerRegistrationChangeRecord(
                broker_id=1, broker_epoch=7, fenced=-1, in_controlled_shutdown=1, log_dirs=(D1,)
            )
        ],
        image,
    )
    broker = image.brokers[1]
    assert (broker.fenced, broker.in_controlled_shutdown, broker.directories) == (
        False,
        True,
        (D1,),
    )
    image = image_of([FenceBrokerRecord(id=1, epoch=7)], image)
    assert image.brokers[1].fenced and image.brokers[1].in_controlled_shutdown
    image = image_of([UnregisterBrokerRecord(broker_id=1, broker_epoch=7)], image)
    assert dict(image.brokers) == {}


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (PartitionRecord(topic_id=T2, partition_id=0), "no topic with id"),
        (PartitionChangeRecord(topic_id=T1, partition_id=9), "no such partition"),
        (RemoveTopicRecord(topic_id=T2), "no such topic"),
        (TopicRecord(name="a", topic_id=T2), "exists already"),
        (TopicRecord(name="b", topic_id=T1), "in use already"),
        (FenceBrokerRecord(id=3, epoch=5), "not registered"),
        (UnfenceBrokerRecord(id=1, epoch=4), "registered at epoch 5"),
        (BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, fenced=2), "values"),
    ],
)
def test_a_record_that_does_not_fit_the_image_is_a_replay_error(record, message) -> None:
    delta = MetadataDelta(image_of([register(1)], BASE))
    with pytest.raises(MetadataReplayError, match=message):
        delta.replay(record)


def test_the_areas_kraft_does_not_write_are_kept_as_kafka_keeps_them() -> None:
    acl = AccessControlEntryRecord(id=T1, resource_name="orders", principal="User:a")
    token = DelegationTokenRecord(token_id="tok", owner="User:a")
    scram = UserScramCredentialRecord(name="alice", mechanism=1, iterations=4096)
    user = (EntityData(entity_type="user", entity_name="alice"),)
    both = (EntityData(entity_type="user"), EntityData(entity_type="client-id", entity_name="c"))
    image = image_of(
        [
            RegisterControllerRecord(controller_id=3000, incarnation_id=T2),
            ZkMigrationStateRecord(zk_migration_state=1),
            ClientQuotaRecord(entity=user, key="producer_byte_rate", value=1024.0),
            ClientQuotaRecord(entity=user, key="consumer_byte_rate", value=2048.0),
            ClientQuotaRecord(entity=both, key="request_percentage", value=50.0),
            acl,
            token,
            scram,
        ]
    )
    assert image.controllers[3000].incarnation_id == T2
    assert image.features.zk_migration_state == 1
    assert image.client_quotas[user] == {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}
    assert image.client_quotas[tuple(reversed(both))] == {"request_percentage": 50.0}
    assert (image.acls[T1], image.delegation_tokens["tok"]) == (acl, token)
    assert image.scram_credentials[("alice", 1)] == scram
    image = image_of(
        [
            ClientQuotaRecord(entity=user, key="producer_byte_rate", remove=True),
            ClientQuotaRecord(entity=both, key="request_percentage", remove=True),
            RemoveAccessControlEntryRecord(id=T1),
            RemoveDelegationTokenRecord(token_id="tok"),
            RemoveUserScramCredentialRecord(name="alice", mechanism=1),
            BeginTransactionRecord(name="t"),
            EndTransactionRecord(),
        ],
        image,
    )
    assert image.client_quotas == {user: {"consumer_byte_rate": 2048.0}}
    assert (dict(image.acls), dict(image.delegation_tokens)) == ({}, {})
    assert dict(image.scram_credentials) == {}
    with pytest.raises(MetadataReplayError, match="no such ACL"):
        MetadataDelta(image).replay(RemoveAccessControlEntryRecord(id=T1))


# -- the image as records ------------------------------------------------------------------------


def test_empty_writes_nothing_and_features_come_first() -> None:
    assert list(MetadataImage.EMPTY.records()) == []
    image = image_of(
        [
            register(1),
            FeatureLevelRecord(name="kraft.version", feature_level=1),
            FeatureLevelRecord(name="metadata.version", feature_level=21),
        ]
    )
    names = [type(r.message).__name__ for r in image.records()]
    assert names == ["FeatureLevelRecord", "FeatureLevelRecord", "RegisterBrokerRecord"]
    first = next(iter(image.records()))
    assert first == ApiMessageAndVersion(
        FeatureLevelRecord(name="metadata.version", feature_level=21), 0
    )


# A small cluster's worth of names and ids, so that the records refer to each other often.
_BROKERS = st.integers(0, 4)
_REPLICAS = st.lists(_BROKERS, min_size=1, max_size=4, unique=True).map(tuple)
_DIRS = st.sampled_from([ZERO_UUID, D1, D2])
_NAMES = st.sampled_from(["a", "b", "c"])


_ENTITIES = st.lists(
    st.builds(
        EntityData,
        entity_type=st.sampled_from(["user", "client-id", "ip"]),
        entity_name=st.none() | st.sampled_from(["a", "b"]),
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda part: part.entity_type,
).map(tuple)
_SMALL_IDS = st.integers(1, 3).map(lambda i: uuid.UUID(int=i))
_TOKENS = st.sampled_from(["t1", "t2"])
_USERS = st.sampled_from(["alice", "bob"])
#: Records of the areas kraft's controller does not write (always valid: their removals of
#: something absent are no-ops in Kafka, but an ACL's, which the strategy never removes).
_OTHER_AREAS: st.SearchStrategy[MetadataRecord] = st.one_of(
    st.builds(RegisterControllerRecord, controller_id=st.integers(0, 2), incarnation_id=_SMALL_IDS),
    st.builds(ZkMigrationStateRecord, zk_migration_state=st.integers(0, 4)),
    st.builds(
        ClientQuotaRecord,
        entity=_ENTITIES,
        key=st.sampled_from(["producer_byte_rate", "request_percentage"]),
        value=st.floats(0, 1e9),
        remove=st.booleans(),
    ),
    st.builds(AccessControlEntryRecord, id=_SMALL_IDS, principal=_USERS),
    st.builds(DelegationTokenRecord, token_id=_TOKENS, owner=_USERS),
    st.builds(RemoveDelegationTokenRecord, token_id=_TOKENS),
    st.builds(UserScramCredentialRecord, name=_USERS, mechanism=st.integers(1, 2)),
    st.builds(RemoveUserScramCredentialRecord, name=_USERS, mechanism=st.integers(1, 2)),
)


@st.composite
def histories(draw: st.DrawFn) -> list[list[MetadataRecord]]:
    """Valid record sequences, cut into deltas: the model tracks just enough (registered
    brokers and their epochs, live topics and their partitions) to only write records a
    controller could."""
    brokers: dict[int, int] = {}
    topics: dict[str, tuple[uuid.UUID, set[int]]] = {}
    deltas: list[list[MetadataRecord]] = []
    for _ in range(draw(st.integers(1, 6))):
        records: list[MetadataRecord] = []
        for _ in range(draw(st.integers(0, 12))):
            kind = draw(st.integers(0, 9))
            if kind == 0:
                broker_id, epoch = draw(_BROKERS), draw(st.integers(0, 1000))
                records.append(
                    register(
                        broker_id,
                        epoch,
                        rack=draw(st.none() | st.sampled_from(["r1", "r2"])),
                        fenced=draw(st.booleans()),
                        log_dirs=tuple(draw(st.lists(_DIRS, max_size=2))),
                    )
                )
                brokers[broker_id] = epoch
            elif kind == 1 and brokers:
                broker_id = draw(st.sampled_from(sorted(brokers)))
                records.append(
                    BrokerRegistrationChangeRecord(
                        broker_id=broker_id,
                        broker_epoch=brokers[broker_id],
                        fenced=draw(st.integers(-1, 1)),
                        in_controlled_shutdown=draw(st.integers(0, 1)),
                    )
                )
            elif kind == 2 and brokers:
                broker_id = draw(st.sampled_from(sorted(brokers)))
                records.append(
                    UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=brokers.pop(broker_id))
                )
            elif kind == 3:
                name = draw(_NAMES)
                if name not in topics:
                    topic_id = uuid.UUID(int=draw(st.integers(1, 2**128 - 1)))
                    if all(topic_id != known for known, _ in topics.values()):
                        records.append(TopicRecord(name=name, topic_id=topic_id))
                        topics[name] = (topic_id, set())
            elif kind == 4 and topics:
                topic_id, indexes = topics[draw(st.sampled_from(sorted(topics)))]
                index = draw(st.integers(0, 5))
                replicas = draw(_REPLICAS)
                records.append(
                    partition(
                        topic_id,
                        index,
                        replicas=replicas,
                        isr=replicas[: draw(st.integers(1, len(replicas)))],
                        leader=replicas[0],
                        leader_epoch=draw(st.integers(0, 9)),
                        partition_epoch=draw(st.integers(0, 9)),
                        directories=tuple(draw(_DIRS) for _ in replicas),
                    )
                )
                indexes.add(index)
            elif kind == 5 and any(indexes for _, indexes in topics.values()):
                topic_id, indexes = draw(st.sampled_from([t for t in topics.values() if t[1]]))
                new_replicas = draw(st.none() | _REPLICAS)
                directories = None
                if new_replicas is not None:
                    directories = tuple(draw(_DIRS) for _ in new_replicas)
                records.append(
                    PartitionChangeRecord(
                        topic_id=topic_id,
                        partition_id=draw(st.sampled_from(sorted(indexes))),
                        replicas=new_replicas,
                        directories=directories,
                        isr=draw(st.none() | _REPLICAS),
                        leader=draw(st.sampled_from([-2, -1, 0, 1, 2])),
                        leader_recovery_state=draw(st.sampled_from([-1, 0, 1])),
                    )
                )
            elif kind == 6 and topics:
                name = draw(st.sampled_from(sorted(topics)))
                records.append(RemoveTopicRecord(topic_id=topics.pop(name)[0]))
            elif kind == 7:
                records.append(
                    ConfigRecord(
                        resource_type=draw(st.sampled_from([2, 4])),
                        resource_name=draw(_NAMES),
                        name=draw(st.sampled_from(["x", "y"])),
                        value=draw(st.none() | st.sampled_from(["1", "2"])),
                    )
                )
            elif kind == 8:
                records.append(
                    draw(
                        st.builds(
                            FeatureLevelRecord,
                            name=st.sampled_from(["metadata.version", "kraft.version"]),
                            feature_level=st.integers(0, 21),
                        )
                        | st.builds(ProducerIdsRecord, next_producer_id=st.integers(0, 2**40))
                        | st.just(NoOpRecord())
                    )
                )
            elif kind == 9:
                records.append(draw(_OTHER_AREAS))
        deltas.append(records)
    return deltas


def replayed(deltas: list[list[MetadataRecord]]) -> MetadataImage:
    image = MetadataImage.EMPTY
    for offset, records in enumerate(deltas):
        image = image_of(records, image, MetadataProvenance(offset, 1, offset))
    return image


@settings(max_examples=150, deadline=None)
@given(histories())
def test_replaying_an_images_records_onto_empty_gives_an_equal_image(deltas) -> None:
    image = replayed(deltas)
    again = MetadataDelta(MetadataImage.EMPTY)
    for record in image.records():
        # The records must be writable at their versions, and read back the same.
        assert decode_record(encode_record(record)) == record
        again.replay(record.message)
    assert again.apply(image.provenance) == image


@settings(max_examples=100, deadline=None)
@given(histories())
def test_one_delta_or_many_give_the_same_image(deltas) -> None:
    at = MetadataProvenance(len(deltas) - 1, 1, len(deltas) - 1)
    one = image_of([record for records in deltas for record in records], at=at)
    assert one == replayed(deltas)
