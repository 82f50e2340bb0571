"""The high watermark, on the leader and on followers (docs/protocol.md §1.5), and the
LeaderChange control record that starts every leader epoch (§1.9) and lets it advance.

Leader: the HW is the end offset held by a majority of voters (index ``voters // 2`` of their
end offsets, best first, the leader included); it is only set once that passes the epoch
start offset, never decreases, starts unset in each new leadership, and moves only on fetches
from voters. Follower: ``min(LEO, leader HW)``, never decreasing. Kafka's counterparts:
LeaderStateTest (testUpdateHighWatermarkQuorumSizeThree, ...QuorumSizeTwo,
testNonMonotonicHighWatermarkUpdate, testHighWatermarkUnknownUntilStartOfLeaderEpoch) and
KafkaRaftClientTest (testLeaderAppendSingleMemberQuorum, testFollowerReplication, ...).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

from kraft.protocol.messages import FetchRequest, FetchResponse, LeaderIdAndEpoch
from kraft.raft.fetch_server import FetchServer
from kraft.record.batch import encode_batch, iter_batches
from kraft.record.control import (
    ControlRecordType,
    LeaderChangeMessage,
    LeaderChangeVoter,
    control_records,
)
from kraft.testing import RaftClientBuilder, RaftTestContext, RecordingListener, fetch_request

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated importlib calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch

LOCAL = 1
FOLLOWER_EPOCH = 5


# max_wait 0 (the default): every fetch is answered in its poll, so each test sees each HW
# it causes.
fetch = fetch_request


def leader_context(
    voters: tuple[int, ...] = (1, 2, 3), old_records: int = 0
) -> RaftTestContext[bytes]:
    """Replica 1 leads epoch 2 of ``voters``; ``old_records`` epoch-1 records precede the
    LeaderChange, which sits at the epoch start offset (= ``old_records``)."""
    builder: RaftClientBuilder[bytes] = RaftClientBuilder(LOCAL, voters)
    if old_records:
        builder.append_to_log(1, [b"old-%d" % i for i in range(old_records)])
    ctx = builder.with_unknown_leader(1).build()
    assert ctx.become_leader() == 2
    assert ctx.client.state.epoch_start_offset == old_records  # type: ignore[union-attr]
    assert ctx.log_end_offset == old_records + 1
    ctx.sent_requests()
    ctx.sent_responses()
    return ctx


def append(ctx: RaftTestContext[bytes], records: list[bytes]) -> int:
    """Append through the leader and poll until the batch is in the log."""
    offset = ctx.append_and_drain(records)
    assert ctx.log_end_offset == offset + 1
    return offset


def hw(ctx: RaftTestContext[bytes]) -> int | None:
    """The HW the client knows (a call, so that a type checker does not narrow it)."""
    return ctx.high_watermark


def epoch_before(ctx: RaftTestContext[bytes], offset: int) -> int:
    """The epoch of the record at ``offset - 1`` in the leader's log (0 for offset 0): what a
    fetcher whose log agrees with the leader's sends as last_fetched_epoch."""
    for batch in ctx.log.batches():
        if batch.base_offset <= offset - 1 <= batch.last_offset:
            return batch.epoch
    return 0


def replica_fetches(ctx: RaftTestContext[bytes], replica_id: int, offset: int) -> FetchResponse:
    """``replica_id``, its log agreeing with the leader's up to ``offset``, fetches there."""
    ctx.deliver_request(fetch(ctx.epoch, replica_id, offset, epoch_before(ctx, offset)), replica_id)
    ctx.poll()
    body = ctx.single_sent_response(FetchResponse)
    assert isinstance(body, FetchResponse)
    return body


# =============================================================================================
# Leader
# =============================================================================================
def test_a_new_leader_has_no_high_watermark() -> None:
    """§1.5: a newly elected leader of several voters has no HW; its Fetch answers say -1."""
    ctx = leader_context(old_records=2)
    assert hw(ctx) is None
    response = replica_fetches(ctx, 3, 0)  # an empty voter: nothing past the epoch start
    assert response.high_watermark == -1
    assert hw(ctx) is None


def test_records_of_older_epochs_do_not_commit_by_themselves() -> None:
    """§1.5 (KIP-595): a majority holding every older record, up to the epoch start offset,
    sets no HW; the HW appears once a majority holds the LeaderChange of this epoch."""
    ctx = leader_context(old_records=2)
    assert replica_fetches(ctx, 2, 2).high_watermark == -1  # holds offsets 0-1 only
    assert hw(ctx) is None
    assert ctx.log.high_watermark == 0
    response = replica_fetches(ctx, 2, 3)  # holds the LeaderChange too
    assert response.high_watermark == 3
    assert hw(ctx) == 3
    assert ctx.log.high_watermark == 3


