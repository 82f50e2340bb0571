"""BeginQuorumEpoch and EndQuorumEpoch, both sides.

docs/protocol.md §1.3 (the two rows, voter-only validation, the common response handling),
§1.6 (BeginQuorumEpoch heartbeats every fetch.timeout.ms / 2 to all other voters; a follower
told of its leader's resignation sets its fetch timer by its position among the preferred
candidates: 0 first, election.backoff.max.ms when absent, else
``min(max, (max >> (n - 1)) << (pos - 1))``).

Mirrors Kafka's ``KafkaRaftClientTest``: testHandleBeginQuorumRequest(MoreEndpoints),
testHandleBeginQuorumResponse, testBeginQuorumEpochHeartbeat,
testInvalidVoterReplicaBeginQuorumEpochRequest,
test{Begin,End}QuorumEpochRequestClusterIdValidation,
testHandleEndQuorumRequest(WithLowerPriorityToBecomeLeader),
testEndQuorumIgnoredAs{Candidate,Leader}IfOlderEpoch,
testEndQuorumStartsNewElectionImmediatelyIfFollowerUnattached.
"""

from __future__ import annotations

import uuid

import pytest

from kraft.common.uuids import ZERO_UUID
from kraft.log.quorum_state import ElectionState
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    Endpoint,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    NodeEndpoint,
    PreferredCandidate,
    VoteRequest,
)
from kraft.raft.states import FollowerState
from kraft.testing import RaftClientBuilder, RaftTestContext, RecordingListener

LOCAL = 1
LISTENER = "CONTROLLER"


def endpoint(node: int) -> Endpoint:
    """The endpoint the test configs give voter ``node``."""
    return Endpoint(LISTENER, "localhost", 9990 + node)


def begin_epoch(
    leader: int,
    epoch: int,
    voter_id: int = LOCAL,
    *,
    endpoints: tuple[Endpoint, ...] | None = None,
    voter_directory_id: uuid.UUID = ZERO_UUID,
) -> BeginQuorumEpochRequest:
    return BeginQuorumEpochRequest(
        leader_id=leader,
        leader_epoch=epoch,
        voter_id=voter_id,
        voter_directory_id=voter_directory_id,
        leader_endpoints=(endpoint(leader),) if endpoints is None else endpoints,
    )


def end_epoch(
    leader: int, epoch: int, candidates: list[int | PreferredCandidate]
) -> EndQuorumEpochRequest:
    return EndQuorumEpochRequest(
        leader_id=leader,
        leader_epoch=epoch,
        preferred_candidates=tuple(
            c if isinstance(c, PreferredCandidate) else PreferredCandidate(c) for c in candidates
        ),
        leader_endpoints=(endpoint(leader),),
    )


def begin_response(context: RaftTestContext[bytes]) -> BeginQuorumEpochResponse:
    response = context.single_sent_response(BeginQuorumEpochResponse)
    assert isinstance(response, BeginQuorumEpochResponse)
    return response


def end_response(context: RaftTestContext[bytes]) -> EndQuorumEpochResponse:
    response = context.single_sent_response(EndQuorumEpochResponse)
    assert isinstance(response, EndQuorumEpochResponse)
    return response


def follower_of(
    leader: int, epoch: int, voters: tuple[int, ...] = (1, 2, 3), **config: int
) -> RaftTestContext[bytes]:
    """Replica 1 following ``leader`` in ``epoch``, polled once (its first Fetch drained)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters)
        .with_elected_leader(epoch, leader)
        .with_config(**config)
        .build()
    )
    assert context.role == "Follower"
    context.poll()
    context.sent_requests()
    return context


def elected_leader(voters: tuple[int, ...] = (1, 2, 3)) -> tuple[RaftTestContext[bytes], int]:
    """Replica 1 just elected (from epoch 4, so epoch 5); the clock is at the election."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters).with_unknown_leader(4).build()
    )
    return context, context.become_leader()


