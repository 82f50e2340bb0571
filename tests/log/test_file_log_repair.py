"""``FileLog``'s side of the repair contract (docs/storage.md, "When a disk lies"): checked
reads, ``quarantine_from`` and ``quarantine_snapshot`` on disk, the repair target kept across
restarts, snapshots checked at open, a log past 0 without its snapshot (issue 17, hole 6)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kraft import BytesSerde
from kraft.errors import CorruptRecordError, QuorumStateError
from kraft.log import FileLog, Isolation, MemoryLog, OffsetAndEpoch, ReplicatedLog
from kraft.log.quorum_state import (
    FileQuorumStateStore,
    MemoryQuorumStateStore,
    recovered_election_state,
    require_election_state,
)
from kraft.log.segment import log_path
from kraft.record import iter_batches
from kraft.snapshot import RawSnapshotWriter, SnapshotWriter, snapshot_path

TIMESTAMP_MS = 1_700_000_000_000


def target_of(log: ReplicatedLog) -> OffsetAndEpoch | None:
    """The log's repair target, read afresh (an assert on the property narrows its type)."""
    return log.repair_target


def fill(log: FileLog | MemoryLog, batches: int, *, epoch: int = 1) -> list[bytes]:
    out = []
    for _ in range(batches):
        base = log.log_end_offset
        log.append_as_leader([b"a" * 50, b"b" * 50], epoch, timestamp_ms=TIMESTAMP_MS)
        out.append(log.read(base, max_bytes=1).records)
    return out


def freeze(raw: RawSnapshotWriter | None, state: bytes = b"state") -> None:
    assert raw is not None
    writer = SnapshotWriter(raw, BytesSerde(), last_contained_log_timestamp_ms=0, timestamp_ms=0)
    writer.append([state])
    writer.freeze()


def flip(path: Path, position: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def positions(path: Path) -> list[int]:
    return [b.position for b in iter_batches(path.read_bytes(), verify_crc=False)]


def quarantined(directory: Path) -> list[Path]:
    root = directory / "quarantine"
    return sorted(root.iterdir()) if root.exists() else []


# -- checked reads ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field",
    [
        pytest.param(30, id="records"),
        pytest.param(3, id="base-offset"),
        pytest.param(14, id="epoch"),
    ],
)
def test_a_read_never_returns_a_corrupt_batch(tmp_path: Path, field: int) -> None:
    """Issue 17, hole 4 on disk: reads check every batch (the base offset and the epoch are
    not under the CRC: they are checked against the log)."""
    directory = tmp_path / "log"
    with FileLog.open(directory) as log:
        batches = fill(log, 5)
        path = log_path(directory, 0)
        flip(path, positions(path)[3] + field)
        # From below: the intact batches before it, never the bad one.
        assert log.read(0, max_bytes=1 << 20).records == b"".join(batches[:3])
        assert log.read(2, Isolation.UNCOMMITTED).records == b"".join(batches[1:3])
        with pytest.raises(CorruptRecordError) as info:
            log.read(6)
        assert info.value.offset == 6
        with pytest.raises(CorruptRecordError):
            log.read(7)
        if field == 3:
            # Finding offset 8 walks past the batch with the bad base offset: where does
            # the next one start, if not where that one says? Report it, not guess.
            with pytest.raises(CorruptRecordError) as info:
                log.read(8)
            assert info.value.offset == 6
        else:
            assert log.read(8).records == batches[4]


def test_quarantine_from_sets_the_tail_aside_and_the_target_survives_restarts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "log"
    log = FileLog.open(directory, segment_bytes=1024)
    batches = fill(log, 12, epoch=3)
    log.flush()
    log.update_high_watermark(20)
    segments = [s.log_path for s in log.segments()]
    assert len(segments) >= 3
    before = b"".join(p.read_bytes() for p in segments)
    with pytest.raises(CorruptRecordError) as info:
        flip(segments[1], positions(segments[1])[1] + 40)
        log.read(info_offset := log.segments()[1].base_offset + 2)
    assert info.value.offset == info_offset
    with caplog.at_level(logging.ERROR, logger="kraft"):
        target = log.quarantine_from(info.value.offset, "corrupt read")
    assert target == log.repair_target == OffsetAndEpoch(24, 3)
    assert log.log_end_offset == info_offset
    assert log.high_watermark == info_offset  # even below the high watermark
    assert "set aside" in caplog.text
    assert [s.log_path for s in log.segments()] == segments[:2]
    (event,) = quarantined(directory)
    kept = b"".join(p.read_bytes() for p in segments[:2])
    set_aside = b"".join(p.read_bytes() for p in sorted(event.iterdir()))
    assert len(kept) + len(set_aside) == len(before)  # nothing deleted
    assert log.read(0, max_bytes=1 << 20).records == b"".join(batches)[: len(kept)]
    log.abandon()  # a crash: the target is durable, the set-aside bytes do not come back
    with FileLog.open(directory, segment_bytes=1024) as log:
        assert log.repair_target == OffsetAndEpoch(24, 3)
        assert log.log_end_offset == info_offset
        fill(log, 2, epoch=3)
        assert log.repair_target is not None  # (3, 14) is still behind (3, 24)
        log.initialize_leader_epoch(4)
        fill(log, 1, epoch=4)  # a later epoch's log is ahead: the leader has what was lost
        assert target_of(log) is None
    with FileLog.open(directory, segment_bytes=1024) as log:
        assert log.repair_target is None


# -- snapshots at open -----------------------------------------------------------------------


