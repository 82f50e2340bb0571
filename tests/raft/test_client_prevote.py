"""KIP-996 pre-vote from the asking side: the Prospective state (docs/protocol.md §1.1,
§1.3, §1.6).

A voter whose election timer (or fetch timer) runs out becomes Prospective in the same epoch,
without persisting anything, and asks the other voters for pre-votes carrying its current
epoch. A majority makes it a Candidate (epoch + 1); a lost or timed-out pre-vote sends it back
to Follower (a known leader with endpoints) or Unattached in the same epoch. A voter that
answers UNSUPPORTED_VERSION makes it a Candidate at once.

Mirrors Kafka's ``KafkaRaftClientPreVoteTest`` (testPreVoteNotSupportedByRemote,
testProspectiveTransitionsToUnattachedOnElectionFailure, testProspectiveWithLeaderTransitionsTo
Follower, testPreVoteResponseIgnoredAfterBecomingFollower, testPreVoteRequestTimeout, ...).
"""

from __future__ import annotations

from typing import Any

from kraft.log.quorum_state import ElectionState
from kraft.protocol.envelope import OutboundRequest
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    FetchRequest,
    NodeEndpoint,
    VoteRequest,
    VoteResponse,
)
from kraft.testing import RaftClientBuilder, RaftTestContext, begin_epoch_request

LOCAL = 1
EPOCH = 5


def builder(
    local_id: int | None, voters: tuple[int, ...], seed: int = 0
) -> RaftClientBuilder[bytes]:
    return RaftClientBuilder(local_id, voters, seed=seed)


def to_prospective(ctx: RaftTestContext[Any]) -> list[OutboundRequest]:
    """Expire the election timer of an Unattached voter; return the pre-votes it sent,
    ordered by destination."""
    ctx.expire_election_timeout()
    ctx.poll_until_idle()
    assert ctx.role == "Prospective"
    return sorted(ctx.sent_requests(VoteRequest), key=lambda r: r.destination)


def vote_body(request: OutboundRequest) -> VoteRequest:
    body = request.body
    assert isinstance(body, VoteRequest)
    return body


def reply(
    ctx: RaftTestContext[Any],
    request: OutboundRequest,
    granted: bool,
    *,
    epoch: int | None = None,
    leader_id: int = -1,
    **fields: Any,
) -> None:
    """Answer a vote request and handle the answer (one poll)."""
    body = vote_body(request)
    ctx.deliver_response(
        request,
        VoteResponse(
            leader_epoch=body.replica_epoch if epoch is None else epoch,
            leader_id=leader_id,
            vote_granted=granted,
            **fields,
        ),
    )
    ctx.poll()


def begin_epoch(epoch: int, leader: int) -> BeginQuorumEpochRequest:
    return begin_epoch_request(epoch, leader, voter_id=LOCAL)


# =================================================================================================
# Becoming Prospective
# =================================================================================================
def test_unattached_timeout_becomes_prospective_same_epoch_not_persisted() -> None:
    """§1.1: Unattached election timeout -> Prospective in the same epoch; Prospective is
    never persisted."""
    ctx = builder(LOCAL, (1, 2, 3)).with_unknown_leader(EPOCH).build()
    writes = list(ctx.store.writes)
    to_prospective(ctx)
    assert ctx.epoch == EPOCH
    assert ctx.voted_id is None
    assert ctx.leader_id is None
    assert ctx.store.writes == writes


def test_pre_vote_requests_carry_the_current_epoch_and_log_end() -> None:
    """§1.3 Vote: a pre-vote has PreVote=true, ReplicaEpoch = the current epoch (not +1), the
    local id, and the log's last epoch and end offset; one to each other voter."""
    ctx = (
        builder(LOCAL, (1, 2, 3))
        .append_to_log(2, [b"a", b"b"])
        .append_to_log(4, [b"c"])
        .with_unknown_leader(EPOCH)
        .build()
    )
    requests = to_prospective(ctx)
    assert [r.destination for r in requests] == [2, 3]
    for request in requests:
        body = vote_body(request)
        assert body.pre_vote
        assert body.replica_epoch == EPOCH
        assert body.replica_id == LOCAL
        assert body.last_offset_epoch == 4
        assert body.last_offset == 3
        assert body.voter_id == request.destination


