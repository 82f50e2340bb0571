"""Log divergence: the leader's DivergingEpoch answer and the follower's truncation
(docs/protocol.md §1.4; Kafka's ``ReplicatedLog.validateOffsetAndEpoch`` /
``truncateToEndOffset``).

A fetcher tells the leader where its log ends (fetch_offset) and the epoch of its last record
(last_fetched_epoch). If the leader's log does not hold that epoch up to that offset, it
answers with the largest epoch at or below it and where that epoch ends in its own log; the
follower truncates to where both logs agree and fetches again. Committed records (below the
HW) are never truncated: Kafka fails fatally; kraft refuses and logs it, leaving the log as it
was. Kafka's counterparts: KafkaRaftClientTest.testFollowerLogReconciliation,
testHandleDivergingFetch*, MockLogTest.testTruncateToEndOffset*.
"""

from __future__ import annotations

import functools

import pytest

from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
)
from kraft.record.batch import encode_batch, iter_batches
from kraft.testing import LocalCluster, RaftClientBuilder, RaftTestContext, fetch_request

LOCAL, LEADER, OTHER = 1, 2, 3
VOTERS = (1, 2, 3)
FOLLOWER_EPOCH = 5


fetch = functools.partial(fetch_request, max_wait_ms=500)


# =============================================================================================
# Leader side
# =============================================================================================
def leader_context() -> RaftTestContext[bytes]:
    """Replica 1 leads epoch 4. Its log: epoch 1 at offsets 0-1, epoch 3 at offset 2, the
    LeaderChange of epoch 4 at offset 3 (LEO 4, no HW yet)."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS)
        .append_to_log(1, [b"a", b"b"])
        .append_to_log(3, [b"c"])
        .with_unknown_leader(3)
        .build()
    )
    assert ctx.become_leader() == 4
    assert ctx.log_end_offset == 4
    ctx.sent_requests()
    ctx.sent_responses()
    return ctx


def the_fetch_response(ctx: RaftTestContext[bytes]) -> FetchResponse:
    body = ctx.single_sent_response(FetchResponse)
    assert isinstance(body, FetchResponse)
    return body


@pytest.mark.parametrize(
    ("offset", "last_epoch", "diverging"),
    [
        (3, 2, EpochEndOffset(epoch=1, end_offset=2)),  # epoch 2 is not in the leader's log
        (4, 3, EpochEndOffset(epoch=3, end_offset=3)),  # past the end of epoch 3 here
        (5, 3, EpochEndOffset(epoch=3, end_offset=3)),  # past the leader's LEO too
        (1, 0, EpochEndOffset(epoch=0, end_offset=0)),  # below every epoch in the log
    ],
    ids=["unknown-epoch", "past-epoch-end", "past-log-end", "below-every-epoch"],
)
def test_leader_answers_a_diverging_fetch_with_the_epoch_end(
    offset: int, last_epoch: int, diverging: EpochEndOffset
) -> None:
    """§1.4/§1.11: when the leader's log does not hold last_fetched_epoch up to fetch_offset,
    it answers at once (whatever maxWait) with DivergingEpoch = the largest epoch <= the
    fetcher's and where it ends in the leader's log, and no records."""
    ctx = leader_context()
    ctx.deliver_request(fetch(4, LEADER, offset, last_epoch), LEADER)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert response.partition_error_code == Errors.NONE
    assert response.diverging_epoch == diverging
    assert response.records == b""
    assert response.snapshot_id is None
    assert response.current_leader == LeaderIdAndEpoch(LOCAL, 4)


@pytest.mark.parametrize(
    ("offset", "last_epoch", "first_offset"),
    [(0, 0, 0), (2, 1, 2), (3, 3, 3), (4, 4, None)],
    ids=["empty-fetcher", "end-of-epoch-1", "end-of-epoch-3", "caught-up"],
)
def test_leader_serves_a_fetcher_whose_log_agrees(
    offset: int, last_epoch: int, first_offset: int | None
) -> None:
    """§1.11 validateOffsetAndEpoch: offset 0 of an empty fetcher, or a fetcher at or before
    the end of its last epoch in the leader's log, is VALID: records, no DivergingEpoch."""
    ctx = leader_context()
    ctx.deliver_request(fetch(4, LEADER, offset, last_epoch), LEADER)
    ctx.poll()
    if first_offset is None:
        # Caught up: it moved the HW, so the answer is immediate (KIP-1166 aside, it is
        # empty); nothing diverges.
        ctx.advance(500)
        ctx.poll()
    response = the_fetch_response(ctx)
    assert response.diverging_epoch is None
    batches = list(iter_batches(response.records))
    if first_offset is None:
        assert batches == []
    else:
        assert batches[0].base_offset == first_offset
        assert batches[-1].next_offset == 4


