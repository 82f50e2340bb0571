"""Resignation and graceful shutdown of ``KafkaRaftClient``.

docs/protocol.md §2 (``resign(epoch)`` argument rules, ``shutdown(timeout_ms)``), §1.6 (a
Resigned replica sends EndQuorumEpoch until acknowledged and becomes Unattached in the next
epoch after its election timeout, unless shutting down), §1.7 (Resigned is never persisted; a
restarted leader comes back Resigned) and §1.1 (the Resigned row). kraft differs from Kafka in
one documented way here: listeners get ``begin_shutdown()`` (docs/protocol.md, "Where kraft differs
from Kafka").

The scenarios mirror Kafka's ``KafkaRaftClientTest`` (testResignInOlderEpochIgnored,
testElectionTimeoutAfterUserInitiatedResign, testEndQuorumEpochRetriesWhileResigned,
testResignWillCompleteFetchPurgatory, testLeaderGracefulShutdown(Timeout),
testFollower/ObserverGracefulShutdown, testGracefulShutdownSingleMemberQuorum, ...).
"""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from kraft.errors import IllegalStateError, NotLeaderError
from kraft.log.quorum_state import ElectionState
from kraft.protocol.envelope import OutboundRequest
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    Endpoint,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    NodeEndpoint,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.channel import DequeMessageQueue, InboundMessage
from kraft.raft.client import KafkaRaftClient
from kraft.raft.listeners import LeaderAndEpoch
from kraft.testing import RaftClientBuilder, RaftTestContext, RecordingListener, fetch_request

LOCAL = 1


# -- helpers ----------------------------------------------------------------------------------
def leader_context(
    voters: tuple[int, ...] = (1, 2, 3), **config: int
) -> tuple[RaftTestContext[bytes], RecordingListener[bytes], int]:
    """Replica 1 elected leader of a fresh quorum; a listener registered before the election.

    The BeginQuorumEpoch requests of the election are drained (left unanswered)."""
    context: RaftTestContext[bytes] = RaftClientBuilder(LOCAL, voters).with_config(**config).build()
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    epoch = context.become_leader()
    context.sent_requests()
    return context, listener, epoch


def restarted_leader(
    voters: tuple[int, ...] = (1, 2, 3), epoch: int = 6, **config: int
) -> RaftTestContext[bytes]:
    """Replica 1 whose store says it led ``epoch``: it starts Resigned (§1.1 startup rule 2)."""
    return (
        RaftClientBuilder(LOCAL, voters)
        .with_elected_leader(epoch, LOCAL)
        .with_config(**config)
        .build()
    )


fetch = fetch_request


def end_quorum_requests(
    context: RaftTestContext[bytes],
) -> dict[int, tuple[OutboundRequest, EndQuorumEpochRequest]]:
    """The EndQuorumEpoch requests sent since the last drain, by destination."""
    sent = {}
    for request in context.sent_requests(EndQuorumEpochRequest):
        assert isinstance(request.body, EndQuorumEpochRequest)
        assert request.destination not in sent, "two EndQuorumEpoch to one voter in one poll"
        sent[request.destination] = (request, request.body)
    return sent


def fetch_responses(context: RaftTestContext[bytes]) -> list[FetchResponse]:
    bodies = []
    for response in context.sent_responses(FetchResponse):
        assert isinstance(response.body, FetchResponse)
        bodies.append(response.body)
    return bodies


def resign_and_poll(context: RaftTestContext[bytes], epoch: int) -> None:
    """``resign(epoch)``, then poll until Resigned and the EndQuorumEpoch requests are out."""
    context.client.resign(epoch)
    context.poll()
    assert context.role == "Resigned"
    context.poll()


class CountingListener(RecordingListener[bytes]):
    def __init__(self) -> None:
        super().__init__()
        self.begin_shutdown_calls = 0

    def begin_shutdown(self) -> None:
        super().begin_shutdown()
        self.begin_shutdown_calls += 1