# =============================================================================================
# BeginQuorumEpoch: the receiving voter
# =============================================================================================
def test_unattached_voter_follows_the_leader_named_by_begin_quorum_epoch() -> None:
    """§1.3: BeginQuorumEpoch at the current epoch makes an Unattached voter a Follower of the
    sender (persisted); the answer is NONE, naming that leader and epoch with its endpoint."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(4).build()
    )
    context.deliver_request(begin_epoch(2, 4), 2)
    context.poll()
    body = begin_response(context)
    assert body.error_code == Errors.NONE
    assert body.partition_error_code == Errors.NONE
    assert (body.leader_id, body.leader_epoch) == (2, 4)
    assert body.node_endpoints == (NodeEndpoint(2, "localhost", 9992),)
    assert (context.role, context.epoch, context.leader_id) == ("Follower", 4, 2)
    assert context.stored_state() == ElectionState(4, leader_id=2)


def test_voter_that_voted_for_the_sender_follows_it() -> None:
    """§1.3: a voter that voted for the sender in this epoch follows it; its vote is kept
    within the epoch (Kafka: testHandleBeginQuorumRequest)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2)).with_voted_candidate(2, 2).build()
    )
    context.deliver_request(begin_epoch(2, 2), 2)
    context.poll()
    assert begin_response(context).partition_error_code == Errors.NONE
    assert (context.role, context.epoch, context.leader_id) == ("Follower", 2, 2)
    assert context.stored_state() == ElectionState(2, leader_id=2, voted_id=2)


def test_begin_quorum_epoch_with_a_higher_epoch_moves_to_that_epoch() -> None:
    """§1.3: a higher epoch is adopted at once, with the sender as leader (Kafka:
    testHandleBeginQuorumResponse, from a restarted leader)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2)).with_elected_leader(2, LOCAL).build()
    )
    assert context.role == "Resigned"
    context.deliver_request(begin_epoch(2, 3), 2)
    context.poll()
    body = begin_response(context)
    assert body.partition_error_code == Errors.NONE
    assert (body.leader_id, body.leader_epoch) == (2, 3)
    assert (context.role, context.epoch, context.leader_id) == ("Follower", 3, 2)
    assert context.stored_state() == ElectionState(3, leader_id=2)


def test_begin_quorum_epoch_with_a_lower_epoch_is_fenced() -> None:
    """§1.3 voter-only validation: epoch < local -> FENCED_LEADER_EPOCH, with the local epoch
    and leader; nothing changes."""
    context = follower_of(3, 6)
    writes = list(context.store.writes)
    context.deliver_request(begin_epoch(2, 5), 2)
    context.poll()
    body = begin_response(context)
    assert body.partition_error_code == Errors.FENCED_LEADER_EPOCH
    assert (body.leader_id, body.leader_epoch) == (3, 6)
    assert (context.role, context.epoch, context.leader_id) == ("Follower", 6, 3)
    assert context.store.writes == writes


def test_begin_quorum_epoch_with_a_negative_leader_id_is_invalid() -> None:
    """§1.3 voter-only validation: a negative sender id -> INVALID_REQUEST, nothing changes."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(4).build()
    )
    context.deliver_request(begin_epoch(-1, 4, endpoints=(endpoint(2),)), 2)
    context.poll()
    assert begin_response(context).partition_error_code == Errors.INVALID_REQUEST
    assert (context.role, context.epoch, context.leader_id) == ("Unattached", 4, None)


