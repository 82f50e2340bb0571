"""``VoterHistory`` (Kafka's ``KRaftControlRecordStateMachine``, KIP-853): the voter set and
kraft.version in force, read from the bootstrap checkpoint, the latest snapshot and the log --
the latest ``VotersRecord`` applies from the moment it is appended, and a truncation rolls it
back."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft.log.api import OffsetAndEpoch
from kraft.log.file import FileLog
from kraft.log.memory import MemoryLog
from kraft.raft.states import ReplicaKey
from kraft.raft.voter_history import (
    BOOTSTRAP_SNAPSHOT_ID,
    VoterHistory,
    write_bootstrap_checkpoint,
)
from kraft.raft.voter_set import DEFAULT_LISTENER, VoterNode, VoterSet
from kraft.record.batch import encode_batch, iter_batches
from kraft.record.control import (
    ControlMessage,
    ControlRecordType,
    KRaftVersionRecord,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    control_batch,
    control_records,
)
from kraft.snapshot.files import snapshot_file_name
from kraft.snapshot.raw import RawSnapshotReader
from kraft.testing.messages import voter_endpoints

STATIC = VoterSet.from_static({})


def key(voter_id: int) -> ReplicaKey:
    return ReplicaKey(voter_id, uuid.UUID(int=voter_id))


def voter_set(*ids: int) -> VoterSet:
    return VoterSet(
        {i: VoterNode(key(i), ((DEFAULT_LISTENER, "localhost", 9990 + i),), (0, 1)) for i in ids}
    )


def append_control(log: MemoryLog, epoch: int, messages: list[ControlMessage]) -> bytes:
    """Append one control batch at the log end; return its bytes."""
    data = control_batch(log.log_end_offset, epoch, messages, timestamp_ms=0)
    log.append_encoded(data)
    return data


def append_voters(log: MemoryLog, voters: VoterSet, epoch: int = 1) -> tuple[int, bytes]:
    """Append a VotersRecord at the log end; return its offset and the batch."""
    offset = log.log_end_offset
    return offset, append_control(log, epoch, [voters.to_record()])


def append_data(log: MemoryLog, count: int = 2, epoch: int = 1) -> tuple[int, bytes]:
    offset = log.log_end_offset
    data = encode_batch(offset, epoch, [b"x"] * count, timestamp_ms=0)
    log.append_encoded(data)
    return offset, data


def snapshot_over(log: MemoryLog, offset: int, epoch: int, messages: list[ControlMessage]) -> None:
    """Write snapshot (offset, epoch) holding ``messages`` after its header (as Kafka writes a
    kraft.version 1 snapshot) and move the log start to it."""
    log.update_high_watermark(max(log.high_watermark, offset))
    snapshot_id = OffsetAndEpoch(offset, epoch)
    writer = log.create_new_snapshot(snapshot_id)
    assert writer is not None
    writer.append(control_batch(0, epoch, [SnapshotHeaderRecord(0, 0)], timestamp_ms=0))
    if messages:
        writer.append(control_batch(1, epoch, messages, timestamp_ms=0))
    writer.append(
        control_batch(1 + len(messages), epoch, [SnapshotFooterRecord(0)], timestamp_ms=0)
    )
    writer.freeze()
    log.delete_before_snapshot(snapshot_id)


def from_scratch(log: MemoryLog, static: VoterSet = STATIC) -> VoterHistory:
    history = VoterHistory(static)
    history.sync(log)
    return history


# -- the bootstrap checkpoint ---------------------------------------------------------------------
def test_the_bootstrap_checkpoint_holds_kraft_version_1_and_the_voters() -> None:
    """``kafka-storage format --initial-controllers``: snapshot 0-0 holds the header, the
    KRaftVersionRecord(1) and the initial VotersRecord, then the footer; the history reads the
    set and version from it before the log holds anything."""
    log = MemoryLog()
    write_bootstrap_checkpoint(log, 1, voter_set(1, 2, 3), timestamp_ms=7)
    assert log.latest_snapshot_id == BOOTSTRAP_SNAPSHOT_ID == OffsetAndEpoch(0, 0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)

    reader = log.latest_snapshot()
    assert reader is not None
    try:
        kinds = [kind for batch in _control_batches(reader) for kind, _ in batch]
    finally:
        reader.close()
    assert kinds == [
        ControlRecordType.SNAPSHOT_HEADER,
        ControlRecordType.KRAFT_VERSION,
        ControlRecordType.KRAFT_VOTERS,
        ControlRecordType.SNAPSHOT_FOOTER,
    ]

    history = from_scratch(log, static=voter_set(9))
    assert history.last_voter_set == voter_set(1, 2, 3)
    assert history.kraft_version == 1
    assert history.voter_set_at(0) == voter_set(1, 2, 3)
    assert history.last_voter_set_offset == -1  # the snapshot's last contained offset


def _control_batches(
    reader: RawSnapshotReader,
) -> list[list[tuple[ControlRecordType, ControlMessage]]]:
    data = reader.read(0, reader.size_in_bytes)
    return [control_records(b) for b in iter_batches(data, verify_crc=False)]


def test_a_standalone_checkpoint_without_voters_keeps_the_static_set() -> None:
    """``--no-initial-controllers``: kraft.version 1 and no VotersRecord; until the log brings
    one, the (possibly empty) static set applies."""
    log = MemoryLog()
    write_bootstrap_checkpoint(log, 1, None, timestamp_ms=0)
    history = from_scratch(log, static=STATIC)
    assert history.kraft_version == 1
    assert history.last_voter_set == STATIC and history.last_voter_set_offset is None


def test_the_bootstrap_checkpoint_goes_only_into_an_empty_log() -> None:
    log = MemoryLog()
    append_data(log)
    with pytest.raises(ValueError, match="empty log"):
        write_bootstrap_checkpoint(log, 1, voter_set(1), timestamp_ms=0)
    bootstrapped = MemoryLog()
    write_bootstrap_checkpoint(bootstrapped, 1, voter_set(1), timestamp_ms=0)
    with pytest.raises(ValueError, match="empty log"):
        write_bootstrap_checkpoint(bootstrapped, 1, voter_set(1), timestamp_ms=0)


def test_a_file_log_reopened_on_the_bootstrap_checkpoint_starts_at_it(tmp_path: Path) -> None:
    """``kraft storage format`` writes 00000000000000000000-0000000000.checkpoint into an
    empty log directory; the FileLog opened there has snapshot 0-0 as its latest, starts and
    ends at 0, and the history reads the voters from it."""
    directory = tmp_path / "log"
    log = FileLog.open(directory)
    write_bootstrap_checkpoint(log, 1, voter_set(1, 2), timestamp_ms=0)
    log.close()
    assert (directory / snapshot_file_name(BOOTSTRAP_SNAPSHOT_ID)).exists()
    assert snapshot_file_name(BOOTSTRAP_SNAPSHOT_ID) == (
        "00000000000000000000-0000000000.checkpoint"
    )

    reopened = FileLog.open(directory)
    try:
        assert reopened.latest_snapshot_id == OffsetAndEpoch(0, 0)
        assert (reopened.log_start_offset, reopened.log_end_offset) == (0, 0)
        history = VoterHistory(STATIC)
        history.sync(reopened)
        assert history.last_voter_set == voter_set(1, 2) and history.kraft_version == 1
        # The first appends go on after the checkpoint, from offset 0.
        reopened.append_as_leader([b"a"], 1, timestamp_ms=0)
        assert reopened.log_end_offset == 1
    finally:
        reopened.close()


# -- the log ---------------------------------------------------------------------------------------
def test_without_any_voters_record_the_static_set_applies() -> None:
    """kraft.version 0: the configuration's voters, whatever data the log holds."""
    static = VoterSet.from_static({})
    log = MemoryLog()
    append_data(log)
    append_control(log, 1, [KRaftVersionRecord(0, 0)])
    history = from_scratch(log, static)
    assert history.last_voter_set is static and history.kraft_version == 0
    assert history.last_voter_set_offset is None
    assert history.snapshot_control_messages(OffsetAndEpoch(3, 1)) == []


