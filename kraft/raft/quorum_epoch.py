"""BeginQuorumEpoch and EndQuorumEpoch: a leader announcing its epoch, and its resignation.

Kafka's ``KafkaRaftClient`` builds and handles both RPCs (KIP-595): the leader sends
BeginQuorumEpoch to the other voters when elected and then every ``fetch_timeout_ms / 2`` as
a heartbeat (KAFKA-16536); a Resigned leader sends EndQuorumEpoch, naming its preferred
successors, until every voter acknowledged. A receiver validates the request (voter-only
validation, its voter key) and follows the leader it names; on EndQuorumEpoch a follower of
that leader brings its election forward by its rank among the successors.

:class:`QuorumEpochRpcs` holds no state of its own: the client's transitions are passed in as
``maybe_transition``, and a Resigned leader's unacknowledged voters are its
``ResignedState``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from kraft.config import QuorumConfig
from kraft.protocol.envelope import InboundRequest, InboundResponse
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    Endpoint,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    PreferredCandidate,
)
from kraft.raft.quorum import QuorumState
from kraft.raft.rpc import (
    directory_or_none,
    epoch_response,
    is_valid_voter_key,
    valid_topic_partition,
    validate_voter_only,
)
from kraft.raft.states import Endpoints, FollowerState, ResignedState

__all__ = ["QuorumEpochRpcs"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: ``maybe_transition(leader_id, epoch, endpoints, now)``: react to a leader a peer names;
#: False if it contradicts what this replica knows.
MaybeTransition = Callable[[int | None, int, Endpoints, int], bool]


def _ignore(voter: int) -> None:
    pass


class QuorumEpochRpcs(Generic[T]):
    """Builds the two requests and handles both sides of the two RPCs."""

    def __init__(
        self, quorum: QuorumState[T], config: QuorumConfig, maybe_transition: MaybeTransition
    ) -> None:
        self._quorum = quorum
        self._config = config
        self._maybe_transition = maybe_transition
        #: Told which voter acknowledged this leader's BeginQuorumEpoch (the client sets it).
        self.on_acknowledged: Callable[[int], None] = _ignore

    # -- sending ----------------------------------------------------------------------------------
    def _own_endpoints(self) -> tuple[Endpoint, ...]:
        local_id = self._quorum.local_id
        if local_id is None:
            return ()
        return tuple(
            Endpoint(name, host, port)
            for name, host, port in self._quorum.leader_endpoints(local_id)
        )

    def build_begin_quorum_epoch(self, destination: int) -> BeginQuorumEpochRequest:
        local_id = self._quorum.local_id
        assert local_id is not None
        return BeginQuorumEpochRequest(
            leader_id=local_id,
            leader_epoch=self._quorum.epoch,
            voter_id=destination,
            leader_endpoints=self._own_endpoints(),
        )

    def build_end_quorum_epoch(self, state: ResignedState) -> EndQuorumEpochRequest:
        return EndQuorumEpochRequest(
            leader_id=state.local_id,
            leader_epoch=state.epoch,
            preferred_candidates=tuple(
                PreferredCandidate(candidate) for candidate in state.preferred_successors
            ),
            leader_endpoints=self._own_endpoints(),
        )

    # -- receiving requests -----------------------------------------------------------------------
    def _adopt_announced_leader(
        self, body: BeginQuorumEpochRequest | EndQuorumEpochRequest, now: int
    ) -> Errors | None:
        """What Begin- and EndQuorumEpoch share: voter-only validation, then follow the leader
        they name (its endpoints from the request, else from the voter set, as Kafka does).
        Returns the error to answer with, or None."""
        error = validate_voter_only(self._quorum, body.leader_id, body.leader_epoch)
        if error is not None:
            return error
        endpoints = tuple((e.name, e.host, e.port) for e in body.leader_endpoints) or (
            self._quorum.leader_endpoints(body.leader_id)
        )
        if not self._maybe_transition(body.leader_id, body.leader_epoch, endpoints, now):
            return Errors.INVALID_REQUEST
        return None

    def handle_begin_quorum_epoch_request(
        self, request: InboundRequest, body: BeginQuorumEpochRequest, now: int
    ) -> BeginQuorumEpochResponse:
        if not valid_topic_partition(body):
            return BeginQuorumEpochResponse(error_code=Errors.INVALID_REQUEST)
        quorum = self._quorum
        error = self._adopt_announced_leader(body, now)
        if error is None and not is_valid_voter_key(quorum, body.voter_id, body.voter_directory_id):
            logger.info("BeginQuorumEpoch for voter %d, not this replica", body.voter_id)
            error = Errors.INVALID_VOTER_KEY
        return epoch_response(quorum, BeginQuorumEpochResponse, error or Errors.NONE)

    def handle_end_quorum_epoch_request(
        self, request: InboundRequest, body: EndQuorumEpochRequest, now: int
    ) -> EndQuorumEpochResponse:
        if not valid_topic_partition(body):
            return EndQuorumEpochResponse(error_code=Errors.INVALID_REQUEST)
        quorum = self._quorum
        error = self._adopt_announced_leader(body, now)
        if error is not None:
            return epoch_response(quorum, EndQuorumEpochResponse, error)
        state = quorum.state
        if isinstance(state, FollowerState) and state.leader_id == body.leader_id:
            backoff = self._end_epoch_election_backoff(body.preferred_candidates)
            logger.debug(
                "leader %d resigned epoch %d: election in %d ms",
                body.leader_id,
                body.leader_epoch,
                backoff,
            )
            state.fetch_deadline_ms = now + backoff
            # The leader is gone: this follower grants pre-votes again (KIP-996 protects a
            # live leader). Without it, a leader that removed itself (KIP-853) leaves voters
            # that all fetched from it and refuse one another's pre-votes.
            state.has_fetched = False
        return epoch_response(quorum, EndQuorumEpochResponse, Errors.NONE)

    def _end_epoch_election_backoff(self, candidates: Sequence[PreferredCandidate]) -> int:
        """Kafka's ``endEpochElectionBackoff``: the best successor goes first, the others
        back off exponentially by position, and a replica not named waits the maximum."""
        backoff_max = self._config.election_backoff_max_ms
        local_id, local_directory = self._quorum.local_id, self._quorum.local_directory_id
        position = len(candidates)
        for i, candidate in enumerate(candidates):
            directory = directory_or_none(candidate.candidate_directory_id)
            if candidate.candidate_id == local_id and (
                directory is None or directory == local_directory
            ):
                position = i
                break
        if position == 0:
            return 0
        if position >= len(candidates):
            return backoff_max
        base = backoff_max >> (len(candidates) - 1)
        return min(backoff_max, base << (position - 1))

    # -- receiving responses (past the client's response prologue) --------------------------------
    def handle_begin_quorum_epoch_response(
        self,
        response: InboundResponse,
        body: BeginQuorumEpochResponse,
        leader: int | None,
        now: int,
    ) -> bool:
        """A heartbeat answered NONE: the voter is in this leader's epoch (read barriers
        count it: kraft/raft/read_index.py)."""
        self.on_acknowledged(response.source)
        return True

    def handle_end_quorum_epoch_response(
        self,
        response: InboundResponse,
        body: EndQuorumEpochResponse,
        leader: int | None,
        now: int,
    ) -> bool:
        """A Resigned replica stops resending EndQuorumEpoch to a voter that acknowledged."""
        state = self._quorum.state
        if isinstance(state, ResignedState):
            state.unacknowledged.discard(response.source)
        return True
