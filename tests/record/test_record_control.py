"""Control records (kraft.record.control): keys, values, batches.

Values are checked three ways: golden bytes derived by hand from Kafka's message schemas,
round trips, and kafka-python's schema-driven codec (an independent implementation of Kafka's
flexible-version serialization) decoding our bytes and encoding the same bytes from the
schemas below. The schemas restate Kafka's
``clients/src/main/resources/common/message/{LeaderChangeMessage,SnapshotHeaderRecord,
SnapshotFooterRecord,KRaftVersionRecord,VotersRecord}.json`` (all ``flexibleVersions: 0+``).
"""

from __future__ import annotations

import io
import uuid
import warnings
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.common.limits import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from kraft.common.uuids import ZERO_UUID
from kraft.errors import CorruptRecordError
from kraft.record import (
    ControlMessage,
    ControlRecordType,
    KRaftVersionFeature,
    KRaftVersionRecord,
    LeaderChangeMessage,
    LeaderChangeVoter,
    SimpleRecord,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    VotersRecord,
    VotersRecordEndpoint,
    VotersRecordVoter,
    control_batch,
    control_record_type,
    control_records,
    decode_control_key,
    decode_control_value,
    encode_batch,
    encode_control_key,
    encode_control_value,
    iter_batches,
    read_batch,
)

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated importlib calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.schemas import StructField

DIR_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")

# -- key ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(ControlRecordType))
def test_key_is_version_0_then_type(kind: ControlRecordType) -> None:
    key = encode_control_key(kind)
    assert key == bytes([0, 0, 0, int(kind)])
    assert decode_control_key(key) is kind
    assert decode_control_key(memoryview(key)) is kind


def test_type_numbers_are_kafkas() -> None:
    assert [(t.name, t.value) for t in ControlRecordType] == [
        ("ABORT", 0),
        ("COMMIT", 1),
        ("LEADER_CHANGE", 2),
        ("SNAPSHOT_HEADER", 3),
        ("SNAPSHOT_FOOTER", 4),
        ("KRAFT_VERSION", 5),
        ("KRAFT_VOTERS", 6),
    ]


@pytest.mark.parametrize(
    "key",
    [
        "",
        "0000",
        "000002",
        "0000000200",  # lengths other than 4
        "00010002",
        "ffff0002",  # key versions other than 0
        "00000007",
        "0000ffff",
        "00007fff",  # unknown types
    ],
)
def test_bad_keys_are_corrupt(key: str) -> None:
    with pytest.raises(CorruptRecordError):
        decode_control_key(bytes.fromhex(key))


# -- values: golden bytes, derived by hand from the schemas ----------------------------------


GOLDEN = [
    (
        LeaderChangeMessage(
            version=0,
            leader_id=1,
            voters=(LeaderChangeVoter(1), LeaderChangeVoter(2), LeaderChangeVoter(3)),
            granting_voters=(LeaderChangeVoter(1), LeaderChangeVoter(3)),
        ),
        "0000"  # Version int16 0
        "00000001"  # LeaderId int32 1
        "04"  # Voters: compact array, uvarint 3 + 1
        "00000001"
        "00"  # Voter{VoterId 1}, empty tagged fields
        "00000002"
        "00"  # Voter{VoterId 2}
        "00000003"
        "00"  # Voter{VoterId 3}
        "03"  # GrantingVoters: uvarint 2 + 1
        "00000001"
        "00"
        "00000003"
        "00"
        "00",  # the message's empty tagged fields
    ),
    (
        LeaderChangeMessage(1, 2, (LeaderChangeVoter(2, DIR_ID),), ()),
        "0001"  # Version 1: voters carry a directory id
        "00000002"  # LeaderId 2
        "02"  # Voters: 1 + 1
        "00000002"  # VoterId 2
        "00112233445566778899aabbccddeeff"  # VoterDirectoryId uuid, 16 bytes
        "00"  # voter tagged fields
        "01"  # GrantingVoters: 0 + 1 (empty, not null)
        "00",
    ),
    (
        SnapshotHeaderRecord(0, 1_700_000_000_000),
        "0000"  # Version
        "0000018bcfe56800"  # LastContainedLogTimestamp int64
        "00",
    ),
    (SnapshotFooterRecord(0), "000000"),
    (KRaftVersionRecord(0, 1), "0000000100"),  # Version, KRaftVersion int16
    (
        VotersRecord(
            0,
            (
                VotersRecordVoter(
                    1,
                    DIR_ID,
                    (VotersRecordEndpoint("CONTROLLER", "localhost", 9093),),
                    KRaftVersionFeature(0, 1),
                ),
            ),
        ),
        "0000"  # Version
        "02"  # Voters: 1 + 1
        "00000001"  # VoterId 1
        "00112233445566778899aabbccddeeff"  # VoterDirectoryId
        "02"  # Endpoints: 1 + 1
        "0b"
        "434f4e54524f4c4c4552"  # Name: compact string, uvarint 10 + 1, "CONTROLLER"
        "0a"
        "6c6f63616c686f7374"  # Host: uvarint 9 + 1, "localhost"
        "2385"  # Port uint16 9093
        "00"  # endpoint tagged fields
        "0000"
        "0001"  # KRaftVersionFeature{MinSupportedVersion 0, MaxSupportedVersion 1}
        "00"  # KRaftVersionFeature's tagged fields
        "00"  # voter tagged fields
        "00",  # message tagged fields
    ),
]


