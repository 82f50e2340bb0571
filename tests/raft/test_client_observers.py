"""Observers and bootstrap servers (docs/protocol.md §1.8, §1.3 Fetch row, §1.4 "Fetches go to the
leader; if that connection is backing off or timed out, to a random ready bootstrap server").

An observer is a replica outside the voter set: it never becomes Prospective, Candidate or
Leader, its election timeout is infinite, it finds the leader by fetching from bootstrap
servers (kraft: the voter ids when ``QuorumConfig.bootstrap_servers`` is empty, else -2, -3, ...,
see ``kraft.raft.requests.bootstrap_server_id``), it flushes only if ``followers_always_flush``,
and it still answers votes. On the leader, observers' fetches never move the high watermark.

Scenarios mirror Kafka's ``KafkaRaftClientTest`` (testInitializeObserverNoPreviousState,
testObserverQuorumDiscoveryFailure, testObserverSendDiscoveryFetchAfterFetchTimeout,
testObserverHandleRetryFetchtToBootstrapServer, testObserverHandleRetryFetchToLeader,
testObserverLeaderRediscoveryAfter{BrokerNotAvailableError,RequestTimeout},
testUnattachedAsObserverDoesNotBecomeCandidateAfterElectionTimeout,
testFollowerAsObserverDoesNotBecomeCandidateAfterFetchTimeout, testObserverReplication,
testObserverGracefulShutdown, testObserverFetchWithNoLocalId).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kraft.config import Endpoint as ConfigEndpoint
from kraft.log.quorum_state import ElectionState
from kraft.protocol.envelope import OutboundRequest
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.requests import bootstrap_server_id
from kraft.record.batch import encode_batch
from kraft.testing import LocalCluster, RaftClientBuilder, RaftTestContext, RecordingListener

OBSERVER = 4
VOTERS = (1, 2, 3)
EPOCH = 5
LEADER = 2
BOOTSTRAP = (ConfigEndpoint("localhost", 9992), ConfigEndpoint("localhost", 9993))
BOOTSTRAP_IDS = {bootstrap_server_id(0), bootstrap_server_id(1)}
ELECTING_ROLES = {"Prospective", "Candidate", "Leader", "Resigned"}


def records(base_offset: int, epoch: int, values: list[bytes]) -> bytes:
    return encode_batch(base_offset, epoch, values, timestamp_ms=1_700_000_000_000)


def fetch_response(
    epoch: int,
    leader_id: int,
    *,
    error: int = Errors.NONE,
    data: bytes = b"",
    high_watermark: int = -1,
) -> FetchResponse:
    return FetchResponse(
        partition_error_code=error,
        high_watermark=high_watermark,
        log_start_offset=0,
        records=data,
        current_leader=LeaderIdAndEpoch(leader_id, epoch),
    )


def observer(
    *, local_id: int | None = OBSERVER, bootstrap: bool = False, **config: Any
) -> RaftClientBuilder[bytes]:
    builder: RaftClientBuilder[bytes] = RaftClientBuilder(local_id, VOTERS)
    if bootstrap:
        config["bootstrap_servers"] = BOOTSTRAP
    if config:
        builder.with_config(**config)
    return builder


def single_fetch(ctx: RaftTestContext[bytes]) -> tuple[OutboundRequest, FetchRequest]:
    ctx.poll()
    return ctx.single_sent_request(FetchRequest)


def discover_leader(ctx: RaftTestContext[bytes], leader: int = LEADER, epoch: int = EPOCH) -> None:
    """Answer the discovery fetch with FENCED_LEADER_EPOCH naming ``leader`` in ``epoch``."""
    request, _ = single_fetch(ctx)
    ctx.deliver_response(request, fetch_response(epoch, leader, error=Errors.FENCED_LEADER_EPOCH))
    ctx.poll()
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", epoch, leader)


# -- where an observer fetches ------------------------------------------------------------------


def test_observer_without_bootstrap_servers_fetches_from_a_voter() -> None:
    """§1.8, kraft: with no bootstrap servers configured, the voters are the bootstrap servers;
    the discovery Fetch carries the observer's id, epoch 0, offset 0 and last epoch 0."""
    ctx = observer().build()
    assert ctx.role == "Unattached" and not ctx.client.is_voter
    request, body = single_fetch(ctx)
    assert request.destination in VOTERS
    assert body.replica_id == OBSERVER
    assert (body.current_leader_epoch, body.fetch_offset, body.last_fetched_epoch) == (0, 0, 0)
    assert ctx.sent_requests() == []  # nothing else: no Vote, no second Fetch


