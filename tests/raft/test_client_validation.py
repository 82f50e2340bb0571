"""Validation common to every RPC, and the common handling of responses (docs/protocol.md §1.3).

Requests: a cluster id that is not ours gets a top-level INCONSISTENT_CLUSTER_ID whatever the
request, and nothing changes; a missing (None) cluster id is accepted, an empty one is not. A
wrong topic-partition gets INVALID_REQUEST (UNKNOWN_TOPIC_OR_PARTITION for DescribeQuorum and
FetchSnapshot). FetchSnapshot gets leader-only validation and then, snapshots not being
implemented yet, SNAPSHOT_NOT_FOUND.

Responses: dropped unless they answer the request in flight to their source (correlation id,
source, API), which every transition forgets. A higher epoch naming a leader makes the replica
its Follower, one naming none makes it Unattached; a same-epoch response naming a leader it did
not know makes it a Follower and, if NONE, is still handled; an older epoch or
UNKNOWN_LEADER_EPOCH is ignored; BROKER_NOT_AVAILABLE backs the destination off for
retry_backoff_ms.

Scenarios mirror Kafka's ``KafkaRaftClientTest`` (test{Fetch,Vote,BeginQuorumEpoch,
EndQuorumEpoch}RequestClusterIdValidation, testFetchResponseIgnoredAfterBecomingCandidate,
testFetchResponseIgnoredAfterBecomingFollowerOfDifferentLeader,
testVoteResponseIgnoredAfterBecomingFollower).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kraft.protocol.envelope import OutboundRequest
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    RESPONSE_TYPE_FOR,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    Endpoint,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    Request,
    Response,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.channel import DequeMessageQueue
from kraft.record.batch import encode_batch
from kraft.testing import RaftClientBuilder, RaftTestContext

LOCAL = 1
VOTERS = (1, 2, 3)
EPOCH = 5
LEADER = 2
CLUSTER_ID = "cluster-a"


def endpoint(node: int) -> tuple[Endpoint, ...]:
    return (Endpoint("CONTROLLER", "localhost", 9990 + node),)


def records(base_offset: int, epoch: int, values: list[bytes]) -> bytes:
    return encode_batch(base_offset, epoch, values, timestamp_ms=1_700_000_000_000)


def follower(voters: tuple[int, ...] = VOTERS, **config: Any) -> RaftTestContext[bytes]:
    """Voter 1 following voter 2 in epoch 5, cluster id "cluster-a"."""
    builder: RaftClientBuilder[bytes] = RaftClientBuilder(LOCAL, voters)
    builder.with_cluster_id(CLUSTER_ID).with_elected_leader(EPOCH, LEADER)
    if config:
        builder.with_config(**config)
    return builder.build()


def leader() -> RaftTestContext[bytes]:
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS).with_cluster_id(CLUSTER_ID).build()
    )
    ctx.become_leader()
    ctx.sent_requests()
    return ctx


def snapshot(ctx: RaftTestContext[bytes]) -> tuple[object, ...]:
    """Everything a request could change on a replica."""
    return (
        ctx.role,
        ctx.epoch,
        ctx.leader_id,
        ctx.voted_id,
        ctx.stored_state(),
        ctx.log_end_offset,
        ctx.high_watermark,
    )


def respond(
    ctx: RaftTestContext[bytes], body: Request, cluster_id: str | None = None, source: int = 3
) -> Any:  # the answer to a partition request: it has a partition_error_code
    correlation_id = ctx.deliver_request(body, source=source, cluster_id=cluster_id)
    ctx.poll()
    sent = ctx.sent_responses()
    assert len(sent) == 1, sent
    assert (sent[0].correlation_id, sent[0].destination) == (correlation_id, source)
    assert isinstance(sent[0].body, RESPONSE_TYPE_FOR[type(body)])
    return sent[0].body


def retarget(body: Request, **fields: Any) -> Request:
    """``body`` with some fields replaced."""
    data = {name: getattr(body, name) for name in body.__struct_fields__}
    data.update(fields)
    return type(body)(**data)


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


def fetch_in_flight(ctx: RaftTestContext[bytes]) -> OutboundRequest:
    ctx.poll()
    request, _ = ctx.single_sent_request(FetchRequest)
    return request


def prospective() -> tuple[RaftTestContext[bytes], list[OutboundRequest]]:
    """Voter 1, Unattached in epoch 5, after its election timeout: Prospective, pre-votes sent
    to voters 2 and 3."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS).with_unknown_leader(EPOCH).build()
    )
    ctx.expire_election_timeout()
    ctx.poll()
    ctx.poll()
    assert ctx.role == "Prospective"
    votes = sorted(ctx.sent_requests(VoteRequest), key=lambda v: v.destination)
    assert [v.destination for v in votes] == [2, 3]
    assert all(isinstance(v.body, VoteRequest) and v.body.pre_vote for v in votes)
    return ctx, votes


