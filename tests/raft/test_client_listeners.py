"""The listener registry and what listeners are told (docs/protocol.md §2, ``handleCommit`` and
``handleLeaderChange``, ``register``/``unregister``).

Followers get their committed data from Fetch responses; leaders commit when the other voters
fetch (FetchRequest with ``max_wait_ms=0``), as in Kafka's ``KafkaRaftClientTest``
(testListenerCommitCallbackAfterLeaderWrite, testHandleLeaderChangeFiresAfter*,
testLateRegisteredListenerCatchesUp, testReregistrationChangesListenerContext,
testHandleCommitCallbackFiresAfterFollowerHighWatermarkAdvances).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pytest

from kraft.protocol.messages import (
    BeginQuorumEpochRequest,
    Endpoint,
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
    VoteRequest,
)
from kraft.raft.listeners import Batch, BatchReader, LeaderAndEpoch
from kraft.record.batch import encode_batch
from kraft.record.control import (
    ControlRecordType,
    LeaderChangeMessage,
    LeaderChangeVoter,
    control_batch,
)
from kraft.testing import RaftClientBuilder, RaftTestContext, RecordingListener

LOCAL = 1
VOTERS = (1, 2, 3)
FOLLOWER_EPOCH = 5
REMOTE_LEADER = 2
TIMESTAMP_MS = 1_704_067_200_000


# -- a record type whose identity shows whether the leader delivered from memory ----------------
@dataclass(eq=True)
class Box:
    """A record object: equal by value, but each decode makes a new one."""

    value: str


class BoxSerde:
    def encode(self, value: Box) -> bytes:
        return value.value.encode()

    def decode(self, data: bytes | memoryview) -> Box:
        return Box(bytes(data).decode())


class TimelineListener(RecordingListener[Any]):
    """A RecordingListener that also keeps commits and leader changes in one timeline."""

    def __init__(self, auto_close: bool = True) -> None:
        super().__init__(auto_close)
        self.timeline: list[tuple[str, Any]] = []

    def handle_commit(self, reader: BatchReader[Any]) -> None:
        super().handle_commit(reader)
        self.timeline.append(("commit", self.last_offset if self.auto_close else None))

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        super().handle_leader_change(leader)
        self.timeline.append(("leader", leader))


# -- followers -----------------------------------------------------------------------------------
def follower(*batches: tuple[int, list[bytes]]) -> RaftTestContext[bytes]:
    """Local 1 follows 2 in epoch 5, with ``batches`` (epoch, values) in its log."""
    builder: RaftClientBuilder[bytes] = RaftClientBuilder(LOCAL, VOTERS).with_elected_leader(
        FOLLOWER_EPOCH, REMOTE_LEADER
    )
    for epoch, values in batches:
        builder.append_to_log(epoch, values)
    return builder.build()


def answer_fetch(context: RaftTestContext[Any], high_watermark: int, records: bytes = b"") -> None:
    """Poll until the follower fetches, answer with ``records`` and ``high_watermark``, poll."""
    context.poll()
    request, _ = context.single_sent_request(FetchRequest)
    context.deliver_response(
        request,
        FetchResponse(
            high_watermark=high_watermark,
            records=records,
            current_leader=LeaderIdAndEpoch(REMOTE_LEADER, FOLLOWER_EPOCH),
        ),
    )
    context.poll()


def begin_quorum_epoch(context: RaftTestContext[Any], leader: int, epoch: int) -> None:
    context.deliver_request(
        BeginQuorumEpochRequest(
            leader_id=leader,
            leader_epoch=epoch,
            voter_id=LOCAL,
            leader_endpoints=(Endpoint("CONTROLLER", "localhost", 9990 + leader),),
        ),
        source=leader,
    )
    context.poll()


# -- leaders -------------------------------------------------------------------------------------
def leader(
    serde: Any = None, batches: tuple[tuple[int, list[bytes]], ...] = ()
) -> tuple[RaftTestContext[Any], int]:
    builder: RaftClientBuilder[Any] = RaftClientBuilder(LOCAL, VOTERS, serde=serde)
    for epoch, values in batches:
        builder.append_to_log(epoch, values)
    context = builder.build()
    return context, context.become_leader()


def fetch_from(
    context: RaftTestContext[Any], replica: int, offset: int, last_fetched_epoch: int
) -> None:
    """Voter ``replica`` fetches at ``offset`` (its log end): the leader counts it."""
    context.deliver_request(
        FetchRequest(
            replica_id=replica,
            current_leader_epoch=context.epoch,
            fetch_offset=offset,
            last_fetched_epoch=last_fetched_epoch,
            max_wait_ms=0,
        ),
        source=replica,
    )
    context.poll()


def replicate_all(context: RaftTestContext[Any]) -> None:
    """Voter 2 fetches at the leader's log end: the HW moves there."""
    fetch_from(context, REMOTE_LEADER, context.log_end_offset, context.epoch)
    context.poll_until_idle()


