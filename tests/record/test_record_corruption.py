"""Corrupt batches are detected, and the error names the batch's offset and byte position.

What a reader can and cannot detect (Kafka's v2 format, docs/storage.md):

- bytes 8..11 (Length): a changed length makes the batch overrun the buffer, fall below the
  minimum size, or end somewhere else, which changes the CRC-covered range;
- byte 16 (Magic): anything but 2 is rejected;
- bytes 17..20 (CRC) and 21..end (everything the CRC covers): CRC-32C detects every single-bit
  error (and every burst up to 32 bits);
- bytes 0..7 (BaseOffset) and 12..15 (PartitionLeaderEpoch) are NOT covered by the CRC, by
  design: a broker (or kraft's ``with_base_offset``) rewrites them without re-computing it.
  A flipped bit there yields a valid batch with another offset or epoch; the log layer catches
  that with its own checks (offsets must be contiguous, epochs must not go back).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.errors import CorruptRecordError
from kraft.record import SimpleRecord, encode_batch, iter_batches, read_batch

NOT_COVERED = frozenset(range(0, 8)) | frozenset(range(12, 16))


def _batch(base_offset: int, n: int = 3) -> bytes:
    return encode_batch(
        base_offset,
        5,
        [SimpleRecord(b"value-%d" % i, key=b"k", headers=(("h", b"v"),)) for i in range(n)],
        timestamp_ms=1_000_000,
    )


FIRST, MIDDLE, LAST = _batch(10), _batch(13), _batch(16)
LOG = FIRST + MIDDLE + LAST


def _flip(buf: bytes, bit: int) -> bytes:
    out = bytearray(buf)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def _recrc(buf: bytes | bytearray) -> bytes:
    """``buf`` with its CRC recomputed: corruption that only the record decoder can see."""
    out = bytearray(buf)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def _walk(buf: bytes, base_position: int = 0) -> list[tuple[int, int, list[bytes | None]]]:
    return [
        (b.base_offset, b.epoch, b.values()) for b in iter_batches(buf, base_position=base_position)
    ]


# -- single-bit flips -------------------------------------------------------------------------


def test_every_single_bit_flip_is_detected_or_documented() -> None:
    """Flip each bit of the middle batch of a three-batch log, one at a time."""
    start = len(FIRST)
    for bit in range(len(MIDDLE) * 8):
        byte = bit // 8
        corrupt = FIRST + _flip(MIDDLE, bit) + LAST
        if byte in NOT_COVERED:
            # Not under the CRC: the batch reads back, at another offset or epoch.
            walked = _walk(corrupt)
            assert walked != _walk(LOG)
            assert [values for _, _, values in walked] == [values for _, _, values in _walk(LOG)]
            continue
        with pytest.raises(CorruptRecordError) as info:
            _walk(corrupt, base_position=4096)
        assert info.value.offset == 13, f"bit {bit}"
        assert info.value.position == 4096 + start, f"bit {bit}"


@st.composite
def batch_and_bit(draw: st.DrawFn) -> tuple[bytes, int]:
    records = draw(
        st.lists(
            st.builds(
                SimpleRecord,
                value=st.none() | st.binary(max_size=30),
                key=st.none() | st.binary(max_size=10),
            ),
            min_size=1,
            max_size=6,
        )
    )
    raw = encode_batch(
        draw(st.integers(0, 2**40)),
        draw(st.integers(0, 2**31 - 1)),
        records,
        timestamp_ms=draw(st.integers(0, 2**42)),
    )
    covered = [b for b in range(len(raw) * 8) if b // 8 not in NOT_COVERED]
    return raw, draw(st.sampled_from(covered))


@given(batch_and_bit())
@settings(max_examples=200, deadline=None)
def test_a_bit_flip_outside_offset_and_epoch_is_detected(case: tuple[bytes, int]) -> None:
    raw, bit = case
    base_offset = read_batch(raw).base_offset
    with pytest.raises(CorruptRecordError) as info:
        list(iter_batches(FIRST + _flip(raw, bit), base_position=7))
    assert info.value.offset == base_offset
    assert info.value.position == 7 + len(FIRST)


# -- truncation -------------------------------------------------------------------------------


def test_truncation_at_every_length_is_detected() -> None:
    boundaries = {0, len(FIRST), len(FIRST) + len(MIDDLE), len(LOG)}
    for n in range(len(LOG) + 1):
        if n in boundaries:
            assert len(_walk(LOG[:n])) == sorted(boundaries).index(n)
            continue
        partial_start = max(b for b in boundaries if b < n)
        with pytest.raises(CorruptRecordError, match="truncated") as info:
            _walk(LOG[:n], base_position=100)
        assert info.value.position == 100 + partial_start
        if n - partial_start >= 12:  # the length was readable, so the base offset is named
            assert info.value.offset is not None


def test_a_batch_read_at_an_offset_past_its_end_is_truncated() -> None:
    with pytest.raises(CorruptRecordError):
        read_batch(FIRST, 1)


# -- header fields ----------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1, 3, 255])
def test_bad_magic(magic: int) -> None:
    corrupt = bytearray(MIDDLE)
    corrupt[16] = magic
    with pytest.raises(CorruptRecordError, match="magic") as info:
        _walk(FIRST + bytes(corrupt))
    assert (info.value.offset, info.value.position) == (13, len(FIRST))


@pytest.mark.parametrize("length", [-1, 0, 12, 48])
def test_length_below_the_minimum(length: int) -> None:
    corrupt = bytearray(MIDDLE)
    struct.pack_into(">i", corrupt, 8, length)
    with pytest.raises(CorruptRecordError, match="below the minimum") as info:
        _walk(FIRST + bytes(corrupt))
    assert (info.value.offset, info.value.position) == (13, len(FIRST))


def test_negative_record_count_even_with_a_good_crc() -> None:
    corrupt = bytearray(MIDDLE)
    struct.pack_into(">i", corrupt, 57, -1)
    with pytest.raises(CorruptRecordError, match="negative"):
        read_batch(_recrc(corrupt))


def test_crc_check_can_be_skipped() -> None:
    corrupt = _flip(MIDDLE, len(MIDDLE) * 8 - 1)  # the last bit: a header count
    assert not read_batch(corrupt, verify_crc=False).is_valid()
    with pytest.raises(CorruptRecordError, match="CRC"):
        read_batch(corrupt)


# -- records that only the record decoder can catch (the CRC was recomputed) ------------------


def _rewrite(batch: bytes, at: int, new: bytes, *, delete: int = 0) -> bytes:
    """Replace ``delete`` bytes at ``at`` with ``new``, fix the batch length and the CRC."""
    out = bytearray(batch[:at] + new + batch[at + delete :])
    struct.pack_into(">i", out, 8, len(out) - 12)
    return _recrc(out)


@pytest.mark.parametrize(
    ("corrupt", "match"),
    [
        # one record more than the batch holds: the decoder runs out of bytes
        (lambda b: _recrc(b[:57] + struct.pack(">i", 4) + b[61:]), "corrupt record"),
        # one record fewer: bytes are left over
        (lambda b: _recrc(b[:57] + struct.pack(">i", 2) + b[61:]), "after the last record"),
        # the first record's length one too large
        (lambda b: _rewrite(b, 61, bytes([b[61] + 2]), delete=1), "corrupt record"),
        # the first record's length one too small
        (lambda b: _rewrite(b, 61, bytes([b[61] - 2]), delete=1), "corrupt record"),
        # a garbage byte appended after the last record
        (lambda b: _rewrite(b, len(b), b"\x00"), "after the last record"),
        # a compressed batch (gzip): kraft writes and reads none
        (lambda b: _recrc(b[:21] + b"\x00\x01" + b[23:]), "compressed"),
    ],
)
def test_record_level_corruption(corrupt: Callable[[bytes], bytes], match: str) -> None:
    bad = corrupt(MIDDLE)
    batches = list(iter_batches(FIRST + bad, base_position=50))  # header and CRC are fine
    with pytest.raises(CorruptRecordError, match=match) as info:
        batches[1].records()
    assert info.value.offset == 13
    assert info.value.position is not None
    assert info.value.position >= 50 + len(FIRST)


def test_header_key_that_is_not_utf8() -> None:
    raw = encode_batch(0, 0, [SimpleRecord(b"v", headers=(("h", None),))], timestamp_ms=0)
    at = raw.index(b"h")
    corrupt = _recrc(raw[:at] + b"\xff" + raw[at + 1 :])
    with pytest.raises(CorruptRecordError, match="utf-8"):
        read_batch(corrupt).records()