class ShutdownWhileWaiting:
    """A message queue that asks for a shutdown while the client waits on it for a message,
    as a caller thread may while the I/O thread blocks in ``poll`` (Kafka's wakeup race)."""

    def __init__(
        self, inner: DequeMessageQueue, client: KafkaRaftClient[bytes], timeout_ms: int
    ) -> None:
        self.inner = inner
        self.client = client
        self.timeout_ms = timeout_ms
        self.future: Future[None] | None = None

    def add(self, message: InboundMessage) -> None:
        self.inner.add(message)

    def poll(self, timeout_ms: int) -> InboundMessage | None:
        if self.future is None:
            self.future = self.client.shutdown(self.timeout_ms)
        return self.inner.poll(timeout_ms)

    def is_empty(self) -> bool:
        return self.inner.is_empty()

    def wakeup(self) -> None:
        self.inner.wakeup()


# =============================================================================================
# resign(epoch): argument rules
# =============================================================================================
def test_resign_negative_epoch_raises_value_error() -> None:
    """§2 resign: a negative epoch is an IllegalArgumentException (kraft: ValueError)."""
    context, _, _ = leader_context()
    with pytest.raises(ValueError):
        context.client.resign(-1)
    context.poll()
    assert context.role == "Leader"


def test_resign_above_current_epoch_raises_value_error() -> None:
    """§2 resign: an epoch above the current one is an IllegalArgumentException (ValueError)
    (Kafka: testCannotResignWithLargerEpochThanCurrentEpoch)."""
    context, _, epoch = leader_context()
    with pytest.raises(ValueError):
        context.client.resign(epoch + 1)
    context.poll()
    assert context.role == "Leader"


def test_resign_below_current_epoch_is_ignored() -> None:
    """§2 resign: an epoch below the current one is ignored; the leader stays leader
    (Kafka: testResignInOlderEpochIgnored)."""
    context, _, epoch = leader_context()
    context.client.resign(epoch - 1)
    context.poll()
    context.expire_election_timeout()  # still inside the check-quorum interval (1.5 x F)
    context.poll()
    assert context.role == "Leader"
    assert context.epoch == epoch
    assert context.sent_requests(EndQuorumEpochRequest) == []


def test_resign_current_epoch_when_follower_raises_value_error() -> None:
    """§2 resign: the current epoch while not its leader is an IllegalArgumentException
    (ValueError) (Kafka: testCannotResignIfNotLeader)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2)).with_elected_leader(2, 2).build()
    )
    assert context.role == "Follower"
    with pytest.raises(ValueError):
        context.client.resign(2)


def test_resign_current_epoch_when_unattached_raises_value_error() -> None:
    """§2 resign: the current epoch with no leader at all is not this replica's to resign."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(4).build()
    )
    with pytest.raises(ValueError):
        context.client.resign(4)


def test_resign_before_initialize_raises_illegal_state() -> None:
    """§2 resign: an uninitialized client raises IllegalStateException (IllegalStateError)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(4).build(initialize=False)
    )
    with pytest.raises(IllegalStateError):
        context.client.resign(4)


def test_resign_negative_epoch_is_checked_before_initialization() -> None:
    """§2 resign: the negative-epoch check comes first (Kafka's order), even uninitialized."""
    context: RaftTestContext[bytes] = RaftClientBuilder(LOCAL, (1, 2, 3)).build(initialize=False)
    with pytest.raises(ValueError):
        context.client.resign(-1)


def test_resign_by_observer_with_id_is_not_the_leader() -> None:
    """§2 resign: only an *id-less* observer is an IllegalStateException; an observer with an
    id asking to resign the current epoch of another leader is "current but not leader", an
    IllegalArgumentException (ValueError), as in Kafka's resign (no voter check there)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(4, (1, 2, 3)).with_elected_leader(5, 2).build()
    )
    assert context.leader_id == 2
    with pytest.raises(ValueError):
        context.client.resign(5)


def test_resign_by_anonymous_observer_raises_illegal_state() -> None:
    """§2 resign: an id-less observer raises IllegalStateException (IllegalStateError)
    (Kafka: testCannotResignIfObserver)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(None, (1, 2, 3)).with_unknown_leader(5).build()
    )
    with pytest.raises(IllegalStateError):
        context.client.resign(5)


