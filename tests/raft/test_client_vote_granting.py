"""KafkaRaftClient answering Vote requests (docs/protocol.md §1.2).

The validation order (cluster id, topic-partition, offsets and epochs, fencing, the epoch bump,
the voter key), then the grant table for standard votes and pre-votes in every local state, and
the rule that a standard vote is made durable before it is granted while a pre-vote never
touches the quorum-state store.

Mirrors the vote-handling scenarios of Kafka's ``KafkaRaftClientTest`` and
``KafkaRaftClientPreVoteTest`` (testHandleValidVoteRequestAsFollower,
testCandidateIgnoreVoteRequestOnSameEpoch, testLeaderIgnoreVoteRequestOnSameEpoch,
testInvalidVoteRequest, testHandlePreVoteRequestAs*, ...).
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest

from kraft.common.uuids import ZERO_UUID, uuid_to_text
from kraft.log.quorum_state import ElectionState
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    BeginQuorumEpochRequest,
    Endpoint,
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
    NodeEndpoint,
    VoteRequest,
    VoteResponse,
)
from kraft.testing import RaftClientBuilder, RaftTestContext, vote_request

LOCAL = 1
VOTERS = (1, 2, 3)
EPOCH = 5


def answer(ctx: RaftTestContext[Any], request: VoteRequest, **deliver: Any) -> VoteResponse:
    """Deliver ``request`` from its replica, poll once, and return the one VoteResponse."""
    ctx.deliver_request(request, request.replica_id, **deliver)
    ctx.poll()
    body = ctx.single_sent_response(VoteResponse)
    assert isinstance(body, VoteResponse)
    return body


def builder(**config: Any) -> RaftClientBuilder[bytes]:
    return RaftClientBuilder(LOCAL, VOTERS).with_config(**config)


def replica(local_id: int | None, voters: tuple[int, ...]) -> RaftClientBuilder[bytes]:
    return RaftClientBuilder(local_id, voters)


def with_log(b: RaftClientBuilder[bytes]) -> RaftClientBuilder[bytes]:
    """Local log: offsets 0-1 in epoch 2, 2-4 in epoch 4 (LEO 5, last epoch 4)."""
    return b.append_to_log(2, [b"a", b"b"]).append_to_log(4, [b"c", b"d", b"e"])


class WriteOrderStore:
    """Wraps the context's store: remembers how many responses had been sent at each write."""

    def __init__(self, ctx: RaftTestContext[Any]) -> None:
        self._inner = ctx.store
        self._channel = ctx.channel
        self.writes: list[tuple[ElectionState, int]] = []

    def read_election_state(self) -> ElectionState | None:
        return self._inner.read_election_state()

    def write_election_state(self, state: ElectionState) -> None:
        self.writes.append((state, len(self._channel.responses)))
        self._inner.write_election_state(state)


class FailingStore:
    """A store whose disk is gone: every write fails."""

    def __init__(self, ctx: RaftTestContext[Any]) -> None:
        self._inner = ctx.store

    def read_election_state(self) -> ElectionState | None:
        return self._inner.read_election_state()

    def write_election_state(self, state: ElectionState) -> None:
        raise OSError("disk gone")


def become_follower_that_fetched(ctx: RaftTestContext[Any], leader: int) -> None:
    """Have the follower send a Fetch and get a successful (empty) answer from ``leader``."""
    ctx.poll()
    fetch, _ = ctx.single_sent_request(FetchRequest)
    ctx.deliver_response(
        fetch,
        FetchResponse(
            high_watermark=0,
            current_leader=LeaderIdAndEpoch(leader, ctx.epoch),
        ),
    )
    ctx.poll()
    assert ctx.role == "Follower"


def make_resigned(ctx: RaftTestContext[Any]) -> int:
    epoch = ctx.become_leader()
    ctx.client.resign(epoch)
    ctx.poll()
    assert ctx.role == "Resigned"
    ctx.sent_requests()
    return epoch


# =================================================================================================
# Validation, in order
# =================================================================================================
def test_cluster_id_mismatch_is_a_top_level_error() -> None:
    """§1.2 check 1: a foreign cluster id -> top-level INCONSISTENT_CLUSTER_ID, nothing changes."""
    ctx = builder().with_cluster_id("cluster-a").with_unknown_leader(EPOCH).build()
    writes = len(ctx.store.writes)
    response = answer(ctx, vote_request(EPOCH + 1, 2, EPOCH, 0), cluster_id="cluster-b")
    assert response.error_code == Errors.INCONSISTENT_CLUSTER_ID
    assert not response.vote_granted
    assert ctx.epoch == EPOCH
    assert ctx.voted_id is None
    assert len(ctx.store.writes) == writes


