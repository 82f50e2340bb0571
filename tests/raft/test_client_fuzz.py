"""One ``KafkaRaftClient`` in every state, fed arbitrary messages (hypothesis, stateful).

The client starts in one of the replica states of docs/protocol.md §1.1 (Unattached, Voted,
Prospective, Candidate, Candidate backing off, Leader, Follower, Resigned, an observer
Unattached or Follower, an anonymous observer) and is then driven by an arbitrary interleaving
of:

- inbound requests of every type, with arbitrary field values (epochs, ids, offsets including
  negative ones, directory ids, cluster ids, wrong topic-partitions), some of them coherent
  with the client's state so that elections and replication really happen;
- responses to the requests the client sent (arbitrary errors, leaders, epochs, records that
  are random bytes or well-formed batches, diverging epochs, snapshot ids), responses of the
  wrong type, and responses to requests it never sent;
- clock advances, polls, appends and resignations while leading.

After every step the properties below must hold; at the end the client is polled until every
request it received has been answered (parked fetches included: time is advanced past their
max wait).

- ``poll()`` never raises and returns a non-negative int.
- Every request gets exactly one response, to its source, of the type that answers it
  (§1.3), with error codes from the set the rules allow for that request (§1.2-1.4), and the
  error the early validation checks dictate when they apply (cluster id, topic-partition,
  argument checks, fenced or unknown epochs).
- A vote is granted only with error NONE, never by a leader (nor a standard vote by a
  candidate or follower, nor a pre-vote by a follower that has fetched), only to a candidate
  whose log is at least as up to date, is persisted before it is granted, and a replica never
  votes for two candidates in one epoch (§1.1, §1.2, §1.7).
- A higher epoch in a Vote is adopted first (§1.2 step 5); acknowledging Begin/EndQuorumEpoch
  means being in that epoch (following that leader, for a voter); only the leader of the
  fetcher's epoch answers a Fetch with NONE, and a diverging epoch it sends is consistent with
  the fetcher's position (§1.3, §1.4).
- The epoch never decreases; the stored election state always has the replica's epoch, leader
  and vote (durable transitions are written, Prospective and Resigned keep the stored one).
- The log's high watermark never decreases and the committed prefix (everything below the
  highest high watermark seen) never changes (§1.4, §1.5).
- What the listener receives is committed, contiguous and equal to the log.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kraft.common.limits import INT32_MAX, INT64_MAX
from kraft.common.uuids import ZERO_UUID
from kraft.protocol.api import (
    METADATA_PARTITION_INDEX,
    METADATA_TOPIC_ID,
    METADATA_TOPIC_NAME,
)
from kraft.protocol.envelope import OutboundRequest, OutboundResponse
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    RESPONSE_TYPE_FOR,
    RESPONSE_TYPES,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    Endpoint,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PreferredCandidate,
    Request,
    Response,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from kraft.record.batch import encode_batch
from kraft.testing import RaftClientBuilder, RaftTestContext, RecordingListener

VOTERS = (1, 2, 3)
CLUSTER_ID = "kraft-fuzz-cluster"
LOCAL_DIRECTORY = uuid.UUID(int=0x1111)
OTHER_DIRECTORY = uuid.UUID(int=0x2222)
#: The stored epoch every start state is built from.
START_EPOCH = 3
#: A far-future epoch that still leaves room for elections below INT32_MAX.
HUGE_EPOCH = INT32_MAX - 1000

E = Errors

# ------------------------------------------------------------------------------------------------
# What the rules allow in a response, per request type: (top-level codes, partition codes).
# §1.3 validation: voter-only requests (Vote, Begin/EndQuorumEpoch) fail with FENCED_LEADER_EPOCH
# or INVALID_REQUEST; leader-only ones (Fetch, FetchSnapshot) with FENCED_LEADER_EPOCH,
# UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER or BROKER_NOT_AVAILABLE. A cluster id that is
# not ours is INCONSISTENT_CLUSTER_ID at the top level; a wrong topic-partition is a top-level
# INVALID_REQUEST (UNKNOWN_TOPIC_OR_PARTITION in the partition for FetchSnapshot and
# DescribeQuorum, as Kafka answers them). Vote and BeginQuorumEpoch name a voter:
# INVALID_VOTER_KEY (§1.2 step 6, §1.3). The fuzzed leader holds no snapshot: SNAPSHOT_NOT_FOUND.
# ------------------------------------------------------------------------------------------------
_TOP = frozenset({E.NONE, E.INCONSISTENT_CLUSTER_ID, E.INVALID_REQUEST})
_VOTER_ONLY = frozenset({E.NONE, E.INVALID_REQUEST, E.FENCED_LEADER_EPOCH})
_LEADER_ONLY = frozenset(
    {
        E.NONE,
        E.FENCED_LEADER_EPOCH,
        E.UNKNOWN_LEADER_EPOCH,
        E.NOT_LEADER_OR_FOLLOWER,
        E.BROKER_NOT_AVAILABLE,
    }
)
ALLOWED_ERRORS: dict[type[Request], tuple[frozenset[int], frozenset[int]]] = {
    VoteRequest: (_TOP, _VOTER_ONLY | {E.INVALID_VOTER_KEY}),
    BeginQuorumEpochRequest: (_TOP, _VOTER_ONLY | {E.INVALID_VOTER_KEY}),
    EndQuorumEpochRequest: (_TOP, _VOTER_ONLY),
    FetchRequest: (_TOP, _LEADER_ONLY | {E.INVALID_REQUEST}),
    FetchSnapshotRequest: (
        _TOP,
        _LEADER_ONLY
        | {E.UNKNOWN_TOPIC_OR_PARTITION, E.SNAPSHOT_NOT_FOUND, E.POSITION_OUT_OF_RANGE},
    ),
    DescribeQuorumRequest: (
        _TOP,
        frozenset({E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_LEADER_OR_FOLLOWER}),
    ),
}

#: Error codes a peer may answer with: the ones the client has rules for, and some it has not.
RESPONSE_ERRORS = [
    E.NONE,
    E.NONE,
    E.NONE,
    E.NONE,
    E.FENCED_LEADER_EPOCH,
    E.UNKNOWN_LEADER_EPOCH,
    E.NOT_LEADER_OR_FOLLOWER,
    E.BROKER_NOT_AVAILABLE,
    E.INVALID_REQUEST,
    E.INVALID_VOTER_KEY,
    E.UNSUPPORTED_VERSION,
    E.CLUSTER_AUTHORIZATION_FAILED,
    E.INCONSISTENT_CLUSTER_ID,
    E.UNKNOWN_SERVER_ERROR,
    E.SNAPSHOT_NOT_FOUND,
    E.OFFSET_OUT_OF_RANGE,
    9999,
    -77,
]
#: Replica ids a message may come from or name: self, the other voters, observers, anonymous.
IDS = [-1, 1, 2, 3, 4, 5, 9]
#: Where requests come from: the other voters more often than the rest.
SOURCES = [-1, 1, 2, 2, 2, 3, 3, 3, 4, 5, 9]


# ------------------------------------------------------------------------------------------------
# The start states
# ------------------------------------------------------------------------------------------------
def _builder(local_id: int | None) -> RaftClientBuilder[bytes]:
    builder: RaftClientBuilder[bytes] = (
        RaftClientBuilder(local_id, VOTERS, seed=11)
        .with_cluster_id(CLUSTER_ID)
        .append_to_log(epoch=1, records=[b"a", b"b"])
        .append_to_log(epoch=2, records=[b"c"])
    )
    if local_id is not None:
        builder.with_local_directory_id(LOCAL_DIRECTORY)
    return builder


def _prospective() -> RaftTestContext[bytes]:
    context = _builder(1).with_unknown_leader(START_EPOCH).build()
    context.expire_election_timeout()
    context.poll()
    context.poll()  # sends the pre-votes
    return context


def _candidate() -> RaftTestContext[bytes]:
    context = _prospective()
    for request in context.sent_requests(VoteRequest):
        context.deliver_response(
            request,
            VoteResponse(
                leader_epoch=START_EPOCH,
                vote_granted=True,
            ),
        )
    context.poll()
    context.poll()  # sends the votes
    return context


def _candidate_backing_off() -> RaftTestContext[bytes]:
    context = _candidate()
    for request in context.sent_requests(VoteRequest):
        context.deliver_response(
            request,
            VoteResponse(
                leader_epoch=context.epoch,
                vote_granted=False,
            ),
        )
    context.poll()
    context.poll()
    return context


def _leader() -> RaftTestContext[bytes]:
    context = _builder(1).with_unknown_leader(START_EPOCH).build()
    context.become_leader()
    return context


def _resigned() -> RaftTestContext[bytes]:
    context = _leader()
    context.client.resign(context.epoch)
    context.poll()
    return context


START_STATES: dict[str, tuple[str, Callable[[], RaftTestContext[bytes]]]] = {
    # name: (the role it must be in, how to get there)
    "unattached": ("Unattached", lambda: _builder(1).with_unknown_leader(START_EPOCH).build()),
    "voted": ("Voted", lambda: _builder(1).with_voted_candidate(START_EPOCH, 2).build()),
    "prospective": ("Prospective", _prospective),
    "candidate": ("Candidate", _candidate),
    "candidate-restarted": (
        "Candidate",
        lambda: _builder(1).with_voted_candidate(START_EPOCH, 1).build(),
    ),
    "candidate-backing-off": ("Candidate", _candidate_backing_off),
    "leader": ("Leader", _leader),
    "follower": ("Follower", lambda: _builder(1).with_elected_leader(START_EPOCH, 2).build()),
    "resigned": ("Resigned", _resigned),
    "resigned-restarted": (
        "Resigned",
        lambda: _builder(1).with_elected_leader(START_EPOCH, 1).build(),
    ),
    "observer-unattached": (
        "Unattached",
        lambda: _builder(4).with_unknown_leader(START_EPOCH).build(),
    ),
    "observer-follower": (
        "Follower",
        lambda: _builder(4).with_elected_leader(START_EPOCH, 2).build(),
    ),
    "anonymous-observer": (
        "Unattached",
        lambda: _builder(None).with_unknown_leader(START_EPOCH).build(),
    ),
}


# ------------------------------------------------------------------------------------------------
# Drawing values
# ------------------------------------------------------------------------------------------------
def _epoch(data: st.DataObject, current: int) -> int:
    """Mostly near the current epoch; sometimes far off: negative, zero, huge, beyond int32.

    Never INT32_MAX itself: a replica moved there cannot stand for election
    (test_a_replica_at_the_largest_epoch_survives_an_election pins that down).
    """
    if data.draw(st.integers(0, 7)) == 0:
        return data.draw(st.sampled_from([-5, -1, 0, HUGE_EPOCH, INT32_MAX + 1]))
    return data.draw(st.integers(max(-1, current - 2), current + 2))


def _offset(data: st.DataObject, end_offset: int) -> int:
    if data.draw(st.integers(0, 7)) == 0:
        return data.draw(st.sampled_from([-10, -1, INT32_MAX, INT64_MAX]))
    return data.draw(st.integers(0, end_offset + 2))


def _directory(data: st.DataObject) -> uuid.UUID:
    return data.draw(st.sampled_from([ZERO_UUID, LOCAL_DIRECTORY, OTHER_DIRECTORY]) | st.uuids())


def _topic(data: st.DataObject) -> dict[str, Any]:
    """The metadata topic-partition most of the time; a wrong one sometimes."""
    if data.draw(st.integers(0, 9)) > 0:
        return {}
    return data.draw(
        st.sampled_from(
            [
                {"topic_name": "__consumer_offsets"},
                {"topic_name": ""},
                {"partition_index": 1},
                {"partition_index": -1},
            ]
        )
    )


def _voter_endpoints(voter: int) -> tuple[Endpoint, ...]:
    return (Endpoint("CONTROLLER", "localhost", 9990 + voter),)


def _node_endpoints(data: st.DataObject, leader: int) -> tuple[NodeEndpoint, ...]:
    return data.draw(
        st.sampled_from(
            [
                (),
                (NodeEndpoint(leader, "localhost", 9990 + leader),),
                (NodeEndpoint(leader, "elsewhere", 19090),),
                (NodeEndpoint(leader, "localhost", 9990 + leader), NodeEndpoint(leader, "b", 1)),
                (NodeEndpoint(7, "unrelated", 1),),
            ]
        )
    )


def _epoch_at(context: RaftTestContext[bytes], offset: int) -> int:
    """The epoch of the record just before ``offset`` in the client's log (0: none)."""
    epoch = 0
    for entry_epoch, start in context.log.epoch_entries():
        if start < offset:
            epoch = entry_epoch
    return epoch


