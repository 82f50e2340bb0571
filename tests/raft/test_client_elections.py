"""KafkaRaftClient elections: startup, the state machine as the client drives it, and timers
(docs/protocol.md §1.1, §1.3 Vote, §1.6).

- Startup (``initialize``): the five rules, tried in order; never Leader; a single voter
  elects itself at once.
- Illegal transitions, as a peer could try to provoke them: the client stays where it is.
- Timers: the randomized election timeout in [T, 2T), reset when a vote is granted; a lost
  candidate backs off, then becomes Prospective; a candidate that times out becomes
  Prospective; a resigned leader's timeout leads to Unattached(epoch + 1).
- Candidate requests: a standard Vote in epoch + 1 with the log's end, to voters with no
  recorded vote, one in flight per voter; responses to requests dropped by a transition or a
  timeout are ignored.

Mirrors Kafka's ``KafkaRaftClientTest`` (testInitializeSingleMemberQuorum,
testInitializeAsCandidateFromStateStore, testInitializeAsResignedLeaderFromStateStore,
testRetryElection, testVoteRequestTimeout, testElectionTimeoutAfterUserInitiatedResign, ...).
"""

from __future__ import annotations

from typing import Any

import pytest

from kraft.errors import IllegalStateError, NotLeaderError
from kraft.log.quorum_state import ElectionState
from kraft.protocol.envelope import OutboundRequest
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    FetchRequest,
    VoteRequest,
    VoteResponse,
)
from kraft.record.batch import iter_batches
from kraft.record.control import ControlRecordType, LeaderChangeMessage, control_records
from kraft.testing import RaftClientBuilder, RaftTestContext, begin_epoch_request, vote_request

LOCAL = 1
VOTERS = (1, 2, 3)
EPOCH = 5
T = 1000  # the default election timeout


def builder(
    local_id: int | None, voters: tuple[int, ...], seed: int = 0
) -> RaftClientBuilder[bytes]:
    return RaftClientBuilder(local_id, voters, seed=seed)


def vote_body(request: OutboundRequest) -> VoteRequest:
    body = request.body
    assert isinstance(body, VoteRequest)
    return body


def by_destination(requests: list[OutboundRequest]) -> list[OutboundRequest]:
    return sorted(requests, key=lambda r: r.destination)


def reply(
    ctx: RaftTestContext[Any], request: OutboundRequest, granted: bool, **fields: Any
) -> None:
    """Answer a vote request in its own epoch and handle the answer (one poll)."""
    fields.setdefault("leader_epoch", vote_body(request).replica_epoch)
    ctx.deliver_response(request, VoteResponse(vote_granted=granted, **fields))
    ctx.poll()


def to_candidate(ctx: RaftTestContext[Any]) -> list[OutboundRequest]:
    """From Unattached: time out, win the pre-vote, and return the standard votes sent."""
    ctx.expire_election_timeout()
    ctx.poll_until_idle()
    assert ctx.role == "Prospective"
    pre_votes = by_destination(ctx.sent_requests(VoteRequest))
    needed = len(ctx.client.quorum.voters) // 2
    for request in pre_votes[:needed]:
        reply(ctx, request, True)
    assert ctx.role == "Candidate"
    ctx.poll_until_idle()
    return by_destination(ctx.sent_requests(VoteRequest))


def begin_epoch(epoch: int, leader: int) -> BeginQuorumEpochRequest:
    return begin_epoch_request(epoch, leader, voter_id=LOCAL)


# =================================================================================================
# Startup (§1.1), rules in order
# =================================================================================================
def test_fresh_voter_starts_unattached_in_epoch_zero() -> None:
    """§1.1 startup rule 5: no stored state -> Unattached in epoch 0, no leader, no vote."""
    ctx = builder(LOCAL, VOTERS).build()
    assert ctx.role == "Unattached"
    assert ctx.epoch == 0
    assert ctx.leader_id is None
    assert ctx.voted_id is None
    assert ctx.sent_requests() == []