def snapshot_log(directory: Path) -> FileLog:
    """Epoch 1 [0, 20), snapshots at 6 and 12, the log started at 6."""
    log = FileLog.open(directory, segment_bytes=1024)
    fill(log, 10)
    log.update_high_watermark(20)
    for offset in (6, 12):
        freeze(log.create_new_snapshot(OffsetAndEpoch(offset, 1)), f"{offset}".encode())
    log.delete_before_snapshot(OffsetAndEpoch(6, 1))
    return log


def test_a_corrupt_snapshot_is_quarantined_at_open_not_deleted(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    snapshot_log(directory).close()
    path = snapshot_path(directory, OffsetAndEpoch(12, 1))
    flip(path, path.stat().st_size - 5)
    damaged = path.read_bytes()
    with FileLog.open(directory, segment_bytes=1024) as log:
        assert log.snapshot_ids() == [OffsetAndEpoch(6, 1)]
        assert (log.log_start_offset, log.log_end_offset) == (6, 20)
        assert log.repair_target is None  # the log still holds what it stood for
    assert not path.exists()
    (event,) = quarantined(directory)
    assert (event / path.name).read_bytes() == damaged


def test_a_corrupt_snapshot_at_the_log_start_moves_it_to_the_next(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    snapshot_log(directory).close()
    flip(snapshot_path(directory, OffsetAndEpoch(6, 1)), 70)
    with FileLog.open(directory, segment_bytes=1024) as log:
        assert log.snapshot_ids() == [OffsetAndEpoch(12, 1)]
        assert (log.log_start_offset, log.log_end_offset) == (12, 20)
        assert log.repair_target is None


@pytest.mark.parametrize("how", ["corrupt", "lost"])
def test_a_log_past_0_without_its_snapshot_starts_over_from_0(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    """Issue 17, hole 6: the records below the log start are gone and nothing stands for
    them; the replica must fetch the leader's snapshot before delivering anything."""
    directory = tmp_path / "log"
    log = snapshot_log(directory)
    log.delete_before_snapshot(OffsetAndEpoch(12, 1))
    log.close()
    path = snapshot_path(directory, OffsetAndEpoch(12, 1))
    if how == "corrupt":
        flip(path, 70)
    else:
        path.unlink()
    with caplog.at_level(logging.ERROR, logger="kraft"):
        log = FileLog.open(directory, segment_bytes=1024)
    assert (log.log_start_offset, log.log_end_offset, log.snapshot_ids()) == (0, 0, [])
    assert log.repair_target == OffsetAndEpoch(20, 1)
    assert "emptied to offset 0" in caplog.text
    log.close()
    set_aside = sorted(p.name for event in quarantined(directory) for p in event.iterdir())
    assert "00000000000000000012.log" in set_aside  # the log from its start, kept
    assert ("00000000000000000012-0000000001.checkpoint" in set_aside) == (how == "corrupt")
    with FileLog.open(directory, segment_bytes=1024) as log:
        assert (log.log_start_offset, log.log_end_offset) == (0, 0)
        assert log.repair_target == OffsetAndEpoch(20, 1)


@pytest.mark.parametrize("snapshot_end", [20, 26])
def test_a_downloaded_snapshot_that_reaches_the_repair_target_repairs_the_log(
    tmp_path: Path, snapshot_end: int
) -> None:
    """A replica that started over may catch up through the leader's snapshot alone (the
    leader snapshotted past everything it had): truncating to that snapshot repairs it."""
    directory = tmp_path / "log"
    log = snapshot_log(directory)
    log.delete_before_snapshot(OffsetAndEpoch(12, 1))
    log.close()
    snapshot_path(directory, OffsetAndEpoch(12, 1)).unlink()
    with FileLog.open(directory, segment_bytes=1024) as log:
        assert log.repair_target == OffsetAndEpoch(20, 1)
        freeze(log.create_new_snapshot_unchecked(OffsetAndEpoch(18, 1)))
        assert log.truncate_to_latest_snapshot()
        assert log.repair_target == OffsetAndEpoch(20, 1)  # (1, 18) is still behind (1, 20)
        freeze(log.create_new_snapshot_unchecked(OffsetAndEpoch(snapshot_end, 1)))
        assert log.truncate_to_latest_snapshot()
        assert target_of(log) is None
    assert not (directory / "repair-target").exists()


# -- the quorum-state file (issue 17, hole 7) --------------------------------------------------


def test_a_missing_quorum_state_with_a_log_refuses_to_start(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path / "quorum-state")
    log = MemoryLog()
    require_election_state(store, log)  # empty log, no snapshot: a new node
    fill(log, 1)
    with pytest.raises(QuorumStateError, match="kraft storage recover-quorum-state"):
        require_election_state(store, log)
    store.write_election_state(recovered_election_state(7))
    require_election_state(store, log)


def test_a_recovered_quorum_state_cannot_vote_in_its_epoch() -> None:
    """The recovered state holds a vote in the epoch for a replica that does not exist."""
    store = MemoryQuorumStateStore()
    store.write_election_state(recovered_election_state(7))
    state = store.read_election_state()
    assert state is not None
    assert state.epoch == 7 and state.has_voted and state.leader_id is None
    assert not state.is_voted_candidate(1, None)


def test_the_recovery_point_carries_the_epoch_and_a_checksum(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    log = FileLog.open(directory)
    fill(log, 3, epoch=5)
    log.flush()
    text = (directory / "recovery-point").read_bytes()
    words = text.split()
    assert (int(words[1]), int(words[2])) == (6, 5)
    log.close()
    raw = bytearray(text)
    raw[5] ^= 0x01  # a digit of the offset: the checksum no longer matches
    (directory / "recovery-point").write_bytes(bytes(raw))
    with FileLog.open(directory) as log:
        assert log.log_end_offset == 6
        assert log.repair_target is None  # a damaged mark is ignored, never trusted