def test_bootstrap_server_ids_are_minus_two_minus_three() -> None:
    """§1.8, kraft: bootstrap_servers[i] is addressed as destination -2 - i (-1 stays "no id")."""
    assert [bootstrap_server_id(i) for i in range(3)] == [-2, -3, -4]


def test_observer_with_bootstrap_servers_fetches_from_a_bootstrap_id() -> None:
    """§1.8: with QuorumConfig.bootstrap_servers set, the discovery Fetch goes to one of the
    bootstrap ids (-2, -3), never straight to a voter id."""
    ctx = observer(bootstrap=True).build()
    request, body = single_fetch(ctx)
    assert request.destination in BOOTSTRAP_IDS
    assert (body.replica_id, body.current_leader_epoch, body.fetch_offset) == (OBSERVER, 0, 0)


def test_observer_discovers_the_leader_from_a_fenced_epoch_answer() -> None:
    """§1.3 common response handling: FENCED_LEADER_EPOCH naming a leader of a higher epoch makes
    the observer its Follower (persisted), and the next Fetch goes to that leader."""
    ctx = observer().build()
    discover_leader(ctx)
    assert ctx.stored_state() == ElectionState(EPOCH, leader_id=LEADER)
    request, body = single_fetch(ctx)
    assert request.destination == LEADER
    assert (body.current_leader_epoch, body.fetch_offset, body.last_fetched_epoch) == (EPOCH, 0, 0)


def test_observer_backs_off_after_a_failed_discovery_then_retries_the_bootstrap_server() -> None:
    """§1.3: a top-level error backs the bootstrap server off for retry_backoff_ms; the retry
    then discovers the leader (Kafka testObserverQuorumDiscoveryFailure)."""
    ctx = observer(bootstrap_servers=BOOTSTRAP[:1]).build()
    request, _ = single_fetch(ctx)
    assert request.destination == bootstrap_server_id(0)
    ctx.deliver_response(request, FetchResponse(error_code=Errors.UNKNOWN_SERVER_ERROR))
    ctx.poll()
    ctx.advance(ctx.config.retry_backoff_ms - 1)
    ctx.poll()
    assert ctx.sent_requests(FetchRequest) == []  # still backing off
    ctx.advance(1)
    request, body = single_fetch(ctx)
    assert request.destination == bootstrap_server_id(0)
    assert body.current_leader_epoch == 0
    ctx.deliver_response(request, fetch_response(EPOCH, LEADER, error=Errors.FENCED_LEADER_EPOCH))
    ctx.poll()
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", EPOCH, LEADER)


def test_observer_discovers_the_leader_and_appends_in_one_fetch() -> None:
    """§1.3: a same-epoch NONE Fetch response naming a leader the observer did not know makes it
    a Follower *and* is still handled: its records are appended and the HW learnt."""
    ctx = observer().with_unknown_leader(EPOCH).build()
    request, body = single_fetch(ctx)
    assert body.current_leader_epoch == EPOCH
    source = request.destination
    ctx.deliver_response(
        request,
        fetch_response(
            EPOCH,
            source,
            data=records(0, 3, [b"a", b"b"]),
            high_watermark=2,
        ),
    )
    ctx.poll()
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", EPOCH, source)
    assert ctx.log_end_offset == 2
    assert ctx.high_watermark == 2
    request, body = single_fetch(ctx)
    assert request.destination == source
    assert (body.fetch_offset, body.last_fetched_epoch) == (2, 3)


# -- never an election ----------------------------------------------------------------------------