def test_resign_of_current_epoch_when_already_resigned_is_ignored() -> None:
    """§2 resign: a Resigned replica still names itself leader of its epoch, so resigning that
    epoch raises nothing; there is no leadership left to give up (Kafka: ignored)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_elected_leader(6, LOCAL).build()
    )
    assert context.role == "Resigned"
    context.client.resign(6)
    context.poll()
    assert context.role == "Resigned"
    assert context.epoch == 6


# =============================================================================================
# resign(epoch): what happens
# =============================================================================================
def test_resign_takes_effect_on_the_next_poll() -> None:
    """§2 resign: a volatile flag; the leader becomes Resigned on the next poll, not before."""
    context, _, epoch = leader_context()
    context.client.resign(epoch)
    assert context.role == "Leader"
    context.poll()
    assert context.role == "Resigned"
    assert context.epoch == epoch
    assert context.leader_id == LOCAL


def test_resigned_is_not_persisted() -> None:
    """§1.7: Resigned is never written to the quorum-state store; the store keeps the
    Leader's record (epoch, leader=self)."""
    context, _, epoch = leader_context()
    writes_before = list(context.store.writes)
    resign_and_poll(context, epoch)
    assert context.store.writes == writes_before
    assert context.stored_state() == ElectionState(epoch, leader_id=LOCAL)


def test_resign_sends_end_quorum_epoch_to_every_other_voter() -> None:
    """§1.3 EndQuorumEpoch: the Resigned leader sends it to all other voters, with its epoch,
    its own id and endpoint."""
    context, _, epoch = leader_context()
    resign_and_poll(context, epoch)
    sent = end_quorum_requests(context)
    assert sorted(sent) == [2, 3]
    for _, body in sent.values():
        assert body.leader_id == LOCAL
        assert body.leader_epoch == epoch
        assert body.leader_endpoints == (Endpoint("CONTROLLER", "localhost", 9991),)


def test_resign_names_successors_by_fetch_offset_descending() -> None:
    """§1.6: the preferred successors are the other voters by fetch offset, descending
    (Kafka: testEndQuorumEpochSentBasedOnFetchOffset). Voter 3 has fetched further than 2."""
    context, _, epoch = leader_context()
    assert context.log_end_offset == 1  # the LeaderChange record
    context.deliver_request(fetch(epoch, 2, 0, 0), 2)
    context.deliver_request(fetch(epoch, 3, 1, epoch), 3)
    context.poll_until_idle()
    assert [b.partition_error_code for b in fetch_responses(context)] == [0, 0]
    resign_and_poll(context, epoch)
    sent = end_quorum_requests(context)
    assert sorted(sent) == [2, 3]
    for _, body in sent.values():
        assert [c.candidate_id for c in body.preferred_candidates] == [3, 2]


def test_resign_puts_a_voter_that_never_fetched_last() -> None:
    """§1.6: successors by fetch offset; a voter with no known offset comes after the others."""
    context, _, epoch = leader_context(voters=(1, 2, 3, 4))
    context.deliver_request(fetch(epoch, 2, 0, 0), 2)
    context.deliver_request(fetch(epoch, 4, 1, epoch), 4)
    context.poll_until_idle()
    resign_and_poll(context, epoch)
    sent = end_quorum_requests(context)
    assert sorted(sent) == [2, 3, 4]
    _, body = sent[2]
    assert [c.candidate_id for c in body.preferred_candidates] == [4, 2, 3]


def test_end_quorum_epoch_is_not_resent_once_acknowledged() -> None:
    """§1.6: EndQuorumEpoch is sent until acknowledged; a voter that answered NONE gets no
    more (Kafka: testElectionTimeoutAfterUserInitiatedResign)."""
    context, _, epoch = leader_context(voters=(1, 2), election_timeout_ms=10_000)
    resign_and_poll(context, epoch)
    sent = end_quorum_requests(context)
    request, _ = sent[2]
    context.deliver_response(request, EndQuorumEpochResponse(leader_id=LOCAL, leader_epoch=epoch))
    context.poll()
    for _ in range(5):
        context.advance(context.config.request_timeout_ms)
        context.poll()
    assert context.role == "Resigned"
    assert context.sent_requests(EndQuorumEpochRequest) == []


def test_end_quorum_epoch_is_retried_to_voters_that_did_not_answer() -> None:
    """§1.3/§1.6: EndQuorumEpoch is retried per request timeout to the voters that have not
    acknowledged it, and only to them (Kafka: testEndQuorumEpochRetriesWhileResigned)."""
    context, _, epoch = leader_context(election_timeout_ms=10_000, request_timeout_ms=5_000)
    resign_and_poll(context, epoch)
    sent = end_quorum_requests(context)
    assert sorted(sent) == [2, 3]
    request, _ = sent[2]
    context.deliver_response(request, EndQuorumEpochResponse(leader_id=LOCAL, leader_epoch=epoch))
    context.poll()
    assert context.sent_requests() == []
    context.advance(5_000)
    context.poll()
    assert context.role == "Resigned"
    retries = end_quorum_requests(context)
    assert sorted(retries) == [3]
    assert retries[3][1].leader_epoch == epoch


