"""``MetadataDelta``: records replayed over a :class:`~kraft.metadata.image.MetadataImage`,
then turned into the next image (Kafka's ``MetadataDelta`` and its per-area deltas).

``replay`` takes every metadata record, in log order, and only notes what changes;
``apply(provenance)`` builds the next image, reusing every part of the old one that no record
touched (an unchanged topic is the same object in both images, and so are the features, the
brokers or the configs when no record changed them).

A record that refers to something the image does not have (a partition of an unknown topic, a
fence of a broker at another epoch) is a :class:`~kraft.metadata.image.MetadataReplayError`,
as Kafka's deltas throw: the log is not what the controller wrote. The markers of metadata
transactions (KIP-868) change nothing in an image; they only matter to a loader.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar

from kraft.metadata.image import (
    METADATA_VERSION_FEATURE,
    BrokerRegistration,
    ConfigResourceKey,
    FeaturesImage,
    MetadataImage,
    MetadataProvenance,
    MetadataReplayError,
    PartitionRegistration,
    ProducerIdsImage,
    QuotaEntity,
    ScramKey,
    TopicImage,
    quota_entity,
    read_only,
)
from kraft.metadata.records import (
    AbortTransactionRecord,
    AccessControlEntryRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    EndTransactionRecord,
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

__all__ = ["TOPIC_RESOURCE", "MetadataDelta"]

K = TypeVar("K")
V = TypeVar("V")

#: Kafka's ``ConfigResource.Type.TOPIC`` id: a topic's configs go when the topic does.
TOPIC_RESOURCE = 2

#: ``BrokerRegistrationChangeRecord.fenced`` (Kafka's ``BrokerRegistrationFencingChange``).
_FENCING_CHANGE = {-1: False, 0: None, 1: True}
#: ``BrokerRegistrationChangeRecord.in_controlled_shutdown``
#: (``BrokerRegistrationInControlledShutdownChange``).
_SHUTDOWN_CHANGE = {0: None, 1: True}


class _TopicChange:
    """A topic created or changed in this delta: its partitions, those changed so far."""

    __slots__ = ("base", "id", "name", "partitions")

    def __init__(self, name: str, topic_id: uuid.UUID, base: TopicImage | None) -> None:
        self.name = name
        self.id = topic_id
        self.base = base
        self.partitions: dict[int, PartitionRegistration] = {}

    def partition(self, index: int) -> PartitionRegistration | None:
        found = self.partitions.get(index)
        if found is None and self.base is not None:
            found = self.base.partitions.get(index)
        return found

    def apply(self) -> TopicImage:
        if self.base is None:
            partitions = dict(self.partitions)  # the delta may replay more records later
        else:
            partitions = dict(self.base.partitions)
            partitions.update(self.partitions)
        return TopicImage(self.name, self.id, read_only(partitions))


class MetadataDelta:
    """What records change in ``image`` (see the module docstring)."""

    def __init__(self, image: MetadataImage) -> None:
        #: The image the records are replayed over.
        self.image = image
        self._metadata_version: int | None = None
        self._zk_migration_state: int | None = None
        self._features: dict[str, int | None] = {}
        self._brokers: dict[int, BrokerRegistration | None] = {}
        self._topics: dict[uuid.UUID, _TopicChange] = {}
        #: The ids of the topics created in this delta, by name.
        self._created: dict[str, uuid.UUID] = {}
        self._deleted_topics: dict[uuid.UUID, str] = {}
        self._configs: dict[ConfigResourceKey, dict[str, str | None]] = {}
        self._next_producer_id: int | None = None
        self._controllers: dict[int, RegisterControllerRecord] = {}
        self._client_quotas: dict[QuotaEntity, dict[str, float | None]] = {}
        self._acls: dict[uuid.UUID, AccessControlEntryRecord | None] = {}
        self._scram: dict[ScramKey, UserScramCredentialRecord | None] = {}
        self._tokens: dict[str, DelegationTokenRecord | None] = {}

    # -- what changed (for publishers) ---------------------------------------------------------
    @property
    def changed_brokers(self) -> Mapping[int, BrokerRegistration | None]:
        """Brokers registered or changed (``None``: unregistered), by id."""
        return read_only(self._brokers)

    @property
    def changed_topic_ids(self) -> frozenset[uuid.UUID]:
        """The ids of the topics created or changed (deleted ones excluded)."""
        return frozenset(self._topics)

    @property
    def deleted_topics(self) -> Mapping[uuid.UUID, str]:
        """The names of the image's topics deleted, by id."""
        return read_only(self._deleted_topics)

    @property
    def features_changed(self) -> bool:
        return (
            self._metadata_version is not None
            or self._zk_migration_state is not None
            or bool(self._features)
        )

    # -- replay --------------------------------------------------------------------------------
    def replay(  # noqa: PLR0912, PLR0915 -- one case per record type
        self, record: MetadataRecord
    ) -> None:
        """Note the change ``record`` makes (Kafka's ``MetadataDelta.replay``)."""
        match record:
            case PartitionChangeRecord():
                self._replay_partition_change(record)
            case PartitionRecord():
                self._replay_partition(record)
            case TopicRecord():
                self._replay_topic(record)
            case RemoveTopicRecord():
                self._replay_remove_topic(record)
            case RegisterBrokerRecord():
                self._brokers[record.broker_id] = BrokerRegistration.from_record(record)
            case UnregisterBrokerRecord():
                self._brokers[record.broker_id] = None
            case BrokerRegistrationChangeRecord():
                self._replay_broker_change(record)
            case FenceBrokerRecord():
                self._change_broker(record.id, record.epoch, "fence", fenced=True)
            case UnfenceBrokerRecord():
                self._change_broker(record.id, record.epoch, "unfence", fenced=False)
            case ConfigRecord():
                key = (record.resource_type, record.resource_name)
                self._configs.setdefault(key, {})[record.name] = record.value
            case FeatureLevelRecord() if record.name == METADATA_VERSION_FEATURE:
                self._metadata_version = record.feature_level
            case FeatureLevelRecord():
                self._features[record.name] = record.feature_level or None
            case ProducerIdsRecord():
                self._next_producer_id = record.next_producer_id
            case RegisterControllerRecord():
                self._controllers[record.controller_id] = record
            case ZkMigrationStateRecord():
                self._zk_migration_state = record.zk_migration_state
            case ClientQuotaRecord():
                quotas = self._client_quotas.setdefault(quota_entity(record.entity), {})
                quotas[record.key] = None if record.remove else record.value
            case AccessControlEntryRecord():
                self._acls[record.id] = record
            case RemoveAccessControlEntryRecord():
                if self._acls.get(record.id, self.image.acls.get(record.id)) is None:
                    raise MetadataReplayError(f"cannot remove ACL {record.id}: no such ACL")
                self._acls[record.id] = None
            case UserScramCredentialRecord():
                self._scram[(record.name, record.mechanism)] = record
            case RemoveUserScramCredentialRecord():
                self._scram[(record.name, record.mechanism)] = None
            case DelegationTokenRecord():
                self._tokens[record.token_id] = record
            case RemoveDelegationTokenRecord():
                self._tokens[record.token_id] = None
            case (
                NoOpRecord()
                | BeginTransactionRecord()
                | EndTransactionRecord()
                | AbortTransactionRecord()
            ):
                pass  # only move the provenance

    def _broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self.image.brokers.get(broker_id)

    def _change_broker(
        self,
        broker_id: int,
        epoch: int,
        what: str,
        *,
        fenced: bool | None = None,
        in_controlled_shutdown: bool | None = None,
        directories: tuple[uuid.UUID, ...] = (),
    ) -> None:
        # Kafka's ClusterDelta.getBrokerOrThrow, then BrokerRegistration.cloneWith.
        current = self._broker(broker_id)
        if current is None:
            raise MetadataReplayError(f"cannot {what} broker {broker_id}: it is not registered")
        if current.epoch != epoch:
            raise MetadataReplayError(
                f"cannot {what} broker {broker_id} at epoch {epoch}: it is registered at "
                f"epoch {current.epoch}"
            )
        changed = BrokerRegistration(
            id=current.id,
            epoch=current.epoch,
            incarnation_id=current.incarnation_id,
            listeners=current.listeners,
            rack=current.rack,
            fenced=current.fenced if fenced is None else fenced,
            in_controlled_shutdown=(
                current.in_controlled_shutdown
                if in_controlled_shutdown is None
                else in_controlled_shutdown
            ),
            supported_features=current.supported_features,
            directories=directories or current.directories,
            is_migrating_zk_broker=current.is_migrating_zk_broker,
        )
        if changed != current:
            self._brokers[broker_id] = changed

    def _replay_broker_change(self, record: BrokerRegistrationChangeRecord) -> None:
        try:
            fenced = _FENCING_CHANGE[record.fenced]
            shutdown = _SHUTDOWN_CHANGE[record.in_controlled_shutdown]
        except KeyError:
            raise MetadataReplayError(
                f"broker {record.broker_id}'s registration change has fenced={record.fenced}, "
                f"in_controlled_shutdown={record.in_controlled_shutdown}: values -1..1 and 0..1"
            ) from None
        self._change_broker(
            record.broker_id,
            record.broker_epoch,
            "change",
            fenced=fenced,
            in_controlled_shutdown=shutdown,
            directories=record.log_dirs,
        )

    def _topic_change(self, topic_id: uuid.UUID, what: str) -> _TopicChange:
        change = self._topics.get(topic_id)
        if change is not None:
            return change
        base = None if topic_id in self._deleted_topics else self.image.topics_by_id.get(topic_id)
        if base is None:
            raise MetadataReplayError(f"{what}: no topic with id {topic_id}")
        change = self._topics[topic_id] = _TopicChange(base.name, topic_id, base)
        return change

    def _topic_id_named(self, name: str) -> uuid.UUID | None:
        created = self._created.get(name)
        if created is not None:
            return created
        topic = self.image.topics.get(name)
        if topic is None or topic.id in self._deleted_topics:
            return None
        return topic.id

    def _replay_topic(self, record: TopicRecord) -> None:
        existing = self._topic_id_named(record.name)
        if existing is not None:
            raise MetadataReplayError(f"topic {record.name!r} exists already (id {existing})")
        if record.topic_id in self._topics or (
            record.topic_id in self.image.topics_by_id
            and record.topic_id not in self._deleted_topics
        ):
            raise MetadataReplayError(f"topic id {record.topic_id} is in use already")
        self._topics[record.topic_id] = _TopicChange(record.name, record.topic_id, None)
        self._created[record.name] = record.topic_id

    def _replay_partition(self, record: PartitionRecord) -> None:
        change = self._topic_change(record.topic_id, f"partition {record.partition_id}")
        change.partitions[record.partition_id] = PartitionRegistration.from_record(record)

    def _replay_partition_change(self, record: PartitionChangeRecord) -> None:
        what = f"change of partition {record.partition_id}"
        change = self._topic_change(record.topic_id, what)
        current = change.partition(record.partition_id)
        if current is None:
            raise MetadataReplayError(f"{what} of topic {change.name!r}: no such partition")
        change.partitions[record.partition_id] = current.merge(record)

    def _replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        change = self._topics.pop(record.topic_id, None)
        if change is None:
            base = self.image.topics_by_id.get(record.topic_id)
            if base is None or record.topic_id in self._deleted_topics:
                raise MetadataReplayError(f"cannot remove topic {record.topic_id}: no such topic")
            name = base.name
        else:
            name = change.name
            self._created.pop(name, None)
        if change is None or change.base is not None:
            self._deleted_topics[record.topic_id] = name
        # The topic's configs go with it (Kafka's ConfigurationsDelta.replay(RemoveTopicRecord)).
        key = (TOPIC_RESOURCE, name)
        self._configs[key] = dict.fromkeys(self.image.configs.get(key, {}))

    # -- apply ---------------------------------------------------------------------------------
    def apply(self, provenance: MetadataProvenance) -> MetadataImage:
        """The image after every record replayed, at ``provenance`` (Kafka's
        ``MetadataDelta.apply``)."""
        image = self.image
        features = image.features
        if self.features_changed:
            finalized = _changed(features.finalized, self._features)
            version, zk_state = self._metadata_version, self._zk_migration_state
            features = FeaturesImage(
                features.metadata_version if version is None else version,
                finalized,
                features.zk_migration_state if zk_state is None else zk_state,
            )
        brokers = image.brokers
        if self._brokers:
            brokers = _changed(brokers, self._brokers)
        topics, topics_by_id = image.topics, image.topics_by_id
        if self._topics or self._deleted_topics:
            by_name = _copy(topics)
            by_id = _copy(topics_by_id)
            for topic_id, name in self._deleted_topics.items():
                del by_name[name]
                del by_id[topic_id]
            for topic_id, change in self._topics.items():
                topic = change.apply()
                by_name[topic.name] = by_id[topic_id] = topic
            topics, topics_by_id = read_only(by_name), read_only(by_id)
        configs = image.configs
        if self._configs:
            changed_configs: dict[ConfigResourceKey, Mapping[str, str] | None] = {}
            for key, changes in self._configs.items():
                config = _changed(configs.get(key, {}), changes)
                changed_configs[key] = config if config else None
            configs = _changed(configs, changed_configs)
        producer_ids = image.producer_ids
        if self._next_producer_id is not None:
            producer_ids = ProducerIdsImage(self._next_producer_id)
        client_quotas = image.client_quotas
        if self._client_quotas:
            changed_quotas: dict[QuotaEntity, Mapping[str, float] | None] = {}
            for entity, quota_changes in self._client_quotas.items():
                quotas = _changed(client_quotas.get(entity, {}), quota_changes)
                changed_quotas[entity] = quotas if quotas else None
            client_quotas = _changed(client_quotas, changed_quotas)
        return MetadataImage(
            provenance=provenance,
            features=features,
            brokers=brokers,
            topics=topics,
            topics_by_id=topics_by_id,
            configs=configs,
            producer_ids=producer_ids,
            controllers=_changed(image.controllers, self._controllers),
            client_quotas=client_quotas,
            acls=_changed(image.acls, self._acls),
            scram_credentials=_changed(image.scram_credentials, self._scram),
            delegation_tokens=_changed(image.delegation_tokens, self._tokens),
        )


def _copy(mapping: Mapping[K, V]) -> dict[K, V]:
    """A dict copy of an image's map. An image's maps are dicts behind read-only proxies
    (``read_only``): the proxy's ``copy()`` copies the dict with the hashes it stores, where
    ``dict(proxy)`` would hash every key again (a topic id's ``UUID.__hash__`` is Python code:
    100 times slower for a map of 50,000 topics, copied at every committed batch)."""
    if isinstance(mapping, MappingProxyType):
        copied: dict[K, V] = mapping.copy()
        return copied
    return dict(mapping)


def _changed(base: Mapping[K, V], changes: Mapping[K, V | None]) -> Mapping[K, V]:
    """``base`` with ``changes`` made: a key set to ``None`` goes, any other is set. ``base``
    itself when there is no change (the next image shares it)."""
    if not changes:
        return base
    merged = _copy(base)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return read_only(merged)
