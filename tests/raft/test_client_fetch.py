"""The Fetch path, both ends (docs/protocol.md §1.4).

Leader side: validation, the immediate answers (records, ``max_wait_ms`` 0, errors, KIP-1166),
the long poll in the fetch purgatory and the three ways a parked fetch ends (the leader
appends, the wait expires, leadership is lost).

Follower side: what a Fetch carries, how fetched batches are appended (as bytes, flushed by
voters before the next fetch), the fetch timer, one fetch in flight, backoff after an error,
and refusing corrupt records.

Divergence (truncation) is in test_client_divergence.py, the high watermark in
test_client_high_watermark.py. Kafka's counterparts are in ``KafkaRaftClientTest``
(testInvalidFetchRequest, testPurgatoryFetchTimeout, testPurgatoryFetchSatisfiedByWrite,
testPurgatoryFetchCompletedByFollowerTransition, testFollowerReplication, ...).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kraft.common.limits import INT64_MAX
from kraft.config import ConfigError, QuorumConfig
from kraft.config import Endpoint as ConfigEndpoint
from kraft.protocol.api import METADATA_TOPIC_NAME
from kraft.protocol.envelope import InboundRequest, InboundResponse
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    BeginQuorumEpochRequest,
    Endpoint,
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.channel import DequeMessageQueue
from kraft.record.batch import encode_batch, iter_batches
from kraft.testing import RaftClientBuilder, RaftTestContext, fetch_request

LOCAL, LEADER, OTHER, OBSERVER = 1, 2, 3, 4
VOTERS = (1, 2, 3)
FOLLOWER_EPOCH = 5


# -- helpers ----------------------------------------------------------------------------------
# Followers long-poll: 500 ms unless a test says otherwise.
fetch = functools.partial(fetch_request, max_wait_ms=500)


def leader_context(**config: object) -> RaftTestContext[bytes]:
    """Replica 1 leads epoch 2 of voters (1, 2, 3). Offsets 0-1 are epoch 1 records, offset 2
    the LeaderChange of epoch 2 (the epoch start offset); the LEO is 3, no HW yet."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS)
        .append_to_log(1, [b"a", b"b"])
        .with_unknown_leader(1)
        .with_config(**config)
        .build()
    )
    epoch = ctx.become_leader()
    assert (epoch, ctx.log_end_offset, ctx.high_watermark) == (2, 3, None)
    ctx.sent_requests()
    ctx.sent_responses()
    return ctx


def leader_with_high_watermark() -> RaftTestContext[bytes]:
    """:func:`leader_context` after voter 2 caught up (max wait 0): the HW is 3 = LEO."""
    ctx = leader_context()
    ctx.deliver_request(fetch(ctx.epoch, LEADER, 3, ctx.epoch, max_wait_ms=0), LEADER)
    ctx.poll()
    ctx.sent_responses()
    assert ctx.high_watermark == 3
    return ctx


def the_fetch_response(ctx: RaftTestContext[bytes]) -> FetchResponse:
    body = ctx.single_sent_response(FetchResponse)
    assert isinstance(body, FetchResponse)
    return body


append = RaftTestContext.append_and_drain


def follower_context(local_id: int = LOCAL, **config: object) -> RaftTestContext[bytes]:
    """Replica ``local_id`` follows 2 in epoch 5; its log holds two epoch-1 records."""
    return (
        RaftClientBuilder(local_id, VOTERS)
        .append_to_log(1, [b"a", b"b"])
        .with_elected_leader(FOLLOWER_EPOCH, LEADER)
        .with_config(**config)
        .build()
    )


def leader_says(
    *,
    records: bytes = b"",
    high_watermark: int = -1,
    error: int = Errors.NONE,
    epoch: int = FOLLOWER_EPOCH,
    leader: int = LEADER,
) -> FetchResponse:
    return FetchResponse(
        partition_error_code=error,
        high_watermark=high_watermark,
        records=records,
        current_leader=LeaderIdAndEpoch(leader, epoch),
    )


def values(records: bytes) -> list[bytes | None]:
    return [value for batch in iter_batches(records) for value in batch.values()]


