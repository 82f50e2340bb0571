"""Another implementation reads kraft's bytes, and kraft reads its bytes.

kafka-python carries its own RecordBatch v2 codec (``kafka.record.default_records``), written
independently of kraft from Kafka's ``DefaultRecordBatch``. Its parser checking our CRCs and
decoding our records, and our reader decoding its batches, shows that kraft's batches are
Kafka's batches.
"""

from __future__ import annotations

import warnings

from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.record import (
    ControlRecordType,
    LeaderChangeMessage,
    LeaderChangeVoter,
    SimpleRecord,
    control_batch,
    encode_batch,
    iter_batches,
    read_batch,
)

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated importlib calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

payloads = st.none() | st.binary(max_size=40)
headers = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3
).map(tuple)


@st.composite
def batches(draw: st.DrawFn) -> tuple[int, int, int, list[SimpleRecord]]:
    timestamp_ms = draw(st.integers(0, 2**42))
    record_ts = st.none() | st.integers(0, 2**43)
    records = draw(
        st.lists(
            st.builds(
                SimpleRecord, value=payloads, key=payloads, headers=headers, timestamp_ms=record_ts
            ),
            min_size=1,
            max_size=8,
        )
    )
    return draw(st.integers(0, 2**62)), draw(st.integers(0, 2**31 - 1)), timestamp_ms, records


@given(batches())
@settings(max_examples=75, deadline=None)
def test_kafka_python_reads_kraft_batches(case: tuple[int, int, int, list[SimpleRecord]]) -> None:
    base_offset, epoch, timestamp_ms, records = case
    raw = encode_batch(base_offset, epoch, records, timestamp_ms=timestamp_ms)
    theirs = DefaultRecordBatch(raw)
    assert theirs.validate_crc()
    assert theirs.magic == 2
    assert theirs.base_offset == base_offset
    assert theirs.leader_epoch == epoch
    assert theirs.size_in_bytes == len(raw)
    assert theirs.last_offset == base_offset + len(records) - 1
    assert theirs.records_count == len(records)
    assert theirs.first_timestamp == timestamp_ms
    assert not theirs.is_control_batch
    assert not theirs.is_transactional
    assert theirs.producer_id == -1
    stamps = [timestamp_ms if r.timestamp_ms is None else r.timestamp_ms for r in records]
    assert theirs.max_timestamp == max(stamps)
    decoded = list(theirs)
    assert [r.offset for r in decoded] == [base_offset + i for i in range(len(records))]
    assert [r.timestamp for r in decoded] == stamps
    assert [r.key for r in decoded] == [r.key for r in records]
    assert [r.value for r in decoded] == [r.value for r in records]
    assert [tuple(r.headers) for r in decoded] == [r.headers for r in records]


def test_kafka_python_walks_a_kraft_log() -> None:
    log = b"".join(
        encode_batch(offset, 1, [b"x%d" % offset, b"y%d" % offset], timestamp_ms=offset)
        for offset in range(0, 20, 2)
    )
    records = MemoryRecords(log)
    offsets: list[int] = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        offsets.extend(r.offset for r in batch)
    assert offsets == list(range(20))


def test_kafka_python_reads_a_kraft_control_batch() -> None:
    message = LeaderChangeMessage(
        0, 1, (LeaderChangeVoter(1), LeaderChangeVoter(2)), (LeaderChangeVoter(1),)
    )
    raw = control_batch(5, 7, [message], timestamp_ms=1000)
    theirs = DefaultRecordBatch(raw)
    assert theirs.validate_crc()
    assert theirs.is_control_batch
    (record,) = list(theirs)
    assert (record.version, record.type) == (0, ControlRecordType.LEADER_CHANGE)
    assert record.offset == 5


@given(batches())
@settings(max_examples=75, deadline=None)
def test_kraft_reads_kafka_python_batches(case: tuple[int, int, int, list[SimpleRecord]]) -> None:
    _, _, timestamp_ms, records = case
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    stamps = []
    for offset, r in enumerate(records):
        ts = timestamp_ms if r.timestamp_ms is None else r.timestamp_ms
        stamps.append(ts)
        # kafka-python wants a list of headers; it writes its base offset as 0, offsets as deltas.
        assert builder.append(offset, ts, r.key, r.value, list(r.headers)) is not None
    raw = bytes(builder.build())
    (batch,) = iter_batches(raw)  # validates length, magic and CRC
    assert batch.base_offset == 0
    assert batch.records_count == len(records)
    assert batch.base_timestamp == stamps[0]
    assert batch.max_timestamp == max(stamps)
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in batch.records()] == [
        (i, stamps[i], r.key, r.value, r.headers) for i, r in enumerate(records)
    ]


def test_kraft_reads_a_kafka_python_batch_with_a_producer() -> None:
    """Fields kraft never writes (producer id, epoch, sequence, transactional bit) still parse."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=True,
        producer_id=1234,
        producer_epoch=5,
        base_sequence=99,
        batch_size=1 << 20,
    )
    builder.append(0, 42, b"k", b"v", [])
    batch = read_batch(bytes(builder.build()))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1234, 5, 99)
    assert batch.is_transactional
    assert batch.values() == [b"v"]
