"""The leader's append API: ``prepare_append`` / ``schedule_prepared_append``, linger, and what
happens to buffered records when leadership ends (docs/protocol.md §1.10 and §2).

Mirrors Kafka's ``KafkaRaftClientTest`` testAppendFailedWith*, testAccumulatorClearedAfter*,
testChannelWokenUpIfLingerTimeoutReached* and testLeaderAppendSingleMemberQuorum.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kraft.errors import NotLeaderError, RecordBatchTooLargeError
from kraft.protocol.messages import (
    BeginQuorumEpochRequest,
    Endpoint,
    FetchRequest,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.listeners import Batch, LeaderAndEpoch
from kraft.testing import RaftClientBuilder, RaftTestContext, RecordingListener

LOCAL = 1
VOTERS = (1, 2, 3)
LINGER_MS = 50


def leader(**config: Any) -> tuple[RaftTestContext[bytes], int]:
    """Local 1 leads voters 1-3 from an empty log; its LeaderChange is at offset 0."""
    config.setdefault("append_linger_ms", LINGER_MS)
    context: RaftTestContext[bytes] = RaftClientBuilder(LOCAL, VOTERS).with_config(**config).build()
    epoch = context.become_leader()
    assert context.log_end_offset == 1
    return context, epoch


def replicate_all(context: RaftTestContext[Any]) -> None:
    """Voter 2 fetches at the leader's log end: the HW moves there."""
    context.deliver_request(
        FetchRequest(
            replica_id=2,
            current_leader_epoch=context.epoch,
            fetch_offset=context.log_end_offset,
            last_fetched_epoch=context.epoch,
            max_wait_ms=0,
        ),
        source=2,
    )
    context.poll_until_idle()


def run_linger_out(context: RaftTestContext[Any]) -> None:
    context.advance(context.config.append_linger_ms)
    context.poll_until_idle()


def data_batches(context: RaftTestContext[Any]) -> list[tuple[int, int, list[bytes | None]]]:
    """The log's data batches as (base offset, last offset, values)."""
    return [
        (b.base_offset, b.last_offset, list(b.values()))
        for b in context.log.batches()
        if not b.is_control
    ]


def spans(batches: list[Batch[Any]]) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for b in batches]


# =================================================================================================
# prepare_append / schedule_prepared_append errors
# =================================================================================================
def test_append_before_initialize_raises_not_leader() -> None:
    """§2: prepare_append and schedule_prepared_append raise NotLeaderError when the client is
    not initialized."""
    context: RaftTestContext[bytes] = RaftClientBuilder(LOCAL, VOTERS).build(initialize=False)
    with pytest.raises(NotLeaderError):
        context.client.prepare_append(0, [b"a"])
    with pytest.raises(NotLeaderError):
        context.client.schedule_prepared_append()


NOT_LEADER_SITUATIONS: dict[str, Callable[[RaftClientBuilder[bytes]], RaftClientBuilder[bytes]]] = {
    "Unattached": lambda b: b.with_unknown_leader(2),
    "Voted": lambda b: b.with_voted_candidate(2, 3),
    "Follower": lambda b: b.with_elected_leader(2, 3),
    "Resigned": lambda b: b.with_elected_leader(2, LOCAL),
}


@pytest.mark.parametrize("role", sorted(NOT_LEADER_SITUATIONS))
def test_append_when_not_leader_raises_not_leader(role: str) -> None:
    """§2: prepare_append and schedule_prepared_append raise NotLeaderError when this replica
    is not the leader (Kafka's testAppendFailedWithNotLeaderException), and nothing is written."""
    builder: RaftClientBuilder[bytes] = RaftClientBuilder(LOCAL, VOTERS)
    context = NOT_LEADER_SITUATIONS[role](builder).build()
    context.poll()
    assert context.role == role
    with pytest.raises(NotLeaderError):
        context.client.prepare_append(2, [b"a", b"b"])
    with pytest.raises(NotLeaderError):
        context.client.schedule_prepared_append()
    context.advance(LINGER_MS)
    context.poll()
    assert context.log_end_offset == 0