def _records(data: st.DataObject, context: RaftTestContext[bytes]) -> bytes:
    """Fetched records: nothing, garbage, or well-formed batches at (or near) our end."""
    kind = data.draw(st.sampled_from(["none", "garbage", "batch", "batch", "misplaced", "torn"]))
    if kind == "none":
        return b""
    if kind == "garbage":
        return data.draw(st.binary(min_size=1, max_size=80))
    end = context.log_end_offset
    base = end if kind != "misplaced" else data.draw(st.sampled_from([0, max(0, end - 1), end + 1]))
    low = context.log.last_fetched_epoch
    epoch = data.draw(st.integers(max(0, low - 1), max(low, context.epoch) + 1))
    values = data.draw(st.lists(st.binary(max_size=6), min_size=1, max_size=3))
    batch = encode_batch(base, epoch, values, timestamp_ms=context.clock.wall_ms())
    if data.draw(st.booleans()):
        # A second batch right after the first, possibly in a later epoch.
        values2 = data.draw(st.lists(st.binary(max_size=6), min_size=1, max_size=2))
        batch += encode_batch(
            base + len(values),
            epoch + data.draw(st.integers(0, 1)),
            values2,
            timestamp_ms=context.clock.wall_ms(),
        )
    if kind == "torn":
        batch = batch[: data.draw(st.integers(1, len(batch) - 1))]
    return batch