def test_begin_quorum_epoch_for_another_voter_is_invalid_voter_key_but_still_followed() -> None:
    """§1.3: the transition comes first, then the voter key: a request for another voter id
    gets INVALID_VOTER_KEY, yet the leader it names is followed
    (Kafka: testInvalidVoterReplicaBeginQuorumEpochRequest)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(4).build()
    )
    context.deliver_request(begin_epoch(3, 5, voter_id=10), 3)
    context.poll()
    body = begin_response(context)
    assert body.partition_error_code == Errors.INVALID_VOTER_KEY
    assert (body.leader_id, body.leader_epoch) == (3, 5)
    assert (context.role, context.epoch, context.leader_id) == ("Follower", 5, 3)


def test_begin_quorum_epoch_checks_the_voter_directory_id() -> None:
    """§1.3 / §1.2 rule 6: a voter key naming this id with another directory is
    INVALID_VOTER_KEY; this id with this directory (or none) is NONE."""
    local_directory = uuid.UUID(int=0x1111)
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3))
        .with_unknown_leader(4)
        .with_local_directory_id(local_directory)
        .build()
    )
    context.deliver_request(begin_epoch(3, 5, voter_directory_id=uuid.UUID(int=0x2222)), 3)
    context.poll()
    assert begin_response(context).partition_error_code == Errors.INVALID_VOTER_KEY
    assert (context.role, context.leader_id) == ("Follower", 3)

    context.deliver_request(begin_epoch(3, 5, voter_directory_id=local_directory), 3)
    context.poll()
    assert begin_response(context).partition_error_code == Errors.NONE

    context.deliver_request(begin_epoch(3, 5), 3)
    context.poll()
    assert begin_response(context).partition_error_code == Errors.NONE


def test_begin_quorum_epoch_v1_without_leader_endpoints_uses_the_voter_set() -> None:
    """§1.3: the receiver validates epoch and leader id only (voter-only validation); Kafka's
    handler takes the leader's endpoints from the voter set whenever the request carries none,
    whatever its version, so the sender is followed and the answer is NONE."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(4).build()
    )
    context.deliver_request(begin_epoch(2, 5, endpoints=()), 2, api_version=1)
    context.poll()
    assert begin_response(context).partition_error_code == Errors.NONE
    state = context.client.state
    assert isinstance(state, FollowerState)
    assert (state.epoch, state.leader_id) == (5, 2)
    assert state.leader_endpoints == ((LISTENER, "localhost", 9992),)


def test_begin_quorum_epoch_v0_takes_the_leader_endpoints_from_the_voter_set() -> None:
    """§1.3: v0 carries no endpoints; the leader's come from the static voter set."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(4).build()
    )
    context.deliver_request(begin_epoch(2, 5, endpoints=()), 2, api_version=0)
    context.poll()
    assert begin_response(context).partition_error_code == Errors.NONE
    state = context.client.state
    assert isinstance(state, FollowerState)
    assert (state.epoch, state.leader_id) == (5, 2)
    assert state.leader_endpoints == ((LISTENER, "localhost", 9992),)


def test_begin_quorum_epoch_with_more_endpoints_updates_the_follower() -> None:
    """§1.1 Follower row / §1.3: the same leader and epoch with a larger endpoint set is a
    Follower -> Follower transition (Kafka: testHandleBeginQuorumRequestMoreEndpoints)."""
    context = follower_of(2, 3)
    more = (endpoint(2), Endpoint("ANOTHER_LISTENER", "localhost", 8992))
    context.deliver_request(begin_epoch(2, 3, endpoints=more), 2)
    context.poll()
    assert begin_response(context).partition_error_code == Errors.NONE
    state = context.client.state
    assert isinstance(state, FollowerState)
    assert (state.epoch, state.leader_id) == (3, 2)
    assert set(state.leader_endpoints) == {(e.name, e.host, e.port) for e in more}


def test_begin_quorum_epoch_heartbeat_leaves_a_follower_as_it_is() -> None:
    """§1.3: a repeated BeginQuorumEpoch (heartbeat) from the followed leader is NONE and
    changes nothing."""
    context = follower_of(2, 3)
    writes = list(context.store.writes)
    context.deliver_request(begin_epoch(2, 3), 2)
    context.poll()
    body = begin_response(context)
    assert body.partition_error_code == Errors.NONE
    assert (body.leader_id, body.leader_epoch) == (2, 3)
    assert (context.role, context.epoch, context.leader_id) == ("Follower", 3, 2)
    assert context.store.writes == writes


def test_candidate_follows_a_leader_of_its_own_epoch() -> None:
    """§1.3 / maybeTransition: a Candidate that learns the leader of its epoch follows it,
    keeping its own vote within the epoch."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_voted_candidate(4, LOCAL).build()
    )
    assert context.role == "Candidate"
    context.deliver_request(begin_epoch(2, 4), 2)
    context.poll()
    assert begin_response(context).partition_error_code == Errors.NONE
    assert (context.role, context.epoch, context.leader_id) == ("Follower", 4, 2)
    assert context.stored_state() == ElectionState(4, leader_id=2, voted_id=LOCAL)