def test_the_high_watermark_is_the_offset_a_majority_holds_of_five() -> None:
    """§1.5: with five voters the HW is the third-best end offset (index 5 // 2), the
    leader's own LEO counting."""
    ctx = leader_context(voters=(1, 2, 3, 4, 5))
    append(ctx, [b"a", b"b", b"c", b"d"])  # LEO 5
    replica_fetches(ctx, 2, 5)
    assert hw(ctx) is None  # 2 of 5
    replica_fetches(ctx, 3, 3)
    assert hw(ctx) == 3  # [5, 5, 3]
    replica_fetches(ctx, 4, 4)
    assert hw(ctx) == 4  # [5, 5, 4, 3]
    replica_fetches(ctx, 5, 5)
    assert hw(ctx) == 5  # [5, 5, 5, 4, 3]


def test_with_four_voters_three_must_hold_a_record() -> None:
    """§1.5: an even quorum needs voters // 2 + 1: with four, the leader and two others."""
    ctx = leader_context(voters=(1, 2, 3, 4))
    append(ctx, [b"a"])  # LEO 2
    replica_fetches(ctx, 2, 2)
    assert hw(ctx) is None
    replica_fetches(ctx, 3, 1)
    assert hw(ctx) == 1
    replica_fetches(ctx, 4, 2)
    assert hw(ctx) == 2


def test_with_two_voters_both_must_hold_a_record() -> None:
    """§1.5: voters // 2 = 1: with two voters, the follower's offset is the HW."""
    ctx = leader_context(voters=(1, 2))
    append(ctx, [b"a", b"b"])  # LEO 3
    replica_fetches(ctx, 2, 2)
    assert hw(ctx) == 2
    replica_fetches(ctx, 2, 3)
    assert hw(ctx) == 3


def test_the_leader_high_watermark_never_decreases() -> None:
    """§1.5: a lower candidate (here a voter reporting a smaller offset) never lowers the HW;
    the answer still carries the HW already reached."""
    ctx = leader_context()
    append(ctx, [b"a", b"b", b"c", b"d"])  # LEO 5
    replica_fetches(ctx, 2, 5)
    assert hw(ctx) == 5
    response = replica_fetches(ctx, 2, 3)
    assert response.high_watermark == 5
    assert hw(ctx) == 5
    assert ctx.log.high_watermark == 5
    replica_fetches(ctx, 3, 4)  # the majority offset is now 4: still not lower
    assert hw(ctx) == 5


def test_the_leader_append_alone_does_not_commit_with_followers() -> None:
    """§1.5: the leader's appends move only its own end offset; with three voters nothing
    commits until a follower has fetched past the new records, and then a listener on the
    leader gets the batch."""
    ctx = leader_context()
    listener: RecordingListener[bytes] = RecordingListener()
    ctx.client.register(listener)
    replica_fetches(ctx, 2, 1)
    assert hw(ctx) == 1
    append(ctx, [b"x", b"y"])  # offsets 1-2
    assert hw(ctx) == 1
    ctx.poll()
    assert listener.records == []
    replica_fetches(ctx, 3, 3)
    assert hw(ctx) == 3
    ctx.poll()
    assert listener.records == [b"x", b"y"]


@pytest.mark.parametrize(
    ("fetcher", "describe"),
    [(4, "an observer"), (-1, "an anonymous replica")],
    ids=["observer", "anonymous"],
)
def test_only_voters_move_the_high_watermark(fetcher: int, describe: str) -> None:
    """§1.5/§1.8: fetches from observers and from replica id -1 are served but never count
    towards the HW."""
    ctx = leader_context()
    append(ctx, [b"x"])  # LEO 2
    response = replica_fetches(ctx, fetcher, 0)
    assert [b.base_offset for b in iter_batches(response.records)] == [0, 1], describe
    assert replica_fetches(ctx, fetcher, 2).high_watermark == -1  # caught up: no effect
    assert hw(ctx) is None
    replica_fetches(ctx, 2, 2)
    assert hw(ctx) == 2


def test_a_single_voter_commits_on_its_own_append() -> None:
    """§1.5: the only voter is its own majority: its LeaderChange and then every batch it
    appends commit as soon as they are in its log, and its listener gets them."""
    ctx: RaftTestContext[bytes] = RaftClientBuilder(LOCAL, (LOCAL,)).build()
    listener: RecordingListener[bytes] = RecordingListener()
    ctx.client.register(listener)
    assert ctx.role == "Leader"
    ctx.poll()
    assert (ctx.log_end_offset, hw(ctx)) == (1, 1)
    append(ctx, [b"a", b"b"])
    assert hw(ctx) == 3
    assert ctx.log.high_watermark == 3
    ctx.poll()
    assert listener.records == [b"a", b"b"]