# =============================================================================================
# Leader side: validation
# =============================================================================================
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_wait_ms", -1),
        ("fetch_offset", -1),
        ("last_fetched_epoch", -1),
        ("last_fetched_epoch", 3),  # above the request's current_leader_epoch (2)
    ],
)
def test_invalid_fetch_fields_are_answered_with_invalid_request(field: str, value: int) -> None:
    """§1.4: maxWait<0, offset<0, lastFetchedEpoch<0 or > currentLeaderEpoch is
    INVALID_REQUEST, before any other check; the leader stays leader and names itself."""
    ctx = leader_context()
    fields: dict[str, Any] = {
        "replica_id": LEADER,
        "current_leader_epoch": 2,
        "max_wait_ms": 500,
        "fetch_offset": 0,
        "last_fetched_epoch": 0,
        field: value,
    }
    ctx.deliver_request(FetchRequest(**fields), LEADER)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert response.partition_error_code == Errors.INVALID_REQUEST
    assert response.records == b""
    assert response.current_leader == LeaderIdAndEpoch(LOCAL, 2)
    assert ctx.role == "Leader"
    assert ctx.high_watermark is None


@pytest.mark.parametrize(
    "override",
    [
        {"topic_name": "other-topic"},
        {"partition_index": 1},
        {"topic_id": uuid.UUID(int=12345)},
    ],
    ids=["topic-name", "partition", "topic-id"],
)
def test_fetch_for_another_topic_partition_is_invalid_request(override: dict[str, object]) -> None:
    """§1.2/§1.4: a Fetch for another topic-partition is a top-level INVALID_REQUEST."""
    ctx = leader_context()
    fields: dict[str, Any] = {
        "replica_id": LEADER,
        "current_leader_epoch": 2,
        "fetch_offset": 3,
        "last_fetched_epoch": 2,
        "max_wait_ms": 0,
        **override,
    }
    ctx.deliver_request(FetchRequest(**fields), LEADER)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert response.error_code == Errors.INVALID_REQUEST
    assert ctx.high_watermark is None  # the request was not counted


