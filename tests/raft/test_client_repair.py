"""Corruption found where it is read, repaired from the quorum (docs/protocol.md §1.14; the
repair contract of kraft/log/api.py: ``repair_target``, ``quarantine_from``,
``quarantine_snapshot``, checked reads).

The log's own bytes go bad (``MemoryLog.corrupt_batch``, ``MemoryLog.corrupt_snapshot``): the
replica never serves or delivers them, sets them aside, and fetches them back from the leader;
a leader resigns. While its log is under repair a replica stands for no election and refuses
its vote to a log behind what it held. Kafka trusts its disk and has no counterpart.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kraft.log.quorum_state import ElectionState
from kraft.metrics import RaftMetrics
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from kraft.raft import snapshot_chunks
from kraft.record.batch import encode_batch, iter_batches
from kraft.record.offsets import OffsetAndEpoch
from kraft.testing import RaftClientBuilder, RaftTestContext, RecordingListener
from kraft.testing.messages import fetch_response

LOCAL = 1
VOTERS = (1, 2, 3)
LEADER_EPOCH = 2
FOLLOWER_EPOCH = 5
REMOTE = 2
TIMESTAMP_MS = 1_704_067_200_000


def ask(ctx: RaftTestContext[bytes], body: Any, source: int) -> Any:
    """Deliver a request from ``source``, poll, and return the one answer's body."""
    ctx.deliver_request(body, source)
    ctx.poll()
    sent = ctx.sent_responses()
    assert len(sent) == 1, sent
    return sent[0].body


def with_metrics(ctx: RaftTestContext[bytes]) -> RaftMetrics:
    metrics = RaftMetrics(ctx.clock)
    ctx.client.metrics = metrics
    metrics.bind(ctx.client)
    return metrics


def counters(metrics: RaftMetrics) -> tuple[Any, Any]:
    values = metrics.snapshot()
    return values["corruptions-found-total"], values["repairs-completed-total"]


