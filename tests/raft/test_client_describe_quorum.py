"""DescribeQuorum (docs/protocol.md §1.3 DescribeQuorum row, KIP-836, KIP-853).

A replica that is not the leader answers NOT_LEADER_OR_FOLLOWER. The leader answers with its
high watermark (-1 while unknown), every voter and every observer seen in the last five
minutes, each with its log end offset and its last fetch and last caught-up times in the
leader's wall clock (-1 when unknown), and the voters' endpoints. A request for another
topic-partition gets UNKNOWN_TOPIC_OR_PARTITION.

Scenarios mirror Kafka's ``KafkaRaftClientTest`` (testDescribeQuorumNonLeader,
testDescribeQuorumWithOnlyStaticVoters, testDescribeQuorumWithFollowers,
testDescribeQuorumWithObserver, testDescribeQuorumNonMonotonicFollowerFetch). Time stamps are
``ManualClock.wall_ms()`` at the moment of the fetch.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kraft.common.uuids import ZERO_UUID
from kraft.log.quorum_state import ElectionState
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    DescribeQuorumNode,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    Endpoint,
    FetchRequest,
    FetchResponse,
    ReplicaState,
)
from kraft.raft.leader import OBSERVER_SESSION_TIMEOUT_MS
from kraft.testing import RaftClientBuilder, RaftTestContext

LOCAL = 1
VOTERS = (1, 2, 3)
OBSERVER = 4


def leader(voters: tuple[int, ...] = VOTERS, **config: Any) -> RaftTestContext[bytes]:
    """Voter 1 elected leader; appends drain on the next poll (no linger)."""
    builder: RaftClientBuilder[bytes] = RaftClientBuilder(LOCAL, voters)
    builder.with_config(append_linger_ms=0, **config)
    ctx = builder.build()
    ctx.become_leader()
    ctx.sent_requests()
    return ctx


def describe(ctx: RaftTestContext[bytes]) -> DescribeQuorumResponse:
    ctx.deliver_request(DescribeQuorumRequest(), source=-1)
    ctx.poll()
    response = ctx.single_sent_response(DescribeQuorumResponse)
    assert isinstance(response, DescribeQuorumResponse)
    return response


def fetch(
    ctx: RaftTestContext[bytes],
    replica_id: int,
    fetch_offset: int,
    last_epoch: int,
    directory_id: uuid.UUID = ZERO_UUID,
) -> FetchResponse:
    ctx.deliver_request(
        FetchRequest(
            replica_id=replica_id,
            current_leader_epoch=ctx.epoch,
            fetch_offset=fetch_offset,
            last_fetched_epoch=last_epoch,
            max_wait_ms=0,
            replica_directory_id=directory_id,
        ),
        source=replica_id,
    )
    ctx.poll()
    response = ctx.single_sent_response(FetchResponse)
    assert isinstance(response, FetchResponse)
    assert response.partition_error_code == Errors.NONE
    return response


def append(ctx: RaftTestContext[bytes], values: list[bytes]) -> None:
    ctx.client.prepare_append(ctx.epoch, values)
    ctx.client.schedule_prepared_append()
    ctx.poll()


def voter(
    replica_id: int, end: int = -1, fetch_ms: int = -1, caught_up_ms: int = -1
) -> ReplicaState:
    return ReplicaState(replica_id, ZERO_UUID, end, fetch_ms, caught_up_ms)


# -- not the leader -------------------------------------------------------------------------------


@pytest.mark.parametrize("situation", ["unattached", "voted", "follower", "observer"])
def test_non_leader_answers_not_leader_or_follower(situation: str) -> None:
    """§1.3: a replica that is not the leader answers DescribeQuorum with NOT_LEADER_OR_FOLLOWER
    and no quorum description, and its state does not change (Kafka
    testDescribeQuorumNonLeader)."""
    builder: RaftClientBuilder[bytes] = RaftClientBuilder(
        OBSERVER if situation == "observer" else LOCAL, VOTERS
    )
    if situation == "unattached":
        builder.with_unknown_leader(2)
    elif situation == "voted":
        builder.with_voted_candidate(2, 3)
    else:
        builder.with_elected_leader(2, 3)
    ctx = builder.build()
    before = (ctx.role, ctx.epoch, ctx.leader_id, ctx.voted_id, ctx.stored_state())
    response = describe(ctx)
    assert response.error_code == Errors.NONE
    assert response.partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert response.current_voters == () and response.observers == ()
    assert (ctx.role, ctx.epoch, ctx.leader_id, ctx.voted_id, ctx.stored_state()) == before


def test_prospective_and_candidate_answer_not_leader_or_follower() -> None:
    """§1.3: a voter standing for election (Prospective, Candidate) is not the leader either."""
    prospective: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS).with_unknown_leader(2).build()
    )
    prospective.expire_election_timeout()
    prospective.poll()
    assert prospective.role == "Prospective"
    assert describe(prospective).partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert prospective.role == "Prospective"
    candidate: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS).with_voted_candidate(3, LOCAL).build()
    )
    assert candidate.role == "Candidate"
    assert describe(candidate).partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert (candidate.role, candidate.epoch) == ("Candidate", 3)


def test_leader_that_lost_check_quorum_answers_not_leader_or_follower() -> None:
    """§1.3/§1.6: once the leader resigns (check-quorum expired) it answers
    NOT_LEADER_OR_FOLLOWER."""
    ctx = leader()
    assert describe(ctx).partition_error_code == Errors.NONE
    ctx.advance(ctx.config.fetch_timeout_ms * 3 // 2)
    response = describe(ctx)
    assert ctx.role == "Resigned"
    assert response.partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert response.current_voters == ()


def test_wrong_topic_partition_is_unknown_topic_or_partition() -> None:
    """§1.3 validation: DescribeQuorum for another topic or partition gets
    UNKNOWN_TOPIC_OR_PARTITION, even from the leader."""
    ctx = leader()
    for request in (
        DescribeQuorumRequest(topic_name="other"),
        DescribeQuorumRequest(partition_index=1),
    ):
        ctx.deliver_request(request, source=-1)
        ctx.poll()
        response = ctx.single_sent_response(DescribeQuorumResponse)
        assert isinstance(response, DescribeQuorumResponse)
        assert response.partition_error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
        assert response.current_voters == ()
    assert ctx.role == "Leader"


# -- the leader's description -------------------------------------------------------------------


def test_new_leader_describes_static_voters_and_their_endpoints() -> None:
    """§1.3: a newly elected leader reports no high watermark (-1), itself with its end offset
    and the current wall time, the other voters with -1 everywhere, no observers, and every
    voter's endpoint (Kafka testDescribeQuorumWithOnlyStaticVoters)."""
    ctx = leader()
    now = ctx.clock.wall_ms()
    response = describe(ctx)
    assert response.error_code == Errors.NONE
    assert response.partition_error_code == Errors.NONE
    assert (response.leader_id, response.leader_epoch) == (LOCAL, ctx.epoch)
    assert response.high_watermark == -1
    assert response.current_voters == (voter(1, 1, now, now), voter(2), voter(3))
    assert response.observers == ()
    assert response.nodes == tuple(
        DescribeQuorumNode(v, (Endpoint("CONTROLLER", "localhost", 9990 + v),)) for v in VOTERS
    )