def test_append_with_a_stale_epoch_raises_not_leader() -> None:
    """§1.10: an append for an older epoch raises NotLeaderError, nothing appended (Kafka's
    testAppendFailedWithFencedEpoch)."""
    context, epoch = leader()
    with pytest.raises(NotLeaderError):
        context.client.prepare_append(epoch - 1, [b"a"])
    assert context.client.prepare_append(epoch, [b"b"]) == 1


def test_append_with_a_future_epoch_raises_value_error() -> None:
    """§1.10: an append for a higher epoch is a caller bug: ValueError (Kafka's
    IllegalArgumentException), nothing appended."""
    context, epoch = leader()
    with pytest.raises(ValueError):
        context.client.prepare_append(epoch + 1, [b"a"])
    assert context.client.prepare_append(epoch, [b"b"]) == 1


def test_a_failed_append_appends_nothing() -> None:
    """§1.10: on an error nothing is appended: the log gets only the good appends, at the offsets
    they were given."""
    context, epoch = leader(max_batch_size_bytes=1024)
    with pytest.raises(NotLeaderError):
        context.client.prepare_append(epoch - 1, [b"stale"])
    with pytest.raises(ValueError):
        context.client.prepare_append(epoch + 1, [b"future"])
    with pytest.raises(RecordBatchTooLargeError):
        context.client.prepare_append(epoch, [b"x" * 2000])
    assert context.client.prepare_append(epoch, [b"good"]) == 1
    context.client.schedule_prepared_append()
    run_linger_out(context)
    assert context.log_end_offset == 2
    assert data_batches(context) == [(1, 1, [b"good"])]