def test_voted_replica_keeps_its_vote_when_prospective() -> None:
    """§1.1: Prospective keeps the votedKey of the state it came from."""
    ctx = builder(LOCAL, (1, 2, 3)).with_voted_candidate(EPOCH, 2).build()
    to_prospective(ctx)
    assert ctx.voted_id == 2
    assert ctx.epoch == EPOCH
    assert ctx.stored_state() == ElectionState(EPOCH, voted_id=2)


def test_follower_fetch_timeout_becomes_prospective_keeping_leader() -> None:
    """§1.1: a voter-follower whose fetch timer expires becomes Prospective (not Candidate) in
    the same epoch, still knowing its leader, and asks for pre-votes."""
    ctx = builder(LOCAL, (1, 2, 3)).with_elected_leader(EPOCH, 2).build()
    writes = list(ctx.store.writes)
    ctx.expire_fetch_timeout()
    ctx.poll_until_idle()
    assert ctx.role == "Prospective"
    assert ctx.epoch == EPOCH
    assert ctx.leader_id == 2
    assert ctx.store.writes == writes
    requests = ctx.sent_requests(VoteRequest)
    assert sorted(r.destination for r in requests) == [2, 3]
    assert all(vote_body(r).pre_vote and vote_body(r).replica_epoch == EPOCH for r in requests)


# =================================================================================================
# Winning the pre-vote
# =================================================================================================
def test_majority_of_pre_votes_makes_a_candidate() -> None:
    """§1.1: a majority of pre-votes (the local one counts) -> Candidate in epoch + 1, its
    vote for itself persisted, and standard votes sent with that epoch."""
    ctx = builder(LOCAL, (1, 2, 3)).with_unknown_leader(EPOCH).build()
    requests = to_prospective(ctx)
    reply(ctx, requests[0], True)
    assert ctx.role == "Candidate"
    assert ctx.epoch == EPOCH + 1
    assert ctx.voted_id == LOCAL
    assert ctx.stored_state() == ElectionState(EPOCH + 1, voted_id=LOCAL)
    ctx.poll_until_idle()
    votes = sorted(ctx.sent_requests(VoteRequest), key=lambda r: r.destination)
    assert [r.destination for r in votes] == [2, 3]
    for vote in votes:
        body = vote_body(vote)
        assert not body.pre_vote
        assert body.replica_epoch == EPOCH + 1
        assert body.last_offset_epoch == 0
        assert body.last_offset == 0


def test_one_pre_vote_is_not_a_majority_of_five() -> None:
    """§1.1: with five voters the Prospective needs two more pre-votes besides its own."""
    ctx = builder(LOCAL, (1, 2, 3, 4, 5)).with_unknown_leader(EPOCH).build()
    requests = to_prospective(ctx)
    assert len(requests) == 4
    reply(ctx, requests[0], True)
    assert ctx.role == "Prospective"
    reply(ctx, requests[1], False)
    assert ctx.role == "Prospective"
    reply(ctx, requests[2], True)
    assert ctx.role == "Candidate"
    assert ctx.epoch == EPOCH + 1


def test_voted_prospective_becomes_candidate_after_winning() -> None:
    """§1.1: a Prospective that voted for another replica in this epoch may still win the
    pre-vote and stand in epoch + 1, where it votes for itself."""
    ctx = builder(LOCAL, (1, 2, 3)).with_voted_candidate(EPOCH, 2).build()
    requests = to_prospective(ctx)
    reply(ctx, requests[1], True)
    assert ctx.role == "Candidate"
    assert ctx.stored_state() == ElectionState(EPOCH + 1, voted_id=LOCAL)


# =================================================================================================
# Losing the pre-vote
# =================================================================================================
def test_pre_vote_loss_without_leader_goes_unattached_same_epoch() -> None:
    """§1.6: a Prospective that a majority rejects goes back to Unattached in the same epoch,
    at once."""
    ctx = builder(LOCAL, (1, 2, 3)).with_unknown_leader(EPOCH).build()
    requests = to_prospective(ctx)
    reply(ctx, requests[0], False)
    assert ctx.role == "Prospective"  # one rejection out of three is not a loss
    reply(ctx, requests[1], False)
    assert ctx.role == "Unattached"
    assert ctx.epoch == EPOCH
    assert ctx.leader_id is None
    assert ctx.stored_state() == ElectionState(EPOCH)


def test_pre_vote_loss_in_a_pair_is_one_rejection() -> None:
    """§1.6: with two voters a single rejection loses the pre-vote."""
    ctx = builder(LOCAL, (1, 2)).with_unknown_leader(EPOCH).build()
    requests = to_prospective(ctx)
    reply(ctx, requests[0], False)
    assert ctx.role == "Unattached"
    assert ctx.epoch == EPOCH
    # ... and the next election timeout makes it Prospective again, asking again.
    requests = to_prospective(ctx)
    assert [vote_body(r).pre_vote for r in requests] == [True]
    assert vote_body(requests[0]).replica_epoch == EPOCH


