"""``MetadataImage``: the cluster's metadata as of one committed offset, immutable (Kafka's
``org.apache.kafka.image``).

An image is what a reader of ``__cluster_metadata`` (a broker, a standby controller, the
metadata shell) sees: the finalized features, the registered brokers, the topics and their
partitions, the configs and the next producer id, with the offset and epoch of the last record
it holds (:class:`MetadataProvenance`); and, so that a Kafka log loads whole, the areas kraft's
controller does not write (controller registrations, client quotas, ACLs, SCRAM credentials,
delegation tokens, the ZooKeeper migration state). Images are never changed: a
:class:`~kraft.metadata.delta.MetadataDelta` replays records over one and builds the next,
sharing every part the records did not touch.

:meth:`MetadataImage.records` writes an image as the records of a snapshot, in Kafka's
``MetadataImage.write`` order (features first, with ``metadata.version`` the very first record,
then brokers and controllers, topics with their partitions, configs, client quotas, producer
ids, ACLs, SCRAM credentials, delegation tokens); replaying them onto
:data:`MetadataImage.EMPTY` gives an equal image. Records are written at the versions kraft
writes (:func:`~kraft.metadata.records.record_version`: Kafka 3.9 at 3.9-IV0), which carry no
eligible leader replicas (KIP-966): the image does not keep them either.

Every map of an image is a read-only view (:class:`types.MappingProxyType`); the structs are
frozen, so an image can be handed to any number of readers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import ClassVar, Final, TypeVar

import msgspec

from kraft.common.uuids import ZERO_UUID
from kraft.errors import IllegalStateError
from kraft.metadata.records import (
    AccessControlEntryRecord,
    ApiMessageAndVersion,
    BrokerEndpoint,
    BrokerFeature,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    EntityData,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    TopicRecord,
    UserScramCredentialRecord,
    ZkMigrationStateRecord,
    at_latest_version,
)

__all__ = [
    "METADATA_VERSION_FEATURE",
    "MIGRATING_DIRECTORY",
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "NO_LEADER_RECOVERY_STATE_CHANGE",
    "BrokerRegistration",
    "ConfigResourceKey",
    "FeaturesImage",
    "InvalidReplicaDirectoriesError",
    "MetadataReplayError",
    "MetadataImage",
    "MetadataProvenance",
    "PartitionRegistration",
    "ProducerIdsImage",
    "QuotaEntity",
    "ScramKey",
    "TopicImage",
    "quota_entity",
    "read_only",
]

K = TypeVar("K")
V = TypeVar("V")

#: The feature whose level is the metadata version (Kafka's ``MetadataVersion.FEATURE_NAME``).
METADATA_VERSION_FEATURE: Final = "metadata.version"
#: A partition without a leader (Kafka's ``LeaderConstants.NO_LEADER``).
NO_LEADER: Final = -1
#: ``PartitionChangeRecord.leader`` when the leader stays (Kafka's ``NO_LEADER_CHANGE``).
NO_LEADER_CHANGE: Final = -2
#: ``PartitionChangeRecord.leader_recovery_state`` when it stays (Kafka's ``NO_CHANGE``).
NO_LEADER_RECOVERY_STATE_CHANGE: Final = -1
#: The directory of a replica whose log directory is not known yet (Kafka's
#: ``DirectoryId.MIGRATING``: the zero uuid); records before version 1 carry no directories.
MIGRATING_DIRECTORY: Final = ZERO_UUID


def read_only(mapping: dict[K, V]) -> Mapping[K, V]:
    """``mapping`` behind a read-only view (the image's maps); the caller gives it up."""
    return MappingProxyType(mapping)


class MetadataReplayError(IllegalStateError):
    """A record that cannot apply to the image it is replayed over: the log is not what a
    controller writes (Kafka's deltas throw ``IllegalStateException`` or
    ``RuntimeException``)."""


class InvalidReplicaDirectoriesError(MetadataReplayError):
    """A partition record whose directories do not match its replicas one for one (Kafka's
    ``InvalidReplicaDirectoriesException``)."""


class MetadataProvenance(msgspec.Struct, frozen=True):
    """Where an image comes from: the offset and epoch of the last record it holds, and the
    append time of that record's batch (Kafka's ``MetadataProvenance``)."""

    offset: int
    epoch: int
    last_contained_log_time_ms: int

    EMPTY: ClassVar[MetadataProvenance]


MetadataProvenance.EMPTY = MetadataProvenance(-1, -1, -1)


class FeaturesImage(msgspec.Struct, frozen=True):
    """The finalized features: ``metadata_version`` (0 until a ``metadata.version`` record),
    and the other features' levels by name (a level of 0 removes a feature); with them, as in
    Kafka, the ZooKeeper migration state (Kafka's ``ZkMigrationState`` id, 0: NONE)."""

    metadata_version: int
    finalized: Mapping[str, int]
    zk_migration_state: int = 0

    EMPTY: ClassVar[FeaturesImage]

    def records(self) -> Iterator[ApiMessageAndVersion]:
        # metadata.version first: a reader needs it to read what follows (Kafka's
        # FeaturesImage.writeFeatureLevels).
        if self.metadata_version:
            yield at_latest_version(
                FeatureLevelRecord(
                    name=METADATA_VERSION_FEATURE, feature_level=self.metadata_version
                )
            )
        for name, level in self.finalized.items():
            yield at_latest_version(FeatureLevelRecord(name=name, feature_level=level))
        if self.zk_migration_state:
            yield at_latest_version(
                ZkMigrationStateRecord(zk_migration_state=self.zk_migration_state)
            )


FeaturesImage.EMPTY = FeaturesImage(0, read_only({}))


class BrokerRegistration(msgspec.Struct, frozen=True, kw_only=True):
    """A registered broker (Kafka's ``BrokerRegistration``): ``epoch`` is the offset of its
    ``RegisterBrokerRecord``; ``directories`` its log directories' ids (KIP-858)."""

    id: int
    epoch: int
    incarnation_id: uuid.UUID
    listeners: tuple[BrokerEndpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    supported_features: tuple[BrokerFeature, ...]
    directories: tuple[uuid.UUID, ...] = ()
    is_migrating_zk_broker: bool = False

    @classmethod
    def from_record(cls, record: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(
            id=record.broker_id,
            epoch=record.broker_epoch,
            incarnation_id=record.incarnation_id,
            listeners=record.end_points,
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            supported_features=record.features,
            directories=record.log_dirs,
            is_migrating_zk_broker=record.is_migrating_zk_broker,
        )

    def to_record(self) -> ApiMessageAndVersion:
        return at_latest_version(
            RegisterBrokerRecord(
                broker_id=self.id,
                is_migrating_zk_broker=self.is_migrating_zk_broker,
                incarnation_id=self.incarnation_id,
                broker_epoch=self.epoch,
                end_points=self.listeners,
                features=self.supported_features,
                rack=self.rack,
                fenced=self.fenced,
                in_controlled_shutdown=self.in_controlled_shutdown,
                log_dirs=self.directories,
            )
        )


def _directories(directories: tuple[uuid.UUID, ...], replicas: int) -> tuple[uuid.UUID, ...]:
    """Kafka's ``defaultToMigrating``: no directory known for any replica means one
    ``MIGRATING`` per replica (what a record before version 1 implies)."""
    if directories.count(MIGRATING_DIRECTORY) == len(directories):
        return (MIGRATING_DIRECTORY,) * replicas
    return directories


class PartitionRegistration(msgspec.Struct, frozen=True, kw_only=True):
    """One partition's replicas, ISR and leader (Kafka's ``PartitionRegistration``).

    ``leader_epoch`` grows each time the leader changes, ``partition_epoch`` on every change
    (:meth:`merge`). ``directories`` holds one log directory id per replica.
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int
    leader_recovery_state: int = 0
    leader_epoch: int
    partition_epoch: int
    directories: tuple[uuid.UUID, ...]

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        if record.directories and len(record.directories) != len(record.replicas):
            raise InvalidReplicaDirectoriesError(
                f"partition {record.topic_id}:{record.partition_id} has "
                f"{len(record.directories)} directories for {len(record.replicas)} replicas"
            )
        return cls(
            replicas=record.replicas,
            isr=record.isr,
            removing_replicas=record.removing_replicas,
            adding_replicas=record.adding_replicas,
            leader=record.leader,
            leader_recovery_state=record.leader_recovery_state,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            directories=_directories(record.directories, len(record.replicas)),
        )

    def merge(self, record: PartitionChangeRecord) -> PartitionRegistration:
        """This partition after ``record`` (Kafka's ``PartitionRegistration.merge``).

        A field the record leaves at its "no change" default (``None``, leader -2, leader
        recovery state -1) keeps its value. A new leader (even the same broker, or -1) bumps
        the leader epoch; every record bumps the partition epoch.
        """
        replicas = self.replicas if record.replicas is None else record.replicas
        if record.directories is None:
            directories = self.directories
        else:
            if (
                record.replicas is not None
                and record.directories
                and (len(record.directories) != len(record.replicas))
            ):
                raise InvalidReplicaDirectoriesError(
                    f"partition change {record.topic_id}:{record.partition_id} has "
                    f"{len(record.directories)} directories for {len(record.replicas)} replicas"
                )
            directories = record.directories
        if record.leader == NO_LEADER_CHANGE:
            leader, leader_epoch = self.leader, self.leader_epoch
        else:
            leader, leader_epoch = record.leader, self.leader_epoch + 1
        recovery = record.leader_recovery_state
        return PartitionRegistration(
            replicas=replicas,
            isr=self.isr if record.isr is None else record.isr,
            removing_replicas=(
                self.removing_replicas
                if record.removing_replicas is None
                else record.removing_replicas
            ),
            adding_replicas=(
                self.adding_replicas if record.adding_replicas is None else record.adding_replicas
            ),
            leader=leader,
            leader_recovery_state=(
                self.leader_recovery_state
                if recovery == NO_LEADER_RECOVERY_STATE_CHANGE
                else recovery
            ),
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            directories=_directories(directories, len(replicas)),
        )

    def to_record(self, topic_id: uuid.UUID, partition_id: int) -> ApiMessageAndVersion:
        return at_latest_version(
            PartitionRecord(
                partition_id=partition_id,
                topic_id=topic_id,
                replicas=self.replicas,
                isr=self.isr,
                removing_replicas=self.removing_replicas,
                adding_replicas=self.adding_replicas,
                leader=self.leader,
                leader_recovery_state=self.leader_recovery_state,
                leader_epoch=self.leader_epoch,
                partition_epoch=self.partition_epoch,
                directories=self.directories,
            )
        )


class TopicImage(msgspec.Struct, frozen=True):
    """A topic and its partitions by index."""

    name: str
    id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration]

    def records(self) -> Iterator[ApiMessageAndVersion]:
        yield at_latest_version(TopicRecord(name=self.name, topic_id=self.id))
        topic_id = self.id
        for index, partition in self.partitions.items():
            yield partition.to_record(topic_id, index)


class ProducerIdsImage(msgspec.Struct, frozen=True):
    """The next producer id the controller hands out; -1 before the first block."""

    next_producer_id: int

    EMPTY: ClassVar[ProducerIdsImage]

    def records(self) -> Iterator[ApiMessageAndVersion]:
        if self.next_producer_id >= 0:
            # Kafka's ProducerIdsImage.write: the block's owner is not part of the image.
            yield at_latest_version(
                ProducerIdsRecord(
                    broker_id=-1, broker_epoch=-1, next_producer_id=self.next_producer_id
                )
            )


ProducerIdsImage.EMPTY = ProducerIdsImage(-1)

#: A config resource: Kafka's ``ConfigResource.Type`` id (TOPIC 2, BROKER 4) and its name.
ConfigResourceKey = tuple[int, str]
#: A client quota's entity (Kafka's ``ClientQuotaEntity``): its parts, ordered by type.
QuotaEntity = tuple[EntityData, ...]
#: A SCRAM credential's user name and mechanism (Kafka's ``ScramMechanism`` id).
ScramKey = tuple[str, int]


def quota_entity(entity: tuple[EntityData, ...]) -> QuotaEntity:
    """``entity`` as a key: its parts in type order (a quota's entity is a map in Kafka)."""
    return tuple(sorted(entity, key=lambda part: part.entity_type))


class MetadataImage(msgspec.Struct, frozen=True, kw_only=True):
    """The cluster metadata as of :attr:`provenance` (see the module docstring)."""

    provenance: MetadataProvenance
    features: FeaturesImage
    brokers: Mapping[int, BrokerRegistration]
    topics: Mapping[str, TopicImage]
    topics_by_id: Mapping[uuid.UUID, TopicImage]
    configs: Mapping[ConfigResourceKey, Mapping[str, str]]
    producer_ids: ProducerIdsImage
    #: The areas kraft's controller does not write, kept as Kafka's image keeps them, so that
    #: a Kafka log or snapshot loads whole: controller registrations (KIP-919) by id, client
    #: quotas by entity, ACLs by id, SCRAM credentials, delegation tokens by id.
    controllers: Mapping[int, RegisterControllerRecord]
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]]
    acls: Mapping[uuid.UUID, AccessControlEntryRecord]
    scram_credentials: Mapping[ScramKey, UserScramCredentialRecord]
    delegation_tokens: Mapping[str, DelegationTokenRecord]

    EMPTY: ClassVar[MetadataImage]

    def with_provenance(self, provenance: MetadataProvenance) -> MetadataImage:
        """This image at another provenance (the same parts)."""
        return msgspec.structs.replace(self, provenance=provenance)

    def partition_count(self) -> int:
        return sum(len(topic.partitions) for topic in self.topics.values())

    def records(self) -> Iterator[ApiMessageAndVersion]:
        """The image as a snapshot's records (see the module docstring)."""
        yield from self.features.records()
        for broker in self.brokers.values():
            yield broker.to_record()
        for controller in self.controllers.values():
            yield at_latest_version(controller)
        for topic in self.topics.values():
            yield from topic.records()
        for (resource_type, resource_name), config in self.configs.items():
            for name, value in config.items():
                yield at_latest_version(
                    ConfigRecord(
                        resource_type=resource_type,
                        resource_name=resource_name,
                        name=name,
                        value=value,
                    )
                )
        for entity, quotas in self.client_quotas.items():
            for key, quota in quotas.items():
                yield at_latest_version(ClientQuotaRecord(entity=entity, key=key, value=quota))
        yield from self.producer_ids.records()
        for acl in self.acls.values():
            yield at_latest_version(acl)
        for credential in self.scram_credentials.values():
            yield at_latest_version(credential)
        for token in self.delegation_tokens.values():
            yield at_latest_version(token)


MetadataImage.EMPTY = MetadataImage(
    provenance=MetadataProvenance.EMPTY,
    features=FeaturesImage.EMPTY,
    brokers=read_only({}),
    topics=read_only({}),
    topics_by_id=read_only({}),
    configs=read_only({}),
    producer_ids=ProducerIdsImage.EMPTY,
    controllers=read_only({}),
    client_quotas=read_only({}),
    acls=read_only({}),
    scram_credentials=read_only({}),
    delegation_tokens=read_only({}),
)