# =============================================================================================
# The leader
# =============================================================================================
def leader_context() -> RaftTestContext[bytes]:
    """Replica 1 leads epoch 2 of (1, 2, 3): offsets 0-1 are epoch-1 records, 2 the
    LeaderChange, 3-4 epoch-2 records; voter 2 fetched to the end (HW 5), voter 3 nothing."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS).append_to_log(1, [b"a", b"b"]).with_unknown_leader(1)
    ).build()
    assert ctx.become_leader() == LEADER_EPOCH
    ctx.append_and_drain([b"c", b"d"])
    assert ctx.advance_leader_high_watermark_to_log_end() == 5
    ctx.sent_requests()
    ctx.sent_responses()
    return ctx


def test_a_leader_never_serves_a_corrupt_batch_and_resigns_to_the_most_caught_up() -> None:
    """§1.14: a Fetch that reaches a corrupt committed batch gets the good batches before it,
    then NOT_LEADER_OR_FOLLOWER: the leader sets the batch aside (with what follows), resigns
    with the other voters as successors, most caught up first, and counts the corruption."""
    ctx = leader_context()
    metrics = with_metrics(ctx)
    good = ctx.log.read(3).records
    ctx.log.corrupt_batch(3, position=40)
    first = ask(ctx, ctx.fetch_request(LEADER_EPOCH, 3, 0, 0), source=3)
    assert first.partition_error_code == Errors.NONE
    assert [b.last_offset for b in iter_batches(first.records)] == [1, 2]  # CRCs checked
    assert ctx.role == "Leader"
    second = ask(ctx, ctx.fetch_request(LEADER_EPOCH, 3, 3, LEADER_EPOCH), source=3)
    assert second.partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert second.records == b""
    assert ctx.role == "Resigned"
    assert (ctx.log_end_offset, ctx.log.repair_target) == (3, OffsetAndEpoch(5, LEADER_EPOCH))
    assert ctx.log.set_aside and ctx.log.set_aside[0] != good
    ctx.poll()
    ends = ctx.sent_requests(EndQuorumEpochRequest)
    assert sorted(r.destination for r in ends) == [2, 3]
    body = ends[0].body
    assert isinstance(body, EndQuorumEpochRequest)
    assert [c.candidate_id for c in body.preferred_candidates] == [2, 3]
    assert counters(metrics) == (1, 0)


def test_a_resigned_leader_under_repair_follows_fetches_back_and_is_repaired() -> None:
    """§1.14: the leader that resigned stands for no election (its election timeout passes
    Unattached); it follows the next leader, fetches the batches it set aside, and once its
    log reaches what it held, the repair is complete (and counted)."""
    ctx = leader_context()
    metrics = with_metrics(ctx)
    good = ctx.log.read(3).records
    ctx.log.corrupt_batch(3, position=40)
    ask(ctx, ctx.fetch_request(LEADER_EPOCH, 3, 3, LEADER_EPOCH), source=3)
    for _ in range(3):
        ctx.expire_election_timeout()
        ctx.poll_until_idle()
    assert (ctx.role, ctx.epoch) == ("Unattached", LEADER_EPOCH + 1)
    assert ctx.sent_requests(VoteRequest) == []
    ctx.deliver_request(ctx.begin_epoch_request(LEADER_EPOCH + 1, REMOTE), REMOTE)
    ctx.poll()
    (request,) = ctx.poll_until_request(FetchRequest)
    assert isinstance(request.body, FetchRequest)
    assert (request.body.fetch_offset, request.body.last_fetched_epoch) == (3, LEADER_EPOCH)
    ctx.deliver_response(request, fetch_response(LEADER_EPOCH + 1, REMOTE, good, 5))
    ctx.poll()
    assert ctx.log.read(3).records == good
    assert ctx.log.repair_target is None
    ctx.poll()
    assert counters(metrics) == (1, 1)


def test_a_leader_whose_listener_read_finds_corruption_resigns() -> None:
    """§1.14: the listener path too: a lagging listener's read of a corrupt committed batch
    delivers nothing corrupt, sets the batch aside, and the leader resigns."""
    ctx = leader_context()
    listener: RecordingListener[bytes] = RecordingListener()
    ctx.log.corrupt_batch(3, position=40)
    ctx.client.register(listener)
    ctx.poll()  # the read stops before the corrupt batch: 0-2 delivered
    assert listener.records == [b"a", b"b"]
    assert ctx.role == "Leader"
    ctx.poll()  # the read at 3 finds it
    assert listener.records == [b"a", b"b"]
    assert ctx.role == "Resigned"
    assert ctx.log.repair_target == OffsetAndEpoch(5, LEADER_EPOCH)


# =============================================================================================
# Followers
# =============================================================================================
def follower_with_three_batches() -> RaftTestContext[bytes]:
    """Replica 1 follows 2 in epoch 5; its log holds [a, b] [c, d] [e] in epoch 1 (LEO 5)."""
    return (
        RaftClientBuilder(LOCAL, VOTERS)
        .append_to_log(1, [b"a", b"b"])
        .append_to_log(1, [b"c", b"d"])
        .append_to_log(1, [b"e"])
        .with_elected_leader(FOLLOWER_EPOCH, REMOTE)
        .build()
    )


def test_a_follower_quarantines_a_corrupt_committed_batch_and_its_listener_misses_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """§1.14: the listener reading a corrupt committed batch is handed nothing; the follower
    sets it aside, fetches from where its log now ends, and the listener then gets every
    record once, in order. The high watermark known above the new log end is no error."""
    ctx = follower_with_three_batches()
    metrics = with_metrics(ctx)
    listener: RecordingListener[bytes] = RecordingListener()
    ctx.client.register(listener)
    ctx.poll()
    ctx.answer_fetch(high_watermark=2)
    assert listener.records == [b"a", b"b"]
    good = ctx.log.read(2).records
    ctx.log.corrupt_batch(2, position=50)
    with caplog.at_level(logging.ERROR, logger="kraft.raft"):
        ctx.answer_fetch(high_watermark=5)  # the listener reads offset 2: corrupt
        assert listener.records == [b"a", b"b"]
        assert (ctx.log_end_offset, ctx.log.high_watermark) == (2, 2)
        assert ctx.log.repair_target == OffsetAndEpoch(5, 1)
        ctx.sent_requests()  # the Fetch sent before the listeners ran (see the next test)
        (request,) = ctx.poll_until_request(FetchRequest)
        assert isinstance(request.body, FetchRequest)
        assert (request.body.fetch_offset, request.body.last_fetched_epoch) == (2, 1)
        ctx.deliver_response(request, fetch_response(FOLLOWER_EPOCH, REMOTE, good, 5))
        ctx.poll()
        ctx.poll()
    assert listener.records == [b"a", b"b", b"c", b"d", b"e"]
    assert [b.base_offset for b in listener.batches] == [0, 2, 4]
    assert ctx.log.repair_target is None
    assert counters(metrics) == (1, 1)
    assert not [r for r in caplog.records if "below ours" in r.getMessage()]


def test_the_fetch_in_flight_when_a_follower_quarantines_is_forgotten(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """§1.14: the Fetch sent before the log shrank asked for the old log end; its answer is
    dropped (no "refusing fetched records"), and the next Fetch asks from the new end."""
    ctx = follower_with_three_batches()
    ctx.client.register(RecordingListener())
    ctx.poll()
    ctx.answer_fetch(high_watermark=2)
    ctx.log.corrupt_batch(2, position=50)
    ctx.answer_fetch(high_watermark=5)
    stale, body = ctx.single_sent_request(FetchRequest)
    assert body.fetch_offset == 5
    later = encode_batch(5, FOLLOWER_EPOCH, [b"f"], timestamp_ms=TIMESTAMP_MS)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="kraft.raft"):
        ctx.deliver_response(stale, fetch_response(FOLLOWER_EPOCH, REMOTE, later, 6))
        (request,) = ctx.poll_until_request(FetchRequest)
    assert isinstance(request.body, FetchRequest)
    assert (request.body.fetch_offset, ctx.log_end_offset) == (2, 2)
    assert not caplog.records


# =============================================================================================
# Under repair: no candidacy, the vote guard
# =============================================================================================
def under_repair(
    builder: RaftClientBuilder[bytes], quarantine_from: int = 2
) -> RaftTestContext[bytes]:
    """Build with [a, b] [c, d] [e] in epoch 1, then set the log aside from
    ``quarantine_from`` (repair target (5, 1)) before the client starts."""
    builder.append_to_log(1, [b"a", b"b"]).append_to_log(1, [b"c", b"d"])
    ctx = builder.append_to_log(1, [b"e"]).build(initialize=False)
    assert ctx.log.quarantine_from(quarantine_from, "test") == OffsetAndEpoch(5, 1)
    ctx.client.initialize()
    return ctx


@pytest.mark.parametrize("pre_vote", [False, True])
def test_under_repair_no_vote_for_a_log_behind_the_target(pre_vote: bool) -> None:
    """§1.14: a candidate ahead of the shortened log but behind the repair target gets no
    vote (nor pre-vote); one at or past the target, epoch first, does."""
    ctx = under_repair(RaftClientBuilder(LOCAL, VOTERS).with_unknown_leader(3))
    behind = ask(ctx, ctx.vote_request(4, 2, 1, 4, pre_vote=pre_vote), source=2)
    assert isinstance(behind, VoteResponse)
    assert not behind.vote_granted
    at_target = ask(ctx, ctx.vote_request(4, 2, 1, 5, pre_vote=pre_vote), source=2)
    assert at_target.vote_granted
    later_epoch = ask(ctx, ctx.vote_request(4, 2, 2, 3, pre_vote=pre_vote), source=2)
    assert later_epoch.vote_granted


def test_under_repair_an_unattached_voter_does_not_stand_until_repaired() -> None:
    """§1.14: election timeouts pass without a pre-vote while the log is under repair; once
    it has fetched its records back, the next timeout starts an election."""
    ctx = under_repair(RaftClientBuilder(LOCAL, VOTERS).with_unknown_leader(3))
    for _ in range(3):
        ctx.expire_election_timeout()
        ctx.poll_until_idle()
        assert ctx.role == "Unattached"
    assert ctx.sent_requests(VoteRequest) == []
    ctx.log.append_as_leader([b"c", b"d"], 1, timestamp_ms=TIMESTAMP_MS)
    ctx.log.append_as_leader([b"e"], 1, timestamp_ms=TIMESTAMP_MS)
    assert ctx.log.repair_target is None
    ctx.expire_election_timeout()
    ctx.poll()
    assert ctx.role == "Prospective"


def test_under_repair_a_follower_keeps_fetching_past_its_fetch_timeout() -> None:
    """§1.14: a voter following a silent leader does not go Prospective under repair."""
    ctx = under_repair(RaftClientBuilder(LOCAL, VOTERS).with_elected_leader(3, REMOTE))
    for _ in range(3):
        ctx.expire_fetch_timeout()
        ctx.poll_until_idle()
        assert ctx.role == "Follower"
    assert ctx.sent_requests(VoteRequest) == []


def test_under_repair_a_candidate_at_startup_withdraws() -> None:
    """§1.14: a replica that restarts as Candidate (it had voted for itself) under repair
    withdraws at once: Voted for itself in the same epoch, no vote requested."""
    ctx = under_repair(RaftClientBuilder(LOCAL, VOTERS).with_voted_candidate(3, LOCAL))
    assert (ctx.role, ctx.epoch, ctx.voted_id) == ("Voted", 3, LOCAL)
    ctx.poll_until_idle()
    assert ctx.sent_requests(VoteRequest) == []


def test_under_repair_the_only_voter_does_not_elect_itself_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """§1.14: a single voter under repair cannot lead (nobody holds a copy to repair from):
    it stays Unattached and logs an ERROR, at most once a minute."""
    with caplog.at_level(logging.ERROR, logger="kraft.raft.repair"):
        ctx = under_repair(RaftClientBuilder(LOCAL, (LOCAL,)).with_unknown_leader(3))
        for _ in range(5):
            ctx.expire_election_timeout()
            ctx.poll_until_idle()
    assert ctx.role == "Unattached"
    lines = [r for r in caplog.records if "only voter" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.ERROR


def test_a_restarted_leader_under_repair_stays_resigned() -> None:
    """§1.14: a replica that led the stored epoch comes back Resigned; under repair its
    election timeout leads to Unattached and no further."""
    ctx = under_repair(
        RaftClientBuilder(LOCAL, VOTERS).with_election_state(ElectionState(3, leader_id=LOCAL))
    )
    assert ctx.role == "Resigned"
    for _ in range(3):
        ctx.expire_election_timeout()
        ctx.poll_until_idle()
    assert (ctx.role, ctx.epoch) == ("Unattached", 4)
    assert ctx.sent_requests(VoteRequest) == []


# =============================================================================================
# Snapshots
# =============================================================================================
SNAPSHOT = OffsetAndEpoch(5, LEADER_EPOCH)


def leader_with_snapshot(*, cleaned: bool) -> RaftTestContext[bytes]:
    """:func:`leader_context` with snapshot (5, 2) of three batches; ``cleaned``: the log
    starts at 5."""
    ctx = leader_context()
    writer = ctx.client.create_snapshot(SNAPSHOT, TIMESTAMP_MS)
    assert writer is not None
    with writer:
        for batch in ([b"s1", b"s2"], [b"s3" * 30], [b"s4" * 30]):
            writer.append(batch)
        writer.freeze()
    if cleaned:
        assert ctx.log.delete_before_snapshot(SNAPSHOT)
    return ctx


def fetch_snapshot(position: int = 0, max_bytes: int = 1 << 20) -> FetchSnapshotRequest:
    return FetchSnapshotRequest(
        replica_id=3,
        current_leader_epoch=LEADER_EPOCH,
        snapshot_id=SnapshotId.of(SNAPSHOT),
        position=position,
        max_bytes=max_bytes,
    )


def snapshot_size(ctx: RaftTestContext[bytes]) -> int:
    raw = ctx.log.read_snapshot(SNAPSHOT)
    assert raw is not None
    return raw.size_in_bytes


@pytest.mark.parametrize(
    ("window", "where"),
    [
        (snapshot_chunks.SCAN_WINDOW_BYTES, "crc"),
        (50, "crc"),  # batches larger than the scan window
        (snapshot_chunks.SCAN_WINDOW_BYTES, "base offset"),
        (snapshot_chunks.SCAN_WINDOW_BYTES, "length"),
        (snapshot_chunks.SCAN_WINDOW_BYTES, "epoch"),
    ],
)
def test_a_corrupt_snapshot_is_not_served_and_set_aside(
    window: int, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§1.14: a FetchSnapshot of a snapshot whose bytes fail their checks (the CRC, or the
    header fields it does not cover) gets no byte of it: SNAPSHOT_NOT_FOUND (the log, which
    holds everything, serves the follower), the snapshot set aside, the leader still leads."""
    monkeypatch.setattr(snapshot_chunks, "SCAN_WINDOW_BYTES", window)
    ctx = leader_with_snapshot(cleaned=False)
    position = {"crc": snapshot_size(ctx) - 30, "base offset": 7, "length": 11, "epoch": 15}
    ctx.log.corrupt_snapshot(SNAPSHOT, position=position[where])
    response = ask(ctx, fetch_snapshot(), source=3)
    assert isinstance(response, FetchSnapshotResponse)
    assert response.partition_error_code == Errors.SNAPSHOT_NOT_FOUND
    assert response.unaligned_records == b""
    assert ctx.log.read_snapshot(SNAPSHOT) is None
    assert len(ctx.log.set_aside) == 1
    assert ctx.role == "Leader"