def append(context: RaftTestContext[Any], records: list[Any]) -> int:
    """prepare_append + schedule_prepared_append, then run the linger out so it drains."""
    offset = context.client.prepare_append(context.epoch, records)
    context.client.schedule_prepared_append()
    context.advance(context.config.append_linger_ms)
    context.poll_until_idle()
    assert context.log_end_offset == offset + 1
    return offset


def spans(batches: list[Batch[Any]]) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for b in batches]


# =================================================================================================
# register / unregister
# =================================================================================================
def test_registration_takes_effect_on_the_next_poll_and_wakes_the_client() -> None:
    """§2: register is queued, applied at the start of pollListeners, and wakes the IO thread."""
    context = follower((3, [b"a", b"b"]))
    first: RecordingListener[bytes] = RecordingListener()
    context.client.register(first)
    answer_fetch(context, high_watermark=2)
    assert spans(first.batches) == [(0, 1)]

    second: RecordingListener[bytes] = RecordingListener()
    wakeups = context.queue.wakeups
    context.client.register(second)
    assert context.queue.wakeups == wakeups + 1
    assert second not in context.client.listeners()
    assert second.batches == [] and second.leader_changes == []

    context.poll()
    assert second in context.client.listeners()
    assert spans(second.batches) == [(0, 1)]
    assert second.leader_changes == [LeaderAndEpoch(REMOTE_LEADER, FOLLOWER_EPOCH)]


def test_unregistration_takes_effect_on_the_next_poll_without_a_wakeup() -> None:
    """§2: unregister is queued and applied on the next poll; it does not wake the IO thread."""
    context = follower((3, [b"a"]), (3, [b"b"]))
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    answer_fetch(context, high_watermark=1)
    assert spans(listener.batches) == [(0, 0)]

    wakeups = context.queue.wakeups
    context.client.unregister(listener)
    assert context.queue.wakeups == wakeups
    assert listener in context.client.listeners()  # not yet applied

    answer_fetch(context, high_watermark=2)  # its first poll applies the unregistration
    assert listener not in context.client.listeners()
    assert spans(listener.batches) == [(0, 0)]  # the newly committed batch never reached it


def test_registering_a_listener_twice_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    """§2: a duplicate registration is only logged: one context, each batch delivered once."""
    context = follower((3, [b"a"]))
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    context.client.register(listener)
    with caplog.at_level(logging.WARNING, logger="kraft.raft.client"):
        answer_fetch(context, high_watermark=1)
    assert any("registered already" in r.getMessage() for r in caplog.records)
    assert context.client.listeners() == [listener]
    assert spans(listener.batches) == [(0, 0)]
    assert listener.leader_changes == [LeaderAndEpoch(REMOTE_LEADER, FOLLOWER_EPOCH)]

    # Registering it again later neither resets its progress nor repeats anything.
    context.client.register(listener)
    context.poll()
    assert context.client.listener_next_offset(listener) == 1
    assert spans(listener.batches) == [(0, 0)]
    assert len(listener.leader_changes) == 1


def test_unregistering_an_unknown_listener_is_only_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """§2: unregistering a listener that is not registered is only logged."""
    context = follower((3, [b"a"]))
    registered: RecordingListener[bytes] = RecordingListener()
    context.client.register(registered)
    context.client.unregister(RecordingListener())
    with caplog.at_level(logging.WARNING, logger="kraft.raft.client"):
        answer_fetch(context, high_watermark=1)
    assert any("not registered" in r.getMessage() for r in caplog.records)
    assert context.client.listeners() == [registered]
    assert spans(registered.batches) == [(0, 0)]


def test_registrations_are_applied_in_order() -> None:
    """§2: registrations are queued; register then unregister before a poll leaves it out."""
    context = follower((3, [b"a"]))
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    context.client.unregister(listener)
    answer_fetch(context, high_watermark=1)
    assert context.client.listeners() == []
    assert listener.batches == [] and listener.leader_changes == []


