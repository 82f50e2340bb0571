"""SnapshotWriter and SnapshotReader: the layout, round trips, and every corruption caught."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import crc32c
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.errors import (
    CorruptRecordError,
    CorruptSnapshotError,
    IllegalStateError,
    RecordBatchTooLargeError,
    StorageError,
)
from kraft.raft.listeners import SnapshotReaderLike
from kraft.record import (
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    LeaderChangeMessage,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    control_batch,
    encode_batch,
    iter_batches,
)
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.serde import BytesSerde, MsgspecSerde, StrSerde
from kraft.snapshot import (
    FileRawSnapshotWriter,
    MemoryRawSnapshotReader,
    MemoryRawSnapshotWriter,
    RawSnapshotReader,
    SnapshotReader,
    SnapshotWriter,
    list_snapshots,
    read_snapshot_file,
    snapshot_file_name,
)

SID = OffsetAndEpoch(1000, 7)
TS = 1_700_000_000_000
LAST_TS = TS - 5


def new_writer(
    sid: OffsetAndEpoch = SID, max_batch_size_bytes: int = 1 << 20
) -> tuple[SnapshotWriter[bytes], list[RawSnapshotReader]]:
    frozen: list[RawSnapshotReader] = []
    raw = MemoryRawSnapshotWriter(sid, frozen.append)
    writer = SnapshotWriter(
        raw,
        BytesSerde(),
        last_contained_log_timestamp_ms=LAST_TS,
        timestamp_ms=TS,
        max_batch_size_bytes=max_batch_size_bytes,
    )
    return writer, frozen


def make_snapshot(
    groups: list[list[bytes]], max_batch_size_bytes: int = 1 << 20, sid: OffsetAndEpoch = SID
) -> bytes:
    writer, frozen = new_writer(sid, max_batch_size_bytes)
    with writer:
        for group in groups:
            writer.append(group)
        size = writer.freeze()
    (reader,) = frozen
    assert reader.size_in_bytes == size
    return reader.records()


def read_all(data: bytes, sid: OffsetAndEpoch = SID) -> SnapshotReader[bytes]:
    return SnapshotReader(MemoryRawSnapshotReader(sid, data), BytesSerde())


# -- the layout --------------------------------------------------------------------------------


def test_header_data_footer() -> None:
    data = make_snapshot([[b"a", b"b"], [b"c"]])
    batches = list(iter_batches(data))
    assert [b.base_offset for b in batches] == [0, 1, 4]
    assert [b.last_offset for b in batches] == [0, 3, 4]
    assert {b.epoch for b in batches} == {SID.epoch}
    assert [b.is_control for b in batches] == [True, False, True]
    assert batches[1].values() == [b"a", b"b", b"c"]
    assert all(b.max_timestamp == TS for b in batches)
    with read_all(data) as reader:
        assert reader.snapshot_id == SID
        assert reader.last_contained_log_timestamp_ms == LAST_TS
        assert reader.last_contained_log_offset == SID.offset - 1
        assert reader.size_in_bytes == len(data)
        header, body, footer = list(reader)
    assert header.records == []
    assert [(c.type, c.message) for c in header.control_records] == [
        (ControlRecordType.SNAPSHOT_HEADER, SnapshotHeaderRecord(0, LAST_TS))
    ]
    assert (body.base_offset, body.last_offset, body.epoch) == (1, 3, SID.epoch)
    assert body.records == [b"a", b"b", b"c"]
    assert body.control_records == []
    assert [(c.type, c.message) for c in footer.control_records] == [
        (ControlRecordType.SNAPSHOT_FOOTER, SnapshotFooterRecord(0))
    ]


def test_an_empty_snapshot_is_a_header_and_a_footer() -> None:
    data = make_snapshot([])
    with read_all(data) as reader:
        assert [b.base_offset for b in reader] == [0, 1]


def test_appends_share_a_batch_until_it_is_full() -> None:
    value = b"v" * 100
    record = 1 + 104 + 1  # length varint, body (offset delta < 64), 1 more for 2-byte ones
    limit = RECORD_BATCH_OVERHEAD + 10 * record
    data = make_snapshot(
        [[value] * 4, [value] * 4, [value] * 4, [value]], max_batch_size_bytes=limit
    )
    batches = list(iter_batches(data))
    assert [b.records_count for b in batches] == [1, 8, 5, 1]
    assert all(b.size_in_bytes <= limit for b in batches)
    assert [b.base_offset for b in batches] == [0, 1, 9, 14]


def test_the_limit_is_exact() -> None:
    """A batch exactly at the limit is written; one byte less and the append is too large."""
    data = make_snapshot([[b"x" * 50]])
    size = list(iter_batches(data))[1].size_in_bytes
    make_snapshot([[b"x" * 50]], max_batch_size_bytes=size)
    writer, frozen = new_writer(max_batch_size_bytes=size - 1)
    with writer, pytest.raises(RecordBatchTooLargeError):
        writer.append([b"x" * 50])
    assert frozen == []


def test_a_too_large_append_writes_nothing() -> None:
    writer, frozen = new_writer(max_batch_size_bytes=1000)
    writer.append([b"a"])
    with pytest.raises(RecordBatchTooLargeError, match="1000"):
        writer.append([b"b" * 600, b"c" * 600])
    writer.append([b"d"])
    writer.freeze()
    with read_all(frozen[0].records()) as reader:
        assert [b.records for b in reader] == [[], [b"a", b"d"], []]


def test_append_after_freeze_or_close() -> None:
    writer, _ = new_writer()
    writer.freeze()
    assert writer.is_frozen
    with pytest.raises(IllegalStateError, match="frozen"):
        writer.append([b"x"])
    with pytest.raises(IllegalStateError, match="frozen"):
        writer.freeze()
    writer.close()
    writer, frozen = new_writer()
    writer.append([b"x"])
    writer.close()
    writer.close()
    assert not writer.is_frozen
    assert frozen == []
    with pytest.raises(IllegalStateError, match="closed"):
        writer.append([b"x"])
    with pytest.raises(IllegalStateError, match="closed"):
        writer.freeze()


def test_append_of_nothing_and_odd_limits() -> None:
    writer, _ = new_writer()
    with pytest.raises(ValueError, match="no records"):
        writer.append([])
    with pytest.raises(ValueError, match="max_batch_size_bytes"):
        new_writer(max_batch_size_bytes=RECORD_BATCH_OVERHEAD)
    raw = MemoryRawSnapshotWriter(SID)
    raw.append(b"x")
    with pytest.raises(IllegalStateError, match="empty"):
        SnapshotWriter(raw, BytesSerde(), last_contained_log_timestamp_ms=0, timestamp_ms=0)


class Point(msgspec.Struct):
    x: int
    y: int


def test_typed_records_through_a_serde() -> None:
    frozen: list[RawSnapshotReader] = []
    serde = MsgspecSerde(Point)
    with SnapshotWriter(
        MemoryRawSnapshotWriter(SID, frozen.append),
        serde,
        last_contained_log_timestamp_ms=1,
        timestamp_ms=2,
    ) as writer:
        writer.append([Point(1, 2), Point(3, 4)])
        writer.freeze()
    with SnapshotReader(frozen[0], serde) as reader:
        assert [r for b in reader for r in b.records] == [Point(1, 2), Point(3, 4)]
    # The same bytes through a serde that cannot read them: a typed error, at iteration.
    with SnapshotReader(frozen[0], StrSerde()) as reader:
        next(reader)
        with pytest.raises(CorruptSnapshotError, match="cannot decode"):
            next(reader)


def test_the_reader_is_what_listeners_load() -> None:
    reader: SnapshotReaderLike[bytes] = read_all(make_snapshot([[b"a"]]))  # checked by mypy
    assert reader.snapshot_id == SID
    reader.close()


def test_close_stops_iteration() -> None:
    one_record = RECORD_BATCH_OVERHEAD + 8  # a 1-byte value is an 8-byte record
    reader = read_all(make_snapshot([[b"a"], [b"b"]], max_batch_size_bytes=one_record))
    next(reader)
    reader.close()
    reader.close()
    assert reader.is_closed
    assert list(reader) == []


# -- round trips -------------------------------------------------------------------------------

groups_strategy = st.lists(st.lists(st.binary(max_size=300), min_size=1, max_size=20), max_size=30)


@given(
    groups_strategy,
    st.integers(RECORD_BATCH_OVERHEAD + 310 * 20 + 100, 20_000),
    st.integers(1, 2**40),
    st.integers(0, 2**31 - 1),
)
@settings(max_examples=150, deadline=None)
def test_round_trip(groups: list[list[bytes]], limit: int, offset: int, epoch: int) -> None:
    sid = OffsetAndEpoch(offset, epoch)
    data = make_snapshot(groups, max_batch_size_bytes=limit, sid=sid)
    with read_all(data, sid) as reader:
        batches = list(reader)
    assert batches[0].control_records[0].type == ControlRecordType.SNAPSHOT_HEADER
    assert batches[-1].control_records[-1].type == ControlRecordType.SNAPSHOT_FOOTER
    data_batches = batches[1:-1]
    assert [r for b in data_batches for r in b.records] == [r for g in groups for r in g]
    # Contiguous offsets, every batch within the limit, each append within one batch.
    offsets = [(b.base_offset, b.last_offset) for b in batches]
    assert offsets[0][0] == 0
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(offsets))
    assert all(b.size_in_bytes <= limit for b in data_batches)
    end = 0
    for group in groups:  # the records of one append are in one batch
        start, end = end + 1, end + len(group)
        assert any(b.base_offset <= start and end <= b.last_offset for b in data_batches)


def test_file_round_trip(tmp_path: Path) -> None:
    frozen: list[RawSnapshotReader] = []
    raw = FileRawSnapshotWriter.create(tmp_path, SID, frozen.append)
    with SnapshotWriter(
        raw,
        StrSerde(),
        last_contained_log_timestamp_ms=LAST_TS,
        timestamp_ms=TS,
        max_batch_size_bytes=200,
    ) as writer:
        for i in range(50):
            writer.append([f"record {i}", f"and {i}"])
        size = writer.freeze()
    assert list_snapshots(tmp_path) == [SID]
    path = tmp_path / snapshot_file_name(SID)
    assert path.stat().st_size == size
    with SnapshotReader(frozen[0], StrSerde()) as reader:
        records = [r for b in reader for r in b.records]
    assert records == [s for i in range(50) for s in (f"record {i}", f"and {i}")]
    frozen[0].close()
    with read_snapshot_file(path, StrSerde()) as reader:
        assert reader.last_contained_log_timestamp_ms == LAST_TS
        assert sum(len(b.records) for b in reader) == 100


def test_a_file_writer_abandoned_in_a_with_block(tmp_path: Path) -> None:
    raw = FileRawSnapshotWriter.create(tmp_path, SID)
    with (
        pytest.raises(KeyError),
        SnapshotWriter(
            raw, BytesSerde(), last_contained_log_timestamp_ms=0, timestamp_ms=0
        ) as writer,
    ):
        writer.append([b"x"])
        raise KeyError("the state machine failed")
    assert list(tmp_path.iterdir()) == []


def test_read_snapshot_file_needs_an_id(tmp_path: Path) -> None:
    path = tmp_path / "copy.checkpoint"
    path.write_bytes(make_snapshot([[b"a"]]))
    with pytest.raises(StorageError, match="not a snapshot file name"):
        read_snapshot_file(path, BytesSerde())
    with read_snapshot_file(path, BytesSerde(), snapshot_id=SID) as reader:
        assert len(list(reader)) == 3


# -- corruption --------------------------------------------------------------------------------


def batches_of(data: bytes) -> list[bytes]:
    return [bytes(b.buffer) for b in iter_batches(data)]


def header_batch(epoch: int = SID.epoch, offset: int = 0) -> bytes:
    return control_batch(offset, epoch, [SnapshotHeaderRecord(0, LAST_TS)], timestamp_ms=TS)


def footer_batch(offset: int, epoch: int = SID.epoch) -> bytes:
    return control_batch(offset, epoch, [SnapshotFooterRecord(0)], timestamp_ms=TS)


def data_batch(offset: int, epoch: int = SID.epoch, count: int = 2) -> bytes:
    return encode_batch(offset, epoch, [b"v%d" % i for i in range(count)], timestamp_ms=TS)


def corrupt(data: bytes, match: str) -> CorruptSnapshotError:
    with pytest.raises(CorruptSnapshotError, match=match) as caught:
        read_all(data)
    assert "snapshot 1000-7" in str(caught.value)
    assert isinstance(caught.value, CorruptRecordError)
    return caught.value


def test_a_good_hand_made_snapshot() -> None:
    with read_all(header_batch() + data_batch(1) + footer_batch(3)) as reader:
        assert len(list(reader)) == 3


def test_a_flipped_byte_is_a_crc_error() -> None:
    data = bytearray(make_snapshot([[b"hello", b"world"]]))
    batches = batches_of(bytes(data))
    data[len(batches[0]) + 70] ^= 0x01  # inside the data batch's records
    error = corrupt(bytes(data), "CRC")
    assert error.offset == 1
    assert error.position == len(batches[0])


@pytest.mark.parametrize("cut", [1, 11, 12, 60, 100])
def test_a_truncated_snapshot(cut: int) -> None:
    data = make_snapshot([[b"x" * 200]])
    corrupt(data[:-cut], "truncated|footer|below the minimum|not a control")


def test_trailing_bytes() -> None:
    data = make_snapshot([[b"a"]])
    corrupt(data + b"\x00" * 5, "truncated")
    corrupt(data + data_batch(3), "not a control batch")


def test_no_header() -> None:
    corrupt(data_batch(0) + footer_batch(2), "first batch is not a control batch")
    leader_change = control_batch(0, SID.epoch, [LeaderChangeMessage(0, 1)], timestamp_ms=TS)
    corrupt(leader_change + footer_batch(1), "LEADER_CHANGE, not a header")
    corrupt(footer_batch(0) + footer_batch(1), "SNAPSHOT_FOOTER, not a header")


def test_no_footer() -> None:
    corrupt(header_batch() + data_batch(1), "last batch is not a control batch")
    corrupt(header_batch() + header_batch(offset=1), "SNAPSHOT_HEADER, not a footer")
    corrupt(header_batch(), "single batch")
    corrupt(b"", "no batches")


def test_offsets_not_contiguous_from_zero() -> None:
    corrupt(header_batch(offset=1) + footer_batch(2), "base offset 1 where 0")
    corrupt(header_batch() + data_batch(2) + footer_batch(4), "base offset 2 where 1")
    corrupt(header_batch() + data_batch(1) + footer_batch(2), "base offset 2 where 3")


def test_an_epoch_other_than_the_snapshots() -> None:
    corrupt(header_batch(epoch=6) + footer_batch(1, epoch=6), "epoch 6 is not")
    corrupt(header_batch() + data_batch(1, epoch=8) + footer_batch(3), "epoch 8 is not")


def test_a_record_count_that_disagrees_with_the_offsets() -> None:
    bad = bytearray(data_batch(1, count=3))
    struct.pack_into(">i", bad, 57, 2)  # RecordsCount 2 for offset deltas 0..2
    struct.pack_into(">I", bad, 17, crc32c.crc32c(bytes(bad[21:])))
    corrupt(header_batch() + bytes(bad) + footer_batch(4), "2 records for 3 offsets")


def test_an_undecodable_header() -> None:
    bad = bytearray(header_batch())
    # The value is version int16, timestamp int64, tagged fields; then the header count.
    bad[-11] = 9  # version 9: well framed, CRC fixed, but not a header kraft can read
    struct.pack_into(">I", bad, 17, crc32c.crc32c(bytes(bad[21:])))
    corrupt(bytes(bad) + footer_batch(1), "first batch")


def test_an_owned_raw_reader_is_closed_when_validation_fails(tmp_path: Path) -> None:
    path = tmp_path / snapshot_file_name(SID)
    path.write_bytes(header_batch())
    with pytest.raises(CorruptSnapshotError, match=str(path)):
        read_snapshot_file(path, BytesSerde())


@given(st.lists(st.integers(0, 20_000), min_size=1, max_size=5), st.integers(0, 70_000))
@settings(max_examples=100, deadline=None)
def test_the_size_model_is_encode_batch(sizes: list[int], first_delta: int) -> None:
    """The writer's batch size arithmetic agrees with the encoder, across varint widths."""
    from kraft.snapshot.writer import _records_size  # noqa: PLC0415 (a private helper)

    values = [b"v" * n for n in sizes]
    batch = encode_batch(0, 0, [b""] * first_delta + values, timestamp_ms=0)
    without = encode_batch(0, 0, [b""] * first_delta, timestamp_ms=0) if first_delta else None
    before = len(without) if without is not None else RECORD_BATCH_OVERHEAD
    assert len(batch) - before == _records_size(values, first_delta)
