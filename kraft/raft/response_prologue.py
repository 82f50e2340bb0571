"""The response prologue: what every response says about the leader and epoch, handled once.

Every KRaft response names the leader and epoch its sender knows (and, since KIP-853, the
leader's endpoints); Kafka's ``maybeHandleCommonResponse`` reacts to them before an API's own
handler runs, as etcd's ``Step`` handles the term of every message before the message. Here
that is :meth:`ResponsePrologue.step`: top-level errors, the topic-partition, then the leader
and epoch -- read through one accessor per message type (:class:`ResponseKind`'s
``named_leader``) -- and only then the API's handler, with the errors it handles itself.

The transitions it may cause are the client's, passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from kraft.common.ratelimit import LogLimiter
from kraft.protocol.envelope import InboundResponse
from kraft.protocol.errors import Errors, error_name
from kraft.protocol.messages import (
    BeginQuorumEpochResponse,
    EndQuorumEpochResponse,
    FetchResponse,
    FetchSnapshotResponse,
    NodeEndpoint,
    Response,
    VoteResponse,
)
from kraft.raft.quorum import QuorumState
from kraft.raft.rpc import (
    endpoints_from_response,
    leader_or_none,
    valid_topic_partition,
)
from kraft.raft.states import Endpoints

if TYPE_CHECKING:
    from kraft.raft.quorum_epoch import QuorumEpochRpcs
    from kraft.raft.replica_fetcher import ReplicaFetcher
    from kraft.raft.vote import VoteRpcs

__all__ = [
    "ResponseKind",
    "ResponsePrologue",
    "response_kinds",
    "named_leader_of_epoch_response",
    "named_leader_of_fetch_response",
]

logger = logging.getLogger(__name__)

_NONE = Errors.NONE.value

#: At most one line per this many ms for the errors a peer may answer every retry (a peer that
#: refuses our identity, a leader with nothing to serve below its log start).
ERROR_LOG_INTERVAL_MS = 10_000

#: A response's (leader id as on the wire, epoch, leader endpoints).
NamedLeader = tuple[int, int, tuple[NodeEndpoint, ...]]


def named_leader_of_epoch_response(
    body: VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse,
) -> NamedLeader:
    return body.leader_id, body.leader_epoch, body.node_endpoints


def named_leader_of_fetch_response(body: FetchResponse | FetchSnapshotResponse) -> NamedLeader:
    leader = body.current_leader
    return leader.leader_id, leader.leader_epoch, body.node_endpoints


#: What the transport answers for a peer it could not reach, or that dropped the connection
#: with the request in flight: back off quietly, as for any lost request.
_UNREACHABLE = frozenset({Errors.BROKER_NOT_AVAILABLE, Errors.NETWORK_EXCEPTION})


class ResponseKind(NamedTuple):
    """How one type of response is handled (one entry of the client's dispatch table)."""

    #: The leader id, epoch and endpoints the response names (the prologue's input).
    named_leader: Callable[[Any], NamedLeader]
    #: The API's own handling, past the prologue: ``(response, body, leader, now) -> ok``.
    handle: Callable[[InboundResponse, Any, int | None, int], bool]
    #: Partition errors the handler deals with itself; any other is unexpected.
    own_errors: frozenset[int] = frozenset()
    #: A top-level error the API handles itself: ``(response, error, now) -> ok``, or None
    #: for the common handling.
    top_level_error: Callable[[InboundResponse, int, int], bool | None] | None = None


def response_kinds(
    fetcher: ReplicaFetcher[Any], vote_rpcs: VoteRpcs[Any], epoch_rpcs: QuorumEpochRpcs[Any]
) -> dict[type, ResponseKind]:
    """The client's dispatch table, one entry per response type it expects. kraft sends no
    DescribeQuorum: its response is never expected, so it has no entry."""
    epoch_named = named_leader_of_epoch_response
    fetch_named = named_leader_of_fetch_response
    return {
        FetchResponse: ResponseKind(fetch_named, fetcher.handle_fetch_response),
        VoteResponse: ResponseKind(
            epoch_named,
            vote_rpcs.handle_vote_response,
            top_level_error=vote_rpcs.handle_vote_top_level_error,
        ),
        BeginQuorumEpochResponse: ResponseKind(
            epoch_named, epoch_rpcs.handle_begin_quorum_epoch_response
        ),
        EndQuorumEpochResponse: ResponseKind(
            epoch_named, epoch_rpcs.handle_end_quorum_epoch_response
        ),
        FetchSnapshotResponse: ResponseKind(
            fetch_named,
            fetcher.handle_fetch_snapshot_response,
            own_errors=frozenset({Errors.SNAPSHOT_NOT_FOUND, Errors.POSITION_OUT_OF_RANGE}),
        ),
    }


class ResponsePrologue:
    """Runs the prologue, then the API's handler; returns whether the response succeeded
    (a failure backs its sender off).

    ``maybe_transition(leader_id, epoch, endpoints, now)`` reacts to a leader and epoch a
    peer names (False: they contradict ours); ``follow(epoch, leader_id, endpoints, now)``
    follows a leader learned in the current epoch.
    """

    def __init__(
        self,
        quorum: QuorumState[Any],
        maybe_transition: Callable[[int | None, int, Endpoints, int], bool],
        follow: Callable[[int, int, Endpoints, int], None],
    ) -> None:
        self._quorum = quorum
        self._maybe_transition = maybe_transition
        self._follow = follow
        self._error_log = LogLimiter(ERROR_LOG_INTERVAL_MS)

    def step(self, kind: ResponseKind, response: InboundResponse, body: Response, now: int) -> bool:
        if body.error_code != _NONE:
            if kind.top_level_error is not None:
                handled = kind.top_level_error(response, body.error_code, now)
                if handled is not None:
                    return handled
            return self._handle_top_level_error(body.error_code, response, now)
        if not valid_topic_partition(body):
            return False
        wire_leader, epoch, nodes = kind.named_leader(body)
        leader = leader_or_none(wire_leader)
        error: int = getattr(body, "partition_error_code", _NONE)
        handled = self._maybe_handle_common_response(
            error, leader, epoch, endpoints_from_response(self._quorum, nodes, leader), now
        )
        if handled is not None:
            return handled
        if error != _NONE and error not in kind.own_errors:
            if self._error_log.allow(now):
                logger.error(
                    "unexpected error %s in %s from %d (at most one such line every %d s)",
                    error_name(error),
                    type(body).__name__,
                    response.source,
                    ERROR_LOG_INTERVAL_MS // 1000,
                )
            return False
        return kind.handle(response, body, leader, now)

    def _handle_top_level_error(self, error: int, response: InboundResponse, now: int) -> bool:
        if error in _UNREACHABLE:
            return False
        # kraft: Kafka throws on CLUSTER_AUTHORIZATION_FAILED; here it means the peer refused
        # the replica id this node claims (kraft/raft/rpc.py: PeerCheck), a configuration
        # mistake that a fixed certificate or voter set heals: log and back off.
        if self._error_log.allow(now):
            logger.error(
                "error %s in %s from %d (at most one such line every %d s)",
                error_name(error),
                type(response.body).__name__,
                response.source,
                ERROR_LOG_INTERVAL_MS // 1000,
            )
        return False

    def _maybe_handle_common_response(
        self, error: int, leader_id: int | None, epoch: int, endpoints: Endpoints, now: int
    ) -> bool | None:
        """Kafka's ``maybeHandleCommonResponse``: None means "go on to the API's handler"."""
        quorum = self._quorum
        if epoch < quorum.epoch or error == Errors.UNKNOWN_LEADER_EPOCH:
            # We are past it: no longer relevant. kraft: an observer backs off before asking
            # that peer again (Kafka treats it as a success): an observer ahead of every voter
            # -- a leader that removed itself (KIP-853) -- would otherwise ask again at once,
            # as fast as the network answers, until the voters elect.
            return quorum.is_voter
        if epoch > quorum.epoch or error in (
            Errors.FENCED_LEADER_EPOCH,
            Errors.NOT_LEADER_OR_FOLLOWER,
        ):
            before = quorum.state
            if not self._maybe_transition(leader_id, epoch, endpoints, now):
                return False
            # kraft: when the answer taught us nothing (same leader, same epoch), back off
            # instead of asking again at once (Kafka treats it as a success).
            return quorum.state is not before
        # From here on the response is of our epoch.
        if leader_id is not None and not quorum.has_consistent_leader(epoch, leader_id):
            logger.error(
                "response names leader %d for epoch %d; this replica knows %s",
                leader_id,
                epoch,
                quorum.leader_id,
            )
            return False
        if quorum.learns_leader(leader_id, endpoints):
            assert leader_id is not None
            self._follow(epoch, leader_id, endpoints, now)
            return None if error == _NONE else True
        return None if error == _NONE else self._common_error_result(error)

    @staticmethod
    def _common_error_result(error: int) -> bool | None:
        """The errors every response handles alike: back off (False), or None for the rest."""
        if error == Errors.INVALID_REQUEST:
            # kraft: Kafka treats this as fatal; a peer that rejects our request is logged.
            logger.error("a peer answered INVALID_REQUEST")
        elif error == Errors.INVALID_VOTER_KEY:
            logger.info("a peer answered INVALID_VOTER_KEY")
        elif error not in _UNREACHABLE:
            return None
        return False