def _coherent(data: st.DataObject) -> bool:
    """Half the messages agree with the client's view; the others are arbitrary."""
    return data.draw(st.booleans())


# ------------------------------------------------------------------------------------------------
# Inbound requests
# ------------------------------------------------------------------------------------------------
def _vote_request(data: st.DataObject, context: RaftTestContext[bytes], source: int) -> Request:
    pre_vote = data.draw(st.booleans())
    if _coherent(data):
        epoch = context.epoch + (0 if pre_vote else data.draw(st.integers(0, 1)))
        last_epoch = min(
            context.log.last_fetched_epoch + data.draw(st.integers(-1, 1)),
            epoch - (0 if pre_vote else 1),
        )
        return VoteRequest(
            replica_epoch=epoch,
            replica_id=source,
            last_offset_epoch=max(0, last_epoch),
            last_offset=max(0, context.log_end_offset + data.draw(st.integers(-2, 2))),
            pre_vote=pre_vote,
            voter_id=data.draw(st.sampled_from([-1, context.client.local_id or -1])),
        )
    return VoteRequest(
        replica_epoch=_epoch(data, context.epoch),
        replica_id=data.draw(st.sampled_from([*IDS, source])),
        last_offset_epoch=_epoch(data, context.log.last_fetched_epoch),
        last_offset=_offset(data, context.log_end_offset),
        pre_vote=pre_vote,
        replica_directory_id=_directory(data),
        voter_id=data.draw(st.sampled_from(IDS)),
        voter_directory_id=_directory(data),
        **_topic(data),
    )


def _begin_quorum_epoch_request(
    data: st.DataObject, context: RaftTestContext[bytes], source: int
) -> Request:
    if _coherent(data):
        leader = data.draw(st.sampled_from(VOTERS))
        return BeginQuorumEpochRequest(
            leader_id=leader,
            leader_epoch=context.epoch + data.draw(st.integers(0, 1)),
            voter_id=context.client.local_id if context.client.local_id is not None else -1,
            leader_endpoints=_voter_endpoints(leader),
        )
    leader = data.draw(st.sampled_from([*IDS, source]))
    return BeginQuorumEpochRequest(
        leader_id=leader,
        leader_epoch=_epoch(data, context.epoch),
        voter_id=data.draw(st.sampled_from(IDS)),
        voter_directory_id=_directory(data),
        leader_endpoints=data.draw(
            st.sampled_from(
                [
                    (),
                    _voter_endpoints(max(0, leader)),
                    (Endpoint("CONTROLLER", "elsewhere", 1),),
                    (*_voter_endpoints(max(0, leader)), Endpoint("OTHER", "h", 2)),
                ]
            )
        ),
        **_topic(data),
    )


def _end_quorum_epoch_request(
    data: st.DataObject, context: RaftTestContext[bytes], source: int
) -> Request:
    candidates = tuple(
        PreferredCandidate(
            c, data.draw(st.sampled_from([ZERO_UUID, LOCAL_DIRECTORY, OTHER_DIRECTORY]))
        )
        for c in data.draw(st.lists(st.sampled_from(IDS), max_size=3))
    )
    if _coherent(data):
        leader = context.client.leader_id
        if leader is None or leader == context.client.local_id:
            leader = data.draw(st.sampled_from(VOTERS))
        return EndQuorumEpochRequest(
            leader_id=leader,
            leader_epoch=context.epoch,
            preferred_candidates=candidates,
            leader_endpoints=_voter_endpoints(leader),
        )
    leader = data.draw(st.sampled_from([*IDS, source]))
    return EndQuorumEpochRequest(
        leader_id=leader,
        leader_epoch=_epoch(data, context.epoch),
        preferred_candidates=candidates,
        leader_endpoints=data.draw(st.sampled_from([(), _voter_endpoints(max(0, leader))])),
        **_topic(data),
    )