def test_pre_vote_loss_keeps_the_vote() -> None:
    """§1.1: Prospective loss -> Unattached in the same epoch, keeping votedKey."""
    ctx = builder(LOCAL, (1, 2, 3)).with_voted_candidate(EPOCH, 2).build()
    requests = to_prospective(ctx)
    reply(ctx, requests[0], False)
    reply(ctx, requests[1], False)
    assert ctx.role == "Voted"
    assert ctx.epoch == EPOCH
    assert ctx.voted_id == 2
    assert ctx.stored_state() == ElectionState(EPOCH, voted_id=2)


def test_pre_vote_timeout_without_leader_goes_unattached() -> None:
    """§1.6: a Prospective whose election timer expires goes Unattached in the same epoch,
    then Prospective again on the next timeout."""
    ctx = builder(LOCAL, (1, 2)).with_unknown_leader(EPOCH).build()
    to_prospective(ctx)
    ctx.expire_election_timeout()
    ctx.poll()
    assert ctx.role == "Unattached"
    assert ctx.epoch == EPOCH
    to_prospective(ctx)
    assert ctx.epoch == EPOCH


def test_pre_vote_timeout_with_leader_goes_back_to_follower() -> None:
    """§1.6: a Prospective that knows a leader with endpoints returns to following it (same
    epoch) when its election timer expires, and fetches from it again."""
    ctx = builder(LOCAL, (1, 2, 3)).with_elected_leader(EPOCH, 2).build()
    ctx.expire_fetch_timeout()
    ctx.poll_until_idle()
    assert ctx.role == "Prospective"
    ctx.sent_requests()
    ctx.expire_election_timeout()
    ctx.poll_until_idle()
    assert ctx.role == "Follower"
    assert ctx.leader_id == 2
    assert ctx.epoch == EPOCH
    fetch, _ = ctx.single_sent_request(FetchRequest)
    assert fetch.destination == 2
    # ... and another fetch timeout makes it Prospective again.
    ctx.expire_fetch_timeout()
    ctx.poll_until_idle()
    assert ctx.role == "Prospective"
    assert ctx.leader_id == 2


def test_pre_vote_loss_with_leader_goes_back_to_follower() -> None:
    """§1.6: a Prospective with a known leader that a majority rejects follows that leader
    again (same epoch) at once."""
    ctx = builder(LOCAL, (1, 2, 3)).with_elected_leader(EPOCH, 2).build()
    ctx.expire_fetch_timeout()
    ctx.poll_until_idle()
    requests = sorted(ctx.sent_requests(VoteRequest), key=lambda r: r.destination)
    reply(ctx, requests[0], False, leader_id=2)
    reply(ctx, requests[1], False, leader_id=2)
    assert ctx.role == "Follower"
    assert ctx.leader_id == 2
    assert ctx.epoch == EPOCH
    assert ctx.stored_state() == ElectionState(EPOCH, leader_id=2)


def test_pre_vote_loss_with_leader_without_endpoints_goes_unattached() -> None:
    """§1.6: a known leader without endpoints cannot be followed: a Prospective losing its
    pre-vote goes Unattached (same epoch), still knowing that leader id."""
    ctx = builder(LOCAL, (1, 2)).with_elected_leader(EPOCH, 7).build()
    assert ctx.role == "Unattached"
    to_prospective(ctx)
    assert ctx.leader_id == 7
    ctx.expire_election_timeout()
    ctx.poll()
    assert ctx.role == "Unattached"
    assert ctx.epoch == EPOCH
    assert ctx.leader_id == 7
    to_prospective(ctx)
    assert ctx.leader_id == 7


# =================================================================================================
# Discovering a leader while Prospective
# =================================================================================================
def test_prospective_follows_leader_named_in_a_granting_response() -> None:
    """§1.3 common handling: a pre-vote response naming a leader of the current epoch makes
    the Prospective a Follower of it."""
    ctx = builder(LOCAL, (1, 2, 3)).with_unknown_leader(EPOCH).build()
    requests = to_prospective(ctx)
    reply(ctx, requests[0], True, leader_id=2, node_endpoints=(NodeEndpoint(2, "localhost", 9992),))
    assert ctx.role == "Follower"
    assert ctx.leader_id == 2
    assert ctx.epoch == EPOCH