def test_cluster_id_null_accepted_empty_rejected() -> None:
    """§1.2 check 1: a null cluster id is accepted; an empty one is rejected."""
    ctx = builder().with_cluster_id("cluster-a").with_unknown_leader(EPOCH).build()
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH - 1, 0, pre_vote=True), cluster_id=None)
    assert response.error_code == Errors.NONE
    assert response.vote_granted
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH - 1, 0, pre_vote=True), cluster_id="")
    assert response.error_code == Errors.INCONSISTENT_CLUSTER_ID
    response = answer(
        ctx, vote_request(EPOCH, 2, EPOCH - 1, 0, pre_vote=True), cluster_id="cluster-a"
    )
    assert response.error_code == Errors.NONE


def test_cluster_id_checked_before_topic_partition() -> None:
    """§1.2 checks 1-2 in order: a wrong cluster id wins over a wrong topic-partition."""
    ctx = builder().with_cluster_id("cluster-a").with_unknown_leader(EPOCH).build()
    response = answer(ctx, vote_request(EPOCH, 2, 0, 0, topic_name="other"), cluster_id="x")
    assert response.error_code == Errors.INCONSISTENT_CLUSTER_ID


@pytest.mark.parametrize("field", [{"topic_name": "other-topic"}, {"partition_index": 1}])
def test_wrong_topic_partition_is_invalid_request(field: dict[str, Any]) -> None:
    """§1.2 check 2: a Vote for another topic-partition -> top-level INVALID_REQUEST."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    response = answer(ctx, vote_request(EPOCH + 1, 2, EPOCH, 0, **field))
    assert response.error_code == Errors.INVALID_REQUEST
    assert not response.vote_granted
    assert ctx.epoch == EPOCH
    assert ctx.voted_id is None


def test_topic_partition_checked_before_offsets() -> None:
    """§1.2 checks 2-3 in order: wrong partition and a negative offset -> top-level error."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    response = answer(ctx, vote_request(EPOCH, 2, 0, -1, partition_index=3))
    assert response.error_code == Errors.INVALID_REQUEST
    assert response.partition_error_code == Errors.NONE


@pytest.mark.parametrize(
    ("last_epoch", "last_offset", "pre_vote"),
    [
        (0, -5, False),  # negative last offset
        (-1, 0, False),  # negative last epoch
        (EPOCH + 1, 0, False),  # standard: last epoch == replica epoch is illegal
        (EPOCH + 2, 0, False),  # standard: last epoch above the replica epoch
        (0, -5, True),
        (-1, 0, True),
        (EPOCH + 2, 0, True),  # pre-vote: last epoch above the replica epoch
    ],
)
def test_illegal_offsets_and_epochs_are_invalid_request(
    last_epoch: int, last_offset: int, pre_vote: bool
) -> None:
    """§1.2 check 3: lastOffset<0, lastEpoch<0, or an illegal last epoch -> INVALID_REQUEST,
    and the replica is left as it was (even though the request's epoch is higher)."""
    ctx = builder().with_elected_leader(EPOCH, 2).build()
    replica_epoch = EPOCH + 1
    response = answer(
        ctx, vote_request(replica_epoch, 3, last_epoch, last_offset, pre_vote=pre_vote)
    )
    assert response.error_code == Errors.NONE
    assert response.partition_error_code == Errors.INVALID_REQUEST
    assert not response.vote_granted
    assert response.leader_epoch == EPOCH
    assert response.leader_id == 2
    assert ctx.epoch == EPOCH
    assert ctx.role == "Follower"
    assert ctx.leader_id == 2


def test_pre_vote_last_epoch_equal_to_replica_epoch_is_legal() -> None:
    """§1.2 check 3: for a pre-vote the last epoch may equal the replica epoch."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH, 1, pre_vote=True))
    assert response.partition_error_code == Errors.NONE
    assert response.vote_granted


def test_offsets_checked_before_fencing() -> None:
    """§1.2 checks 3-4 in order: an older epoch with an illegal last epoch -> INVALID_REQUEST,
    not FENCED_LEADER_EPOCH."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    response = answer(ctx, vote_request(EPOCH - 2, 2, EPOCH - 1, 0))
    assert response.partition_error_code == Errors.INVALID_REQUEST