def test_reregistering_starts_a_new_context_from_the_log_start() -> None:
    """§2: a new context starts at next offset -1: a re-registered listener reads from 0 again,
    and an unregistered one gets nothing meanwhile (Kafka's
    testReregistrationChangesListenerContext)."""
    context = follower((3, [b"a"]), (3, [b"b"]))
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    answer_fetch(context, high_watermark=1)
    context.client.unregister(listener)
    answer_fetch(context, high_watermark=2)
    assert spans(listener.batches) == [(0, 0)]

    context.client.register(listener)
    context.poll()
    assert spans(listener.batches) == [(0, 0), (0, 0), (1, 1)]


# =================================================================================================
# handle_commit
# =================================================================================================
def test_each_listener_reads_from_its_own_next_offset() -> None:
    """§2: delivery starts at the listener's own next offset: two listeners registered at
    different times each get everything from offset 0, once."""
    context = follower((3, [b"a", b"b"]), (3, [b"c"]), (5, [b"d"]))
    early: RecordingListener[bytes] = RecordingListener()
    context.client.register(early)
    answer_fetch(context, high_watermark=3)
    assert early.records == [b"a", b"b", b"c"]

    late: RecordingListener[bytes] = RecordingListener()
    context.client.register(late)
    answer_fetch(context, high_watermark=4)
    assert early.records == [b"a", b"b", b"c", b"d"]
    assert late.records == [b"a", b"b", b"c", b"d"]
    assert spans(early.batches) == spans(late.batches) == [(0, 1), (2, 2), (3, 3)]
    assert context.client.listener_next_offset(early) == 4
    assert context.client.listener_next_offset(late) == 4


def test_a_listener_catches_up_during_an_election_once_the_hw_is_known() -> None:
    """§2: delivery depends only on the HW: a listener registered after the leader lost its
    epoch still reads every committed batch, and is not told the old local leadership
    (Kafka's testHandleCommitCallbackFiresInVotedState)."""
    context, epoch = leader(
        batches=(
            (2, [b"a", b"b", b"c"]),
            (4, [b"d", b"e", b"f"]),
            (4, [b"g", b"h", b"i"]),
        )
    )
    replicate_all(context)
    assert context.high_watermark == 10
    context.deliver_request(
        VoteRequest(
            replica_epoch=epoch + 1,
            replica_id=2,
            last_offset_epoch=epoch,
            last_offset=10,
            voter_id=LOCAL,
        ),
        source=2,
    )
    context.poll()
    assert context.role == "Voted"

    late: RecordingListener[bytes] = RecordingListener()
    context.client.register(late)
    context.poll()
    assert context.role == "Voted"
    assert spans(late.batches) == [(0, 2), (3, 5), (6, 8), (9, 9)]
    assert late.leader_changes == [LeaderAndEpoch(None, epoch + 1)]


def test_listeners_at_the_same_offset_share_one_decoding_of_the_log() -> None:
    """Two listeners expecting the same offset get each batch from one decoding: the same
    record objects (as from memory on a leader), each in a list of its own; a listener at
    another offset decodes for itself."""
    builder: RaftClientBuilder[Box] = RaftClientBuilder(
        LOCAL, VOTERS, serde=BoxSerde()
    ).with_elected_leader(FOLLOWER_EPOCH, REMOTE_LEADER)
    builder.append_to_log(3, [b"a", b"b"]).append_to_log(3, [b"c"])
    context = builder.build()
    loader: RecordingListener[Box] = RecordingListener()
    controller: RecordingListener[Box] = RecordingListener()
    context.client.register(loader)
    context.client.register(controller)
    answer_fetch(context, high_watermark=3)

    assert loader.records == controller.records == [Box("a"), Box("b"), Box("c")]
    assert all(a is b for a, b in zip(loader.records, controller.records, strict=True))
    assert all(
        a.records is not b.records for a, b in zip(loader.batches, controller.batches, strict=True)
    )
    late: RecordingListener[Box] = RecordingListener()
    context.client.register(late)
    context.poll()
    assert late.records == loader.records
    assert all(a is not b for a, b in zip(late.records, loader.records, strict=True))