def _fetch_request(data: st.DataObject, context: RaftTestContext[bytes], source: int) -> Request:
    if _coherent(data):
        # Mostly from the fetcher's end (what moves the leader's high watermark).
        end = context.log_end_offset
        offset = data.draw(st.sampled_from([end, end]) | st.integers(0, end))
        return FetchRequest(
            replica_id=source,
            current_leader_epoch=context.epoch,
            fetch_offset=offset,
            last_fetched_epoch=_epoch_at(context, offset),
            max_wait_ms=data.draw(st.sampled_from([0, 100, 500])),
            high_watermark=data.draw(
                st.sampled_from([-1, INT64_MAX, context.log.high_watermark, offset])
            ),
            replica_directory_id=data.draw(st.sampled_from([ZERO_UUID, OTHER_DIRECTORY])),
        )
    topic = _topic(data)
    if data.draw(st.integers(0, 9)) == 0:
        topic["topic_id"] = data.draw(st.sampled_from([ZERO_UUID, OTHER_DIRECTORY]))
    return FetchRequest(
        replica_id=data.draw(st.sampled_from([*IDS, source])),
        current_leader_epoch=_epoch(data, context.epoch),
        fetch_offset=_offset(data, context.log_end_offset),
        last_fetched_epoch=_epoch(data, context.log.last_fetched_epoch),
        max_wait_ms=data.draw(st.sampled_from([-1, 0, 1, 500, 5000])),
        max_bytes=data.draw(st.sampled_from([0, 1, 100, INT32_MAX])),
        replica_directory_id=_directory(data),
        high_watermark=data.draw(st.sampled_from([-1, 0, 2, INT64_MAX])),
        **topic,
    )


def _fetch_snapshot_request(
    data: st.DataObject, context: RaftTestContext[bytes], source: int
) -> Request:
    return FetchSnapshotRequest(
        replica_id=data.draw(st.sampled_from([*IDS, source])),
        current_leader_epoch=_epoch(data, context.epoch),
        snapshot_id=SnapshotId(_offset(data, context.log_end_offset), _epoch(data, context.epoch)),
        position=data.draw(st.sampled_from([-1, 0, 10])),
        replica_directory_id=_directory(data),
        **_topic(data),
    )


def _describe_quorum_request(
    data: st.DataObject, context: RaftTestContext[bytes], source: int
) -> Request:
    return DescribeQuorumRequest(**_topic(data))


REQUEST_BUILDERS: list[Callable[[st.DataObject, RaftTestContext[bytes], int], Request]] = [
    _vote_request,
    _vote_request,
    _begin_quorum_epoch_request,
    _end_quorum_epoch_request,
    _fetch_request,
    _fetch_request,
    _fetch_request,
    _fetch_snapshot_request,
    _describe_quorum_request,
]


# ------------------------------------------------------------------------------------------------
# Responses to what the client sent
# ------------------------------------------------------------------------------------------------
def _response_header(
    data: st.DataObject, context: RaftTestContext[bytes], coherent: bool
) -> dict[str, Any]:
    """Error codes, leader and epoch for a response."""
    if coherent:
        known = context.client.leader_id
        leader = (
            known
            if known is not None and known != context.client.local_id
            else (
                data.draw(
                    st.sampled_from([-1, *[v for v in VOTERS if v != context.client.local_id]])
                )
            )
        )
        return {
            "error_code": 0,
            "partition_error_code": 0,
            "leader_id": leader,
            "leader_epoch": context.epoch + data.draw(st.sampled_from([0, 0, 0, 1])),
        }
    return {
        "error_code": data.draw(st.sampled_from([0, 0, 0, *RESPONSE_ERRORS])),
        "partition_error_code": data.draw(st.sampled_from(RESPONSE_ERRORS)),
        "leader_id": data.draw(st.sampled_from(IDS)),
        "leader_epoch": _epoch(data, context.epoch),
    }


def _response_for(
    data: st.DataObject, context: RaftTestContext[bytes], kind: type[Response]
) -> Response:
    coherent = _coherent(data)
    header = _response_header(data, context, coherent)
    topic = {} if coherent else _topic(data)
    leader = header["leader_id"]
    endpoints = _node_endpoints(data, leader) if leader >= 0 else ()
    if kind is VoteResponse:
        granted = data.draw(st.sampled_from([True, True, False] if coherent else [True, False]))
        return VoteResponse(**header, vote_granted=granted, node_endpoints=endpoints, **topic)
    if kind is BeginQuorumEpochResponse:
        return BeginQuorumEpochResponse(**header, node_endpoints=endpoints, **topic)
    if kind is EndQuorumEpochResponse:
        return EndQuorumEpochResponse(**header, node_endpoints=endpoints, **topic)
    if kind is FetchResponse:
        end = context.log_end_offset
        diverging = None
        snapshot = None
        news = data.draw(st.sampled_from(["records", "records", "diverging", "snapshot"]))
        if news == "diverging":
            diverging = EpochEndOffset(
                epoch=data.draw(st.sampled_from([-1, 0, 1, 2, context.epoch, context.epoch + 1])),
                end_offset=_offset(data, end),
            )
        elif news == "snapshot":
            snapshot = SnapshotId(
                end_offset=data.draw(st.sampled_from([-1, 0, end, end + 5])),
                epoch=data.draw(st.sampled_from([-1, 0, context.epoch])),
            )
        return FetchResponse(
            error_code=header["error_code"],
            partition_error_code=header["partition_error_code"],
            high_watermark=data.draw(st.sampled_from([-1, 0, 1, 2, end, end + 3, INT64_MAX])),
            log_start_offset=data.draw(st.sampled_from([-1, 0])),
            records=_records(data, context) if news == "records" else b"",
            diverging_epoch=diverging,
            current_leader=LeaderIdAndEpoch(leader, header["leader_epoch"]),
            snapshot_id=snapshot,
            node_endpoints=endpoints,
            **topic,
        )
    if kind is FetchSnapshotResponse:
        return FetchSnapshotResponse(
            error_code=header["error_code"],
            partition_error_code=header["partition_error_code"],
            current_leader=LeaderIdAndEpoch(leader, header["leader_epoch"]),
            unaligned_records=data.draw(st.binary(max_size=16)),
            **topic,
        )
    return DescribeQuorumResponse(
        error_code=header["error_code"],
        partition_error_code=header["partition_error_code"],
        leader_id=leader,
        leader_epoch=header["leader_epoch"],
        **topic,
    )


