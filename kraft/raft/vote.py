"""The Vote RPC (KIP-595, with KIP-996's pre-vote): the request a voter sends, and the answer
a replica gives.

Kafka's ``buildVoteRequest`` and ``handleVoteRequest``: a Vote is validated (topic-partition,
its offsets and epochs, voter-only validation), a higher epoch is adopted first (pre-votes
too), the voter key must be this replica's (KIP-853), and the state decides
(``can_grant_vote`` of each epoch state, docs/protocol.md lists the rules). A standard vote
is persisted (``QuorumState.transition_to_voted``) before it is answered.

The election itself -- standing, counting the answers, backing off -- is the client's; the
two transitions a Vote request may cause are passed in, as
``to_unattached(epoch, leader_id, now)`` and ``to_voted(candidate, now)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

import msgspec

from kraft.common.uuids import ZERO_UUID
from kraft.log.api import OffsetAndEpoch, ReplicatedLog
from kraft.protocol.envelope import InboundRequest
from kraft.protocol.errors import Errors
from kraft.protocol.messages import VoteRequest, VoteResponse
from kraft.raft.leader import LeaderState
from kraft.raft.quorum import QuorumState
from kraft.raft.rpc import (
    directory_or_none,
    epoch_response,
    is_valid_voter_key,
    valid_topic_partition,
    validate_voter_only,
)
from kraft.raft.states import ProspectiveState, ReplicaKey, UnattachedState

__all__ = ["VoteRpcs"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class VoteRpcs(Generic[T]):
    """Builds Vote requests and answers them."""

    def __init__(
        self,
        quorum: QuorumState[T],
        log: ReplicatedLog,
        to_unattached: Callable[[int, int | None, int], None],
        to_voted: Callable[[ReplicaKey, int], None],
    ) -> None:
        self._quorum = quorum
        self._log = log
        self._to_unattached = to_unattached
        self._to_voted = to_voted

    def build_vote_request(self, destination: int, pre_vote: bool) -> VoteRequest:
        quorum = self._quorum
        assert quorum.local_id is not None
        return VoteRequest(
            replica_epoch=quorum.epoch,
            replica_id=quorum.local_id,
            last_offset_epoch=self._log.last_fetched_epoch,
            last_offset=self._log.log_end_offset,
            pre_vote=pre_vote,
            replica_directory_id=quorum.local_directory_id or ZERO_UUID,
            voter_id=destination,
        )

    def _vote_response(self, error: Errors, granted: bool) -> VoteResponse:
        response = epoch_response(self._quorum, VoteResponse, error)
        return msgspec.structs.replace(response, vote_granted=granted) if granted else response

    def _invalid_vote_request(self, body: VoteRequest) -> VoteResponse | None:
        """The answer to a Vote that fails validation (before any state changes), or None."""
        if not valid_topic_partition(body):
            return VoteResponse(error_code=Errors.INVALID_REQUEST)
        if body.last_offset < 0 or body.last_offset_epoch < 0:
            return self._vote_response(Errors.INVALID_REQUEST, False)
        if (not body.pre_vote and body.last_offset_epoch >= body.replica_epoch) or (
            body.pre_vote and body.last_offset_epoch > body.replica_epoch
        ):
            return self._vote_response(Errors.INVALID_REQUEST, False)
        error = validate_voter_only(self._quorum, body.replica_id, body.replica_epoch)
        return None if error is None else self._vote_response(error, False)

    def handle_vote_request(
        self, request: InboundRequest, body: VoteRequest, now: int
    ) -> VoteResponse:
        invalid = self._invalid_vote_request(body)
        if invalid is not None:
            return invalid
        quorum, log = self._quorum, self._log
        if body.replica_epoch > quorum.epoch:
            self._to_unattached(body.replica_epoch, None, now)
        if not is_valid_voter_key(quorum, body.voter_id, body.voter_directory_id):
            logger.info("vote request for voter %d, not this replica", body.voter_id)
            return self._vote_response(Errors.INVALID_VOTER_KEY, False)
        candidate = ReplicaKey(body.replica_id, directory_or_none(body.replica_directory_id))
        up_to_date = OffsetAndEpoch(body.last_offset, body.last_offset_epoch) >= OffsetAndEpoch(
            log.log_end_offset, log.last_fetched_epoch
        )
        state = quorum.state
        granted = False
        if not isinstance(state, LeaderState):
            granted = state.can_grant_vote(candidate, up_to_date, body.pre_vote)
        if granted and not body.pre_vote:
            if quorum.local_id is None:
                granted = False  # kraft: an anonymous replica cannot persist a vote
            elif isinstance(state, UnattachedState | ProspectiveState) and state.voted_key is None:
                self._to_voted(candidate, now)
        logger.debug(
            "%s from %d in epoch %d: %s",
            "pre-vote" if body.pre_vote else "vote",
            body.replica_id,
            body.replica_epoch,
            "granted" if granted else "rejected",
        )
        return self._vote_response(Errors.NONE, granted)