def test_a_follower_delivers_nothing_at_or_above_the_high_watermark() -> None:
    """§2: committed data only: a batch is delivered once the HW passes its last offset
    (Kafka's testHandleCommitCallbackFiresAfterFollowerHighWatermarkAdvances)."""
    context = follower()
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    first = encode_batch(0, 4, [b"a", b"b", b"c"], timestamp_ms=TIMESTAMP_MS)
    answer_fetch(context, high_watermark=0, records=first)
    assert context.log_end_offset == 3
    assert listener.batches == []

    second = encode_batch(3, 5, [b"d", b"e"], timestamp_ms=TIMESTAMP_MS)
    answer_fetch(context, high_watermark=4, records=second)  # inside the second batch
    assert context.log_end_offset == 5
    assert spans(listener.batches) == [(0, 2)]
    assert listener.records == [b"a", b"b", b"c"]
    assert listener.batches[0].epoch == 4

    answer_fetch(context, high_watermark=5)
    assert spans(listener.batches) == [(0, 2), (3, 4)]
    assert listener.batches[1].epoch == 5


def test_a_leader_delivers_nothing_at_or_above_the_high_watermark() -> None:
    """§2: committed data only: on the leader, drained batches wait for the HW."""
    context, epoch = leader()
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    context.poll()
    append(context, [b"a", b"b"])
    append(context, [b"c"])
    assert context.log_end_offset == 4
    assert listener.batches == []  # no HW yet

    fetch_from(context, 2, 1, epoch)  # voter 2 holds the LeaderChange only
    context.poll_until_idle()
    assert context.high_watermark == 1
    assert spans(listener.batches) == [(0, 0)]

    fetch_from(context, 2, 3, epoch)  # ... and the first data batch
    context.poll_until_idle()
    assert spans(listener.batches) == [(0, 0), (1, 2)]

    replicate_all(context)
    assert spans(listener.batches) == [(0, 0), (1, 2), (3, 3)]
    assert listener.records == [b"a", b"b", b"c"]


class SentAtCommit(RecordingListener[Any]):
    """Records, at each ``handle_commit``, what the client had sent so far."""

    def __init__(self, context: RaftTestContext[Any]) -> None:
        super().__init__()
        self.context = context
        self.sent_at_commit: list[tuple[int, int]] = []

    def handle_commit(self, reader: BatchReader[Any]) -> None:
        channel = self.context.channel
        self.sent_at_commit.append((len(channel.requests), len(channel.responses)))
        super().handle_commit(reader)


def test_a_follower_sends_its_next_fetch_before_the_listeners_hear_of_the_commit() -> None:
    """kraft (latency): the poll that handles a Fetch response sends the next Fetch first and
    delivers the commit after it, so listener work never delays the replication round trip."""
    context = follower()
    listener = SentAtCommit(context)
    context.client.register(listener)
    context.poll()
    request, _ = context.single_sent_request(FetchRequest)
    context.deliver_response(
        request,
        FetchResponse(
            high_watermark=2,
            records=encode_batch(0, FOLLOWER_EPOCH, [b"a", b"b"], timestamp_ms=TIMESTAMP_MS),
            current_leader=LeaderIdAndEpoch(REMOTE_LEADER, FOLLOWER_EPOCH),
        ),
    )
    context.poll()  # one poll: append, next Fetch, then the listener
    assert listener.records == [b"a", b"b"]
    assert listener.sent_at_commit == [(1, 0)]
    _, body = context.single_sent_request(FetchRequest)
    assert (body.fetch_offset, body.high_watermark) == (2, 2)


def test_the_leader_answers_the_fetch_that_commits_before_the_listeners_hear_of_it() -> None:
    """kraft (latency): on the leader, the Fetch that moves the HW is answered (with the new
    HW) in the same poll, before the listeners are told of the commit."""
    context, epoch = leader()
    listener = SentAtCommit(context)
    context.client.register(listener)
    context.poll()
    context.sent_responses()
    append(context, [b"a"])
    assert listener.batches == []
    fetch_from(context, 2, 2, epoch)  # one poll: voter 2 has everything; the HW moves to 2
    assert context.high_watermark == 2
    assert spans(listener.batches) == [(0, 0), (1, 1)]
    assert all(responses == 1 for _, responses in listener.sent_at_commit)
    (answer,) = context.sent_responses(FetchResponse)
    assert isinstance(answer.body, FetchResponse) and answer.body.high_watermark == 2


def test_the_leader_change_batch_is_delivered_with_empty_records_and_decoded_controls() -> None:
    """§2: control batches arrive with empty ``records``; their control records are decoded
    (the LeaderChange written at the start of the epoch)."""
    context, epoch = leader()
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    replicate_all(context)

    assert len(listener.batches) == 1
    batch = listener.batches[0]
    assert (batch.base_offset, batch.last_offset, batch.epoch) == (0, 0, epoch)
    assert batch.records == []
    assert len(batch.control_records) == 1
    control = batch.control_records[0]
    assert control.type is ControlRecordType.LEADER_CHANGE
    assert isinstance(control.message, LeaderChangeMessage)
    assert control.message.leader_id == LOCAL
    assert [v.voter_id for v in control.message.voters] == list(VOTERS)
    assert LOCAL in [v.voter_id for v in control.message.granting_voters]