def test_unattached_observer_never_stands_for_election_but_votes() -> None:
    """§1.8: an observer's election timeout is infinite (it never becomes Prospective/Candidate
    and sends no Vote), yet it answers a vote request and grants it like any replica
    (Kafka testUnattachedAsObserverDoesNotBecomeCandidateAfterElectionTimeout)."""
    ctx = observer().with_unknown_leader(EPOCH).build()
    single_fetch(ctx)
    for _ in range(5):
        ctx.expire_election_timeout()
        ctx.poll()
        assert ctx.role == "Unattached"
    assert ctx.sent_requests(VoteRequest) == []
    assert ctx.sent_requests(FetchRequest)  # it keeps looking for the leader instead
    ctx.deliver_request(
        VoteRequest(replica_epoch=EPOCH + 1, replica_id=1, last_offset_epoch=0, last_offset=0),
        source=1,
    )
    ctx.poll()
    response = ctx.single_sent_response(VoteResponse)
    assert isinstance(response, VoteResponse)
    assert response.error_code == Errors.NONE and response.partition_error_code == Errors.NONE
    assert response.vote_granted and response.leader_epoch == EPOCH + 1
    assert (ctx.role, ctx.epoch, ctx.voted_id) == ("Voted", EPOCH + 1, 1)
    for _ in range(5):
        ctx.expire_election_timeout()
        ctx.poll()
        assert ctx.role not in ELECTING_ROLES
    assert ctx.sent_requests(VoteRequest) == []
    fetches = ctx.sent_requests(FetchRequest)
    assert fetches
    assert all(
        isinstance(f.body, FetchRequest) and f.body.current_leader_epoch == EPOCH + 1
        for f in fetches
    )


def test_observer_follower_keeps_following_after_the_fetch_timeout() -> None:
    """§1.8: a voter-follower would become Prospective after the fetch timeout; an observer
    stays Follower, fetches from a bootstrap server instead, and still votes
    (Kafka testFollowerAsObserverDoesNotBecomeCandidateAfterFetchTimeout)."""
    ctx = observer(bootstrap=True).with_elected_leader(EPOCH, LEADER).build()
    request, _ = single_fetch(ctx)
    assert request.destination == LEADER
    ctx.expire_fetch_timeout()
    request, body = single_fetch(ctx)
    assert ctx.role == "Follower" and ctx.leader_id == LEADER
    assert request.destination in BOOTSTRAP_IDS
    assert body.current_leader_epoch == EPOCH
    assert ctx.sent_requests(VoteRequest) == []
    ctx.deliver_request(
        VoteRequest(replica_epoch=EPOCH + 1, replica_id=LEADER, last_offset_epoch=0, last_offset=0),
        source=LEADER,
    )
    ctx.poll()
    response = ctx.single_sent_response(VoteResponse)
    assert isinstance(response, VoteResponse) and response.vote_granted
    assert (ctx.epoch, ctx.voted_id) == (EPOCH + 1, LEADER)
    assert ctx.leader_id is None


def test_observer_after_the_fetch_timeout_rediscovers_through_a_bootstrap_server() -> None:
    """§1.6: an observer past its fetch timeout fetches from a bootstrap server, not the leader
    (Kafka testObserverSendDiscoveryFetchAfterFetchTimeout)."""
    ctx = observer(bootstrap=True).build()
    discover_leader(ctx)
    single_fetch(ctx)  # to the leader, at once; unanswered, it times out with the fetch timeout
    ctx.expire_fetch_timeout()
    request, body = single_fetch(ctx)
    assert request.destination in BOOTSTRAP_IDS
    assert (body.current_leader_epoch, body.fetch_offset, body.last_fetched_epoch) == (EPOCH, 0, 0)
    assert ctx.role == "Follower"


