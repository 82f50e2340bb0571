"""Snapshots in the log (KIP-630, docs/snapshots.md), on ``MemoryLog`` and
``FileLog`` alike: creating, freezing, reading and deleting snapshots, moving the log start up
to one, emptying the log onto a downloaded one, the snapshot cases of
``validate_offset_and_epoch``, and the retention cleaner.

The invariants the stateful test checks after every step are those of Kafka's
``RaftEventSimulationTest`` (``ConsistentLogStartOffset``): the log starts at or below its
earliest snapshot, at it once the start has moved past 0, and the earliest snapshot validates.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from kraft import BytesSerde
from kraft.errors import InvalidAppendError
from kraft.log import FileLog, Isolation, MemoryLog, OffsetAndEpoch, ValidOffsetAndEpoch
from kraft.log.base import SnapshotRetention
from kraft.record import iter_batches
from kraft.snapshot import RawSnapshotReader, RawSnapshotWriter, SnapshotReader, SnapshotWriter

SEGMENT_BYTES = 1024
TIMESTAMP_MS = 1_700_000_000_000
NO_RETENTION = SnapshotRetention(retained_snapshots=1000, retention_bytes=None, retention_ms=None)

AnyLog = MemoryLog | FileLog
MakeLog = Callable[..., AnyLog]


@pytest.fixture(params=["memory", "file"])
def make_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeLog]:
    """A factory of empty logs of one kind; ``retention`` defaults to never cleaning."""
    opened: list[FileLog] = []

    def make(retention: SnapshotRetention = NO_RETENTION) -> AnyLog:
        if request.param == "memory":
            return MemoryLog(retention)
        log = FileLog.open(
            tmp_path / f"log-{len(opened)}",
            segment_bytes=SEGMENT_BYTES,
            index_interval_bytes=64,
            retention=retention,
        )
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()


@pytest.fixture
def log(make_log: MakeLog) -> AnyLog:
    return make_log()


def value(offset: int) -> bytes:
    return f"record-{offset}".encode()


def fill(log: AnyLog, batches: int, *, epoch: int = 1, records: int = 2) -> None:
    """Append ``batches`` leader batches of ``records`` records each at ``epoch``."""
    for _ in range(batches):
        base = log.log_end_offset
        log.append_as_leader(
            [value(base + i) for i in range(records)], epoch, timestamp_ms=TIMESTAMP_MS
        )


def snapshot(
    log: AnyLog, offset: int, epoch: int, *, timestamp_ms: int = 0, state: bytes = b"state"
) -> RawSnapshotReader:
    """Create, write and freeze snapshot ``(offset, epoch)`` through ``create_new_snapshot``."""
    return _freeze(log, log.create_new_snapshot(OffsetAndEpoch(offset, epoch)), timestamp_ms, state)


def downloaded(
    log: AnyLog, offset: int, epoch: int, *, timestamp_ms: int = 0, state: bytes = b"state"
) -> RawSnapshotReader:
    """Create, write and freeze snapshot ``(offset, epoch)`` as a follower's download would."""
    return _freeze(
        log, log.create_new_snapshot_unchecked(OffsetAndEpoch(offset, epoch)), timestamp_ms, state
    )


def _freeze(
    log: AnyLog, raw: RawSnapshotWriter | None, timestamp_ms: int, state: bytes
) -> RawSnapshotReader:
    assert raw is not None
    writer = SnapshotWriter(
        raw, BytesSerde(), last_contained_log_timestamp_ms=timestamp_ms, timestamp_ms=timestamp_ms
    )
    writer.append([state])
    writer.freeze()
    reader = log.read_snapshot(raw.snapshot_id)
    assert reader is not None
    return reader


def snapshot_state(reader: RawSnapshotReader) -> list[bytes]:
    with SnapshotReader(reader, BytesSerde()) as typed:
        return [r for batch in typed for r in batch.records]


def read_values(log: AnyLog, start: int) -> dict[int, bytes]:
    """Every record from the batch holding ``start`` to the LEO, by offset."""
    data = log.read(start, Isolation.UNCOMMITTED, 1 << 30).records
    out = {}
    for batch in iter_batches(data):
        for i, record in enumerate(batch.records()):
            assert record.value is not None
            out[batch.base_offset + i] = bytes(record.value)
    return out


def check_start_invariants(log: AnyLog) -> None:
    """Kafka's ConsistentLogStartOffset, plus: nothing older than the earliest snapshot."""
    earliest = log.earliest_snapshot_id
    start = log.log_start_offset
    if earliest is None:
        assert start == 0, f"the log starts at {start} with no snapshot"
        return
    assert start <= earliest.offset
    if start > 0:
        assert earliest.offset == start, f"no snapshot at the log start {start}"
    assert log.validate_offset_and_epoch(*earliest) == ValidOffsetAndEpoch.valid(earliest)
    assert log.snapshot_ids() == sorted(log.snapshot_ids())
    assert log.latest_snapshot_id == log.snapshot_ids()[-1]


# -- create_new_snapshot ---------------------------------------------------------------------


def test_a_snapshot_becomes_visible_when_its_writer_freezes(log: AnyLog) -> None:
    fill(log, 4)
    log.update_high_watermark(8)
    raw = log.create_new_snapshot(OffsetAndEpoch(4, 1))
    assert raw is not None
    writer = SnapshotWriter(raw, BytesSerde(), last_contained_log_timestamp_ms=7, timestamp_ms=9)
    writer.append([b"a", b"b"])
    assert log.read_snapshot(OffsetAndEpoch(4, 1)) is None
    assert log.snapshot_ids() == []
    assert (log.latest_snapshot_id, log.earliest_snapshot_id) == (None, None)
    size = writer.freeze()
    sid = OffsetAndEpoch(4, 1)
    assert log.latest_snapshot_id == log.earliest_snapshot_id == sid
    assert log.snapshot_ids() == [sid]
    reader = log.read_snapshot(sid)
    assert reader is not None and reader.size_in_bytes == size
    latest = log.latest_snapshot()
    assert latest is not None and latest.snapshot_id == sid
    assert snapshot_state(reader) == [b"a", b"b"]
    # A snapshot does not move the log start, and the log reads as before.
    assert log.log_start_offset == 0
    assert read_values(log, 0) == {i: value(i) for i in range(8)}