def test_a_voters_record_applies_once_appended_and_a_truncation_rolls_it_back() -> None:
    """KIP-853: the latest VotersRecord in the log is in force, committed or not; truncating
    the log below it restores the set before it."""
    log = MemoryLog()
    write_bootstrap_checkpoint(log, 1, voter_set(1, 2), timestamp_ms=0)
    history = from_scratch(log)
    append_data(log)  # offsets 0-1
    offset, data = append_voters(log, voter_set(1, 2, 3))  # offset 2, uncommitted
    assert log.high_watermark == 0
    assert history.appended(log, offset, data)
    assert history.last_voter_set == voter_set(1, 2, 3)
    assert history.last_voter_set_offset == 2
    assert history.voter_set_at(1) == voter_set(1, 2)
    assert history.voter_set_at(2) == voter_set(1, 2, 3)

    log.truncate_to(2)
    assert history.truncated(2)
    assert history.last_voter_set == voter_set(1, 2)
    assert not history.truncated(2)  # nothing more to roll back

    # The same through sync alone: the history notices the shorter log by itself.
    offset, data = append_voters(log, voter_set(1, 2, 4))
    history.appended(log, offset, data)
    log.truncate_to(offset)
    assert history.sync(log)
    assert history.last_voter_set == voter_set(1, 2)