def test_end_quorum_epoch_error_is_not_an_acknowledgement() -> None:
    """§1.3: only NONE acknowledges EndQuorumEpoch; after an error (BROKER_NOT_AVAILABLE,
    backoff) the request is sent again once retry.backoff.ms has passed."""
    context, _, epoch = leader_context(voters=(1, 2), election_timeout_ms=10_000)
    resign_and_poll(context, epoch)
    request, _ = end_quorum_requests(context)[2]
    context.deliver_response(
        request,
        EndQuorumEpochResponse(
            partition_error_code=Errors.BROKER_NOT_AVAILABLE,
            leader_id=LOCAL,
            leader_epoch=epoch,
        ),
    )
    context.poll()
    assert context.sent_requests(EndQuorumEpochRequest) == []
    context.advance(context.config.retry_backoff_ms)
    context.poll()
    assert sorted(end_quorum_requests(context)) == [2]


def test_fetch_to_resigned_leader_gets_not_leader_or_follower() -> None:
    """§1.3 leader-only validation: a Resigned replica is not leader; a Fetch for its epoch
    gets NOT_LEADER_OR_FOLLOWER naming itself and its epoch
    (Kafka: testElectionTimeoutAfterUserInitiatedResign)."""
    context, _, epoch = leader_context(voters=(1, 2), election_timeout_ms=10_000)
    resign_and_poll(context, epoch)
    context.deliver_request(fetch(epoch, 2, 1, epoch), 2)
    context.poll()
    [response] = fetch_responses(context)
    assert response.partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert response.current_leader.leader_id == LOCAL
    assert response.current_leader.leader_epoch == epoch


def test_resign_answers_parked_fetches_with_not_leader_or_follower() -> None:
    """§1.4: leadership lost (resign) completes parked fetches with NOT_LEADER_OR_FOLLOWER
    (Kafka: testResignWillCompleteFetchPurgatory)."""
    context, _, epoch = leader_context(voters=(1, 2))
    context.deliver_request(fetch(epoch, 2, 1, epoch, max_wait_ms=1_000), 2)
    context.poll()
    assert fetch_responses(context) == []  # parked: nothing new at offset 1
    context.client.resign(epoch)
    context.poll()
    assert context.role == "Resigned"
    [response] = fetch_responses(context)
    assert response.partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert response.current_leader.leader_epoch == epoch


def test_resigned_becomes_unattached_in_the_next_epoch_after_election_timeout() -> None:
    """§1.6: without a shutdown, a Resigned replica becomes Unattached(epoch + 1) after its
    election timeout (2025 rule), which is persisted; listeners learn of the new epoch."""
    context, listener, epoch = leader_context(voters=(1, 2), election_timeout_ms=10_000)
    resign_and_poll(context, epoch)
    context.advance(10_000 - 1)  # below the smallest randomized election timeout
    context.poll()
    assert context.role == "Resigned"
    context.advance(10_000 + 1)  # past the largest one
    context.poll()
    assert context.role == "Unattached"
    assert context.epoch == epoch + 1
    assert context.leader_id is None
    assert context.stored_state() == ElectionState(epoch + 1)
    context.poll()
    assert listener.leader_changes[-1] == LeaderAndEpoch(None, epoch + 1)


def test_resigned_rejects_a_standard_vote_in_its_own_epoch() -> None:
    """§1.2: a Resigned replica rejects standard votes (it led the epoch)
    (Kafka: testRejectVotesFromSameEpochAfterResigningLeadership: a restarted leader, even with
    an equally empty log)."""
    context = restarted_leader(voters=(1, 2), epoch=2)
    assert context.log_end_offset == 0
    context.deliver_request(
        VoteRequest(
            replica_epoch=2, replica_id=2, last_offset_epoch=0, last_offset=0, voter_id=LOCAL
        ),
        2,
    )
    context.poll()
    response = context.single_sent_response(VoteResponse)
    assert isinstance(response, VoteResponse)
    assert response.partition_error_code == Errors.NONE
    assert not response.vote_granted
    assert (response.leader_id, response.leader_epoch) == (LOCAL, 2)
    assert context.role == "Resigned"