def test_snapshot_ids_are_sorted_by_offset_whatever_the_creation_order(log: AnyLog) -> None:
    fill(log, 3, epoch=1)
    fill(log, 3, epoch=2)
    log.update_high_watermark(12)
    for offset, epoch in [(6, 1), (2, 1), (10, 2), (8, 2)]:
        snapshot(log, offset, epoch)
    ids = [OffsetAndEpoch(2, 1), OffsetAndEpoch(6, 1), OffsetAndEpoch(8, 2), OffsetAndEpoch(10, 2)]
    assert log.snapshot_ids() == ids
    assert log.earliest_snapshot_id == ids[0]
    assert log.latest_snapshot_id == ids[-1]


def test_a_snapshot_of_an_epoch_older_than_the_earliest_snapshot_is_refused(
    log: AnyLog,
) -> None:
    """Kafka's createNewSnapshot: the id must VALIDATE, and rule 2 sends an epoch older than
    the earliest snapshot's to the latest snapshot."""
    fill(log, 3, epoch=1)
    fill(log, 3, epoch=2)
    log.update_high_watermark(12)
    snapshot(log, 10, 2)
    with pytest.raises(ValueError):
        log.create_new_snapshot(OffsetAndEpoch(4, 1))
    assert log.snapshot_ids() == [OffsetAndEpoch(10, 2)]


def test_an_abandoned_writer_registers_nothing_and_the_id_can_be_written_again(
    log: AnyLog,
) -> None:
    fill(log, 2)
    log.update_high_watermark(4)
    raw = log.create_new_snapshot(OffsetAndEpoch(4, 1))
    assert raw is not None
    with SnapshotWriter(
        raw, BytesSerde(), last_contained_log_timestamp_ms=0, timestamp_ms=0
    ) as writer:
        writer.append([b"half"])
    assert log.snapshot_ids() == []
    snapshot(log, 4, 1, state=b"whole")
    reader = log.read_snapshot(OffsetAndEpoch(4, 1))
    assert reader is not None and snapshot_state(reader) == [b"whole"]


def test_create_new_snapshot_is_none_when_it_exists(log: AnyLog) -> None:
    fill(log, 2)
    log.update_high_watermark(4)
    snapshot(log, 4, 1)
    assert log.create_new_snapshot(OffsetAndEpoch(4, 1)) is None
    assert log.create_new_snapshot_unchecked(OffsetAndEpoch(4, 1)) is None


def test_create_new_snapshot_is_none_below_the_log_start(log: AnyLog) -> None:
    fill(log, 4)
    log.update_high_watermark(8)
    snapshot(log, 6, 1)
    assert log.delete_before_snapshot(OffsetAndEpoch(6, 1))
    assert log.create_new_snapshot(OffsetAndEpoch(4, 1)) is None
    assert log.create_new_snapshot(OffsetAndEpoch(2, 1)) is None
    assert log.snapshot_ids() == [OffsetAndEpoch(6, 1)]


@pytest.mark.parametrize("offset", [5, 6, 9])
def test_create_new_snapshot_above_the_high_watermark_is_a_value_error(
    log: AnyLog, offset: int
) -> None:
    fill(log, 4)
    log.update_high_watermark(4)
    with pytest.raises(ValueError, match="high watermark"):
        log.create_new_snapshot(OffsetAndEpoch(offset, 1))
    assert log.snapshot_ids() == []


@pytest.mark.parametrize("offset", [1, 3, 5])
def test_create_new_snapshot_off_a_batch_boundary_is_a_value_error(
    log: AnyLog, offset: int
) -> None:
    """Snapshot ids must be batch-aligned (Kafka's ``ReplicatedLog.createNewSnapshot``)."""
    fill(log, 3)  # batches [0,2), [2,4), [4,6)
    log.update_high_watermark(6)
    with pytest.raises(ValueError):
        log.create_new_snapshot(OffsetAndEpoch(offset, 1))
    assert log.snapshot_ids() == []


@pytest.mark.parametrize(
    ("offset", "epoch"),
    [
        (4, 2),  # the record at 3 has epoch 1; 2 starts at 4
        (2, 2),
        (6, 1),  # the record at 5 has epoch 2
        (6, 3),  # an epoch the log never had
        (8, 5),
        (4, 0),
    ],
)
def test_create_new_snapshot_with_the_wrong_epoch_is_a_value_error(
    log: AnyLog, offset: int, epoch: int
) -> None:
    fill(log, 2, epoch=1)  # [0,4) epoch 1
    fill(log, 2, epoch=2)  # [4,8) epoch 2
    log.update_high_watermark(8)
    with pytest.raises(ValueError):
        log.create_new_snapshot(OffsetAndEpoch(offset, epoch))
    assert log.snapshot_ids() == []


@pytest.mark.parametrize(("offset", "epoch"), [(2, 1), (4, 1), (6, 2), (8, 2)])
def test_create_new_snapshot_at_a_batch_boundary_with_the_records_epoch(
    log: AnyLog, offset: int, epoch: int
) -> None:
    fill(log, 2, epoch=1)
    fill(log, 2, epoch=2)
    log.update_high_watermark(8)
    snapshot(log, offset, epoch)
    assert log.snapshot_ids() == [OffsetAndEpoch(offset, epoch)]


def test_a_snapshot_at_the_end_of_an_epoch_survives_a_new_leader_epoch(log: AnyLog) -> None:
    """``initialize_leader_epoch`` puts an epoch at the LEO with no record: the record before
    the LEO still has the old epoch."""
    fill(log, 2, epoch=1)
    log.update_high_watermark(4)
    log.initialize_leader_epoch(3)
    with pytest.raises(ValueError):
        log.create_new_snapshot(OffsetAndEpoch(4, 3))
    snapshot(log, 4, 1)
    assert log.latest_snapshot_id == OffsetAndEpoch(4, 1)


# -- create_new_snapshot_unchecked -----------------------------------------------------------