def test_a_new_leader_forgets_the_high_watermark_it_knew_as_follower() -> None:
    """§1.5: a new leader starts with no HW, even though as a follower it knew one; the HW
    comes back once a majority holds the new epoch's LeaderChange."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_elected_leader(1, 2).build()
    )
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    ctx.deliver_response(
        sent,
        FetchResponse(
            high_watermark=3,
            records=encode_batch(0, 1, [b"a", b"b", b"c"], timestamp_ms=0),
            current_leader=LeaderIdAndEpoch(2, 1),
        ),
    )
    ctx.poll()
    assert hw(ctx) == 3
    epoch = ctx.become_leader()
    assert epoch > 1
    assert hw(ctx) is None
    ctx.sent_responses()
    ctx.deliver_request(fetch(epoch, 3, 3, 1), 3)  # holds the old records only
    ctx.poll()
    body = ctx.single_sent_response(FetchResponse)
    assert isinstance(body, FetchResponse)
    assert body.high_watermark == -1
    ctx.deliver_request(fetch(epoch, 3, 4, epoch), 3)
    ctx.poll()
    assert hw(ctx) == 4


# =============================================================================================
# Follower
# =============================================================================================
def follower_context(listener: RecordingListener[bytes] | None = None) -> RaftTestContext[bytes]:
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3)).with_elected_leader(FOLLOWER_EPOCH, 2).build()
    )
    if listener is not None:
        ctx.client.register(listener)
    return ctx


class Leader:
    """Plays the leader (2) of a follower context: answers each fetch in turn."""

    def __init__(self, ctx: RaftTestContext[bytes]) -> None:
        self.ctx = ctx
        ctx.poll()
        self.pending, self.fetch = ctx.single_sent_request(FetchRequest)

    def sends(self, high_watermark: int, values: tuple[bytes, ...] = ()) -> FetchRequest:
        """Answer the pending fetch with ``values`` (one record per batch) and the leader's
        ``high_watermark``; return the follower's next fetch."""
        ctx = self.ctx
        records = b"".join(
            encode_batch(self.fetch.fetch_offset + i, FOLLOWER_EPOCH, [v], timestamp_ms=0)
            for i, v in enumerate(values)
        )
        ctx.deliver_response(
            self.pending,
            FetchResponse(
                high_watermark=high_watermark,
                records=records,
                current_leader=LeaderIdAndEpoch(2, FOLLOWER_EPOCH),
            ),
        )
        ctx.poll()
        ctx.poll()
        self.pending, self.fetch = ctx.single_sent_request(FetchRequest)
        return self.fetch


def test_follower_high_watermark_is_min_of_its_leo_and_the_leaders() -> None:
    """§1.4/§1.5: the follower's HW is min(LEO, leader HW); it goes into the log and into the
    follower's next fetch (KIP-1166)."""
    ctx = follower_context()
    leader = Leader(ctx)
    assert leader.fetch.high_watermark == -1
    next_fetch = leader.sends(10, (b"a", b"b", b"c"))
    assert hw(ctx) == 3
    assert ctx.log.high_watermark == 3
    assert next_fetch.high_watermark == 3
    next_fetch = leader.sends(4, (b"d", b"e"))
    assert hw(ctx) == 4
    assert (next_fetch.fetch_offset, next_fetch.high_watermark) == (5, 4)


def test_follower_high_watermark_stays_unknown_while_the_leader_has_none() -> None:
    """§1.4: a leader HW of -1 (unknown) sets nothing; the follower keeps sending -1."""
    ctx = follower_context()
    next_fetch = Leader(ctx).sends(-1, (b"a",))
    assert hw(ctx) is None
    assert ctx.log.high_watermark == 0
    assert next_fetch.high_watermark == -1


def test_follower_high_watermark_never_decreases() -> None:
    """§1.4: a lower leader HW does not lower the follower's (Kafka fails on it; kraft keeps
    its HW)."""
    ctx = follower_context()
    leader = Leader(ctx)
    leader.sends(3, (b"a", b"b", b"c"))
    next_fetch = leader.sends(1)
    assert hw(ctx) == 3
    assert ctx.log.high_watermark == 3
    assert next_fetch.high_watermark == 3


def test_follower_listeners_get_only_committed_records() -> None:
    """§1.5/§2: listeners read below the HW only; a record reaches them once the leader's HW
    passes it."""
    listener: RecordingListener[bytes] = RecordingListener()
    ctx = follower_context(listener)
    leader = Leader(ctx)
    leader.sends(2, (b"a", b"b", b"c"))
    assert listener.records == [b"a", b"b"]
    leader.sends(3)
    assert listener.records == [b"a", b"b", b"c"]


