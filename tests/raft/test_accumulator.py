"""BatchAccumulator: the leader's append buffer (docs/protocol.md §1.10; the prepareAppend /
schedulePreparedAppend rules of §2). Each test is named for the rule it checks; a hypothesis
state machine drives every call against a plain model, decoding each drained batch."""

from __future__ import annotations

import ast
import itertools
import threading
from collections.abc import Callable
from dataclasses import FrozenInstanceError
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import kraft.raft.accumulator as accumulator_module
from kraft.errors import BufferAllocationError, NotLeaderError, RecordBatchTooLargeError
from kraft.raft.accumulator import NOTHING_TO_DRAIN_MS, BatchAccumulator, CompletedBatch
from kraft.record import (
    RECORD_BATCH_OVERHEAD,
    BytesSerde,
    ControlMessage,
    ControlRecordType,
    KRaftVersionRecord,
    LeaderChangeMessage,
    LeaderChangeVoter,
    RecordBatch,
    SnapshotFooterRecord,
    StrSerde,
    control_batch,
    control_records,
    encode_batch,
    iter_batches,
)

EPOCH = 17
BASE = 157
LINGER_MS = 50


class TaggingSerde:
    """Values are ``b"<" + record``, so a drained value is visibly the serde's output; counts
    the records it encodes."""

    def __init__(self) -> None:
        self.encoded = 0

    def encode(self, value: bytes) -> bytes:
        self.encoded += 1
        return b"<" + value

    def decode(self, data: bytes | memoryview) -> bytes:
        return bytes(data)[1:]


def make(
    *,
    epoch: int = EPOCH,
    base: int = BASE,
    linger_ms: int = LINGER_MS,
    max_size: int = 512,
    max_batches: int = 10,
) -> BatchAccumulator[str]:
    return BatchAccumulator(epoch, base, linger_ms, max_size, StrSerde(), max_batches=max_batches)


def only_batch(batch: CompletedBatch[Any]) -> RecordBatch:
    """The one v2 batch in ``batch.data`` (CRC checked)."""
    batches = list(iter_batches(batch.data))
    assert len(batches) == 1
    return batches[0]


def values_of(batch: CompletedBatch[Any]) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in only_batch(batch).records()]


def record_size(value_len: int, delta: int) -> int:
    """Encoded size of one data record, measured with the codec."""
    pad = [b""] * delta
    before = len(encode_batch(0, 0, pad, timestamp_ms=0)) if pad else RECORD_BATCH_OVERHEAD
    return len(encode_batch(0, 0, [*pad, bytes(value_len)], timestamp_ms=0)) - before


# -- append: offsets and errors --------------------------------------------------------------


def test_append_returns_the_offset_of_the_last_record() -> None:
    """§1.10: append returns next + n - 1; offsets continue from the base offset."""
    acc = make()
    assert acc.append(EPOCH, ["a"], 0) == BASE
    assert acc.append(EPOCH, ["b", "c"], 0) == BASE + 2
    assert acc.append(EPOCH, ["d", "e", "f"], 0) == BASE + 5
    assert acc.next_offset == BASE + 6
    assert acc.epoch == EPOCH


def test_append_with_a_stale_epoch_raises_not_leader() -> None:
    """§1.10: a lower epoch -> NotLeaderException; nothing appended."""
    acc = make()
    with pytest.raises(NotLeaderError):
        acc.append(EPOCH - 1, ["a"], 0)
    assert acc.next_offset == BASE and acc.is_empty


def test_append_with_a_newer_epoch_raises_value_error() -> None:
    """§1.10: a higher epoch -> IllegalArgumentException (kraft: ValueError)."""
    acc = make()
    with pytest.raises(ValueError, match="above the current leader epoch"):
        acc.append(EPOCH + 1, ["a"], 0)
    assert acc.next_offset == BASE and acc.is_empty


def test_append_of_no_records_raises_value_error() -> None:
    """§1.10 returns next + n - 1, meaningless for n = 0: kraft refuses an empty append."""
    acc = make()
    with pytest.raises(ValueError, match="at least one record"):
        acc.append(EPOCH, [], 0)
    assert acc.next_offset == BASE and acc.is_empty


def test_append_with_max_batches_completed_raises_buffer_allocation_error() -> None:
    """§1.10: >= maxBatches completed batches -> IllegalStateException (kraft:
    BufferAllocationError); draining makes room again."""
    acc = make(max_batches=2)
    acc.append(EPOCH, ["a"], 0, delay_drain=True)
    acc.drain()  # completes the batch; the drain offset holds it
    acc.append(EPOCH, ["b"], 0)
    acc.drain()
    assert acc.num_completed_batches == 2
    with pytest.raises(BufferAllocationError):
        acc.append(EPOCH, ["c"], 0)
    assert acc.next_offset == BASE + 2
    acc.allow_drain()
    assert len(acc.drain()) == 2
    assert acc.append(EPOCH, ["c"], 0) == BASE + 2


def test_max_batches_counts_only_completed_batches() -> None:
    """§1.10: the limit is on completed batches; the open batch keeps taking records."""
    acc = make(max_batches=1)
    for i in range(20):
        acc.append(EPOCH, ["x"], 0)
        assert acc.num_completed_batches == 0, i