def test_a_follower_delivers_a_fetched_control_batch_with_decoded_controls() -> None:
    """§2: control batches read from the log arrive with empty ``records`` and their decoded
    control records, between the data batches around them."""
    context = follower()
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    message = LeaderChangeMessage(
        leader_id=REMOTE_LEADER,
        voters=tuple(LeaderChangeVoter(v) for v in VOTERS),
        granting_voters=(LeaderChangeVoter(2), LeaderChangeVoter(3)),
    )
    records = (
        encode_batch(0, 4, [b"a"], timestamp_ms=TIMESTAMP_MS)
        + control_batch(1, 5, [message], timestamp_ms=TIMESTAMP_MS)
        + encode_batch(2, 5, [b"b"], timestamp_ms=TIMESTAMP_MS)
    )
    answer_fetch(context, high_watermark=3, records=records)

    assert spans(listener.batches) == [(0, 0), (1, 1), (2, 2)]
    assert listener.records == [b"a", b"b"]
    control = listener.batches[1]
    assert control.records == []
    assert [(c.type, c.message) for c in control.control_records] == [
        (ControlRecordType.LEADER_CHANGE, message)
    ]
    assert listener.batches[0].control_records == []


def test_the_leader_delivers_a_batch_from_memory_when_the_listener_expects_it() -> None:
    """§2: on the leader, a listener whose next offset is the batch's base offset gets the very
    record objects that were appended (Kafka's testListenerCommitCallbackAfterLeaderWrite)."""
    context, _ = leader(serde=BoxSerde())
    listener: RecordingListener[Box] = RecordingListener()
    context.client.register(listener)
    replicate_all(context)
    assert context.client.listener_next_offset(listener) == 1

    records = [Box("a"), Box("b"), Box("c")]
    last = append(context, records)
    assert last == 3
    assert spans(listener.batches) == [(0, 0)]
    replicate_all(context)

    assert spans(listener.batches) == [(0, 0), (1, 3)]
    delivered = listener.batches[1].records
    assert delivered == records
    assert all(got is sent for got, sent in zip(delivered, records, strict=True))


def test_a_lagging_listener_on_the_leader_reads_from_the_log() -> None:
    """§2: when the listener's next offset is not the committed batch's base offset, the leader
    reads the batches from the log (decoded anew by the serde) (Kafka's
    testLateRegisteredListenerCatchesUp)."""
    context, _ = leader(serde=BoxSerde())
    early: RecordingListener[Box] = RecordingListener()
    context.client.register(early)
    replicate_all(context)
    records = [Box("a"), Box("b")]
    append(context, records)
    replicate_all(context)
    assert early.records[0] is records[0]

    late: RecordingListener[Box] = RecordingListener()
    context.client.register(late)
    context.poll()
    assert spans(late.batches) == [(0, 0), (1, 2)]
    assert late.records == records
    assert all(got is not sent for got, sent in zip(late.records, records, strict=True))


def test_a_batch_from_memory_and_the_same_batch_from_the_log_agree() -> None:
    """§2: a Batch has base/last offset, epoch, append timestamp, size and records, the same
    whether the leader hands it over from memory or reads it from the log."""
    context, _ = leader()
    from_memory: RecordingListener[bytes] = RecordingListener()
    context.client.register(from_memory)
    replicate_all(context)
    context.advance(7)
    append(context, [b"a" * 10, b"b"])
    replicate_all(context)

    from_log: RecordingListener[bytes] = RecordingListener()
    context.client.register(from_log)
    context.poll()
    assert len(from_memory.batches) == len(from_log.batches) == 2
    for mine, theirs in zip(from_memory.batches, from_log.batches, strict=True):
        assert mine == theirs
        assert mine.append_timestamp_ms == theirs.append_timestamp_ms
        assert mine.size_in_bytes == theirs.size_in_bytes
    data = from_memory.batches[1]
    assert (data.base_offset, data.last_offset, data.epoch) == (1, 2, context.epoch)
    assert data.append_timestamp_ms == context.clock.wall_ms() - context.config.append_linger_ms
    assert data.size_in_bytes == context.log.batches()[1].size_in_bytes