def test_initialize_persists_the_starting_state() -> None:
    """§1.1/§1.7: initialize is a durable transition (Kafka's durableTransitionTo): a fresh
    replica's store reads epoch 0, no leader, no vote, once initialized."""
    ctx = builder(LOCAL, VOTERS).build()
    assert ctx.stored_state() == ElectionState(0)


def test_stored_epoch_below_log_epoch_starts_unattached_in_log_epoch() -> None:
    """§1.1 startup rule 1: stored epoch < last log epoch -> Unattached(log epoch), the stored
    vote forgotten, and that state persisted."""
    ctx = builder(LOCAL, VOTERS).with_voted_candidate(2, 3).append_to_log(4, [b"a"]).build()
    assert ctx.role == "Unattached"
    assert ctx.epoch == 4
    assert ctx.voted_id is None
    assert ctx.leader_id is None
    assert ctx.stored_state() == ElectionState(4)


@pytest.mark.parametrize(
    "stored",
    [
        ElectionState(2, leader_id=LOCAL),
        ElectionState(2, voted_id=LOCAL),
        ElectionState(2, leader_id=2),
    ],
)
def test_log_epoch_rule_comes_first(stored: ElectionState) -> None:
    """§1.1 startup rules in order: rule 1 (log epoch above the store) wins over a stored
    leadership, a stored self-vote, or a stored leader."""
    ctx = builder(LOCAL, VOTERS).with_election_state(stored).append_to_log(3, [b"a"]).build()
    assert ctx.role == "Unattached"
    assert ctx.epoch == 3
    assert ctx.leader_id is None
    assert ctx.voted_id is None


def test_stored_leader_self_starts_resigned_in_same_epoch() -> None:
    """§1.1 startup rule 2: a replica that was leader comes back Resigned in the same epoch,
    never Leader: it accepts no appends and grants no standard vote in that epoch."""
    ctx = builder(LOCAL, (1, 2)).with_elected_leader(2, LOCAL).build()
    assert ctx.role == "Resigned"
    assert ctx.epoch == 2
    assert ctx.leader_id == LOCAL
    assert not ctx.client.is_leader
    with pytest.raises(NotLeaderError):
        ctx.client.prepare_append(2, [b"a"])
    ctx.deliver_request(vote_request(2, 2, 1, 10), 2)
    ctx.poll()
    body = ctx.single_sent_response(VoteResponse)
    assert isinstance(body, VoteResponse)
    assert not body.vote_granted
    assert ctx.role == "Resigned"
    assert ctx.stored_state() == ElectionState(2, leader_id=LOCAL)


def test_restarted_resigned_leader_sends_end_quorum_epoch() -> None:
    """§1.1 startup rule 2 (Kafka's testInitializeAsResignedLeaderFromStateStore): Resigned
    tells the other voters with EndQuorumEpoch until acknowledged, also after a restart."""
    ctx = builder(LOCAL, (1, 2)).with_elected_leader(2, LOCAL).build()
    ctx.poll_until_idle()
    request, body = ctx.single_sent_request(EndQuorumEpochRequest)
    assert request.destination == 2
    assert body.leader_id == LOCAL
    assert body.leader_epoch == 2


def test_stored_leader_and_self_vote_starts_resigned() -> None:
    """§1.1 startup rules in order: rule 2 (stored leader is self) wins over rule 3."""
    ctx = (
        builder(LOCAL, VOTERS)
        .with_election_state(ElectionState(2, leader_id=LOCAL, voted_id=LOCAL))
        .build()
    )
    assert ctx.role == "Resigned"
    assert ctx.epoch == 2


def test_restarted_resigned_times_out_to_unattached_next_epoch() -> None:
    """§1.1 Resigned: the election timeout leads to Unattached(epoch + 1) (2025), not to a
    candidacy; that state is persisted."""
    ctx = builder(LOCAL, (1, 2)).with_elected_leader(2, LOCAL).build()
    ctx.expire_election_timeout()
    ctx.poll()
    assert ctx.role == "Unattached"
    assert ctx.epoch == 3
    assert ctx.voted_id is None
    assert ctx.stored_state() == ElectionState(3)


