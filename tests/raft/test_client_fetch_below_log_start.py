"""A leader asked for offsets below its log start (docs/protocol.md §1.4): it points the fetcher
at the latest snapshot (KIP-630's SnapshotId) when one reaches the log start, and otherwise
answers OFFSET_OUT_OF_RANGE with one rate-limited ERROR line -- never UNKNOWN_SERVER_ERROR
(issue 17: a leader whose snapshot was lost answered Fetch(0) that way 1,767 times in 42 s)."""

from __future__ import annotations

import logging

import pytest

from kraft.protocol.errors import Errors
from kraft.protocol.messages import FetchRequest, FetchResponse, SnapshotId
from kraft.raft.fetch_server import BELOW_LOG_START_LOG_INTERVAL_MS
from kraft.raft.response_prologue import ERROR_LOG_INTERVAL_MS
from kraft.record.offsets import OffsetAndEpoch
from kraft.testing import RaftClientBuilder, RaftTestContext
from kraft.testing.messages import fetch_response

LOCAL, FOLLOWER = 1, 2
VOTERS = (1, 2, 3)
EPOCH = 2
SNAPSHOT = OffsetAndEpoch(5, EPOCH)
TIMESTAMP_MS = 1_704_067_200_000


def leader_cleaned_to_snapshot() -> RaftTestContext[bytes]:
    """Replica 1 leads epoch 2: offsets 0-1 of epoch 1, 2 the LeaderChange, 3-4 records; the
    HW is 5, snapshot (5, 2) is taken and the log cleaned up to it: it starts at 5. (A fetch
    timeout long enough that check-quorum never interferes.)"""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS)
        .append_to_log(1, [b"a", b"b"])
        .with_unknown_leader(1)
        .with_config(fetch_timeout_ms=1_000_000)
        .build()
    )
    assert ctx.become_leader() == EPOCH
    ctx.append_and_drain([b"c", b"d"])
    assert ctx.advance_leader_high_watermark_to_log_end() == 5
    take_snapshot(ctx, SNAPSHOT)
    assert ctx.log.delete_before_snapshot(SNAPSHOT)
    assert ctx.log.log_start_offset == 5
    ctx.sent_requests()
    ctx.sent_responses()
    return ctx


def take_snapshot(ctx: RaftTestContext[bytes], snapshot_id: OffsetAndEpoch) -> None:
    writer = ctx.client.create_snapshot(snapshot_id, TIMESTAMP_MS)
    assert writer is not None
    with writer:
        writer.append([b"state"])
        writer.freeze()


def lose_the_snapshot(ctx: RaftTestContext[bytes]) -> None:
    """The snapshot at the log start is gone (a disk lost it): the log still starts at 5."""
    ctx.log._drop_snapshot(SNAPSHOT)
    assert ctx.log.latest_snapshot_id is None and ctx.log.log_start_offset == 5


def fetch(ctx: RaftTestContext[bytes], offset: int, last_epoch: int) -> FetchResponse:
    ctx.deliver_request(
        FetchRequest(
            replica_id=FOLLOWER,
            current_leader_epoch=EPOCH,
            fetch_offset=offset,
            last_fetched_epoch=last_epoch,
            max_wait_ms=0,
        ),
        FOLLOWER,
    )
    ctx.poll()
    return ctx.single_sent_response(FetchResponse)


@pytest.mark.parametrize(("offset", "last_epoch"), [(0, 0), (3, EPOCH)])
def test_below_the_log_start_the_fetcher_is_sent_the_snapshot_id(
    offset: int, last_epoch: int
) -> None:
    ctx = leader_cleaned_to_snapshot()
    answer = fetch(ctx, offset, last_epoch)
    assert answer.partition_error_code == Errors.NONE
    assert answer.snapshot_id == SnapshotId.of(SNAPSHOT)


@pytest.mark.parametrize(("offset", "last_epoch"), [(0, 0), (3, EPOCH)])
def test_below_the_log_start_without_a_snapshot_is_offset_out_of_range(
    offset: int, last_epoch: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing can serve offsets 0-4 any more: OFFSET_OUT_OF_RANGE, no snapshot id, and one
    ERROR line however often the follower asks within the interval."""
    ctx = leader_cleaned_to_snapshot()
    lose_the_snapshot(ctx)
    caplog.set_level(logging.ERROR, logger="kraft.raft.fetch_server")
    for _ in range(3):
        answer = fetch(ctx, offset, last_epoch)
        assert answer.partition_error_code == Errors.OFFSET_OUT_OF_RANGE
        assert answer.snapshot_id is None and answer.records == b""
        assert answer.log_start_offset == 5
        ctx.advance(20)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(lines) == 1
    assert "below the log start 5" in lines[0] and "OFFSET_OUT_OF_RANGE" in lines[0]
    ctx.advance(BELOW_LOG_START_LOG_INTERVAL_MS)
    fetch(ctx, offset, last_epoch)
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2


def test_a_fetch_at_the_log_start_is_still_served_without_a_snapshot() -> None:
    ctx = leader_cleaned_to_snapshot()
    lose_the_snapshot(ctx)
    ctx.append_and_drain([b"e"])
    answer = fetch(ctx, 5, EPOCH)
    assert answer.partition_error_code == Errors.NONE
    assert answer.snapshot_id is None and answer.records != b""


def test_a_new_snapshot_past_the_log_start_serves_the_fetcher_again() -> None:
    """Once the state machine takes a snapshot again, the fetcher below the log start is
    pointed at it."""
    ctx = leader_cleaned_to_snapshot()
    lose_the_snapshot(ctx)
    assert fetch(ctx, 3, EPOCH).partition_error_code == Errors.OFFSET_OUT_OF_RANGE
    ctx.append_and_drain([b"e", b"f"])
    assert ctx.advance_leader_high_watermark_to_log_end() == 7
    ctx.sent_responses()
    take_snapshot(ctx, OffsetAndEpoch(7, EPOCH))
    answer = fetch(ctx, 3, EPOCH)
    assert answer.partition_error_code == Errors.NONE
    assert answer.snapshot_id == SnapshotId.of(OffsetAndEpoch(7, EPOCH))


def test_a_follower_answered_offset_out_of_range_logs_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The follower's side of the answer above: it retries at every backoff, and its
    "unexpected error" line comes at most once per ERROR_LOG_INTERVAL_MS, not every ~20 ms."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS)
        .with_elected_leader(EPOCH, FOLLOWER)
        .with_config(fetch_timeout_ms=1_000_000)  # an error does not reset the fetch timer
        .build()
    )
    caplog.set_level(logging.ERROR, logger="kraft.raft.response_prologue")
    answered = 0
    while ctx.clock.now_ms() < ERROR_LOG_INTERVAL_MS - 1_000:
        (request,) = ctx.poll_until_request(FetchRequest)
        ctx.deliver_response(
            request, fetch_response(EPOCH, FOLLOWER, error=Errors.OFFSET_OUT_OF_RANGE)
        )
        ctx.poll()
        ctx.advance(ctx.config.retry_backoff_ms)
        answered += 1
    lines = [r for r in caplog.records if "OFFSET_OUT_OF_RANGE" in r.getMessage()]
    assert answered > 10
    assert len(lines) == 1
    ctx.advance(ERROR_LOG_INTERVAL_MS)
    request = ctx.poll_until_request(FetchRequest)[-1]
    ctx.deliver_response(request, fetch_response(EPOCH, FOLLOWER, error=Errors.OFFSET_OUT_OF_RANGE))
    ctx.poll()
    assert len([r for r in caplog.records if "OFFSET_OUT_OF_RANGE" in r.getMessage()]) == 2