def test_append_larger_than_a_batch_raises_too_large_and_appends_nothing() -> None:
    """§1.10: larger than the max batch -> RecordBatchTooLargeException, nothing appended;
    a failed prepared append does not set the drain offset."""
    acc = make(max_size=200)
    acc.append(EPOCH, ["a"], 0)
    with pytest.raises(RecordBatchTooLargeError):
        acc.append(EPOCH, ["x" * 200], 1, delay_drain=True)
    with pytest.raises(RecordBatchTooLargeError):
        acc.append(EPOCH, ["x" * 40] * 4, 1, delay_drain=True)  # too large together
    assert acc.next_offset == BASE + 1
    assert acc.drain_offset is None
    assert acc.num_completed_batches == 0  # the open batch was not completed either
    [batch] = acc.drain()
    assert batch.records == ["a"]


def test_too_large_means_too_large_for_an_empty_batch() -> None:
    """§1.10: records that fit an empty batch are accepted even when, sized at the open
    batch's larger offset deltas, they would not (kraft is exact where Kafka estimates)."""
    max_size = 1000
    value_len = next(
        n for n in range(max_size) if RECORD_BATCH_OVERHEAD + record_size(n, 0) == max_size
    )
    assert RECORD_BATCH_OVERHEAD + record_size(value_len, 64) == max_size + 1
    acc: BatchAccumulator[bytes] = BatchAccumulator(EPOCH, BASE, 0, max_size, BytesSerde())
    acc.append(EPOCH, [b""] * 64, 0)  # the next record would sit at delta 64: 2 bytes
    assert acc.append(EPOCH, [bytes(value_len)], 0) == BASE + 64
    first, second = acc.drain()
    assert first.num_records == 64
    assert len(second.data) == second.size_in_bytes == max_size


def test_serde_runs_once_per_record_at_append_time() -> None:
    """§1.10 (BatchBuilder.appendRecord): each record is serialized once, when appended."""
    serde = TaggingSerde()
    acc: BatchAccumulator[bytes] = BatchAccumulator(EPOCH, BASE, LINGER_MS, 512, serde)
    acc.append(EPOCH, [b"a", b"b"], 0)
    acc.append(EPOCH, [b"c"], 0)
    assert serde.encoded == 3
    [batch] = acc.drain()
    assert serde.encoded == 3
    assert values_of(batch) == [(BASE, b"<a"), (BASE + 1, b"<b"), (BASE + 2, b"<c")]
    assert batch.records == [b"a", b"b", b"c"]


def test_a_serde_that_returns_no_bytes_is_refused_at_append() -> None:
    """§1.10 (serialize at append): a value that is not bytes fails its own append, before
    it can poison a batch."""

    class Bad:
        def encode(self, value: str) -> bytes:
            return bytearray(value.encode())  # type: ignore[return-value]

        def decode(self, data: bytes | memoryview) -> str:
            return bytes(data).decode()

    acc: BatchAccumulator[str] = BatchAccumulator(EPOCH, BASE, LINGER_MS, 512, Bad())
    for records in (["a"], ["a", "b"]):
        with pytest.raises(TypeError, match="bytearray"):
            acc.append(EPOCH, records, 0)
    assert acc.is_empty and acc.next_offset == BASE


def test_appended_records_are_copied() -> None:
    """§1.10 (BatchBuilder.records): the batch keeps its own list; changing the caller's list
    later changes nothing."""
    acc = make()
    records = ["a", "b"]
    acc.append(EPOCH, records, 0)
    records.append("c")
    [batch] = acc.drain()
    assert batch.records == ["a", "b"] and batch.num_records == 2


# -- batching and sizes ------------------------------------------------------------------------


def test_records_of_one_append_never_split_across_batches() -> None:
    """§2: "the records of one prepareAppend stay within one Batch"; §1.10: never split."""
    acc = make(max_size=256)
    groups = [[f"{g}-{i}" for i in range(g % 5 + 1)] for g in range(40)]
    spans = []
    for group in groups:
        last = acc.append(EPOCH, group, 0)
        spans.append((last - len(group) + 1, last))
    first_offsets = {first for first, _ in spans}
    last_offsets = {last for _, last in spans}
    batches = acc.drain()
    assert len(batches) > 1
    for batch in batches:
        assert batch.base_offset in first_offsets
        assert batch.last_offset in last_offsets
    assert [r for b in batches for r in b.records] == [r for g in groups for r in g]


def test_an_append_that_does_not_fit_completes_the_open_batch() -> None:
    """§1.10 (maybeAllocateBatch): no room -> complete the current batch, start a new one."""
    acc = make(max_size=120)
    acc.append(EPOCH, ["a" * 20], 0)
    acc.append(EPOCH, ["b" * 20], 0)
    assert acc.num_completed_batches == 0
    acc.append(EPOCH, ["c" * 20], 0)  # 61 + 3 * 27 > 120
    assert acc.num_completed_batches == 1
    first, second = acc.drain()
    assert first.records == ["a" * 20, "b" * 20]
    assert (first.base_offset, first.last_offset) == (BASE, BASE + 1)
    assert (second.base_offset, second.records) == (BASE + 2, ["c" * 20])