@pytest.mark.parametrize("pre_vote", [False, True])
def test_older_epoch_is_fenced(pre_vote: bool) -> None:
    """§1.2 check 4: replicaEpoch below the local epoch -> FENCED_LEADER_EPOCH with the local
    epoch, nothing granted, nothing persisted."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    writes = len(ctx.store.writes)
    response = answer(ctx, vote_request(EPOCH - 1, 2, EPOCH - 2, 1, pre_vote=pre_vote))
    assert response.partition_error_code == Errors.FENCED_LEADER_EPOCH
    assert response.leader_epoch == EPOCH
    assert response.leader_id == -1
    assert not response.vote_granted
    assert ctx.epoch == EPOCH
    assert ctx.voted_id is None
    assert len(ctx.store.writes) == writes


def test_negative_replica_id_is_invalid_request_without_epoch_bump() -> None:
    """§1.2 check 4: replicaId < 0 -> INVALID_REQUEST, before the epoch bump of check 5."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    request = vote_request(EPOCH + 1, -1, EPOCH, 0)
    ctx.deliver_request(request, 2)
    ctx.poll()
    body = ctx.single_sent_response(VoteResponse)
    assert isinstance(body, VoteResponse)
    assert body.partition_error_code == Errors.INVALID_REQUEST
    assert not body.vote_granted
    assert ctx.epoch == EPOCH


def test_fencing_checked_before_replica_id() -> None:
    """§1.2 check 4 in order: an older epoch from replica -1 -> FENCED_LEADER_EPOCH."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    ctx.deliver_request(vote_request(EPOCH - 1, -1, 0, 0), 2)
    ctx.poll()
    body = ctx.single_sent_response(VoteResponse)
    assert isinstance(body, VoteResponse)
    assert body.partition_error_code == Errors.FENCED_LEADER_EPOCH


@pytest.mark.parametrize("voter_id", [2, 10])
def test_wrong_voter_id_is_invalid_voter_key_after_epoch_bump(voter_id: int) -> None:
    """§1.2 checks 5-6 in order: a higher epoch moves the replica to Unattached(replicaEpoch)
    first; a VoterId that is not this replica then gets INVALID_VOTER_KEY, no vote."""
    ctx = builder().with_elected_leader(EPOCH, 2).build()
    response = answer(ctx, vote_request(EPOCH + 1, 3, EPOCH, 0, voter_id=voter_id))
    assert response.partition_error_code == Errors.INVALID_VOTER_KEY
    assert not response.vote_granted
    assert response.leader_epoch == EPOCH + 1
    assert ctx.epoch == EPOCH + 1
    assert ctx.role == "Unattached"
    assert ctx.voted_id is None
    assert ctx.stored_state() == ElectionState(EPOCH + 1)


def test_voter_directory_id_must_match_when_both_known() -> None:
    """§1.2 check 6: a VoterDirectoryId that is not ours -> INVALID_VOTER_KEY; a missing one
    (zero) matches anything."""
    local_dir = uuid.uuid4()
    ctx = builder().with_local_directory_id(local_dir).with_unknown_leader(EPOCH).build()
    response = answer(
        ctx,
        vote_request(
            EPOCH, 2, EPOCH, 0, pre_vote=True, voter_id=LOCAL, voter_directory_id=uuid.uuid4()
        ),
    )
    assert response.partition_error_code == Errors.INVALID_VOTER_KEY
    assert not response.vote_granted
    response = answer(
        ctx,
        vote_request(
            EPOCH, 2, EPOCH, 0, pre_vote=True, voter_id=LOCAL, voter_directory_id=ZERO_UUID
        ),
    )
    assert response.partition_error_code == Errors.NONE
    assert response.vote_granted
    response = answer(
        ctx,
        vote_request(
            EPOCH, 2, EPOCH, 0, pre_vote=True, voter_id=LOCAL, voter_directory_id=local_dir
        ),
    )
    assert response.partition_error_code == Errors.NONE
    assert response.vote_granted


def test_matching_voter_id_is_accepted() -> None:
    """§1.2 check 6: a VoterId naming this replica passes."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    response = answer(ctx, vote_request(EPOCH + 1, 2, EPOCH, 0, voter_id=LOCAL))
    assert response.partition_error_code == Errors.NONE
    assert response.vote_granted


