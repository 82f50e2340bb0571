"""Metadata records to bytes and back, byte for byte as Kafka writes them.

A metadata record value is Kafka's ``AbstractApiMessageSerde`` framing -- unsigned varint frame
version (always 1; Kafka refuses 0, the 2.8 preview's), unsigned varint api key
(:class:`~kraft.metadata.records.MetadataRecordType`), unsigned varint record version --
followed by the record in Kafka's flexible-version encoding (every metadata schema is
``"flexibleVersions": "0+"``), which ``kraft.metadata.flexible`` implements.

Encoding a record at a version without one of its fields requires that field to be at its
default, as Kafka's generated code requires ("Attempted to write a non-default ... at version"):
anything else raises ``ValueError``. Decoding bytes that are not such a record raises
:class:`~kraft.errors.MetadataRecordError` naming the record, the field and the byte position.

The schemas below are Kafka's ``metadata/src/main/resources/common/metadata/*.json``, written as
tables; tests/metadata/schema_decoder.py decodes this module's output from the JSON files
themselves, so that a table that drifts from Kafka's schema fails a test.
"""

from __future__ import annotations

from typing import Final

from kraft.errors import CorruptRecordError, MetadataRecordError
from kraft.metadata import records as r
from kraft.metadata.flexible import (
    BOOL,
    BYTES,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    UINT16,
    UUID,
    DecodeError,
    Field,
    Plan,
    array,
    nested,
)
from kraft.metadata.records import ApiMessageAndVersion, MetadataRecord, MetadataRecordType
from kraft.record.varint import read_uvarint, uvarint_bytes

__all__ = ["FRAME_VERSION", "decode_record", "encode_record", "valid_versions"]

#: Kafka's ``AbstractApiMessageSerde.DEFAULT_FRAME_VERSION``.
FRAME_VERSION: Final = 1

_F = Field

# -- the schemas (Kafka's metadata/src/main/resources/common/metadata/*.json) -----------------

_ENDPOINT: Final = (
    _F("name", STRING),
    _F("host", STRING),
    _F("port", UINT16),
    _F("security_protocol", INT16),
)
_FEATURE: Final = (
    _F("name", STRING),
    _F("min_supported_version", INT16),
    _F("max_supported_version", INT16),
)
_INT32S: Final = array(INT32)
_UUIDS: Final = array(UUID)