def test_max_batch_size_bounds_the_encoded_batch_exactly() -> None:
    """§1.10: a batch may fill to exactly max_batch_size_bytes, header included, and not a
    byte more; the accounted size is the length of the encoded bytes."""
    one = record_size(10, 0)
    max_size = RECORD_BATCH_OVERHEAD + 3 * one  # deltas 0..2 take one byte each
    acc: BatchAccumulator[bytes] = BatchAccumulator(EPOCH, 0, 0, max_size, BytesSerde())
    for _ in range(7):
        acc.append(EPOCH, [bytes(10)], 0)
    batches = acc.drain()
    assert [b.num_records for b in batches] == [3, 3, 1]
    assert [len(b.data) for b in batches] == [max_size, max_size, RECORD_BATCH_OVERHEAD + one]
    for batch in batches:
        assert batch.size_in_bytes == len(batch.data)


@pytest.mark.parametrize(
    ("value_lens", "first_delta"),
    [
        ([56, 57, 58, 59, 60], 0),  # record bodies cross 64 bytes: 1-byte to 2-byte prefix
        ([63, 64, 65], 0),  # value lengths cross the 1-byte varint
        ([0] * 130, 0),  # offset deltas cross 64
        ([8183, 8184, 8185, 8186, 8191, 8192, 8193], 0),  # bodies and lengths cross 8192
        ([1] * 40, 8180),  # deltas cross 8192
        ([70000], 0),  # beyond the size table
        ([3, 70000, 5, 100], 70),  # mixed bands: sized record by record
    ],
)
def test_size_accounting_is_exact_across_varint_widths(
    value_lens: list[int], first_delta: int
) -> None:
    """§1.13 record framing: the size predicted at append time equals len(data), whether
    the records come in one append or one at a time."""
    values = [bytes(n) for n in value_lens]
    for groups in ([values], [[v] for v in values]):
        acc: BatchAccumulator[bytes] = BatchAccumulator(EPOCH, 0, 0, 1 << 20, BytesSerde())
        if first_delta:
            acc.append(EPOCH, [b""] * first_delta, 0)
        for group in groups:
            acc.append(EPOCH, group, 0)
        acc.append(EPOCH, [b"tail"], 0)
        [batch] = acc.drain()
        assert batch.size_in_bytes == len(batch.data)
        assert batch.num_records == first_delta + len(value_lens) + 1


def test_drained_data_is_a_v2_batch_at_its_offsets_in_the_epoch() -> None:
    """§1.10/§1.13: drain hands the log ready v2 bytes: base offset, partition leader epoch,
    one record per value, CRC valid, not a control batch."""
    acc: BatchAccumulator[bytes] = BatchAccumulator(EPOCH, BASE, LINGER_MS, 512, BytesSerde())
    acc.append(EPOCH, [b"x", b"yy"], 5)
    [batch] = acc.drain()
    raw = only_batch(batch)
    assert (raw.base_offset, raw.last_offset, raw.epoch) == (BASE, BASE + 1, EPOCH)
    assert not raw.is_control and not batch.is_control
    assert (batch.base_offset, batch.last_offset, batch.epoch) == (BASE, BASE + 1, EPOCH)
    assert values_of(batch) == [(BASE, b"x"), (BASE + 1, b"yy")]
    assert batch.size_in_bytes == len(batch.data) == raw.size_in_bytes


def test_batch_timestamp_is_the_time_of_the_append_that_opened_it() -> None:
    """§1.10 (BatchBuilder appendTime): a batch is stamped when it is started, i.e. at its
    first append; every record carries that timestamp."""
    acc = make(max_size=120)
    acc.append(EPOCH, ["a" * 20], 1000)
    acc.append(EPOCH, ["b" * 20], 1007)
    acc.append(EPOCH, ["c" * 20], 1010)  # opens a new batch
    first, second = acc.drain()
    assert (first.append_timestamp_ms, second.append_timestamp_ms) == (1000, 1010)
    raw = only_batch(first)
    assert raw.base_timestamp == raw.max_timestamp == 1000
    assert {r.timestamp_ms for r in raw.records()} == {1000}


def test_completed_batch_is_frozen() -> None:
    """§1.10 CompletedBatch: an immutable value handed from the accumulator to the log."""
    acc = make()
    acc.append(EPOCH, ["a"], 0)
    [batch] = acc.drain()
    with pytest.raises(FrozenInstanceError):
        batch.base_offset = 3  # type: ignore[misc]


# -- linger and drain --------------------------------------------------------------------------


def test_empty_accumulator_never_needs_drain() -> None:
    """§1.10 (testLingerIgnoredIfAccumulatorEmpty): empty -> Long.MAX_VALUE, no drain."""
    acc = make()
    assert acc.is_empty
    assert acc.time_until_drain(0) == NOTHING_TO_DRAIN_MS
    assert not acc.needs_drain(10**9)
    assert acc.drain() == []


def test_linger_starts_at_the_first_append() -> None:
    """§1.10: "linger starts at the first append" (testLingerBeginsOnFirstWrite)."""
    acc = make()
    acc.append(EPOCH, ["a"], 15)
    assert acc.time_until_drain(15) == LINGER_MS
    assert not acc.is_empty
    acc.append(EPOCH, ["b"], 40)  # later appends do not restart it
    assert acc.time_until_drain(40) == LINGER_MS - 25
    assert not acc.needs_drain(15 + LINGER_MS - 1)
    assert acc.time_until_drain(15 + LINGER_MS) == 0
    assert acc.needs_drain(15 + LINGER_MS)
    assert acc.time_until_drain(10**6) == 0