def test_create_new_snapshot_unchecked_takes_a_snapshot_past_the_log(log: AnyLog) -> None:
    fill(log, 2, epoch=1)
    log.update_high_watermark(2)
    reader = downloaded(log, 101, 7, state=b"leader's")
    sid = OffsetAndEpoch(101, 7)
    assert log.latest_snapshot_id == sid
    assert reader.snapshot_id == sid
    assert snapshot_state(reader) == [b"leader's"]
    # Registering a snapshot changes nothing else until the log is truncated onto it.
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 4, 2)


# -- delete_before_snapshot ------------------------------------------------------------------


def epochs_1_2_3(log: AnyLog) -> None:
    """Epoch 1 at [0,4), 2 at [4,8), 3 at [8,16); everything committed."""
    fill(log, 2, epoch=1)
    fill(log, 2, epoch=2)
    fill(log, 4, epoch=3)
    log.update_high_watermark(16)


def test_delete_before_snapshot_moves_the_log_start_and_drops_older_snapshots(
    log: AnyLog,
) -> None:
    epochs_1_2_3(log)
    for offset, epoch in [(2, 1), (4, 1), (8, 2), (12, 3)]:
        snapshot(log, offset, epoch)
    assert log.delete_before_snapshot(OffsetAndEpoch(8, 2))
    assert log.log_start_offset == 8
    assert log.log_end_offset == 16
    assert log.snapshot_ids() == [OffsetAndEpoch(8, 2), OffsetAndEpoch(12, 3)]
    assert log.read_snapshot(OffsetAndEpoch(4, 1)) is None
    assert log.read_snapshot(OffsetAndEpoch(2, 1)) is None
    assert log.earliest_snapshot_id == OffsetAndEpoch(8, 2)
    for below in (0, 4, 7):
        with pytest.raises(ValueError):
            log.read(below)
    assert read_values(log, 8) == {i: value(i) for i in range(8, 16)}
    assert log.last_fetched_epoch == 3
    check_start_invariants(log)


def test_delete_before_snapshot_trims_the_epoch_cache(log: AnyLog) -> None:
    epochs_1_2_3(log)
    snapshot(log, 6, 2)
    log.delete_before_snapshot(OffsetAndEpoch(6, 2))
    assert log.epoch_entries() == [(2, 6), (3, 8)]
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(8, 2)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(16, 3)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(16, 3)
    # Below every epoch left: the snapshot's epoch is the lower bound (Kafka's
    # KafkaMetadataLog.endOffsetForEpoch answers with the snapshot at the log start).
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(6, 2)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(6, 2)


def test_delete_before_a_snapshot_at_an_epoch_boundary_keeps_the_snapshots_epoch(
    log: AnyLog,
) -> None:
    epochs_1_2_3(log)
    snapshot(log, 8, 2)
    log.delete_before_snapshot(OffsetAndEpoch(8, 2))
    assert log.epoch_entries() == [(3, 8)]
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(8, 2)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(8, 2)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(16, 3)
    assert log.last_fetched_epoch == 3


def test_delete_before_a_snapshot_at_the_log_end_empties_the_log(log: AnyLog) -> None:
    fill(log, 3, epoch=2)
    log.update_high_watermark(6)
    snapshot(log, 6, 2)
    assert log.delete_before_snapshot(OffsetAndEpoch(6, 2))
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (6, 6, 6)
    assert log.read(6).records == b""
    assert log.last_fetched_epoch == 2
    fill(log, 1, epoch=2)
    assert read_values(log, 6) == {6: value(6), 7: value(7)}
    check_start_invariants(log)


def test_delete_before_the_snapshot_at_the_log_start_is_false(log: AnyLog) -> None:
    epochs_1_2_3(log)
    snapshot(log, 8, 2)
    assert log.delete_before_snapshot(OffsetAndEpoch(8, 2))
    assert not log.delete_before_snapshot(OffsetAndEpoch(8, 2))
    assert log.log_start_offset == 8


def test_delete_before_an_unknown_snapshot_is_a_value_error(log: AnyLog) -> None:
    epochs_1_2_3(log)
    with pytest.raises(ValueError):
        log.delete_before_snapshot(OffsetAndEpoch(8, 2))
    assert log.log_start_offset == 0


def test_delete_before_a_snapshot_above_the_high_watermark_is_a_value_error(
    log: AnyLog,
) -> None:
    fill(log, 4)
    log.update_high_watermark(4)
    downloaded(log, 6, 1)
    with pytest.raises(ValueError, match="high watermark"):
        log.delete_before_snapshot(OffsetAndEpoch(6, 1))
    assert log.log_start_offset == 0
    assert read_values(log, 0) == {i: value(i) for i in range(8)}


# -- delete_snapshot -------------------------------------------------------------------------


def test_delete_snapshot(log: AnyLog) -> None:
    epochs_1_2_3(log)
    for offset, epoch in [(4, 1), (8, 2), (12, 3)]:
        snapshot(log, offset, epoch)
    assert log.delete_snapshot(OffsetAndEpoch(8, 2))
    assert log.snapshot_ids() == [OffsetAndEpoch(4, 1), OffsetAndEpoch(12, 3)]
    assert log.read_snapshot(OffsetAndEpoch(8, 2)) is None
    assert not log.delete_snapshot(OffsetAndEpoch(8, 2))
    assert not log.delete_snapshot(OffsetAndEpoch(8, 3))
    # The latest can go too while the log does not start at it.
    assert log.delete_snapshot(OffsetAndEpoch(12, 3))
    assert log.latest_snapshot_id == OffsetAndEpoch(4, 1)
    assert log.log_start_offset == 0


def test_the_snapshot_at_the_log_start_cannot_be_deleted(log: AnyLog) -> None:
    epochs_1_2_3(log)
    snapshot(log, 8, 2)
    snapshot(log, 12, 3)
    log.delete_before_snapshot(OffsetAndEpoch(8, 2))
    with pytest.raises(ValueError):
        log.delete_snapshot(OffsetAndEpoch(8, 2))
    assert log.snapshot_ids() == [OffsetAndEpoch(8, 2), OffsetAndEpoch(12, 3)]
    check_start_invariants(log)


# -- truncate_to_latest_snapshot -------------------------------------------------------------