def test_fetch_from_another_cluster_is_refused() -> None:
    """§1.3: a request naming another cluster id is answered INCONSISTENT_CLUSTER_ID (top
    level); one without a cluster id is served."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS)
        .append_to_log(1, [b"a", b"b"])
        .with_unknown_leader(1)
        .with_cluster_id("cluster-a")
        .build()
    )
    epoch = ctx.become_leader()
    ctx.sent_responses()
    ctx.deliver_request(fetch(epoch, LEADER, 0, 0), LEADER, cluster_id="cluster-b")
    ctx.poll()
    assert the_fetch_response(ctx).error_code == Errors.INCONSISTENT_CLUSTER_ID
    ctx.deliver_request(fetch(epoch, LEADER, 0, 0), LEADER, cluster_id=None)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert (response.error_code, response.partition_error_code) == (Errors.NONE, Errors.NONE)
    assert [b.base_offset for b in iter_batches(response.records)] == [0, 2]


def test_fetch_with_an_older_epoch_is_fenced() -> None:
    """§1.3 leader-only validation: an epoch below the leader's is FENCED_LEADER_EPOCH; the
    answer names the current leader and epoch so that the fetcher catches up."""
    ctx = leader_context()
    ctx.deliver_request(fetch(1, LEADER, 0, 0), LEADER)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert response.partition_error_code == Errors.FENCED_LEADER_EPOCH
    assert response.current_leader == LeaderIdAndEpoch(LOCAL, 2)
    assert response.records == b""


def test_fetch_with_a_newer_epoch_is_unknown_leader_epoch() -> None:
    """§1.3 leader-only validation: an epoch above the leader's is UNKNOWN_LEADER_EPOCH, and
    the leader does not move to that epoch."""
    ctx = leader_context()
    ctx.deliver_request(fetch(3, LEADER, 0, 0), LEADER)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert response.partition_error_code == Errors.UNKNOWN_LEADER_EPOCH
    assert response.current_leader == LeaderIdAndEpoch(LOCAL, 2)
    assert (ctx.role, ctx.epoch) == ("Leader", 2)


def test_a_follower_answers_fetch_with_not_leader_or_follower() -> None:
    """§1.3 leader-only validation: a replica that is not the leader answers a Fetch of its
    epoch with NOT_LEADER_OR_FOLLOWER, naming the leader it knows and its endpoint."""
    ctx = follower_context()
    ctx.deliver_request(fetch(FOLLOWER_EPOCH, OBSERVER, 0, 0), OBSERVER)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert response.partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert response.current_leader == LeaderIdAndEpoch(LEADER, FOLLOWER_EPOCH)
    assert [(n.node_id, n.port) for n in response.node_endpoints] == [(LEADER, 9992)]
    assert ctx.role == "Follower"


def test_an_unattached_replica_answers_fetch_with_not_leader_or_follower() -> None:
    """§1.3 leader-only validation: with no leader known, NOT_LEADER_OR_FOLLOWER names none."""
    ctx: RaftTestContext[bytes] = RaftClientBuilder(LOCAL, VOTERS).with_unknown_leader(4).build()
    ctx.deliver_request(fetch(4, OBSERVER, 0, 0), OBSERVER)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert response.partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert response.current_leader == LeaderIdAndEpoch(-1, 4)


class _ShutdownWhileWaiting:
    """A message queue that asks the client to shut down while its poll waits for a message:
    what happens when the runtime calls ``shutdown()`` from another thread at that moment."""

    def __init__(self, inner: DequeMessageQueue, shutdown: Callable[[], object]) -> None:
        self.inner = inner
        self.shutdown = shutdown

    def add(self, message: InboundRequest | InboundResponse) -> None:
        self.inner.add(message)

    def poll(self, timeout_ms: int) -> InboundRequest | InboundResponse | None:
        self.shutdown()
        return self.inner.poll(timeout_ms)

    def is_empty(self) -> bool:
        return self.inner.is_empty()

    def wakeup(self) -> None:
        self.inner.wakeup()


def test_a_leader_shutting_down_answers_fetch_with_broker_not_available() -> None:
    """§1.3 leader-only validation: a leader whose shutdown has begun answers
    BROKER_NOT_AVAILABLE (it still leads until its next poll resigns)."""
    ctx = leader_context()
    client = ctx.client
    client.queue = _ShutdownWhileWaiting(ctx.queue, lambda: client.shutdown(5000))
    ctx.deliver_request(fetch(2, LEADER, 3, 2, max_wait_ms=0), LEADER)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert response.partition_error_code == Errors.BROKER_NOT_AVAILABLE
    assert response.records == b""


# =============================================================================================
# Leader side: immediate answers and the long poll
# =============================================================================================
def test_fetch_behind_the_log_end_is_answered_at_once_with_records() -> None:
    """§1.4: a valid fetch below the leader's LEO is answered in the same poll with the
    uncommitted records from the fetch offset (whole v2 batches, as the log holds them)."""
    ctx = leader_context()
    ctx.deliver_request(fetch(2, LEADER, 0, 0), LEADER)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert response.partition_error_code == Errors.NONE
    assert response.records == ctx.log.read(0).records
    assert [b.base_offset for b in iter_batches(response.records)] == [0, 2]
    assert response.current_leader == LeaderIdAndEpoch(LOCAL, 2)
    assert response.diverging_epoch is None
    assert response.snapshot_id is None


def test_fetch_in_the_middle_of_the_log_returns_from_that_offset() -> None:
    """§1.4: the records returned start at the fetcher's offset (its LEO)."""
    ctx = leader_context()
    ctx.deliver_request(fetch(2, LEADER, 2, 1), LEADER)
    ctx.poll()
    response = the_fetch_response(ctx)
    batches = list(iter_batches(response.records))
    assert [(b.base_offset, b.epoch, b.is_control) for b in batches] == [(2, 2, True)]


def test_fetch_with_max_wait_zero_is_answered_at_once_when_there_is_nothing_new() -> None:
    """§1.4: maxWait 0 means reply at once, even with nothing to send."""
    ctx = leader_with_high_watermark()
    ctx.deliver_request(fetch(2, OTHER, 3, 2, max_wait_ms=0, high_watermark=3), OTHER)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert response.partition_error_code == Errors.NONE
    assert response.records == b""
    assert response.high_watermark == 3


def test_fetch_at_the_log_end_waits_for_max_wait_then_gets_the_empty_answer() -> None:
    """§1.4: with nothing new the fetch parks in the purgatory; when its wait expires it gets
    the empty answer (no error, no records, the leader and its HW)."""
    ctx = leader_with_high_watermark()
    ctx.deliver_request(fetch(2, OTHER, 3, 2, max_wait_ms=500, high_watermark=3), OTHER)
    ctx.poll()
    assert ctx.sent_responses() == []
    # poll() asks to run again no later than the end of the wait.
    assert 0 < ctx.poll() <= 500
    ctx.advance(499)
    ctx.poll()
    assert ctx.sent_responses() == []
    ctx.advance(1)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert response.partition_error_code == Errors.NONE
    assert response.records == b""
    assert response.high_watermark == 3
    assert response.current_leader == LeaderIdAndEpoch(LOCAL, 2)
    ctx.advance(1000)
    ctx.poll()
    assert ctx.sent_responses() == []  # answered once only