def test_stored_self_vote_resumes_candidacy_in_same_epoch() -> None:
    """§1.1 startup rule 3: stored vote == self -> Candidate at the same epoch; the election
    resumes with standard votes in that epoch (not epoch + 1)."""
    ctx = builder(LOCAL, VOTERS).with_voted_candidate(2, LOCAL).build()
    assert ctx.role == "Candidate"
    assert ctx.epoch == 2
    assert ctx.voted_id == LOCAL
    assert ctx.stored_state() == ElectionState(2, voted_id=LOCAL)
    ctx.poll_until_idle()
    votes = by_destination(ctx.sent_requests(VoteRequest))
    assert [r.destination for r in votes] == [2, 3]
    assert all(not vote_body(r).pre_vote and vote_body(r).replica_epoch == 2 for r in votes)


def test_resumed_candidate_can_win() -> None:
    """§1.1 startup rule 3: the resumed election counts votes as any other."""
    ctx = builder(LOCAL, VOTERS).with_voted_candidate(2, LOCAL).build()
    ctx.poll_until_idle()
    votes = by_destination(ctx.sent_requests(VoteRequest))
    reply(ctx, votes[0], True)
    assert ctx.role == "Leader"
    assert ctx.epoch == 2
    assert ctx.stored_state() == ElectionState(2, leader_id=LOCAL)


def test_stored_leader_with_endpoints_starts_follower() -> None:
    """§1.1 startup rule 4: a stored leader whose endpoints are known -> Follower, which
    fetches from it in that epoch."""
    ctx = builder(LOCAL, VOTERS).with_elected_leader(EPOCH, 2).build()
    assert ctx.role == "Follower"
    assert ctx.epoch == EPOCH
    assert ctx.leader_id == 2
    ctx.poll()
    request, body = ctx.single_sent_request(FetchRequest)
    assert request.destination == 2
    assert body.current_leader_epoch == EPOCH


def test_stored_leader_without_endpoints_starts_unattached_knowing_it() -> None:
    """§1.1 startup rule 4: a stored leader with unknown endpoints -> Unattached(leaderId)."""
    ctx = builder(LOCAL, VOTERS).with_elected_leader(EPOCH, 7).build()
    assert ctx.role == "Unattached"
    assert ctx.epoch == EPOCH
    assert ctx.leader_id == 7


def test_stored_vote_for_other_starts_voted() -> None:
    """§1.1 startup rule 5: otherwise Unattached with the stored vote."""
    ctx = builder(LOCAL, VOTERS).with_voted_candidate(EPOCH, 3).build()
    assert ctx.role == "Voted"
    assert ctx.epoch == EPOCH
    assert ctx.voted_id == 3
    assert ctx.leader_id is None


def test_stored_vote_without_local_id_is_illegal() -> None:
    """§1.1: a votedKey with no local id is an IllegalStateException."""
    with pytest.raises(IllegalStateError):
        builder(None, VOTERS).with_voted_candidate(EPOCH, 2).build()


def test_observer_never_times_out_into_an_election() -> None:
    """§1.1/§1.8: an observer's election timeout is infinite: it stays Unattached and never
    asks for votes."""
    ctx = builder(4, VOTERS).with_unknown_leader(EPOCH).build()
    for _ in range(10):
        ctx.expire_election_timeout()
        ctx.poll()
    assert ctx.role == "Unattached"
    assert ctx.epoch == EPOCH
    assert ctx.sent_requests(VoteRequest) == []