_SCHEMAS: Final[dict[type[MetadataRecord], tuple[range, tuple[Field, ...]]]] = {
    r.RegisterBrokerRecord: (
        range(4),
        (
            _F("broker_id", INT32),
            _F("is_migrating_zk_broker", BOOL, since=2),
            _F("incarnation_id", UUID),
            _F("broker_epoch", INT64),
            _F("end_points", array(nested(r.BrokerEndpoint, _ENDPOINT))),
            _F("features", array(nested(r.BrokerFeature, _FEATURE))),
            _F("rack", STRING, nullable=0),
            _F("fenced", BOOL),
            _F("in_controlled_shutdown", BOOL, since=1),
            _F("log_dirs", _UUIDS, since=3, tag=0),
        ),
    ),
    r.UnregisterBrokerRecord: (range(1), (_F("broker_id", INT32), _F("broker_epoch", INT64))),
    r.TopicRecord: (range(1), (_F("name", STRING), _F("topic_id", UUID))),
    r.PartitionRecord: (
        range(3),
        (
            _F("partition_id", INT32),
            _F("topic_id", UUID),
            _F("replicas", _INT32S),
            _F("isr", _INT32S),
            _F("removing_replicas", _INT32S),
            _F("adding_replicas", _INT32S),
            _F("leader", INT32),
            _F("leader_recovery_state", INT8, tag=0),
            _F("leader_epoch", INT32),
            _F("partition_epoch", INT32),
            _F("directories", _UUIDS, since=1),
            _F("eligible_leader_replicas", _INT32S, since=2, nullable=2, tag=1),
            _F("last_known_elr", _INT32S, since=2, nullable=2, tag=2),
        ),
    ),
    r.ConfigRecord: (
        range(1),
        (
            _F("resource_type", INT8),
            _F("resource_name", STRING),
            _F("name", STRING),
            _F("value", STRING, nullable=0),
        ),
    ),
    r.PartitionChangeRecord: (
        range(3),
        (
            _F("partition_id", INT32),
            _F("topic_id", UUID),
            _F("isr", _INT32S, nullable=0, tag=0),
            _F("leader", INT32, tag=1),
            _F("replicas", _INT32S, nullable=0, tag=2),
            _F("removing_replicas", _INT32S, nullable=0, tag=3),
            _F("adding_replicas", _INT32S, nullable=0, tag=4),
            _F("leader_recovery_state", INT8, tag=5),
            _F("directories", _UUIDS, since=1, nullable=1, tag=8),
            _F("eligible_leader_replicas", _INT32S, since=2, nullable=2, tag=6),
            _F("last_known_elr", _INT32S, since=2, nullable=2, tag=7),
        ),
    ),
    r.AccessControlEntryRecord: (
        range(1),
        (
            _F("id", UUID),
            _F("resource_type", INT8),
            _F("resource_name", STRING),
            _F("pattern_type", INT8),
            _F("principal", STRING),
            _F("host", STRING),
            _F("operation", INT8),
            _F("permission_type", INT8),
        ),
    ),
    r.FenceBrokerRecord: (range(1), (_F("id", INT32), _F("epoch", INT64))),
    r.UnfenceBrokerRecord: (range(1), (_F("id", INT32), _F("epoch", INT64))),
    r.RemoveTopicRecord: (range(1), (_F("topic_id", UUID),)),
    r.DelegationTokenRecord: (
        range(1),
        (
            _F("owner", STRING),
            _F("requester", STRING),
            _F("renewers", array(STRING)),
            _F("issue_timestamp", INT64),
            _F("max_timestamp", INT64),
            _F("expiration_timestamp", INT64),
            _F("token_id", STRING),
        ),
    ),
    r.UserScramCredentialRecord: (
        range(1),
        (
            _F("name", STRING),
            _F("mechanism", INT8),
            _F("salt", BYTES),
            _F("stored_key", BYTES),
            _F("server_key", BYTES),
            _F("iterations", INT32),
        ),
    ),
    r.FeatureLevelRecord: (range(1), (_F("name", STRING), _F("feature_level", INT16))),
    r.ClientQuotaRecord: (
        range(1),
        (
            _F(
                "entity",
                array(
                    nested(
                        r.EntityData,
                        (_F("entity_type", STRING), _F("entity_name", STRING, nullable=0)),
                    )
                ),
            ),
            _F("key", STRING),
            _F("value", FLOAT64),
            _F("remove", BOOL),
        ),
    ),
    r.ProducerIdsRecord: (
        range(1),
        (_F("broker_id", INT32), _F("broker_epoch", INT64), _F("next_producer_id", INT64)),
    ),
    r.RemoveAccessControlEntryRecord: (range(1), (_F("id", UUID),)),
    r.BrokerRegistrationChangeRecord: (
        range(3),
        (
            _F("broker_id", INT32),
            _F("broker_epoch", INT64),
            _F("fenced", INT8, tag=0),
            _F("in_controlled_shutdown", INT8, since=1, tag=1),
            _F("log_dirs", _UUIDS, since=2, tag=2),
        ),
    ),
    r.RemoveUserScramCredentialRecord: (
        range(1),
        (_F("name", STRING), _F("mechanism", INT8)),
    ),
    r.RemoveDelegationTokenRecord: (range(1), (_F("token_id", STRING),)),
    r.NoOpRecord: (range(1), ()),
    r.ZkMigrationStateRecord: (range(1), (_F("zk_migration_state", INT8),)),
    r.BeginTransactionRecord: (range(1), (_F("name", STRING, nullable=0, tag=0),)),
    r.EndTransactionRecord: (range(1), ()),
    r.AbortTransactionRecord: (range(1), (_F("reason", STRING, nullable=0, tag=0),)),
    r.RegisterControllerRecord: (
        range(1),
        (
            _F("controller_id", INT32),
            _F("incarnation_id", UUID),
            _F("zk_migration_ready", BOOL),
            _F("end_points", array(nested(r.ControllerEndpoint, _ENDPOINT))),
            _F("features", array(nested(r.ControllerFeature, _FEATURE))),
        ),
    ),
}