def test_drain_stops_the_linger_and_the_next_append_restarts_it() -> None:
    """§1.10 (maybeCompleteDrain / maybeResetLinger): a drain stops the timer; the next
    append after it starts a new one."""
    acc = make()
    acc.append(EPOCH, ["a"], 0)
    assert len(acc.drain()) == 1
    assert acc.time_until_drain(LINGER_MS) == NOTHING_TO_DRAIN_MS
    acc.append(EPOCH, ["b"], 100)
    assert acc.time_until_drain(100) == LINGER_MS


def test_a_completed_batch_needs_drain_before_the_linger_expires() -> None:
    """§1.10: timeUntilDrain is 0 as soon as the head completed batch is drainable."""
    acc = make(max_size=120)
    acc.append(EPOCH, ["a" * 30], 0)
    assert acc.time_until_drain(0) == LINGER_MS
    acc.append(EPOCH, ["b" * 30], 0)  # does not fit: the first batch completes
    assert acc.num_completed_batches == 1
    assert acc.time_until_drain(0) == 0


def test_drain_completes_the_open_batch() -> None:
    """§1.10 (drain -> maybeCompleteDrain; testMultipleBatchAccumulation): drain completes
    the current batch whatever its linger and returns every batch in offset order."""
    acc = make(max_size=256)
    for _ in range(100):
        acc.append(EPOCH, ["foo"], 0)
    batches = acc.drain()
    assert len(batches) > 1
    assert all(len(b.data) <= 256 for b in batches)
    assert batches[0].base_offset == BASE
    for before, after in itertools.pairwise(batches):
        assert after.base_offset == before.last_offset + 1
    assert batches[-1].last_offset == BASE + 99
    assert acc.is_empty and acc.num_completed_batches == 0


def test_is_empty_is_exact() -> None:
    """§1.10 isEmpty: kraft's is exact -- no record held, open or completed (Kafka infers it
    from the linger timer)."""
    acc = make()
    acc.append(EPOCH, ["a"], 0, delay_drain=True)
    acc.drain()  # held back by the drain offset: the linger stopped, the record is still here
    assert not acc.is_empty
    assert acc.time_until_drain(0) == NOTHING_TO_DRAIN_MS
    acc.allow_drain()
    assert len(acc.drain()) == 1
    assert acc.is_empty


# -- prepared appends and the drain offset -----------------------------------------------------


def test_prepared_append_is_not_drained_until_allow_drain() -> None:
    """§1.10/§2: prepareAppend (delay_drain) holds its records back; schedulePreparedAppend
    (allow_drain) releases them (testDelayedDrain)."""
    acc = make(max_size=256)
    assert acc.append(EPOCH, ["a"], 0, delay_drain=True) == BASE
    assert acc.drain() == []
    assert acc.append(EPOCH, ["b", "c"], 0, delay_drain=True) == BASE + 2
    assert acc.drain() == []
    assert acc.append(EPOCH, ["d", "e", "f"], 0, delay_drain=True) == BASE + 5
    assert acc.drain() == []
    assert not acc.needs_drain(10**6)
    assert acc.num_completed_batches == 3
    acc.allow_drain()
    assert acc.needs_drain(0) and acc.time_until_drain(0) == 0
    batches = acc.drain()
    assert [b.records for b in batches] == [["a"], ["b", "c"], ["d", "e", "f"]]


def test_only_the_first_prepared_append_sets_the_drain_offset() -> None:
    """§1.10: CAS drainOffset from MAX to nextOffset -- a second prepared append leaves it."""
    acc = make()
    acc.append(EPOCH, ["a"], 0)
    acc.append(EPOCH, ["b"], 0, delay_drain=True)
    assert acc.drain_offset == BASE + 1
    acc.append(EPOCH, ["c"], 0, delay_drain=True)
    assert acc.drain_offset == BASE + 1


def test_allow_drain_releases_every_prepared_append() -> None:
    """§1.10: allowDrain sets drainOffset to MAX, whichever prepared appends are pending."""
    acc = make(max_size=100)
    acc.append(EPOCH, ["a" * 20], 0, delay_drain=True)
    acc.append(EPOCH, ["b" * 20], 0, delay_drain=True)
    acc.append(EPOCH, ["c" * 20], 0, delay_drain=True)
    assert acc.drain() == []
    acc.allow_drain()
    assert acc.drain_offset is None
    assert [b.records for b in acc.drain()] == [["a" * 20], ["b" * 20], ["c" * 20]]


def test_batches_below_the_drain_offset_drain_normally() -> None:
    """§1.10: drain returns the batches whose last offset is below drainOffset."""
    acc = make(max_size=100)
    acc.append(EPOCH, ["a" * 20], 0)
    acc.append(EPOCH, ["b" * 20], 0)  # completes batch 1
    acc.append(EPOCH, ["c" * 20], 0, delay_drain=True)  # completes batch 2, holds batch 3
    batches = acc.drain()
    assert [b.records for b in batches] == [["a" * 20], ["b" * 20]]
    assert acc.num_completed_batches == 1


def test_a_prepared_append_holds_back_the_records_that_share_its_batch() -> None:
    """§1.10: a batch drains only once its last offset is below the drain offset."""
    acc = make()
    acc.append(EPOCH, ["a"], 0)
    acc.append(EPOCH, ["b"], 0, delay_drain=True)
    assert acc.drain() == []
    acc.allow_drain()
    [batch] = acc.drain()
    assert batch.records == ["a", "b"]