# ------------------------------------------------------------------------------------------------
# The oracle for the checks a request meets first
# ------------------------------------------------------------------------------------------------
@dataclass
class Pending:
    """A request delivered to the client and not answered yet."""

    body: Request
    source: int
    cluster_id: str | None
    #: The client's epoch when the request was delivered: it is handled in this epoch or later.
    epoch_at_delivery: int


def _wrong_topic_partition(body: Any) -> bool:  # a partition request
    wrong: bool = body.topic_name != METADATA_TOPIC_NAME or body.partition_index != (
        METADATA_PARTITION_INDEX
    )
    if isinstance(body, FetchRequest):
        wrong = wrong or body.topic_id not in (METADATA_TOPIC_ID, ZERO_UUID)
    return wrong


def _epoch_beyond_int32(message: object) -> bool:
    """Whether ``message`` (or a struct in it) has an epoch field outside int32."""
    for name in getattr(message, "__struct_fields__", ()):
        value = getattr(message, name)
        if (
            name.endswith("epoch")
            and isinstance(value, int)
            and not (-(2**31) <= value <= INT32_MAX)
        ):
            return True
        if hasattr(value, "__struct_fields__") and _epoch_beyond_int32(value):
            return True
    return False


def expected_error(pending: Pending, low: int, high: int) -> tuple[str, int] | None:
    """The (level, code) the first failing check decides, or None when no early check decides.

    The request was handled in an epoch between ``low`` (at delivery) and ``high`` (after the
    poll that answered it): an epoch below ``low`` is stale for sure, one above ``high`` is
    ahead for sure.
    """
    body = pending.body
    if pending.cluster_id is not None and pending.cluster_id != CLUSTER_ID:
        return "top", E.INCONSISTENT_CLUSTER_ID  # §1.2 step 1 (an empty id is not ours)
    if _epoch_beyond_int32(body):
        return "some error", E.NONE  # epochs are int32 in Kafka's schema: refused somehow
    if _wrong_topic_partition(body):
        if isinstance(body, FetchSnapshotRequest | DescribeQuorumRequest):
            return "partition", E.UNKNOWN_TOPIC_OR_PARTITION
        return "top", E.INVALID_REQUEST
    if isinstance(body, VoteRequest):
        illegal_epoch = (
            body.last_offset_epoch > body.replica_epoch
            if body.pre_vote
            else body.last_offset_epoch >= body.replica_epoch
        )
        if body.last_offset < 0 or body.last_offset_epoch < 0 or illegal_epoch:
            return "partition", E.INVALID_REQUEST  # §1.2 step 3
        return _voter_only(body.replica_id, body.replica_epoch, low, high)
    if isinstance(body, BeginQuorumEpochRequest | EndQuorumEpochRequest):
        return _voter_only(body.leader_id, body.leader_epoch, low, high)
    if isinstance(body, FetchRequest):
        if (
            body.max_wait_ms < 0
            or body.fetch_offset < 0
            or body.last_fetched_epoch < 0
            or body.last_fetched_epoch > body.current_leader_epoch
        ):
            return "partition", E.INVALID_REQUEST  # §1.4
        return _leader_only(body.current_leader_epoch, low, high)
    if isinstance(body, FetchSnapshotRequest):
        return _leader_only(body.current_leader_epoch, low, high)
    return None


def _voter_only(remote_id: int, epoch: int, low: int, high: int) -> tuple[str, int] | None:
    if epoch < low:
        return "partition", E.FENCED_LEADER_EPOCH
    if epoch >= high and remote_id < 0:
        return "partition", E.INVALID_REQUEST
    return None


def _leader_only(epoch: int, low: int, high: int) -> tuple[str, int] | None:
    if epoch < low:
        return "partition", E.FENCED_LEADER_EPOCH
    if epoch > high:
        return "partition", E.UNKNOWN_LEADER_EPOCH
    return None


def _committed_batches(context: RaftTestContext[bytes], below: int) -> list[bytes]:
    """The bytes of every batch holding a record below ``below`` (a batch is never split)."""
    return [bytes(batch) for batch in context.log.batches() if batch.base_offset < below]