def test_truncate_to_latest_snapshot_without_a_snapshot_is_false(log: AnyLog) -> None:
    fill(log, 2)
    assert not log.truncate_to_latest_snapshot()
    assert log.log_end_offset == 4


@pytest.mark.parametrize(("offset", "epoch"), [(4, 1), (8, 1)])
def test_truncate_to_latest_snapshot_leaves_a_log_at_or_past_the_snapshot(
    log: AnyLog, offset: int, epoch: int
) -> None:
    fill(log, 4)
    log.update_high_watermark(8)
    snapshot(log, offset, epoch)
    assert not log.truncate_to_latest_snapshot()
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 8, 8)
    assert read_values(log, 0) == {i: value(i) for i in range(8)}


def test_truncate_to_latest_snapshot_replaces_a_log_that_does_not_hold_it(
    log: AnyLog,
) -> None:
    """The log is kept only if it holds what the snapshot stands for (it reaches the snapshot's
    end, and the record before it has the snapshot's epoch). Unlike Kafka, a snapshot of an
    older epoch past the LEO replaces the log: the leader's committed log has that epoch there,
    so the log's later epoch held only uncommitted records."""
    fill(log, 2, epoch=2)
    log.update_high_watermark(2)
    downloaded(log, 10, 1)
    assert log.truncate_to_latest_snapshot()
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (10, 10, 10)
    assert log.last_fetched_epoch == 1
    check_start_invariants(log)


@pytest.mark.parametrize(
    ("offset", "epoch"),
    [
        (9, 1),  # same epoch, past the LEO
        (100, 4),  # later epoch, past the LEO
        (6, 2),  # inside the log, but the record at 5 has epoch 1: the log diverged
        (8, 2),
        (10, 0),  # an older epoch past the LEO
    ],
)
def test_truncate_to_latest_snapshot_empties_the_log_onto_a_snapshot_ahead(
    log: AnyLog, offset: int, epoch: int
) -> None:
    fill(log, 4, epoch=1)
    log.update_high_watermark(4)
    snapshot(log, 4, 1)
    downloaded(log, offset, epoch)
    assert log.truncate_to_latest_snapshot()
    sid = OffsetAndEpoch(offset, epoch)
    assert log.log_start_offset == log.log_end_offset == log.high_watermark == offset
    assert log.last_fetched_epoch == epoch
    assert log.snapshot_ids() == [sid]
    assert log.read(offset).records == b""
    with pytest.raises(ValueError):
        log.read(offset - 1)
    assert log.end_offset_for_epoch(epoch) == sid
    check_start_invariants(log)
    # Appends continue at the snapshot's offset.
    info = log.append_as_leader([b"next"], epoch, timestamp_ms=TIMESTAMP_MS)
    assert info.first_offset == offset
    assert log.log_end_offset == offset + 1
    assert read_values(log, offset) == {offset: b"next"}
    log.update_high_watermark(offset + 1)
    snapshot(log, offset + 1, epoch)
    check_start_invariants(log)
    assert not log.truncate_to_latest_snapshot()


def test_truncate_to_latest_snapshot_twice_is_false(log: AnyLog) -> None:
    downloaded(log, 50, 3)
    assert log.truncate_to_latest_snapshot()
    assert not log.truncate_to_latest_snapshot()
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)


@pytest.mark.parametrize("how", ["leader", "follower"])
def test_after_truncation_to_a_snapshot_epochs_do_not_go_back(log: AnyLog, how: str) -> None:
    """The contract: an epoch below the log's latest is an InvalidAppendError; once the log
    starts at a snapshot of epoch 3, ``last_fetched_epoch`` is 3."""
    downloaded(log, 10, 3)
    assert log.truncate_to_latest_snapshot()
    assert log.last_fetched_epoch == 3
    with pytest.raises(InvalidAppendError):
        if how == "leader":
            log.append_as_leader([b"old"], 1, timestamp_ms=TIMESTAMP_MS)
        else:
            other = MemoryLog()
            other.append_as_leader([value(i) for i in range(10)], 1, timestamp_ms=0)
            other.append_as_leader([b"old"], 1, timestamp_ms=0)
            log.append_as_follower(other.read(10).records)
    assert log.last_fetched_epoch == 3


# -- validate_offset_and_epoch: the snapshot cases --------------------------------------------
# The rules of Kafka's ``ReplicatedLog.validateOffsetAndEpoch``, in order: (1) offset 0 of a log
# starting at 0 is valid; (2) below the log start, at it in another epoch than the snapshot
# there, or in an epoch older than the earliest snapshot: the latest snapshot; (3) where the
# log's end offset for that epoch disagrees: diverging; (4) otherwise valid.


@pytest.fixture
def cleaned(log: AnyLog) -> AnyLog:
    """Epochs 1 [0,4), 2 [4,8), 3 [8,16); snapshots (8,2) at the log start and (12,3)."""
    epochs_1_2_3(log)
    snapshot(log, 8, 2)
    snapshot(log, 12, 3)
    log.delete_before_snapshot(OffsetAndEpoch(8, 2))
    return log


SNAPSHOT_12_3 = ValidOffsetAndEpoch.snapshot(OffsetAndEpoch(12, 3))


@pytest.mark.parametrize(
    ("offset", "epoch", "expected"),
    [
        # Rule 2: below the log start, at it in another epoch, or older than the earliest
        # snapshot: the *latest* snapshot.
        (0, 0, SNAPSHOT_12_3),
        (0, 1, SNAPSHOT_12_3),
        (4, 2, SNAPSHOT_12_3),
        (7, 3, SNAPSHOT_12_3),
        (8, 1, SNAPSHOT_12_3),
        (8, 3, SNAPSHOT_12_3),
        (10, 1, SNAPSHOT_12_3),
        (16, 1, SNAPSHOT_12_3),
        # Rule 4: the fetcher agrees.
        (8, 2, ValidOffsetAndEpoch.valid(OffsetAndEpoch(8, 2))),
        (9, 3, ValidOffsetAndEpoch.valid(OffsetAndEpoch(9, 3))),
        (16, 3, ValidOffsetAndEpoch.valid(OffsetAndEpoch(16, 3))),
        # Rule 3: diverging, told where its epoch (or the one below) ends here.
        (10, 2, ValidOffsetAndEpoch.diverging(OffsetAndEpoch(8, 2))),
        (17, 3, ValidOffsetAndEpoch.diverging(OffsetAndEpoch(16, 3))),
        (12, 4, ValidOffsetAndEpoch.diverging(OffsetAndEpoch(16, 3))),
    ],
)
def test_validate_offset_and_epoch_after_cleaning(
    cleaned: AnyLog, offset: int, epoch: int, expected: ValidOffsetAndEpoch
) -> None:
    assert cleaned.validate_offset_and_epoch(offset, epoch) == expected


