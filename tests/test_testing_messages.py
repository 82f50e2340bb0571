"""The response builders of kraft.testing: the fields they fill in, and a client that acts on
what they build as on a real peer's answer."""

from __future__ import annotations

from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    BeginQuorumEpochResponse,
    EndQuorumEpochResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from kraft.record.batch import encode_batch
from kraft.record.offsets import OffsetAndEpoch
from kraft.testing import (
    RaftClientBuilder,
    RaftTestContext,
    begin_epoch_response,
    end_epoch_response,
    fetch_response,
    fetch_snapshot_response,
    vote_response,
)

SNAPSHOT_ID = OffsetAndEpoch(10, 3)


def test_the_quorum_epoch_responses_name_the_leader_and_the_error() -> None:
    assert vote_response(4, granted=True) == VoteResponse(leader_epoch=4, vote_granted=True)
    assert vote_response(4, granted=False, leader_id=2, error=Errors.FENCED_LEADER_EPOCH) == (
        VoteResponse(
            partition_error_code=Errors.FENCED_LEADER_EPOCH,
            leader_id=2,
            leader_epoch=4,
            vote_granted=False,
        )
    )
    assert begin_epoch_response(6, 1) == BeginQuorumEpochResponse(leader_id=1, leader_epoch=6)
    assert end_epoch_response(6, error=Errors.NOT_LEADER_OR_FOLLOWER) == EndQuorumEpochResponse(
        partition_error_code=Errors.NOT_LEADER_OR_FOLLOWER,
        leader_id=-1,
        leader_epoch=6,
    )
    assert vote_response(4, granted=True, error_code=Errors.BROKER_NOT_AVAILABLE).error_code == (
        Errors.BROKER_NOT_AVAILABLE
    )


def test_the_fetch_response_carries_records_a_diverging_epoch_or_a_snapshot_id() -> None:
    leader = LeaderIdAndEpoch(2, 5)
    assert fetch_response(5, 2, b"batch", 7) == FetchResponse(
        high_watermark=7,
        records=b"batch",
        current_leader=leader,
    )
    diverging = fetch_response(5, 2, diverging_epoch=OffsetAndEpoch(4, 1))
    assert diverging.diverging_epoch == EpochEndOffset(epoch=1, end_offset=4)
    assert diverging.snapshot_id is None and diverging.records == b""
    to_snapshot = fetch_response(5, 2, snapshot_id=SNAPSHOT_ID)
    assert to_snapshot.snapshot_id == SnapshotId(end_offset=10, epoch=3)
    assert to_snapshot.current_leader == leader
    fenced = fetch_response(6, 3, error=Errors.FENCED_LEADER_EPOCH)
    assert fenced.partition_error_code == Errors.FENCED_LEADER_EPOCH


def test_the_fetch_snapshot_response_is_a_slice_of_the_file() -> None:
    data = bytes(range(20))
    middle = fetch_snapshot_response(5, 2, SNAPSHOT_ID, data, position=4, length=6)
    assert middle == FetchSnapshotResponse(
        snapshot_id=SnapshotId(10, 3),
        current_leader=LeaderIdAndEpoch(2, 5),
        size=20,
        position=4,
        unaligned_records=data[4:10],
    )
    assert fetch_snapshot_response(5, 2, SNAPSHOT_ID, data, 15).unaligned_records == data[15:]
    refused = fetch_snapshot_response(5, 2, SNAPSHOT_ID, data, 0, error=Errors.SNAPSHOT_NOT_FOUND)
    assert refused.unaligned_records == b""
    assert refused.partition_error_code == Errors.SNAPSHOT_NOT_FOUND


def test_a_candidate_wins_with_the_built_vote_responses() -> None:
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(local_id=1, voters=(1, 2, 3))
        .with_voted_candidate(epoch=2, candidate_id=1)
        .build()
    )
    for request in context.poll_until_request(VoteRequest):
        context.deliver_response(request, vote_response(2, granted=True))
    context.poll_until_idle()
    assert (context.role, context.epoch) == ("Leader", 2)


def test_a_follower_truncates_to_the_built_diverging_epoch() -> None:
    """KIP-595: a Fetch answered with a diverging epoch truncates the follower's log to it."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(local_id=1, voters=(1, 2, 3))
        .append_to_log(epoch=1, records=[b"a", b"b"])
        .append_to_log(epoch=3, records=[b"c", b"d"])
        .with_elected_leader(epoch=5, leader_id=2)
        .build()
    )
    (request,) = context.poll_until_request(FetchRequest)
    context.deliver_response(request, fetch_response(5, 2, diverging_epoch=OffsetAndEpoch(2, 1)))
    context.poll()
    assert context.log_end_offset == 2
    records = encode_batch(2, 5, [b"e"], timestamp_ms=context.clock.wall_ms())
    context.poll()
    context.answer_fetch(records=records, high_watermark=3)
    assert (context.log_end_offset, context.high_watermark) == (3, 3)