def test_prospective_follows_leader_of_a_higher_epoch() -> None:
    """§1.3 common handling: FENCED_LEADER_EPOCH naming a leader of a higher epoch -> Follower
    of that epoch."""
    ctx = builder(LOCAL, (1, 2, 3)).with_elected_leader(EPOCH, 2).build()
    ctx.expire_fetch_timeout()
    ctx.poll_until_idle()
    requests = sorted(ctx.sent_requests(VoteRequest), key=lambda r: r.destination)
    reply(
        ctx,
        requests[0],
        False,
        epoch=EPOCH + 1,
        leader_id=3,
        partition_error_code=Errors.FENCED_LEADER_EPOCH,
    )
    assert ctx.role == "Follower"
    assert ctx.leader_id == 3
    assert ctx.epoch == EPOCH + 1


def test_prospective_becomes_follower_on_begin_quorum_epoch() -> None:
    """§1.1: a leader seen at the current epoch -> Follower."""
    ctx = builder(LOCAL, (1, 2)).with_unknown_leader(EPOCH).build()
    to_prospective(ctx)
    ctx.deliver_request(begin_epoch(EPOCH, 2), 2)
    ctx.poll()
    assert ctx.role == "Follower"
    assert ctx.leader_id == 2
    assert ctx.epoch == EPOCH
    body = ctx.single_sent_response(BeginQuorumEpochResponse)
    assert isinstance(body, BeginQuorumEpochResponse)
    assert body.partition_error_code == Errors.NONE


def test_pre_vote_responses_ignored_after_becoming_follower() -> None:
    """§1.3: a transition drops the requests in flight: granting pre-vote responses arriving
    after the replica became a Follower change nothing."""
    ctx = builder(LOCAL, (1, 2, 3)).with_unknown_leader(EPOCH).build()
    requests = to_prospective(ctx)
    ctx.deliver_request(begin_epoch(EPOCH, 3), 3)
    ctx.poll()
    assert (ctx.role, ctx.leader_id) == ("Follower", 3)
    reply(ctx, requests[0], True)
    reply(ctx, requests[1], True, leader_id=3)
    assert (ctx.role, ctx.leader_id, ctx.epoch) == ("Follower", 3, EPOCH)
    assert ctx.stored_state() == ElectionState(EPOCH, leader_id=3)


# =================================================================================================
# UNSUPPORTED_VERSION
# =================================================================================================
def test_unsupported_version_makes_prospective_a_candidate_at_once() -> None:
    """§1.3: a Prospective receiving top-level UNSUPPORTED_VERSION on Vote becomes a Candidate
    immediately (epoch + 1); later answers to its pre-votes are stale and ignored."""
    ctx = builder(LOCAL, (1, 2, 3)).with_unknown_leader(EPOCH).build()
    requests = to_prospective(ctx)
    ctx.deliver_response(requests[0], VoteResponse(error_code=Errors.UNSUPPORTED_VERSION))
    ctx.poll()
    assert ctx.role == "Candidate"
    assert ctx.epoch == EPOCH + 1
    assert ctx.stored_state() == ElectionState(EPOCH + 1, voted_id=LOCAL)
    # The other voter's pre-vote grant arrives late: it is not a standard vote.
    reply(ctx, requests[1], True)
    assert ctx.role == "Candidate"
    assert ctx.epoch == EPOCH + 1
    ctx.poll_until_idle()
    votes = ctx.sent_requests(VoteRequest)
    assert sorted(r.destination for r in votes) == [2, 3]
    assert all(not vote_body(r).pre_vote and vote_body(r).replica_epoch == EPOCH + 1 for r in votes)