def test_resigned_grants_a_vote_in_a_higher_epoch() -> None:
    """§1.2: a vote for a higher epoch moves a Resigned replica to Unattached(higher) and can
    be granted there (Kafka: testGrantVotesFromHigherEpochAfterResigningLeadership)."""
    context, _, epoch = leader_context(voters=(1, 2))
    resign_and_poll(context, epoch)
    context.deliver_request(
        VoteRequest(
            replica_epoch=epoch + 1,
            replica_id=2,
            last_offset_epoch=epoch,
            last_offset=1,
            voter_id=LOCAL,
        ),
        2,
    )
    context.poll()
    response = context.single_sent_response(VoteResponse)
    assert isinstance(response, VoteResponse)
    assert response.vote_granted
    assert context.role == "Voted"
    assert context.epoch == epoch + 1
    assert context.voted_id == 2


def test_begin_quorum_epoch_after_resign_makes_it_a_follower() -> None:
    """§1.3 BeginQuorumEpoch: a Resigned replica follows the leader of a higher epoch, and its
    listeners learn of it (Kafka: testHandleBeginQuorumEpochAfterUserInitiatedResign)."""
    context, listener, epoch = leader_context()
    resign_and_poll(context, epoch)
    context.deliver_request(
        BeginQuorumEpochRequest(
            leader_id=2,
            leader_epoch=epoch + 1,
            voter_id=LOCAL,
            leader_endpoints=(Endpoint("CONTROLLER", "localhost", 9992),),
        ),
        2,
    )
    context.poll()
    response = context.single_sent_response(BeginQuorumEpochResponse)
    assert isinstance(response, BeginQuorumEpochResponse)
    assert response.partition_error_code == Errors.NONE
    assert context.role == "Follower"
    assert (context.epoch, context.leader_id) == (epoch + 1, 2)
    assert listener.leader_changes[-1] == LeaderAndEpoch(2, epoch + 1)


def test_listeners_get_no_leader_change_while_resigned() -> None:
    """§2 handleLeaderChange: not fired in Resigned; a listener registered while Resigned
    hears nothing until the replica leaves Resigned."""
    context, listener, epoch = leader_context(voters=(1, 2), election_timeout_ms=10_000)
    before = list(listener.leader_changes)
    resign_and_poll(context, epoch)
    late: RecordingListener[bytes] = RecordingListener()
    context.client.register(late)
    for _ in range(3):
        context.poll()
    assert late.leader_changes == []
    assert listener.leader_changes == before


# =============================================================================================
# A restarted leader comes back Resigned (§1.1 startup rule 2, §1.7)
# =============================================================================================
def test_restarted_leader_comes_back_resigned_in_the_same_epoch() -> None:
    """§1.1 startup rule 2: stored leader == self -> Resigned in that epoch, never Leader;
    nothing new is persisted (§1.7); appends are refused."""
    context = restarted_leader()
    assert context.role == "Resigned"
    assert context.epoch == 6
    assert context.leader_id == LOCAL
    assert context.store.writes == [ElectionState(6, leader_id=LOCAL)]
    context.poll()
    with pytest.raises(NotLeaderError):
        context.client.prepare_append(6, [b"a"])


def test_restarted_leader_tells_no_listener_of_a_leader_change() -> None:
    """§2: not fired in Resigned, also for a listener registered right after a restart
    (Kafka: testHandleLeaderChangeFiresAfterResignRegistration)."""
    context = restarted_leader()
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    context.poll()
    context.poll()
    assert context.role == "Resigned"
    assert listener.leader_changes == []


def test_restarted_leader_sends_end_quorum_epoch_to_the_other_voters() -> None:
    """§1.6: a Resigned replica sends EndQuorumEpoch until acknowledged; a restarted leader is
    Resigned, so it tells the other voters at once (Kafka:
    testInitializeAsResignedLeaderFromStateStore, testEndQuorumEpochRetriesWhileResigned)."""
    context = restarted_leader(election_timeout_ms=10_000)
    context.poll()
    sent = end_quorum_requests(context)
    assert sorted(sent) == [2, 3]
    for _, body in sent.values():
        assert body.leader_id == LOCAL
        assert body.leader_epoch == 6


