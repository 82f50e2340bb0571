"""KRaft control records: the typed messages in control batches, encoded as Kafka encodes them.

A control batch (attribute bit 5) holds records whose key names a :class:`ControlRecordType`
and whose value is one control message (Kafka's ``ControlRecordUtils``).

Key
    ``int16 version (0) | int16 type``, big-endian, 4 bytes (Kafka's ``ControlRecordType``).

Value
    The message in Kafka's generated serialization for its *flexible* versions, so that Kafka's
    own ``ControlRecordUtils.deserialize*`` read kraft's records and kraft reads Kafka's:

    - fields in schema order, no framing and no length prefix: the ``Version`` field is the
      message's first field (an ``int16``), not a header;
    - ``int16``/``int32``/``int64``/``uint16``: fixed-width big-endian;
    - ``uuid``: 16 bytes, most significant half first (Python's ``UUID.bytes``);
    - ``string``: *compact* -- unsigned varint ``len + 1``, then UTF-8 (at most 32767 bytes);
    - ``[]T``: *compact array* -- unsigned varint ``count + 1``, then the elements;
      a count of 0 (null) is rejected: every array here is non-nullable;
    - every struct (the message, each array element, each nested struct) ends with a tagged
      field section: unsigned varint count, then ``(uvarint tag, uvarint size, bytes)`` each.
      kraft writes an empty section (one ``0x00`` byte) and skips unknown tags when reading,
      as Kafka's generated readers do.

Schemas, checked against Kafka's ``clients/src/main/resources/common/message/*.json``; every
one is ``"flexibleVersions": "0+"``:

=====================  ========  ===========================================================
message                versions  fields
=====================  ========  ===========================================================
LeaderChangeMessage    0 (1)     Version int16, LeaderId int32, Voters []Voter,
                                 GrantingVoters []Voter; Voter = VoterId int32
                                 (+ VoterDirectoryId uuid in v1)
SnapshotHeaderRecord   0         Version int16, LastContainedLogTimestamp int64
SnapshotFooterRecord   0         Version int16
KRaftVersionRecord     0         Version int16, KRaftVersion int16
VotersRecord           0         Version int16, Voters []{VoterId int32, VoterDirectoryId uuid,
                                 Endpoints []{Name string, Host string, Port uint16},
                                 KRaftVersionFeature {MinSupportedVersion int16,
                                 MaxSupportedVersion int16}}
=====================  ========  ===========================================================

Kafka (``ControlRecordUtils.*_CURRENT_VERSION``) writes version 0 of each. LeaderChangeMessage
version 1, which adds ``VoterDirectoryId`` to each voter, appears in Kafka's generated code of
newer releases; kraft reads it and writes it on request. The ``Version`` field selects the
schema kraft uses to read the rest of the value; a version outside the table is corrupt.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections.abc import Callable, Sequence
from typing import TypeAlias

import msgspec

from kraft.common.uuids import ZERO_UUID
from kraft.errors import CorruptRecordError
from kraft.record.batch import RecordBatch, SimpleRecord, encode_batch
from kraft.record.varint import read_uvarint, uvarint_bytes

__all__ = [
    "ControlMessage",
    "ControlRecordType",
    "KRaftVersionFeature",
    "KRaftVersionRecord",
    "LeaderChangeMessage",
    "LeaderChangeVoter",
    "SnapshotFooterRecord",
    "SnapshotHeaderRecord",
    "VotersRecord",
    "VotersRecordEndpoint",
    "VotersRecordVoter",
    "control_batch",
    "control_record_type",
    "control_records",
    "decode_control_key",
    "decode_control_value",
    "encode_control_key",
    "encode_control_value",
]


class ControlRecordType(enum.IntEnum):
    """The ``type`` in a control record's key (Kafka's ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


# -- messages ---------------------------------------------------------------------------------
# Every field has the default of Kafka's generated no-argument constructor, so a message can be
# built positionally in schema order or by keyword.


class LeaderChangeVoter(msgspec.Struct, frozen=True):
    """``LeaderChangeMessage.Voter``; the directory id is written only in version 1."""

    voter_id: int = 0
    voter_directory_id: uuid.UUID = ZERO_UUID


class LeaderChangeMessage(msgspec.Struct, frozen=True):
    """Written by a new leader as the first batch of its epoch (``LEADER_CHANGE``)."""

    version: int = 0
    leader_id: int = 0
    voters: tuple[LeaderChangeVoter, ...] = ()
    granting_voters: tuple[LeaderChangeVoter, ...] = ()


class SnapshotHeaderRecord(msgspec.Struct, frozen=True):
    """The first record of every snapshot (``SNAPSHOT_HEADER``)."""

    version: int = 0
    last_contained_log_timestamp: int = 0