def test_each_parked_fetch_expires_on_its_own_deadline() -> None:
    """§1.4: every parked fetch waits for its own maxWait."""
    ctx = leader_with_high_watermark()
    ctx.deliver_request(fetch(2, OTHER, 3, 2, max_wait_ms=100, high_watermark=3), OTHER)
    ctx.deliver_request(fetch(2, OBSERVER, 3, 2, max_wait_ms=300, high_watermark=3), OBSERVER)
    ctx.poll()
    ctx.poll()
    assert ctx.sent_responses() == []
    ctx.advance(100)
    ctx.poll()
    assert [r.destination for r in ctx.sent_responses(FetchResponse)] == [OTHER]
    ctx.advance(200)
    ctx.poll()
    assert [r.destination for r in ctx.sent_responses(FetchResponse)] == [OBSERVER]


def test_parked_fetch_completes_when_the_leader_appends() -> None:
    """§1.4: a parked fetch completes as soon as the leader's LEO passes its fetch offset,
    with the new records, long before its wait expires."""
    ctx = leader_with_high_watermark()
    ctx.deliver_request(fetch(2, OTHER, 3, 2, max_wait_ms=10_000, high_watermark=3), OTHER)
    ctx.deliver_request(fetch(2, OBSERVER, 3, 2, max_wait_ms=10_000, high_watermark=3), OBSERVER)
    ctx.poll()
    ctx.poll()
    assert ctx.sent_responses() == []
    offset = append(ctx, [b"x", b"y"])
    assert offset == 4
    responses = ctx.sent_responses(FetchResponse)
    assert sorted(r.destination for r in responses) == [OTHER, OBSERVER]
    for sent in responses:
        body = sent.body
        assert isinstance(body, FetchResponse)
        assert body.partition_error_code == Errors.NONE
        assert values(body.records) == [b"x", b"y"]
        assert next(iter_batches(body.records)).base_offset == 3


def test_parked_fetch_is_not_completed_by_a_prepared_append_that_is_not_scheduled() -> None:
    """§1.4 and §1.10: records held back by prepare_append are not in the log, so they do not
    complete a parked fetch."""
    ctx = leader_with_high_watermark()
    ctx.deliver_request(fetch(2, OTHER, 3, 2, max_wait_ms=10_000, high_watermark=3), OTHER)
    ctx.poll()
    ctx.client.prepare_append(2, [b"x"])
    ctx.advance(ctx.config.append_linger_ms)
    ctx.poll()
    assert ctx.log_end_offset == 3
    assert ctx.sent_responses() == []


def _resign(ctx: RaftTestContext[bytes]) -> None:
    ctx.client.resign(ctx.epoch)


def _shutdown(ctx: RaftTestContext[bytes]) -> None:
    ctx.client.shutdown(5000)


def _vote_at_higher_epoch(ctx: RaftTestContext[bytes]) -> None:
    ctx.deliver_request(
        VoteRequest(
            replica_epoch=ctx.epoch + 1, replica_id=OTHER, last_offset_epoch=2, last_offset=3
        ),
        OTHER,
    )


def _new_leader_begins_epoch(ctx: RaftTestContext[bytes]) -> None:
    ctx.deliver_request(
        BeginQuorumEpochRequest(
            leader_id=OTHER,
            leader_epoch=ctx.epoch + 1,
            voter_id=LOCAL,
            leader_endpoints=(Endpoint("CONTROLLER", "localhost", 9993),),
        ),
        OTHER,
    )


@pytest.mark.parametrize(
    ("lose_leadership", "new_role"),
    [
        (_resign, "Resigned"),
        (_shutdown, "Resigned"),
        (_vote_at_higher_epoch, "Voted"),
        (_new_leader_begins_epoch, "Follower"),
    ],
    ids=["resign", "shutdown", "vote-at-higher-epoch", "begin-quorum-epoch"],
)
def test_parked_fetches_fail_with_not_leader_when_leadership_is_lost(
    lose_leadership: Callable[[RaftTestContext[bytes]], None], new_role: str
) -> None:
    """§1.4: when the leader stops leading (resign, shutdown, a higher epoch), every parked
    fetch is answered NOT_LEADER_OR_FOLLOWER at once."""
    ctx = leader_with_high_watermark()
    ctx.deliver_request(fetch(2, OTHER, 3, 2, max_wait_ms=10_000, high_watermark=3), OTHER)
    ctx.deliver_request(fetch(2, OBSERVER, 3, 2, max_wait_ms=10_000, high_watermark=3), OBSERVER)
    ctx.poll()
    ctx.poll()
    assert ctx.sent_responses() == []
    lose_leadership(ctx)
    ctx.poll()
    assert ctx.role == new_role
    responses = ctx.sent_responses(FetchResponse)
    assert sorted(r.destination for r in responses) == [OTHER, OBSERVER]
    for sent in responses:
        body = sent.body
        assert isinstance(body, FetchResponse)
        assert body.partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
        assert body.records == b""
    ctx.advance(20_000)
    ctx.poll()
    assert ctx.sent_responses(FetchResponse) == []  # nothing left parked