def test_static_voters_are_described_without_directory_ids() -> None:
    """§1.8/§1.3: in a static voter set (kraft.version 0) voters have no directory id, so
    DescribeQuorum reports ZERO for every voter, the leader included, even when the leader
    knows its own directory id (Kafka testDescribeQuorumWithOnlyStaticVoters: "Describe quorum
    response will not include directory ids")."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS).with_local_directory_id(uuid.uuid4()).build()
    )
    ctx.become_leader()
    response = describe(ctx)
    assert [v.replica_directory_id for v in response.current_voters] == [ZERO_UUID] * 3


def test_leader_describes_followers_progress() -> None:
    """§1.3/§1.5: each follower's fetch sets its end offset and fetch/caught-up times; the
    high watermark follows the majority; the leader's own entry shows its end offset and the
    current time (Kafka testDescribeQuorumWithFollowers)."""
    ctx = leader()
    epoch = ctx.epoch
    ctx.advance(100)
    follower_fetch_1 = ctx.clock.wall_ms()
    assert fetch(ctx, 2, 1, epoch).high_watermark == 1
    append(ctx, [b"foo", b"bar"])
    assert ctx.log_end_offset == 3

    ctx.advance(100)
    now = ctx.clock.wall_ms()
    response = describe(ctx)
    assert response.high_watermark == 1
    assert response.current_voters == (
        voter(1, 3, now, now),
        voter(2, 1, follower_fetch_1, follower_fetch_1),
        voter(3),
    )

    ctx.advance(100)
    follower_fetch_2 = ctx.clock.wall_ms()
    assert fetch(ctx, 3, 3, epoch).high_watermark == 3
    ctx.advance(100)
    now = ctx.clock.wall_ms()
    response = describe(ctx)
    assert response.high_watermark == 3
    assert response.current_voters == (
        voter(1, 3, now, now),
        voter(2, 1, follower_fetch_1, follower_fetch_1),
        voter(3, 3, follower_fetch_2, follower_fetch_2),
    )
    assert response.observers == ()


def test_caught_up_time_is_the_last_fetch_that_reached_the_leaders_end() -> None:
    """§1.3 (KIP-836): a fetch at the leader's end offset is caught up now; a fetch behind it
    that reaches what the leader's end was at the replica's previous fetch is caught up as of
    that previous fetch; otherwise the caught-up time stays."""
    ctx = leader()
    epoch = ctx.epoch
    ctx.advance(100)
    t1 = ctx.clock.wall_ms()
    fetch(ctx, 2, 1, epoch)  # leader end 1: caught up at t1
    append(ctx, [b"a", b"b"])  # leader end 3
    ctx.advance(100)
    t2 = ctx.clock.wall_ms()
    fetch(ctx, 2, 1, epoch)  # behind; reached the end seen at t1 (1): caught up as of t1
    assert describe(ctx).current_voters[1] == voter(2, 1, t2, t1)
    append(ctx, [b"c", b"d"])  # leader end 5
    ctx.advance(100)
    t3 = ctx.clock.wall_ms()
    fetch(ctx, 2, 3, epoch)  # behind; reached the end seen at t2 (3): caught up as of t2
    assert describe(ctx).current_voters[1] == voter(2, 3, t3, t2)
    ctx.advance(100)
    t4 = ctx.clock.wall_ms()
    fetch(ctx, 2, 5, epoch)  # at the end: caught up now
    assert describe(ctx).current_voters[1] == voter(2, 5, t4, t4)


def test_leader_describes_observers_and_drops_idle_ones() -> None:
    """§1.3: observers appear with their directory id, end offset and times (caught-up -1 until
    they reach the leader's end); they stay while falling behind; one idle for more than five
    minutes is dropped; an anonymous fetcher (replica id -1) never appears
    (Kafka testDescribeQuorumWithObserver)."""
    ctx = leader(voters=(1, 2))
    epoch = ctx.epoch
    ctx.advance(100)
    follower_caught_up = follower_fetch = ctx.clock.wall_ms()
    assert fetch(ctx, 2, 1, epoch).high_watermark == 1

    directory = uuid.uuid4()
    ctx.advance(100)
    observer_fetch = ctx.clock.wall_ms()
    assert fetch(ctx, OBSERVER, 0, 0, directory).high_watermark == 1
    ctx.advance(100)
    now = ctx.clock.wall_ms()
    response = describe(ctx)
    assert response.high_watermark == 1
    assert response.current_voters == (
        voter(1, 1, now, now),
        voter(2, 1, follower_fetch, follower_fetch),
    )
    assert response.observers == (ReplicaState(OBSERVER, directory, 0, observer_fetch, -1),)

    ctx.advance(100)
    observer_fetch = ctx.clock.wall_ms()
    fetch(ctx, OBSERVER, 1, epoch, directory)
    ctx.advance(100)
    response = describe(ctx)
    observer_state = ReplicaState(OBSERVER, directory, 1, observer_fetch, observer_fetch)
    assert response.observers == (observer_state,)

    # The observer falls behind: its entry does not change.
    ctx.advance(100)
    append(ctx, [b"foo", b"bar"])
    now = ctx.clock.wall_ms()
    response = describe(ctx)
    assert response.current_voters[0] == voter(1, 3, now, now)
    assert response.observers == (observer_state,)

    # Idle for more than five minutes (the follower keeps the leader alive meanwhile).
    check_quorum_ms = ctx.config.fetch_timeout_ms * 3 // 2
    idle_from = ctx.clock.now_ms()
    while ctx.clock.now_ms() - idle_from <= OBSERVER_SESSION_TIMEOUT_MS:
        follower_fetch = ctx.clock.wall_ms()
        fetch(ctx, 2, 1, epoch)
        ctx.advance(check_quorum_ms - 1)
    assert ctx.role == "Leader"
    response = describe(ctx)
    assert response.observers == ()
    # Still at offset 1 while the leader is at 3: fetched recently, caught up long ago.
    assert response.current_voters[1] == voter(2, 1, follower_fetch, follower_caught_up)

    fetch(ctx, -1, 0, 0)
    assert describe(ctx).observers == ()


def test_observer_within_the_session_timeout_is_still_described() -> None:
    """§1.3: an observer is dropped only once idle for more than five minutes, not before."""
    ctx = leader(fetch_timeout_ms=1_000_000)  # check-quorum never interferes
    observer_fetch = ctx.clock.wall_ms()
    fetch(ctx, OBSERVER, 1, ctx.epoch)
    ctx.advance(OBSERVER_SESSION_TIMEOUT_MS - 1)
    assert [o.replica_id for o in describe(ctx).observers] == [OBSERVER]
    assert describe(ctx).observers[0].last_fetch_timestamp == observer_fetch
    ctx.advance(2)
    assert describe(ctx).observers == ()


def test_non_monotonic_follower_fetch_is_reported_but_keeps_the_high_watermark() -> None:
    """§1.5/§1.3: a follower that lost its disk fetches from an earlier offset: DescribeQuorum
    shows its lower end offset, the high watermark does not go back
    (Kafka testDescribeQuorumNonMonotonicFollowerFetch)."""
    ctx = leader(voters=(1, 2))
    epoch = ctx.epoch
    ctx.advance(100)
    append(ctx, [b"foo", b"bar"])
    first_fetch = ctx.clock.wall_ms()
    assert fetch(ctx, 2, 3, epoch).high_watermark == 3
    ctx.advance(100)
    now = ctx.clock.wall_ms()
    response = describe(ctx)
    assert response.high_watermark == 3
    assert response.current_voters == (voter(1, 3, now, now), voter(2, 3, first_fetch, first_fetch))

    ctx.advance(100)
    second_fetch = ctx.clock.wall_ms()
    assert fetch(ctx, 2, 1, epoch).high_watermark == 3
    ctx.advance(100)
    now = ctx.clock.wall_ms()
    response = describe(ctx)
    assert response.high_watermark == 3 and ctx.high_watermark == 3
    assert response.current_voters == (
        voter(1, 3, now, now),
        voter(2, 1, second_fetch, first_fetch),
    )


def test_describe_quorum_changes_nothing_on_the_leader() -> None:
    """§1.3: DescribeQuorum is read-only: it neither counts as a fetch for check-quorum nor
    moves the high watermark, nor changes the stored election state."""
    ctx = leader()
    stored = ctx.stored_state()
    assert stored == ElectionState(ctx.epoch, leader_id=LOCAL)
    check_quorum_ms = ctx.config.fetch_timeout_ms * 3 // 2
    for _ in range(3):
        ctx.advance(check_quorum_ms // 3 - 1)
        ctx.deliver_request(DescribeQuorumRequest(), source=2)
        ctx.poll()
        assert ctx.role == "Leader" and ctx.high_watermark is None
    assert ctx.stored_state() == stored
    ctx.advance(3)
    ctx.poll()
    assert ctx.role == "Resigned"