def test_a_diverging_fetch_does_not_count_towards_the_high_watermark() -> None:
    """§1.4/§1.5: only a VALID fetch updates the replica's progress. A voter whose log diverges
    at offset 4 does not hold offset 3 of this epoch, so it must not commit it."""
    ctx = leader_context()
    ctx.deliver_request(fetch(4, LEADER, 4, 3), LEADER)
    ctx.poll()
    assert the_fetch_response(ctx).diverging_epoch is not None
    assert ctx.high_watermark is None
    ctx.deliver_request(fetch(4, LEADER, 4, 4), LEADER)
    ctx.poll()
    assert ctx.high_watermark == 4  # the same voter, now in agreement, does


# =============================================================================================
# Follower side
# =============================================================================================
def follower_context() -> RaftTestContext[bytes]:
    """Replica 1 follows 2 in epoch 5. Its log, one record per batch: epoch 1 at 0-1,
    epoch 3 at 2-4 (LEO 5)."""
    builder: RaftClientBuilder[bytes] = RaftClientBuilder(LOCAL, VOTERS)
    for epoch, value in [(1, b"a"), (1, b"b"), (3, b"c"), (3, b"d"), (3, b"e")]:
        builder.append_to_log(epoch, [value])
    return builder.with_elected_leader(FOLLOWER_EPOCH, LEADER).build()


def diverging_response(epoch: int, end_offset: int, high_watermark: int = -1) -> FetchResponse:
    return FetchResponse(
        high_watermark=high_watermark,
        diverging_epoch=EpochEndOffset(epoch=epoch, end_offset=end_offset),
        current_leader=LeaderIdAndEpoch(LEADER, FOLLOWER_EPOCH),
    )


def sent_fetch(ctx: RaftTestContext[bytes]) -> FetchRequest:
    ctx.poll()
    _, body = ctx.single_sent_request(FetchRequest)
    return body


@pytest.mark.parametrize(
    ("epoch", "end_offset", "new_end", "new_last_epoch"),
    [
        (3, 3, 3, 3),  # we hold epoch 3: keep up to the smaller end, the leader's
        (3, 9, 5, 3),  # ... here ours
        (2, 4, 2, 1),  # we lack epoch 2: keep our largest epoch below it (1) to its end
        (0, 1, 1, 1),  # epoch 0: min(offset, LEO)
        (0, 0, 0, 0),  # epoch 0 at 0: nothing in common
    ],
    ids=["same-epoch", "same-epoch-ours-shorter", "epoch-missing", "epoch-zero", "all"],
)
def test_follower_truncates_to_where_the_logs_agree(
    epoch: int, end_offset: int, new_end: int, new_last_epoch: int
) -> None:
    """§1.4 truncateToEndOffset: epoch 0 -> min(end, LEO); an epoch we hold -> min(our end of
    it, the leader's); an epoch we lack -> the end of our largest epoch below it. Then the
    follower fetches from its new LEO and last epoch."""
    ctx = follower_context()
    ctx.poll()
    sent, body = ctx.single_sent_request(FetchRequest)
    assert (body.fetch_offset, body.last_fetched_epoch) == (5, 3)
    ctx.deliver_response(sent, diverging_response(epoch, end_offset))
    ctx.poll()
    assert ctx.log_end_offset == new_end
    assert ctx.log.last_fetched_epoch == new_last_epoch
    assert [b.next_offset for b in ctx.log.batches()][-1:] == ([new_end] if new_end else [])
    assert ctx.role == "Follower"
    body = sent_fetch(ctx)
    assert (body.fetch_offset, body.last_fetched_epoch) == (new_end, new_last_epoch)


def test_truncation_then_the_leaders_records_are_appended() -> None:
    """§1.4 (Kafka's testFollowerLogReconciliation): after truncating, the follower appends
    what the leader sends from the point of agreement."""
    ctx = follower_context()
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    ctx.deliver_response(sent, diverging_response(3, 3))
    ctx.poll()
    ctx.poll()
    sent_request, body = ctx.single_sent_request(FetchRequest)
    assert (body.fetch_offset, body.last_fetched_epoch) == (3, 3)
    records = encode_batch(3, 4, [b"D"], timestamp_ms=0) + encode_batch(
        4, FOLLOWER_EPOCH, [b"E", b"F"], timestamp_ms=0
    )
    ctx.deliver_response(
        sent_request,
        FetchResponse(
            high_watermark=6,
            records=records,
            current_leader=LeaderIdAndEpoch(LEADER, FOLLOWER_EPOCH),
        ),
    )
    ctx.poll()
    values = [v for b in ctx.log.batches() for v in b.values()]
    assert values == [b"a", b"b", b"c", b"D", b"E", b"F"]
    assert ctx.log.epoch_entries() == [(1, 0), (3, 2), (4, 3), (FOLLOWER_EPOCH, 4)]
    assert ctx.high_watermark == 6