# =================================================================================================
# Single voter (§1.1)
# =================================================================================================
def test_single_voter_elects_itself_on_initialize() -> None:
    """§1.1: a single voter goes straight to Leader on initialize (Prospective -> Candidate
    -> Leader in one step), persisting its vote and then its leadership, sending no Vote."""
    ctx = builder(LOCAL, (LOCAL,)).build()
    assert ctx.role == "Leader"
    assert ctx.epoch == 1
    assert ctx.leader_id == LOCAL
    assert ctx.store.writes == [
        ElectionState(0),
        ElectionState(1, voted_id=LOCAL),
        ElectionState(1, leader_id=LOCAL),
    ]
    ctx.poll_until_idle()
    assert ctx.sent_requests(VoteRequest) == []
    # Its LeaderChange record commits on its own.
    assert ctx.log_end_offset == 1
    assert ctx.high_watermark == 1


def test_single_voter_elects_itself_in_the_next_epoch() -> None:
    """§1.1: a single voter restarting in epoch 3 leads epoch 4."""
    ctx = builder(LOCAL, (LOCAL,)).with_unknown_leader(3).build()
    assert (ctx.role, ctx.epoch) == ("Leader", 4)
    assert ctx.stored_state() == ElectionState(4, leader_id=LOCAL)


def test_single_voter_former_leader_leads_the_next_epoch() -> None:
    """§1.1: a single voter that led epoch 3 never leads it again: it leads epoch 4."""
    ctx = builder(LOCAL, (LOCAL,)).with_elected_leader(3, LOCAL).build()
    assert (ctx.role, ctx.epoch) == ("Leader", 4)


def test_single_voter_resumed_candidacy_wins_its_epoch() -> None:
    """§1.1 startup rule 3 for a single voter: the resumed candidacy wins at once."""
    ctx = builder(LOCAL, (LOCAL,)).with_voted_candidate(3, LOCAL).build()
    assert (ctx.role, ctx.epoch) == ("Leader", 3)


def test_new_leader_writes_leader_change_first() -> None:
    """§1.1/§1.9: a newly elected leader's first batch is its LeaderChange control record."""
    ctx = builder(LOCAL, VOTERS).build()
    votes = to_candidate(ctx)
    reply(ctx, votes[0], True)
    assert ctx.role == "Leader"
    ctx.poll_until_idle()
    assert ctx.log_end_offset == 1
    (batch,) = list(iter_batches(ctx.log.read(0).records))
    assert batch.is_control
    assert batch.partition_leader_epoch == ctx.epoch == 1
    ((kind, message),) = control_records(batch)
    assert kind is ControlRecordType.LEADER_CHANGE
    assert isinstance(message, LeaderChangeMessage)
    assert message.leader_id == LOCAL
    assert sorted(v.voter_id for v in message.voters) == [1, 2, 3]
    assert sorted(v.voter_id for v in message.granting_voters) == [1, 2]


# =================================================================================================
# Illegal transitions, as seen through the client (§1.1)
# =================================================================================================
def test_leader_never_follows_another_leader_of_its_epoch() -> None:
    """§1.1 illegal: Leader -> Follower at the same epoch. A BeginQuorumEpoch from another
    replica for the leader's own epoch leaves it Leader."""
    ctx = builder(LOCAL, VOTERS).build()
    epoch = ctx.become_leader()
    ctx.deliver_request(begin_epoch(epoch, 2), 2)
    ctx.poll()
    assert ctx.role == "Leader"
    assert ctx.epoch == epoch
    assert ctx.leader_id == LOCAL
    assert ctx.stored_state() == ElectionState(epoch, leader_id=LOCAL)


def test_follower_never_switches_leader_within_an_epoch() -> None:
    """§1.1 illegal: Follower -> Follower at the same epoch with another leader."""
    ctx = builder(LOCAL, VOTERS).with_elected_leader(EPOCH, 2).build()
    ctx.deliver_request(begin_epoch(EPOCH, 3), 3)
    ctx.poll()
    assert ctx.role == "Follower"
    assert ctx.leader_id == 2
    assert ctx.stored_state() == ElectionState(EPOCH, leader_id=2)