# ------------------------------------------------------------------------------------------------
# The machine
# ------------------------------------------------------------------------------------------------
class ClientFuzz(RuleBasedStateMachine):
    """Drives one client; ``start_name`` (set before the first step) picks the start state."""

    start_name = "unattached"

    def __init__(self) -> None:
        super().__init__()
        self.context: RaftTestContext[bytes] | None = None
        self.listener: RecordingListener[bytes] = RecordingListener()
        self.pending: dict[int, Pending] = {}
        self.sent: list[OutboundRequest] = []
        self.max_epoch = 0
        self.max_high_watermark = 0
        self.committed: list[bytes] = []
        #: epoch -> the candidates this replica voted for in it (must stay at most one).
        self.votes: dict[int, set[int]] = {}
        self.listener_checked = 0
        self.listener_next: int | None = None

    @property
    def ctx(self) -> RaftTestContext[bytes]:
        assert self.context is not None
        return self.context

    @initialize()
    def start(self) -> None:
        role, build = START_STATES[self.start_name]
        context = build()
        assert context.role == role, f"{self.start_name}: built {context.client!r}"
        if self.start_name == "candidate-backing-off":
            state = context.client.state
            assert getattr(state, "backoff_deadline_ms", None) is not None
        context.client.register(self.listener)
        self.max_epoch = context.epoch
        self.max_high_watermark = context.log.high_watermark
        self.committed = _committed_batches(context, self.max_high_watermark)
        self.context = context
        self._collect()

    # -- rules -------------------------------------------------------------------------------
    @rule(data=st.data())
    def deliver_request(self, data: st.DataObject) -> None:
        context = self.ctx
        source = data.draw(st.sampled_from(SOURCES), label="source")
        body = data.draw(st.sampled_from(REQUEST_BUILDERS))(data, context, source)
        cluster_id = data.draw(st.sampled_from([None, None, CLUSTER_ID, CLUSTER_ID, "", "other"]))
        api_version = data.draw(st.sampled_from([None, None, 0, body.MAX_VERSION]))
        correlation_id = context.deliver_request(
            body,
            source,
            source_directory_id=_directory(data),
            cluster_id=cluster_id,
            api_version=api_version,
        )
        data.draw(st.just(body), label="request")
        self.pending[correlation_id] = Pending(body, source, cluster_id, context.epoch)

    @precondition(lambda self: bool(self.sent))
    @rule(data=st.data())
    def answer_a_sent_request(self, data: st.DataObject) -> None:
        context = self.ctx
        # Mostly the latest request (the one most likely still in flight), sometimes an older one.
        back = data.draw(st.sampled_from([1, 1, 1, 2, 3, 4, 6]))
        request = self.sent[-min(back, len(self.sent))]
        data.draw(st.just(request), label="answering")
        kind = RESPONSE_TYPE_FOR[type(request.body)]
        if data.draw(st.integers(0, 9)) == 0:
            kind = data.draw(st.sampled_from(RESPONSE_TYPES))  # the wrong type, now and then
        body = _response_for(data, context, kind)
        source = request.destination
        if data.draw(st.integers(0, 9)) == 0:
            source = data.draw(st.sampled_from(IDS))  # from someone else
        data.draw(st.just(body), label="response")
        context.deliver_response(request, body, source)

    @rule(data=st.data())
    def answer_a_request_never_sent(self, data: st.DataObject) -> None:
        context = self.ctx
        kind = data.draw(st.sampled_from(RESPONSE_TYPES))
        body = _response_for(data, context, kind)
        correlation_id = data.draw(st.integers(-1, 40) | st.just(10**9))
        if correlation_id in {request.correlation_id for request in self.sent}:
            correlation_id += 10**6
        source = data.draw(st.sampled_from(IDS))
        data.draw(st.just(body), label="response")
        context.deliver_response(correlation_id, body, source)

    @rule()
    def poll(self) -> None:
        self._poll()

    @rule(
        ms=st.sampled_from([1, 20, 25, 100, 499, 500, 999, 1000, 1500, 2000, 3000, 4000])
        | st.integers(0, 5000)
    )
    def advance_and_poll(self, ms: int) -> None:
        self.ctx.advance(ms)
        self._poll()

    @rule(count=st.integers(1, 4))
    def poll_a_few_times(self, count: int) -> None:
        for _ in range(count):
            self._poll()

    @precondition(lambda self: self.context is not None and self.context.client.is_leader)
    @rule(values=st.lists(st.binary(max_size=8), min_size=1, max_size=4))
    def append(self, values: list[bytes]) -> None:
        client = self.ctx.client
        client.prepare_append(client.epoch, values)
        client.schedule_prepared_append()

    @precondition(lambda self: self.context is not None and self.context.client.is_leader)
    @rule()
    def resign(self) -> None:
        self.ctx.client.resign(self.ctx.epoch)

    # -- polling and checking what came out ---------------------------------------------------
    def _poll(self) -> None:
        timeout = self.ctx.poll()
        assert isinstance(timeout, int)
        assert timeout >= 0, f"poll() returned {timeout}"
        self._collect()

    def _collect(self) -> None:
        context = self.ctx
        self.sent.extend(context.sent_requests())
        for response in context.sent_responses():
            self._check_response(response)
        self._check_store_and_votes()

    def _check_response(self, response: OutboundResponse) -> None:
        context = self.ctx
        pending = self.pending.pop(response.correlation_id, None)
        assert pending is not None, f"a response to no request (or a second one): {response}"
        request: Any = pending.body
        assert response.destination == pending.source, (response, pending)
        assert type(response.body) is RESPONSE_TYPE_FOR[type(request)], (request, response)
        body: Any = response.body  # answers a partition request: it has partition_error_code
        top, partition = ALLOWED_ERRORS[type(request)]
        assert body.error_code in top, (request, body)
        assert body.partition_error_code in partition, (request, body)
        if body.error_code != E.NONE:
            # A top-level error says nothing else.
            assert body.partition_error_code == E.NONE, body
        expected = expected_error(pending, pending.epoch_at_delivery, context.epoch)
        ok = body.error_code == E.NONE and body.partition_error_code == E.NONE
        if expected is not None and expected[0] == "some error":
            assert not ok, f"accepted {request}: {body}"
        elif expected is not None:
            level, code = expected
            got = body.error_code if level == "top" else body.partition_error_code
            assert got == code, f"expected {level} {E(code).name} for {request}, got {body}"
        elif body.error_code == E.INCONSISTENT_CLUSTER_ID:
            raise AssertionError(f"INCONSISTENT_CLUSTER_ID for an accepted id: {pending}")
        if isinstance(body, VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse) and (
            body.error_code == E.NONE
        ):
            # §1.2: the response carries the replica's own epoch.
            assert body.leader_epoch == context.epoch, (request, body, context.client)
        if isinstance(request, VoteRequest) and isinstance(body, VoteResponse):
            self._check_vote(request, body, ok)
        if isinstance(request, BeginQuorumEpochRequest) and ok:
            # §1.3: acknowledging a BeginQuorumEpoch means being in that epoch, following that
            # leader when its endpoints are known (a voter's are).
            assert context.epoch == request.leader_epoch, (request, context.client)
            if request.leader_id in VOTERS:
                assert context.leader_id == request.leader_id, (request, context.client)
        if isinstance(request, EndQuorumEpochRequest) and ok:
            assert context.epoch == request.leader_epoch, (request, context.client)
        if isinstance(request, FetchRequest) and isinstance(body, FetchResponse) and ok:
            self._check_fetch(request, body)
        if isinstance(body, DescribeQuorumResponse) and ok:
            assert body.leader_id == context.client.local_id, body

    def _check_vote(self, request: VoteRequest, body: VoteResponse, ok: bool) -> None:
        context = self.ctx
        if body.error_code == E.NONE and body.partition_error_code in (E.NONE, E.INVALID_VOTER_KEY):
            # §1.2 step 5: a higher epoch is adopted first, for pre-votes too.
            assert context.epoch >= request.replica_epoch, (request, context.client)
        if not body.vote_granted:
            return
        assert ok, body
        # §1.2: never granted by a leader; a standard vote never by a candidate or follower,
        # a pre-vote by a follower only before it fetched from its leader.
        role = context.role
        assert role != "Leader", (request, context.client)
        if request.pre_vote:
            state = context.client.state
            assert not getattr(state, "has_fetched", False), (request, state)
        else:
            assert role not in ("Candidate", "Follower"), (request, context.client)
        # §1.2 (Raft's election restriction): only a candidate whose log is at least as
        # up to date as ours, comparing the last epoch first, then the end offset. (A standard
        # vote repeated to the candidate already voted for is granted again as it is, §1.2.)
        repeated = not request.pre_vote and request.replica_id in self.votes.get(
            request.replica_epoch, set()
        )
        log = context.log
        if not repeated:
            assert (request.last_offset_epoch, request.last_offset) >= (
                log.last_fetched_epoch,
                log.log_end_offset,
            ), (request, log.last_fetched_epoch, log.log_end_offset)
        if not request.pre_vote:
            # §1.1/§1.7: the vote was made durable before it was granted.
            stored = context.stored_state()
            assert stored is not None
            assert (stored.epoch, stored.voted_id) == (request.replica_epoch, request.replica_id), (
                stored,
                request,
            )
            self.votes.setdefault(request.replica_epoch, set()).add(request.replica_id)

    def _check_fetch(self, request: FetchRequest, body: FetchResponse) -> None:
        """§1.4: a successful fetch answer comes from the leader of the fetcher's epoch."""
        context = self.ctx
        local_id = context.client.local_id
        assert local_id is not None, "an anonymous replica served a fetch"
        assert body.current_leader == LeaderIdAndEpoch(local_id, request.current_leader_epoch)
        assert body.high_watermark <= context.log_end_offset, body
        diverging = body.diverging_epoch
        if diverging is not None:
            # The largest epoch both logs share is at most the fetcher's last epoch, and the
            # fetcher's log is wrong past its end.
            assert not body.records, body
            assert diverging.epoch <= request.last_fetched_epoch, (request, diverging)
            assert (
                diverging.epoch < request.last_fetched_epoch
                or diverging.end_offset < request.fetch_offset
            ), (request, diverging)
            assert diverging.end_offset <= context.log_end_offset, (request, diverging)

    def _check_store_and_votes(self) -> None:
        context = self.ctx
        stored = context.stored_state()
        assert stored is not None
        if stored.voted_id is not None:
            self.votes.setdefault(stored.epoch, set()).add(stored.voted_id)
        if context.role in ("Candidate", "Leader", "Resigned"):
            # It stood for election in this epoch: it voted for itself.
            assert context.client.local_id is not None
            self.votes.setdefault(context.epoch, set()).add(context.client.local_id)
        for epoch, candidates in self.votes.items():
            assert len(candidates) <= 1, f"voted for {sorted(candidates)} in epoch {epoch}"

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def epoch_never_decreases(self) -> None:
        if self.context is None:
            return
        assert self.ctx.epoch >= self.max_epoch, (self.max_epoch, self.ctx.client)
        self.max_epoch = self.ctx.epoch

    @invariant()
    def stored_state_matches_the_replica(self) -> None:
        if self.context is None:
            return
        context = self.ctx
        stored = context.stored_state()
        # Durable states are written before the replica acts in them; Prospective and
        # Resigned are never written and keep the stored state they came from, which names
        # the same epoch, leader and vote (§1.1, §1.7).
        assert stored is not None
        assert (stored.epoch, stored.leader_id, stored.voted_id) == (
            context.epoch,
            context.leader_id,
            context.voted_id,
        ), (stored, context.client)

    @invariant()
    def committed_prefix_never_changes(self) -> None:
        if self.context is None:
            return
        context = self.ctx
        high_watermark = context.log.high_watermark
        assert high_watermark >= self.max_high_watermark, "the high watermark went back"
        assert _committed_batches(context, self.max_high_watermark) == self.committed
        if high_watermark > self.max_high_watermark:
            self.max_high_watermark = high_watermark
            self.committed = _committed_batches(context, high_watermark)

    @invariant()
    def listener_sees_the_committed_log(self) -> None:
        if self.context is None:
            return
        new_batches = self.listener.batches[self.listener_checked :]
        if not new_batches:
            return
        self.listener_checked = len(self.listener.batches)
        committed = {
            record.offset: record.value
            for batch in self.ctx.log.batches()
            if batch.base_offset < self.max_high_watermark
            for record in batch.records()
        }
        for batch in new_batches:
            if self.listener_next is not None:
                assert batch.base_offset == self.listener_next, "a gap in what the listener saw"
            self.listener_next = batch.last_offset + 1
            assert batch.last_offset < self.max_high_watermark, "an uncommitted batch delivered"
            for i, record in enumerate(batch.records):
                assert committed.get(batch.base_offset + i) == record, batch

    def teardown(self) -> None:
        """Every request is answered: poll the queue dry, then let parked fetches expire."""
        if self.context is None:
            return
        context = self.ctx
        for _ in range(len(context.queue) + 5):
            self._poll()
        for _ in range(3):
            if not self.pending:
                break
            waits = [
                p.body.max_wait_ms
                for p in self.pending.values()
                if isinstance(p.body, FetchRequest)
            ]
            context.advance(max([0, *waits]) + 1)
            self._poll()
        assert not self.pending, f"never answered: {list(self.pending.values())}"