def test_prospective_follows_a_leader_of_its_epoch() -> None:
    """§1.1 Prospective row: a leader discovered -> Follower."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(4).build()
    )
    context.expire_election_timeout()
    context.poll()
    assert context.role == "Prospective"
    context.deliver_request(begin_epoch(3, 4), 3)
    context.poll()
    assert begin_response(context).partition_error_code == Errors.NONE
    assert (context.role, context.epoch, context.leader_id) == ("Follower", 4, 3)


def test_leader_answers_begin_quorum_epoch_naming_itself() -> None:
    """§1.3: a BeginQuorumEpoch for the current epoch naming this leader is answered NONE and
    changes nothing (Kafka: testBeginQuorumEpochRequestClusterIdValidation)."""
    context, epoch = elected_leader((1, 2))
    context.deliver_request(begin_epoch(LOCAL, epoch), 2)
    context.poll()
    body = begin_response(context)
    assert body.partition_error_code == Errors.NONE
    assert (body.leader_id, body.leader_epoch) == (LOCAL, epoch)
    assert context.role == "Leader"


def test_leader_follows_a_begin_quorum_epoch_of_a_higher_epoch() -> None:
    """§1.1 Leader row: a higher epoch -> Follower of the leader it names."""
    context, epoch = elected_leader()
    context.deliver_request(begin_epoch(3, epoch + 1), 3)
    context.poll()
    assert begin_response(context).partition_error_code == Errors.NONE
    assert (context.role, context.epoch, context.leader_id) == ("Follower", epoch + 1, 3)


def test_begin_quorum_epoch_from_a_second_leader_of_the_epoch_is_refused() -> None:
    """kraft difference (client.py ``_maybe_transition``): a second leader for the epoch is an
    inconsistency Kafka treats as fatal; kraft refuses the request (INVALID_REQUEST) and keeps
    following the first leader."""
    context = follower_of(2, 3)
    context.deliver_request(begin_epoch(3, 3), 3)
    context.poll()
    assert begin_response(context).partition_error_code == Errors.INVALID_REQUEST
    assert (context.role, context.epoch, context.leader_id) == ("Follower", 3, 2)


@pytest.mark.parametrize(
    ("cluster_id", "accepted"),
    [("cluster-a", True), (None, True), ("", False), ("cluster-b", False)],
)
def test_begin_quorum_epoch_cluster_id_validation(cluster_id: str | None, accepted: bool) -> None:
    """§1.2 rule 1 (all RPCs): a missing cluster id is accepted, an empty or different one is
    a top-level INCONSISTENT_CLUSTER_ID and changes nothing."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3))
        .with_cluster_id("cluster-a")
        .with_unknown_leader(4)
        .build()
    )
    context.deliver_request(begin_epoch(2, 4), 2, cluster_id=cluster_id)
    context.poll()
    body = begin_response(context)
    if accepted:
        assert body.error_code == Errors.NONE
        assert context.leader_id == 2
    else:
        assert body.error_code == Errors.INCONSISTENT_CLUSTER_ID
        assert (context.role, context.leader_id) == ("Unattached", None)