def test_an_uncommitted_record_at_the_log_start_rolls_back_to_the_checkpoint() -> None:
    """The first leader writes its VotersRecord at offset 0, the log start; a sync must not
    forget the bootstrap checkpoint's set under it, so that truncating the uncommitted record
    (a new leader's log wins) restores the checkpoint's set, not the static one."""
    log = MemoryLog()
    write_bootstrap_checkpoint(log, 1, voter_set(1, 2), timestamp_ms=0)
    history = from_scratch(log)
    offset, data = append_voters(log, voter_set(1, 2, 3))
    history.appended(log, offset, data)
    history.sync(log)  # every poll
    log.truncate_to(0)
    assert history.truncated(0)
    assert history.last_voter_set == voter_set(1, 2)
    assert history.kraft_version == 1


def test_appended_sees_what_sync_reads() -> None:
    """The hot path (``appended``, handed the bytes just appended) and the safety net
    (``sync``, reading the log) agree, data batches and control batches alike."""
    log = MemoryLog()
    write_bootstrap_checkpoint(log, 1, voter_set(1), timestamp_ms=0)
    hot = from_scratch(log)
    steps = [
        append_data(log),
        append_voters(log, voter_set(1, 2)),
        append_data(log, 3),
        (log.log_end_offset, append_control(log, 1, [KRaftVersionRecord(0, 1)])),
        append_voters(log, voter_set(1, 2, 3), epoch=2),
    ]
    changed = [hot.appended(log, offset, data) for offset, data in steps]
    assert changed == [False, True, False, False, True]  # version 1 was in force already
    cold = from_scratch(log)
    assert hot.next_offset == cold.next_offset == log.log_end_offset
    assert hot.last_voter_set == cold.last_voter_set == voter_set(1, 2, 3)
    for offset in range(log.log_end_offset):
        assert hot.voter_set_at(offset) == cold.voter_set_at(offset), offset
    assert not hot.sync(log)  # nothing left to read


def test_an_append_the_history_did_not_see_is_read_from_the_log() -> None:
    """``appended`` past the history's next offset reads the gap from the log first."""
    log = MemoryLog()
    history = from_scratch(log, voter_set(1))
    append_voters(log, voter_set(1, 2))  # not reported
    offset, data = append_data(log)
    history.appended(log, offset, data)
    assert history.last_voter_set == voter_set(1, 2)
    assert history.next_offset == log.log_end_offset


def test_voter_set_at_answers_by_offset() -> None:
    log = MemoryLog()
    write_bootstrap_checkpoint(log, 1, voter_set(1), timestamp_ms=0)
    append_data(log)  # 0-1
    append_voters(log, voter_set(1, 2))  # 2
    append_data(log)  # 3-4
    append_voters(log, voter_set(1, 2, 3))  # 5
    history = from_scratch(log)
    assert [history.voter_set_at(o).ids for o in range(-1, 7)] == [
        {1},
        {1},
        {1},
        {1, 2},
        {1, 2},
        {1, 2},
        {1, 2, 3},
        {1, 2, 3},
    ]
    # What a snapshot ending at offset 4 (exclusive end 5) must hold.
    assert history.snapshot_control_messages(OffsetAndEpoch(5, 1)) == [
        KRaftVersionRecord(0, 1),
        voter_set(1, 2).to_record(),
    ]