def test_restarted_leader_becomes_unattached_in_the_next_epoch() -> None:
    """§1.1 Resigned row / §1.6: after the election timeout a restarted leader moves to
    Unattached(epoch + 1), persisted (Kafka: testInitializeAsResignedAndBecomeCandidate, 2025
    rule)."""
    context = restarted_leader()
    context.expire_election_timeout()
    context.poll()
    assert context.role == "Unattached"
    assert context.epoch == 7
    assert context.stored_state() == ElectionState(7)


# =============================================================================================
# shutdown(timeout_ms)
# =============================================================================================
def test_shutdown_returns_a_future_completed_by_a_later_poll() -> None:
    """§2 shutdown: returns a concurrent.futures.Future; nothing completes inside the call
    (Kafka: testFollowerGracefulShutdown)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2)).with_elected_leader(5, 2).build()
    )
    context.poll()
    future = context.client.shutdown(5_000)
    assert isinstance(future, Future)
    assert not future.done()
    assert not context.client.is_shutdown
    context.poll()
    assert future.done()
    assert future.result() is None
    assert context.client.is_shutdown


def test_is_running_and_is_shutting_down_follow_a_shutdown() -> None:
    """Kafka's isRunning / isShuttingDown: running until the shutdown completes, shutting down
    from ``shutdown()`` until then, shut down after; a timed-out shutdown ends them too."""
    context, _, _ = leader_context(voters=(1, 2))
    client = context.client
    assert (client.is_running, client.is_shutting_down, client.is_shutdown) == (True, False, False)
    future = client.shutdown(5_000)
    assert (client.is_running, client.is_shutting_down, client.is_shutdown) == (True, True, False)
    context.poll()
    context.poll()
    assert context.role == "Resigned"
    assert not future.done()
    assert (client.is_running, client.is_shutting_down, client.is_shutdown) == (True, True, False)
    context.advance(5_000)
    context.poll()
    assert isinstance(future.exception(), TimeoutError)
    assert (client.is_running, client.is_shutting_down, client.is_shutdown) == (False, False, True)


def test_a_follower_stops_shutting_down_on_the_next_poll() -> None:
    """A follower knows a remote leader: ``is_shutting_down`` lasts until the next poll."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2)).with_elected_leader(5, 2).build()
    )
    context.poll()
    context.client.shutdown(5_000)
    # A tuple, so that mypy does not narrow the properties to True for the asserts below.
    assert (context.client.is_shutting_down, context.client.is_running) == (True, True)
    context.poll()
    assert not context.client.is_shutting_down
    assert not context.client.is_running


def test_leader_shutdown_resigns_and_completes_when_a_new_leader_appears() -> None:
    """§2 shutdown: a leader resigns and sends EndQuorumEpoch; it still votes to help the
    election; the shutdown completes once a remote leader is known
    (Kafka: testLeaderGracefulShutdown)."""
    context, _, epoch = leader_context(voters=(1, 2))
    future = context.client.shutdown(5_000)
    context.poll()
    assert context.role == "Resigned"
    assert not future.done()
    context.poll()
    assert sorted(end_quorum_requests(context)) == [2]

    context.deliver_request(
        VoteRequest(
            replica_epoch=epoch + 1,
            replica_id=2,
            last_offset_epoch=epoch,
            last_offset=1,
            voter_id=LOCAL,
        ),
        2,
    )
    context.poll()
    response = context.single_sent_response(VoteResponse)
    assert isinstance(response, VoteResponse)
    assert response.vote_granted
    assert not future.done()

    context.deliver_request(
        BeginQuorumEpochRequest(
            leader_id=2,
            leader_epoch=epoch + 1,
            voter_id=LOCAL,
            leader_endpoints=(Endpoint("CONTROLLER", "localhost", 9992),),
        ),
        2,
    )
    for _ in range(3):
        if future.done():
            break
        context.poll()
    assert future.done()
    assert future.result() is None
    assert context.client.is_shutdown