# -- requests that would change the state of a follower of 2 in epoch 5 --------------------------

# Each request, and what accepting it does to voter 1 (following 2 in epoch 5).
REQUESTS: dict[str, tuple[Request, tuple[str, int, int | None, int | None]]] = {
    "vote": (
        VoteRequest(replica_epoch=EPOCH + 1, replica_id=3, last_offset_epoch=0, last_offset=0),
        ("Voted", EPOCH + 1, None, 3),
    ),
    "begin_quorum_epoch": (
        BeginQuorumEpochRequest(
            leader_id=3, leader_epoch=EPOCH + 1, voter_id=LOCAL, leader_endpoints=endpoint(3)
        ),
        ("Follower", EPOCH + 1, 3, None),
    ),
    "end_quorum_epoch": (
        EndQuorumEpochRequest(leader_id=3, leader_epoch=EPOCH + 1, leader_endpoints=endpoint(3)),
        ("Follower", EPOCH + 1, 3, None),
    ),
    "fetch": (
        FetchRequest(
            replica_id=3,
            current_leader_epoch=EPOCH,
            fetch_offset=0,
            last_fetched_epoch=0,
            max_wait_ms=0,
        ),
        ("Follower", EPOCH, LEADER, None),
    ),
    "fetch_snapshot": (
        FetchSnapshotRequest(
            replica_id=3, current_leader_epoch=EPOCH, snapshot_id=SnapshotId(10, 3), position=0
        ),
        ("Follower", EPOCH, LEADER, None),
    ),
    "describe_quorum": (DescribeQuorumRequest(), ("Follower", EPOCH, LEADER, None)),
}


@pytest.mark.parametrize("cluster_id", ["cluster-b", ""])
@pytest.mark.parametrize("kind", list(REQUESTS))
def test_foreign_or_empty_cluster_id_is_rejected_and_changes_nothing(
    kind: str, cluster_id: str
) -> None:
    """§1.2/§1.3: a request carrying another cluster id, or an empty one, gets a top-level
    INCONSISTENT_CLUSTER_ID, whatever the request type, and nothing changes (Kafka
    test*RequestClusterIdValidation)."""
    ctx = follower()
    before = snapshot(ctx)
    request, _ = REQUESTS[kind]
    response = respond(ctx, request, cluster_id=cluster_id)
    assert response.error_code == Errors.INCONSISTENT_CLUSTER_ID
    assert snapshot(ctx) == before


@pytest.mark.parametrize("kind", list(REQUESTS))
def test_cluster_id_is_checked_before_anything_else(kind: str) -> None:
    """§1.2 check 1: the cluster id comes first: a request with a foreign cluster id *and* a
    wrong topic gets INCONSISTENT_CLUSTER_ID, not the topic error."""
    ctx = follower()
    request = retarget(REQUESTS[kind][0], topic_name="other-topic")
    response = respond(ctx, request, cluster_id="cluster-b")
    assert response.error_code == Errors.INCONSISTENT_CLUSTER_ID
    assert response.partition_error_code == Errors.NONE