def test_a_snapshot_past_the_history_is_loaded() -> None:
    """When the log start moves past what the history read (a follower installed the
    leader's snapshot), the history reloads from that snapshot's control records and reads the
    log after it."""
    log = MemoryLog()
    write_bootstrap_checkpoint(log, 1, voter_set(1), timestamp_ms=0)
    history = from_scratch(log)
    append_data(log)  # 0-1; the history does not follow
    append_voters(log, voter_set(1, 2))  # 2
    append_data(log, 3)  # 3-5
    snapshot_over(log, 6, 1, [KRaftVersionRecord(0, 1), voter_set(1, 2, 3).to_record()])
    append_data(log)  # 6-7
    append_voters(log, voter_set(1, 2, 3, 4))  # 8
    assert log.log_start_offset == 6

    assert history.sync(log)
    assert history.voter_set_at(7) == voter_set(1, 2, 3)  # from the snapshot
    assert history.last_voter_set == voter_set(1, 2, 3, 4)
    assert history.last_voter_set_offset == 8
    assert history.kraft_version == 1


def test_old_entries_are_dropped_once_the_log_start_passes_them() -> None:
    """The history is bounded by the changes still in the log: below the log start only the
    set in force there is kept."""
    log = MemoryLog()
    write_bootstrap_checkpoint(log, 1, voter_set(1), timestamp_ms=0)
    history = from_scratch(log)
    for voters in (voter_set(1, 2), voter_set(1, 2, 3), voter_set(2, 3)):  # offsets 0, 1, 2
        offset, data = append_voters(log, voters)
        history.appended(log, offset, data)
    offset, data = append_data(log)  # 3-4
    history.appended(log, offset, data)
    offset, data = append_voters(log, voter_set(2, 3, 4))  # 5
    history.appended(log, offset, data)
    assert history.voter_set_at(1) == voter_set(1, 2, 3)
    assert len(history._voters._offsets) == 5  # the bootstrap's, then one per record

    # The log start moves to offset 3 (a snapshot there): by the sync after the next append,
    # the entries before the one in force at 3 (offset 2's) are dropped.
    snapshot_over(log, 3, 1, [KRaftVersionRecord(0, 1), voter_set(2, 3).to_record()])
    append_data(log)
    assert not history.sync(log)  # nothing in force changed
    assert history.voter_set_at(1) != voter_set(1, 2, 3)  # forgotten
    assert history.voter_set_at(3) == voter_set(2, 3)
    assert history.voter_set_at(5) == voter_set(2, 3, 4)
    assert len(history._voters._offsets) == 2


def test_reload_forgets_and_reads_again() -> None:
    log = MemoryLog()
    write_bootstrap_checkpoint(log, 1, voter_set(1), timestamp_ms=0)
    history = from_scratch(log)
    append_voters(log, voter_set(1, 2))
    assert history.reload(log)
    assert history.last_voter_set == voter_set(1, 2)
    assert not history.reload(log)


# -- the state machine -----------------------------------------------------------------------------
_op = st.one_of(
    st.tuples(st.just("data"), st.integers(1, 3)),
    st.tuples(st.just("voters"), st.frozensets(st.integers(1, 5), min_size=1)),
    st.tuples(st.just("truncate"), st.integers(0, 30)),
    st.tuples(st.just("commit"), st.integers(0, 30)),
    st.tuples(st.just("snapshot"), st.integers(0, 30)),
    st.tuples(st.just("sync"), st.none()),
    st.tuples(st.just("epoch"), st.none()),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bootstrap=st.booleans(), ops=st.lists(_op, max_size=30), report=st.booleans())