def test_leader_shutdown_completes_when_an_end_quorum_answer_names_a_new_leader() -> None:
    """§2 shutdown: completes when a remote leader is known, however it is learnt: here from
    the EndQuorumEpoch response of a voter that already follows the next leader."""
    context, _, epoch = leader_context(voters=(1, 2, 3))
    future = context.client.shutdown(5_000)
    context.poll()
    context.poll()
    request, _ = end_quorum_requests(context)[2]
    context.deliver_response(
        request,
        EndQuorumEpochResponse(
            leader_id=3,
            leader_epoch=epoch + 1,
            node_endpoints=(NodeEndpoint(3, "localhost", 9993),),
        ),
    )
    context.poll()
    assert (context.role, context.epoch, context.leader_id) == ("Follower", epoch + 1, 3)
    context.poll()
    assert future.done()
    assert future.result() is None


def test_leader_shutdown_times_out() -> None:
    """§2 shutdown: with no new leader by the deadline the future fails with TimeoutError
    (Kafka: testLeaderGracefulShutdownTimeout)."""
    context, _, epoch = leader_context(voters=(1, 2))
    future = context.client.shutdown(5_000)
    context.poll()
    context.poll()
    assert sorted(end_quorum_requests(context)) == [2]
    context.advance(5_000 - 1)
    context.poll()
    assert not future.done()
    context.advance(1)
    context.poll()
    assert future.done()
    assert isinstance(future.exception(), TimeoutError)
    assert context.client.is_shutdown
    assert context.epoch == epoch


def test_resigned_while_shutting_down_stays_resigned_past_its_election_timeout() -> None:
    """§1.6: while shutting down a Resigned replica stays Resigned (no new epoch) until a new
    leader appears or the shutdown times out."""
    context, _, epoch = leader_context(voters=(1, 2, 3))
    future = context.client.shutdown(20_000)
    context.poll()
    assert context.role == "Resigned"
    for _ in range(4):
        context.expire_election_timeout()
        context.poll()
    assert context.role == "Resigned"
    assert context.epoch == epoch
    assert not future.done()


def test_follower_shutdown_completes_at_once() -> None:
    """§2 shutdown: a follower knows a remote leader; the next poll completes the shutdown
    (Kafka: testFollowerGracefulShutdown)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2)).with_elected_leader(5, 2).build()
    )
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    context.poll()
    future = context.client.shutdown(5_000)
    context.poll()
    assert future.done()
    assert future.result() is None
    assert listener.shutdown_begun  # told even though the shutdown completed in that poll


def test_observer_shutdown_completes_without_a_known_leader() -> None:
    """§2 shutdown: an observer completes at once, even with no leader known
    (Kafka: testObserverGracefulShutdown)."""
    context: RaftTestContext[bytes] = RaftClientBuilder(4, (2, 3)).with_unknown_leader(5).build()
    context.poll()
    assert context.leader_id is None
    future = context.client.shutdown(5_000)
    assert not future.done()
    context.poll()
    assert future.done()
    assert future.result() is None


def test_single_voter_shutdown_completes_at_once() -> None:
    """§2 shutdown: the only voter completes at once (Kafka:
    testGracefulShutdownSingleMemberQuorum)."""
    context: RaftTestContext[bytes] = RaftClientBuilder(LOCAL, (1,)).build()
    assert context.role == "Leader"
    context.poll()
    assert context.sent_requests() == []
    future = context.client.shutdown(5_000)
    context.poll()
    assert future.done()
    assert future.result() is None


def test_unattached_voter_does_not_start_an_election_while_shutting_down() -> None:
    """§2 shutdown: an Unattached voter idles (no Prospective, no votes) until a leader is
    known or the deadline."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(4).build()
    )
    future = context.client.shutdown(10_000)
    context.poll()
    context.expire_election_timeout()
    context.poll()
    assert context.role == "Unattached"
    assert context.sent_requests(VoteRequest) == []
    assert not future.done()
    context.advance(10_000)
    context.poll()
    assert isinstance(future.exception(), TimeoutError)