@pytest.mark.parametrize("cluster_id", [None, CLUSTER_ID])
@pytest.mark.parametrize("kind", list(REQUESTS))
def test_missing_or_matching_cluster_id_is_accepted(kind: str, cluster_id: str | None) -> None:
    """§1.2/§1.3: a request without a cluster id (None), or with ours, is handled as usual."""
    ctx = follower()
    request, expected = REQUESTS[kind]
    response = respond(ctx, request, cluster_id=cluster_id)
    assert response.error_code == Errors.NONE
    assert (ctx.role, ctx.epoch, ctx.leader_id, ctx.voted_id) == expected


def test_fetch_with_a_foreign_cluster_id_does_not_advance_the_leaders_high_watermark() -> None:
    """§1.3: a voter's Fetch with another cluster id is refused before the leader looks at it:
    it neither moves the high watermark nor counts for check-quorum; the same Fetch without a
    cluster id does."""
    ctx = leader()
    body = FetchRequest(
        replica_id=2,
        current_leader_epoch=ctx.epoch,
        fetch_offset=1,
        last_fetched_epoch=ctx.epoch,
        max_wait_ms=0,
    )
    check_quorum_ms = ctx.config.fetch_timeout_ms * 3 // 2
    ctx.advance(check_quorum_ms - 1)
    response = respond(ctx, body, cluster_id="cluster-b", source=2)
    assert response.error_code == Errors.INCONSISTENT_CLUSTER_ID
    assert ctx.high_watermark is None
    ctx.advance(1)
    ctx.poll()
    assert ctx.role == "Resigned"  # the refused fetch did not count for check-quorum

    ctx = leader()
    response = respond(ctx, body, cluster_id=None, source=2)
    assert response.error_code == Errors.NONE
    assert ctx.high_watermark == 1


# -- wrong topic-partition ------------------------------------------------------------------------


WRONG_PARTITIONS = [
    pytest.param({"topic_name": "other-topic"}, id="topic"),
    pytest.param({"partition_index": 1}, id="partition"),
]


@pytest.mark.parametrize("wrong", WRONG_PARTITIONS)
@pytest.mark.parametrize("kind", ["vote", "begin_quorum_epoch", "end_quorum_epoch", "fetch"])
def test_wrong_topic_partition_is_an_invalid_request(kind: str, wrong: dict[str, Any]) -> None:
    """§1.2/§1.3: Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch for another topic or
    partition get INVALID_REQUEST, and nothing changes."""
    ctx = follower()
    before = snapshot(ctx)
    response = respond(ctx, retarget(REQUESTS[kind][0], **wrong))
    assert Errors.INVALID_REQUEST in (response.error_code, response.partition_error_code)
    assert snapshot(ctx) == before


@pytest.mark.parametrize("wrong", WRONG_PARTITIONS)
@pytest.mark.parametrize("kind", ["fetch_snapshot", "describe_quorum"])
def test_wrong_topic_partition_is_unknown_for_describe_quorum_and_fetch_snapshot(
    kind: str, wrong: dict[str, Any]
) -> None:
    """§1.3: DescribeQuorum and FetchSnapshot for another topic or partition get
    UNKNOWN_TOPIC_OR_PARTITION, even on the leader."""
    ctx = leader()
    request = REQUESTS[kind][0]
    if isinstance(request, FetchSnapshotRequest):
        request = retarget(request, current_leader_epoch=ctx.epoch)
    before = snapshot(ctx)
    response = respond(ctx, retarget(request, **wrong))
    assert response.partition_error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert snapshot(ctx) == before


def test_fetch_with_a_foreign_topic_id_is_an_invalid_request() -> None:
    """§1.3: a Fetch naming another topic id is INVALID_REQUEST on the leader (the metadata
    topic id, or none, is accepted)."""
    ctx = leader()
    body = FetchRequest(
        replica_id=2,
        current_leader_epoch=ctx.epoch,
        fetch_offset=1,
        last_fetched_epoch=ctx.epoch,
        max_wait_ms=0,
        topic_id=uuid.uuid4(),
    )
    response = respond(ctx, body, source=2)
    assert Errors.INVALID_REQUEST in (response.error_code, response.partition_error_code)
    assert ctx.high_watermark is None
    response = respond(ctx, retarget(body, topic_id=uuid.UUID(int=0)), source=2)
    assert response.error_code == response.partition_error_code == Errors.NONE
    assert ctx.high_watermark == 1