class SnapshotFooterRecord(msgspec.Struct, frozen=True):
    """The last record of every snapshot (``SNAPSHOT_FOOTER``)."""

    version: int = 0


class KRaftVersionRecord(msgspec.Struct, frozen=True):
    """The finalized ``kraft.version`` feature level (``KRAFT_VERSION``)."""

    version: int = 0
    kraft_version: int = 0


class VotersRecordEndpoint(msgspec.Struct, frozen=True):
    """``VotersRecord.Endpoint``: a named listener of a voter."""

    name: str = ""
    host: str = ""
    port: int = 0


class KRaftVersionFeature(msgspec.Struct, frozen=True):
    """``VotersRecord.KRaftVersionFeature``: the kraft.version range a voter supports."""

    min_supported_version: int = 0
    max_supported_version: int = 0


class VotersRecordVoter(msgspec.Struct, frozen=True):
    """``VotersRecord.Voter``: one voter, its directory id, endpoints and supported versions."""

    voter_id: int = 0
    voter_directory_id: uuid.UUID = ZERO_UUID
    endpoints: tuple[VotersRecordEndpoint, ...] = ()
    kraft_version_feature: KRaftVersionFeature = KRaftVersionFeature()


class VotersRecord(msgspec.Struct, frozen=True):
    """The whole voter set (``KRAFT_VOTERS``), written on every voter change (KIP-853)."""

    version: int = 0
    voters: tuple[VotersRecordVoter, ...] = ()


ControlMessage: TypeAlias = (
    LeaderChangeMessage
    | SnapshotHeaderRecord
    | SnapshotFooterRecord
    | KRaftVersionRecord
    | VotersRecord
)

_TYPE_OF: dict[type[ControlMessage], ControlRecordType] = {
    LeaderChangeMessage: ControlRecordType.LEADER_CHANGE,
    SnapshotHeaderRecord: ControlRecordType.SNAPSHOT_HEADER,
    SnapshotFooterRecord: ControlRecordType.SNAPSHOT_FOOTER,
    KRaftVersionRecord: ControlRecordType.KRAFT_VERSION,
    VotersRecord: ControlRecordType.KRAFT_VOTERS,
}

# The schema versions kraft reads and writes, per type (see the module docstring).
_VERSIONS: dict[ControlRecordType, frozenset[int]] = {
    ControlRecordType.LEADER_CHANGE: frozenset({0, 1}),
    ControlRecordType.SNAPSHOT_HEADER: frozenset({0}),
    ControlRecordType.SNAPSHOT_FOOTER: frozenset({0}),
    ControlRecordType.KRAFT_VERSION: frozenset({0}),
    ControlRecordType.KRAFT_VOTERS: frozenset({0}),
}


def control_record_type(message: ControlMessage) -> ControlRecordType:
    """The control record type that carries ``message``."""
    try:
        return _TYPE_OF[type(message)]
    except KeyError:
        raise TypeError(f"not a control message: {type(message).__name__}") from None


# -- key --------------------------------------------------------------------------------------

_KEY = struct.Struct(">hh")
_KEY_VERSION = 0


def encode_control_key(record_type: ControlRecordType) -> bytes:
    """The 4-byte key of a control record: ``int16 version 0, int16 type``."""
    return _KEY.pack(_KEY_VERSION, ControlRecordType(record_type))


def decode_control_key(key: bytes | memoryview) -> ControlRecordType:
    """The type named by a control record key; a key kraft cannot read is corrupt.

    Stricter than Kafka, which reads a longer key of a higher version as version 0: kraft
    writes and expects exactly version 0, 4 bytes.
    """
    if len(key) != _KEY.size:
        raise CorruptRecordError(f"control record key is {len(key)} bytes, expected {_KEY.size}")
    version, type_id = _KEY.unpack(key)
    if version != _KEY_VERSION:
        raise CorruptRecordError(f"unknown control record key version {version}")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        raise CorruptRecordError(f"unknown control record type {type_id}") from None


# -- value: writing ---------------------------------------------------------------------------

_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MAX_STRING_BYTES = 0x7FFF  # Kafka refuses longer strings ("field is too long")
_NO_TAGGED_FIELDS = b"\x00"


def _put(out: bytearray, fmt: struct.Struct, value: int, field: str) -> None:
    try:
        out += fmt.pack(value)
    except struct.error as exc:
        raise ValueError(f"{field}={value!r} does not fit {fmt.format[1:]!r}") from exc


def _put_string(out: bytearray, value: str, field: str) -> None:
    raw = value.encode("utf-8")
    if len(raw) > _MAX_STRING_BYTES:
        raise ValueError(f"{field} is {len(raw)} bytes, more than {_MAX_STRING_BYTES}")
    out += uvarint_bytes(len(raw) + 1)
    out += raw