def test_a_leader_whose_log_started_at_a_corrupt_snapshot_resigns() -> None:
    """§1.14: without the snapshot the cleaned log can no longer serve a follower below its
    start: it empties (under repair) and the leader resigns."""
    ctx = leader_with_snapshot(cleaned=True)
    ctx.log.corrupt_snapshot(SNAPSHOT, position=20)
    response = ask(ctx, fetch_snapshot(), source=3)
    assert response.partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert response.unaligned_records == b""
    assert ctx.role == "Resigned"
    assert ctx.log.repair_target == OffsetAndEpoch(5, LEADER_EPOCH)


def test_a_snapshot_damaged_during_a_download_stops_being_served() -> None:
    """§1.14: each chunk is checked when it is served: a byte flipped after the first chunk
    went out keeps every later chunk holding it from going out."""
    ctx = leader_with_snapshot(cleaned=False)
    size = snapshot_size(ctx)
    first = ask(ctx, fetch_snapshot(0, 16), source=3)
    assert first.partition_error_code == Errors.NONE
    assert len(first.unaligned_records) == 16
    ctx.log.corrupt_snapshot(SNAPSHOT, position=size - 30)
    rest = ask(ctx, fetch_snapshot(16, size), source=3)
    assert rest.partition_error_code == Errors.SNAPSHOT_NOT_FOUND
    assert rest.unaligned_records == b""


