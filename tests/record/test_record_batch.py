"""RecordBatch v2 round trips: encode_batch -> iter_batches / read_batch -> records()."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.common.limits import INT32_MAX, INT64_MAX
from kraft.record import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    Record,
    SimpleRecord,
    encode_batch,
    iter_batches,
    read_batch,
    with_base_offset,
)

payloads = st.none() | st.binary(max_size=40)
headers = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3
).map(tuple)


@dataclass(frozen=True)
class BatchInput:
    """What one encode_batch call is given, and the records it should decode to."""

    base_offset: int
    epoch: int
    timestamp_ms: int
    records: list[bytes | SimpleRecord]
    control: bool = False

    def encode(self) -> bytes:
        return encode_batch(
            self.base_offset,
            self.epoch,
            self.records,
            timestamp_ms=self.timestamp_ms,
            control=self.control,
        )

    def expected(self) -> list[Record]:
        out = []
        for i, r in enumerate(self.records):
            offset = self.base_offset + i
            if isinstance(r, bytes):
                out.append(Record(offset, self.timestamp_ms, None, r, ()))
            else:
                ts = self.timestamp_ms if r.timestamp_ms is None else r.timestamp_ms
                out.append(Record(offset, ts, r.key, r.value, r.headers))
        return out

    def max_timestamp(self) -> int:
        return max(r.timestamp_ms for r in self.expected())


@st.composite
def record_lists(draw: st.DrawFn, timestamp_ms: int) -> list[bytes | SimpleRecord]:
    # Record timestamps near the batch time, or anywhere whose delta still fits an int64.
    record_ts = (
        st.none()
        | st.integers(timestamp_ms - 2**20, timestamp_ms + 2**20)
        | st.integers(-(2**62), 2**62)
    )
    simple = st.builds(
        SimpleRecord, value=payloads, key=payloads, headers=headers, timestamp_ms=record_ts
    )
    return draw(st.lists(st.binary(max_size=40) | simple, min_size=1, max_size=8))


@st.composite
def batch_inputs(draw: st.DrawFn, base_offset: st.SearchStrategy[int] | None = None) -> BatchInput:
    timestamp_ms = draw(st.integers(0, 2**42))
    return BatchInput(
        base_offset=draw(st.integers(0, 2**62) if base_offset is None else base_offset),
        epoch=draw(st.integers(0, INT32_MAX)),
        timestamp_ms=timestamp_ms,
        records=draw(record_lists(timestamp_ms)),
        control=draw(st.booleans()),
    )


@st.composite
def logs(draw: st.DrawFn) -> list[BatchInput]:
    """Consecutive batches, as a log holds them: each starts where the previous one ended."""
    next_offset = draw(st.integers(0, 2**40))
    out = []
    for _ in range(draw(st.integers(1, 4))):
        batch = draw(batch_inputs(base_offset=st.just(next_offset)))
        out.append(batch)
        next_offset += len(batch.records)
    return out


# -- one batch --------------------------------------------------------------------------------


@given(batch_inputs())
def test_batch_round_trip(given_batch: BatchInput) -> None:
    raw = given_batch.encode()
    batch = read_batch(raw)
    assert batch.records() == given_batch.expected()
    assert batch.values() == [r.value for r in given_batch.expected()]
    n = len(given_batch.records)
    assert batch.base_offset == given_batch.base_offset
    assert batch.last_offset == given_batch.base_offset + n - 1
    assert batch.next_offset == given_batch.base_offset + n
    assert batch.records_count == n
    assert batch.size_in_bytes == len(raw)
    assert batch.epoch == batch.partition_leader_epoch == given_batch.epoch
    assert batch.is_control == given_batch.control
    assert not batch.is_transactional
    assert batch.compression == 0
    assert batch.base_timestamp == given_batch.timestamp_ms
    assert batch.max_timestamp == given_batch.max_timestamp()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.is_valid()
    assert bytes(batch) == raw


@given(st.lists(st.binary(max_size=20), min_size=1, max_size=20), st.integers(0, 2**42))
def test_plain_values_match_simple_records(values: list[bytes], timestamp_ms: int) -> None:
    """The unrolled bytes path writes exactly what the general SimpleRecord path writes."""
    fast = encode_batch(7, 2, values, timestamp_ms=timestamp_ms)
    general = encode_batch(7, 2, [SimpleRecord(v) for v in values], timestamp_ms=timestamp_ms)
    assert fast == general


# -- many batches -----------------------------------------------------------------------------


@given(logs(), st.integers(0, 2**40))
@settings(max_examples=50, deadline=None)
def test_iter_batches_walks_a_log(inputs: list[BatchInput], base_position: int) -> None:
    encoded = [b.encode() for b in inputs]
    buf = b"".join(encoded)
    batches = list(iter_batches(buf, base_position=base_position))
    assert len(batches) == len(inputs)
    position = base_position
    for batch, given_batch, raw in zip(batches, inputs, encoded, strict=True):
        assert batch.position == position
        assert batch.size_in_bytes == len(raw)
        assert batch.base_offset == given_batch.base_offset
        assert batch.epoch == given_batch.epoch
        assert batch.records() == given_batch.expected()
        position += len(raw)
    # Starting part-way through, at a batch boundary, yields the remaining batches.
    skip = len(encoded[0])
    rest = list(iter_batches(memoryview(buf), position=skip, base_position=base_position))
    assert [b.base_offset for b in rest] == [b.base_offset for b in inputs[1:]]
    assert [b.position for b in rest] == [b.position for b in batches[1:]]


def test_iter_batches_of_nothing_is_empty() -> None:
    assert list(iter_batches(b"")) == []


@given(batch_inputs(), st.integers(0, 2**62), st.integers(0, INT32_MAX))
@settings(max_examples=50, deadline=None)
def test_with_base_offset_moves_a_batch_without_a_new_crc(
    given_batch: BatchInput, new_offset: int, new_epoch: int
) -> None:
    raw = given_batch.encode()
    moved = with_base_offset(raw, new_offset, new_epoch)
    batch = read_batch(moved)  # the CRC still matches: it covers neither field
    assert batch.crc == read_batch(raw).crc
    assert (batch.base_offset, batch.epoch) == (new_offset, new_epoch)
    assert [r.offset - new_offset for r in batch.records()] == list(range(len(given_batch.records)))
    assert read_batch(with_base_offset(raw, new_offset)).epoch == given_batch.epoch


# -- sizes and argument errors ----------------------------------------------------------------


def test_header_sizes() -> None:
    raw = encode_batch(0, 0, [b""], timestamp_ms=0)
    # The 61-byte header, then one record: a length varint and a 6-byte body.
    assert len(raw) == RECORD_BATCH_OVERHEAD + 7
    assert int.from_bytes(raw[8:12], "big") == len(raw) - LOG_OVERHEAD


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((0, 0, []), {"timestamp_ms": 0}),  # a batch holds at least one record
        ((-1, 0, [b"x"]), {"timestamp_ms": 0}),  # negative base offset
    ],
)
def test_encode_batch_rejects_bad_arguments(
    args: tuple[object, ...], kwargs: dict[str, int]
) -> None:
    with pytest.raises(ValueError):
        encode_batch(*args, **kwargs)  # type: ignore[arg-type]


def test_timestamp_delta_outside_int64_is_value_error() -> None:
    with pytest.raises(ValueError):
        encode_batch(0, 0, [SimpleRecord(b"x", timestamp_ms=INT64_MAX)], timestamp_ms=-(2**62))
