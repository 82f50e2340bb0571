"""Kafka's metadata records: the values of ``__cluster_metadata`` (Kafka's
``metadata/src/main/resources/common/metadata/*.json``).

One frozen struct per record, named as Kafka's schema, with the schema's fields in schema order
under Kafka's names in snake_case. Each field has the default of Kafka's generated no-argument
constructor (``int`` 0, ``string`` "", ``uuid`` ``ZERO_UUID``, arrays empty, or the schema's
``default``), except nullable strings, which default to ``None`` here (Kafka's generated
constructors use ""); defaults never reach the wire, so this changes no bytes. Lists are
tuples, uuids :class:`uuid.UUID`, nullable fields ``X | None``.

A record travels with the version it is (or is to be) written at, as
:class:`ApiMessageAndVersion` (Kafka's class of the same name); ``kraft.metadata.codec`` turns
it into the bytes of a record value and back. :func:`record_version` gives the version kraft
writes for each record: the versions Kafka 3.9 writes at ``metadata.version`` 3.9-IV0.
"""

from __future__ import annotations

import enum
import uuid
from typing import ClassVar, Final, TypeAlias

import msgspec

from kraft.common.uuids import ZERO_UUID

__all__ = [
    "METADATA_VERSION",
    "METADATA_VERSION_NAME",
    "AbortTransactionRecord",
    "AccessControlEntryRecord",
    "ApiMessageAndVersion",
    "BeginTransactionRecord",
    "BrokerEndpoint",
    "BrokerFeature",
    "BrokerRegistrationChangeRecord",
    "ClientQuotaRecord",
    "ConfigRecord",
    "ControllerEndpoint",
    "ControllerFeature",
    "DelegationTokenRecord",
    "EndTransactionRecord",
    "EntityData",
    "FeatureLevelRecord",
    "FenceBrokerRecord",
    "MetadataRecord",
    "MetadataRecordType",
    "NoOpRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "ProducerIdsRecord",
    "RegisterBrokerRecord",
    "RegisterControllerRecord",
    "RemoveAccessControlEntryRecord",
    "RemoveDelegationTokenRecord",
    "RemoveTopicRecord",
    "RemoveUserScramCredentialRecord",
    "TopicRecord",
    "UnfenceBrokerRecord",
    "UnregisterBrokerRecord",
    "UserScramCredentialRecord",
    "ZkMigrationStateRecord",
    "at_latest_version",
    "record_version",
]

#: The ``metadata.version`` feature level kraft's controller writes (Kafka's
#: ``MetadataVersion.IBP_3_9_IV0.featureLevel()``).
METADATA_VERSION: Final = 21
#: The release name of :data:`METADATA_VERSION`.
METADATA_VERSION_NAME: Final = "3.9-IV0"


class MetadataRecordType(enum.IntEnum):
    """The api key of each metadata record (Kafka's generated ``MetadataRecordType``)."""

    REGISTER_BROKER = 0
    UNREGISTER_BROKER = 1
    TOPIC = 2
    PARTITION = 3
    CONFIG = 4
    PARTITION_CHANGE = 5
    FENCE_BROKER = 7
    UNFENCE_BROKER = 8
    REMOVE_TOPIC = 9
    DELEGATION_TOKEN = 10
    USER_SCRAM_CREDENTIAL = 11
    FEATURE_LEVEL = 12
    CLIENT_QUOTA = 14
    PRODUCER_IDS = 15
    BROKER_REGISTRATION_CHANGE = 17
    ACCESS_CONTROL_ENTRY = 18
    REMOVE_ACCESS_CONTROL_ENTRY = 19
    NO_OP = 20
    ZK_MIGRATION_STATE = 21
    REMOVE_USER_SCRAM_CREDENTIAL = 22
    BEGIN_TRANSACTION = 23
    END_TRANSACTION = 24
    ABORT_TRANSACTION = 25
    REMOVE_DELEGATION_TOKEN = 26
    REGISTER_CONTROLLER = 27


# -- brokers and controllers ------------------------------------------------------------------


class BrokerEndpoint(msgspec.Struct, frozen=True, kw_only=True):
    """``RegisterBrokerRecord.BrokerEndpoint``: a listener of a broker."""

    name: str = ""
    host: str = ""
    port: int = 0  # uint16
    security_protocol: int = 0  # int16, Kafka's SecurityProtocol id


class BrokerFeature(msgspec.Struct, frozen=True, kw_only=True):
    """``RegisterBrokerRecord.BrokerFeature``: the feature levels a broker supports."""

    name: str = ""
    min_supported_version: int = 0
    max_supported_version: int = 0


class RegisterBrokerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A broker registered (api key 0, versions 0-3)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.REGISTER_BROKER

    broker_id: int = 0
    is_migrating_zk_broker: bool = False  # v2+
    incarnation_id: uuid.UUID = ZERO_UUID
    broker_epoch: int = 0
    end_points: tuple[BrokerEndpoint, ...] = ()
    features: tuple[BrokerFeature, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False  # v1+
    log_dirs: tuple[uuid.UUID, ...] = ()  # v3+, tag 0


class UnregisterBrokerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A broker unregistered (api key 1)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.UNREGISTER_BROKER

    broker_id: int = 0
    broker_epoch: int = 0


class FenceBrokerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A broker fenced (api key 7; Kafka writes ``BrokerRegistrationChangeRecord`` instead
    since 3.3, and still reads this one)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.FENCE_BROKER

    id: int = 0
    epoch: int = 0


class UnfenceBrokerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A broker unfenced (api key 8; see :class:`FenceBrokerRecord`)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.UNFENCE_BROKER

    id: int = 0
    epoch: int = 0


class BrokerRegistrationChangeRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A change to a broker's registration (api key 17, versions 0-2).

    ``fenced`` is Kafka's ``BrokerRegistrationFencingChange``: -1 unfenced, 0 no change,
    1 fenced. ``in_controlled_shutdown`` is ``BrokerRegistrationInControlledShutdownChange``:
    0 no change, 1 in controlled shutdown. Both are tagged and written only when not 0.
    """

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.BROKER_REGISTRATION_CHANGE

    broker_id: int = 0
    broker_epoch: int = 0
    fenced: int = 0  # int8, tag 0
    in_controlled_shutdown: int = 0  # int8, v1+, tag 1
    log_dirs: tuple[uuid.UUID, ...] = ()  # v2+, tag 2


class ControllerEndpoint(msgspec.Struct, frozen=True, kw_only=True):
    """``RegisterControllerRecord.ControllerEndpoint``: a listener of a controller."""

    name: str = ""
    host: str = ""
    port: int = 0  # uint16
    security_protocol: int = 0


class ControllerFeature(msgspec.Struct, frozen=True, kw_only=True):
    """``RegisterControllerRecord.ControllerFeature``: the feature levels a controller supports."""

    name: str = ""
    min_supported_version: int = 0
    max_supported_version: int = 0


class RegisterControllerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A controller registered (api key 27)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.REGISTER_CONTROLLER

    controller_id: int = 0
    incarnation_id: uuid.UUID = ZERO_UUID
    zk_migration_ready: bool = False
    end_points: tuple[ControllerEndpoint, ...] = ()
    features: tuple[ControllerFeature, ...] = ()


# -- topics and partitions --------------------------------------------------------------------


class TopicRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A topic created (api key 2)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.TOPIC

    name: str = ""
    topic_id: uuid.UUID = ZERO_UUID


class PartitionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A partition created, or its whole state in a snapshot (api key 3, versions 0-2)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.PARTITION

    partition_id: int = -1
    topic_id: uuid.UUID = ZERO_UUID
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = -1
    leader_recovery_state: int = 0  # int8, tag 0
    leader_epoch: int = -1
    partition_epoch: int = -1
    directories: tuple[uuid.UUID, ...] = ()  # v1+
    eligible_leader_replicas: tuple[int, ...] | None = None  # v2+, tag 1
    last_known_elr: tuple[int, ...] | None = None  # v2+, tag 2


class PartitionChangeRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A change to a partition (api key 5, versions 0-2): every field but the ids is tagged and
    its default means "no change" (``leader`` -2 is Kafka's ``NO_LEADER_CHANGE``)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.PARTITION_CHANGE

    partition_id: int = -1
    topic_id: uuid.UUID = ZERO_UUID
    isr: tuple[int, ...] | None = None  # tag 0
    leader: int = -2  # tag 1
    replicas: tuple[int, ...] | None = None  # tag 2
    removing_replicas: tuple[int, ...] | None = None  # tag 3
    adding_replicas: tuple[int, ...] | None = None  # tag 4
    leader_recovery_state: int = -1  # int8, tag 5
    directories: tuple[uuid.UUID, ...] | None = None  # v1+, tag 8
    eligible_leader_replicas: tuple[int, ...] | None = None  # v2+, tag 6
    last_known_elr: tuple[int, ...] | None = None  # v2+, tag 7


class RemoveTopicRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A topic deleted, with all its partitions (api key 9)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.REMOVE_TOPIC

    topic_id: uuid.UUID = ZERO_UUID


# -- configs, features, producer ids, no-op ---------------------------------------------------


class ConfigRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A config set, or deleted when ``value`` is ``None`` (api key 4). ``resource_type`` is
    Kafka's ``ConfigResource.Type`` id (TOPIC 2, BROKER 4, ...)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.CONFIG

    resource_type: int = 0  # int8
    resource_name: str = ""
    name: str = ""
    value: str | None = None


class FeatureLevelRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A feature's finalized level (api key 12); level 0 removes the feature."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.FEATURE_LEVEL

    name: str = ""
    feature_level: int = 0  # int16


class ProducerIdsRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A block of producer ids handed to a broker (api key 15)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.PRODUCER_IDS

    broker_id: int = 0
    broker_epoch: int = -1
    next_producer_id: int = 0


class NoOpRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Written by the active controller when idle, to advance the committed offset (api key 20)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.NO_OP


# -- records kraft reads but whose operations it does not implement ---------------------------


class AccessControlEntryRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An ACL created (api key 18)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.ACCESS_CONTROL_ENTRY

    id: uuid.UUID = ZERO_UUID
    resource_type: int = 0  # int8
    resource_name: str = ""
    pattern_type: int = 0  # int8
    principal: str = ""
    host: str = ""
    operation: int = 0  # int8
    permission_type: int = 0  # int8


class RemoveAccessControlEntryRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An ACL deleted (api key 19)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.REMOVE_ACCESS_CONTROL_ENTRY

    id: uuid.UUID = ZERO_UUID


class EntityData(msgspec.Struct, frozen=True, kw_only=True):
    """``ClientQuotaRecord.EntityData``: one part of a quota's entity."""

    entity_type: str = ""
    entity_name: str | None = None


class ClientQuotaRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A client quota set or removed (api key 14)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.CLIENT_QUOTA

    entity: tuple[EntityData, ...] = ()
    key: str = ""
    value: float = 0.0
    remove: bool = False


class UserScramCredentialRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A SCRAM credential set (api key 11)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.USER_SCRAM_CREDENTIAL

    name: str = ""
    mechanism: int = 0  # int8
    salt: bytes = b""
    stored_key: bytes = b""
    server_key: bytes = b""
    iterations: int = 0


class RemoveUserScramCredentialRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A SCRAM credential deleted (api key 22)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.REMOVE_USER_SCRAM_CREDENTIAL

    name: str = ""
    mechanism: int = 0  # int8


class DelegationTokenRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A delegation token created or renewed (api key 10)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.DELEGATION_TOKEN

    owner: str = ""
    requester: str = ""
    renewers: tuple[str, ...] = ()
    issue_timestamp: int = 0
    max_timestamp: int = 0
    expiration_timestamp: int = 0
    token_id: str = ""


class RemoveDelegationTokenRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A delegation token deleted (api key 26)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.REMOVE_DELEGATION_TOKEN

    token_id: str = ""


class ZkMigrationStateRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The ZooKeeper migration state (api key 21)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.ZK_MIGRATION_STATE

    zk_migration_state: int = 0  # int8


class BeginTransactionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The start of a metadata transaction (api key 23, KIP-868)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.BEGIN_TRANSACTION

    name: str | None = None  # tag 0


class EndTransactionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The end of a metadata transaction (api key 24)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.END_TRANSACTION


class AbortTransactionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A metadata transaction aborted (api key 25)."""

    api_key: ClassVar[MetadataRecordType] = MetadataRecordType.ABORT_TRANSACTION

    reason: str | None = None  # tag 0


MetadataRecord: TypeAlias = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | PartitionRecord
    | ConfigRecord
    | PartitionChangeRecord
    | AccessControlEntryRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | RemoveTopicRecord
    | DelegationTokenRecord
    | UserScramCredentialRecord
    | FeatureLevelRecord
    | ClientQuotaRecord
    | ProducerIdsRecord
    | RemoveAccessControlEntryRecord
    | BrokerRegistrationChangeRecord
    | RemoveUserScramCredentialRecord
    | RemoveDelegationTokenRecord
    | NoOpRecord
    | ZkMigrationStateRecord
    | BeginTransactionRecord
    | EndTransactionRecord
    | AbortTransactionRecord
    | RegisterControllerRecord
)


class ApiMessageAndVersion(msgspec.Struct, frozen=True):
    """A metadata record and the version it is written at (Kafka's ``ApiMessageAndVersion``)."""

    message: MetadataRecord
    version: int


# The versions Kafka 3.9 writes at metadata.version 3.9-IV0 (MetadataVersion's
# registerBrokerRecordVersion, partitionRecordVersion, partitionChangeRecordVersion,
# brokerRegistrationChangeRecordVersion): directory assignment (KIP-858) is on, ELR (KIP-966)
# is not. Every other record has only version 0.
_WRITE_VERSIONS: Final = {
    MetadataRecordType.REGISTER_BROKER: 3,
    MetadataRecordType.BROKER_REGISTRATION_CHANGE: 2,
    MetadataRecordType.PARTITION: 1,
    MetadataRecordType.PARTITION_CHANGE: 1,
}


def record_version(type: MetadataRecordType) -> int:
    """The version kraft writes records of ``type`` at (Kafka 3.9 at 3.9-IV0)."""
    return _WRITE_VERSIONS.get(type, 0)


def at_latest_version(message: MetadataRecord) -> ApiMessageAndVersion:
    """``message`` with the version kraft writes it at (:func:`record_version`)."""
    return ApiMessageAndVersion(message, record_version(message.api_key))