def test_unattached_voter_shutdown_completes_once_a_leader_is_known() -> None:
    """§2 shutdown: completes when a remote leader becomes known (here by BeginQuorumEpoch)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(4).build()
    )
    future = context.client.shutdown(10_000)
    context.poll()
    context.deliver_request(
        BeginQuorumEpochRequest(
            leader_id=2,
            leader_epoch=4,
            voter_id=LOCAL,
            leader_endpoints=(Endpoint("CONTROLLER", "localhost", 9992),),
        ),
        2,
    )
    context.poll()
    context.poll()
    assert future.done()
    assert future.result() is None


def test_candidate_keeps_its_election_going_while_shutting_down() -> None:
    """§2 shutdown: a Candidate keeps electing (no timeout into Prospective while shutting
    down); once elected it resigns at once and sends EndQuorumEpoch."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_voted_candidate(4, LOCAL).build()
    )
    assert context.role == "Candidate"
    future = context.client.shutdown(30_000)
    context.poll()
    votes = context.sent_requests(VoteRequest)
    assert sorted(r.destination for r in votes) == [2, 3]
    context.expire_election_timeout()
    context.poll()
    assert (context.role, context.epoch) == ("Candidate", 4)
    # The first requests timed out meanwhile and were sent again: answer the retry.
    retries = context.sent_requests(VoteRequest)
    assert sorted(r.destination for r in retries) == [2, 3]

    vote = next(r for r in retries if r.destination == 2)
    context.deliver_response(vote, VoteResponse(leader_epoch=4, vote_granted=True))
    context.poll()
    assert context.role == "Leader"
    context.poll()
    assert context.role == "Resigned"
    context.poll()
    assert sorted(end_quorum_requests(context)) == [2, 3]
    assert not future.done()


def test_prospective_keeps_asking_for_pre_votes_while_shutting_down() -> None:
    """§2 shutdown: a Prospective voter keeps electing rather than timing out while shutting
    down."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_unknown_leader(4).build()
    )
    context.expire_election_timeout()
    context.poll()
    assert context.role == "Prospective"
    future = context.client.shutdown(30_000)
    context.poll()
    context.expire_election_timeout()
    context.poll()
    assert context.role == "Prospective"
    assert context.epoch == 4
    assert not future.done()


def test_listeners_get_begin_shutdown_once_on_the_next_poll() -> None:
    """kraft difference (docs/protocol.md): every listener gets begin_shutdown(), on the poll after
    shutdown(), exactly once."""
    context, _, _ = leader_context(voters=(1, 2))
    first, second = CountingListener(), CountingListener()
    context.client.register(first)
    context.client.register(second)
    context.poll()
    context.client.shutdown(5_000)
    assert first.begin_shutdown_calls == 0
    context.poll()
    assert (first.begin_shutdown_calls, second.begin_shutdown_calls) == (1, 1)
    for _ in range(3):
        context.poll()
    context.advance(5_000)
    context.poll()
    assert (first.begin_shutdown_calls, second.begin_shutdown_calls) == (1, 1)


def test_listeners_get_no_leader_change_from_a_shutting_down_leader() -> None:
    """§2: handleLeaderChange is not fired while Resigned, also during a graceful shutdown."""
    context, listener, _ = leader_context(voters=(1, 2))
    context.poll()
    before = list(listener.leader_changes)
    context.client.shutdown(5_000)
    for _ in range(3):
        context.poll()
    assert context.role == "Resigned"
    assert listener.leader_changes == before


def test_fetch_to_a_shutting_down_leader_gets_broker_not_available() -> None:
    """§1.3 leader-only validation: a Fetch handled by a leader that is shutting down gets
    BROKER_NOT_AVAILABLE (the shutdown arrives while the poll waits for the message)."""
    context, _, epoch = leader_context(voters=(1, 2))
    context.deliver_request(fetch(epoch, 2, 1, epoch), 2)
    queue = ShutdownWhileWaiting(context.queue, context.client, 5_000)
    context.client.queue = queue
    context.poll()
    assert queue.future is not None
    [response] = fetch_responses(context)
    assert response.partition_error_code == Errors.BROKER_NOT_AVAILABLE
    context.poll()
    assert context.role == "Resigned"


def test_fetch_snapshot_to_a_shutting_down_leader_gets_broker_not_available() -> None:
    """§1.3 leader-only validation (FetchSnapshot too): a leader that is shutting down answers
    BROKER_NOT_AVAILABLE."""
    context, _, epoch = leader_context(voters=(1, 2))
    context.deliver_request(
        FetchSnapshotRequest(
            replica_id=2,
            current_leader_epoch=epoch,
            snapshot_id=SnapshotId(end_offset=1, epoch=epoch),
            position=0,
        ),
        2,
    )
    context.client.queue = ShutdownWhileWaiting(context.queue, context.client, 5_000)
    context.poll()
    response = context.single_sent_response(FetchSnapshotResponse)
    assert isinstance(response, FetchSnapshotResponse)
    assert response.partition_error_code == Errors.BROKER_NOT_AVAILABLE