# =============================================================================================
# §1.9 LeaderChange and the leader's appends
# =============================================================================================
def test_each_leader_epoch_starts_with_a_leader_change_batch() -> None:
    """§1.9: the first batch of every leader epoch, at its epoch start offset, is a control
    batch of that epoch holding one LEADER_CHANGE record: the leader, all the voters, and
    the voters that granted it (the leader among them, a majority)."""
    ctx = leader_context(old_records=2)
    ctx.client.resign(2)
    ctx.poll()
    ctx.expire_election_timeout()
    ctx.poll()
    second_epoch = ctx.become_leader()
    assert second_epoch > 2
    starts = {2: 2, second_epoch: 3}
    batches = {b.base_offset: b for b in ctx.log.batches()}
    for epoch, start in starts.items():
        batch = batches[start]
        assert (batch.is_control, batch.epoch, batch.records_count) == (True, epoch, 1)
        [(kind, message)] = control_records(batch)
        assert kind is ControlRecordType.LEADER_CHANGE
        assert isinstance(message, LeaderChangeMessage)
        assert message.leader_id == LOCAL
        assert message.voters == tuple(LeaderChangeVoter(v) for v in (1, 2, 3))
        granting = {v.voter_id for v in message.granting_voters}
        assert LOCAL in granting and granting <= {1, 2, 3} and len(granting) >= 2
    assert ctx.log.epoch_entries() == [(1, 0), (2, 2), (second_epoch, 3)]


def test_the_leader_change_comes_before_any_data_of_the_epoch() -> None:
    """§1.9: records appended right after the election follow the LeaderChange batch."""
    ctx = leader_context()
    append(ctx, [b"x"])
    kinds = [(b.base_offset, b.is_control, b.epoch) for b in ctx.log.batches()]
    assert kinds == [(0, True, 2), (1, False, 2)]


def test_the_leader_writes_the_accumulators_encoded_batches() -> None:
    """§1.10/§1.13: the leader appends the accumulator's pre-encoded v2 bytes (no
    re-encoding through append_as_leader); they are valid Kafka batches of its epoch, as an
    independent parser (kafka-python) confirms."""
    ctx = leader_context(old_records=1)
    calls: list[str] = []

    def spy(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return method(*args, **kwargs)

        return wrapper

    log = ctx.log
    log.append_encoded = spy("append_encoded", log.append_encoded)  # type: ignore[method-assign]
    log.append_as_leader = spy("append_as_leader", log.append_as_leader)  # type: ignore[method-assign]
    append(ctx, [b"x", b"y"])
    append(ctx, [b"z"])
    assert calls == ["append_encoded", "append_encoded"]
    raw = log.read(1).records
    theirs = []
    for batch in iter_batches(raw):  # our reader verifies every CRC
        parsed = DefaultRecordBatch(bytes(batch))
        assert parsed.validate_crc()
        assert parsed.leader_epoch == 2
        theirs.append((parsed.base_offset, parsed.is_control_batch, [r.value for r in parsed]))
    assert theirs[0][:2] == (1, True)  # the LeaderChange
    assert theirs[1:] == [(2, False, [b"x", b"y"]), (4, False, [b"z"])]


def test_a_fetch_that_moves_the_high_watermark_answers_parked_fetches_without_re_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """KIP-1166: a Fetch that moves the HW completes, in the same poll, a parked Fetch whose
    fetcher is now behind; the parked one is answered after the Fetch that moved the HW
    returned, never from inside it (docs/protocol.md, "Following a Fetch")."""
    depth = deepest = 0
    complete = FetchServer._complete_valid_fetch

    def tracking(self: FetchServer[bytes], *args: Any) -> FetchResponse:
        nonlocal depth, deepest
        depth += 1
        deepest = max(deepest, depth)
        try:
            return complete(self, *args)
        finally:
            depth -= 1

    monkeypatch.setattr(FetchServer, "_complete_valid_fetch", tracking)
    ctx = leader_context(voters=(1, 2, 3, 4, 5))
    append(ctx, [b"a"])
    replica_fetches(ctx, 2, 2)
    replica_fetches(ctx, 3, 2)
    assert hw(ctx) == 2
    append(ctx, [b"b"])  # LEO 3
    ctx.deliver_request(
        fetch(ctx.epoch, 4, 3, epoch_before(ctx, 3), max_wait_ms=500, high_watermark=2), 4
    )
    ctx.poll()
    assert ctx.sent_responses(FetchResponse) == []  # parked: nothing new for replica 4
    ctx.deliver_request(fetch(ctx.epoch, 2, 3, epoch_before(ctx, 3)), 2)
    ctx.poll()
    assert hw(ctx) == 3
    answers = {r.destination: r.body for r in ctx.sent_responses(FetchResponse)}
    assert sorted(answers) == [2, 4]
    assert all(isinstance(b, FetchResponse) and b.high_watermark == 3 for b in answers.values())
    assert deepest == 1