def test_an_append_larger_than_a_batch_raises_record_batch_too_large() -> None:
    """§1.10: records that cannot fit in one batch raise RecordBatchTooLargeError (records are
    never split), and nothing is appended (Kafka's
    testAppendFailedWithRecordBatchTooLargeException)."""
    context, epoch = leader(max_batch_size_bytes=1024)
    many_small = [b"a"] * (1024 // 8 + 1)
    with pytest.raises(RecordBatchTooLargeError):
        context.client.prepare_append(epoch, many_small)
    with pytest.raises(RecordBatchTooLargeError):
        context.client.prepare_append(epoch, [b"x" * 1024])
    context.client.schedule_prepared_append()
    run_linger_out(context)
    assert context.log_end_offset == 1


# =================================================================================================
# offsets and batches
# =================================================================================================
def test_prepare_append_returns_the_offset_of_its_last_record() -> None:
    """§1.10: an append returns next + n - 1; the records get exactly those offsets."""
    context, epoch = leader()
    client = context.client
    assert client.prepare_append(epoch, [b"a", b"b", b"c"]) == 3
    assert client.prepare_append(epoch, [b"d", b"e"]) == 5
    assert client.prepare_append(epoch, [b"f"]) == 6
    client.schedule_prepared_append()
    run_linger_out(context)
    assert context.log_end_offset == 7
    values = [v for _, _, batch in data_batches(context) for v in batch]
    assert values == [b"a", b"b", b"c", b"d", b"e", b"f"]

    listener: RecordingListener[bytes] = RecordingListener()
    client.register(listener)
    replicate_all(context)
    assert listener.last_offset == 6
    assert listener.records == values


def test_the_records_of_one_prepare_append_stay_in_one_batch() -> None:
    """§2: the records of one prepare_append stay within one Batch, even when they do not fit
    in what is left of the current one."""
    context, epoch = leader(max_batch_size_bytes=400)
    client = context.client
    appends = [
        [b"a" * 40, b"b" * 40, b"c" * 40],
        [b"d" * 40, b"e" * 40, b"f" * 40],
        [b"g" * 10],
        [b"h" * 40, b"i" * 40, b"j" * 40, b"k" * 40],
    ]
    ranges = []
    for records in appends:
        last = client.prepare_append(epoch, records)
        ranges.append((last - len(records) + 1, last))
    client.schedule_prepared_append()
    run_linger_out(context)

    listener: RecordingListener[bytes] = RecordingListener()
    client.register(listener)
    replicate_all(context)
    data = [b for b in listener.batches if not b.control_records]
    assert len(data) >= 2  # the appends did not all fit in one batch
    for first, last in ranges:
        assert any(b.base_offset <= first and last <= b.last_offset for b in data), (
            f"records {first}-{last} were split across {spans(data)}"
        )
    assert listener.records == [r for records in appends for r in records]


# =================================================================================================
# draining: schedule_prepared_append and linger
# =================================================================================================
def test_nothing_drains_until_schedule_prepared_append() -> None:
    """§1.10: a prepared append holds back everything from its first record until
    schedule_prepared_append, however long it waits."""
    context, epoch = leader()
    client = context.client
    assert client.prepare_append(epoch, [b"a"]) == 1
    assert client.prepare_append(epoch, [b"b"]) == 2
    for _ in range(4):
        context.advance(LINGER_MS)
        context.poll_until_idle()
    assert context.log_end_offset == 1

    client.schedule_prepared_append()
    context.poll_until_idle()
    assert context.log_end_offset == 3
    assert [v for _, _, batch in data_batches(context) for v in batch] == [b"a", b"b"]


def test_a_scheduled_append_drains_after_the_linger_and_poll_reports_it() -> None:
    """§1.10: a batch waits append_linger_ms from the first append before it drains, and the
    timeout poll() returns is what remains of it (Kafka's
    testChannelWokenUpIfLingerTimeoutReachedWithoutAppend)."""
    context, epoch = leader()
    assert context.client.prepare_append(epoch, [b"a"]) == 1
    context.client.schedule_prepared_append()

    assert context.poll() == LINGER_MS
    assert context.log_end_offset == 1
    context.advance(20)
    assert context.poll() == LINGER_MS - 20
    assert context.log_end_offset == 1
    context.advance(LINGER_MS - 20)
    context.poll()
    assert context.log_end_offset == 2


def test_the_linger_starts_at_the_first_append() -> None:
    """§1.10: linger starts at the first append; later appends join the batch and do not
    restart it."""
    context, epoch = leader()
    client = context.client
    client.prepare_append(epoch, [b"a"])
    client.schedule_prepared_append()
    assert context.poll() == LINGER_MS
    context.advance(30)
    client.prepare_append(epoch, [b"b"])
    client.schedule_prepared_append()
    assert context.poll() == LINGER_MS - 30
    context.advance(LINGER_MS - 30)
    context.poll()
    assert context.log_end_offset == 3
    assert data_batches(context) == [(1, 2, [b"a", b"b"])]


def test_an_append_after_the_linger_expired_drains_on_the_next_poll() -> None:
    """§1.10: once the linger has run out, the next poll drains everything scheduled (Kafka's
    testChannelWokenUpIfLingerTimeoutReachedDuringAppend)."""
    context, epoch = leader()
    client = context.client
    assert client.prepare_append(epoch, [b"a"]) == 1
    client.schedule_prepared_append()
    assert context.poll() == LINGER_MS
    context.advance(LINGER_MS)
    wakeups = context.queue.wakeups
    assert client.prepare_append(epoch, [b"b"]) == 2
    assert context.queue.wakeups > wakeups  # ready to drain now: the client is woken
    client.schedule_prepared_append()
    context.poll()
    assert context.log_end_offset == 3


def test_a_full_batch_drains_without_waiting_for_the_linger() -> None:
    """§1.10: time_until_drain is 0 once the head batch is complete and drainable: an append
    that did not fit in the current batch lets the earlier batch drain at once."""
    context, epoch = leader(max_batch_size_bytes=256)
    client = context.client
    client.prepare_append(epoch, [b"a" * 150])
    client.schedule_prepared_append()
    assert context.poll() == LINGER_MS
    wakeups = context.queue.wakeups
    client.prepare_append(epoch, [b"b" * 150])  # completes the first batch
    assert context.queue.wakeups > wakeups
    client.schedule_prepared_append()
    context.poll()
    assert context.log_end_offset > 1
    assert data_batches(context)[0] == (1, 1, [b"a" * 150])


def test_an_append_from_a_listener_callback_sets_the_poll_timeout() -> None:
    """§1.10/§2: poll() returns the linger left when a listener appended during delivery (as a
    state machine does when told it leads)."""

    class ClaimingListener(RecordingListener[bytes]):
        def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
            super().handle_leader_change(leader)
            if leader.leader_id == LOCAL:
                context.client.prepare_append(leader.epoch, [b"claim"])
                context.client.schedule_prepared_append()

    context, epoch = leader()
    listener = ClaimingListener(auto_close=False)
    context.client.register(listener)
    replicate_all(context)
    assert len(listener.open_readers) == 1  # the LeaderChange: the claim waits for it
    listener.read_open_readers()
    assert context.poll() == LINGER_MS
    assert listener.leader_changes[-1] == LeaderAndEpoch(LOCAL, epoch)
    assert context.log_end_offset == 1
    context.advance(LINGER_MS)
    context.poll()
    assert data_batches(context) == [(1, 1, [b"claim"])]


def test_a_new_leaders_first_append_follows_its_leader_change() -> None:
    """§1.10: the epoch's accumulator starts at the log end offset and the LeaderChange is its
    first batch: an append made before that batch drains still gets the next offset."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS).append_to_log(1, [b"old", b"older"]).build()
    )
    context.expire_election_timeout()
    for _ in range(10):
        if context.role == "Leader":
            break
        context.poll()
        for request in context.sent_requests(VoteRequest):
            assert isinstance(request.body, VoteRequest)
            context.deliver_response(
                request,
                VoteResponse(
                    leader_epoch=request.body.replica_epoch,
                    vote_granted=True,
                ),
            )
    assert context.role == "Leader"
    assert context.log_end_offset == 2  # the LeaderChange is not in the log yet
    assert context.client.prepare_append(context.epoch, [b"new"]) == 3
    context.client.schedule_prepared_append()
    run_linger_out(context)
    batches = context.log.batches()
    assert [(b.base_offset, b.is_control) for b in batches] == [(0, False), (2, True), (3, False)]


def test_a_single_voter_commits_its_appends_on_the_drain() -> None:
    """§1.10: leader poll drains, appends and updates the HW: a single voter commits at once and
    its listener gets the records (Kafka's testLeaderAppendSingleMemberQuorum)."""
    context: RaftTestContext[bytes] = RaftClientBuilder(LOCAL, (LOCAL,)).build()
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    context.poll_until_idle()
    assert context.role == "Leader"
    assert context.high_watermark == 1
    epoch = context.epoch

    assert context.client.prepare_append(epoch, [b"a", b"b", b"c"]) == 3
    context.client.schedule_prepared_append()
    run_linger_out(context)
    assert context.high_watermark == 4
    assert spans(listener.batches) == [(0, 0), (1, 3)]
    assert listener.records == [b"a", b"b", b"c"]


# =================================================================================================
# wakeups
# =================================================================================================
def test_the_first_append_wakes_the_client() -> None:
    """§1.10/§2: the first append into an empty accumulator wakes the client (so it sees the
    linger); another append that is not ready to drain does not."""
    context, epoch = leader()
    client = context.client
    wakeups = context.queue.wakeups
    client.prepare_append(epoch, [b"a"])
    assert context.queue.wakeups == wakeups + 1
    client.prepare_append(epoch, [b"b"])
    assert context.queue.wakeups == wakeups + 1

    client.schedule_prepared_append()
    run_linger_out(context)
    assert context.log_end_offset == 3
    wakeups = context.queue.wakeups
    client.prepare_append(epoch, [b"c"])  # the first append after a drain
    assert context.queue.wakeups == wakeups + 1


def test_schedule_prepared_append_wakes_the_client() -> None:
    """§1.10: schedule_prepared_append is allowDrain plus a wakeup."""
    context, epoch = leader()
    context.client.prepare_append(epoch, [b"a"])
    wakeups = context.queue.wakeups
    context.client.schedule_prepared_append()
    assert context.queue.wakeups == wakeups + 1


# =================================================================================================
# leadership loss
# =================================================================================================
def _lose_to_begin_quorum_epoch(context: RaftTestContext[bytes], epoch: int) -> str:
    context.deliver_request(
        BeginQuorumEpochRequest(
            leader_id=2,
            leader_epoch=epoch + 1,
            voter_id=LOCAL,
            leader_endpoints=(Endpoint("CONTROLLER", "localhost", 9992),),
        ),
        source=2,
    )
    context.poll()
    return "Follower"


def _lose_to_granted_vote(context: RaftTestContext[bytes], epoch: int) -> str:
    context.deliver_request(
        VoteRequest(
            replica_epoch=epoch + 1,
            replica_id=2,
            last_offset_epoch=epoch,
            last_offset=context.log_end_offset,
            voter_id=LOCAL,
        ),
        source=2,
    )
    context.poll()
    return "Voted"


def _lose_to_rejected_vote(context: RaftTestContext[bytes], epoch: int) -> str:
    context.deliver_request(
        VoteRequest(
            replica_epoch=epoch + 1,
            replica_id=2,
            last_offset_epoch=0,
            last_offset=0,
            voter_id=LOCAL,
        ),
        source=2,
    )
    context.poll()
    return "Unattached"


def _resign(context: RaftTestContext[bytes], epoch: int) -> str:
    context.client.resign(epoch)
    context.poll()
    return "Resigned"


LEADERSHIP_LOSSES = {
    "begin-quorum-epoch": _lose_to_begin_quorum_epoch,
    "granted-vote": _lose_to_granted_vote,
    "rejected-vote": _lose_to_rejected_vote,
    "resign": _resign,
}


@pytest.mark.parametrize("scheduled", [True, False], ids=["scheduled", "prepared"])
@pytest.mark.parametrize("loss", sorted(LEADERSHIP_LOSSES))
def test_undrained_appends_are_dropped_when_leadership_ends(loss: str, scheduled: bool) -> None:
    """§1.10: the accumulator is closed when leadership ends, which drops unflushed appends:
    they never reach the log (Kafka's testAccumulatorClearedAfterBecoming*)."""
    context, epoch = leader()
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    assert context.client.prepare_append(epoch, [b"a", b"b"]) == 2
    if scheduled:
        context.client.schedule_prepared_append()

    role = LEADERSHIP_LOSSES[loss](context, epoch)
    assert context.role == role
    for _ in range(3):
        context.advance(LINGER_MS)
        context.poll()
    assert context.log_end_offset == 1
    assert data_batches(context) == []
    assert listener.records == []
    with pytest.raises(NotLeaderError):
        context.client.prepare_append(epoch, [b"c"])
    with pytest.raises(NotLeaderError):
        context.client.schedule_prepared_append()


def test_dropped_appends_do_not_come_back_with_a_later_leadership() -> None:
    """§1.10: one accumulator per leader epoch: records dropped with an old epoch are not written
    when this replica leads again."""
    context, epoch = leader()
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    context.client.prepare_append(epoch, [b"lost"])
    context.client.schedule_prepared_append()
    _lose_to_rejected_vote(context, epoch)
    assert context.role == "Unattached"

    new_epoch = context.become_leader()
    assert new_epoch > epoch
    run_linger_out(context)
    assert context.log_end_offset == 2  # two LeaderChange batches, nothing else
    assert data_batches(context) == []
    assert context.client.prepare_append(new_epoch, [b"new"]) == 2
    context.client.schedule_prepared_append()
    run_linger_out(context)
    replicate_all(context)
    assert listener.records == [b"new"]