# =================================================================================================
# upToDate: (lastOffsetEpoch, lastOffset) >= (local last epoch, LEO), epoch first
# =================================================================================================
@pytest.mark.parametrize(
    ("last_epoch", "last_offset", "granted"),
    [
        (4, 5, True),  # equal
        (4, 6, True),  # same epoch, longer
        (4, 4, False),  # same epoch, shorter
        (5, 1, True),  # newer epoch wins even with a shorter log
        (3, 100, False),  # older epoch loses even with a longer log
    ],
)
@pytest.mark.parametrize("pre_vote", [False, True])
def test_up_to_date_compares_epoch_first(
    last_epoch: int, last_offset: int, granted: bool, pre_vote: bool
) -> None:
    """§1.2 upToDate: the candidate's (last epoch, last offset) must be at least ours,
    comparing the epoch first."""
    ctx = with_log(builder()).with_unknown_leader(EPOCH).build()
    assert (ctx.log_end_offset, ctx.log.last_fetched_epoch) == (5, 4)
    epoch = EPOCH if pre_vote else EPOCH + 1
    response = answer(ctx, vote_request(epoch, 2, last_epoch, last_offset, pre_vote=pre_vote))
    assert response.partition_error_code == Errors.NONE
    assert response.vote_granted is granted


# =================================================================================================
# Standard votes, state by state
# =================================================================================================
def test_unattached_grants_standard_vote_and_persists_it() -> None:
    """§1.2 table, Unattached (no vote, no leader): grant an up-to-date candidate and persist
    the votedKey; the replica is then Voted in the same epoch."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH - 1, 0))
    assert response.vote_granted
    assert response.leader_id == -1
    assert response.leader_epoch == EPOCH
    assert ctx.role == "Voted"
    assert ctx.epoch == EPOCH
    assert ctx.voted_id == 2
    assert ctx.stored_state() == ElectionState(EPOCH, voted_id=2)


def test_standard_vote_persisted_before_the_response() -> None:
    """§1.2: the vote is made durable before the granting response is sent."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    store = WriteOrderStore(ctx)
    ctx.client.quorum.store = store  # type: ignore[assignment]
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH - 1, 0))
    assert response.vote_granted
    assert [state for state, _ in store.writes] == [ElectionState(EPOCH, voted_id=2)]
    assert store.writes[0][1] == 0  # no response had been sent when the vote was written


def test_no_grant_when_the_vote_cannot_be_persisted() -> None:
    """§1.2: a vote that could not be made durable is never granted."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    ctx.client.quorum.store = FailingStore(ctx)  # type: ignore[assignment]
    ctx.deliver_request(vote_request(EPOCH, 2, EPOCH - 1, 0), 2)
    with contextlib.suppress(OSError):  # Kafka: fatal; either way, no grant
        ctx.poll()
    granted = [
        r
        for r in ctx.sent_responses(VoteResponse)
        if isinstance(r.body, VoteResponse) and r.body.vote_granted
    ]
    assert granted == []
    assert ctx.voted_id is None


def test_unattached_rejects_stale_candidate_without_persisting() -> None:
    """§1.2 table, Unattached: a candidate whose log is behind is rejected; no vote stored."""
    ctx = with_log(builder()).with_unknown_leader(EPOCH).build()
    writes = len(ctx.store.writes)
    response = answer(ctx, vote_request(EPOCH, 2, 4, 3))
    assert not response.vote_granted
    assert ctx.role == "Unattached"
    assert ctx.voted_id is None
    assert len(ctx.store.writes) == writes


def test_higher_epoch_vote_bumps_epoch_then_grants() -> None:
    """§1.2 check 5: a standard vote in a higher epoch moves the replica to Unattached of that
    epoch, then it grants and persists the vote there."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    response = answer(ctx, vote_request(EPOCH + 3, 2, EPOCH, 0))
    assert response.vote_granted
    assert response.leader_epoch == EPOCH + 3
    assert ctx.epoch == EPOCH + 3
    assert ctx.voted_id == 2
    assert ctx.stored_state() == ElectionState(EPOCH + 3, voted_id=2)


def test_higher_epoch_vote_from_stale_candidate_bumps_epoch_but_rejects() -> None:
    """§1.2 check 5: the epoch bump happens even when the vote is then rejected."""
    ctx = with_log(builder()).with_elected_leader(EPOCH, 2).build()
    response = answer(ctx, vote_request(EPOCH + 1, 3, 2, 2))
    assert not response.vote_granted
    assert response.leader_id == -1
    assert response.leader_epoch == EPOCH + 1
    assert ctx.role == "Unattached"
    assert ctx.epoch == EPOCH + 1
    assert ctx.leader_id is None
    assert ctx.voted_id is None
    assert ctx.stored_state() == ElectionState(EPOCH + 1)