# =============================================================================================
# BeginQuorumEpoch: the leader's side
# =============================================================================================
def test_new_leader_sends_begin_quorum_epoch_to_every_other_voter() -> None:
    """§1.3: at election the leader sends BeginQuorumEpoch to all other voters, naming itself,
    its epoch, the destination voter and its own endpoints."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(4).build()
    )
    epoch = context.become_leader()
    sent = context.sent_requests(BeginQuorumEpochRequest)
    assert sorted(r.destination for r in sent) == [2, 3]
    for request in sent:
        body = request.body
        assert isinstance(body, BeginQuorumEpochRequest)
        assert (body.leader_id, body.leader_epoch) == (LOCAL, epoch)
        assert body.voter_id == request.destination
        assert body.leader_endpoints == (endpoint(LOCAL),)


def test_leader_repeats_begin_quorum_epoch_every_half_fetch_timeout() -> None:
    """§1.6: BeginQuorumEpoch heartbeats go to all other voters every fetch.timeout.ms / 2,
    not in between (Kafka: testBeginQuorumEpochHeartbeat)."""
    context, epoch = elected_leader()
    interval = context.config.fetch_timeout_ms // 2

    def acknowledge() -> list[int]:
        sent = context.sent_requests(BeginQuorumEpochRequest)
        for request in sent:
            context.deliver_response(
                request, BeginQuorumEpochResponse(leader_id=LOCAL, leader_epoch=epoch)
            )
        context.poll_until_idle()
        return sorted(r.destination for r in sent)

    assert acknowledge() == [2, 3]
    context.advance(interval)
    context.poll()
    assert acknowledge() == [2, 3]
    context.advance(interval // 2)
    context.poll()
    assert acknowledge() == []
    context.advance(interval - interval // 2)
    context.poll()
    assert acknowledge() == [2, 3]
    assert context.role == "Leader"


def test_leader_sends_no_begin_quorum_epoch_to_observers() -> None:
    """§1.3: BeginQuorumEpoch goes to the other *voters* only; a fetching observer gets none."""
    context, epoch = elected_leader()
    context.sent_requests()
    context.deliver_request(
        FetchRequest(
            replica_id=4,
            current_leader_epoch=epoch,
            fetch_offset=0,
            last_fetched_epoch=0,
            max_wait_ms=0,
        ),
        4,
    )
    context.poll()
    context.advance(context.config.fetch_timeout_ms)
    context.poll()
    sent = context.sent_requests(BeginQuorumEpochRequest)
    assert 4 not in {r.destination for r in sent}


def test_begin_quorum_epoch_answer_from_a_higher_epoch_makes_the_leader_follow() -> None:
    """§1.3 common response handling: an answer with a higher epoch naming a leader ->
    Follower of it."""
    context, epoch = elected_leader()
    request = next(r for r in context.sent_requests(BeginQuorumEpochRequest) if r.destination == 2)
    context.deliver_response(
        request,
        BeginQuorumEpochResponse(
            partition_error_code=Errors.FENCED_LEADER_EPOCH,
            leader_id=3,
            leader_epoch=epoch + 1,
            node_endpoints=(NodeEndpoint(3, "localhost", 9993),),
        ),
    )
    context.poll()
    assert (context.role, context.epoch, context.leader_id) == ("Follower", epoch + 1, 3)


def test_begin_quorum_epoch_answer_from_a_higher_epoch_without_leader_unattaches() -> None:
    """§1.3 common response handling: a higher epoch with no leader -> Unattached(that epoch)."""
    context, epoch = elected_leader()
    request = next(r for r in context.sent_requests(BeginQuorumEpochRequest) if r.destination == 2)
    context.deliver_response(
        request,
        BeginQuorumEpochResponse(
            partition_error_code=Errors.FENCED_LEADER_EPOCH,
            leader_id=-1,
            leader_epoch=epoch + 2,
        ),
    )
    context.poll()
    assert (context.role, context.epoch, context.leader_id) == ("Unattached", epoch + 2, None)


def test_begin_quorum_epoch_answer_from_an_older_epoch_is_ignored() -> None:
    """§1.3 common response handling: epoch < local -> ignored."""
    context, epoch = elected_leader()
    request = next(r for r in context.sent_requests(BeginQuorumEpochRequest) if r.destination == 2)
    context.deliver_response(
        request,
        BeginQuorumEpochResponse(
            partition_error_code=Errors.FENCED_LEADER_EPOCH,
            leader_id=3,
            leader_epoch=epoch - 1,
            node_endpoints=(NodeEndpoint(3, "localhost", 9993),),
        ),
    )
    context.poll()
    assert (context.role, context.epoch) == ("Leader", epoch)


# =============================================================================================
# EndQuorumEpoch: the receiving voter
# =============================================================================================
def test_first_preferred_candidate_starts_an_election_at_once() -> None:
    """§1.3 EndQuorumEpoch: the follower of the resigning leader named first sets its fetch
    timer to 0: on the next poll it is Prospective (not persisted, §1.7) and asks for
    pre-votes (Kafka: testHandleEndQuorumRequest; 2025 adds the pre-vote)."""
    context = follower_of(2, 2)
    writes = list(context.store.writes)
    context.deliver_request(end_epoch(2, 2, [LOCAL, 3]), 2)
    context.poll()
    body = end_response(context)
    assert body.partition_error_code == Errors.NONE
    assert (body.leader_id, body.leader_epoch) == (2, 2)
    context.poll()
    assert (context.role, context.epoch) == ("Prospective", 2)
    # §1.7: Prospective is never persisted; the store still holds the Follower's state.
    assert context.stored_state() == ElectionState(2, leader_id=2)
    assert context.store.writes == writes
    context.poll()
    votes = context.sent_requests(VoteRequest)
    assert sorted(r.destination for r in votes) == [2, 3]
    for request in votes:
        assert isinstance(request.body, VoteRequest)
        assert request.body.pre_vote


@pytest.mark.parametrize(
    ("candidates", "backoff_ms"),
    [
        ([3, LOCAL], 500),  # n=2, pos=1: (1000 >> 1) << 0
        ([3, LOCAL, 4], 250),  # n=3, pos=1: (1000 >> 2) << 0
        ([3, 4, LOCAL], 500),  # n=3, pos=2: (1000 >> 2) << 1
        ([3, LOCAL, 4, 5], 125),  # n=4, pos=1: (1000 >> 3) << 0
        ([3, 4, LOCAL, 5], 250),  # n=4, pos=2: (1000 >> 3) << 1
        ([3, 4, 5, LOCAL], 500),  # n=4, pos=3: (1000 >> 3) << 2
        ([3, 4], 1000),  # absent: election.backoff.max.ms
    ],
)
def test_follower_fetch_timer_is_set_by_its_position_among_preferred_candidates(
    candidates: list[int | PreferredCandidate], backoff_ms: int
) -> None:
    """§1.3/§1.6: after EndQuorumEpoch the follower's fetch timer is
    ``min(max, (max >> (n - 1)) << (pos - 1))``, or election.backoff.max.ms when absent
    (Kafka: endEpochElectionBackoff; testHandleEndQuorumRequestWithLowerPriorityToBecomeLeader)."""
    context = follower_of(2, 2, voters=(1, 2, 3, 4, 5), election_backoff_max_ms=1_000)
    context.deliver_request(end_epoch(2, 2, candidates), 2)
    context.poll()
    assert end_response(context).partition_error_code == Errors.NONE
    context.advance(backoff_ms - 1)
    context.poll()
    assert context.role == "Follower"
    context.advance(1)
    context.poll()
    assert (context.role, context.epoch) == ("Prospective", 2)


def test_absent_follower_waits_the_backoff_max_even_beyond_its_fetch_timeout() -> None:
    """§1.3: the timer is *set* to election.backoff.max.ms for a follower not named, even when
    that is later than its current fetch deadline."""
    context = follower_of(2, 2, election_backoff_max_ms=3_000, fetch_timeout_ms=2_000)
    context.deliver_request(end_epoch(2, 2, [3]), 2)
    context.poll()
    assert end_response(context).partition_error_code == Errors.NONE
    context.advance(2_999)
    context.poll()
    assert context.role == "Follower"
    context.advance(1)
    context.poll()
    assert context.role == "Prospective"


def test_preferred_candidate_with_another_directory_is_not_this_replica() -> None:
    """§1.3 (v1 PreferredCandidates): an entry with this id but another directory id is not
    this replica, which then counts as absent; a matching or zero directory id is it."""
    local_directory = uuid.UUID(int=0x1111)

    def timer_after(candidates: list[int | PreferredCandidate]) -> str:
        context: RaftTestContext[bytes] = (
            RaftClientBuilder(LOCAL, (1, 2, 3))
            .with_elected_leader(2, 2)
            .with_local_directory_id(local_directory)
            .with_config(election_backoff_max_ms=1_000)
            .build()
        )
        context.poll()
        context.deliver_request(end_epoch(2, 2, candidates), 2)
        context.poll()
        assert end_response(context).partition_error_code == Errors.NONE
        context.poll()
        return context.role

    assert timer_after([PreferredCandidate(LOCAL, uuid.UUID(int=0x2222)), 3]) == "Follower"
    assert timer_after([PreferredCandidate(LOCAL, local_directory), 3]) == "Prospective"
    assert timer_after([PreferredCandidate(LOCAL, ZERO_UUID), 3]) == "Prospective"


def test_unattached_voter_told_of_the_end_of_an_epoch_follows_then_elects_at_once() -> None:
    """§1.3: EndQuorumEpoch names the leader of the current epoch: an Unattached voter follows
    it, and as first candidate starts an election on the next poll
    (Kafka: testEndQuorumStartsNewElectionImmediatelyIfFollowerUnattached)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(2).build()
    )
    context.deliver_request(end_epoch(2, 2, [LOCAL, 3]), 2)
    context.poll()
    body = end_response(context)
    assert body.partition_error_code == Errors.NONE
    assert (body.leader_id, body.leader_epoch) == (2, 2)
    context.poll()
    assert (context.role, context.epoch) == ("Prospective", 2)