def test_truncation_resets_the_fetch_timer() -> None:
    """§1.4: a DivergingEpoch answer is a successful fetch: it restarts the fetch timer."""
    ctx = follower_context()
    timeout = ctx.config.fetch_timeout_ms
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    ctx.advance(ctx.config.fetch_max_wait_ms)  # within the Fetch's deadline (§1.4.1)
    ctx.deliver_response(sent, diverging_response(3, 3))
    ctx.poll()
    ctx.advance(timeout - 1)
    ctx.poll()
    assert ctx.role == "Follower"


def follower_with_high_watermark(high_watermark: int) -> RaftTestContext[bytes]:
    ctx = follower_context()
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    ctx.deliver_response(
        sent,
        FetchResponse(
            high_watermark=high_watermark,
            current_leader=LeaderIdAndEpoch(LEADER, FOLLOWER_EPOCH),
        ),
    )
    ctx.poll()
    assert ctx.high_watermark == high_watermark
    return ctx


@pytest.mark.parametrize(("epoch", "end_offset"), [(3, 3), (2, 2), (0, 0)])
def test_a_diverging_end_below_the_high_watermark_is_refused(epoch: int, end_offset: int) -> None:
    """§1.4: truncating below the HW would drop committed records. Kafka raises a fatal
    error; kraft logs and refuses it, and the log, its epochs and the HW stay untouched."""
    ctx = follower_with_high_watermark(4)
    before = ctx.log.read(0).records
    epochs = ctx.log.epoch_entries()
    sent, _ = ctx.single_sent_request(FetchRequest)  # sent by the poll that handled the last
    ctx.deliver_response(sent, diverging_response(epoch, end_offset, high_watermark=4))
    ctx.poll()
    assert ctx.log.read(0).records == before
    assert ctx.log.epoch_entries() == epochs
    assert (ctx.log_end_offset, ctx.high_watermark, ctx.log.high_watermark) == (5, 4, 4)
    assert ctx.role == "Follower"
    ctx.advance(ctx.config.retry_backoff_ms)
    body = sent_fetch(ctx)
    assert (body.fetch_offset, body.last_fetched_epoch, body.high_watermark) == (5, 3, 4)


def test_a_truncation_point_below_the_high_watermark_is_refused() -> None:
    """§1.4/§1.11: the leader's end (4) is at the HW (3) or above, but this log lacks the
    diverging epoch (2), so it would truncate to the end of its epoch 1 (offset 2), below the
    HW. That too is refused (Kafka: truncateTo below the HW throws) and the log is untouched."""
    ctx = follower_with_high_watermark(3)
    before = ctx.log.read(0).records
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    ctx.deliver_response(sent, diverging_response(2, 4, high_watermark=3))
    ctx.poll()
    assert ctx.log.read(0).records == before
    assert (ctx.log_end_offset, ctx.high_watermark) == (5, 3)
    assert ctx.role == "Follower"


def test_a_diverging_end_at_the_high_watermark_is_accepted() -> None:
    """§1.4: only an end strictly below the HW is refused; truncating to the HW loses
    nothing committed."""
    ctx = follower_with_high_watermark(4)
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    ctx.deliver_response(sent, diverging_response(3, 4, high_watermark=4))
    ctx.poll()
    assert (ctx.log_end_offset, ctx.high_watermark) == (4, 4)


# =============================================================================================
# End to end
# =============================================================================================
def test_a_deposed_leader_drops_its_uncommitted_records() -> None:
    """§1.4 end to end: a leader cut off from the quorum appends records nobody else has; a new
    leader is elected and writes others. Back in touch, the old leader's fetch diverges, it
    truncates its uncommitted tail and ends with the new leader's log, byte for byte."""
    cluster: LocalCluster[bytes] = LocalCluster(3)
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    cluster.append([b"committed"])
    first = cluster.leader()
    assert first is not None
    assert cluster.run_until(
        lambda: all(listener.records == [b"committed"] for listener in cluster.listeners.values()),
        5_000,
    )
    cluster.disconnected.add(first)
    old = cluster.nodes[first]
    old.prepare_append(old.epoch, [b"lost-1", b"lost-2"])
    old.schedule_prepared_append()
    assert cluster.run_until(
        lambda: (
            cluster.leader() not in (None, first)
            and b"lost-2" in cluster.logs[first].read(0).records
        ),
        20_000,
    )
    second = cluster.leader()
    assert second is not None
    cluster.append([b"new"])
    assert cluster.run_until(lambda: b"new" in cluster.listeners[second].records, 5_000)
    cluster.disconnected.clear()
    assert cluster.run_until(
        lambda: (
            cluster.logs[first].read(0).records == cluster.logs[second].read(0).records
            and cluster.nodes[first].high_watermark == cluster.logs[second].log_end_offset
        ),
        20_000,
    )
    values = [v for b in cluster.logs[first].batches() if not b.is_control for v in b.values()]
    assert values == [b"committed", b"new"]
    assert cluster.run_until(
        lambda: cluster.listeners[first].records == [b"committed", b"new"], 5_000
    )
