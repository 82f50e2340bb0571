"""``FileLog`` snapshots on disk: a reopen finds what was left, the leftovers of a crash at any
point of a snapshot operation are cleaned on open, the cleaner deletes whole segments, and a
damaged ``log-start-offset`` file (docs/snapshots.md, Durability)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft import BytesSerde
from kraft.log import FileLog, Isolation, OffsetAndEpoch, ValidOffsetAndEpoch
from kraft.log.base import SnapshotRetention
from kraft.log.file import LOG_START, RECOVERY_POINT
from kraft.log.segment import log_path
from kraft.record import iter_batches
from kraft.snapshot import (
    DELETED_SUFFIX,
    PART_SUFFIX,
    RawSnapshotWriter,
    SnapshotReader,
    SnapshotWriter,
    list_snapshots,
    snapshot_path,
)

SEGMENT_BYTES = 1024
TIMESTAMP_MS = 1_700_000_000_000
NO_RETENTION = SnapshotRetention(retained_snapshots=1000, retention_bytes=None, retention_ms=None)


def open_log(directory: Path, retention: SnapshotRetention = NO_RETENTION) -> FileLog:
    return FileLog.open(
        directory, segment_bytes=SEGMENT_BYTES, index_interval_bytes=64, retention=retention
    )


def value(offset: int) -> bytes:
    return f"record-{offset}-".encode().ljust(100, b"x")


def fill(log: FileLog, batches: int, *, epoch: int = 1) -> None:
    """Batches of two 100-byte records (~280 bytes): three to a 1 KiB segment."""
    for _ in range(batches):
        base = log.log_end_offset
        log.append_as_leader([value(base), value(base + 1)], epoch, timestamp_ms=TIMESTAMP_MS)


def freeze(raw: RawSnapshotWriter | None, state: bytes = b"state") -> None:
    assert raw is not None
    writer = SnapshotWriter(raw, BytesSerde(), last_contained_log_timestamp_ms=0, timestamp_ms=0)
    writer.append([state])
    writer.freeze()


def snapshot(log: FileLog, offset: int, epoch: int = 1) -> None:
    freeze(log.create_new_snapshot(OffsetAndEpoch(offset, epoch)), f"{offset}".encode())


def read_values(log: FileLog) -> dict[int, bytes]:
    data = log.read(log.log_start_offset, Isolation.UNCOMMITTED, 1 << 30).records
    return {
        b.base_offset + i: bytes(r.value or b"")
        for b in iter_batches(data)
        for i, r in enumerate(b.records())
    }


def state_of(log: FileLog) -> tuple[object, ...]:
    """What must survive a reopen (not the HW: it is never persisted)."""
    snapshots = {}
    for sid in log.snapshot_ids():
        reader = log.read_snapshot(sid)
        assert reader is not None
        snapshots[sid] = reader.records()
    return (
        log.log_start_offset,
        log.log_end_offset,
        log.last_fetched_epoch,
        snapshots,
        read_values(log),
    )


def leftovers(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith((PART_SUFFIX, DELETED_SUFFIX)))


def segment_bases(directory: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in directory.glob("*.log"))


def check_start_invariants(log: FileLog) -> None:
    earliest = log.earliest_snapshot_id
    start = log.log_start_offset
    if earliest is None:
        assert start == 0
        return
    assert start <= earliest.offset
    if start > 0:
        assert earliest.offset == start, f"no snapshot at the log start {start}"
    assert log.validate_offset_and_epoch(*earliest) == ValidOffsetAndEpoch.valid(earliest)


# -- reopen after each operation ---------------------------------------------------------------


def twelve_batches(log: FileLog) -> None:
    """Epoch 1 [0,12) and epoch 2 [12,24), in 12 batches over 4 segments; HW 20; snapshots
    at 6, 10 (epoch 1) and 16 (epoch 2)."""
    fill(log, 6, epoch=1)
    fill(log, 6, epoch=2)
    log.update_high_watermark(20)
    snapshot(log, 6, 1)
    snapshot(log, 10, 1)
    snapshot(log, 16, 2)


def _delete_before(log: FileLog) -> None:
    assert log.delete_before_snapshot(OffsetAndEpoch(10, 1))


def _delete_snapshot(log: FileLog) -> None:
    assert log.delete_snapshot(OffsetAndEpoch(10, 1))


def _download(log: FileLog) -> None:
    freeze(log.create_new_snapshot_unchecked(OffsetAndEpoch(40, 3)), b"downloaded")
    assert log.truncate_to_latest_snapshot()


def _clean(log: FileLog) -> None:
    log.retention = SnapshotRetention(retained_snapshots=1, retention_bytes=None, retention_ms=None)
    assert log.maybe_clean(0)


def _truncate(log: FileLog) -> None:
    log.truncate_to(20)


def _append_after_clean(log: FileLog) -> None:
    _clean(log)
    fill(log, 3, epoch=4)


OPERATIONS: dict[str, Callable[[FileLog], None]] = {
    "snapshot": lambda log: None,
    "delete_before_snapshot": _delete_before,
    "delete_snapshot": _delete_snapshot,
    "download_and_truncate_to_latest_snapshot": _download,
    "maybe_clean": _clean,
    "truncate_to": _truncate,
    "append_after_clean": _append_after_clean,
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
@pytest.mark.parametrize("how", ["close", "crash"])
def test_a_reopen_finds_the_same_log_start_snapshots_and_records(
    tmp_path: Path, operation: str, how: str
) -> None:
    directory = tmp_path / "log"
    log = open_log(directory)
    twelve_batches(log)
    OPERATIONS[operation](log)
    before = state_of(log)
    if how == "close":
        log.close()
    else:
        log.flush()
        log.abandon()
    reopened = open_log(directory)
    try:
        assert state_of(reopened) == before
        assert reopened.high_watermark == reopened.log_start_offset
        assert list_snapshots(directory) == reopened.snapshot_ids()
        assert leftovers(directory) == []
        check_start_invariants(reopened)
    finally:
        reopened.close()


# -- leftovers of a crash -----------------------------------------------------------------------


def test_a_part_file_of_an_unfinished_snapshot_is_removed_on_open(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    log = open_log(directory)
    twelve_batches(log)
    raw = log.create_new_snapshot(OffsetAndEpoch(20, 2))
    assert raw is not None
    raw.append(b"half a snapshot")
    part = snapshot_path(directory, OffsetAndEpoch(20, 2), PART_SUFFIX)
    assert part.exists()
    log.abandon()  # the process dies mid-write: the .part stays
    log = open_log(directory)
    try:
        assert not part.exists()
        assert log.snapshot_ids() == [
            OffsetAndEpoch(6, 1),
            OffsetAndEpoch(10, 1),
            OffsetAndEpoch(16, 2),
        ]
        assert log.log_end_offset == 24
        # The id can be written again.
        log.update_high_watermark(20)
        snapshot(log, 20, 2)
        assert log.latest_snapshot_id == OffsetAndEpoch(20, 2)
    finally:
        log.close()


def test_a_part_file_of_an_unfinished_download_is_removed_and_the_log_kept(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "log"
    log = open_log(directory)
    twelve_batches(log)
    raw = log.create_new_snapshot_unchecked(OffsetAndEpoch(100, 5))
    assert raw is not None
    raw.append(b"the first chunk")
    log.abandon()
    log = open_log(directory)
    try:
        assert leftovers(directory) == []
        assert log.latest_snapshot_id == OffsetAndEpoch(16, 2)
        assert (log.log_start_offset, log.log_end_offset) == (0, 24)
    finally:
        log.close()


def test_a_deleted_file_is_removed_on_open_and_its_snapshot_stays_gone(tmp_path: Path) -> None:
    """A crash between the rename to .deleted and the unlink."""
    directory = tmp_path / "log"
    log = open_log(directory)
    twelve_batches(log)
    log.close()
    sid = OffsetAndEpoch(10, 1)
    os.rename(snapshot_path(directory, sid), snapshot_path(directory, sid, DELETED_SUFFIX))
    log = open_log(directory)
    try:
        assert leftovers(directory) == []
        assert log.snapshot_ids() == [OffsetAndEpoch(6, 1), OffsetAndEpoch(16, 2)]
        assert log.read_snapshot(sid) is None
    finally:
        log.close()


def test_segments_wholly_below_the_log_start_are_deleted_on_open(tmp_path: Path) -> None:
    """A crash after the log start was made durable and before the segments below it went."""
    directory = tmp_path / "log"
    log = open_log(directory)
    twelve_batches(log)
    bases = segment_bases(directory)
    assert bases == [0, 6, 12, 18]
    log.close()
    (directory / LOG_START).write_text("0\n16\n")
    log = open_log(directory)
    try:
        assert log.log_start_offset == 16
        assert segment_bases(directory) == [12, 18]  # 12 holds 16: kept whole
        assert [s.base_offset for s in log.segments()] == [12, 18]
        assert log.snapshot_ids() == [OffsetAndEpoch(16, 2)]
        assert not snapshot_path(directory, OffsetAndEpoch(6, 1)).exists()
        assert not snapshot_path(directory, OffsetAndEpoch(10, 1)).exists()
        with pytest.raises(ValueError):
            log.read(15)
        assert read_values(log) == {i: value(i) for i in range(16, 24)}
        assert log.end_offset_for_epoch(1) == OffsetAndEpoch(16, 2)
        check_start_invariants(log)
    finally:
        log.close()


def test_a_snapshot_below_the_log_start_is_deleted_on_open(tmp_path: Path) -> None:
    """A crash after the log start moved and before the older snapshots went."""
    directory = tmp_path / "log"
    log = open_log(directory)
    twelve_batches(log)
    old = snapshot_path(directory, OffsetAndEpoch(6, 1))
    saved = tmp_path / "saved"
    shutil.copy2(old, saved)
    assert log.delete_before_snapshot(OffsetAndEpoch(10, 1))
    log.close()
    assert not old.exists()
    shutil.copy2(saved, old)
    log = open_log(directory)
    try:
        assert not old.exists()
        assert log.snapshot_ids() == [OffsetAndEpoch(10, 1), OffsetAndEpoch(16, 2)]
        assert log.log_start_offset == 10
        check_start_invariants(log)
    finally:
        log.close()


def test_a_log_behind_a_downloaded_snapshot_is_emptied_onto_it_on_open(tmp_path: Path) -> None:
    """A follower froze a download and died before truncate_to_latest_snapshot."""
    directory = tmp_path / "log"
    log = open_log(directory)
    twelve_batches(log)
    freeze(log.create_new_snapshot_unchecked(OffsetAndEpoch(40, 3)), b"downloaded")
    log.abandon()
    log = open_log(directory)
    try:
        assert log.log_start_offset == log.log_end_offset == log.high_watermark == 40
        assert log.snapshot_ids() == [OffsetAndEpoch(40, 3)]
        assert log.last_fetched_epoch == 3
        assert segment_bases(directory) == [40]
        assert list_snapshots(directory) == [OffsetAndEpoch(40, 3)]
        fill(log, 1, epoch=3)
        assert read_values(log) == {40: value(40), 41: value(41)}
        check_start_invariants(log)
    finally:
        log.close()
    log = open_log(directory)
    try:
        assert (log.log_start_offset, log.log_end_offset) == (40, 42)
    finally:
        log.close()


def test_a_log_that_lost_its_tail_below_its_snapshot_restarts_from_the_snapshot(
    tmp_path: Path,
) -> None:
    """A snapshot of records that were never fsynced: a power cut loses the records, not the
    (fsynced) snapshot."""
    directory = tmp_path / "log"
    log = open_log(directory)
    fill(log, 2)  # [0,4) in segment 0
    log.update_high_watermark(4)
    snapshot(log, 4, 1)
    log.abandon()
    segment = log_path(directory, 0)
    with segment.open("r+b") as f:
        f.truncate(segment.stat().st_size // 2)  # the second batch is torn
    (directory / RECOVERY_POINT).write_text("0\n0\n")
    log = open_log(directory)
    try:
        assert log.log_start_offset == log.log_end_offset == 4
        assert log.snapshot_ids() == [OffsetAndEpoch(4, 1)]
        check_start_invariants(log)
    finally:
        log.close()


# -- the cleaner deletes whole segments -----------------------------------------------------------


def test_the_cleaner_deletes_whole_segments_only(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    log = open_log(directory)
    twelve_batches(log)  # segments at 0, 6, 12, 18
    _clean(log)  # retained_snapshots=1: the start moves to 16
    try:
        assert log.log_start_offset == 16
        assert log.snapshot_ids() == [OffsetAndEpoch(16, 2)]
        assert segment_bases(directory) == [12, 18]
        assert log.size_in_bytes() == sum(
            log_path(directory, base).stat().st_size for base in (12, 18)
        )
        # Records [12,16) are still in the segment file but below the log start.
        with pytest.raises(ValueError):
            log.read(12)
        assert read_values(log) == {i: value(i) for i in range(16, 24)}
        check_start_invariants(log)
    finally:
        log.close()


def test_moving_the_start_to_a_segment_base_deletes_every_segment_below(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "log"
    log = open_log(directory)
    twelve_batches(log)
    snapshot(log, 12, 1)
    assert log.delete_before_snapshot(OffsetAndEpoch(12, 1))
    try:
        assert segment_bases(directory) == [12, 18]
        assert log.read(12).start_offset == 12
    finally:
        log.close()


def test_the_active_segment_is_never_deleted(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    log = open_log(directory)
    twelve_batches(log)
    log.update_high_watermark(24)
    snapshot(log, 24, 2)
    assert log.delete_before_snapshot(OffsetAndEpoch(24, 2))
    try:
        assert segment_bases(directory) == [18]
        assert (log.log_start_offset, log.log_end_offset) == (24, 24)
        fill(log, 1, epoch=2)
        assert read_values(log) == {24: value(24), 25: value(25)}
    finally:
        log.close()


# -- a damaged log-start-offset file --------------------------------------------------------------


@pytest.mark.parametrize("damage", ["garbage", "missing", "empty", "bad-version"])
def test_a_damaged_log_start_file_loses_no_record_and_no_snapshot(
    tmp_path: Path, damage: str
) -> None:
    directory = tmp_path / "log"
    log = open_log(directory)
    twelve_batches(log)
    assert log.delete_before_snapshot(OffsetAndEpoch(16, 2))  # segments 12 and 18 stay
    log.close()
    path = directory / LOG_START
    if damage == "garbage":
        path.write_bytes(b"\xff\x00not an offset")
    elif damage == "missing":
        path.unlink()
    elif damage == "empty":
        path.write_text("")
    else:
        path.write_text("7\n16\n")
    log = open_log(directory)
    try:
        assert log.log_start_offset <= 16
        assert log.snapshot_ids() == [OffsetAndEpoch(16, 2)]
        assert {o: v for o, v in read_values(log).items() if o >= 16} == {
            i: value(i) for i in range(16, 24)
        }
        assert log.log_end_offset == 24
    finally:
        log.close()


def test_a_damaged_log_start_file_still_starts_the_log_at_a_snapshot(tmp_path: Path) -> None:
    """Kafka's ConsistentLogStartOffset: once the log start is past 0 there is a snapshot
    there. Records [12,16) are no use without the state below 12, which only the snapshot
    at 16 (or an older one, deleted) holds."""
    directory = tmp_path / "log"
    log = open_log(directory)
    twelve_batches(log)
    assert log.delete_before_snapshot(OffsetAndEpoch(16, 2))
    log.close()
    (directory / LOG_START).write_bytes(b"\xff\x00not an offset")
    log = open_log(directory)
    try:
        check_start_invariants(log)
    finally:
        log.close()


def test_a_damaged_log_start_file_on_a_log_whose_first_segment_is_at_0(tmp_path: Path) -> None:
    """The segment at 0 still holds every record: the log starts at 0 again, which keeps more
    of the log and breaks no invariant."""
    directory = tmp_path / "log"
    log = open_log(directory)
    fill(log, 2)
    log.update_high_watermark(4)
    snapshot(log, 2, 1)
    assert log.delete_before_snapshot(OffsetAndEpoch(2, 1))
    log.close()
    (directory / LOG_START).write_text("garbage")
    log = open_log(directory)
    try:
        assert log.log_start_offset == 0
        assert log.snapshot_ids() == [OffsetAndEpoch(2, 1)]
        assert read_values(log) == {i: value(i) for i in range(4)}
        check_start_invariants(log)
    finally:
        log.close()


def test_a_log_start_file_past_the_log_end_empties_the_log_onto_its_snapshot(
    tmp_path: Path,
) -> None:
    """A crash inside truncate_to_latest_snapshot: the log start file is written first."""
    directory = tmp_path / "log"
    log = open_log(directory)
    twelve_batches(log)
    freeze(log.create_new_snapshot_unchecked(OffsetAndEpoch(40, 3)), b"downloaded")
    log.abandon()
    (directory / LOG_START).write_text("0\n40\n")
    log = open_log(directory)
    try:
        assert log.log_start_offset == log.log_end_offset == 40
        assert log.snapshot_ids() == [OffsetAndEpoch(40, 3)]
        reader = log.read_snapshot(OffsetAndEpoch(40, 3))
        assert reader is not None
        with SnapshotReader(reader, BytesSerde()) as typed:
            assert [r for b in typed for r in b.records] == [b"downloaded"]
        check_start_invariants(log)
    finally:
        log.close()


# -- descriptors -----------------------------------------------------------------------------


def _descriptors_on(directory: Path) -> list[str]:
    """What this process's open descriptors point at under ``directory`` (Linux's /proc)."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        if target.startswith(str(directory)):
            targets.append(target)
    return targets


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_cleaned_snapshot_leaves_no_descriptor_open(tmp_path: Path) -> None:
    """The cleaner closes the log's own reader of each snapshot it deletes, so a node that
    snapshots for weeks does not pile up descriptors of unlinked files (and their disk space)."""
    log = open_log(
        tmp_path / "log",
        SnapshotRetention(retained_snapshots=1, retention_bytes=None, retention_ms=None),
    )
    try:
        for _ in range(30):
            fill(log, 1)
            log.update_high_watermark(log.log_end_offset)
            snapshot(log, log.log_end_offset)
            log.maybe_clean(0)
        held = [t for t in _descriptors_on(tmp_path) if t.endswith(".checkpoint")]
        deleted = [t for t in _descriptors_on(tmp_path) if "deleted" in t]
        assert deleted == []
        assert held == [str(snapshot_path(tmp_path / "log", log.snapshot_ids()[0]))]
    finally:
        log.close()
    assert [t for t in _descriptors_on(tmp_path) if "checkpoint" in t] == []


def test_a_reader_handed_out_is_the_callers_and_outlives_the_logs(tmp_path: Path) -> None:
    """read_snapshot gives the caller a reader of its own: closing it leaves the log's
    reader open, and it keeps reading after the cleaner deletes the snapshot."""
    log = open_log(
        tmp_path / "log",
        SnapshotRetention(retained_snapshots=1, retention_bytes=None, retention_ms=None),
    )
    try:
        fill(log, 2)
        log.update_high_watermark(4)
        snapshot(log, 2)
        first = log.read_snapshot(OffsetAndEpoch(2, 1))
        assert first is not None
        first.close()
        second = log.read_snapshot(OffsetAndEpoch(2, 1))
        assert second is not None
        whole = second.records()  # the log's reader was not closed with the first
        snapshot(log, 4)
        assert log.maybe_clean(0)
        assert log.read_snapshot(OffsetAndEpoch(2, 1)) is None
        assert second.records() == whole
        second.close()
    finally:
        log.close()
