"""Zig-zag and unsigned varints (kraft.record.varint): round trips, boundaries, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.common.limits import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from kraft.errors import CorruptRecordError
from kraft.record.varint import (
    read_uvarint,
    read_varint,
    read_varlong,
    size_of_uvarint,
    size_of_varint,
    uvarint_bytes,
    varint_bytes,
    varlong_bytes,
    write_uvarint,
    write_varint,
    write_varlong,
)

UINT32_MAX = 2**32 - 1

int32s = st.integers(INT32_MIN, INT32_MAX)
int64s = st.integers(INT64_MIN, INT64_MAX)
uint32s = st.integers(0, UINT32_MAX)


def _zigzag(value: int) -> int:
    return 2 * value if value >= 0 else -2 * value - 1


def _reference_unsigned(value: int) -> bytes:
    """Protobuf base-128 encoding, written independently of the code under test."""
    groups = []
    while True:
        groups.append(value % 128)
        value //= 128
        if value == 0:
            break
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


# -- round trips ------------------------------------------------------------------------------


@given(int32s, st.binary(max_size=3), st.binary(max_size=3))
def test_varint_round_trip(value: int, prefix: bytes, suffix: bytes) -> None:
    raw = varint_bytes(value)
    assert raw == _reference_unsigned(_zigzag(value))
    assert size_of_varint(value) == len(raw)
    buf = prefix + raw + suffix
    assert read_varint(buf, len(prefix)) == (value, len(prefix) + len(raw))
    assert read_varint(memoryview(buf), len(prefix)) == (value, len(prefix) + len(raw))


@given(int64s)
def test_varlong_round_trip(value: int) -> None:
    raw = varlong_bytes(value)
    assert raw == _reference_unsigned(_zigzag(value))
    assert read_varlong(raw + b"\xff", 0) == (value, len(raw))


@given(uint32s)
def test_uvarint_round_trip(value: int) -> None:
    raw = uvarint_bytes(value)
    assert raw == _reference_unsigned(value)
    assert size_of_uvarint(value) == len(raw)
    assert read_uvarint(raw, 0) == (value, len(raw))


@given(st.lists(int32s, max_size=20))
def test_write_functions_append(values: list[int]) -> None:
    out = bytearray()
    for v in values:
        write_varint(out, v)
        write_varlong(out, v)
        write_uvarint(out, v & UINT32_MAX)
    pos = 0
    for v in values:
        got, pos = read_varint(out, pos)
        assert got == v
        got, pos = read_varlong(out, pos)
        assert got == v
        got, pos = read_uvarint(out, pos)
        assert got == v & UINT32_MAX
    assert pos == len(out)


# -- boundaries -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (-64, "7f"),
        (63, "7e"),
        (64, "8001"),
        (-65, "8101"),
        (INT32_MAX, "feffffff0f"),
        (INT32_MIN, "ffffffff0f"),
    ],
)
def test_varint_known_encodings(value: int, expected: str) -> None:
    assert varint_bytes(value).hex() == expected
    assert varlong_bytes(value).hex() == expected
    assert read_varint(bytes.fromhex(expected), 0) == (value, len(expected) // 2)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(INT64_MAX, "feffffffffffffffff01"), (INT64_MIN, "ffffffffffffffffff01")],
)
def test_varlong_extremes(value: int, expected: str) -> None:
    assert varlong_bytes(value).hex() == expected
    assert read_varlong(bytes.fromhex(expected), 0) == (value, 10)


@pytest.mark.parametrize(
    ("value", "expected"), [(0, "00"), (127, "7f"), (128, "8001"), (UINT32_MAX, "ffffffff0f")]
)
def test_uvarint_known_encodings(value: int, expected: str) -> None:
    assert uvarint_bytes(value).hex() == expected


@pytest.mark.parametrize("value", [INT32_MAX + 1, INT32_MIN - 1, 2**40, -(2**40)])
def test_varint_out_of_range_is_value_error(value: int) -> None:
    with pytest.raises(ValueError):
        varint_bytes(value)
    with pytest.raises(ValueError):
        size_of_varint(value)


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1, 2**70])
def test_varlong_out_of_range_is_value_error(value: int) -> None:
    with pytest.raises(ValueError):
        varlong_bytes(value)


@pytest.mark.parametrize("value", [-1, UINT32_MAX + 1])
def test_uvarint_out_of_range_is_value_error(value: int) -> None:
    with pytest.raises(ValueError):
        uvarint_bytes(value)


@given(st.one_of(st.integers(max_value=INT32_MIN - 1), st.integers(min_value=INT32_MAX + 1)))
def test_any_varint_out_of_range_is_value_error(value: int) -> None:
    with pytest.raises(ValueError):
        varint_bytes(value)


# -- bad input --------------------------------------------------------------------------------


@given(int64s)
def test_truncated_varlong_is_corrupt(value: int) -> None:
    raw = varlong_bytes(value)
    for cut in range(len(raw)):
        with pytest.raises(CorruptRecordError):
            read_varlong(raw[:cut], 0)


@given(int32s)
def test_truncated_varint_is_corrupt(value: int) -> None:
    raw = varint_bytes(value)
    for cut in range(len(raw)):
        with pytest.raises(CorruptRecordError):
            read_varint(raw[:cut], 0)
        with pytest.raises(CorruptRecordError):
            read_uvarint(raw[:cut], 0)


def test_varint_too_long_or_too_wide_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        read_varint(b"\x80\x80\x80\x80\x80\x01", 0)  # six bytes
    with pytest.raises(CorruptRecordError):
        read_varint(b"\xff\xff\xff\xff\x1f", 0)  # 35 bits
    with pytest.raises(CorruptRecordError):
        read_uvarint(b"\xff\xff\xff\xff\x1f", 0)
    with pytest.raises(CorruptRecordError):
        read_varlong(b"\x80" * 10 + b"\x01", 0)  # eleven bytes
    with pytest.raises(CorruptRecordError):
        read_varlong(b"\xff" * 9 + b"\x7f", 0)  # 70 bits


def test_corrupt_varint_names_position() -> None:
    with pytest.raises(CorruptRecordError) as info:
        read_varint(b"\x00\x00\x80", 2)
    assert info.value.position == 3