@pytest.mark.parametrize(("message", "expected"), GOLDEN)
def test_values_match_hand_derived_bytes(message: ControlMessage, expected: str) -> None:
    assert encode_control_value(message).hex() == expected
    assert decode_control_value(control_record_type(message), bytes.fromhex(expected)) == message


# -- values: round trips ----------------------------------------------------------------------

int16s = st.integers(-(2**15), 2**15 - 1)
int32s = st.integers(INT32_MIN, INT32_MAX)
int64s = st.integers(INT64_MIN, INT64_MAX)
uuids = st.just(ZERO_UUID) | st.uuids()
names = st.text(max_size=12)


@st.composite
def leader_changes(draw: st.DrawFn) -> LeaderChangeMessage:
    version = draw(st.sampled_from([0, 1]))
    dir_ids = uuids if version == 1 else st.just(ZERO_UUID)
    voters = st.lists(st.builds(LeaderChangeVoter, int32s, dir_ids), max_size=5).map(tuple)
    return LeaderChangeMessage(version, draw(int32s), draw(voters), draw(voters))


voters_records = st.builds(
    VotersRecord,
    st.just(0),
    st.lists(
        st.builds(
            VotersRecordVoter,
            int32s,
            uuids,
            st.lists(
                st.builds(VotersRecordEndpoint, names, names, st.integers(0, 65535)), max_size=3
            ).map(tuple),
            st.builds(KRaftVersionFeature, int16s, int16s),
        ),
        max_size=4,
    ).map(tuple),
)

control_messages: st.SearchStrategy[ControlMessage] = st.one_of(
    leader_changes(),
    st.builds(SnapshotHeaderRecord, st.just(0), int64s),
    st.just(SnapshotFooterRecord(0)),
    st.builds(KRaftVersionRecord, st.just(0), int16s),
    voters_records,
)


@given(control_messages)
def test_value_round_trip(message: ControlMessage) -> None:
    raw = encode_control_value(message)
    assert decode_control_value(control_record_type(message), raw) == message
    assert decode_control_value(int(control_record_type(message)), memoryview(raw)) == message


# -- values: kafka-python's schema-driven codec reads and writes the same bytes ---------------