# -- KIP-1166 ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fetcher_hw", "answered_at_once"),
    [(-1, True), (2, True), (3, False), (INT64_MAX, False)],
    ids=["unknown", "behind", "equal", "not-supported"],
)
def test_fetch_is_answered_at_once_when_the_leader_hw_is_above_the_fetchers(
    fetcher_hw: int, answered_at_once: bool
) -> None:
    """§1.4 KIP-1166: a fetch with nothing new is still answered at once when the leader's
    HW is above the fetcher's high_watermark field (-1: unknown); a fetcher that is level,
    or does not send the field (INT64_MAX), waits."""
    ctx = leader_with_high_watermark()
    ctx.deliver_request(fetch(2, OTHER, 3, 2, high_watermark=fetcher_hw), OTHER)
    ctx.poll()
    responses = ctx.sent_responses(FetchResponse)
    if answered_at_once:
        assert len(responses) == 1
        body = responses[0].body
        assert isinstance(body, FetchResponse)
        assert body.partition_error_code == Errors.NONE
        assert (body.records, body.high_watermark) == (b"", 3)
    else:
        assert responses == []


def test_fetch_is_parked_when_the_leader_has_no_high_watermark() -> None:
    """§1.4 KIP-1166: a leader with no HW yet has nothing to tell a fetcher whose HW is
    unknown, so its fetch waits."""
    ctx = leader_context()
    ctx.deliver_request(fetch(2, OBSERVER, 3, 2, high_watermark=-1), OBSERVER)
    ctx.poll()
    assert ctx.sent_responses() == []


def test_fetch_that_moves_the_high_watermark_is_answered_at_once() -> None:
    """§1.4 KIP-1166 and §1.5: a voter's fetch that moves the HW above the HW it sent gets the
    new HW at once, without waiting out maxWait."""
    ctx = leader_context()
    ctx.deliver_request(fetch(2, LEADER, 3, 2, max_wait_ms=500, high_watermark=-1), LEADER)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert (response.records, response.high_watermark) == (b"", 3)


def test_parked_fetch_completes_when_the_high_watermark_passes_the_fetchers() -> None:
    """§1.4 KIP-1166: a parked fetch completes when the leader's HW rises above the HW the
    fetcher sent, here because another voter's fetch moved it."""
    ctx = leader_context()
    ctx.deliver_request(fetch(2, OBSERVER, 3, 2, max_wait_ms=10_000, high_watermark=-1), OBSERVER)
    ctx.poll()
    assert ctx.sent_responses() == []  # no HW yet: parked
    ctx.deliver_request(fetch(2, LEADER, 3, 2, max_wait_ms=0, high_watermark=-1), LEADER)
    ctx.poll()
    assert ctx.high_watermark == 3
    responses = {r.destination: r.body for r in ctx.sent_responses(FetchResponse)}
    assert set(responses) == {LEADER, OBSERVER}
    observer = responses[OBSERVER]
    assert isinstance(observer, FetchResponse)
    assert observer.partition_error_code == Errors.NONE
    assert observer.high_watermark == 3


# -- the high watermark linger (kraft) ---------------------------------------------------------
def test_with_a_linger_the_fetch_that_moves_the_high_watermark_waits_for_records() -> None:
    """kraft ``fetch_high_watermark_linger_ms``: the fetch that moves the HW is parked, not
    answered at once; records appended within the linger complete it, carrying the new HW."""
    ctx = leader_context(fetch_high_watermark_linger_ms=5, append_linger_ms=0)
    ctx.deliver_request(fetch(2, LEADER, 3, 2, high_watermark=-1), LEADER)
    ctx.poll()
    assert ctx.high_watermark == 3
    assert ctx.sent_responses() == []
    ctx.advance(2)
    append(ctx, [b"c"])
    response = the_fetch_response(ctx)
    assert response.high_watermark == 3
    assert [b.base_offset for b in iter_batches(response.records)] == [3]