FUZZ_SETTINGS = settings(
    # Per start state; KRAFT_FUZZ_EXAMPLES=500 for a deeper (slower) run.
    max_examples=int(os.environ.get("KRAFT_FUZZ_EXAMPLES", "12")),
    stateful_step_count=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)


@pytest.mark.parametrize("start", sorted(START_STATES))
def test_client_in_every_state_survives_arbitrary_messages(start: str) -> None:
    """§1.1-1.5: from each replica state, arbitrary requests, responses, time and polls never
    make poll() raise; every request gets exactly one response of its type with an allowed
    error; votes are durable and single per epoch; the epoch never decreases; the stored
    election state matches the replica; the committed prefix never changes."""

    machine = type(
        f"ClientFuzzFrom_{start.replace('-', '_')}", (ClientFuzz,), {"start_name": start}
    )
    run_state_machine_as_test(machine, settings=FUZZ_SETTINGS)


def test_start_states_are_what_they_claim() -> None:
    """§1.1: the fuzz starts from every replica state (a check on the fuzz's own setup)."""
    roles = {name: build().role for name, (_, build) in START_STATES.items()}
    assert roles == {name: role for name, (role, _) in START_STATES.items()}
    assert set(roles.values()) == {
        "Unattached",
        "Voted",
        "Prospective",
        "Candidate",
        "Leader",
        "Follower",
        "Resigned",
    }
    observer = START_STATES["observer-follower"][1]()
    assert not observer.client.is_voter
    assert START_STATES["anonymous-observer"][1]().client.local_id is None