def test_the_history_always_equals_a_fresh_read_of_the_log(
    bootstrap: bool, ops: list[tuple[str, object]], report: bool
) -> None:
    """Whatever is appended, truncated, committed and snapshotted, in any order, the history
    followed with ``appended`` / ``truncated`` (when ``report``) and ``sync`` holds what a
    new history reading the log from scratch holds (the client syncs on every poll, so a
    truncation it did not report is synced before the next append). Without the bootstrap
    checkpoint the log starts at kraft.version 0 (the static set) and the first VotersRecord
    comes with the upgrade's KRaftVersionRecord(1), in one batch, as the leader writes it."""
    static = VoterSet.from_static(voter_endpoints((1, 2, 3)))
    log = MemoryLog()
    if bootstrap:
        write_bootstrap_checkpoint(log, 1, voter_set(1, 2, 3), timestamp_ms=0)
    history = VoterHistory(static)
    history.sync(log)
    epoch = 1
    for op, arg in ops:
        if op in ("data", "voters"):
            offset = log.log_end_offset
            if op == "data":
                assert isinstance(arg, int)
                _, data = append_data(log, arg, epoch)
            else:
                assert isinstance(arg, frozenset)
                record = voter_set(*sorted(arg)).to_record()
                upgrade = from_scratch(log, static).kraft_version == 0
                messages: list[ControlMessage] = [record]
                if upgrade:
                    messages = [KRaftVersionRecord(0, 1), record]
                data = append_control(log, epoch, messages)
            if report:
                history.appended(log, offset, data)
        elif op == "truncate":
            assert isinstance(arg, int)
            end = _truncation_point(log, arg)
            if end is None:
                continue
            log.truncate_to(end)
            if report:
                history.truncated(end)
            else:
                # The history learns of a truncation it was not told of from the log's shorter
                # end, by the next poll's sync -- before anything is appended again (it reads
                # offsets, not bytes).
                history.sync(log)
        elif op == "commit":
            assert isinstance(arg, int)
            log.update_high_watermark(min(max(arg, log.high_watermark), log.log_end_offset))
        elif op == "snapshot":
            assert isinstance(arg, int)
            _snapshot_at(log, arg)
        elif op == "sync":
            history.sync(log)
        else:
            epoch += 1
    history.sync(log)
    fresh = from_scratch(log, static)
    assert history.last_voter_set == fresh.last_voter_set
    # Where the set in force was learned: below the log start, a snapshot (or the bootstrap
    # checkpoint) -- the same set whichever of those the history read it from.
    assert _learned_at(history, log) == _learned_at(fresh, log)
    assert history.kraft_version == fresh.kraft_version
    assert history.next_offset == fresh.next_offset == log.log_end_offset
    for offset in range(log.log_start_offset - 1, log.log_end_offset + 1):
        assert history.voter_set_at(offset) == fresh.voter_set_at(offset), offset
        assert history.kraft_version_at(offset) == fresh.kraft_version_at(offset), offset


def _learned_at(history: VoterHistory, log: MemoryLog) -> int | None:
    offset = history.last_voter_set_offset
    return None if offset is None else max(offset, log.log_start_offset - 1)


def _truncation_point(log: MemoryLog, pick: int) -> int | None:
    """One of the uncommitted batch boundaries (``pick`` chooses which), or None."""
    boundaries = [
        b.base_offset
        for b in log.batches_between(log.log_start_offset, log.log_end_offset)
        if b.base_offset >= log.high_watermark
    ]
    return boundaries[pick % len(boundaries)] if boundaries else None


def _snapshot_at(log: MemoryLog, wanted: int) -> None:
    """A snapshot at the committed batch boundary nearest below ``wanted`` (if past the log
    start), holding what the log says is in force there; the log start moves to it."""
    boundaries = [
        b.base_offset
        for b in log.batches_between(log.log_start_offset, log.log_end_offset)
        if log.log_start_offset < b.base_offset <= min(wanted, log.high_watermark)
    ]
    if log.log_end_offset <= min(wanted, log.high_watermark):
        boundaries.append(log.log_end_offset)
    boundaries = [b for b in boundaries if b > log.log_start_offset]
    if not boundaries:
        return
    offset = max(boundaries)
    last_epoch = _epoch_of(log, offset - 1)
    messages = from_scratch(log).snapshot_control_messages(OffsetAndEpoch(offset, last_epoch))
    snapshot_over(log, offset, last_epoch, list(messages))


def _epoch_of(log: MemoryLog, offset: int) -> int:
    for batch in log.batches_between(log.log_start_offset, log.log_end_offset):
        if batch.base_offset <= offset <= batch.last_offset:
            return int(batch.partition_leader_epoch)
    raise AssertionError(f"no batch holds offset {offset}")