def test_follower_same_leader_same_endpoints_is_not_a_transition() -> None:
    """§1.1: Follower -> Follower at the same epoch only with a larger endpoint set; the same
    leader with the same endpoints changes nothing (and writes nothing)."""
    ctx = builder(LOCAL, VOTERS).with_elected_leader(EPOCH, 2).build()
    writes = len(ctx.store.writes)
    ctx.deliver_request(begin_epoch(EPOCH, 2), 2)
    ctx.poll()
    body = ctx.single_sent_response(BeginQuorumEpochResponse)
    assert isinstance(body, BeginQuorumEpochResponse)
    assert body.partition_error_code == Errors.NONE
    assert (ctx.role, ctx.leader_id, ctx.epoch) == ("Follower", 2, EPOCH)
    assert len(ctx.store.writes) == writes


def test_unattached_timeout_never_skips_prospective() -> None:
    """§1.1 illegal: Candidate from anything but Prospective. An Unattached voter's timeout
    leads to Prospective (same epoch), never straight to a Candidate in epoch + 1."""
    ctx = builder(LOCAL, VOTERS).with_unknown_leader(EPOCH).build()
    ctx.expire_election_timeout()
    ctx.poll_until_idle()
    assert ctx.role == "Prospective"
    assert ctx.epoch == EPOCH
    assert all(vote_body(r).pre_vote for r in ctx.sent_requests(VoteRequest))


def test_response_naming_self_as_leader_of_unled_epoch_is_refused() -> None:
    """§1.1: a replica never follows itself nor becomes leader by hearsay: a vote response
    naming this replica as the leader of a higher epoch does not make it Leader."""
    ctx = builder(LOCAL, VOTERS).with_unknown_leader(EPOCH).build()
    ctx.expire_election_timeout()
    ctx.poll_until_idle()
    request = by_destination(ctx.sent_requests(VoteRequest))[0]
    ctx.deliver_response(
        request, VoteResponse(leader_epoch=EPOCH + 1, leader_id=LOCAL, vote_granted=False)
    )
    ctx.poll()
    assert ctx.role != "Leader"
    assert ctx.role != "Follower"


# =================================================================================================
# Timers (§1.6)
# =================================================================================================
def test_election_timeout_is_randomized_between_t_and_2t() -> None:
    """§1.6: the election timeout is T + rand(T), in [T, 2T): never before T, always by 2T,
    and not the same for every replica."""
    deadlines = set()
    for seed in range(20):
        ctx = builder(LOCAL, VOTERS, seed=seed).with_unknown_leader(EPOCH).build()
        until = ctx.poll()
        assert T <= until < 2 * T
        deadlines.add(until)
        ctx.advance(T - 1)
        ctx.poll()
        assert ctx.role == "Unattached"
        ctx.advance(T)
        ctx.poll()
        assert ctx.role == "Prospective"
    assert len(deadlines) > 1


def test_granting_a_vote_resets_the_election_timer() -> None:
    """§1.1 Voted: the election timer is reset when a vote is granted."""
    ctx = builder(LOCAL, VOTERS).with_unknown_leader(EPOCH).build()
    deadline = ctx.poll()
    ctx.advance(deadline - 1)
    ctx.deliver_request(vote_request(EPOCH, 2, 0, 0), 2)
    ctx.poll()
    assert ctx.role == "Voted"
    ctx.advance(1)  # the old deadline
    ctx.poll()
    assert ctx.role == "Voted"
    ctx.advance(T - 2)  # still below T since the grant
    ctx.poll()
    assert ctx.role == "Voted"
    ctx.expire_election_timeout()
    ctx.poll()
    assert ctx.role == "Prospective"
    assert ctx.voted_id == 2


def test_prospective_granting_a_vote_resets_the_election_timer() -> None:
    """§1.2 Prospective grant -> prospectiveAddVotedState, which (like unattachedAddVotedState)
    restarts the election timer: the candidate it voted for gets a full timeout."""
    ctx = builder(LOCAL, VOTERS).with_unknown_leader(EPOCH).build()
    ctx.expire_election_timeout()
    ctx.poll()
    assert ctx.role == "Prospective"
    deadline = ctx.poll()
    ctx.sent_requests()
    ctx.advance(deadline - 1)
    ctx.deliver_request(vote_request(EPOCH, 2, 0, 0), 2)
    ctx.poll()
    assert ctx.role == "Prospective"
    assert ctx.voted_id == 2
    ctx.advance(1)  # the old deadline
    ctx.poll()
    assert ctx.role == "Prospective"