def test_observer_retries_a_timed_out_leader_fetch_on_a_bootstrap_server() -> None:
    """§1.4: when the Fetch to the leader times out, the next goes to a bootstrap server; only
    one Fetch is in flight, the leader's late answer is dropped and the bootstrap server's is
    appended once (Kafka testObserverHandleRetryFetch{tToBootstrapServer,ToLeader})."""
    ctx = observer(bootstrap=True, fetch_timeout_ms=10_000).build()
    discover_leader(ctx)
    to_leader, _ = single_fetch(ctx)
    assert to_leader.destination == LEADER
    ctx.advance(ctx.config.request_timeout_ms)
    to_bootstrap, body = single_fetch(ctx)
    assert to_bootstrap.destination in BOOTSTRAP_IDS
    assert (body.current_leader_epoch, body.fetch_offset) == (EPOCH, 0)
    ctx.poll()
    assert ctx.sent_requests(FetchRequest) == []  # one Fetch in flight at a time
    batch = records(0, 3, [b"a", b"b"])
    ctx.deliver_response(to_leader, fetch_response(EPOCH, LEADER, data=batch, high_watermark=0))
    ctx.poll()
    assert ctx.log_end_offset == 0  # the timed-out request's answer is stale
    ctx.deliver_response(to_bootstrap, fetch_response(EPOCH, LEADER, data=batch, high_watermark=0))
    ctx.poll()
    assert ctx.log_end_offset == 2
    assert (ctx.role, ctx.leader_id) == ("Follower", LEADER)


def test_observer_fetches_from_another_bootstrap_server_while_the_leader_backs_off() -> None:
    """§1.3/§1.4: BROKER_NOT_AVAILABLE from the leader backs that connection off; the next
    Fetch goes to another bootstrap server (here a voter, not the leader), and a
    NOT_LEADER_OR_FOLLOWER answer naming the same leader keeps the observer following it
    (Kafka testObserverLeaderRediscoveryAfterBrokerNotAvailableError)."""
    ctx = observer().build()
    discover_leader(ctx)
    request, _ = single_fetch(ctx)
    assert request.destination == LEADER
    ctx.deliver_response(request, fetch_response(EPOCH, -1, error=Errors.BROKER_NOT_AVAILABLE))
    ctx.poll()
    request, body = single_fetch(ctx)
    assert request.destination in set(VOTERS) - {LEADER}
    assert body.current_leader_epoch == EPOCH
    ctx.deliver_response(
        request, fetch_response(EPOCH, LEADER, error=Errors.NOT_LEADER_OR_FOLLOWER)
    )
    ctx.poll()
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", EPOCH, LEADER)


def test_observer_rediscovers_the_leader_after_a_request_timeout() -> None:
    """§1.4: a Fetch to the leader that times out is retried on a bootstrap server, whose
    FENCED_LEADER_EPOCH answer naming the same leader keeps the observer following it
    (Kafka testObserverLeaderRediscoveryAfterRequestTimeout)."""
    ctx = observer(bootstrap=True, fetch_timeout_ms=10_000).build()
    discover_leader(ctx)
    request, _ = single_fetch(ctx)
    assert request.destination == LEADER
    ctx.advance(ctx.config.request_timeout_ms)
    request, body = single_fetch(ctx)
    assert request.destination in BOOTSTRAP_IDS and body.current_leader_epoch == EPOCH
    ctx.deliver_response(request, fetch_response(EPOCH, LEADER, error=Errors.FENCED_LEADER_EPOCH))
    ctx.poll()
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", EPOCH, LEADER)


# -- a voter-follower falls back on the bootstrap servers too -------------------------------------


def test_voter_follower_fetches_from_a_bootstrap_server_while_the_leader_backs_off() -> None:
    """§1.4: a voter-follower whose leader connection is backing off (BROKER_NOT_AVAILABLE)
    fetches from another bootstrap server, without leaving the Follower state."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(1, VOTERS).with_elected_leader(EPOCH, LEADER).build()
    )
    request, _ = single_fetch(ctx)
    assert request.destination == LEADER
    ctx.deliver_response(request, fetch_response(EPOCH, -1, error=Errors.BROKER_NOT_AVAILABLE))
    ctx.poll()
    request, body = single_fetch(ctx)
    assert request.destination == 3  # the one bootstrap server that is neither us nor the leader
    assert body.replica_id == 1 and body.current_leader_epoch == EPOCH
    assert (ctx.role, ctx.leader_id) == ("Follower", LEADER)


def test_voter_follower_fetches_from_a_bootstrap_server_after_a_request_timeout() -> None:
    """§1.4: a voter-follower whose Fetch to the leader timed out (before its fetch timeout)
    sends the next Fetch to a bootstrap server."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(1, VOTERS)
        .with_config(bootstrap_servers=BOOTSTRAP, fetch_timeout_ms=10_000)
        .with_elected_leader(EPOCH, LEADER)
        .build()
    )
    request, _ = single_fetch(ctx)
    assert request.destination == LEADER
    ctx.advance(ctx.config.request_timeout_ms)
    request, body = single_fetch(ctx)
    assert request.destination in BOOTSTRAP_IDS
    assert body.current_leader_epoch == EPOCH
    assert (ctx.role, ctx.leader_id) == ("Follower", LEADER)


