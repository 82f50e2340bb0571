"""Who may send what: identity binding and ``reject_unknown_replicas`` (kraft/raft/rpc.py:
``PeerCheck``; docs/operations.md "Security", docs/protocol.md).

Identity binding: when the transport proved the peer's replica id (``InboundRequest.peer_id``),
a request whose header source or whose candidate, leader or fetching replica is another
replica is answered CLUSTER_AUTHORIZATION_FAILED and changes nothing. ``reject_unknown_replicas``
refuses Vote, BeginQuorumEpoch and EndQuorumEpoch from a replica outside the voter set; off
(the default), Kafka's semantics hold: a stranger's higher epoch is adopted.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochResponse,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Request,
    Response,
    SnapshotId,
    VoteResponse,
)
from kraft.raft.rpc import PEER_REFUSAL_LOG_INTERVAL_MS, claimed_replica_id
from kraft.raft.states import FollowerState
from kraft.testing import RaftClientBuilder, RaftTestContext

LOCAL = 1
VOTERS = (1, 2, 3)
EPOCH = 5
STRANGER = 99
UNAUTHORIZED = Errors.CLUSTER_AUTHORIZATION_FAILED


def follower(**config: Any) -> RaftTestContext[bytes]:
    """Replica 1, following leader 2 in EPOCH, log end 0."""
    return (
        RaftClientBuilder(LOCAL, VOTERS).with_config(**config).with_elected_leader(EPOCH, 2).build()
    )


def leader(**config: Any) -> RaftTestContext[bytes]:
    ctx: RaftTestContext[bytes] = RaftClientBuilder(LOCAL, VOTERS).with_config(**config).build()
    ctx.become_leader()
    return ctx


def answer(
    ctx: RaftTestContext[bytes], body: Request, source: int, kind: type[Response], **kw: Any
) -> Any:
    ctx.deliver_request(body, source, **kw)
    ctx.poll()
    return ctx.single_sent_response(kind)


def assert_unchanged(ctx: RaftTestContext[bytes], role: str, epoch: int, leader_id: int) -> None:
    assert (ctx.role, ctx.epoch, ctx.leader_id, ctx.voted_id) == (role, epoch, leader_id, None)
    stored = ctx.stored_state()
    assert stored is not None
    assert (stored.epoch, stored.leader_id, stored.voted_id) == (epoch, leader_id, None)


# -- reject_unknown_replicas ------------------------------------------------------------------
def test_by_default_a_strangers_vote_moves_the_epoch_as_in_kafka() -> None:
    ctx = leader()
    epoch = ctx.epoch
    vote = ctx.vote_request(epoch + 1, STRANGER, epoch, ctx.log_end_offset)
    response = answer(ctx, vote, STRANGER, VoteResponse)
    assert response.error_code == Errors.NONE
    assert ctx.epoch == epoch + 1 and ctx.role != "Leader"


@pytest.mark.parametrize("pre_vote", [False, True])
def test_reject_unknown_replicas_refuses_a_strangers_vote(pre_vote: bool) -> None:
    ctx = leader(reject_unknown_replicas=True)
    epoch = ctx.epoch
    vote = ctx.vote_request(epoch + 1, STRANGER, epoch, ctx.log_end_offset, pre_vote=pre_vote)
    response = answer(ctx, vote, STRANGER, VoteResponse)
    assert response.error_code == UNAUTHORIZED and not response.vote_granted
    assert_unchanged(ctx, "Leader", epoch, LOCAL)


def test_reject_unknown_replicas_refuses_a_strangers_begin_and_end_quorum_epoch() -> None:
    ctx = follower(reject_unknown_replicas=True)
    begin = ctx.begin_epoch_request(EPOCH + 1, STRANGER)
    assert answer(ctx, begin, STRANGER, BeginQuorumEpochResponse).error_code == UNAUTHORIZED
    assert_unchanged(ctx, "Follower", EPOCH, 2)
    end = ctx.end_epoch_request(EPOCH, STRANGER, [LOCAL])
    assert answer(ctx, end, STRANGER, EndQuorumEpochResponse).error_code == UNAUTHORIZED
    assert_unchanged(ctx, "Follower", EPOCH, 2)


def test_reject_unknown_replicas_keeps_voters_and_observers_fetches() -> None:
    ctx = follower(reject_unknown_replicas=True)
    begin = ctx.begin_epoch_request(EPOCH + 1, 3)
    assert answer(ctx, begin, 3, BeginQuorumEpochResponse).error_code == Errors.NONE
    assert (ctx.epoch, ctx.leader_id) == (EPOCH + 1, 3)

    lead = leader(reject_unknown_replicas=True)
    fetch = lead.fetch_request(lead.epoch, STRANGER, 0, 0)  # an observer with an id
    response = answer(lead, fetch, STRANGER, FetchResponse)
    assert response.error_code == Errors.NONE and response.partition_error_code == Errors.NONE


# -- identity binding -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "candidate", "peer_id"),
    [
        (2, 2, 3),  # a certificate for replica 3 claims to be 2
        (3, 2, 3),  # the header is honest, the candidate is not
        (2, 3, 3),  # the candidate is honest, the header is not
        (2, 2, -1),  # a certificate that names no replica
    ],
)
def test_a_vote_claiming_another_replica_is_refused(
    source: int, candidate: int, peer_id: int
) -> None:
    ctx = follower()
    vote = ctx.vote_request(EPOCH + 1, candidate, EPOCH, 0)
    response = answer(ctx, vote, source, VoteResponse, peer_id=peer_id)
    assert response.error_code == UNAUTHORIZED and not response.vote_granted
    assert_unchanged(ctx, "Follower", EPOCH, 2)


def test_a_vote_from_the_authenticated_replica_is_granted() -> None:
    ctx = follower()
    response = answer(ctx, ctx.vote_request(EPOCH + 1, 3, EPOCH, 0), 3, VoteResponse, peer_id=3)
    assert response.error_code == Errors.NONE and response.vote_granted
    assert (ctx.epoch, ctx.voted_id) == (EPOCH + 1, 3)


def test_begin_and_end_quorum_epoch_naming_another_leader_are_refused() -> None:
    ctx = follower()
    begin = ctx.begin_epoch_request(EPOCH + 1, 3)
    response = answer(ctx, begin, 3, BeginQuorumEpochResponse, peer_id=STRANGER)
    assert response.error_code == UNAUTHORIZED
    assert_unchanged(ctx, "Follower", EPOCH, 2)
    end = ctx.end_epoch_request(EPOCH, 2, [LOCAL])
    response = answer(ctx, end, 2, EndQuorumEpochResponse, peer_id=3)
    assert response.error_code == UNAUTHORIZED
    assert_unchanged(ctx, "Follower", EPOCH, 2)
    state = ctx.client.quorum.state
    assert isinstance(state, FollowerState)
    # EndQuorumEpoch from the leader would have cut the fetch timer to 0 (we are preferred).
    assert state.fetch_deadline_ms > ctx.clock.now_ms()


def test_a_fetch_for_another_replica_moves_no_high_watermark() -> None:
    ctx = leader()
    epoch, end = ctx.epoch, ctx.log_end_offset
    for voter in (2, 3):  # both claim to have everything, from replica 3's connection
        fetch = ctx.fetch_request(epoch, voter, end, epoch)
        response = answer(ctx, fetch, voter, FetchResponse, peer_id=3 if voter == 2 else 2)
        assert response.error_code == UNAUTHORIZED
    assert ctx.high_watermark is None


def test_a_fetch_snapshot_for_another_replica_is_refused() -> None:
    ctx = leader()
    body = FetchSnapshotRequest(
        replica_id=2, current_leader_epoch=ctx.epoch, snapshot_id=SnapshotId(1, 1), position=0
    )
    response = answer(ctx, body, 2, FetchSnapshotResponse, peer_id=3)
    assert response.error_code == UNAUTHORIZED


def test_anonymous_requests_impersonate_no_one() -> None:
    """A certificate without a replica id (an admin tool's) may describe the quorum and fetch
    as an anonymous observer; DescribeQuorum passes whatever the certificate proves."""
    ctx = leader()
    for peer_id in (-1, 3):
        response = answer(ctx, DescribeQuorumRequest(), -1, DescribeQuorumResponse, peer_id=peer_id)
        assert response.error_code == Errors.NONE
    fetch = ctx.fetch_request(ctx.epoch, -1, 0, 0)
    response = answer(ctx, fetch, -1, FetchResponse, peer_id=-1)
    assert response.error_code == Errors.NONE and response.partition_error_code == Errors.NONE


def test_claimed_replica_ids() -> None:
    ctx = follower()
    assert claimed_replica_id(ctx.vote_request(6, 3, 5, 0)) == 3
    assert claimed_replica_id(ctx.begin_epoch_request(6, 2)) == 2
    assert claimed_replica_id(ctx.end_epoch_request(6, 2)) == 2
    assert claimed_replica_id(ctx.fetch_request(6, 3, 0, 0)) == 3
    assert claimed_replica_id(DescribeQuorumRequest()) is None


def test_refusals_are_logged_once_per_interval_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = follower()
    vote = ctx.vote_request(EPOCH + 1, 2, EPOCH, 0)
    caplog.set_level(logging.WARNING, logger="kraft.raft.rpc")
    for _ in range(3):
        answer(ctx, vote, 2, VoteResponse, peer_id=3)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "refusing VoteRequest claiming to be replica 2: the peer's certificate proves replica 3"
    ]
    ctx.advance(PEER_REFUSAL_LOG_INTERVAL_MS)
    answer(ctx, vote, 2, VoteResponse, peer_id=3)
    assert caplog.records[-1].getMessage().endswith("(2 more refused since the last line)")
    assert len(caplog.records) == 2