def test_batches_held_by_the_drain_offset_do_not_wake_the_poll_thread() -> None:
    """§1.10: after a drain the linger is stopped, so held batches (waiting for allowDrain,
    not for time) do not make timeUntilDrain 0 -- no busy poll loop."""
    acc = make()
    acc.append(EPOCH, ["a"], 0, delay_drain=True)
    assert acc.time_until_drain(LINGER_MS) == 0  # the linger expired: drain once
    assert acc.drain() == []
    assert acc.time_until_drain(LINGER_MS) == NOTHING_TO_DRAIN_MS
    acc.append(EPOCH, ["b"], 60)  # after the drain offset: starts a linger, cannot drain
    assert acc.time_until_drain(60) == LINGER_MS
    assert acc.drain() == []
    assert acc.time_until_drain(10**6) == NOTHING_TO_DRAIN_MS


# -- control batches ---------------------------------------------------------------------------


def test_append_control_messages_completes_pending_data_first() -> None:
    """§1.10 (appendControlMessages -> forceDrain; testForceDrainBeforeAppendLeader-
    ChangeMessage): open data is completed first, the control batch follows it."""
    acc = make()
    assert acc.append(EPOCH, ["a", "b"], 0) == BASE + 1
    last = acc.append_control_messages([LeaderChangeMessage(leader_id=1)], 5)
    assert last == BASE + 2
    assert acc.needs_drain(5)
    data, control = acc.drain()
    assert data.records == ["a", "b"] and not data.is_control
    assert (control.base_offset, control.last_offset, control.is_control) == (BASE + 2,) * 2 + (
        True,
    )


def test_append_control_messages_adds_one_control_batch_and_returns_its_last_offset() -> None:
    """§1.10: one control batch with >= 1 record (testMultipleControlRecords); records is
    empty, num_records counts the control records; the data is a control v2 batch."""
    acc = make()
    messages: list[ControlMessage] = [
        LeaderChangeMessage(leader_id=1, voters=(LeaderChangeVoter(1),)),
        KRaftVersionRecord(kraft_version=1),
        SnapshotFooterRecord(),
    ]
    assert acc.append_control_messages(messages, 1234) == BASE + 2
    assert acc.next_offset == BASE + 3
    [batch] = acc.drain()
    assert (batch.base_offset, batch.last_offset, batch.num_records) == (BASE, BASE + 2, 3)
    assert batch.records == [] and batch.is_control and batch.epoch == EPOCH
    assert batch.append_timestamp_ms == 1234
    assert batch.size_in_bytes == len(batch.data)
    raw = only_batch(batch)
    assert raw.is_control and raw.epoch == EPOCH and raw.base_offset == BASE
    assert control_records(raw) == [
        (ControlRecordType.LEADER_CHANGE, messages[0]),
        (ControlRecordType.KRAFT_VERSION, messages[1]),
        (ControlRecordType.SNAPSHOT_FOOTER, messages[2]),
    ]


def test_control_batch_drains_at_once_and_stops_the_linger() -> None:
    """§1.10 (testLeaderChangeMessageWritten): a control batch needs a drain at once; after
    forceDrain the linger clock starts again only with the next append."""
    acc = make()
    acc.append_control_messages([LeaderChangeMessage()], 0)
    assert acc.time_until_drain(0) == 0
    assert len(acc.drain()) == 1
    assert acc.time_until_drain(0) == NOTHING_TO_DRAIN_MS


def test_control_batch_waits_behind_a_prepared_append() -> None:
    """§1.10: appendControlMessages respects the drain offset like any completed batch."""
    acc = make()
    acc.append(EPOCH, ["a"], 0)
    acc.append(EPOCH, ["b"], 0, delay_drain=True)
    acc.append_control_messages([LeaderChangeMessage()], 0)
    assert acc.drain() == []
    assert acc.time_until_drain(0) == NOTHING_TO_DRAIN_MS
    acc.allow_drain()
    data, control = acc.drain()
    assert data.records == ["a", "b"] and control.is_control


def test_control_batch_completed_before_a_prepared_append_still_drains() -> None:
    """§1.10: the drain offset only holds what is at or after it."""
    acc = make()
    acc.append_control_messages([LeaderChangeMessage()], 0)
    acc.append(EPOCH, ["a"], 0, delay_drain=True)
    [control] = acc.drain()
    assert control.is_control


def test_append_control_messages_needs_a_message() -> None:
    """§1.10: a control batch has at least one record (testEmptyControlBatch)."""
    acc = make()
    with pytest.raises(ValueError):
        acc.append_control_messages([], 0)
    assert acc.next_offset == BASE and acc.is_empty


def test_append_control_messages_ignores_max_batches() -> None:
    """§1.10: appendControlMessages has no maxBatches check -- a new leader's LeaderChange
    record is always accepted."""
    acc = make(max_batches=1)
    acc.append(EPOCH, ["a"], 0, delay_drain=True)
    acc.drain()
    assert acc.num_completed_batches == 1
    acc.append_control_messages([LeaderChangeMessage()], 0)
    assert acc.num_completed_batches == 2


