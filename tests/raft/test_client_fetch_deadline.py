"""A follower's Fetch has a deadline of its own (docs/protocol.md §1.4.1): a lost Fetch is
sent again after ``fetch_max_wait_ms + fetch_round_trip_margin_ms``, not after
``request_timeout_ms``, so the fetch timer survives a lost message; every other request keeps
Kafka's request timeout."""

from __future__ import annotations

from kraft.protocol.envelope import OutboundRequest
from kraft.protocol.messages import (
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    LeaderIdAndEpoch,
    SnapshotId,
    VoteRequest,
)
from kraft.record.offsets import OffsetAndEpoch
from kraft.testing import RaftClientBuilder, RaftTestContext

LOCAL, LEADER = 1, 2
EPOCH = 5


def follower(**config: object) -> RaftTestContext[bytes]:
    """Replica 1 follows 2 in epoch 5, in a quorum of two: its only other voter (the one
    bootstrap server a timed-out Fetch falls back on) is the leader."""
    return (
        RaftClientBuilder(LOCAL, (LOCAL, LEADER))
        .with_elected_leader(EPOCH, LEADER)
        .with_config(**config)
        .build()
    )


def the_fetch(ctx: RaftTestContext[bytes]) -> OutboundRequest:
    request, _ = ctx.single_sent_request(FetchRequest)
    assert request.destination == LEADER
    return request


def deadline_of(ctx: RaftTestContext[bytes]) -> int:
    config = ctx.config
    return config.fetch_max_wait_ms + config.fetch_round_trip_margin_ms


def empty_answer() -> FetchResponse:
    return FetchResponse(high_watermark=-1, current_leader=LeaderIdAndEpoch(LEADER, EPOCH))


def lose(ctx: RaftTestContext[bytes], deadline: int) -> OutboundRequest:
    """The Fetch in flight is lost: nothing is sent again before ``deadline`` ms, then the
    Fetch goes out again (returned)."""
    ctx.advance(deadline - 1)
    ctx.poll()
    assert ctx.sent_requests(FetchRequest) == []
    ctx.advance(1)
    ctx.poll()
    return the_fetch(ctx)


def test_a_lost_fetch_is_sent_again_after_its_deadline_not_the_request_timeout() -> None:
    """§1.4.1: with Kafka's defaults the deadline is 500 + 200 ms, a third of the request
    timeout (2000 ms, as long as the fetch timeout)."""
    ctx = follower()
    deadline = deadline_of(ctx)
    assert (deadline, ctx.config.request_timeout_ms) == (700, 2000)
    ctx.poll()
    the_fetch(ctx)
    lose(ctx, deadline)
    assert ctx.role == "Follower"


def test_the_deadline_never_exceeds_the_request_timeout() -> None:
    """§1.4.1: a request timeout shorter than the long poll plus the margin bounds it."""
    ctx = follower(request_timeout_ms=600)
    ctx.poll()
    the_fetch(ctx)
    lose(ctx, 600)