# -- FetchSnapshot: leader-only validation, then no snapshot ------------------------------------


UNKNOWN_SNAPSHOT = SnapshotId(1, 1)


def fetch_snapshot(epoch: int, snapshot_id: SnapshotId = UNKNOWN_SNAPSHOT) -> FetchSnapshotRequest:
    return FetchSnapshotRequest(
        replica_id=2, current_leader_epoch=epoch, snapshot_id=snapshot_id, position=0
    )


@pytest.mark.parametrize(
    "snapshot_id", [UNKNOWN_SNAPSHOT, SnapshotId(0, 0)], ids=["unknown", "bootstrap"]
)
def test_leader_answers_fetch_snapshot_with_snapshot_not_found(snapshot_id: SnapshotId) -> None:
    """§1.3: a valid FetchSnapshot for a snapshot the leader does not hold (it has none here),
    or for the bootstrap id (0,0), gets SNAPSHOT_NOT_FOUND, naming the current leader."""
    ctx = leader()
    response = respond(ctx, fetch_snapshot(ctx.epoch, snapshot_id), source=2)
    assert isinstance(response, FetchSnapshotResponse)
    assert response.error_code == Errors.NONE
    assert response.partition_error_code == Errors.SNAPSHOT_NOT_FOUND
    assert response.current_leader == LeaderIdAndEpoch(LOCAL, ctx.epoch)
    assert response.unaligned_records == b""


@pytest.mark.parametrize(
    ("delta", "error"),
    [
        (-1, Errors.FENCED_LEADER_EPOCH),
        (+1, Errors.UNKNOWN_LEADER_EPOCH),
    ],
)
def test_fetch_snapshot_with_a_wrong_epoch(delta: int, error: Errors) -> None:
    """§1.3 leader-only validation: an older epoch is FENCED_LEADER_EPOCH, a newer one
    UNKNOWN_LEADER_EPOCH; the leader stays leader."""
    ctx = leader()
    epoch = ctx.epoch
    response = respond(ctx, fetch_snapshot(epoch + delta), source=2)
    assert response.partition_error_code == error
    assert isinstance(response, FetchSnapshotResponse)
    assert response.current_leader == LeaderIdAndEpoch(LOCAL, epoch)
    assert (ctx.role, ctx.epoch) == ("Leader", epoch)


def test_fetch_snapshot_to_a_follower_is_not_leader_or_follower() -> None:
    """§1.3 leader-only validation: a replica that is not the leader answers
    NOT_LEADER_OR_FOLLOWER, naming the leader it knows."""
    ctx = follower()
    before = snapshot(ctx)
    response = respond(ctx, fetch_snapshot(EPOCH))
    assert isinstance(response, FetchSnapshotResponse)
    assert response.partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert response.current_leader == LeaderIdAndEpoch(LEADER, EPOCH)
    assert snapshot(ctx) == before


class ShutdownWhileWaiting(DequeMessageQueue):
    """A queue that begins the client's shutdown when polled: as if another thread called
    ``shutdown()`` while the client was waiting for its next message."""

    __slots__ = ("shutdown",)

    def __init__(self, shutdown: Callable[[], object]) -> None:
        super().__init__()
        self.shutdown = shutdown

    def poll(self, timeout_ms: int) -> Any:
        self.shutdown()
        return super().poll(timeout_ms)


@pytest.mark.parametrize("kind", ["fetch", "fetch_snapshot"])
def test_leader_shutting_down_answers_broker_not_available(kind: str) -> None:
    """§1.3 leader-only validation: a leader that is shutting down answers Fetch and
    FetchSnapshot with BROKER_NOT_AVAILABLE."""
    ctx = leader()
    epoch = ctx.epoch
    queue = ShutdownWhileWaiting(lambda: ctx.client.shutdown(5000))
    ctx.client.queue = queue
    ctx.queue = queue
    body: Request = (
        fetch_snapshot(epoch)
        if kind == "fetch_snapshot"
        else FetchRequest(
            replica_id=2,
            current_leader_epoch=epoch,
            fetch_offset=1,
            last_fetched_epoch=epoch,
            max_wait_ms=0,
        )
    )
    response = respond(ctx, body, source=2)
    assert response.partition_error_code == Errors.BROKER_NOT_AVAILABLE
    assert ctx.high_watermark is None