def test_candidate_loss_backs_off_then_prospective() -> None:
    """§1.6 (Kafka's testRetryElection): a candidate rejected by a majority keeps its vote,
    backs off without asking again, then becomes Prospective in its epoch and pre-votes."""
    ctx = (
        builder(LOCAL, (1, 2))
        .with_config(election_backoff_max_ms=500)
        .with_unknown_leader(EPOCH)
        .build()
    )
    votes = to_candidate(ctx)
    assert ctx.epoch == EPOCH + 1
    reply(ctx, votes[0], False)
    # Lost, but it remembers it voted for itself in this epoch.
    assert ctx.role == "Candidate"
    assert ctx.stored_state() == ElectionState(EPOCH + 1, voted_id=LOCAL)
    until = ctx.poll()
    assert 0 <= until <= 500
    assert ctx.sent_requests(VoteRequest) == []
    ctx.advance(500)
    ctx.poll_until_idle()
    assert ctx.role == "Prospective"
    assert ctx.epoch == EPOCH + 1
    assert ctx.voted_id == LOCAL
    pre_votes = ctx.sent_requests(VoteRequest)
    assert [(vote_body(r).pre_vote, vote_body(r).replica_epoch) for r in pre_votes] == [
        (True, EPOCH + 1)
    ]
    # Winning this pre-vote opens epoch + 2.
    reply(ctx, pre_votes[0], True)
    assert ctx.role == "Candidate"
    assert ctx.epoch == EPOCH + 2


@pytest.mark.parametrize("seed", range(8))
def test_candidate_backoff_bounded_by_backoff_max(seed: int) -> None:
    """§1.6: the lost candidate's backoff never exceeds election.backoff.max.ms."""
    ctx = (
        builder(LOCAL, (1, 2), seed=seed)
        .with_config(election_backoff_max_ms=50)
        .with_unknown_leader(EPOCH)
        .build()
    )
    for _ in range(3):  # several losses in a row: the backoff grows, capped
        votes = to_candidate(ctx)
        reply(ctx, votes[0], False)
        assert ctx.role == "Candidate"
        ctx.advance(50)
        ctx.poll_until_idle()
        assert ctx.role == "Prospective"
        # Lose the pre-vote too: Unattached again, keeping the epoch's self-vote.
        pre_vote = ctx.single_sent_request(VoteRequest)[0]
        reply(ctx, pre_vote, False)
        assert ctx.role == "Voted"
        assert ctx.voted_id == LOCAL


def test_candidate_in_five_needs_three_rejections_to_lose() -> None:
    """§1.6: a candidate loses only when a majority rejects it."""
    ctx = builder(LOCAL, (1, 2, 3, 4, 5)).with_unknown_leader(EPOCH).build()
    votes = to_candidate(ctx)
    assert len(votes) == 4
    reply(ctx, votes[0], False)
    reply(ctx, votes[1], False)
    until = ctx.poll()
    assert ctx.role == "Candidate"
    assert until > 0
    reply(ctx, votes[2], True)
    assert ctx.role == "Candidate"
    reply(ctx, votes[3], True)
    assert ctx.role == "Leader"
    assert ctx.epoch == EPOCH + 1


def test_candidate_election_timeout_becomes_prospective() -> None:
    """§1.1 Candidate: timeout -> Prospective (2025), same epoch, still voted for self."""
    ctx = builder(LOCAL, VOTERS).with_unknown_leader(EPOCH).build()
    to_candidate(ctx)
    ctx.expire_election_timeout()
    ctx.poll_until_idle()
    assert ctx.role == "Prospective"
    assert ctx.epoch == EPOCH + 1
    assert ctx.voted_id == LOCAL
    assert ctx.stored_state() == ElectionState(EPOCH + 1, voted_id=LOCAL)
    assert all(vote_body(r).pre_vote for r in ctx.sent_requests(VoteRequest))