def test_an_open_log_reader_blocks_delivery_until_closed() -> None:
    """§2: while a reader over the log is open the listener gets nothing more; close() moves it
    past what it read, and delivery resumes."""
    context = follower((3, [b"a"]), (3, [b"b"]), (5, [b"c"]))
    listener: RecordingListener[bytes] = RecordingListener(auto_close=False)
    context.client.register(listener)
    answer_fetch(context, high_watermark=2)
    assert len(listener.open_readers) == 1

    answer_fetch(context, high_watermark=3)
    context.poll()
    assert len(listener.open_readers) == 1  # nothing new while the first is open
    assert context.client.listener_next_offset(listener) is None

    listener.read_open_readers()
    assert spans(listener.batches) == [(0, 0), (1, 1)]
    assert context.client.listener_next_offset(listener) == 2
    context.poll()
    assert len(listener.open_readers) == 1
    listener.read_open_readers()
    assert spans(listener.batches) == [(0, 0), (1, 1), (2, 2)]


def test_closing_a_log_reader_wakes_the_client() -> None:
    """§2: close() of the reader last handed out wakes the client, so delivery resumes."""
    context = follower((3, [b"a"]))
    listener: RecordingListener[bytes] = RecordingListener(auto_close=False)
    context.client.register(listener)
    answer_fetch(context, high_watermark=1)
    wakeups = context.queue.wakeups
    listener.open_readers[0].close()
    assert context.queue.wakeups == wakeups + 1


def test_closing_a_log_reader_without_iterating_redelivers_the_same_batches() -> None:
    """§2: a log reader's last offset is known only from what was iterated: closed unread, the
    listener's next offset does not move and the same batches come again."""
    context = follower((3, [b"a", b"b"]), (3, [b"c"]))
    listener: RecordingListener[bytes] = RecordingListener(auto_close=False)
    context.client.register(listener)
    answer_fetch(context, high_watermark=3)
    unread = listener.open_readers.pop()
    unread.close()
    assert context.client.listener_next_offset(listener) == 0

    context.poll()
    assert len(listener.open_readers) == 1
    listener.read_open_readers()
    assert spans(listener.batches) == [(0, 1), (2, 2)]
    assert listener.records == [b"a", b"b", b"c"]


def test_closing_a_partly_read_log_reader_resumes_after_the_last_batch_read() -> None:
    """§2 (listeners.py): close() moves the listener past the last batch it iterated; the rest
    is delivered again."""
    context = follower((3, [b"a"]), (3, [b"b"]), (3, [b"c"]))
    listener: RecordingListener[bytes] = RecordingListener(auto_close=False)
    context.client.register(listener)
    answer_fetch(context, high_watermark=3)
    reader = listener.open_readers.pop()
    first = next(iter(reader))
    reader.close()
    assert (first.base_offset, first.last_offset) == (0, 0)
    assert context.client.listener_next_offset(listener) == 1

    context.poll()
    listener.read_open_readers()
    assert spans(listener.batches) == [(1, 1), (2, 2)]


def test_an_open_memory_reader_does_not_block_the_next_batch() -> None:
    """§2: a reader from memory knows its end, so on the leader the next committed batch follows
    before the previous reader is closed."""
    context, _ = leader(serde=BoxSerde())
    listener: RecordingListener[Box] = RecordingListener(auto_close=False)
    context.client.register(listener)
    replicate_all(context)
    listener.read_open_readers()  # the LeaderChange, from the log
    context.poll()

    first, second = [Box("a")], [Box("b"), Box("c")]
    append(context, first)
    replicate_all(context)
    assert len(listener.open_readers) == 1
    assert context.client.listener_next_offset(listener) == 2

    append(context, second)
    replicate_all(context)
    assert len(listener.open_readers) == 2  # the first one is still open
    listener.read_open_readers()
    assert spans(listener.batches) == [(0, 0), (1, 1), (2, 3)]
    assert listener.records[0] is first[0]
    assert listener.records[1] is second[0]
    assert context.client.listener_next_offset(listener) == 4


def test_an_open_log_reader_on_the_leader_holds_back_newer_commits() -> None:
    """§2: while the reader holding the LeaderChange is open, a data batch that commits is not
    handed over; after close() it is delivered (read from the log)."""
    context, _ = leader(serde=BoxSerde())
    listener: RecordingListener[Box] = RecordingListener(auto_close=False)
    context.client.register(listener)
    replicate_all(context)
    assert len(listener.open_readers) == 1

    records = [Box("a")]
    append(context, records)
    replicate_all(context)
    assert len(listener.open_readers) == 1

    listener.read_open_readers()
    context.poll()
    listener.read_open_readers()
    assert spans(listener.batches) == [(0, 0), (1, 1)]
    assert listener.records == records