# -- responses that do not answer the request in flight are dropped -------------------------------


def test_response_with_another_correlation_id_is_dropped() -> None:
    """§1.3: a response counts only if its correlation id is the request's in flight."""
    ctx = follower()
    request = fetch_in_flight(ctx)
    body = fetch_response(EPOCH, LEADER, data=records(0, 3, [b"a", b"b"]), high_watermark=0)
    ctx.deliver_response(request.correlation_id + 100, body, source=LEADER)
    ctx.poll()
    assert ctx.log_end_offset == 0
    ctx.deliver_response(request, body)
    ctx.poll()
    assert ctx.log_end_offset == 2


def test_response_from_another_source_is_dropped() -> None:
    """§1.3: a response counts only if it comes from the destination of the request."""
    ctx = follower()
    request = fetch_in_flight(ctx)
    body = fetch_response(EPOCH, LEADER, data=records(0, 3, [b"a", b"b"]), high_watermark=0)
    ctx.deliver_response(request.correlation_id, body, source=3)
    ctx.poll()
    assert ctx.log_end_offset == 0
    ctx.deliver_response(request, body)
    ctx.poll()
    assert ctx.log_end_offset == 2


@pytest.mark.parametrize(
    "other",
    [
        VoteResponse(leader_id=3, leader_epoch=EPOCH + 1),
        BeginQuorumEpochResponse(leader_id=3, leader_epoch=EPOCH + 1),
        EndQuorumEpochResponse(leader_id=3, leader_epoch=EPOCH + 1),
        FetchSnapshotResponse(current_leader=LeaderIdAndEpoch(3, EPOCH + 1)),
        DescribeQuorumResponse(leader_id=3, leader_epoch=EPOCH + 1),
    ],
    ids=lambda r: type(r).__name__,
)
def test_response_of_another_api_is_dropped(other: Response) -> None:
    """§1.3: a response of another API type, even with the right correlation id and source, is
    not the answer to the Fetch in flight: dropped, and the Fetch's own answer still counts."""
    ctx = follower()
    request = fetch_in_flight(ctx)
    before = snapshot(ctx)
    ctx.deliver_response(request, other)
    ctx.poll()
    assert snapshot(ctx) == before
    assert ctx.sent_requests(FetchRequest) == []  # the Fetch is still in flight
    ctx.deliver_response(
        request, fetch_response(EPOCH, LEADER, data=records(0, 3, [b"a", b"b"]), high_watermark=0)
    )
    ctx.poll()
    assert ctx.log_end_offset == 2


def test_second_answer_to_an_answered_request_is_dropped() -> None:
    """§1.3: once a request is answered, another response with its correlation id is stale."""
    ctx = follower()
    request = fetch_in_flight(ctx)
    ctx.deliver_response(request, fetch_response(EPOCH, LEADER, high_watermark=0))
    ctx.poll()
    ctx.deliver_response(request, fetch_response(EPOCH + 1, 3, data=records(0, 3, [b"a"])))
    ctx.poll()
    assert (ctx.role, ctx.epoch, ctx.leader_id, ctx.log_end_offset) == (
        "Follower",
        EPOCH,
        LEADER,
        0,
    )


def test_fetch_response_is_dropped_after_the_fetch_timeout_transition() -> None:
    """§1.3: every transition forgets the requests in flight: the old leader's Fetch answer,
    arriving after the follower went Prospective, is ignored (Kafka
    testFetchResponseIgnoredAfterBecomingCandidate; kraft goes through Prospective)."""
    ctx = follower(voters=(1, 2))
    request = fetch_in_flight(ctx)
    ctx.expire_fetch_timeout()
    ctx.poll()
    assert ctx.role == "Prospective"
    ctx.deliver_response(
        request, fetch_response(EPOCH, LEADER, data=records(0, 3, [b"a", b"b"]), high_watermark=0)
    )
    ctx.poll()
    assert ctx.log_end_offset == 0
    assert (ctx.role, ctx.epoch) == ("Prospective", EPOCH)