def test_with_a_linger_a_high_watermark_alone_is_sent_when_the_linger_ends() -> None:
    """kraft: with no records to ride on, the new HW goes out once the linger is over."""
    ctx = leader_context(fetch_high_watermark_linger_ms=5)
    ctx.deliver_request(fetch(2, LEADER, 3, 2, high_watermark=-1), LEADER)
    assert ctx.poll() <= 5  # the poll wakes up for the linger's end
    assert ctx.sent_responses() == []
    ctx.advance(4)
    ctx.poll()
    assert ctx.sent_responses() == []
    ctx.advance(1)
    ctx.poll()
    response = the_fetch_response(ctx)
    assert (response.records, response.high_watermark) == (b"", 3)


def test_with_a_linger_a_parked_fetch_waits_at_most_the_linger_after_the_hw_moves() -> None:
    """kraft: a fetch parked for maxWait (10 s) before the HW moved now waits only the linger;
    the fetch that moved the HW waits too."""
    ctx = leader_context(fetch_high_watermark_linger_ms=5)
    ctx.deliver_request(fetch(2, OBSERVER, 3, 2, max_wait_ms=10_000, high_watermark=-1), OBSERVER)
    ctx.poll()
    ctx.advance(100)
    ctx.deliver_request(fetch(2, LEADER, 3, 2, high_watermark=-1), LEADER)
    ctx.poll()
    assert ctx.high_watermark == 3
    assert ctx.sent_responses() == []
    ctx.advance(5)
    ctx.poll()
    responses = {r.destination: r.body for r in ctx.sent_responses(FetchResponse)}
    assert set(responses) == {LEADER, OBSERVER}
    assert all(isinstance(b, FetchResponse) and b.high_watermark == 3 for b in responses.values())


def test_a_negative_high_watermark_linger_is_refused() -> None:
    with pytest.raises(ConfigError, match="fetch_high_watermark_linger_ms"):
        QuorumConfig(
            voters={1: ConfigEndpoint("localhost", 9990)}, fetch_high_watermark_linger_ms=-1
        )


# =============================================================================================
# Follower side
# =============================================================================================
def test_follower_fetches_from_the_leader_at_its_log_end() -> None:
    """§1.3/§1.4: a voter-follower fetches from its leader with its id and directory, the
    leader epoch, fetch_offset = LEO, last_fetched_epoch = the epoch of its last record,
    maxWait = fetch_max_wait_ms and its HW (-1: unknown, KIP-1166)."""
    directory = uuid.UUID(int=77)
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS)
        .append_to_log(1, [b"a", b"b"])
        .append_to_log(3, [b"c"])
        .with_elected_leader(FOLLOWER_EPOCH, LEADER)
        .with_local_directory_id(directory)
        .with_config(fetch_max_wait_ms=321)
        .build()
    )
    ctx.poll()
    sent, body = ctx.single_sent_request(FetchRequest)
    assert sent.destination == LEADER
    assert body.replica_id == LOCAL
    assert body.replica_directory_id == directory
    assert body.current_leader_epoch == FOLLOWER_EPOCH
    assert body.fetch_offset == 3
    assert body.last_fetched_epoch == 3
    assert body.max_wait_ms == 321
    assert body.high_watermark == -1
    assert body.topic_name == METADATA_TOPIC_NAME


def test_observer_and_anonymous_fetchers_identify_themselves() -> None:
    """§1.3/§1.8: an observer fetches with its own id; a replica without an id with -1."""
    observer = follower_context(local_id=OBSERVER)
    observer.poll()
    _, body = observer.single_sent_request(FetchRequest)
    assert body.replica_id == OBSERVER
    anonymous: RaftTestContext[bytes] = (
        RaftClientBuilder(None, VOTERS).with_elected_leader(FOLLOWER_EPOCH, LEADER).build()
    )
    anonymous.poll()
    sent, body = anonymous.single_sent_request(FetchRequest)
    assert (sent.destination, body.replica_id) == (LEADER, -1)


def test_follower_appends_fetched_batches_as_bytes_and_fetches_on() -> None:
    """§1.4: fetched batches are appended as they came (same bytes), and the next fetch
    starts at the new LEO with the new last epoch and the HW learnt."""
    ctx = follower_context()
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    records = encode_batch(2, 4, [b"c"], timestamp_ms=111) + encode_batch(
        3, FOLLOWER_EPOCH, [b"d", b"e"], timestamp_ms=222
    )
    ctx.deliver_response(sent, leader_says(records=records, high_watermark=4))
    ctx.poll()
    assert ctx.log_end_offset == 5
    assert ctx.log.read(2).records == records
    assert ctx.log.epoch_entries() == [(1, 0), (4, 2), (FOLLOWER_EPOCH, 3)]
    ctx.poll()
    sent, body = ctx.single_sent_request(FetchRequest)
    assert sent.destination == LEADER
    assert (body.fetch_offset, body.last_fetched_epoch) == (5, FOLLOWER_EPOCH)
    assert body.high_watermark == 4


