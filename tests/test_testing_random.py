"""``MockableRandom`` and ``RaftClientBuilder.with_random_draws``: a test fixes a client's next
random draws and asserts its election timeout and its election backoff to the millisecond."""

from __future__ import annotations

import random

import pytest

from kraft.protocol.messages import VoteRequest
from kraft.testing import MockableRandom, RaftClientBuilder, RaftTestContext, vote_response

ELECTION_TIMEOUT_MS = 1000


def test_queued_draws_come_first_then_the_seeded_sequence() -> None:
    mocked = MockableRandom(7)
    plain = random.Random(7)
    mocked.queue_draws(3, 0)
    assert [mocked.randrange(10), mocked.randrange(5)] == [3, 0]
    assert mocked.queued_draws == []
    assert [mocked.randrange(1000) for _ in range(5)] == [plain.randrange(1000) for _ in range(5)]


def test_a_draw_with_a_bound_waits_for_a_range_of_that_size() -> None:
    mocked = MockableRandom(0)
    mocked.queue_draws(1, bound=2)
    mocked.queue_draws(85, bound=ELECTION_TIMEOUT_MS)
    assert mocked.randrange(ELECTION_TIMEOUT_MS) == 85
    assert mocked.queued_draws == [(2, 1)]
    assert mocked.randrange(10, 14, 2) == 12  # the second of (10, 12)
    assert mocked.queued_draws == []


def test_a_queued_draw_outside_the_range_is_refused() -> None:
    mocked = MockableRandom(0)
    mocked.queue_draws(5)
    with pytest.raises(ValueError, match=r"not in \[0, 5\)"):
        mocked.randrange(5)


def test_an_unattached_voter_times_out_exactly_after_the_fixed_jitter() -> None:
    """KIP-595: the election timeout is ``election_timeout_ms`` plus a jitter drawn from
    [0, election_timeout_ms); with the jitter fixed at 85 it is exactly 1085 ms."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(local_id=1, voters=(1, 2, 3))
        .with_config(election_timeout_ms=ELECTION_TIMEOUT_MS)
        .with_random_draws(85, bound=ELECTION_TIMEOUT_MS)
        .build()
    )
    assert context.random.queued_draws == []  # drawn by initialize()
    assert context.role == "Unattached"
    assert context.poll() == 1085
    context.advance(1084)
    assert context.poll() == 1
    assert context.role == "Unattached"
    context.advance(1)
    context.poll()
    assert context.role == "Prospective"


@pytest.mark.parametrize("draw", [0, 1])
def test_a_rejected_candidate_backs_off_exactly_the_drawn_time(draw: int) -> None:
    """Kafka's ``binaryExponentialElectionBackoffMs``: after its first lost election a
    candidate waits 100 ms x a draw from [0, 2), then starts over with a pre-vote."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(local_id=1, voters=(1, 2))
        .with_voted_candidate(epoch=2, candidate_id=1)
        .build()
    )
    assert context.role == "Candidate"
    (request,) = context.poll_until_request(VoteRequest)
    context.random.queue_draws(draw, bound=2)
    context.deliver_response(request, vote_response(2, granted=False))
    context.poll()
    assert context.random.queued_draws == []
    backoff_ms = 100 * draw
    if backoff_ms:
        context.advance(backoff_ms - 1)
        context.poll()
        assert context.role == "Candidate"
        context.advance(1)
    context.poll()
    assert (context.role, context.epoch) == ("Prospective", 2)
