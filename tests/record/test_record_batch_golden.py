"""Golden bytes: a batch written out by hand from the layout in docs/storage.md.

Every expected byte below comes from the spec table (header) and the record grammar
``Length varint, Attributes int8, TimestampDelta varlong, OffsetDelta varint, KeyLen varint,
Key, ValueLen varint, Value, HeadersCount varint, Headers`` with zig-zag varints -- not from
running the encoder. Only the CRC is computed, with crc32c over the documented range
[21, end), and it is pinned as a literal as well.
"""

from __future__ import annotations

import crc32c

from kraft.record import SimpleRecord, encode_batch, iter_batches

TS = 1_700_000_000_000  # 0x0000018bcfe56800

RECORDS_HEX = (
    # record 0: the plain value b"a" at the batch timestamp
    "0e"  # Length varint 7 (zig-zag 14)
    "00"  # Attributes
    "00"  # TimestampDelta varlong 0
    "00"  # OffsetDelta varint 0
    "01"  # KeyLen varint -1: null key
    "02"  # ValueLen varint 1
    "61"  # Value "a"
    "00"  # HeadersCount varint 0
    # record 1: key b"k", value b"bc", one header ("h", b"v"), at TS + 5
    "1a"  # Length varint 13
    "00"  # Attributes
    "0a"  # TimestampDelta varlong 5
    "02"  # OffsetDelta varint 1
    "02"  # KeyLen varint 1
    "6b"  # Key "k"
    "04"  # ValueLen varint 2
    "6263"  # Value "bc"
    "02"  # HeadersCount varint 1
    "02"  # header KeyLen varint 1
    "68"  # header Key "h"
    "02"  # header ValueLen varint 1
    "76"  # header Value "v"
    # record 2: null value at TS + 200 (a two-byte varint)
    "0e"  # Length varint 7
    "00"  # Attributes
    "9003"  # TimestampDelta varlong 200: zig-zag 400 = 0b11_0010000 -> 0x90 0x03
    "04"  # OffsetDelta varint 2
    "01"  # KeyLen varint -1: null key
    "01"  # ValueLen varint -1: null value
    "00"  # HeadersCount varint 0
)

# Bytes 21..61 of the header: the first CRC-covered bytes.
AFTER_CRC_HEX = (
    "0000"  # 21 Attributes: no codec, create time, not transactional, not control
    "00000002"  # 23 LastOffsetDelta = n - 1
    "0000018bcfe56800"  # 27 BaseTimestamp = TS
    "0000018bcfe568c8"  # 35 MaxTimestamp = TS + 200
    "ffffffffffffffff"  # 43 ProducerId -1
    "ffff"  # 51 ProducerEpoch -1
    "ffffffff"  # 53 BaseSequence -1
    "00000003"  # 57 RecordsCount = n
)

EXPECTED_CRC = 0x3D892647


def bitwise_crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), one bit at a time."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_bitwise_crc32c_matches_the_published_check_value() -> None:
    assert bitwise_crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def expected_batch() -> bytes:
    covered = bytes.fromhex(AFTER_CRC_HEX + RECORDS_HEX)
    crc = crc32c.crc32c(covered)
    assert crc == bitwise_crc32c(covered) == EXPECTED_CRC
    head = bytes.fromhex(
        "0000000000000010"  # 0 BaseOffset 16
        "0000004f"  # 8 Length: 91 bytes in all - 12 = 79
        "00000003"  # 12 PartitionLeaderEpoch 3 (outside the CRC)
        "02"  # 16 Magic 2
    )
    return head + crc.to_bytes(4, "big") + covered  # 17 CRC (uint32)


def test_encode_batch_writes_the_spec_bytes() -> None:
    expected = expected_batch()
    assert len(expected) == 91
    got = encode_batch(
        16,
        3,
        [
            b"a",
            SimpleRecord(value=b"bc", key=b"k", headers=(("h", b"v"),), timestamp_ms=TS + 5),
            SimpleRecord(value=None, timestamp_ms=TS + 200),
        ],
        timestamp_ms=TS,
    )
    assert got.hex() == expected.hex()


def test_reader_parses_the_spec_bytes() -> None:
    (batch,) = iter_batches(expected_batch())
    assert (batch.base_offset, batch.last_offset, batch.epoch) == (16, 18, 3)
    assert batch.crc == EXPECTED_CRC
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in batch.records()] == [
        (16, TS, None, b"a", ()),
        (17, TS + 5, b"k", b"bc", (("h", b"v"),)),
        (18, TS + 200, None, None, ()),
    ]