# -- replication, flushing, shutdown, anonymity ----------------------------------------------------


@pytest.mark.parametrize("always_flush", [False, True])
def test_observer_flushes_fetched_data_only_if_configured(always_flush: bool) -> None:
    """§1.4/§1.8: an observer appends fetched records but flushes them only when
    followers_always_flush is set (Kafka testObserverReplication)."""
    ctx = observer(followers_always_flush=always_flush).with_elected_leader(EPOCH, LEADER).build()
    request, body = single_fetch(ctx)
    assert (request.destination, body.current_leader_epoch) == (LEADER, EPOCH)
    ctx.deliver_response(
        request, fetch_response(EPOCH, LEADER, data=records(0, 3, [b"a", b"b"]), high_watermark=0)
    )
    ctx.poll()
    assert ctx.log_end_offset == 2
    assert ctx.log.last_flushed_offset == (2 if always_flush else 0)


def test_voter_follower_always_flushes_fetched_data() -> None:
    """§1.4: a voter flushes what it fetched before the next fetch, whatever the config
    (Kafka testFollowerReplication), unlike an observer."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(1, VOTERS).with_elected_leader(EPOCH, LEADER).build()
    )
    request, _ = single_fetch(ctx)
    ctx.deliver_response(
        request, fetch_response(EPOCH, LEADER, data=records(0, 3, [b"a", b"b"]), high_watermark=0)
    )
    ctx.poll()
    assert ctx.log_end_offset == 2 and ctx.log.last_flushed_offset == 2


def test_observer_graceful_shutdown_completes_at_once() -> None:
    """§1.8: an observer's graceful shutdown completes on the next poll, even with no leader
    known (Kafka testObserverGracefulShutdown)."""
    ctx = observer().with_unknown_leader(EPOCH).build()
    ctx.poll()
    future = ctx.client.shutdown(5000)
    assert not future.done()
    ctx.poll()
    assert future.done() and future.result() is None
    assert ctx.client.is_shutdown


def test_anonymous_observer_fetches_with_replica_id_minus_one() -> None:
    """§1.8: a replica with no id is an anonymous observer: every Fetch carries replica id -1;
    it discovers the leader and replicates like any observer
    (Kafka testObserverFetchWithNoLocalId)."""
    ctx = observer(local_id=None, bootstrap=True).build()
    assert not ctx.client.is_voter
    request, body = single_fetch(ctx)
    assert request.destination in BOOTSTRAP_IDS
    assert (body.replica_id, body.current_leader_epoch, body.fetch_offset) == (-1, 0, 0)
    ctx.deliver_response(request, fetch_response(EPOCH, LEADER, error=Errors.FENCED_LEADER_EPOCH))
    ctx.poll()
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", EPOCH, LEADER)
    request, body = single_fetch(ctx)
    assert request.destination == LEADER
    assert (body.replica_id, body.current_leader_epoch) == (-1, EPOCH)
    ctx.deliver_response(
        request,
        fetch_response(EPOCH, LEADER, data=records(0, 3, [b"a", b"b", b"c"]), high_watermark=0),
    )
    ctx.poll()
    assert ctx.log_end_offset == 3
    assert ctx.log.last_fetched_epoch == 3
    ctx.expire_election_timeout()
    ctx.poll()
    assert ctx.role not in ELECTING_ROLES


# -- the leader's view of observers ---------------------------------------------------------------


def leader_context(**config: Any) -> RaftTestContext[bytes]:
    builder: RaftClientBuilder[bytes] = RaftClientBuilder(1, VOTERS)
    if config:
        builder.with_config(**config)
    ctx = builder.build()
    ctx.become_leader()
    ctx.sent_requests()
    return ctx


def deliver_fetch(
    ctx: RaftTestContext[bytes],
    replica_id: int,
    fetch_offset: int,
    last_epoch: int,
    directory_id: uuid.UUID | None = None,
) -> FetchResponse:
    body = FetchRequest(
        replica_id=replica_id,
        current_leader_epoch=ctx.epoch,
        fetch_offset=fetch_offset,
        last_fetched_epoch=last_epoch,
        max_wait_ms=0,
        replica_directory_id=directory_id or uuid.UUID(int=0),
    )
    ctx.deliver_request(body, source=replica_id)
    ctx.poll()
    response = ctx.single_sent_response(FetchResponse)
    assert isinstance(response, FetchResponse)
    return response


def test_observer_fetches_never_move_the_leaders_high_watermark() -> None:
    """§1.5: only voters' fetches count towards the high watermark: an observer (and an
    anonymous fetcher, replica id -1) caught up with the leader leaves it unset; one voter's
    fetch then makes the majority."""
    ctx = leader_context()
    epoch = ctx.epoch
    end = ctx.log_end_offset
    assert end == 1 and ctx.high_watermark is None  # the LeaderChange record only
    response = deliver_fetch(ctx, OBSERVER, end, epoch)
    assert response.partition_error_code == Errors.NONE
    assert response.high_watermark == -1 and ctx.high_watermark is None
    deliver_fetch(ctx, 5, end, epoch)
    deliver_fetch(ctx, -1, end, epoch)
    assert ctx.high_watermark is None
    response = deliver_fetch(ctx, 2, end, epoch)
    assert response.high_watermark == end
    assert ctx.client.high_watermark == end


def test_observer_fetches_do_not_satisfy_check_quorum() -> None:
    """§1.6: check-quorum counts fetches from voters only; a leader hearing from observers
    alone resigns when the check-quorum timeout (1.5 x fetch timeout) expires."""
    ctx = leader_context()
    epoch = ctx.epoch
    check_quorum_ms = ctx.config.fetch_timeout_ms * 3 // 2
    for _ in range(3):
        ctx.advance(check_quorum_ms // 3 - 1)
        deliver_fetch(ctx, OBSERVER, ctx.log_end_offset, epoch)
        assert ctx.role == "Leader"
    ctx.advance(3)
    ctx.poll()
    assert ctx.role == "Resigned"


def test_leader_answers_an_observer_fetch_normally() -> None:
    """§1.4: a leader serves an observer's Fetch like a voter's (records from its offset),
    it just does not count it towards the high watermark."""
    ctx = leader_context()
    response = deliver_fetch(ctx, OBSERVER, 0, 0)
    assert response.partition_error_code == Errors.NONE
    assert response.records  # the LeaderChange batch at offset 0
    assert response.current_leader == LeaderIdAndEpoch(1, ctx.epoch)


# -- end to end ------------------------------------------------------------------------------------


def test_observer_replicates_committed_records_and_never_leads() -> None:
    """§1.8 end to end: in a LocalCluster an observer (node 4) learns the leader, replicates and
    delivers committed records to its listener; cut off from every voter it never elects
    itself."""
    cluster: LocalCluster[bytes] = LocalCluster(voters=3, observers=1)
    observer_node = cluster.nodes[OBSERVER]
    assert not observer_node.is_voter
    assert cluster.run_until(lambda: cluster.leader() is not None, 30_000)
    assert cluster.append([b"x", b"y"]) is not None
    listener: RecordingListener[bytes] = cluster.listeners[OBSERVER]
    assert cluster.run_until(lambda: listener.records == [b"x", b"y"], 30_000)
    assert observer_node.leader_id == cluster.leader()
    cluster.disconnected.update(VOTERS)
    seen: set[str] = set()

    def note_role() -> bool:
        seen.add(observer_node.role)
        return False

    for _ in range(20):
        cluster.run_until(note_role, 1_000)
    assert not seen & ELECTING_ROLES
    assert observer_node.role == "Follower"