def test_unsupported_version_after_the_election_round_moves_on() -> None:
    """§1.3 (Kafka's testPreVoteNotSupportedByRemote): after the forced candidacy times out,
    the replica is Prospective again in epoch + 1; winning that pre-vote makes it Candidate in
    epoch + 2, and a late UNSUPPORTED_VERSION for the old pre-vote changes nothing."""
    ctx = builder(LOCAL, (1, 2, 3)).with_unknown_leader(EPOCH).build()
    requests = to_prospective(ctx)
    ctx.deliver_response(requests[0], VoteResponse(error_code=Errors.UNSUPPORTED_VERSION))
    ctx.poll()
    assert ctx.role == "Candidate"
    ctx.poll_until_idle()
    ctx.sent_requests()
    ctx.expire_election_timeout()
    ctx.poll_until_idle()
    assert ctx.role == "Prospective"
    assert ctx.epoch == EPOCH + 1
    requests = sorted(ctx.sent_requests(VoteRequest), key=lambda r: r.destination)
    assert [vote_body(r).replica_epoch for r in requests] == [EPOCH + 1, EPOCH + 1]
    assert all(vote_body(r).pre_vote for r in requests)
    reply(ctx, requests[0], True)
    assert ctx.role == "Candidate"
    assert ctx.epoch == EPOCH + 2
    ctx.deliver_response(requests[1], VoteResponse(error_code=Errors.UNSUPPORTED_VERSION))
    ctx.poll()
    assert ctx.role == "Candidate"
    assert ctx.epoch == EPOCH + 2


def test_unsupported_version_to_a_candidate_does_not_bump_epoch() -> None:
    """§1.3: only a Prospective turns UNSUPPORTED_VERSION into a candidacy; a Candidate's
    standard vote answered so is just an error (no new epoch)."""
    ctx = builder(LOCAL, (1, 2, 3)).with_voted_candidate(EPOCH, LOCAL).build()
    assert ctx.role == "Candidate"
    ctx.poll_until_idle()
    votes = sorted(ctx.sent_requests(VoteRequest), key=lambda r: r.destination)
    assert all(not vote_body(r).pre_vote for r in votes)
    ctx.deliver_response(votes[0], VoteResponse(error_code=Errors.UNSUPPORTED_VERSION))
    ctx.poll()
    assert ctx.role == "Candidate"
    assert ctx.epoch == EPOCH


# =================================================================================================
# Request timeout and retry
# =================================================================================================
def test_pre_vote_request_timeout_is_retried_and_the_late_answer_ignored() -> None:
    """§1.3 (Kafka's testPreVoteRequestTimeout): an unanswered pre-vote is sent again after
    the request timeout; the answer to the first one, arriving late, is stale; the answer to
    the retry counts."""
    ctx = (
        builder(LOCAL, (1, 2))
        .with_config(request_timeout_ms=300)
        .with_unknown_leader(EPOCH)
        .build()
    )
    (first,) = to_prospective(ctx)
    ctx.advance(300)
    ctx.poll_until_idle()
    assert ctx.role == "Prospective"
    retry, retry_body = ctx.single_sent_request(VoteRequest)
    assert retry.destination == 2
    assert retry.correlation_id != first.correlation_id
    assert retry_body.pre_vote
    assert retry_body.replica_epoch == EPOCH
    reply(ctx, first, True)
    assert ctx.role == "Prospective"
    reply(ctx, retry, True)
    assert ctx.role == "Candidate"
    assert ctx.stored_state() == ElectionState(EPOCH + 1, voted_id=LOCAL)


def test_pre_vote_not_resent_while_in_flight() -> None:
    """§1.3: one request in flight per voter: polling again before the request timeout sends
    no second pre-vote."""
    ctx = builder(LOCAL, (1, 2, 3)).with_unknown_leader(EPOCH).build()
    to_prospective(ctx)
    for _ in range(5):
        ctx.advance(100)
        ctx.poll()
    assert ctx.role == "Prospective"
    assert ctx.sent_requests(VoteRequest) == []


def test_pre_vote_retry_goes_only_to_voters_without_an_answer() -> None:
    """§1.3: Prospective sends Vote only to voters with no recorded (pre-)vote."""
    ctx = (
        builder(LOCAL, (1, 2, 3, 4, 5))
        .with_config(request_timeout_ms=300)
        .with_unknown_leader(EPOCH)
        .build()
    )
    requests = to_prospective(ctx)
    reply(ctx, requests[0], True)  # voter 2 grants
    reply(ctx, requests[1], False)  # voter 3 rejects
    ctx.advance(300)
    ctx.poll_until_idle()
    assert ctx.role == "Prospective"
    assert sorted(r.destination for r in ctx.sent_requests(VoteRequest)) == [4, 5]


def test_pre_vote_response_from_wrong_source_ignored() -> None:
    """§1.3: a response counts only if it answers the request in flight to its source."""
    ctx = builder(LOCAL, (1, 2, 3)).with_unknown_leader(EPOCH).build()
    requests = to_prospective(ctx)
    ctx.deliver_response(
        requests[0].correlation_id, VoteResponse(leader_epoch=EPOCH, vote_granted=True), source=3
    )
    ctx.poll()
    assert ctx.role == "Prospective"