def test_one_listeners_open_reader_does_not_hold_back_another() -> None:
    """§2: progress is per listener: a listener holding a reader open delays only itself."""
    context = follower((3, [b"a"]), (3, [b"b"]))
    holding: RecordingListener[bytes] = RecordingListener(auto_close=False)
    reading: RecordingListener[bytes] = RecordingListener()
    context.client.register(holding)
    context.client.register(reading)
    answer_fetch(context, high_watermark=1)
    answer_fetch(context, high_watermark=2)
    assert spans(reading.batches) == [(0, 0), (1, 1)]
    assert len(holding.open_readers) == 1
    assert holding.batches == []


# =================================================================================================
# handle_leader_change
# =================================================================================================
def test_leader_change_fires_for_an_unknown_then_a_known_leader_once_each() -> None:
    """§2: at most twice per epoch, leader unknown then known, deduplicated per listener
    (Kafka's testHandleLeaderChangeFiresAfterUnattachedRegistration)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS).with_unknown_leader(7).build()
    )
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    context.poll()
    assert listener.leader_changes == [LeaderAndEpoch(None, 7)]

    begin_quorum_epoch(context, REMOTE_LEADER, 7)
    assert context.role == "Follower"
    begin_quorum_epoch(context, REMOTE_LEADER, 7)
    for _ in range(3):
        context.poll()
    assert listener.leader_changes == [LeaderAndEpoch(None, 7), LeaderAndEpoch(REMOTE_LEADER, 7)]


def test_leader_change_epochs_never_go_back() -> None:
    """§2: the epochs a listener is told are monotonic; an older leader changes nothing."""
    context = follower()
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    context.poll()
    begin_quorum_epoch(context, 3, FOLLOWER_EPOCH + 2)
    begin_quorum_epoch(context, REMOTE_LEADER, FOLLOWER_EPOCH)  # stale: fenced
    context.deliver_request(
        VoteRequest(
            replica_epoch=FOLLOWER_EPOCH + 3,
            replica_id=3,
            last_offset_epoch=0,
            last_offset=0,
            voter_id=LOCAL,
        ),
        source=3,
    )
    context.poll()
    context.poll()
    assert listener.leader_changes == [
        LeaderAndEpoch(REMOTE_LEADER, FOLLOWER_EPOCH),
        LeaderAndEpoch(3, FOLLOWER_EPOCH + 2),
        LeaderAndEpoch(None, FOLLOWER_EPOCH + 3),
    ]
    epochs = [change.epoch for change in listener.leader_changes]
    assert epochs == sorted(epochs)


def test_a_late_listener_gets_the_current_leader_on_the_next_poll() -> None:
    """§2: a listener registered late is told the current leader and epoch on the next poll
    (Kafka's testHandleLeaderChangeFiresAfterFollowerRegistration)."""
    context = follower()
    first: RecordingListener[bytes] = RecordingListener()
    context.client.register(first)
    for _ in range(3):
        context.poll()
    late: RecordingListener[bytes] = RecordingListener()
    context.client.register(late)
    assert late.leader_changes == []
    context.poll()
    assert late.leader_changes == [LeaderAndEpoch(REMOTE_LEADER, FOLLOWER_EPOCH)]
    assert first.leader_changes == [LeaderAndEpoch(REMOTE_LEADER, FOLLOWER_EPOCH)]


def test_on_the_leader_the_leader_change_waits_for_the_epoch_start_offset() -> None:
    """§2: when this node leads, handle_leader_change waits until the listener's next offset
    passes the epoch start offset (Kafka's
    testHandleLeaderChangeFiresAfterListenerReachesEpochStartOffsetOnEmptyLog)."""
    context: RaftTestContext[bytes] = RaftClientBuilder(LOCAL, VOTERS).build()
    listener = TimelineListener()
    context.client.register(listener)
    epoch = context.become_leader()
    context.poll()
    assert context.log_end_offset == 1
    me = LeaderAndEpoch(LOCAL, epoch)
    assert me not in listener.leader_changes
    assert listener.batches == []

    fetch_from(context, 2, 0, 0)  # voter 2 has nothing: the HW cannot reach the epoch start
    context.poll()
    assert me not in listener.leader_changes
    assert listener.batches == []

    fetch_from(context, 2, 1, epoch)
    context.poll()
    assert spans(listener.batches) == [(0, 0)]
    assert listener.leader_changes[-1] == me
    assert listener.leader_changes.count(me) == 1
    # Told after the commit that took it past the epoch start, never before.
    assert listener.timeline.index(("leader", me)) > listener.timeline.index(("commit", 0))


def test_on_the_leader_the_leader_change_follows_every_earlier_commit() -> None:
    """§2: the new leader's listener sees every batch up to and including the LeaderChange
    before it is told it leads (Kafka's
    testHandleLeaderChangeFiresAfterListenerReachesEpochStartOffset)."""
    context, epoch = leader(
        batches=(
            (1, [b"1", b"2", b"3"]),
            (1, [b"4", b"5", b"6"]),
            (2, [b"7", b"8", b"9"]),
        )
    )
    listener = TimelineListener()
    context.client.register(listener)
    context.poll()
    assert context.log_end_offset == 10
    me = LeaderAndEpoch(LOCAL, epoch)

    fetch_from(context, 2, 3, 1)  # below the epoch start: no HW
    context.poll()
    assert listener.batches == []
    assert me not in listener.leader_changes

    fetch_from(context, 2, 10, epoch)
    context.poll_until_idle()
    assert spans(listener.batches) == [(0, 2), (3, 5), (6, 8), (9, 9)]
    assert listener.records == [str(i).encode() for i in range(1, 10)]
    assert listener.batches[3].control_records[0].type is ControlRecordType.LEADER_CHANGE
    assert listener.timeline[-1] == ("leader", me)
    assert listener.timeline[-2] == ("commit", 9)


def test_on_the_leader_an_open_reader_over_the_epoch_start_delays_the_leader_change() -> None:
    """§2: the leader change waits while the reader holding the LeaderChange is open (the
    listener has not passed the epoch start), and fires on the poll after close()."""
    context, epoch = leader()
    listener: RecordingListener[bytes] = RecordingListener(auto_close=False)
    context.client.register(listener)
    replicate_all(context)
    assert len(listener.open_readers) == 1
    me = LeaderAndEpoch(LOCAL, epoch)
    assert me not in listener.leader_changes

    listener.read_open_readers()
    context.poll()
    assert listener.leader_changes[-1] == me


def test_a_late_listener_on_the_leader_is_told_after_catching_up() -> None:
    """§2: a listener registered on a leader is told it leads once it has read past the epoch
    start, after its commits (Kafka's testLateRegisteredListenerCatchesUp)."""
    context, epoch = leader(batches=((1, [b"1", b"2", b"3"]), (2, [b"4"])))
    first = TimelineListener()
    context.client.register(first)
    replicate_all(context)
    me = LeaderAndEpoch(LOCAL, epoch)
    assert first.leader_changes[-1] == me

    late = TimelineListener(auto_close=False)
    context.client.register(late)
    context.poll()
    assert me not in late.leader_changes
    late.read_open_readers()
    context.poll()
    assert spans(late.batches) == [(0, 2), (3, 3), (4, 4)]
    assert late.leader_changes == [me]


def test_no_leader_change_is_fired_in_resigned_at_startup() -> None:
    """§2: not fired in Resigned: a replica that restarts as the stored leader is Resigned, and
    even a newly registered listener is told nothing (Kafka's
    testHandleLeaderChangeFiresAfterResignRegistration)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2)).with_elected_leader(7, LOCAL).build()
    )
    first: RecordingListener[bytes] = RecordingListener()
    context.client.register(first)
    context.poll()
    assert context.role == "Resigned"
    late: RecordingListener[bytes] = RecordingListener()
    context.client.register(late)
    context.poll()
    assert context.role == "Resigned"
    assert first.leader_changes == []
    assert late.leader_changes == []


def test_no_leader_change_is_fired_after_resigning() -> None:
    """§2: not fired in Resigned: a leader whose listener has not reached the epoch start
    resigns, and the listener is not told of the local leader meanwhile."""
    context, epoch = leader()
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    context.poll()
    before = list(listener.leader_changes)
    context.client.resign(epoch)
    context.poll()
    assert context.role == "Resigned"
    late: RecordingListener[bytes] = RecordingListener()
    context.client.register(late)
    for _ in range(3):
        context.poll()
    assert context.role == "Resigned"
    assert listener.leader_changes == before
    assert LeaderAndEpoch(LOCAL, epoch) not in listener.leader_changes
    assert late.leader_changes == []