@pytest.mark.parametrize(
    ("offset", "epoch", "expected"),
    [
        # Rule 1 before rule 2: offset 0 of a log starting at 0 is valid, snapshot or not.
        (0, 0, ValidOffsetAndEpoch.valid(OffsetAndEpoch(0, 0))),
        (0, 5, ValidOffsetAndEpoch.valid(OffsetAndEpoch(0, 5))),
        # Rule 2 with the log start at 0: an epoch older than the earliest snapshot.
        (3, 1, ValidOffsetAndEpoch.snapshot(OffsetAndEpoch(12, 3))),
        (7, 1, ValidOffsetAndEpoch.snapshot(OffsetAndEpoch(12, 3))),
        # Otherwise the log's epochs decide.
        (6, 2, ValidOffsetAndEpoch.valid(OffsetAndEpoch(6, 2))),
        (10, 2, ValidOffsetAndEpoch.diverging(OffsetAndEpoch(8, 2))),
    ],
)
def test_validate_offset_and_epoch_with_snapshots_and_the_log_start_at_0(
    log: AnyLog, offset: int, epoch: int, expected: ValidOffsetAndEpoch
) -> None:
    epochs_1_2_3(log)
    snapshot(log, 6, 2)
    snapshot(log, 12, 3)
    assert log.validate_offset_and_epoch(offset, epoch) == expected


@pytest.mark.parametrize(
    ("offset", "epoch", "expected"),
    [
        (20, 4, ValidOffsetAndEpoch.valid(OffsetAndEpoch(20, 4))),
        (19, 4, ValidOffsetAndEpoch.snapshot(OffsetAndEpoch(20, 4))),
        (20, 3, ValidOffsetAndEpoch.snapshot(OffsetAndEpoch(20, 4))),
        (20, 5, ValidOffsetAndEpoch.snapshot(OffsetAndEpoch(20, 4))),
        (21, 4, ValidOffsetAndEpoch.diverging(OffsetAndEpoch(20, 4))),
        (21, 5, ValidOffsetAndEpoch.diverging(OffsetAndEpoch(20, 4))),
    ],
)
def test_validate_offset_and_epoch_on_a_log_emptied_onto_a_snapshot(
    log: AnyLog, offset: int, epoch: int, expected: ValidOffsetAndEpoch
) -> None:
    fill(log, 2, epoch=1)
    downloaded(log, 20, 4)
    assert log.truncate_to_latest_snapshot()
    assert log.validate_offset_and_epoch(offset, epoch) == expected


# -- maybe_clean under SnapshotRetention -------------------------------------------------------


def twelve_with_snapshots(log: AnyLog, timestamps: dict[int, int] | None = None) -> None:
    """Epoch 1 [0,12) in 6 batches; snapshots at 2, 4, 6, 8, 10 (epoch 1); HW 12."""
    fill(log, 6)
    log.update_high_watermark(12)
    for offset in (2, 4, 6, 8, 10):
        snapshot(log, offset, 1, timestamp_ms=(timestamps or {}).get(offset, 0))


@pytest.mark.parametrize("retained", [1, 2, 3, 5, 6])
def test_maybe_clean_keeps_retained_snapshots(make_log: MakeLog, retained: int) -> None:
    log = make_log(
        SnapshotRetention(retained_snapshots=retained, retention_bytes=None, retention_ms=None)
    )
    twelve_with_snapshots(log)
    cleaned = log.maybe_clean(0)
    ids = log.snapshot_ids()
    assert cleaned == (retained < 5)
    assert len(ids) == min(retained, 5)
    assert ids[-1] == OffsetAndEpoch(10, 1)  # the latest is never deleted
    assert log.log_start_offset == (0 if retained >= 5 else ids[0].offset)
    check_start_invariants(log)
    assert read_values(log, log.log_start_offset) == {
        i: value(i) for i in range(log.log_start_offset, 12)
    }
    assert not log.maybe_clean(0)


def test_maybe_clean_counts_only_snapshots_at_or_below_the_high_watermark(
    make_log: MakeLog,
) -> None:
    log = make_log(SnapshotRetention(retained_snapshots=1, retention_bytes=None, retention_ms=None))
    fill(log, 4)
    log.update_high_watermark(4)
    snapshot(log, 4, 1)
    downloaded(log, 8, 1)  # above the HW: not something the cleaner may move the start to
    assert not log.maybe_clean(0)
    assert log.log_start_offset == 0
    assert log.snapshot_ids() == [OffsetAndEpoch(4, 1), OffsetAndEpoch(8, 1)]


def test_maybe_clean_by_bytes_moves_up_to_the_latest_snapshot(make_log: MakeLog) -> None:
    log = make_log(SnapshotRetention(retained_snapshots=1000, retention_bytes=0, retention_ms=None))
    twelve_with_snapshots(log)
    assert log.maybe_clean(0)
    assert log.log_start_offset == 10
    assert log.snapshot_ids() == [OffsetAndEpoch(10, 1)]
    check_start_invariants(log)
    assert not log.maybe_clean(0)


def test_maybe_clean_by_bytes_does_nothing_under_the_limit(make_log: MakeLog) -> None:
    log = make_log(
        SnapshotRetention(retained_snapshots=1000, retention_bytes=1 << 20, retention_ms=None)
    )
    twelve_with_snapshots(log)
    assert not log.maybe_clean(0)
    assert log.log_start_offset == 0
    assert len(log.snapshot_ids()) == 5