def test_empty_fetch_response_leaves_the_log_alone() -> None:
    """§1.4: an answer without records appends nothing; the follower fetches again from the
    same place (Kafka's testEmptyRecordSetInFetchResponse)."""
    ctx = follower_context()
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    before = ctx.log.read(0).records
    ctx.deliver_response(sent, leader_says(high_watermark=1))
    ctx.poll()
    ctx.poll()
    _, body = ctx.single_sent_request(FetchRequest)
    assert (body.fetch_offset, body.last_fetched_epoch) == (2, 1)
    assert ctx.log.read(0).records == before
    assert ctx.role == "Follower"


@pytest.mark.parametrize(
    ("local_id", "always_flush", "flushed"),
    [(LOCAL, False, True), (OBSERVER, False, False), (OBSERVER, True, True)],
    ids=["voter", "observer", "observer-always-flush"],
)
def test_voters_flush_fetched_records_before_the_next_fetch(
    local_id: int, always_flush: bool, flushed: bool
) -> None:
    """§1.4: a voter flushes what it fetched before it fetches again (the leader counts its
    fetch offset towards the HW); an observer flushes only with followers_always_flush."""
    ctx = follower_context(local_id=local_id, followers_always_flush=always_flush)
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    assert ctx.log.last_flushed_offset == 2
    ctx.deliver_response(sent, leader_says(records=encode_batch(2, 5, [b"c"], timestamp_ms=0)))
    ctx.poll()
    ctx.poll()
    _, body = ctx.single_sent_request(FetchRequest)
    assert body.fetch_offset == 3
    assert ctx.log.last_flushed_offset == (3 if flushed else 2)


def test_only_one_fetch_is_in_flight() -> None:
    """§1.4: a follower has at most one Fetch in flight; it waits for the answer."""
    ctx = follower_context()
    ctx.poll()
    assert len(ctx.sent_requests(FetchRequest)) == 1
    for _ in range(5):
        ctx.advance(100)
        ctx.poll()
    assert ctx.sent_requests(FetchRequest) == []


def test_a_successful_fetch_resets_the_fetch_timer() -> None:
    """§1.4/§1.6: every successful Fetch answer restarts the fetch timeout; the voter
    becomes Prospective only after a whole fetch timeout without one. (The answer comes
    after the leader's longest wait, within the Fetch's deadline, §1.4.1.)"""
    ctx = follower_context()
    timeout = ctx.config.fetch_timeout_ms
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    ctx.advance(ctx.config.fetch_max_wait_ms)
    ctx.deliver_response(sent, leader_says())
    ctx.poll()
    ctx.advance(timeout - 1)
    ctx.poll()
    assert ctx.role == "Follower"
    ctx.advance(1)
    ctx.poll()
    assert ctx.role == "Prospective"


def test_a_failed_fetch_does_not_reset_the_fetch_timer() -> None:
    """§1.4: only a successful answer restarts the fetch timer; errors do not."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (LOCAL, LEADER))
        .with_elected_leader(FOLLOWER_EPOCH, LEADER)
        .build()
    )
    timeout = ctx.config.fetch_timeout_ms
    wait = ctx.config.fetch_max_wait_ms  # answered within the Fetch's deadline (§1.4.1)
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    ctx.advance(wait)
    ctx.deliver_response(sent, FetchResponse(error_code=Errors.UNKNOWN_SERVER_ERROR))
    ctx.poll()
    assert ctx.role == "Follower"
    ctx.advance(timeout - wait)
    ctx.poll()
    assert ctx.role == "Prospective"


def test_a_fetch_error_backs_off_for_retry_backoff_ms() -> None:
    """§1.3: an error answer backs the leader off retry_backoff_ms before the next Fetch
    (a quorum of two: there is no other voter to try meanwhile)."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (LOCAL, LEADER))
        .with_elected_leader(FOLLOWER_EPOCH, LEADER)
        .with_config(retry_backoff_ms=50)
        .build()
    )
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    ctx.deliver_response(sent, FetchResponse(error_code=Errors.UNKNOWN_SERVER_ERROR))
    ctx.poll()
    ctx.poll()
    assert ctx.sent_requests(FetchRequest) == []
    ctx.advance(49)
    ctx.poll()
    assert ctx.sent_requests(FetchRequest) == []
    ctx.advance(1)
    ctx.poll()
    sent, body = ctx.single_sent_request(FetchRequest)
    assert sent.destination == LEADER
    assert body.fetch_offset == 0


