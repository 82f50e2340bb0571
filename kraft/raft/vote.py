"""The Vote RPC (KIP-595, with KIP-996's pre-vote), both sides: the request a voter sends,
the answer a replica gives, and what the voter makes of the answers.

Kafka's ``buildVoteRequest`` and ``handleVoteRequest``: a Vote is validated (topic-partition,
its offsets and epochs, voter-only validation), a higher epoch is adopted first (pre-votes
too), the voter key must be this replica's (KIP-853), and the state decides
(``can_grant_vote`` of each epoch state, docs/protocol.md lists the rules). A standard vote
is persisted (``QuorumState.transition_to_voted``) before it is answered.

The answers are counted here: a majority of pre-votes makes a Prospective a Candidate, a
majority of votes makes a Candidate the leader, and a lost election backs off (Kafka's
``binaryExponentialElectionBackoffMs``) or, for a pre-vote, returns to the leader it knew.
Standing for election and the transitions themselves are the client's: they are passed in.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Generic, TypeVar

import msgspec

from kraft.common.ratelimit import LogLimiter
from kraft.common.uuids import ZERO_UUID
from kraft.log.api import OffsetAndEpoch, ReplicatedLog
from kraft.protocol.envelope import InboundRequest, InboundResponse
from kraft.protocol.errors import Errors
from kraft.protocol.messages import VoteRequest, VoteResponse
from kraft.raft.leader import LeaderState
from kraft.raft.quorum import QuorumState
from kraft.raft.repair import REPAIR_LOG_INTERVAL_MS, behind_repair_target
from kraft.raft.rpc import (
    directory_or_none,
    epoch_response,
    is_valid_voter_key,
    valid_topic_partition,
    validate_voter_only,
)
from kraft.raft.states import CandidateState, ProspectiveState, ReplicaKey, UnattachedState

__all__ = ["VoteRpcs"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Kafka's ``RETRY_BACKOFF_BASE_MS``: the unit of a lost candidate's randomized backoff.
RETRY_BACKOFF_BASE_MS = 100


class VoteRpcs(Generic[T]):
    """Builds Vote requests, answers them, and counts the answers."""

    def __init__(
        self,
        quorum: QuorumState[T],
        log: ReplicatedLog,
        rand: random.Random,
        election_backoff_max_ms: int,
        *,
        to_unattached: Callable[[int, int | None, int], None],
        to_voted: Callable[[ReplicaKey, int], None],
        to_candidate: Callable[[int], None],
        to_leader: Callable[[int], None],
        prospective_lost: Callable[[ProspectiveState, int], None],
    ) -> None:
        self._quorum = quorum
        self._log = log
        self._rand = rand
        self._election_backoff_max_ms = election_backoff_max_ms
        self._to_unattached = to_unattached
        self._to_voted = to_voted
        self._to_candidate = to_candidate
        self._to_leader = to_leader
        self._prospective_lost = prospective_lost
        self._repair_refusal_log = LogLimiter(REPAIR_LOG_INTERVAL_MS)

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
        candidate_log = OffsetAndEpoch(body.last_offset, body.last_offset_epoch)
        up_to_date = candidate_log >= OffsetAndEpoch(log.log_end_offset, log.last_fetched_epoch)
        if up_to_date and behind_repair_target(log, candidate_log):
            # §1.14: this replica may have acknowledged records that candidate lacks.
            up_to_date = False
            if self._repair_refusal_log.allow(now):
                logger.info(
                    "%s from %d refused: its log %s is behind this replica's repair target "
                    "%s (logged at most once a minute)",
                    "pre-vote" if body.pre_vote else "vote",
                    body.replica_id,
                    candidate_log,
                    log.repair_target,
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

    # -- The voter's side: the answers -----------------------------------------------------------
    def handle_vote_top_level_error(
        self, response: InboundResponse, error: int, now: int
    ) -> bool | None:
        if error == Errors.UNSUPPORTED_VERSION and isinstance(self._quorum.state, ProspectiveState):
            # A voter too old for pre-vote: stand for election at once.
            logger.info("voter %d does not support pre-vote", response.source)
            self._to_candidate(now)
            return True
        return None

    def handle_vote_response(
        self, response: InboundResponse, body: VoteResponse, leader: int | None, now: int
    ) -> bool:
        state = self._quorum.state
        if isinstance(state, ProspectiveState | CandidateState):
            if body.vote_granted:
                state.granting.add(response.source)
                state.rejecting.discard(response.source)
                if state.is_vote_granted():
                    if isinstance(state, ProspectiveState):
                        self._to_candidate(now)
                    else:
                        self._to_leader(now)
            else:
                state.rejecting.add(response.source)
                self._maybe_handle_election_loss(state, now)
        return True

    def _maybe_handle_election_loss(
        self, state: ProspectiveState | CandidateState, now: int
    ) -> None:
        if not state.is_vote_rejected():
            return
        if isinstance(state, CandidateState):
            if state.backoff_deadline_ms is None:
                backoff = self._binary_exponential_election_backoff_ms(state.retries)
                logger.info(
                    "epoch %d: election lost (rejected by %s); backing off %d ms",
                    state.epoch,
                    sorted(state.rejecting),
                    backoff,
                )
                state.backoff_deadline_ms = now + backoff
        else:
            logger.info(
                "epoch %d: pre-vote lost (rejected by %s)", state.epoch, sorted(state.rejecting)
            )
            self._prospective_lost(state, now)

    def _binary_exponential_election_backoff_ms(self, retries: int) -> int:
        if retries <= 0:
            raise ValueError(f"retries {retries} must be positive")
        return min(
            RETRY_BACKOFF_BASE_MS * self._rand.randrange(2 << min(20, retries - 1)),
            self._election_backoff_max_ms,
        )
