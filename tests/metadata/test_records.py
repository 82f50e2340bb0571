"""The metadata record codec: golden bytes computed by hand from Kafka's schemas, Kafka's rules
for fields a version lacks, and typed errors for bad bytes."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.errors import CorruptRecordError, MetadataRecordError
from kraft.metadata import MetadataRecordSerde
from kraft.metadata.codec import decode_record, encode_record
from kraft.metadata.records import (
    ApiMessageAndVersion,
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    at_latest_version,
)
from kraft.record.control import SnapshotHeaderRecord
from kraft.record.serde import RecordSerde

T = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
D = uuid.UUID("ffeeddcc-bbaa-9988-7766-554433221100")


def _hex(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


# Each value: frame version 1, api key, version, then the body (see kraft/metadata/codec.py).
GOLDEN = [
    pytest.param(
        ApiMessageAndVersion(TopicRecord(name="foo", topic_id=T), 0),
        f"01 02 00  04 666f6f  {T.hex}  00",
        id="TopicRecord",
    ),
    pytest.param(
        ApiMessageAndVersion(NoOpRecord(), 0),
        "01 14 00  00",
        id="NoOpRecord",
    ),
    pytest.param(
        ApiMessageAndVersion(ConfigRecord(resource_type=2, resource_name="t", name="x"), 0),
        "01 04 00  02  02 74  02 78  00  00",  # value null: compact length 0
        id="ConfigRecord-null-value",
    ),
    pytest.param(
        ApiMessageAndVersion(
            BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=2, fenced=-1), 2
        ),
        "01 11 02  00000001  0000000000000002  01  00 01 ff",  # tag 0, size 1, int8 -1
        id="BrokerRegistrationChangeRecord-unfenced",
    ),
    pytest.param(
        ApiMessageAndVersion(
            PartitionRecord(
                partition_id=0,
                topic_id=T,
                replicas=(1, 2),
                isr=(1,),
                leader=1,
                leader_epoch=0,
                partition_epoch=0,
                directories=(D, D),
            ),
            1,
        ),
        f"01 03 01  00000000  {T.hex}  03 00000001 00000002  02 00000001  01  01  00000001"
        f"  00000000  00000000  03 {D.hex} {D.hex}  00",  # recovery state 0: tag not written
        id="PartitionRecord-v1",
    ),
    pytest.param(
        ApiMessageAndVersion(
            PartitionChangeRecord(partition_id=3, topic_id=T, isr=(1,), leader=1, directories=(D,)),
            1,
        ),
        # three tags in ascending order: 0 isr (5 bytes), 1 leader (4), 8 directories (17)
        f"01 05 01  00000003  {T.hex}  03  00 05 02 00000001  01 04 00000001  08 11 02 {D.hex}",
        id="PartitionChangeRecord-v1",
    ),
    pytest.param(
        ApiMessageAndVersion(
            RegisterBrokerRecord(
                broker_id=1,
                incarnation_id=T,
                broker_epoch=5,
                end_points=(
                    BrokerEndpoint(
                        name="PLAINTEXT", host="localhost", port=9092, security_protocol=0
                    ),
                ),
                features=(
                    BrokerFeature(
                        name="metadata.version", min_supported_version=1, max_supported_version=21
                    ),
                ),
                log_dirs=(D,),
            ),
            3,
        ),
        f"01 00 03  00000001  00  {T.hex}  0000000000000005"
        "  02  0a 504c41494e54455854  0a 6c6f63616c686f7374  2384  0000  00"
        "  02  11 6d657461646174612e76657273696f6e  0001  0015  00"
        f"  00  01  00  01 00 11 02 {D.hex}",  # rack null, fenced, not in shutdown, tag 0
        id="RegisterBrokerRecord-v3",
    ),
]


@pytest.mark.parametrize(("record", "golden"), GOLDEN)
def test_golden_bytes(record: ApiMessageAndVersion, golden: str) -> None:
    assert encode_record(record).hex() == _hex(golden).hex()
    assert decode_record(_hex(golden)) == record


@pytest.mark.parametrize(("record", "golden"), GOLDEN)
def test_every_truncation_is_a_typed_error_naming_the_record(
    record: ApiMessageAndVersion, golden: str
) -> None:
    data = _hex(golden)
    for end in range(len(data)):
        with pytest.raises(MetadataRecordError) as info:
            decode_record(data[:end])
        if end > 3:  # past the framing, the message names the record
            assert f"{type(record.message).__name__} v{record.version}" in str(info.value)


@pytest.mark.parametrize(
    ("record", "match"),
    [
        (ApiMessageAndVersion(PartitionRecord(directories=(D,)), 0), "v0 has no field directories"),
        (
            ApiMessageAndVersion(PartitionChangeRecord(directories=(D,)), 0),
            "v0 has no field directories",
        ),
        (
            ApiMessageAndVersion(PartitionChangeRecord(eligible_leader_replicas=()), 1),
            "v1 has no field eligible_leader_replicas",
        ),
        (
            ApiMessageAndVersion(RegisterBrokerRecord(in_controlled_shutdown=True), 0),
            "v0 has no field in_controlled_shutdown",
        ),
        (
            ApiMessageAndVersion(RegisterBrokerRecord(log_dirs=[D]), 2),  # type: ignore[arg-type]
            "v2 has no field log_dirs",
        ),
        (
            ApiMessageAndVersion(BrokerRegistrationChangeRecord(in_controlled_shutdown=1), 0),
            "v0 has no field in_controlled_shutdown",
        ),
        (ApiMessageAndVersion(TopicRecord(name=None), 0), "TopicRecord v0 name: null"),  # type: ignore[arg-type]
        (
            ApiMessageAndVersion(FeatureLevelRecord(name="x", feature_level=1 << 15), 0),
            "feature_level: 32768 is not a valid int16",
        ),
        (ApiMessageAndVersion(TopicRecord(name="x" * 0x8000), 0), "name: string of 32768 bytes"),
        (ApiMessageAndVersion(PartitionRecord(), 3), "PartitionRecord has no version 3"),
        (
            ApiMessageAndVersion(RegisterBrokerRecord(end_points=(BrokerEndpoint(port=-1),)), 3),
            "end_points: BrokerEndpoint v0 port: -1 is not a valid uint16",
        ),
    ],
)
def test_what_a_version_cannot_hold_is_a_value_error(
    record: ApiMessageAndVersion, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        encode_record(record)


def test_an_empty_list_is_the_default_of_an_array_a_version_lacks() -> None:
    record = ApiMessageAndVersion(PartitionRecord(directories=[]), 0)  # type: ignore[arg-type]
    assert decode_record(encode_record(record)).message == PartitionRecord()


def test_a_message_that_is_not_a_metadata_record_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not a metadata record"):
        encode_record(ApiMessageAndVersion(SnapshotHeaderRecord(), 0))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"not a uuid\.UUID"):
        encode_record(ApiMessageAndVersion(TopicRecord(topic_id="x"), 0))  # type: ignore[arg-type]


TOPIC = _hex(f"01 02 00  04 666f6f  {T.hex}  00")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (_hex("00 02 00") + TOPIC[3:], "frame version 0"),
        (_hex("02 02 00") + TOPIC[3:], "frame version 2"),
        (_hex("01 0d 00 00"), "unknown metadata record type 13"),
        (_hex("01 ff ff 03 00"), "unknown metadata record type 65535"),
        (_hex("01 02 01") + TOPIC[3:], "unknown TopicRecord version 1"),
        (TOPIC + b"\x00", "1 bytes of garbage after TopicRecord v0"),
        (_hex(f"01 02 00  00  {T.hex}  00"), "TopicRecord v0: name: null in a non-nullable"),
        (_hex(f"01 02 00  03 ff fe  {T.hex}  00"), "TopicRecord v0: name: string is not UTF-8"),
        (_hex("01 03 01 00000000") + T.bytes + _hex("7f"), "replicas: array of 126 elements"),
        (
            _hex(f"01 00 03  00000001  00  {T.hex}  0000000000000005  02  0a 41"),
            r"RegisterBrokerRecord v3: end_points\[0\].name: string of 9 bytes runs past",
        ),
        (
            # a known tag (0: isr) whose size says 6 bytes where the array takes 5
            _hex(f"01 05 00  00000003  {T.hex}  01  00 06 02 00000001 00"),
            "PartitionChangeRecord v0: isr: tagged value of 6 bytes holds 5",
        ),
        (_hex("01 14 00 01 05 7f"), "NoOpRecord v0: tagged fields: tagged field 5 of 127 bytes"),
        (_hex("01 14 00 01 05 ff"), "NoOpRecord v0: tagged fields: bad unsigned varint"),
    ],
)
def test_bad_bytes_are_a_metadata_record_error(data: bytes, match: str) -> None:
    with pytest.raises(MetadataRecordError, match=match):
        decode_record(data)


def test_unknown_tagged_fields_are_skipped_at_every_level() -> None:
    endpoint = "0a 504c41494e54455854  0a 6c6f63616c686f7374  2384  0000"
    data = _hex(
        f"01 00 03  00000001  00  {T.hex}  0000000000000005"
        f"  02 {endpoint} 01 07 02 abcd"  # the endpoint: one unknown tag (7), 2 bytes
        "  01  00  01  00"
        "  02 05 00 09 03 112233"  # the record: tag 5 unknown, then tag 9 unknown
    )
    record = decode_record(data)
    assert record == ApiMessageAndVersion(
        RegisterBrokerRecord(
            broker_id=1,
            incarnation_id=T,
            broker_epoch=5,
            end_points=(
                BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9092, security_protocol=0),
            ),
        ),
        3,
    )


def test_metadata_record_error_is_a_corrupt_record_error_with_a_position() -> None:
    with pytest.raises(CorruptRecordError) as info:
        decode_record(_hex(f"01 02 00  03 ff fe  {T.hex}  00"))
    assert isinstance(info.value, MetadataRecordError)
    assert info.value.position == 4  # the string's first byte


def test_the_serde_is_a_record_serde_of_metadata_records() -> None:
    serde: RecordSerde[ApiMessageAndVersion] = MetadataRecordSerde()
    record = at_latest_version(PartitionChangeRecord(partition_id=1, topic_id=T, leader=-1, isr=()))
    assert serde.decode(memoryview(serde.encode(record))) == record
    assert serde.encode(record) == encode_record(record)
    with pytest.raises(CorruptRecordError, match="frame version 0"):
        serde.decode(b"\x00\x14\x00\x00")


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_damaged_bytes_decode_or_raise_a_metadata_record_error(data: st.DataObject) -> None:
    """Whatever the damage to a valid value (a byte changed, bytes cut or added), decoding
    gives a record or a MetadataRecordError: never another exception."""
    golden = _hex(data.draw(st.sampled_from([str(p.values[1]) for p in GOLDEN])))
    damaged = bytearray(golden)
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(damaged) - 1))
        damaged[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(damaged)))
    damaged = damaged[:cut] + data.draw(st.binary(max_size=4))
    with contextlib.suppress(MetadataRecordError):
        decode_record(bytes(damaged))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_decode_or_raise_a_metadata_record_error(data: bytes) -> None:
    with contextlib.suppress(MetadataRecordError):
        decode_record(b"\x01" + data)