def test_fetch_response_is_dropped_after_following_another_leader() -> None:
    """§1.3: after BeginQuorumEpoch from a new leader, the old leader's Fetch answer is ignored
    (Kafka testFetchResponseIgnoredAfterBecomingFollowerOfDifferentLeader)."""
    ctx = follower()
    request = fetch_in_flight(ctx)
    ctx.deliver_request(
        BeginQuorumEpochRequest(leader_id=3, leader_epoch=EPOCH + 1, leader_endpoints=endpoint(3)),
        source=3,
    )
    ctx.poll()
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", EPOCH + 1, 3)
    ctx.deliver_response(
        request, fetch_response(EPOCH, LEADER, data=records(0, 3, [b"a", b"b"]), high_watermark=0)
    )
    ctx.poll()
    assert ctx.log_end_offset == 0
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", EPOCH + 1, 3)


def test_vote_responses_are_dropped_after_becoming_follower() -> None:
    """§1.3: pre-vote answers arriving after a BeginQuorumEpoch made the replica a Follower are
    ignored (Kafka testVoteResponseIgnoredAfterBecomingFollower)."""
    ctx, votes = prospective()
    ctx.deliver_request(
        BeginQuorumEpochRequest(leader_id=3, leader_epoch=EPOCH, leader_endpoints=endpoint(3)),
        source=3,
    )
    ctx.poll()
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", EPOCH, 3)
    # Handled, the first would make voter 2 our leader in a later epoch.
    ctx.deliver_response(votes[0], VoteResponse(leader_id=2, leader_epoch=EPOCH + 1))
    ctx.deliver_response(votes[1], VoteResponse(leader_id=3, leader_epoch=EPOCH, vote_granted=True))
    ctx.poll_until_idle()
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", EPOCH, 3)


# -- common response handling ---------------------------------------------------------------------


def test_higher_epoch_response_naming_a_leader_makes_a_follower() -> None:
    """§1.3: a response from a higher epoch that names a leader makes the replica its Follower;
    the response itself is not otherwise handled (its records are not appended)."""
    ctx = follower()
    request = fetch_in_flight(ctx)
    ctx.deliver_response(
        request, fetch_response(EPOCH + 1, 3, data=records(0, 3, [b"a"]), high_watermark=0)
    )
    ctx.poll()
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", EPOCH + 1, 3)
    assert ctx.log_end_offset == 0
    request = fetch_in_flight(ctx)
    assert request.destination == 3


def test_higher_epoch_response_without_a_leader_makes_unattached() -> None:
    """§1.3: a response from a higher epoch naming no leader makes the replica Unattached in
    that epoch."""
    ctx = follower()
    request = fetch_in_flight(ctx)
    ctx.deliver_response(request, fetch_response(EPOCH + 1, -1, error=Errors.FENCED_LEADER_EPOCH))
    ctx.poll()
    assert (ctx.role, ctx.epoch, ctx.leader_id, ctx.voted_id) == (
        "Unattached",
        EPOCH + 1,
        None,
        None,
    )


def test_higher_epoch_vote_response_naming_a_leader_makes_a_follower() -> None:
    """§1.3: the same rule for a Vote response: a Prospective replica told of a leader in a
    higher epoch follows it."""
    ctx, votes = prospective()
    vote = votes[0]
    ctx.deliver_response(vote, VoteResponse(leader_id=vote.destination, leader_epoch=EPOCH + 2))
    ctx.poll()
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", EPOCH + 2, vote.destination)


@pytest.mark.parametrize("state", ["Prospective", "Candidate"])
def test_same_epoch_vote_response_naming_a_new_leader_makes_a_follower(state: str) -> None:
    """§1.3: a same-epoch response naming a leader the replica did not know makes it that
    leader's Follower (a Candidate keeps its own vote)."""
    if state == "Candidate":
        ctx: RaftTestContext[bytes] = (
            RaftClientBuilder(LOCAL, VOTERS).with_voted_candidate(EPOCH, LOCAL).build()
        )
        ctx.poll()
        assert ctx.role == "Candidate"
        vote = ctx.sent_requests(VoteRequest)[0]
    else:
        ctx, votes = prospective()
        vote = votes[0]
    ctx.deliver_response(vote, VoteResponse(leader_id=3, leader_epoch=EPOCH, vote_granted=False))
    ctx.poll()
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", EPOCH, 3)
    assert ctx.voted_id == (LOCAL if state == "Candidate" else None)


