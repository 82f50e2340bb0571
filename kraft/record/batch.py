"""Kafka RecordBatch v2 ("magic 2"), byte for byte.

Layout of one batch (all integers big-endian; Kafka's ``DefaultRecordBatch``)::

    off len field
      0   8 BaseOffset
      8   4 Length                 bytes after this field (batch size - 12)
     12   4 PartitionLeaderEpoch   the leader epoch; NOT covered by the CRC
     16   1 Magic                  2
     17   4 CRC                    CRC-32C (Castagnoli) of bytes [21, end)
     21   2 Attributes             bits 0-2 compression, 3 timestamp type, 4 transactional,
                                   5 control, 6 delete horizon
     23   4 LastOffsetDelta
     27   8 BaseTimestamp
     35   8 MaxTimestamp
     43   8 ProducerId             -1
     51   2 ProducerEpoch          -1
     53   4 BaseSequence           -1
     57   4 RecordsCount
     61   . Records

Each record: ``Length varint, Attributes int8, TimestampDelta varlong, OffsetDelta varint,
KeyLength varint (-1 = null), Key, ValueLength varint (-1 = null), Value, HeadersCount varint,
Headers (KeyLength varint, Key utf-8, ValueLength varint, Value)``.

Because neither the base offset nor the partition leader epoch is under the CRC, a batch can be
moved to another base offset or epoch by patching 12 bytes: no re-encoding, no new CRC.

:class:`RecordBatch` is a zero-copy view over one batch in a ``memoryview``; :func:`iter_batches`
walks a buffer of batches validating length, magic and CRC without decoding any record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import cast

import crc32c as _crc32c
import msgspec

from kraft.common.limits import INT32_MAX, INT64_MIN
from kraft.errors import CorruptRecordError
from kraft.record.varint import read_varint, read_varlong, varint_bytes, varlong_bytes

__all__ = [
    "ATTRIBUTES_CONTROL",
    "ATTRIBUTES_TRANSACTIONAL",
    "Buffer",
    "LOG_OVERHEAD",
    "MAGIC_V2",
    "RECORD_BATCH_OVERHEAD",
    "Record",
    "RecordBatch",
    "SimpleRecord",
    "encode_batch",
    "iter_batches",
    "read_batch",
    "with_base_offset",
]

Buffer = bytes | bytearray | memoryview

MAGIC_V2 = 2
#: BaseOffset + Length: the bytes that precede the length-counted part of a batch.
LOG_OVERHEAD = 12
#: Size of a batch header, i.e. of a batch with no records.
RECORD_BATCH_OVERHEAD = 61
ATTRIBUTES_COMPRESSION_MASK = 0x07
ATTRIBUTES_TIMESTAMP_TYPE = 0x08
ATTRIBUTES_TRANSACTIONAL = 0x10
ATTRIBUTES_CONTROL = 0x20

_CRC_START = 21
_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET_AND_LENGTH = struct.Struct(">qi")
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. records count
_BASE_OFFSET = struct.Struct(">q")
_HEAD = struct.Struct(">qiibI")  # base offset .. CRC
_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")

_NULL = varint_bytes(-1)
_ZERO = varint_bytes(0)
_RECORD_ATTRIBUTES = b"\x00"


class Record(msgspec.Struct, frozen=True, gc=False):
    """A decoded record: its absolute offset and timestamp, key, value and headers."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class SimpleRecord(msgspec.Struct, frozen=True, gc=False):
    """A record to encode when a plain ``bytes`` value is not enough (a key, headers, a time)."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None


def _encode_record(
    out: bytearray, offset_delta: int, timestamp_delta: int, record: SimpleRecord
) -> None:
    key, value, headers = record.key, record.value, record.headers
    body = bytearray(_RECORD_ATTRIBUTES)
    body += varlong_bytes(timestamp_delta)
    body += varint_bytes(offset_delta)
    if key is None:
        body += _NULL
    else:
        body += varint_bytes(len(key))
        body += key
    if value is None:
        body += _NULL
    else:
        body += varint_bytes(len(value))
        body += value
    body += varint_bytes(len(headers))
    for header_key, header_value in headers:
        raw_key = header_key.encode("utf-8")
        body += varint_bytes(len(raw_key))
        body += raw_key
        if header_value is None:
            body += _NULL
        else:
            body += varint_bytes(len(header_value))
            body += header_value
    out += varint_bytes(len(body))
    out += body


def encode_batch(
    base_offset: int,
    partition_leader_epoch: int,
    records: Sequence[bytes | SimpleRecord],
    *,
    timestamp_ms: int,
    control: bool = False,
) -> bytes:
    """Encode ``records`` as one v2 batch starting at ``base_offset``.

    A ``bytes`` record is a value with a null key, no headers and the batch's ``timestamp_ms``.
    KRaft batches carry no producer state (id, epoch and sequence are -1) and no compression.
    """
    if not records:
        raise ValueError("a record batch holds at least one record")
    if base_offset < 0:
        raise ValueError(f"negative base offset {base_offset}")
    count = len(records)
    if count - 1 > INT32_MAX:
        raise ValueError("too many records for one batch")
    if all(type(r) is bytes for r in records):
        values = cast("Sequence[bytes]", records)
        return _encode_values(base_offset, partition_leader_epoch, values, timestamp_ms, control)
    out = bytearray(RECORD_BATCH_OVERHEAD)
    # Kafka's MaxTimestamp is the largest *record* timestamp: the batch's timestamp_ms counts
    # only if some record uses it.
    own_timestamps = 0
    own_max = INT64_MIN
    for delta, record in enumerate(records):
        if isinstance(record, bytes):
            # The common case, unrolled: attributes 0, timestamp delta 0, null key, no headers.
            value_len = varint_bytes(len(record))
            offset_delta = varint_bytes(delta)
            out += varint_bytes(4 + len(offset_delta) + len(value_len) + len(record))
            out += b"\x00\x00"
            out += offset_delta
            out += _NULL
            out += value_len
            out += record
            out += _ZERO
        else:
            if record.timestamp_ms is None:
                ts = timestamp_ms
            else:
                ts = record.timestamp_ms
                own_timestamps += 1
                own_max = max(own_max, ts)
            _encode_record(out, delta, ts - timestamp_ms, record)
    max_timestamp = own_max if own_timestamps == count else max(own_max, timestamp_ms)
    attributes = ATTRIBUTES_CONTROL if control else 0
    _AFTER_CRC.pack_into(
        out, _CRC_START, attributes, count - 1, timestamp_ms, max_timestamp, -1, -1, -1, count
    )
    crc = _crc32c.crc32c(memoryview(out)[_CRC_START:])
    _BASE_OFFSET_AND_LENGTH.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD)
    _EPOCH.pack_into(out, 12, partition_leader_epoch)
    out[16] = MAGIC_V2
    _CRC.pack_into(out, 17, crc)
    return bytes(out)


# Record prefixes of the value-only fast path, by offset delta: attributes 0, timestamp
# delta 0, the offset delta, and a null key.
_VALUE_PREFIXES = [b"\x00\x00" + varint_bytes(d) + _NULL for d in range(4096)]


def _encode_values(
    base_offset: int,
    partition_leader_epoch: int,
    values: Sequence[bytes],
    timestamp_ms: int,
    control: bool,
) -> bytes:
    """``encode_batch`` for plain values: the pieces are joined once, the CRC taken in two
    steps (header tail, then records) so no buffer is copied or grown record by record."""
    parts: list[bytes] = []
    append = parts.append
    prefixes = _VALUE_PREFIXES
    for delta, value in enumerate(values):
        prefix = prefixes[delta] if delta < 4096 else b"\x00\x00" + varint_bytes(delta) + _NULL
        value_len = varint_bytes(len(value))
        append(varint_bytes(len(prefix) + len(value_len) + len(value) + 1))
        append(prefix)
        append(value_len)
        append(value)
        append(_ZERO)
    body = b"".join(parts)
    count = len(values)
    tail = _AFTER_CRC.pack(
        ATTRIBUTES_CONTROL if control else 0,
        count - 1,
        timestamp_ms,
        timestamp_ms,
        -1,
        -1,
        -1,
        count,
    )
    crc = _crc32c.crc32c(body, _crc32c.crc32c(tail))
    head = _HEAD.pack(
        base_offset,
        RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body),
        partition_leader_epoch,
        MAGIC_V2,
        crc,
    )
    return b"".join((head, tail, body))


def with_base_offset(
    batch: Buffer, base_offset: int, partition_leader_epoch: int | None = None
) -> bytes:
    """A copy of ``batch`` moved to ``base_offset`` (and epoch): 12 patched bytes, same CRC."""
    out = bytearray(batch)
    _BASE_OFFSET.pack_into(out, 0, base_offset)
    if partition_leader_epoch is not None:
        _EPOCH.pack_into(out, 12, partition_leader_epoch)
    return bytes(out)


def _read_headers(data: bytes, pos: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    header_count, pos = read_varint(data, pos)
    if header_count < 0:
        raise CorruptRecordError("negative header count", position=pos)
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(header_count):
        key_len, pos = read_varint(data, pos)
        if key_len < 0:
            raise CorruptRecordError("null header key", position=pos)
        if pos + key_len > len(data):
            raise CorruptRecordError("header key runs past the batch", position=pos)
        key = data[pos : pos + key_len].decode("utf-8")
        pos += key_len
        value_len, pos = read_varint(data, pos)
        value: bytes | None = None
        if value_len >= 0:
            value = data[pos : pos + value_len]
            pos += value_len
        headers.append((key, value))
    return tuple(headers), pos


class RecordBatch:
    """A zero-copy view of one v2 batch; header fields are parsed, records are not.

    ``position`` is the byte position of the batch in the buffer it was read from, plus the
    ``base_position`` the reader was given (a file position, for a log segment).
    """

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "buffer",
        "crc",
        "last_offset_delta",
        "max_timestamp",
        "partition_leader_epoch",
        "position",
        "producer_epoch",
        "producer_id",
        "records_count",
    )

    def __init__(self, buffer: memoryview, position: int) -> None:
        (
            self.base_offset,
            _length,
            self.partition_leader_epoch,
            _magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = _HEADER.unpack_from(buffer, 0)
        self.buffer = buffer
        self.position = position

    # -- derived header fields -------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The partition leader epoch: the epoch of the leader that appended this batch."""
        return int(self.partition_leader_epoch)

    @property
    def last_offset(self) -> int:
        return int(self.base_offset + self.last_offset_delta)

    @property
    def next_offset(self) -> int:
        return int(self.base_offset + self.last_offset_delta + 1)

    @property
    def size_in_bytes(self) -> int:
        return len(self.buffer)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTRIBUTES_CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTRIBUTES_TRANSACTIONAL)

    @property
    def compression(self) -> int:
        return int(self.attributes & ATTRIBUTES_COMPRESSION_MASK)

    def compute_crc(self) -> int:
        return int(_crc32c.crc32c(self.buffer[_CRC_START:]))

    def is_valid(self) -> bool:
        return self.compute_crc() == int(self.crc)

    def ensure_valid(self) -> None:
        """Raise :class:`CorruptRecordError` if the stored CRC does not match the bytes."""
        computed = self.compute_crc()
        if computed != self.crc:
            raise CorruptRecordError(
                f"record batch CRC mismatch: stored {self.crc:#010x}, computed {computed:#010x}",
                offset=self.base_offset,
                position=self.position,
            )

    def __bytes__(self) -> bytes:
        return bytes(self.buffer)

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"epoch={self.partition_leader_epoch}, count={self.records_count}, "
            f"size={self.size_in_bytes}, control={self.is_control})"
        )

    # -- records -----------------------------------------------------------------------------
    def records(self) -> list[Record]:
        """Decode every record of the batch. Raises :class:`CorruptRecordError` on bad bytes."""
        return self._decode(values_only=False)  # type: ignore[return-value]

    def values(self) -> list[bytes | None]:
        """The record values, in offset order (no ``Record`` objects are built)."""
        return self._decode(values_only=True)  # type: ignore[return-value]

    # One loop with the varints decoded inline, on purpose: this is the hot path of every fetch,
    # recovery and listener, and a call per field would cost more than the decoding itself.
    def _decode(self, values_only: bool) -> list[Record] | list[bytes | None]:  # noqa: PLR0912, PLR0915
        """Walk every record, checking its framing; keep whole records or just values."""
        if self.compression:
            raise CorruptRecordError(
                f"compressed batches are not supported (codec {self.compression})",
                offset=self.base_offset,
                position=self.position,
            )
        # One copy of the batch, then plain bytes indexing: slicing bytes yields bytes at once,
        # and the one-byte varints (nearly every length and delta) are decoded inline.
        data = bytes(self.buffer)
        end = len(data)
        pos = RECORD_BATCH_OVERHEAD
        base_offset = self.base_offset
        base_timestamp = self.base_timestamp
        out: list[object] = []
        append = out.append
        no_headers: tuple[tuple[str, bytes | None], ...] = ()
        try:
            for _ in range(self.records_count):
                b = data[pos]
                if b < 0x80:
                    length = (b >> 1) ^ -(b & 1)
                    pos += 1
                elif data[pos + 1] < 0x80:  # two bytes: records of 64 B to 8 KiB
                    raw = (b & 0x7F) | (data[pos + 1] << 7)
                    length = (raw >> 1) ^ -(raw & 1)
                    pos += 2
                else:
                    length, pos = read_varint(data, pos)
                record_end = pos + length
                if length < 0 or record_end > end:
                    raise CorruptRecordError("record length out of bounds", position=pos)
                b = data[pos + 1]  # pos: attributes, unused in v2
                if b < 0x80:
                    ts_delta = (b >> 1) ^ -(b & 1)
                    pos += 2
                else:
                    ts_delta, pos = read_varlong(data, pos + 1)
                b = data[pos]
                if b < 0x80:
                    offset_delta = (b >> 1) ^ -(b & 1)
                    pos += 1
                elif data[pos + 1] < 0x80:
                    raw = (b & 0x7F) | (data[pos + 1] << 7)
                    offset_delta = (raw >> 1) ^ -(raw & 1)
                    pos += 2
                else:
                    offset_delta, pos = read_varint(data, pos)
                b = data[pos]
                if b < 0x80:
                    key_len = (b >> 1) ^ -(b & 1)
                    pos += 1
                else:
                    key_len, pos = read_varint(data, pos)
                key: bytes | None = None
                if key_len >= 0:
                    key = data[pos : pos + key_len]
                    pos += key_len
                b = data[pos]
                if b < 0x80:
                    value_len = (b >> 1) ^ -(b & 1)
                    pos += 1
                elif data[pos + 1] < 0x80:
                    raw = (b & 0x7F) | (data[pos + 1] << 7)
                    value_len = (raw >> 1) ^ -(raw & 1)
                    pos += 2
                else:
                    value_len, pos = read_varint(data, pos)
                value: bytes | None = None
                if value_len >= 0:
                    value = data[pos : pos + value_len]
                    pos += value_len
                if data[pos] == 0:  # no headers: the common case
                    pos += 1
                    headers = no_headers
                else:
                    headers, pos = _read_headers(data, pos)
                if pos != record_end:
                    raise CorruptRecordError(
                        f"record length {length} does not match its contents", position=pos
                    )
                if values_only:
                    append(value)
                else:
                    append(
                        Record(
                            base_offset + offset_delta,
                            base_timestamp + ts_delta,
                            key,
                            value,
                            headers,
                        )
                    )
        except IndexError as exc:
            raise CorruptRecordError(
                "corrupt record in batch: a record runs past the end of the batch",
                offset=base_offset,
                position=self.position + end,
            ) from exc
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"corrupt record in batch: {exc.args[0]}",
                offset=base_offset,
                position=self.position + (exc.position or 0),
            ) from exc
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(
                "record header key is not utf-8", offset=base_offset, position=self.position
            ) from exc
        if pos != end:
            raise CorruptRecordError(
                f"{end - pos} bytes after the last record",
                offset=base_offset,
                position=self.position + pos,
            )
        return out  # type: ignore[return-value]