def test_unattached_with_known_leader_rejects_standard_vote() -> None:
    """§1.2 table, Unattached with a known leader (no endpoints): reject a standard vote."""
    ctx = builder().with_elected_leader(EPOCH, 7).build()  # 7: not a voter, no endpoints
    assert ctx.role == "Unattached"
    assert ctx.leader_id == 7
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH - 1, 0))
    assert not response.vote_granted
    assert response.leader_id == 7
    assert ctx.voted_id is None
    assert ctx.stored_state() == ElectionState(EPOCH, leader_id=7)


def test_voted_grants_the_same_candidate_again() -> None:
    """§1.2 table, Unattached+voted: a retried vote from the same candidate is granted."""
    ctx = builder().with_voted_candidate(EPOCH, 2).build()
    writes = len(ctx.store.writes)
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH - 1, 0))
    assert response.vote_granted
    assert ctx.voted_id == 2
    assert ctx.stored_state() == ElectionState(EPOCH, voted_id=2)
    assert len(ctx.store.writes) == writes  # nothing new to persist


def test_voted_rejects_another_candidate() -> None:
    """§1.2 table, Unattached+voted: no second standard vote in the epoch."""
    ctx = builder().with_voted_candidate(EPOCH, 2).build()
    response = answer(ctx, vote_request(EPOCH, 3, EPOCH - 1, 10))
    assert not response.vote_granted
    assert ctx.voted_id == 2
    assert ctx.stored_state() == ElectionState(EPOCH, voted_id=2)


def test_voted_with_directory_rejects_same_id_other_directory() -> None:
    """§1.2 table, Unattached+voted: with a stored dirId, only the same (id, dirId) is granted;
    a request without a dirId matches."""
    directory = uuid.uuid4()
    ctx = builder().with_voted_candidate(EPOCH, 2, str_dir(directory)).build()
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH - 1, 0, replica_directory_id=uuid.uuid4()))
    assert not response.vote_granted
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH - 1, 0, replica_directory_id=directory))
    assert response.vote_granted


def str_dir(directory: uuid.UUID) -> str:
    """A directory id as the quorum-state store spells it (Kafka's base64 Uuid)."""
    return uuid_to_text(directory)


def test_candidate_rejects_standard_vote_in_its_epoch() -> None:
    """§1.2 table, Candidate: reject a standard vote in the same epoch; still voted for self."""
    ctx = builder().with_voted_candidate(EPOCH, LOCAL).build()
    assert ctx.role == "Candidate"
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH - 1, 1))
    assert not response.vote_granted
    assert response.leader_id == -1
    assert ctx.role == "Candidate"
    assert ctx.voted_id == LOCAL
    assert ctx.stored_state() == ElectionState(EPOCH, voted_id=LOCAL)


def test_follower_rejects_standard_vote_in_its_epoch() -> None:
    """§1.2 table, Follower: reject a standard vote in the same epoch."""
    ctx = builder().with_elected_leader(EPOCH, 2).build()
    assert ctx.role == "Follower"
    response = answer(ctx, vote_request(EPOCH, 3, EPOCH - 1, 1))
    assert not response.vote_granted
    assert response.leader_id == 2
    assert response.node_endpoints == (NodeEndpoint(2, "localhost", 9992),)
    assert ctx.role == "Follower"
    assert ctx.leader_id == 2
    assert ctx.stored_state() == ElectionState(EPOCH, leader_id=2)


def test_leader_rejects_standard_vote_in_its_epoch() -> None:
    """§1.2 table, Leader: reject a standard vote in the same epoch and stay Leader."""
    ctx = builder().build()
    epoch = ctx.become_leader()
    response = answer(ctx, vote_request(epoch, 2, epoch - 1 if epoch > 1 else 0, 100))
    assert not response.vote_granted
    assert response.leader_id == LOCAL
    assert response.leader_epoch == epoch
    assert ctx.role == "Leader"


def test_leader_grants_higher_epoch_vote_after_stepping_down() -> None:
    """§1.2 check 5: a Leader seeing a higher-epoch vote becomes Unattached(epoch) first and
    then judges the vote like any Unattached replica."""
    ctx = builder().build()
    epoch = ctx.become_leader()
    leo = ctx.log_end_offset
    response = answer(ctx, vote_request(epoch + 1, 2, epoch, leo))
    assert response.vote_granted
    assert ctx.role == "Voted"
    assert ctx.epoch == epoch + 1
    assert ctx.stored_state() == ElectionState(epoch + 1, voted_id=2)