def test_control_batch_larger_than_a_batch_raises_too_large() -> None:
    """§1.10 (appendControlMessages allocates maxBatchSize): a control batch is bounded by
    max_batch_size_bytes too; nothing is appended."""
    acc = make(max_size=80)
    acc.append(EPOCH, ["a"], 0)
    voters = tuple(LeaderChangeVoter(i) for i in range(20))
    with pytest.raises(RecordBatchTooLargeError):
        acc.append_control_messages([LeaderChangeMessage(voters=voters)], 0)
    assert acc.next_offset == BASE + 1
    assert acc.num_completed_batches == 0  # the open batch was not force-completed
    assert acc.time_until_drain(0) == LINGER_MS


# -- close ---------------------------------------------------------------------------------------


def test_close_drops_every_undrained_record() -> None:
    """§1.10: "closed when leadership ends, which drops unflushed appends"."""
    acc = make(max_size=100)
    acc.append(EPOCH, ["a" * 20], 0)
    acc.append(EPOCH, ["b" * 20], 0, delay_drain=True)
    acc.append(EPOCH, ["c" * 20], 0)
    acc.close()
    assert acc.is_closed and acc.is_empty and acc.num_completed_batches == 0
    assert acc.time_until_drain(0) == NOTHING_TO_DRAIN_MS
    assert not acc.needs_drain(10**6)


def test_calls_after_close_raise_not_leader() -> None:
    """NotLeaderError when no longer the leader; close is idempotent."""
    acc = make()
    acc.close()
    acc.close()
    with pytest.raises(NotLeaderError):
        acc.append(EPOCH, ["a"], 0)
    with pytest.raises(NotLeaderError):
        acc.append_control_messages([LeaderChangeMessage()], 0)
    with pytest.raises(NotLeaderError):
        acc.allow_drain()
    with pytest.raises(NotLeaderError):
        acc.drain()
    assert acc.next_offset == BASE


# -- construction, locking, sans-IO ------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epoch": -1},
        {"base": -1},
        {"linger_ms": -1},
        {"max_size": RECORD_BATCH_OVERHEAD},
        {"max_size": 2**31},
        {"max_batches": 0},
    ],
)
def test_constructor_rejects_a_bad_configuration(kwargs: dict[str, int]) -> None:
    """§1.10 (one per epoch: epoch, base offset, linger, max batch, max batches): a bad
    configuration fails when the accumulator is built, not at the first append."""
    with pytest.raises(ValueError):
        make(**kwargs)


class StrictLock:
    """A non-reentrant lock that fails loudly where ``threading.Lock`` would deadlock."""

    def __init__(self) -> None:
        self.held = False
        self.acquired = 0

    def __enter__(self) -> None:
        assert not self.held, "lock re-entered: threading.Lock would deadlock"
        self.held = True
        self.acquired += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.held = False


def test_public_calls_take_the_lock_once_and_the_serde_runs_outside_it() -> None:
    """§1.10 (Kafka's appendLock): appends come from user threads, drains from the raft thread. The
    lock is never re-entered (threading.Lock is not reentrant), and the serde runs before it
    is taken, so a slow serde never blocks the raft thread."""
    lock = StrictLock()

    class LockCheckingSerde:
        def encode(self, value: bytes) -> bytes:
            assert not lock.held
            return value

        def decode(self, data: bytes | memoryview) -> bytes:
            return bytes(data)

    acc: BatchAccumulator[bytes] = BatchAccumulator(
        EPOCH, BASE, LINGER_MS, 100, LockCheckingSerde(), lock=lock
    )
    calls: list[Callable[[], object]] = [
        lambda: acc.append(EPOCH, [b"a" * 20], 0),
        lambda: acc.append(EPOCH, [b"b" * 20, b"c"], 0, delay_drain=True),
        lambda: acc.time_until_drain(0),
        lambda: acc.needs_drain(0),
        lambda: acc.is_empty,
        acc.drain,
        acc.allow_drain,
        lambda: acc.append_control_messages([LeaderChangeMessage()], 0),
        acc.drain,
        acc.close,
    ]
    for call in calls:
        before = lock.acquired
        call()
        assert lock.acquired == before + 1
        assert not lock.held


def test_concurrent_appends_and_drains_under_a_threading_lock() -> None:
    """§1.10/§2: with the runtime's threading.Lock, appends from several threads and drains from
    another lose nothing, duplicate nothing and keep each append within one batch."""
    acc: BatchAccumulator[bytes] = BatchAccumulator(
        EPOCH, 0, 0, 300, BytesSerde(), max_batches=10**9, lock=threading.Lock()
    )
    appends_per_thread = 300
    spans: list[tuple[int, int]] = []
    spans_lock = threading.Lock()

    def appender(thread: int) -> None:
        for i in range(appends_per_thread):
            group = [b"%d/%d/%d" % (thread, i, j) for j in range(i % 3 + 1)]
            last = acc.append(EPOCH, group, 0, delay_drain=i % 7 == 0)
            if i % 7 == 0:
                acc.allow_drain()
            with spans_lock:
                spans.append((last - len(group) + 1, last))

    threads = [threading.Thread(target=appender, args=(t,)) for t in range(4)]
    drained: list[CompletedBatch[bytes]] = []
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        drained.extend(acc.drain())
    for t in threads:
        t.join()
    acc.allow_drain()
    drained.extend(acc.drain())

    total = sum(last - first + 1 for first, last in spans)
    assert [r for b in drained for r in range(b.base_offset, b.last_offset + 1)] == list(
        range(total)
    )
    starts = {first for first, _ in spans}
    ends = {last for _, last in spans}
    for batch in drained:
        assert batch.base_offset in starts and batch.last_offset in ends
        assert values_of(batch) == list(
            zip(range(batch.base_offset, batch.last_offset + 1), batch.records, strict=True)
        )


