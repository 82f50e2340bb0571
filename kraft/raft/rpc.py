"""What the client's RPC handlers share: the wire's view of the leader, and the common checks.

The requests are served by ``VoteRpcs``, ``QuorumEpochRpcs``, ``FetchServer`` and
``describe_quorum``, after ``KafkaRaftClient`` has let :func:`refusal` turn away another
cluster's requests and out-of-range fields, and :class:`PeerCheck` the requests a peer may not
send (another replica's id, a stranger's vote); each answers with the leader and epoch this
replica knows and validates the topic-partition, and Kafka's voter-only and leader-only
validations apply to several of them. Those rules live here, once, as functions of the
:class:`~kraft.raft.quorum.QuorumState`. The response side shares ``leader_or_none``,
``endpoints_from_response``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, TypeVar

from kraft.common.ratelimit import LogLimiter
from kraft.common.uuids import ZERO_UUID
from kraft.protocol.api import METADATA_PARTITION_INDEX, METADATA_TOPIC_NAME
from kraft.protocol.envelope import InboundRequest
from kraft.protocol.errors import Errors
from kraft.protocol.int32 import int32_fields_in_range
from kraft.protocol.messages import (
    RESPONSE_TYPE_FOR,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchSnapshotRequest,
    NodeEndpoint,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.leader import LeaderState
from kraft.raft.quorum import QuorumState
from kraft.raft.states import Endpoints

__all__ = [
    "LISTENER_NAME",
    "PEER_REFUSAL_LOG_INTERVAL_MS",
    "PeerCheck",
    "claimed_replica_id",
    "directory_or_none",
    "endpoints_from_response",
    "epoch_response",
    "is_valid_voter_key",
    "leader_node_endpoints",
    "leader_or_none",
    "refusal",
    "valid_topic_partition",
    "valid_cluster_id",
    "validate_leader_only",
    "validate_voter_only",
    "wire_leader_id",
]

_EpochResponseT = TypeVar(
    "_EpochResponseT", VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse
)

logger = logging.getLogger(__name__)

#: The listener name kraft gives the endpoints it learns from a response's NodeEndpoints.
LISTENER_NAME = "CONTROLLER"


def directory_or_none(value: uuid.UUID) -> uuid.UUID | None:
    """A directory id from the wire: Kafka's ``ZERO_UUID`` means "not sent"."""
    return None if value == ZERO_UUID else value


def leader_or_none(leader_id: int) -> int | None:
    """A leader id from the wire: negative means "unknown"."""
    return None if leader_id < 0 else leader_id


def valid_topic_partition(body: Request | Response) -> bool:
    """Whether a message names KRaft's metadata topic-partition (the KIP-853 admin RPCs and
    ApiVersions name none: they always do)."""
    topic = getattr(body, "topic_name", METADATA_TOPIC_NAME)
    partition = getattr(body, "partition_index", METADATA_PARTITION_INDEX)
    return bool(topic == METADATA_TOPIC_NAME and partition == METADATA_PARTITION_INDEX)


def wire_leader_id(quorum: QuorumState[Any]) -> int:
    """The current leader's id as the wire says it: -1 when unknown."""
    leader = quorum.leader_id
    return -1 if leader is None else leader


def leader_node_endpoints(quorum: QuorumState[Any]) -> tuple[NodeEndpoint, ...]:
    """The current leader's endpoints as a response's NodeEndpoints (KIP-853)."""
    leader = quorum.leader_id
    if leader is None:
        return ()
    return tuple(
        NodeEndpoint(leader, host, port) for _name, host, port in quorum.current_leader_endpoints()
    )


def validate_leader_only(
    quorum: QuorumState[Any], epoch: int, shutting_down: bool
) -> Errors | None:
    """Kafka's ``validateLeaderOnlyRequest``: the error to answer with, or None."""
    if epoch < quorum.epoch:
        return Errors.FENCED_LEADER_EPOCH
    if epoch > quorum.epoch:
        return Errors.UNKNOWN_LEADER_EPOCH
    if not isinstance(quorum.state, LeaderState):
        return Errors.NOT_LEADER_OR_FOLLOWER
    if shutting_down:
        return Errors.BROKER_NOT_AVAILABLE
    return None


def validate_voter_only(quorum: QuorumState[Any], remote_id: int, epoch: int) -> Errors | None:
    """Kafka's ``validateVoterOnlyRequest``: the error to answer with, or None."""
    if epoch < quorum.epoch:
        return Errors.FENCED_LEADER_EPOCH
    if remote_id < 0:
        return Errors.INVALID_REQUEST
    return None


def valid_cluster_id(ours: str | None, theirs: str | None) -> bool:
    """Kafka: a missing id is accepted; any other value must equal ours (an empty one never
    does). A replica without a cluster id accepts any non-empty one."""
    if theirs is None:
        return True
    return theirs != "" and (ours is None or theirs == ours)


def is_valid_voter_key(
    quorum: QuorumState[Any], voter_id: int, voter_directory_id: uuid.UUID
) -> bool:
    """Whether a request meant for voter (``voter_id``, ``voter_directory_id``) is meant for
    this replica (KIP-853); a voter id that was not sent (v0) matches any replica."""
    if voter_id < 0:
        return True
    if quorum.local_id is None or voter_id != quorum.local_id:
        return False
    directory = directory_or_none(voter_directory_id)
    local_directory = quorum.local_directory_id
    return directory is None or local_directory is None or directory == local_directory