def test_resigned_rejects_standard_vote_in_its_epoch() -> None:
    """§1.2 table, Resigned: reject a standard vote in the same epoch."""
    ctx = builder().build()
    epoch = make_resigned(ctx)
    response = answer(ctx, vote_request(epoch, 2, epoch - 1, ctx.log_end_offset + 5))
    assert not response.vote_granted
    assert ctx.role == "Resigned"


def test_prospective_grants_standard_vote_and_stays_prospective() -> None:
    """§1.2 table, Prospective: like Unattached; a grant records the vote durably
    (prospectiveAddVotedState) and the replica stays Prospective in the same epoch."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    ctx.expire_election_timeout()
    ctx.poll()
    assert ctx.role == "Prospective"
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH - 1, 0))
    assert response.vote_granted
    assert ctx.role == "Prospective"
    assert ctx.epoch == EPOCH
    assert ctx.voted_id == 2
    assert ctx.stored_state() == ElectionState(EPOCH, voted_id=2)
    # ... and no second standard vote in the epoch.
    response = answer(ctx, vote_request(EPOCH, 3, EPOCH - 1, 0))
    assert not response.vote_granted
    assert ctx.voted_id == 2


def test_prospective_with_known_leader_rejects_standard_vote() -> None:
    """§1.2 table, Prospective (like Unattached): a known leader means no standard vote."""
    ctx = builder().with_elected_leader(EPOCH, 2).build()
    ctx.expire_fetch_timeout()
    ctx.poll()
    assert ctx.role == "Prospective"
    response = answer(ctx, vote_request(EPOCH, 3, EPOCH - 1, 0))
    assert not response.vote_granted
    assert ctx.voted_id is None


def test_observer_grants_standard_vote() -> None:
    """§1.2 table: any replica with an id may vote, an observer too (and persists it)."""
    ctx = replica(4, VOTERS).with_unknown_leader(EPOCH).build()
    response = answer(ctx, vote_request(EPOCH + 1, 2, EPOCH, 0))
    assert response.vote_granted
    assert ctx.voted_id == 2
    assert ctx.stored_state() == ElectionState(EPOCH + 1, voted_id=2)


def test_vote_from_an_observer_is_answered_normally() -> None:
    """§1.2: observers' vote requests are answered like any other."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    response = answer(ctx, vote_request(EPOCH, 9, EPOCH - 1, 0))
    assert response.partition_error_code == Errors.NONE
    assert response.vote_granted


def test_anonymous_replica_never_grants_standard_vote() -> None:
    """kraft: an anonymous replica (no local id) cannot persist a vote, so it never grants a
    standard vote (client.py `_handle_vote_request`); it still answers pre-votes."""
    ctx = replica(None, VOTERS).with_unknown_leader(EPOCH).build()
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH - 1, 0))
    assert not response.vote_granted
    assert ctx.voted_id is None
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH - 1, 0, pre_vote=True))
    assert response.vote_granted