def test_candidate_majority_becomes_leader() -> None:
    """§1.1 Candidate: a majority of votes -> Leader (persisted), which announces itself with
    BeginQuorumEpoch to the other voters."""
    ctx = builder(LOCAL, VOTERS).with_unknown_leader(EPOCH).build()
    votes = to_candidate(ctx)
    reply(ctx, votes[1], True)
    assert ctx.role == "Leader"
    assert ctx.epoch == EPOCH + 1
    assert ctx.stored_state() == ElectionState(EPOCH + 1, leader_id=LOCAL)
    ctx.poll_until_idle()
    begins = ctx.sent_requests(BeginQuorumEpochRequest)
    assert sorted(r.destination for r in begins) == [2, 3]


# =================================================================================================
# Candidate requests (§1.3 Vote)
# =================================================================================================
def test_candidate_vote_request_fields() -> None:
    """§1.3 Vote: a candidate asks with ReplicaEpoch = its new epoch (epoch + 1), PreVote
    false, its id, the voter's id, and the log's last epoch and end offset."""
    ctx = (
        builder(LOCAL, VOTERS)
        .append_to_log(1, [b"a"])
        .append_to_log(3, [b"b", b"c"])
        .with_unknown_leader(EPOCH)
        .build()
    )
    votes = to_candidate(ctx)
    assert [r.destination for r in votes] == [2, 3]
    for request in votes:
        body = vote_body(request)
        assert not body.pre_vote
        assert body.replica_epoch == EPOCH + 1
        assert body.replica_id == LOCAL
        assert body.voter_id == request.destination
        assert body.last_offset_epoch == 3
        assert body.last_offset == 3


def test_candidate_sends_only_to_voters_without_a_recorded_vote() -> None:
    """§1.3: the candidate re-sends only to voters whose vote it has not recorded."""
    ctx = (
        builder(LOCAL, (1, 2, 3, 4, 5))
        .with_config(request_timeout_ms=300)
        .with_unknown_leader(EPOCH)
        .build()
    )
    votes = to_candidate(ctx)
    reply(ctx, votes[0], True)
    reply(ctx, votes[1], False)
    ctx.advance(300)
    ctx.poll_until_idle()
    assert ctx.role == "Candidate"
    assert sorted(r.destination for r in ctx.sent_requests(VoteRequest)) == [4, 5]


def test_candidate_one_vote_request_in_flight_per_voter() -> None:
    """§1.3: one request in flight per node: polling before the request timeout sends no
    second Vote to a voter that has not answered."""
    ctx = builder(LOCAL, VOTERS).with_unknown_leader(EPOCH).build()
    to_candidate(ctx)
    for _ in range(5):
        ctx.advance(150)
        ctx.poll()
    assert ctx.role == "Candidate"
    assert ctx.sent_requests(VoteRequest) == []


def test_vote_request_timeout_retry_and_late_response() -> None:
    """§1.3 (Kafka's testVoteRequestTimeout): after the request timeout the vote is asked
    again; the late answer to the first request is stale, the retry's answer counts."""
    ctx = (
        builder(LOCAL, (1, 2))
        .with_config(request_timeout_ms=300)
        .with_unknown_leader(EPOCH)
        .build()
    )
    (first,) = to_candidate(ctx)
    ctx.advance(300)
    ctx.poll_until_idle()
    retry, body = ctx.single_sent_request(VoteRequest)
    assert retry.correlation_id != first.correlation_id
    assert (body.pre_vote, body.replica_epoch) == (False, EPOCH + 1)
    reply(ctx, first, True)
    assert ctx.role == "Candidate"
    reply(ctx, retry, True)
    assert ctx.role == "Leader"