def epoch_response(
    quorum: QuorumState[Any], kind: type[_EpochResponseT], error: Errors
) -> _EpochResponseT:
    """A Vote/BeginQuorumEpoch/EndQuorumEpoch answer: the error, and what this replica knows
    of the leader and epoch."""
    return kind(
        partition_error_code=error,
        leader_id=wire_leader_id(quorum),
        leader_epoch=quorum.epoch,
        node_endpoints=leader_node_endpoints(quorum),
    )


def endpoints_from_response(
    quorum: QuorumState[Any], nodes: tuple[NodeEndpoint, ...], leader_id: int | None
) -> Endpoints:
    """The endpoints a response gives for the leader it names."""
    if leader_id is None:
        return ()
    endpoints = tuple(
        (LISTENER_NAME, node.host, node.port) for node in nodes if node.node_id == leader_id
    )
    # The static voter set knows every voter's address (Kafka's v0 behaviour).
    return endpoints or quorum.leader_endpoints(leader_id)


def refusal(request: InboundRequest, cluster_id: str | None) -> Response | None:
    """The answer refusing ``request`` before any handler sees it, or None: another cluster's
    id (INCONSISTENT_CLUSTER_ID), or an epoch or id outside int32 (INVALID_REQUEST)."""
    body = request.body
    if not valid_cluster_id(cluster_id, request.cluster_id):
        logger.warning(
            "refusing %s from %d: cluster id %r is not ours (%r)",
            type(body).__name__,
            request.source,
            request.cluster_id,
            cluster_id,
        )
        return RESPONSE_TYPE_FOR[type(body)](error_code=Errors.INCONSISTENT_CLUSTER_ID)
    if not int32_fields_in_range(body):
        logger.warning(
            "refusing %s from %d: an epoch or id outside int32", type(body).__name__, request.source
        )
        return RESPONSE_TYPE_FOR[type(body)](error_code=Errors.INVALID_REQUEST)
    return None


#: How often :class:`PeerCheck` logs at most, per kind of refusal; a hostile peer can repeat
#: its request as fast as it likes, and each line counts the refusals it did not log.
PEER_REFUSAL_LOG_INTERVAL_MS = 10_000

#: The requests that elect or announce a leader: what ``reject_unknown_replicas`` guards.
_LEADERSHIP_REQUESTS = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest)


def claimed_replica_id(body: Request) -> int | None:
    """The replica a request speaks for: the candidate of a Vote, the leader of a
    Begin/EndQuorumEpoch, the fetching replica of a Fetch or FetchSnapshot. None for a
    DescribeQuorum, which changes nothing and which admin tools send as replica -1."""
    match body:
        case VoteRequest() | FetchRequest() | FetchSnapshotRequest():
            return body.replica_id
        case BeginQuorumEpochRequest() | EndQuorumEpochRequest():
            return body.leader_id
    return None


class _RefusalLog:
    """One warning per interval for one kind of refusal, counting those it did not log."""

    __slots__ = ("_limiter", "_unlogged")

    def __init__(self) -> None:
        self._limiter = LogLimiter(PEER_REFUSAL_LOG_INTERVAL_MS)
        self._unlogged = 0

    def warn(self, now: int, message: str, *args: object) -> None:
        if not self._limiter.allow(now):
            self._unlogged += 1
            return
        more, self._unlogged = self._unlogged, 0
        suffix = f" ({more} more refused since the last line)" if more else ""
        logger.warning(message + suffix, *args)


class PeerCheck:
    """Refuses, before any handler sees it, a request its sender may not make
    (docs/operations.md "Security"); the answer is CLUSTER_AUTHORIZATION_FAILED, Kafka's
    answer to a principal without ``CLUSTER_ACTION``, and nothing changes (epoch, vote,
    leader, fetch state).

    - **Identity binding**: when the transport proved who the peer is
      (``InboundRequest.peer_id`` not None), the header's source and the replica the body
      speaks for (:func:`claimed_replica_id`), when not negative, must be that id. A request
      without a claim (DescribeQuorum) and a claim of -1 (an anonymous observer's Fetch)
      impersonate no replica and pass.
    - **reject_unknown_replicas** (``QuorumConfig``, off by default): a Vote,
      BeginQuorumEpoch or EndQuorumEpoch whose candidate or leader is not in the static voter
      set. Off, Kafka's semantics: any replica may ask for a vote or announce itself.
    """

    def __init__(self, quorum: QuorumState[Any], reject_unknown_replicas: bool) -> None:
        self._quorum = quorum
        self._reject_unknown_replicas = reject_unknown_replicas
        self._impostor_log = _RefusalLog()
        self._stranger_log = _RefusalLog()

    def refusal(self, request: InboundRequest, now: int) -> Response | None:
        """The CLUSTER_AUTHORIZATION_FAILED answer to ``request``, or None if it may go on."""
        body = request.body
        claimed = claimed_replica_id(body)
        if claimed is None:
            return None
        peer = request.peer_id
        if peer is not None:
            for claim in (request.source, claimed):
                if claim >= 0 and claim != peer:
                    self._impostor_log.warn(
                        now,
                        "refusing %s claiming to be replica %d: the peer's certificate %s",
                        type(body).__name__,
                        claim,
                        "names no replica" if peer < 0 else f"proves replica {peer}",
                    )
                    return _unauthorized(body)
        if (
            self._reject_unknown_replicas
            and isinstance(body, _LEADERSHIP_REQUESTS)
            and claimed not in self._quorum.voters
        ):
            self._stranger_log.warn(
                now,
                "refusing %s from replica %d: not a voter (reject_unknown_replicas)",
                type(body).__name__,
                claimed,
            )
            return _unauthorized(body)
        return None


def _unauthorized(body: Request) -> Response:
    return RESPONSE_TYPE_FOR[type(body)](error_code=Errors.CLUSTER_AUTHORIZATION_FAILED)