def _check_version(record_type: ControlRecordType, version: int) -> None:
    if version not in _VERSIONS[record_type]:
        raise ValueError(f"unsupported {record_type.name} version {version}")


def _write_leader_change(out: bytearray, msg: LeaderChangeMessage) -> None:
    _put(out, _I32, msg.leader_id, "leader_id")
    for voters in (msg.voters, msg.granting_voters):
        out += uvarint_bytes(len(voters) + 1)
        for voter in voters:
            _put(out, _I32, voter.voter_id, "voter_id")
            if msg.version >= 1:
                out += voter.voter_directory_id.bytes
            elif voter.voter_directory_id != ZERO_UUID:
                # Kafka's writer: "Attempted to write a non-default voterDirectoryId at version 0"
                raise ValueError("LeaderChangeMessage version 0 has no voter_directory_id")
            out += _NO_TAGGED_FIELDS


def _write_voters(out: bytearray, msg: VotersRecord) -> None:
    out += uvarint_bytes(len(msg.voters) + 1)
    for voter in msg.voters:
        _put(out, _I32, voter.voter_id, "voter_id")
        out += voter.voter_directory_id.bytes
        out += uvarint_bytes(len(voter.endpoints) + 1)
        for endpoint in voter.endpoints:
            _put_string(out, endpoint.name, "endpoint name")
            _put_string(out, endpoint.host, "endpoint host")
            _put(out, _U16, endpoint.port, "port")
            out += _NO_TAGGED_FIELDS
        feature = voter.kraft_version_feature
        _put(out, _I16, feature.min_supported_version, "min_supported_version")
        _put(out, _I16, feature.max_supported_version, "max_supported_version")
        out += _NO_TAGGED_FIELDS
        out += _NO_TAGGED_FIELDS


def encode_control_value(message: ControlMessage) -> bytes:
    """The value bytes of ``message``, as Kafka's generated ``write`` produces them.

    Raises ``ValueError`` for a field out of its type's range or an unsupported version.
    """
    record_type = control_record_type(message)
    _check_version(record_type, message.version)
    out = bytearray()
    _put(out, _I16, message.version, "version")
    if isinstance(message, LeaderChangeMessage):
        _write_leader_change(out, message)
    elif isinstance(message, SnapshotHeaderRecord):
        _put(out, _I64, message.last_contained_log_timestamp, "last_contained_log_timestamp")
    elif isinstance(message, KRaftVersionRecord):
        _put(out, _I16, message.kraft_version, "kraft_version")
    elif isinstance(message, VotersRecord):
        _write_voters(out, message)
    out += _NO_TAGGED_FIELDS
    return bytes(out)


# -- value: reading ---------------------------------------------------------------------------


class _Reader:
    """A cursor over one control value; every failure is a :class:`CorruptRecordError`."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def _take(self, n: int, what: str) -> memoryview:
        end = self.pos + n
        if end > len(self.buf):
            raise CorruptRecordError(
                f"{what} runs past the end of the control record value", position=self.pos
            )
        view = self.buf[self.pos : end]
        self.pos = end
        return view

    def fixed(self, fmt: struct.Struct, what: str) -> int:
        value: int = fmt.unpack(self._take(fmt.size, what))[0]
        return value

    def uuid(self, what: str) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16, what)))

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.buf, self.pos)
        return value

    def string(self, what: str) -> str:
        start = self.pos
        length = self.uvarint() - 1
        if length < 0:
            raise CorruptRecordError(f"non-nullable {what} is null", position=start)
        if length > _MAX_STRING_BYTES:
            raise CorruptRecordError(f"{what} is {length} bytes long", position=start)
        try:
            return str(self._take(length, what), "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"{what} is not utf-8", position=start) from exc

    def array(self, what: str) -> int:
        """Read a compact array's length; the caller reads that many elements."""
        start = self.pos
        count = self.uvarint() - 1
        if count < 0:
            raise CorruptRecordError(f"non-nullable {what} is null", position=start)
        # As Kafka: every element takes at least one byte, so a longer count is corrupt (and
        # would otherwise make us loop for a long time before failing).
        if count > len(self.buf) - self.pos:
            raise CorruptRecordError(f"{what} has {count} elements", position=start)
        return count

    def tagged_fields(self) -> None:
        """Skip a tagged field section: kraft knows no tagged fields in these messages."""
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint(), "tagged field")

    def finish(self) -> None:
        if self.pos != len(self.buf):
            raise CorruptRecordError(
                f"{len(self.buf) - self.pos} bytes after the control record value",
                position=self.pos,
            )