def test_stale_vote_responses_dropped_after_becoming_follower() -> None:
    """§1.3: every transition drops the requests in flight: a candidate that learns of a
    leader of its epoch ignores granting votes that arrive afterwards."""
    ctx = builder(LOCAL, VOTERS).with_unknown_leader(EPOCH).build()
    votes = to_candidate(ctx)
    ctx.deliver_request(begin_epoch(EPOCH + 1, 3), 3)
    ctx.poll()
    assert (ctx.role, ctx.leader_id, ctx.epoch) == ("Follower", 3, EPOCH + 1)
    reply(ctx, votes[0], True)
    reply(ctx, votes[1], True)
    assert (ctx.role, ctx.leader_id, ctx.epoch) == ("Follower", 3, EPOCH + 1)
    assert ctx.stored_state() == ElectionState(EPOCH + 1, leader_id=3, voted_id=LOCAL)


def test_stale_vote_response_dropped_after_a_new_candidacy() -> None:
    """§1.3: a grant for an earlier candidacy (epoch e) does not count towards the next one
    (epoch e + 1) even from the same voter."""
    ctx = (
        builder(LOCAL, (1, 2))
        .with_config(election_backoff_max_ms=100)
        .with_unknown_leader(EPOCH)
        .build()
    )
    (old,) = to_candidate(ctx)
    ctx.expire_election_timeout()
    ctx.poll_until_idle()
    assert ctx.role == "Prospective"
    (pre_vote,) = ctx.sent_requests(VoteRequest)
    reply(ctx, pre_vote, True)
    assert (ctx.role, ctx.epoch) == ("Candidate", EPOCH + 2)
    ctx.deliver_response(old, VoteResponse(leader_epoch=EPOCH + 1, vote_granted=True))
    ctx.poll()
    assert (ctx.role, ctx.epoch) == ("Candidate", EPOCH + 2)


def test_higher_epoch_vote_response_ends_candidacy() -> None:
    """§1.3 common handling: a vote response with a higher epoch and no leader makes the
    candidate Unattached in that epoch."""
    ctx = builder(LOCAL, VOTERS).with_unknown_leader(EPOCH).build()
    votes = to_candidate(ctx)
    reply(ctx, votes[0], False, leader_epoch=EPOCH + 3)
    assert ctx.role == "Unattached"
    assert ctx.epoch == EPOCH + 3
    assert ctx.voted_id is None
    assert ctx.stored_state() == ElectionState(EPOCH + 3)


def test_older_epoch_vote_response_is_ignored() -> None:
    """§1.3 common handling: a response from an older epoch is ignored, granted or not."""
    ctx = builder(LOCAL, VOTERS).with_unknown_leader(EPOCH).build()
    votes = to_candidate(ctx)
    reply(ctx, votes[0], True, leader_epoch=EPOCH)
    assert ctx.role == "Candidate"
    assert ctx.epoch == EPOCH + 1


def test_invalid_voter_key_vote_response_changes_nothing() -> None:
    """§1.3 common handling: INVALID_VOTER_KEY is only logged; it is not a rejection."""
    ctx = builder(LOCAL, (1, 2)).with_unknown_leader(EPOCH).build()
    (vote,) = to_candidate(ctx)
    reply(ctx, vote, False, partition_error_code=Errors.INVALID_VOTER_KEY)
    assert ctx.role == "Candidate"
    assert ctx.epoch == EPOCH + 1
    until = ctx.poll()
    assert until > 0  # not backing off from a lost election: it waits for the retry


def test_voted_replica_keeps_its_vote_as_follower() -> None:
    """§1.1 Follower: the votedKey is kept within the epoch when the leader is discovered."""
    ctx = builder(LOCAL, VOTERS).with_voted_candidate(EPOCH, 2).build()
    ctx.deliver_request(begin_epoch(EPOCH, 2), 2)
    ctx.poll()
    assert (ctx.role, ctx.leader_id, ctx.voted_id) == ("Follower", 2, 2)
    assert ctx.stored_state() == ElectionState(EPOCH, leader_id=2, voted_id=2)