def test_maybe_clean_by_bytes_stops_once_under_the_limit(make_log: MakeLog) -> None:
    """MemoryLog drops the batches below the new start, so it shrinks batch by batch; a FileLog
    deletes whole segments only, so one segment never shrinks and the start goes to the
    latest snapshot."""
    log = make_log()
    twelve_with_snapshots(log)
    last_three = len(log.read(6).records)  # the batches [6,12)
    log.retention = SnapshotRetention(
        retained_snapshots=1000, retention_bytes=last_three, retention_ms=None
    )
    assert log.maybe_clean(0)
    assert log.log_start_offset == (6 if isinstance(log, MemoryLog) else 10)
    assert log.size_in_bytes() <= last_three or log.log_start_offset == 10
    check_start_invariants(log)
    assert not log.maybe_clean(0)


def test_maybe_clean_by_age_moves_past_an_old_snapshot_at_the_log_start(
    make_log: MakeLog,
) -> None:
    log = make_log(
        SnapshotRetention(retained_snapshots=1000, retention_bytes=None, retention_ms=1000)
    )
    twelve_with_snapshots(log, {2: 100, 4: 200, 6: 5000, 8: 6000, 10: 7000})
    log.delete_before_snapshot(OffsetAndEpoch(2, 1))
    # Snapshots 2 and 4 are more than 1000 ms old at 5500; 6 is not.
    assert log.maybe_clean(5500)
    assert log.log_start_offset == 6
    assert log.snapshot_ids()[0] == OffsetAndEpoch(6, 1)
    check_start_invariants(log)
    assert not log.maybe_clean(5500)
    # Much later every snapshot is old, but the latest stays.
    assert log.maybe_clean(10**9)
    assert log.snapshot_ids() == [OffsetAndEpoch(10, 1)]
    assert log.log_start_offset == 10


def test_maybe_clean_by_age_cleans_a_log_that_starts_at_0(make_log: MakeLog) -> None:
    """SnapshotRetention: the log start moves while the oldest snapshot's last contained log
    time is more than retention_ms old (Kafka's cleanSnapshotsRetentionMs deletes the oldest
    snapshot, and the log below the next one, when it is too old)."""
    log = make_log(
        SnapshotRetention(retained_snapshots=1000, retention_bytes=None, retention_ms=1000)
    )
    twelve_with_snapshots(log)  # every snapshot's time is 0
    assert log.maybe_clean(10**9)
    assert log.log_start_offset > 0
    assert log.latest_snapshot_id == OffsetAndEpoch(10, 1)
    check_start_invariants(log)


def test_maybe_clean_without_snapshots_does_nothing(make_log: MakeLog) -> None:
    log = make_log(SnapshotRetention(retained_snapshots=1, retention_bytes=0, retention_ms=0))
    fill(log, 4)
    log.update_high_watermark(8)
    assert not log.maybe_clean(10**12)
    assert log.log_start_offset == 0


def test_maybe_clean_never_deletes_the_only_snapshot(make_log: MakeLog) -> None:
    log = make_log(SnapshotRetention(retained_snapshots=1, retention_bytes=0, retention_ms=0))
    fill(log, 4)
    log.update_high_watermark(8)
    snapshot(log, 6, 1)
    log.maybe_clean(10**12)
    assert log.snapshot_ids() == [OffsetAndEpoch(6, 1)]
    assert log.maybe_clean(10**12) is False
    check_start_invariants(log)