@pytest.mark.parametrize("window", [snapshot_chunks.SCAN_WINDOW_BYTES, 50, 1])
def test_a_snapshot_served_in_small_chunks_is_the_file(
    window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§1.14: the checks change no byte: chunks of every size still concatenate to the file,
    whatever the scan window (a batch larger than the window is read whole)."""
    monkeypatch.setattr(snapshot_chunks, "SCAN_WINDOW_BYTES", window)
    ctx = leader_with_snapshot(cleaned=True)
    raw = ctx.log.read_snapshot(SNAPSHOT)
    assert raw is not None
    data = raw.records()
    for step in (1, 7, 61, len(data)):
        got = b""
        while len(got) < len(data):
            response = ask(ctx, fetch_snapshot(len(got), step), source=3)
            assert response.partition_error_code == Errors.NONE
            got += response.unaligned_records
        assert got == data


def test_a_leader_that_finds_corruption_in_its_append_path_resigns_without_a_heartbeat() -> None:
    """§1.14: a parked Fetch answered after an append (the append misdirected: the new batch
    reads blank) finds the corruption inside the leader's own poll step; the leader resigns
    there, answers NOT_LEADER_OR_FOLLOWER, and that step sends no BeginQuorumEpoch."""
    ctx = leader_context()
    parked = ctx.fetch_request(LEADER_EPOCH, 3, 5, LEADER_EPOCH, max_wait_ms=10_000)
    ctx.deliver_request(parked, 3)
    ctx.poll()
    assert ctx.sent_responses() == []
    ctx.log.misdirect_next_append(onto_offset=3)
    ctx.client.prepare_append(LEADER_EPOCH, [b"e"])
    ctx.client.schedule_prepared_append()
    ctx.advance(ctx.config.fetch_timeout_ms)  # the heartbeat is due in the same step
    ctx.poll()
    (answer,) = ctx.sent_responses()
    assert answer.body.partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert answer.body.records == b""
    assert ctx.role == "Resigned"
    assert ctx.sent_requests(BeginQuorumEpochRequest) == []