def test_expected_error_oracle() -> None:
    """§1.2-1.4: the fuzz's oracle for the first failing check (a check on the checker)."""
    vote = VoteRequest(replica_epoch=5, replica_id=2, last_offset_epoch=4, last_offset=3)
    assert expected_error(Pending(vote, 2, "other", 5), 5, 5) == ("top", E.INCONSISTENT_CLUSTER_ID)
    assert expected_error(Pending(vote, 2, "", 5), 5, 5) == ("top", E.INCONSISTENT_CLUSTER_ID)
    assert expected_error(Pending(vote, 2, None, 5), 5, 5) is None
    assert expected_error(Pending(vote, 2, CLUSTER_ID, 6), 6, 6) == (
        "partition",
        E.FENCED_LEADER_EPOCH,
    )
    standard_same_epoch = VoteRequest(
        replica_epoch=5, replica_id=2, last_offset_epoch=5, last_offset=3
    )
    assert expected_error(Pending(standard_same_epoch, 2, None, 5), 5, 5) == (
        "partition",
        E.INVALID_REQUEST,
    )
    fetch = FetchRequest(
        replica_id=2, current_leader_epoch=7, fetch_offset=0, last_fetched_epoch=0, max_wait_ms=0
    )
    assert expected_error(Pending(fetch, 2, None, 5), 5, 6) == ("partition", E.UNKNOWN_LEADER_EPOCH)
    assert expected_error(Pending(DescribeQuorumRequest(partition_index=1), 2, None, 5), 5, 5) == (
        "partition",
        E.UNKNOWN_TOPIC_OR_PARTITION,
    )


# ------------------------------------------------------------------------------------------------
# What the fuzz found, pinned down
# ------------------------------------------------------------------------------------------------
def test_an_epoch_beyond_int32_in_a_request_is_refused() -> None:
    """§1.3, §1.7: epochs are int32 (Kafka's schema; the quorum-state file stores an int32).
    kraft's msgpack wire carries any integer, so a request naming epoch 2**31 reaches the
    client: it must be refused with an error, not crash poll() or move the epoch."""
    context = _builder(1).with_unknown_leader(START_EPOCH).build()
    context.deliver_request(
        VoteRequest(
            replica_epoch=INT32_MAX + 1,
            replica_id=2,
            last_offset_epoch=2,
            last_offset=3,
            pre_vote=True,
        ),
        source=2,
    )
    context.poll()
    response = context.single_sent_response(VoteResponse)
    assert isinstance(response, VoteResponse)
    assert not response.vote_granted
    assert response.partition_error_code != E.NONE or response.error_code != E.NONE
    assert context.epoch == START_EPOCH


def test_an_epoch_beyond_int32_in_a_response_is_ignored() -> None:
    """§1.3 common response handling, §1.7: a response naming epoch 2**31 (impossible in
    Kafka's int32 schema, possible on kraft's msgpack wire) must not crash poll() nor move the
    replica to an epoch it cannot persist."""
    context = _prospective()
    request = context.sent_requests(VoteRequest)[0]
    context.deliver_response(request, VoteResponse(leader_epoch=INT32_MAX + 1))
    context.poll()
    assert context.epoch == START_EPOCH


def test_a_replica_at_the_largest_epoch_survives_an_election() -> None:
    """§1.1, §1.2 step 5: a pre-vote naming epoch INT32_MAX (a legal int32) moves the replica
    to that epoch. Standing for election there would need epoch INT32_MAX + 1, which cannot be
    stored: the replica must refuse (the request, or the candidacy) rather than crash poll()
    on every election timeout from then on."""
    context = _builder(1).with_unknown_leader(START_EPOCH).build()
    context.deliver_request(
        VoteRequest(
            replica_epoch=INT32_MAX,
            replica_id=2,
            last_offset_epoch=0,
            last_offset=0,
            pre_vote=True,
        ),
        source=2,
    )
    context.poll()
    context.sent_responses()
    for _ in range(3):
        context.expire_election_timeout()
        context.poll_until_idle()
        for request in context.sent_requests(VoteRequest):
            assert isinstance(request.body, VoteRequest)
            context.deliver_response(
                request,
                VoteResponse(
                    leader_epoch=request.body.replica_epoch,
                    vote_granted=True,
                ),
            )
        context.poll_until_idle()
    stored = context.stored_state()
    assert stored is not None and stored.epoch <= INT32_MAX