@pytest.mark.parametrize(
    "kwargs",
    [{"retained_snapshots": 0}, {"retention_bytes": -1}, {"retention_ms": -1}],
)
def test_snapshot_retention_refuses_bad_values(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        SnapshotRetention(**kwargs)


@pytest.mark.parametrize(
    "kind",
    [
        "memory",
        "file",
    ],
)
def test_a_reader_handed_out_keeps_reading_after_the_cleaner_deletes_its_snapshot(
    kind: str, tmp_path: Path
) -> None:
    """docs/snapshots.md, Durability: 'A reader already handed out keeps reading' after the
    cleaner deletes its snapshot (for a file, through a duplicate descriptor)."""
    retention = SnapshotRetention(retained_snapshots=1, retention_bytes=None, retention_ms=None)
    log: AnyLog = (
        MemoryLog(retention)
        if kind == "memory"
        else FileLog.open(tmp_path / "log", retention=retention)
    )
    twelve_with_snapshots(log)
    serving = log.read_snapshot(OffsetAndEpoch(2, 1))
    assert serving is not None
    first = serving.read(0, 10)
    assert log.maybe_clean(0)
    assert log.read_snapshot(OffsetAndEpoch(2, 1)) is None
    try:
        assert first + serving.read(10, 1 << 20) == serving.records()
    finally:
        log.close()


# -- MemoryLog crash ---------------------------------------------------------------------------


def test_memory_log_crash_keeps_snapshots_and_the_log_start() -> None:
    log = MemoryLog(NO_RETENTION)
    fill(log, 4)
    log.update_high_watermark(8)
    snapshot(log, 4, 1)
    log.delete_before_snapshot(OffsetAndEpoch(4, 1))
    log.flush()
    fill(log, 2)  # [8,12): unflushed, lost
    log.crash()
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (4, 8, 4)
    assert log.snapshot_ids() == [OffsetAndEpoch(4, 1)]
    assert read_values(log, 4) == {i: value(i) for i in range(4, 8)}
    check_start_invariants(log)


def test_memory_log_crash_behind_its_latest_snapshot_restarts_from_the_snapshot() -> None:
    """A snapshot of unflushed records (an observer's HW passes its flushed offset) survives a
    crash that loses the records: a FileLog reopens as start=end=snapshot; so must MemoryLog,
    whose crash stands for a restart in the simulator."""
    log = MemoryLog(NO_RETENTION)
    fill(log, 2)
    log.flush()
    fill(log, 2)  # [4,8) unflushed
    log.update_high_watermark(8)
    snapshot(log, 8, 1)
    log.crash()
    assert log.log_end_offset >= 8
    assert log.log_start_offset == 8
    check_start_invariants(log)


# -- a stateful test against a model -----------------------------------------------------------


class LogModel:
    """What the log should hold: batches ``(base, epoch, values)``, the log start, the high
    watermark, the flushed offset and the snapshots' ids."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, tuple[bytes, ...]]] = []
        self.start = 0
        self.hw = 0
        self.flushed = 0
        self.snapshots: set[OffsetAndEpoch] = set()

    @property
    def leo(self) -> int:
        if self.batches:
            base, _, values = self.batches[-1]
            return base + len(values)
        return self.start

    @property
    def last_epoch(self) -> int:
        """That of the last batch; of an empty log, that of the snapshot it starts at."""
        if self.batches:
            return self.batches[-1][1]
        at_start = [s.epoch for s in self.snapshots if s.offset == self.start]
        return max(at_start, default=0)

    def refuses_epoch(self, epoch: int) -> bool:
        """Rule 2: an epoch older than the earliest snapshot's does not validate."""
        earliest = min(self.snapshots, default=None, key=lambda s: (s.offset, s.epoch))
        return earliest is not None and epoch < earliest.epoch

    def boundaries(self) -> list[int]:
        return [b for b, _, _ in self.batches] + [self.leo]

    def epoch_before(self, offset: int) -> int:
        for base, epoch, values in self.batches:
            if base <= offset - 1 < base + len(values):
                return epoch
        raise AssertionError(f"no record at {offset - 1}")

    def values(self) -> dict[int, bytes]:
        return {base + i: v for base, _, vs in self.batches for i, v in enumerate(vs)}

    def move_start(self, offset: int) -> None:
        self.batches = [b for b in self.batches if b[0] + len(b[2]) > offset]
        self.start = offset
        self.snapshots = {s for s in self.snapshots if s.offset >= offset}


class SnapshotLogMachine(RuleBasedStateMachine):
    """Appends, HW moves, snapshots (created and downloaded), cleaning, truncation and crashes
    against :class:`LogModel`."""

    retention: SnapshotRetention

    def __init__(self) -> None:
        super().__init__()
        self.model = LogModel()
        self.directory: Path | None = None
        self.log: AnyLog = MemoryLog(NO_RETENTION)

    def make_log(self) -> AnyLog:
        raise NotImplementedError

    @initialize(
        retained=st.integers(1, 4),
        retention_bytes=st.one_of(st.none(), st.integers(0, 2000)),
        retention_ms=st.one_of(st.none(), st.integers(0, 50)),
    )
    def start(self, retained: int, retention_bytes: int | None, retention_ms: int | None) -> None:
        self.retention = SnapshotRetention(retained, retention_bytes, retention_ms)
        self.log = self.make_log()

    def teardown(self) -> None:
        if isinstance(self.log, FileLog):
            self.log.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    # -- rules -------------------------------------------------------------------------------
    @rule(count=st.integers(1, 3), epoch_step=st.integers(0, 1), size=st.integers(1, 60))
    def append(self, count: int, epoch_step: int, size: int) -> None:
        m = self.model
        epoch = max(1, m.last_epoch + epoch_step)
        base = m.leo
        values = tuple(f"{base + i}:".encode().ljust(size, b"v") for i in range(count))
        info = self.log.append_as_leader(list(values), epoch, timestamp_ms=TIMESTAMP_MS)
        assert info.first_offset == base
        m.batches.append((base, epoch, values))

    @rule(data=st.data())
    def advance_high_watermark(self, data: st.DataObject) -> None:
        m = self.model
        offset = data.draw(st.integers(m.hw, m.leo))
        self.log.update_high_watermark(offset)
        m.hw = offset

    @rule()
    def flush(self) -> None:
        self.log.flush()
        self.model.flushed = self.model.leo

    @rule(data=st.data(), timestamp=st.integers(0, 100))
    def create_snapshot(self, data: st.DataObject, timestamp: int) -> None:
        m = self.model
        choices = [b for b in m.boundaries() if m.start < b <= m.hw]
        if not choices:
            return
        offset = data.draw(st.sampled_from(choices))
        sid = OffsetAndEpoch(offset, m.epoch_before(offset))
        if sid not in m.snapshots and m.refuses_epoch(sid.epoch):
            with pytest.raises(ValueError):
                self.log.create_new_snapshot(sid)
            return
        raw = self.log.create_new_snapshot(sid)
        if sid in m.snapshots:
            assert raw is None
            return
        _freeze(self.log, raw, timestamp, f"{sid}".encode())
        m.snapshots.add(sid)
        event("snapshot created")

    @rule(timestamp=st.integers(0, 100))
    def commit_and_snapshot(self, timestamp: int) -> None:
        """What a state machine does most: snapshot everything committed."""
        m = self.model
        sid = OffsetAndEpoch(m.leo, m.last_epoch)
        if m.leo == m.start or sid in m.snapshots:
            return
        self.log.update_high_watermark(m.leo)
        m.hw = m.leo
        _freeze(self.log, self.log.create_new_snapshot(sid), timestamp, f"{sid}".encode())
        m.snapshots.add(sid)
        event("snapshot created")

    @rule(data=st.data())
    def create_a_bad_snapshot(self, data: st.DataObject) -> None:
        """Above the HW, off a boundary or in the wrong epoch: refused, nothing changes."""
        m = self.model
        offset = data.draw(st.integers(m.start + 1, m.leo + 3))
        epoch = data.draw(st.integers(0, m.last_epoch + 1))
        good = offset <= m.hw and offset in m.boundaries() and epoch == m.epoch_before(offset)
        if good or OffsetAndEpoch(offset, epoch) in m.snapshots:
            return
        with pytest.raises(ValueError):
            self.log.create_new_snapshot(OffsetAndEpoch(offset, epoch))

    @rule(ahead=st.integers(1, 20), epoch_step=st.integers(0, 2))
    def download_snapshot(self, ahead: int, epoch_step: int) -> None:
        """A follower downloads a snapshot past its log and empties the log onto it."""
        m = self.model
        sid = OffsetAndEpoch(m.leo + ahead, max(1, m.last_epoch + epoch_step))
        if sid in m.snapshots:
            return
        _freeze(self.log, self.log.create_new_snapshot_unchecked(sid), 0, b"downloaded")
        assert self.log.truncate_to_latest_snapshot()
        m.batches = []
        m.start = m.hw = m.flushed = sid.offset
        m.snapshots = {sid}

    @rule(data=st.data())
    def delete_before_snapshot(self, data: st.DataObject) -> None:
        m = self.model
        choices = sorted(s for s in m.snapshots if s.offset <= m.hw)
        if not choices:
            return
        sid = data.draw(st.sampled_from(choices))
        moved = self.log.delete_before_snapshot(sid)
        event(f"delete_before_snapshot moved the log start: {sid.offset > m.start}")
        older = any(s.offset < sid.offset for s in m.snapshots)
        assert moved == (sid.offset > m.start or older)
        if sid.offset > m.start:
            m.flushed = max(m.flushed, sid.offset)
        m.move_start(max(m.start, sid.offset))

    @rule(now=st.integers(0, 200))
    def clean(self, now: int) -> None:
        m = self.model
        latest = self.log.latest_snapshot_id
        before = self.log.log_start_offset
        cleaned = self.log.maybe_clean(now)
        start = self.log.log_start_offset
        assert self.log.latest_snapshot_id == latest  # the latest is never deleted
        assert cleaned == (start != before or set(self.log.snapshot_ids()) != m.snapshots)
        event(f"clean moved the log start: {start != before}")
        if start != before:
            earliest = self.log.earliest_snapshot_id
            assert earliest is not None and earliest.offset == start
            assert earliest in m.snapshots
            m.flushed = max(m.flushed, start)
            m.move_start(start)
        assert set(self.log.snapshot_ids()) == m.snapshots
        # Postcondition of the count rule: no more than retained_snapshots at or below the HW,
        # unless only the latest of them is left above the log start.
        below = [s for s in m.snapshots if s.offset <= m.hw]
        assert len(below) <= self.retention.retained_snapshots or (max(below).offset == start)

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        """A diverging leader never truncates the committed prefix, and every snapshot is of
        committed records (after a crash the HW restarts at the log start, so the log's own
        check alone would let a truncation go below a snapshot)."""
        m = self.model
        floor = max([m.hw] + [s.offset for s in m.snapshots])
        choices = [b for b in m.boundaries() if b >= floor]
        if not choices:
            return
        offset = data.draw(st.sampled_from(choices))
        self.log.truncate_to(offset)
        m.batches = [b for b in m.batches if b[0] < offset]
        m.flushed = min(m.flushed, m.leo)

    @rule()
    def truncate_to_latest_snapshot(self) -> None:
        assert not self.log.truncate_to_latest_snapshot()

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def matches_the_model(self) -> None:
        m, log = self.model, self.log
        assert log.log_start_offset == m.start
        assert log.log_end_offset == m.leo
        assert log.high_watermark == m.hw
        assert log.snapshot_ids() == sorted(m.snapshots, key=lambda s: (s.offset, s.epoch))
        assert log.last_fetched_epoch == m.last_epoch

    @invariant()
    def log_start_and_snapshots(self) -> None:
        check_start_invariants(self.log)

    @invariant()
    def every_offset_reads_back(self) -> None:
        m = self.model
        got = read_values(self.log, m.start)
        want = m.values()
        assert {o: v for o, v in got.items() if o >= m.start} == {
            o: v for o, v in want.items() if o >= m.start
        }
        if m.start > 0:
            with pytest.raises(ValueError):
                self.log.read(m.start - 1)

    @invariant()
    def snapshots_read_back(self) -> None:
        for sid in self.model.snapshots:
            reader = self.log.read_snapshot(sid)
            assert reader is not None and reader.snapshot_id == sid


class MemoryLogMachine(SnapshotLogMachine):
    def make_log(self) -> AnyLog:
        return MemoryLog(self.retention)

    @rule()
    def crash(self) -> None:
        """Lose the unflushed tail and the HW; a log left behind its latest snapshot is
        emptied onto it (as FileLog.open does)."""
        assert isinstance(self.log, MemoryLog)
        m = self.model
        self.log.crash()
        m.batches = [b for b in m.batches if b[0] < m.flushed]
        m.hw = m.start
        latest = max(m.snapshots, default=None, key=lambda s: (s.offset, s.epoch))
        if latest is not None and latest.offset > m.leo:
            event("crash left the log behind its latest snapshot")
            assert not self.log.truncate_to_latest_snapshot()  # the crash did it
            m.batches = []
            m.start = m.hw = m.flushed = latest.offset
            m.snapshots = {latest}
        m.flushed = min(m.flushed, m.leo)


class FileLogMachine(SnapshotLogMachine):
    def make_log(self) -> AnyLog:
        self.directory = Path(tempfile.mkdtemp(prefix="kraft-snapshot-log-"))
        return self._open()

    def _open(self) -> FileLog:
        assert self.directory is not None
        return FileLog.open(
            self.directory / "log",
            segment_bytes=SEGMENT_BYTES,
            index_interval_bytes=64,
            retention=self.retention,
        )

    @rule()
    def reopen(self) -> None:
        """Close and open again: the same start, snapshots and records; the HW (never
        persisted) restarts at the log start."""
        assert isinstance(self.log, FileLog)
        epochs = epoch_answers(self.log)
        self.log.close()
        self.log = self._open()
        self.model.hw = self.model.start
        self.model.flushed = self.model.leo
        assert epoch_answers(self.log) == epochs


def epoch_answers(log: AnyLog) -> list[object]:
    """What a fetcher can learn of the log's epochs (not how the cache stores them: after
    ``truncate_to(LEO)`` an entry starting at the LEO may be kept on disk and not in memory)."""
    top = log.last_fetched_epoch + 2
    return [
        log.last_fetched_epoch,
        *(log.end_offset_for_epoch(e) for e in range(top)),
        *(log.validate_offset_and_epoch(log.log_end_offset, e) for e in range(top)),
    ]


_SETTINGS = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMemoryLogSnapshots = MemoryLogMachine.TestCase
TestMemoryLogSnapshots.settings = _SETTINGS
TestFileLogSnapshots = FileLogMachine.TestCase
TestFileLogSnapshots.settings = _SETTINGS