# =================================================================================================
# Pre-votes, state by state: nothing is ever persisted
# =================================================================================================
@pytest.mark.parametrize("candidate", [2, 3, 9])
def test_unattached_grants_pre_vote_to_anyone_up_to_date(candidate: int) -> None:
    """§1.2 table, Unattached: a pre-vote is granted iff upToDate, to any replica, any number
    of times; nothing is persisted and the state is unchanged."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    writes = list(ctx.store.writes)
    for _ in range(2):
        response = answer(ctx, vote_request(EPOCH, candidate, EPOCH - 1, 0, pre_vote=True))
        assert response.vote_granted
        assert response.leader_id == -1
        assert response.leader_epoch == EPOCH
    assert ctx.role == "Unattached"
    assert ctx.voted_id is None
    assert ctx.store.writes == writes


def test_unattached_rejects_pre_vote_from_stale_log() -> None:
    """§1.2 table, Unattached: a pre-vote from a replica behind our log is rejected."""
    ctx = with_log(builder()).with_unknown_leader(EPOCH).build()
    response = answer(ctx, vote_request(EPOCH, 2, 4, 4, pre_vote=True))
    assert not response.vote_granted
    response = answer(ctx, vote_request(EPOCH, 2, 4, 5, pre_vote=True))
    assert response.vote_granted


def test_unattached_with_leader_grants_pre_vote() -> None:
    """§1.2 table, Unattached with a known leader: a pre-vote is granted iff upToDate."""
    ctx = builder().with_elected_leader(EPOCH, 7).build()
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH - 1, 0, pre_vote=True))
    assert response.vote_granted
    assert response.leader_id == 7
    assert ctx.leader_id == 7
    assert ctx.stored_state() == ElectionState(EPOCH, leader_id=7)


def test_voted_grants_pre_vote_to_another_replica() -> None:
    """§1.2 table, Unattached+voted: pre-votes are granted iff upToDate, whoever asks; the
    standard vote stays as it was."""
    ctx = builder().with_voted_candidate(EPOCH, 2).build()
    writes = list(ctx.store.writes)
    for candidate in (3, 2, 9):
        response = answer(ctx, vote_request(EPOCH, candidate, EPOCH - 1, 0, pre_vote=True))
        assert response.vote_granted
    assert ctx.voted_id == 2
    assert ctx.role == "Voted"
    assert ctx.store.writes == writes


def test_prospective_grants_pre_vote() -> None:
    """§1.2 table, Prospective: a pre-vote from another prospective replica is granted iff
    upToDate, and the replica stays Prospective without persisting anything."""
    ctx = with_log(builder()).with_unknown_leader(EPOCH).build()
    ctx.expire_election_timeout()
    ctx.poll()
    assert ctx.role == "Prospective"
    writes = list(ctx.store.writes)
    response = answer(ctx, vote_request(EPOCH, 2, 4, 5, pre_vote=True))
    assert response.vote_granted
    response = answer(ctx, vote_request(EPOCH, 3, 4, 4, pre_vote=True))
    assert not response.vote_granted
    assert ctx.role == "Prospective"
    assert ctx.voted_id is None
    assert ctx.store.writes == writes


def test_candidate_grants_pre_vote() -> None:
    """§1.2 table, Candidate: a pre-vote is granted iff upToDate; it remains a Candidate that
    voted for itself."""
    ctx = replica(LOCAL, (1, 2)).with_voted_candidate(EPOCH, LOCAL).build()
    assert ctx.role == "Candidate"
    writes = list(ctx.store.writes)
    response = answer(ctx, vote_request(EPOCH, 2, EPOCH, 1, pre_vote=True))
    assert response.vote_granted
    assert response.leader_id == -1
    response = answer(ctx, vote_request(EPOCH, 3, EPOCH, 2, pre_vote=True))  # an observer
    assert response.vote_granted
    assert ctx.role == "Candidate"
    assert ctx.voted_id == LOCAL
    assert ctx.store.writes == writes


def test_candidate_rejects_pre_vote_from_stale_log() -> None:
    """§1.2 table, Candidate: a pre-vote from a replica behind is rejected."""
    ctx = with_log(replica(LOCAL, (1, 2))).with_voted_candidate(EPOCH, LOCAL).build()
    response = answer(ctx, vote_request(EPOCH, 2, 4, 4, pre_vote=True))
    assert not response.vote_granted


def test_follower_grants_pre_vote_before_fetching() -> None:
    """§1.2 table, Follower: a pre-vote is granted while the follower has not fetched
    successfully from its leader in this epoch; the response names the leader."""
    ctx = builder().with_elected_leader(EPOCH, 2).build()
    response = answer(ctx, vote_request(EPOCH, 3, EPOCH, 1, pre_vote=True))
    assert response.vote_granted
    assert response.leader_id == 2
    assert ctx.role == "Follower"
    assert ctx.leader_id == 2


def test_follower_rejects_pre_vote_after_fetching() -> None:
    """§1.2 table, Follower: after a successful fetch in this epoch, pre-votes are rejected,
    from voters and observers alike."""
    ctx = builder().with_elected_leader(EPOCH, 2).build()
    become_follower_that_fetched(ctx, 2)
    for candidate in (3, 9):
        response = answer(ctx, vote_request(EPOCH, candidate, EPOCH, 1, pre_vote=True))
        assert not response.vote_granted
        assert response.leader_id == 2
    assert ctx.role == "Follower"


def test_observer_follower_pre_vote_rule() -> None:
    """§1.2 table, Follower (an observer too): granted before the first fetch, then not."""
    ctx = replica(4, VOTERS).with_elected_leader(EPOCH, 2).build()
    assert ctx.role == "Follower"
    response = answer(ctx, vote_request(EPOCH, 3, EPOCH, 1, pre_vote=True))
    assert response.vote_granted
    become_follower_that_fetched(ctx, 2)
    response = answer(ctx, vote_request(EPOCH, 3, EPOCH, 1, pre_vote=True))
    assert not response.vote_granted


def test_follower_rejects_pre_vote_from_stale_log_before_fetching() -> None:
    """§1.2 table, Follower: even before a fetch, the pre-vote needs upToDate."""
    ctx = with_log(builder()).with_elected_leader(EPOCH, 2).build()
    response = answer(ctx, vote_request(EPOCH, 3, 2, 10, pre_vote=True))
    assert not response.vote_granted


def test_follower_pre_vote_after_new_epoch_fetch_rule_restarts() -> None:
    """§1.2 table, Follower: "no successful fetch yet *in this epoch*": following a new leader
    in a new epoch, pre-votes are granted again until the first fetch from it."""
    ctx = builder().with_elected_leader(EPOCH, 2).build()
    become_follower_that_fetched(ctx, 2)
    ctx.deliver_request(
        BeginQuorumEpochRequest(
            leader_id=3,
            leader_epoch=EPOCH + 1,
            voter_id=LOCAL,
            leader_endpoints=(Endpoint("CONTROLLER", "localhost", 9993),),
        ),
        3,
    )
    ctx.poll()
    ctx.sent_responses()
    assert (ctx.role, ctx.leader_id, ctx.epoch) == ("Follower", 3, EPOCH + 1)
    response = answer(ctx, vote_request(EPOCH + 1, 2, EPOCH, 1, pre_vote=True))
    assert response.vote_granted


def test_leader_rejects_pre_vote() -> None:
    """§1.2 table, Leader: a pre-vote in its epoch is rejected; an older one is fenced."""
    ctx = builder().build()
    epoch = ctx.become_leader()
    response = answer(ctx, vote_request(epoch, 2, epoch, 100, pre_vote=True))
    assert response.partition_error_code == Errors.NONE
    assert not response.vote_granted
    assert response.leader_id == LOCAL
    response = answer(ctx, vote_request(epoch - 1, 9, 0, 0, pre_vote=True))
    assert response.partition_error_code == Errors.FENCED_LEADER_EPOCH
    assert ctx.role == "Leader"


def test_resigned_grants_pre_vote() -> None:
    """§1.2 table, Resigned: a pre-vote is granted iff upToDate; still Resigned."""
    ctx = builder().build()
    epoch = make_resigned(ctx)
    response = answer(ctx, vote_request(epoch, 2, epoch, ctx.log_end_offset, pre_vote=True))
    assert response.vote_granted
    assert response.leader_id == LOCAL
    response = answer(ctx, vote_request(epoch, 2, epoch, ctx.log_end_offset - 1, pre_vote=True))
    assert not response.vote_granted
    assert ctx.role == "Resigned"


@pytest.mark.parametrize(
    "start", ["unattached", "voted", "follower", "candidate", "leader", "resigned"]
)
def test_higher_epoch_pre_vote_bumps_epoch_without_a_vote(start: str) -> None:
    """§1.2 check 5 (and "Where kraft differs from Kafka" in docs/protocol.md): a
    higher-epoch pre-vote still moves the receiver to Unattached(replicaEpoch); the pre-vote
    itself persists no vote."""
    b = builder()
    if start == "voted":
        b = b.with_voted_candidate(EPOCH, 2)
    elif start == "follower":
        b = b.with_elected_leader(EPOCH, 2)
    elif start == "candidate":
        b = b.with_voted_candidate(EPOCH, LOCAL)
    else:
        b = b.with_unknown_leader(EPOCH)
    ctx = b.build()
    if start == "leader":
        epoch = ctx.become_leader()
    elif start == "resigned":
        epoch = make_resigned(ctx)
    else:
        epoch = EPOCH
    response = answer(ctx, vote_request(epoch + 1, 3, epoch, ctx.log_end_offset, pre_vote=True))
    assert response.vote_granted
    assert response.leader_id == -1
    assert response.leader_epoch == epoch + 1
    assert ctx.role == "Unattached"
    assert ctx.epoch == epoch + 1
    assert ctx.voted_id is None
    assert ctx.stored_state() == ElectionState(epoch + 1)


def test_pre_vote_then_standard_vote_in_the_same_epoch() -> None:
    """§1.2: granting pre-votes leaves the replica free to cast its one standard vote."""
    ctx = builder().with_unknown_leader(EPOCH).build()
    assert answer(ctx, vote_request(EPOCH, 2, EPOCH, 0, pre_vote=True)).vote_granted
    assert answer(ctx, vote_request(EPOCH, 3, EPOCH, 0, pre_vote=True)).vote_granted
    assert answer(ctx, vote_request(EPOCH + 1, 3, EPOCH, 0)).vote_granted
    assert not answer(ctx, vote_request(EPOCH + 1, 2, EPOCH, 0)).vote_granted
    assert ctx.stored_state() == ElectionState(EPOCH + 1, voted_id=3)