def read_batch(
    buf: Buffer, position: int = 0, *, base_position: int = 0, verify_crc: bool = True
) -> RecordBatch:
    """The batch that starts at ``position`` in ``buf``; validates its length, magic and CRC."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    remaining = len(view) - position
    where = base_position + position
    if remaining < LOG_OVERHEAD:
        raise CorruptRecordError(
            f"truncated batch: {remaining} bytes, fewer than the {LOG_OVERHEAD}-byte log overhead",
            position=where,
        )
    base_offset, length = _BASE_OFFSET_AND_LENGTH.unpack_from(view, position)
    if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"batch length {length} is below the minimum", offset=base_offset, position=where
        )
    size = length + LOG_OVERHEAD
    if size > remaining:
        raise CorruptRecordError(
            f"truncated batch: length says {size} bytes, {remaining} remain",
            offset=base_offset,
            position=where,
        )
    magic = view[position + 16]
    if magic != MAGIC_V2:
        raise CorruptRecordError(f"unsupported magic {magic}", offset=base_offset, position=where)
    batch = RecordBatch(view[position : position + size], where)
    if batch.last_offset_delta < 0 or batch.records_count < 0:
        raise CorruptRecordError("negative record count", offset=base_offset, position=where)
    if verify_crc:
        batch.ensure_valid()
    return batch


def iter_batches(
    buf: Buffer, *, position: int = 0, base_position: int = 0, verify_crc: bool = True
) -> Iterator[RecordBatch]:
    """Walk the batches in ``buf`` from ``position`` without decoding records.

    Every batch is checked for length, magic and (unless ``verify_crc`` is false) CRC; the
    first bad one raises :class:`CorruptRecordError` naming its offset and byte position.
    The buffer must hold whole batches: a partial trailing batch is corrupt.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(view)
    while position < end:
        batch = read_batch(view, position, base_position=base_position, verify_crc=verify_crc)
        yield batch
        position += batch.size_in_bytes
