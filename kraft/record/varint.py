"""Kafka's variable-length integers (protobuf style, little-endian base-128).

Records in a v2 batch use *zig-zag* varints (signed: ``0, -1, 1, -2, ...`` map to ``0, 1, 2, 3``).
Kafka's flexible message versions (used by control record values) use *unsigned* varints.
``varint`` is 32-bit, ``varlong`` is 64-bit; a value outside the range is a ``ValueError`` when
writing and a :class:`~kraft.errors.CorruptRecordError` when reading.
"""

from __future__ import annotations

from kraft.common.limits import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from kraft.errors import CorruptRecordError

__all__ = [
    "read_uvarint",
    "read_varint",
    "read_varlong",
    "size_of_uvarint",
    "size_of_varint",
    "uvarint_bytes",
    "varint_bytes",
    "varlong_bytes",
    "write_uvarint",
    "write_varint",
    "write_varlong",
]


def _encode_unsigned(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Zig-zag encodings of small signed values, precomputed: lengths, deltas and counts in a batch
# are almost always small, and a table lookup beats a Python loop on the append path.
_CACHE_MIN, _CACHE_MAX = -(1 << 13), (1 << 15)
_ZIGZAG_CACHE: list[bytes] = [
    _encode_unsigned(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)
    for v in range(_CACHE_MIN, _CACHE_MAX)
]


def varint_bytes(value: int) -> bytes:
    """The zig-zag varint encoding of a signed 32-bit ``value``."""
    if _CACHE_MIN <= value < _CACHE_MAX:
        return _ZIGZAG_CACHE[value - _CACHE_MIN]
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def varlong_bytes(value: int) -> bytes:
    """The zig-zag varint encoding of a signed 64-bit ``value``."""
    if _CACHE_MIN <= value < _CACHE_MAX:
        return _ZIGZAG_CACHE[value - _CACHE_MIN]
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def uvarint_bytes(value: int) -> bytes:
    """The unsigned varint encoding of ``0 <= value < 2**32``."""
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {value}")
    return _encode_unsigned(value)


def write_varint(out: bytearray, value: int) -> None:
    out += varint_bytes(value)


def write_varlong(out: bytearray, value: int) -> None:
    out += varlong_bytes(value)


def write_uvarint(out: bytearray, value: int) -> None:
    out += uvarint_bytes(value)


def size_of_varint(value: int) -> int:
    return len(varint_bytes(value))


def size_of_uvarint(value: int) -> int:
    return len(uvarint_bytes(value))


def _read_unsigned(
    buf: bytes | bytearray | memoryview, pos: int, max_bytes: int
) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise CorruptRecordError("varint runs past the end of the buffer", position=pos)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    raise CorruptRecordError(f"varint longer than {max_bytes} bytes", position=pos)


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Read a zig-zag varint (int32) at ``pos``; return ``(value, next_pos)``."""
    if pos < len(buf):
        b = buf[pos]
        if not b & 0x80:  # one-byte fast path: the common case for deltas and lengths
            return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _read_unsigned(buf, pos, 5)
    if raw > 0xFFFFFFFF:
        raise CorruptRecordError("varint overflows int32", position=pos)
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Read a zig-zag varlong (int64) at ``pos``; return ``(value, next_pos)``."""
    raw, pos = _read_unsigned(buf, pos, 10)
    if raw > 0xFFFFFFFFFFFFFFFF:
        raise CorruptRecordError("varlong overflows int64", position=pos)
    return (raw >> 1) ^ -(raw & 1), pos


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Read an unsigned varint (up to 32 bits) at ``pos``; return ``(value, next_pos)``."""
    raw, pos = _read_unsigned(buf, pos, 5)
    if raw > 0xFFFFFFFF:
        raise CorruptRecordError("unsigned varint overflows 32 bits", position=pos)
    return raw, pos