def test_the_accumulator_is_sans_io() -> None:
    """The core imports no threading, time, trio, socket or global random."""
    tree = ast.parse(Path(accumulator_module.__file__).read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"threading", "time", "trio", "socket", "random", "asyncio"}


# -- the model -----------------------------------------------------------------------------------

RECORDS = st.lists(st.binary(max_size=30), min_size=1, max_size=5) | st.lists(
    st.binary(max_size=200), min_size=1, max_size=2
)
CONTROL_MESSAGES = st.lists(
    st.sampled_from(
        [
            LeaderChangeMessage(leader_id=1, voters=(LeaderChangeVoter(1), LeaderChangeVoter(2))),
            KRaftVersionRecord(kraft_version=1),
            SnapshotFooterRecord(),
        ]
    ),
    min_size=1,
    max_size=3,
)


class AccumulatorMachine(RuleBasedStateMachine):
    """Every public call against a plain model: a list of appended units (one per successful
    append), the drain offset, the linger start and what has been drained so far.

    After every drain: batches are contiguous from the last drained offset, never split an
    append, respect the maximum size (the size predicted equals the encoded length) and the
    drain offset, and decode to the serde's bytes at the right offsets in the right epoch.
    """

    def __init__(self) -> None:
        super().__init__()
        self.serde = TaggingSerde()
        self.now_ms = 1000
        self.next_offset = BASE
        self.drained_until = BASE  # every offset below it has been drained
        self.drain_offset: int | None = None
        self.linger_start_ms: int | None = None
        self.closed = False
        # offset -> (encoded value or None for control, user record, control message or None)
        self.by_offset: dict[int, tuple[bytes | None, bytes | None, ControlMessage | None]] = {}
        self.unit_starts: dict[int, int] = {}  # first offset of an append -> its time
        self.unit_ends: set[int] = set()
        self.control_units: set[int] = set()
        # (first undrained offset, drain offset) when a drain stopped before the drain offset:
        # that batch was completed holding records up to the drain offset.
        self.held: tuple[int, int] | None = None

    @initialize(
        max_size=st.sampled_from([120, 250, 600, 2000]),
        max_batches=st.sampled_from([1, 3, 10]),
        linger_ms=st.sampled_from([0, 5, 20]),
    )
    def start(self, max_size: int, max_batches: int, linger_ms: int) -> None:
        self.max_size = max_size
        self.max_batches = max_batches
        self.linger_ms = linger_ms
        self.acc: BatchAccumulator[bytes] = BatchAccumulator(
            EPOCH, BASE, linger_ms, max_size, self.serde, max_batches=max_batches
        )

    # -- rules -----------------------------------------------------------------------------
    def _append(self, records: list[bytes], epoch: int, delay_drain: bool) -> None:
        encoded_before = self.serde.encoded
        values = [b"<" + r for r in records]
        expected: type[Exception] | None = None
        if self.closed or epoch < EPOCH:
            expected = NotLeaderError
        elif epoch > EPOCH:
            expected = ValueError
        elif self.acc.num_completed_batches >= self.max_batches:
            expected = BufferAllocationError
        elif len(encode_batch(0, EPOCH, values, timestamp_ms=0)) > self.max_size:
            expected = RecordBatchTooLargeError
        event(f"append: {'ok' if expected is None else expected.__name__}")
        if expected is not None:
            with pytest.raises(expected):
                self.acc.append(epoch, records, self.now_ms, delay_drain=delay_drain)
            return
        last = self.acc.append(epoch, records, self.now_ms, delay_drain=delay_drain)
        first = self.next_offset
        assert last == first + len(records) - 1
        assert self.serde.encoded == encoded_before + len(records)
        for offset, (record, value) in enumerate(zip(records, values, strict=True), first):
            self.by_offset[offset] = (value, record, None)
        self.unit_starts[first] = self.now_ms
        self.unit_ends.add(last)
        if delay_drain and self.drain_offset is None:
            self.drain_offset = first
        if self.linger_start_ms is None:
            self.linger_start_ms = self.now_ms
        self.next_offset = last + 1

    @rule(records=RECORDS)
    def append(self, records: list[bytes]) -> None:
        self._append(records, EPOCH, delay_drain=False)

    @rule(records=RECORDS)
    def prepare_append(self, records: list[bytes]) -> None:
        """Kafka's prepareAppend: append(delay_drain=True)."""
        self._append(records, EPOCH, delay_drain=True)

    @rule(records=RECORDS, epoch=st.sampled_from([EPOCH - 1, EPOCH + 1]), delay=st.booleans())
    def append_in_another_epoch(self, records: list[bytes], epoch: int, delay: bool) -> None:
        self._append(records, epoch, delay)

    @rule(count=st.integers(20, 90), size=st.integers(0, 3), delay_drain=st.booleans())
    def append_many_small(self, count: int, size: int, delay_drain: bool) -> None:
        """Many records in one append: offset deltas past 64, large single appends."""
        self._append([bytes([count % 256]) * size] * count, EPOCH, delay_drain)

    @rule(messages=CONTROL_MESSAGES)
    def append_control(self, messages: list[ControlMessage]) -> None:
        if self.closed:
            with pytest.raises(NotLeaderError):
                self.acc.append_control_messages(messages, self.now_ms)
            return
        first = self.next_offset
        if len(control_batch(first, EPOCH, messages, timestamp_ms=0)) > self.max_size:
            with pytest.raises(RecordBatchTooLargeError):
                self.acc.append_control_messages(messages, self.now_ms)
            return
        last = self.acc.append_control_messages(messages, self.now_ms)
        assert last == first + len(messages) - 1
        for offset, message in enumerate(messages, first):
            self.by_offset[offset] = (None, None, message)
        self.unit_starts[first] = self.now_ms
        self.unit_ends.add(last)
        self.control_units.add(first)
        self.linger_start_ms = None  # forceDrain stops the linger
        self.next_offset = last + 1

    @rule()
    def allow_drain(self) -> None:
        if self.closed:
            with pytest.raises(NotLeaderError):
                self.acc.allow_drain()
            return
        self.acc.allow_drain()
        self.drain_offset = None

    @rule(ms=st.integers(0, 25))
    def advance_clock(self, ms: int) -> None:
        self.now_ms += ms

    @rule()
    def drain(self) -> None:
        if self.closed:
            with pytest.raises(NotLeaderError):
                self.acc.drain()
            return
        batches = self.acc.drain()
        event(
            f"drain: {min(len(batches), 3)} batch(es), drain offset set: {bool(self.drain_offset)}"
        )
        for batch in batches:
            self.check_batch(batch)
        self.linger_start_ms = None
        if self.drain_offset is None:
            assert self.drained_until == self.next_offset, "drain left records behind"
        else:
            assert self.drained_until <= self.drain_offset
            if self.drained_until < self.drain_offset:
                self.held = (self.drained_until, self.drain_offset)

    def check_batch(self, batch: CompletedBatch[bytes]) -> None:
        base, last = batch.base_offset, batch.last_offset
        assert base == self.drained_until, "drained batches are contiguous"
        assert base in self.unit_starts and last in self.unit_ends, "an append was split"
        assert batch.num_records == last - base + 1
        if self.drain_offset is not None:
            assert last < self.drain_offset, "drained past the drain offset"
        if self.held is not None and self.held[0] == base:
            event("drained a batch that a drain offset held back")
            assert last >= self.held[1], "drain stopped early"
            self.held = None
        assert batch.size_in_bytes == len(batch.data) <= self.max_size
        if batch.num_records > 64:
            event("batch with offset deltas past 64")
        assert batch.epoch == EPOCH
        assert batch.append_timestamp_ms == self.unit_starts[base]
        raw = only_batch(batch)
        assert (raw.base_offset, raw.last_offset, raw.epoch) == (base, last, EPOCH)
        assert raw.is_control == batch.is_control == (base in self.control_units)
        decoded = raw.records()
        assert [r.offset for r in decoded] == list(range(base, last + 1))
        assert {r.timestamp_ms for r in decoded} == {batch.append_timestamp_ms}
        expected = [self.by_offset[o] for o in range(base, last + 1)]
        if batch.is_control:
            assert base + batch.num_records - 1 in self.unit_ends
            assert batch.records == []
            assert [m for _, m in control_records(raw)] == [m for _, _, m in expected]
        else:
            assert [r.value for r in decoded] == [v for v, _, _ in expected]
            assert batch.records == [r for _, r, _ in expected]
        self.drained_until = last + 1

    @rule(really=st.sampled_from([False, False, False, True]))
    def close(self, really: bool) -> None:
        """Leadership ends (rarely: everything after it only checks NotLeaderError)."""
        if not really:
            return
        self.acc.close()
        assert self.acc.is_closed
        self.closed = True
        self.drain_offset = None
        self.linger_start_ms = None
        self.held = None

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def offsets_and_drain_offset_match_the_model(self) -> None:
        assert self.acc.next_offset == self.next_offset
        assert self.acc.drain_offset == self.drain_offset
        pending = not self.closed and self.drained_until < self.next_offset
        assert self.acc.is_empty == (not pending)

    @invariant()
    def time_until_drain_matches_the_model(self) -> None:
        now = self.now_ms
        wait = self.acc.time_until_drain(now)
        assert self.acc.needs_drain(now) == (wait == 0)
        pending = not self.closed and self.drained_until < self.next_offset
        if not pending:
            assert wait == NOTHING_TO_DRAIN_MS
            return
        linger = (
            NOTHING_TO_DRAIN_MS
            if self.linger_start_ms is None
            else max(0, self.linger_start_ms + self.linger_ms - now)
        )
        # 0 when the head completed batch may drain, else the linger; which of the two the
        # model cannot always say, except when the drain offset holds the head back or
        # nothing holds anything back.
        assert wait in (0, linger)
        if self.drain_offset is not None and self.drained_until >= self.drain_offset:
            assert wait == linger
        if self.drain_offset is None and self.linger_start_ms is None:
            assert wait == 0


TestAccumulatorModel = AccumulatorMachine.TestCase
TestAccumulatorModel.settings = settings(
    max_examples=200,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