@pytest.mark.parametrize(
    ("epoch", "error"),
    [
        (EPOCH - 1, Errors.NOT_LEADER_OR_FOLLOWER),
        (EPOCH - 1, Errors.NONE),
        (EPOCH, Errors.UNKNOWN_LEADER_EPOCH),
    ],
    ids=["older-epoch-error", "older-epoch-none", "unknown-leader-epoch"],
)
def test_stale_epoch_responses_are_ignored(epoch: int, error: Errors) -> None:
    """§1.3: a response from an older epoch, or UNKNOWN_LEADER_EPOCH, is no longer relevant:
    nothing changes, nothing from it is appended, and the next Fetch is not delayed."""
    ctx = follower()
    request = fetch_in_flight(ctx)
    before = snapshot(ctx)
    ctx.deliver_response(
        request, fetch_response(epoch, 3, error=error, data=records(0, 3, [b"a"]), high_watermark=0)
    )
    ctx.poll()
    assert snapshot(ctx) == before
    request = fetch_in_flight(ctx)
    assert request.destination == LEADER


def test_same_epoch_response_naming_another_leader_is_refused() -> None:
    """§1.3, kraft: a response naming a different leader for the epoch the replica already
    knows a leader of is inconsistent; Kafka throws, kraft drops it and keeps its state."""
    ctx = follower()
    request = fetch_in_flight(ctx)
    before = snapshot(ctx)
    ctx.deliver_response(
        request, fetch_response(EPOCH, 3, data=records(0, 3, [b"a"]), high_watermark=0)
    )
    ctx.poll()
    assert snapshot(ctx) == before


@pytest.mark.parametrize("level", ["partition", "top"])
def test_broker_not_available_backs_the_fetch_off(level: str) -> None:
    """§1.3: BROKER_NOT_AVAILABLE (top-level or in the partition) backs the destination off
    for retry_backoff_ms before the next request to it."""
    ctx = follower(voters=(1, 2))  # the leader is the only other node to fetch from
    request = fetch_in_flight(ctx)
    body = (
        fetch_response(EPOCH, -1, error=Errors.BROKER_NOT_AVAILABLE)
        if level == "partition"
        else FetchResponse(error_code=Errors.BROKER_NOT_AVAILABLE)
    )
    ctx.deliver_response(request, body)
    ctx.poll()
    assert ctx.sent_requests(FetchRequest) == []
    ctx.advance(ctx.config.retry_backoff_ms - 1)
    ctx.poll()
    assert ctx.sent_requests(FetchRequest) == []
    ctx.advance(1)
    request = fetch_in_flight(ctx)
    assert request.destination == LEADER
    assert (ctx.role, ctx.epoch, ctx.leader_id) == ("Follower", EPOCH, LEADER)


def test_broker_not_available_backs_a_vote_request_off() -> None:
    """§1.3: the same backoff applies to a (pre-)vote: the voter that answered
    BROKER_NOT_AVAILABLE is asked again only after retry_backoff_ms."""
    ctx, votes = prospective()
    ctx.deliver_response(
        votes[0], VoteResponse(partition_error_code=Errors.BROKER_NOT_AVAILABLE, leader_epoch=EPOCH)
    )
    ctx.poll()
    ctx.advance(ctx.config.retry_backoff_ms - 1)
    ctx.poll()
    assert ctx.sent_requests(VoteRequest) == []
    ctx.advance(1)
    ctx.poll()
    again = ctx.sent_requests(VoteRequest)
    assert [v.destination for v in again] == [2]
    assert isinstance(again[0].body, VoteRequest) and again[0].body.pre_vote
    assert ctx.role == "Prospective"