def test_end_quorum_epoch_of_a_higher_epoch_is_adopted() -> None:
    """§1.3: a higher epoch is adopted with the sender as the leader, then the position rule
    applies (first -> election at once)."""
    context = follower_of(2, 5)
    context.deliver_request(end_epoch(3, 6, [LOCAL, 2]), 3)
    context.poll()
    body = end_response(context)
    assert body.partition_error_code == Errors.NONE
    assert (body.leader_id, body.leader_epoch) == (3, 6)
    assert context.stored_state() == ElectionState(6, leader_id=3)
    context.poll()
    assert (context.role, context.epoch) == ("Prospective", 6)


def test_end_quorum_epoch_of_an_older_epoch_is_fenced_for_a_candidate() -> None:
    """§1.3 voter-only validation: an older epoch -> FENCED_LEADER_EPOCH; the Candidate's
    election goes on untouched (Kafka: testEndQuorumIgnoredAsCandidateIfOlderEpoch)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2)).with_voted_candidate(5, LOCAL).build()
    )
    context.deliver_request(end_epoch(2, 3, [LOCAL]), 2)
    context.poll()
    body = end_response(context)
    assert body.partition_error_code == Errors.FENCED_LEADER_EPOCH
    assert (body.leader_id, body.leader_epoch) == (-1, 5)
    assert (context.role, context.epoch) == ("Candidate", 5)


def test_end_quorum_epoch_of_an_older_epoch_is_fenced_for_a_leader() -> None:
    """§1.3: the leader answers an older EndQuorumEpoch FENCED_LEADER_EPOCH and keeps leading
    (Kafka: testEndQuorumIgnoredAsLeaderIfOlderEpoch)."""
    context, epoch = elected_leader()
    context.deliver_request(end_epoch(2, epoch - 2, [LOCAL, 3]), 2)
    context.poll()
    body = end_response(context)
    assert body.partition_error_code == Errors.FENCED_LEADER_EPOCH
    assert (body.leader_id, body.leader_epoch) == (LOCAL, epoch)
    context.advance(context.config.fetch_timeout_ms - 1)  # inside the check-quorum interval
    context.poll()
    assert (context.role, context.epoch) == ("Leader", epoch)


def test_leader_answers_end_quorum_epoch_naming_itself_and_keeps_leading() -> None:
    """§1.3: an EndQuorumEpoch of the current epoch naming this (still active) leader is NONE
    and changes nothing (Kafka: testEndQuorumEpochRequestClusterIdValidation)."""
    context, epoch = elected_leader((1, 2))
    context.deliver_request(end_epoch(LOCAL, epoch, [2]), 2)
    context.poll()
    body = end_response(context)
    assert body.partition_error_code == Errors.NONE
    assert (body.leader_id, body.leader_epoch) == (LOCAL, epoch)
    assert context.role == "Leader"


def test_end_quorum_epoch_with_a_negative_leader_id_is_invalid() -> None:
    """§1.3 voter-only validation: a negative sender id -> INVALID_REQUEST, nothing changes."""
    context = follower_of(2, 2)
    context.deliver_request(end_epoch(-1, 2, [LOCAL]), 2)
    context.poll()
    assert end_response(context).partition_error_code == Errors.INVALID_REQUEST
    context.poll()
    assert (context.role, context.leader_id) == ("Follower", 2)


def test_end_quorum_epoch_from_a_leader_not_followed_does_not_touch_the_timer() -> None:
    """§1.3: only a follower *of that leader* sets its fetch timer. An EndQuorumEpoch naming
    another leader for the followed epoch is refused (kraft difference, client.py
    ``_maybe_transition``: Kafka treats two leaders in one epoch as fatal) and the follower
    keeps its normal fetch timeout."""
    context = follower_of(2, 2)
    built_at = context.clock.now_ms()
    context.deliver_request(end_epoch(3, 2, [LOCAL]), 3)
    context.poll()
    assert end_response(context).partition_error_code == Errors.INVALID_REQUEST
    context.advance(built_at + context.config.fetch_timeout_ms - 1 - context.clock.now_ms())
    context.poll()
    assert (context.role, context.leader_id) == ("Follower", 2)
    context.advance(1)
    context.poll()
    assert context.role == "Prospective"


@pytest.mark.parametrize(
    ("cluster_id", "accepted"),
    [("cluster-a", True), (None, True), ("", False), ("cluster-b", False)],
)
def test_end_quorum_epoch_cluster_id_validation(cluster_id: str | None, accepted: bool) -> None:
    """§1.2 rule 1 (all RPCs): a missing cluster id is accepted, an empty or different one is
    a top-level INCONSISTENT_CLUSTER_ID, and the follower's timer is left alone."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3))
        .with_cluster_id("cluster-a")
        .with_elected_leader(2, 2)
        .build()
    )
    context.poll()
    context.deliver_request(end_epoch(2, 2, [LOCAL, 3]), 2, cluster_id=cluster_id)
    context.poll()
    body = end_response(context)
    context.poll()
    if accepted:
        assert body.error_code == Errors.NONE
        assert context.role == "Prospective"
    else:
        assert body.error_code == Errors.INCONSISTENT_CLUSTER_ID
        assert context.role == "Follower"


def test_end_quorum_epoch_tells_listeners_of_a_newly_learnt_leader() -> None:
    """§2 handleLeaderChange: a leader learnt from EndQuorumEpoch is a leader change."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(2).build()
    )
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    context.poll()
    context.deliver_request(end_epoch(2, 2, [3, LOCAL]), 2)
    context.poll()
    assert listener.leader_changes[-1] == (2, 2)