def test_the_fetch_timer_survives_every_other_fetch_lost() -> None:
    """§1.4.1: half the Fetches are lost, the others answered empty after the leader's whole
    long poll; for ten fetch timeouts the follower stays a follower (with the request timeout
    as the deadline, the first loss let the fetch timer expire)."""
    ctx = follower()
    config = ctx.config
    deadline, wait = deadline_of(ctx), config.fetch_max_wait_ms
    ctx.poll()
    fetches = 0
    while ctx.clock.now_ms() < 10 * config.fetch_timeout_ms:
        request, _ = ctx.single_sent_request(FetchRequest)
        fetches += 1
        if fetches % 2:
            ctx.advance(deadline)  # lost
        else:
            ctx.advance(wait)
            ctx.deliver_response(request, empty_answer())
        ctx.poll()
        assert ctx.role == "Follower", f"after {fetches} fetches, at {ctx.clock.now_ms()} ms"
    assert fetches == 2 * -(-10 * config.fetch_timeout_ms // (deadline + wait))


def test_two_lost_fetches_in_a_row_are_retried_before_the_fetch_timer_expires() -> None:
    """§1.4.1: lost at 0 and at 700 ms, the Fetch sent at 1400 ms is answered after the
    leader's whole long poll, within the 2000 ms fetch timeout: the follower stays."""
    ctx = follower()
    deadline, wait = deadline_of(ctx), ctx.config.fetch_max_wait_ms
    ctx.poll()
    the_fetch(ctx)
    lose(ctx, deadline)
    third = lose(ctx, deadline)
    ctx.advance(wait)
    ctx.deliver_response(third, empty_answer())
    ctx.poll()
    ctx.advance(ctx.config.fetch_timeout_ms - 1)
    ctx.poll()
    assert ctx.role == "Follower"


def test_the_deadline_doubles_from_the_second_timeout_in_a_row() -> None:
    """§1.4.1: two deadlines of 700 ms, then 1400 ms, then 2000 ms (the request timeout
    bounds it); a fetch timeout long enough not to interfere."""
    ctx = follower(fetch_timeout_ms=60_000)
    deadline = deadline_of(ctx)
    ctx.poll()
    the_fetch(ctx)
    for wait in (deadline, deadline, 2 * deadline, ctx.config.request_timeout_ms):
        lose(ctx, wait)


def test_a_slow_answer_keeps_the_doubled_deadline_and_a_quick_one_restores_it() -> None:
    """§1.4.1: an answer that is slow rather than lost gets through: answered 1000 ms after
    it was sent (past the first deadline, within the doubled one), the next Fetch keeps the
    doubled deadline; answered within the first deadline, the next one has that again."""
    ctx = follower(fetch_timeout_ms=60_000)
    deadline = deadline_of(ctx)
    ctx.poll()
    the_fetch(ctx)
    lose(ctx, deadline)
    third = lose(ctx, deadline)
    ctx.advance(1000)
    ctx.deliver_response(third, empty_answer())
    ctx.poll()
    fourth = the_fetch(ctx)
    ctx.advance(deadline)
    ctx.poll()
    assert ctx.sent_requests(FetchRequest) == []  # still the doubled deadline
    ctx.deliver_response(fourth, empty_answer())  # within the first deadline
    ctx.poll()
    the_fetch(ctx)
    lose(ctx, deadline)


def test_a_lost_fetch_snapshot_is_sent_again_after_the_same_deadline() -> None:
    """§1.4.1: FetchSnapshot restarts the fetch timer too: a lost chunk request is asked
    again, from the same position, after 700 ms."""
    ctx = follower()
    ctx.poll()
    fetch = the_fetch(ctx)
    snapshot = SnapshotId.of(OffsetAndEpoch(10, 3))
    ctx.deliver_response(
        fetch,
        FetchResponse(snapshot_id=snapshot, current_leader=LeaderIdAndEpoch(LEADER, EPOCH)),
    )
    ctx.poll()
    first, body = ctx.single_sent_request(FetchSnapshotRequest)
    assert (first.destination, body.snapshot_id, body.position) == (LEADER, snapshot, 0)
    ctx.advance(deadline_of(ctx) - 1)
    ctx.poll()
    assert ctx.sent_requests() == []
    ctx.advance(1)
    ctx.poll()
    again, body = ctx.single_sent_request(FetchSnapshotRequest)
    assert (again.destination, body.snapshot_id, body.position) == (LEADER, snapshot, 0)
    assert again.correlation_id != first.correlation_id


def test_a_vote_keeps_the_request_timeout() -> None:
    """§1.4.1: only the fetcher's requests have the shorter deadline: a Prospective's
    pre-vote is not asked again before request_timeout_ms."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (LOCAL, LEADER))
        .with_unknown_leader(EPOCH)
        .with_config(election_timeout_ms=10_000)
        .build()
    )
    ctx.expire_election_timeout()
    (request,) = ctx.poll_until_request(VoteRequest)
    body = request.body
    assert isinstance(body, VoteRequest)
    assert (ctx.role, body.pre_vote, request.destination) == ("Prospective", True, LEADER)
    timeout = ctx.config.request_timeout_ms
    assert deadline_of(ctx) < timeout
    ctx.advance(timeout - 1)
    ctx.poll()
    assert ctx.sent_requests(VoteRequest) == []
    ctx.advance(1)
    ctx.poll()
    retry, _ = ctx.single_sent_request(VoteRequest)
    assert retry.correlation_id != request.correlation_id