def _read_leader_change(r: _Reader, version: int) -> LeaderChangeMessage:
    leader_id = r.fixed(_I32, "leader_id")
    lists: list[tuple[LeaderChangeVoter, ...]] = []
    for what in ("voters", "granting_voters"):
        voters = []
        for _ in range(r.array(what)):
            voter_id = r.fixed(_I32, "voter_id")
            directory_id = r.uuid("voter_directory_id") if version >= 1 else ZERO_UUID
            r.tagged_fields()
            voters.append(LeaderChangeVoter(voter_id, directory_id))
        lists.append(tuple(voters))
    return LeaderChangeMessage(version, leader_id, lists[0], lists[1])


def _read_voters(r: _Reader, version: int) -> VotersRecord:
    voters = []
    for _ in range(r.array("voters")):
        voter_id = r.fixed(_I32, "voter_id")
        directory_id = r.uuid("voter_directory_id")
        endpoints = []
        for _e in range(r.array("endpoints")):
            name = r.string("endpoint name")
            host = r.string("endpoint host")
            port = r.fixed(_U16, "port")
            r.tagged_fields()
            endpoints.append(VotersRecordEndpoint(name, host, port))
        feature = KRaftVersionFeature(
            r.fixed(_I16, "min_supported_version"), r.fixed(_I16, "max_supported_version")
        )
        r.tagged_fields()
        r.tagged_fields()
        voters.append(VotersRecordVoter(voter_id, directory_id, tuple(endpoints), feature))
    return VotersRecord(version, tuple(voters))


_READERS: dict[ControlRecordType, Callable[[_Reader, int], ControlMessage]] = {
    ControlRecordType.LEADER_CHANGE: _read_leader_change,
    ControlRecordType.SNAPSHOT_HEADER: lambda r, v: SnapshotHeaderRecord(
        v, r.fixed(_I64, "last_contained_log_timestamp")
    ),
    ControlRecordType.SNAPSHOT_FOOTER: lambda r, v: SnapshotFooterRecord(v),
    ControlRecordType.KRAFT_VERSION: lambda r, v: KRaftVersionRecord(
        v, r.fixed(_I16, "kraft_version")
    ),
    ControlRecordType.KRAFT_VOTERS: _read_voters,
}


def decode_control_value(
    record_type: ControlRecordType | int, value: bytes | memoryview
) -> ControlMessage:
    """Decode the value of a control record of ``record_type``.

    Raises :class:`CorruptRecordError` (``position`` = byte position in ``value``) for a
    truncated value, trailing bytes, a null array or string, an unsupported version, or a type
    KRaft never writes (the transaction markers ABORT and COMMIT).
    """
    try:
        kind = ControlRecordType(record_type)
    except ValueError:
        raise CorruptRecordError(f"unknown control record type {record_type}") from None
    read = _READERS.get(kind)
    if read is None:
        raise CorruptRecordError(f"{kind.name} control records are not KRaft records")
    r = _Reader(value if isinstance(value, memoryview) else memoryview(value))
    version = r.fixed(_I16, "version")
    if version not in _VERSIONS[kind]:
        raise CorruptRecordError(f"unsupported {kind.name} version {version}", position=0)
    message = read(r, version)
    r.tagged_fields()
    r.finish()
    return message


# -- batches ----------------------------------------------------------------------------------


def control_batch(
    base_offset: int,
    epoch: int,
    messages: Sequence[ControlMessage],
    *,
    timestamp_ms: int,
) -> bytes:
    """One control batch at ``base_offset`` holding one control record per message."""
    records = [
        SimpleRecord(key=encode_control_key(control_record_type(m)), value=encode_control_value(m))
        for m in messages
    ]
    return encode_batch(base_offset, epoch, records, timestamp_ms=timestamp_ms, control=True)


def control_records(batch: RecordBatch) -> list[tuple[ControlRecordType, ControlMessage]]:
    """Decode every record of a control batch into ``(type, message)`` pairs.

    ``ValueError`` if ``batch`` is not a control batch; :class:`CorruptRecordError`, naming the
    batch's base offset and byte position, if a record is not a control record kraft can read.
    """
    if not batch.is_control:
        raise ValueError(f"{batch!r} is not a control batch")
    out: list[tuple[ControlRecordType, ControlMessage]] = []
    for record in batch.records():
        try:
            if record.key is None or record.value is None:
                raise CorruptRecordError("control record with a null key or value")
            kind = decode_control_key(record.key)
            out.append((kind, decode_control_value(kind, record.value)))
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"bad control record at offset {record.offset}: {exc.args[0]}",
                offset=batch.base_offset,
                position=batch.position,
            ) from exc
    return out