def test_while_the_leader_backs_off_the_fetch_goes_to_another_voter() -> None:
    """§1.4: when the leader's connection is backing off, the follower fetches from a ready
    bootstrap server (the other voters, with a static voter set)."""
    ctx = follower_context()
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    ctx.deliver_response(sent, FetchResponse(error_code=Errors.UNKNOWN_SERVER_ERROR))
    ctx.poll()
    ctx.poll()
    sent, body = ctx.single_sent_request(FetchRequest)
    assert sent.destination == OTHER
    assert body.current_leader_epoch == FOLLOWER_EPOCH


def test_a_stale_fetch_response_is_ignored_after_the_state_changed() -> None:
    """§1.3: a transition drops the requests in flight; the Fetch answer arriving after the
    follower became Prospective appends nothing (Kafka's
    testFetchResponseIgnoredAfterBecomingCandidate)."""
    ctx = follower_context()
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    ctx.expire_fetch_timeout()
    ctx.poll()
    assert ctx.role == "Prospective"
    ctx.deliver_response(
        sent, leader_says(records=encode_batch(2, 5, [b"c"], timestamp_ms=0), high_watermark=3)
    )
    ctx.poll()
    assert ctx.log_end_offset == 2
    assert ctx.high_watermark is None


def test_after_a_successful_fetch_a_follower_refuses_pre_votes() -> None:
    """§1.4/§1.2: a successful fetch marks the leader as alive in this epoch; from then on the
    follower rejects pre-votes it would have granted before."""
    ctx = follower_context()
    pre_vote = VoteRequest(
        replica_epoch=FOLLOWER_EPOCH,
        replica_id=OTHER,
        last_offset_epoch=1,
        last_offset=2,
        pre_vote=True,
    )
    ctx.deliver_request(pre_vote, OTHER)
    ctx.poll()
    first = ctx.single_sent_response(VoteResponse)
    assert isinstance(first, VoteResponse) and first.vote_granted
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    ctx.deliver_response(sent, leader_says())
    ctx.poll()
    ctx.deliver_request(pre_vote, OTHER)
    ctx.poll()
    second = ctx.single_sent_response(VoteResponse)
    assert isinstance(second, VoteResponse) and not second.vote_granted


# -- refusing bad records ---------------------------------------------------------------------
def _corrupt(data: bytes) -> bytes:
    out = bytearray(data)
    out[-3] ^= 0xFF  # a byte of the last record: covered by the CRC
    return bytes(out)


@pytest.mark.parametrize(
    "records",
    [
        _corrupt(encode_batch(2, 5, [b"c", b"d"], timestamp_ms=0)),
        encode_batch(2, 5, [b"c"], timestamp_ms=0)
        + _corrupt(encode_batch(3, 5, [b"d"], timestamp_ms=0)),
        encode_batch(2, 5, [b"c"], timestamp_ms=0)[:-5],
        encode_batch(7, 5, [b"c"], timestamp_ms=0),
        encode_batch(2, 0, [b"c"], timestamp_ms=0),
    ],
    ids=["bad-crc", "second-batch-bad-crc", "truncated", "gap", "epoch-goes-back"],
)
def test_bad_fetched_records_are_refused_and_the_log_is_untouched(records: bytes) -> None:
    """§1.4: fetched records that are corrupt (CRC, length), or that do not continue the log
    (offset gap, epoch going back), are refused whole: the log, its epochs and the HW stay
    as they were, and the follower fetches the same offset again."""
    ctx = follower_context()
    ctx.poll()
    sent, _ = ctx.single_sent_request(FetchRequest)
    before = ctx.log.read(0).records
    epochs = ctx.log.epoch_entries()
    ctx.deliver_response(sent, leader_says(records=records, high_watermark=3))
    ctx.poll()
    assert ctx.log_end_offset == 2
    assert ctx.log.read(0).records == before
    assert ctx.log.epoch_entries() == epochs
    assert ctx.high_watermark is None
    assert ctx.role == "Follower"
    ctx.advance(ctx.config.retry_backoff_ms)
    ctx.poll()
    _, body = ctx.single_sent_request(FetchRequest)
    assert (body.fetch_offset, body.last_fetched_epoch) == (2, 1)