# (api key, version) -> the plan of that record at that version, and its framing bytes.
_PLANS: Final[dict[tuple[int, int], tuple[Plan, bytes]]] = {
    (cls.api_key, version): (
        Plan(cls, fields, version),
        uvarint_bytes(FRAME_VERSION) + uvarint_bytes(cls.api_key) + uvarint_bytes(version),
    )
    for cls, (versions, fields) in _SCHEMAS.items()
    for version in versions
}
_CLASSES: Final[dict[int, type[MetadataRecord]]] = {cls.api_key: cls for cls in _SCHEMAS}
assert set(_CLASSES) == set(MetadataRecordType)


def valid_versions(record_type: MetadataRecordType) -> range:
    """The versions of ``record_type`` in Kafka's schema (its ``validVersions``)."""
    return _SCHEMAS[_CLASSES[record_type]][0]


def encode_record(record: ApiMessageAndVersion) -> bytes:
    """The record value of ``record``: framing, then the message at ``record.version``.

    ``ValueError`` for a version outside the schema's, a field absent in that version that is
    not at its default, a null in a non-nullable field or a number out of its type's range;
    ``TypeError`` for a value of the wrong type.
    """
    message, version = record.message, record.version
    entry = _PLANS.get((getattr(message, "api_key", -1), version))
    if entry is None:
        if type(message) not in _SCHEMAS:
            raise TypeError(f"{message!r} is not a metadata record")
        raise ValueError(f"{type(message).__name__} has no version {version}")
    plan, header = entry
    if type(message) is not plan.cls:
        raise TypeError(f"{message!r} is not a metadata record")
    out = bytearray(header)
    plan.write(out, message)
    return bytes(out)


def decode_record(data: bytes | memoryview) -> ApiMessageAndVersion:
    """The record held in the record value ``data``; :class:`MetadataRecordError` if ``data``
    is not a metadata record kraft can read (the message names the record and the field)."""
    buf = data
    try:
        frame, pos = read_uvarint(buf, 0)
        key, pos = read_uvarint(buf, pos)
        version, pos = read_uvarint(buf, pos)
    except CorruptRecordError:
        raise MetadataRecordError("metadata record framing is truncated", position=0) from None
    if frame != FRAME_VERSION:
        raise MetadataRecordError(
            f"unknown metadata record frame version {frame} (only {FRAME_VERSION} is supported)",
            position=0,
        )
    entry = _PLANS.get((key, version))
    if entry is None:
        cls = _CLASSES.get(key)
        if cls is None:
            raise MetadataRecordError(f"unknown metadata record type {key}", position=0)
        raise MetadataRecordError(f"unknown {cls.__name__} version {version}", position=0)
    plan = entry[0]
    try:
        message, pos = plan.read(buf, pos)
    except DecodeError as exc:
        raise MetadataRecordError(
            f"bad {plan.name}: {'.'.join(exc.path).replace('.[', '[')}: {exc.reason}",
            position=exc.position,
        ) from exc
    if pos != len(buf):
        raise MetadataRecordError(
            f"{len(buf) - pos} bytes of garbage after {plan.name}", position=pos
        )
    message_record: MetadataRecord = message
    return ApiMessageAndVersion(message_record, version)