def _f(name: str, type_: str, fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    field: dict[str, Any] = {"name": name, "type": type_, "versions": "0+"}
    if fields is not None:
        field["fields"] = fields
    return field


def _schema(name: str, fields: list[dict[str, Any]]) -> StructField:
    return StructField({"name": name, "type": "data", "versions": "0+", "fields": fields})


LEADER_VOTER_V0 = [_f("VoterId", "int32")]
SCHEMAS = {
    (ControlRecordType.LEADER_CHANGE, 0): _schema(
        "LeaderChangeMessage",
        [
            _f("Version", "int16"),
            _f("LeaderId", "int32"),
            _f("Voters", "[]Voter", LEADER_VOTER_V0),
            _f("GrantingVoters", "[]Voter", LEADER_VOTER_V0),
        ],
    ),
    (ControlRecordType.SNAPSHOT_HEADER, 0): _schema(
        "SnapshotHeaderRecord",
        [
            _f("Version", "int16"),
            _f("LastContainedLogTimestamp", "int64"),
        ],
    ),
    (ControlRecordType.SNAPSHOT_FOOTER, 0): _schema(
        "SnapshotFooterRecord",
        [
            _f("Version", "int16"),
        ],
    ),
    (ControlRecordType.KRAFT_VERSION, 0): _schema(
        "KRaftVersionRecord",
        [
            _f("Version", "int16"),
            _f("KRaftVersion", "int16"),
        ],
    ),
    (ControlRecordType.KRAFT_VOTERS, 0): _schema(
        "VotersRecord",
        [
            _f("Version", "int16"),
            _f(
                "Voters",
                "[]Voter",
                [
                    _f("VoterId", "int32"),
                    _f("VoterDirectoryId", "uuid"),
                    _f(
                        "Endpoints",
                        "[]Endpoint",
                        [
                            _f("Name", "string"),
                            _f("Host", "string"),
                            _f("Port", "uint16"),
                        ],
                    ),
                    _f(
                        "KRaftVersionFeature",
                        "KRaftVersionFeature",
                        [
                            _f("MinSupportedVersion", "int16"),
                            _f("MaxSupportedVersion", "int16"),
                        ],
                    ),
                ],
            ),
        ],
    ),
}


def _as_tuples(value: Any) -> Any:
    """Our message as nested tuples in schema field order (kafka-python encodes tuples)."""
    if isinstance(value, msgspec.Struct):
        fields = msgspec.structs.astuple(value)
        if isinstance(value, LeaderChangeVoter):
            fields = fields[:1]  # version 0 has no directory id
        return tuple(_as_tuples(f) for f in fields)
    if isinstance(value, tuple):
        return [_as_tuples(v) for v in value]
    return value


def _from_kafka_python(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(_from_kafka_python(v) for v in value.values())
    if isinstance(value, list):
        return [_from_kafka_python(v) for v in value]
    return ZERO_UUID if value is None else value  # kafka-python reads the zero uuid as None


@given(control_messages.filter(lambda m: m.version == 0))
@settings(max_examples=150, deadline=None)
def test_kafka_python_schema_codec_agrees(message: ControlMessage) -> None:
    schema = SCHEMAS[(control_record_type(message), message.version)]
    ours = encode_control_value(message)
    buf = io.BytesIO(ours)
    theirs = schema.decode(buf, version=0, compact=True, tagged=True)
    assert buf.read() == b""  # they consumed every byte
    assert _from_kafka_python(theirs) == _as_tuples(message)
    assert schema.encode(_as_tuples(message), version=0, compact=True, tagged=True) == ours


# -- values: errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(("message", "expected"), GOLDEN)
def test_truncated_or_padded_values_are_corrupt(message: ControlMessage, expected: str) -> None:
    raw = bytes.fromhex(expected)
    kind = control_record_type(message)
    for cut in range(len(raw)):
        with pytest.raises(CorruptRecordError):
            decode_control_value(kind, raw[:cut])
    with pytest.raises(CorruptRecordError, match="after the control record value") as info:
        decode_control_value(kind, raw + b"\x00")
    assert info.value.position == len(raw)


# A VotersRecord up to its one voter's one endpoint, and what follows that endpoint.
ONE_ENDPOINT = "00000200000001" + "00" * 16 + "02"
VOTER_END = "00000000000000"


@pytest.mark.parametrize(
    ("kind", "value", "match"),
    [
        (ControlRecordType.SNAPSHOT_FOOTER, "000100", "version 1"),
        (ControlRecordType.SNAPSHOT_FOOTER, "ffff00", "version -1"),
        (ControlRecordType.LEADER_CHANGE, "000200000001010100", "version 2"),
        (ControlRecordType.KRAFT_VOTERS, "00010100", "version 1"),
        # a null (uvarint 0) non-nullable array
        (ControlRecordType.LEADER_CHANGE, "000000000001000100", "null"),
        # an array count larger than the bytes left
        (ControlRecordType.KRAFT_VOTERS, "00007f00", "elements"),
        # a null endpoint name
        (ControlRecordType.KRAFT_VOTERS, ONE_ENDPOINT + "0001000000" + VOTER_END, "null"),
        # an endpoint name that is not utf-8
        (ControlRecordType.KRAFT_VOTERS, ONE_ENDPOINT + "02ff01000000" + VOTER_END, "utf-8"),
        # a tagged field whose size runs past the end
        (ControlRecordType.SNAPSHOT_FOOTER, "000001000500", "tagged field"),
        # transaction markers are not KRaft records
        (ControlRecordType.ABORT, "000000000000", "not KRaft"),
        (ControlRecordType.COMMIT, "000000000000", "not KRaft"),
        (7, "000000", "unknown control record type"),
    ],
)
def test_bad_values_are_corrupt(kind: int, value: str, match: str) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        decode_control_value(kind, bytes.fromhex(value))


def test_unknown_tagged_fields_are_skipped() -> None:
    """As Kafka's generated readers do: a newer writer's tagged fields do not break us."""
    value = bytes.fromhex(
        "0000"  # Version
        "00000001"  # LeaderId
        "02"
        "00000001"
        "01"
        "07"
        "02"
        "abcd"  # one voter, with tagged field 7 of 2 bytes
        "01"  # no granting voters
        "02"
        "00"
        "00"
        "03"
        "01"
        "ff"  # two message tagged fields: tag 0 (empty), tag 3 (1 byte)
    )
    assert decode_control_value(ControlRecordType.LEADER_CHANGE, value) == LeaderChangeMessage(
        0, 1, (LeaderChangeVoter(1),), ()
    )


@pytest.mark.parametrize(
    "message",
    [
        SnapshotHeaderRecord(1, 0),  # unsupported version
        LeaderChangeMessage(2, 1),
        LeaderChangeMessage(0, 1, (LeaderChangeVoter(1, DIR_ID),)),  # v0 has no directory ids
        LeaderChangeMessage(0, 2**31),  # int32 overflow
        KRaftVersionRecord(0, 2**15),  # int16 overflow
        SnapshotHeaderRecord(0, 2**63),  # int64 overflow
        # a port outside uint16, a name longer than Kafka's 32767-byte string limit
        VotersRecord(0, (VotersRecordVoter(1, endpoints=(VotersRecordEndpoint(port=65536),)),)),
        VotersRecord(0, (VotersRecordVoter(1, endpoints=(VotersRecordEndpoint(port=-1),)),)),
        VotersRecord(0, (VotersRecordVoter(1, endpoints=(VotersRecordEndpoint("x" * 32768),)),)),
    ],
)
def test_unencodable_values_are_value_errors(message: ControlMessage) -> None:
    with pytest.raises(ValueError):
        encode_control_value(message)


def test_a_non_control_message_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        encode_control_value(LeaderChangeVoter(1))  # type: ignore[arg-type]


# -- batches ----------------------------------------------------------------------------------


@given(
    st.lists(control_messages, min_size=1, max_size=5),
    st.integers(0, 2**40),
    st.integers(0, 2**31 - 1),
)
@settings(max_examples=50, deadline=None)
def test_control_batch_round_trip(
    messages: list[ControlMessage], base_offset: int, epoch: int
) -> None:
    raw = control_batch(base_offset, epoch, messages, timestamp_ms=123)
    (batch,) = iter_batches(raw)
    assert batch.is_control
    assert (batch.base_offset, batch.epoch) == (base_offset, epoch)
    assert batch.last_offset == base_offset + len(messages) - 1
    assert control_records(batch) == [(control_record_type(m), m) for m in messages]
    for record, message in zip(batch.records(), messages, strict=True):
        assert record.key == encode_control_key(control_record_type(message))
        assert record.timestamp_ms == 123


def test_snapshot_header_batch_as_kafka_writes_it() -> None:
    """Kafka's ``RecordsSnapshotWriter``: header, kraft.version and voters in the first batch."""
    messages: list[ControlMessage] = [
        SnapshotHeaderRecord(0, 0),
        KRaftVersionRecord(0, 1),
        VotersRecord(
            0,
            (
                VotersRecordVoter(
                    1, DIR_ID, (VotersRecordEndpoint("C", "h", 1),), KRaftVersionFeature(0, 1)
                ),
            ),
        ),
    ]
    batch = read_batch(control_batch(0, 0, messages, timestamp_ms=0))
    assert [kind for kind, _ in control_records(batch)] == [
        ControlRecordType.SNAPSHOT_HEADER,
        ControlRecordType.KRAFT_VERSION,
        ControlRecordType.KRAFT_VOTERS,
    ]


def test_control_records_of_a_data_batch_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a control batch"):
        control_records(read_batch(encode_batch(0, 0, [b"x"], timestamp_ms=0)))


@pytest.mark.parametrize(
    "record",
    [
        SimpleRecord(key=None, value=b"\x00\x00\x00"),
        SimpleRecord(key=encode_control_key(ControlRecordType.SNAPSHOT_FOOTER), value=None),
        SimpleRecord(key=b"\x00\x01", value=b"\x00\x00\x00"),
        SimpleRecord(key=encode_control_key(ControlRecordType.SNAPSHOT_FOOTER), value=b"\x00"),
    ],
)
def test_bad_control_record_names_its_batch(record: SimpleRecord) -> None:
    good = control_batch(0, 1, [SnapshotFooterRecord()], timestamp_ms=0)
    bad = encode_batch(1, 1, [record], timestamp_ms=0, control=True)
    batches = list(iter_batches(good + bad, base_position=1000))
    with pytest.raises(CorruptRecordError) as info:
        control_records(batches[1])
    assert info.value.offset == 1
    assert info.value.position == 1000 + len(good)
