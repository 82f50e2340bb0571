"""``QuorumState``: the one place where a replica changes epoch state.

Theory of operation (KRAFT-BEHAVIOUR §1.1, Kafka's ``QuorumState``):

A replica is in exactly one state at a time, tagged with an epoch that never decreases::

                   +------------------ higher epoch seen (any state) ------------------+
                   v                                                                    |
    Unattached --timeout--> Prospective --majority pre-votes--> Candidate --majority--> Leader
     (maybe voted)   ^   <--loss/timeout--'      ^   <--backoff/timeout--'               |
        |            |                           |                                     resign
        +-- leader --+--> Follower --fetch timeout-'                                     v
                                                                 Unattached <--timeout-- Resigned
                                                                 (epoch + 1)

Rules enforced here, and only here:

- Durable states (Unattached, Voted, Candidate, Leader, Follower) are written to the
  quorum-state store *before* the replica acts in them; Prospective and Resigned never are.
- At most one standard vote per epoch: a vote is persisted before it is granted.
- Illegal transitions raise :class:`~kraft.errors.IllegalStateError`: a lower epoch; Leader to
  Follower in the same epoch; Follower to Follower in the same epoch unless the new leader
  endpoints are a superset; Candidate from anything but Prospective; an observer (non-voter)
  becoming Prospective, Candidate or Leader.
- Startup (``initialize``) restores a state from the store and the log, never as Leader: a
  replica that was leader comes back Resigned in that epoch, so it cannot vote in it again.

The high watermark a replica knows travels with it from state to state, except into Leader:
a new leader starts with none (§1.5).
"""

from __future__ import annotations

import logging
import random
import uuid
from typing import TYPE_CHECKING, Generic, TypeVar

from kraft.common.uuids import uuid_from_text, uuid_to_text
from kraft.config import QuorumConfig
from kraft.errors import IllegalStateError
from kraft.log.quorum_state import ElectionState, QuorumStateStore
from kraft.raft.leader import LeaderState
from kraft.raft.states import (
    NO_DEADLINE,
    CandidateState,
    EpochState,
    FollowerState,
    ProspectiveState,
    ReplicaKey,
    ResignedState,
    UnattachedState,
)

if TYPE_CHECKING:
    from kraft.raft.accumulator import BatchAccumulator

__all__ = ["QuorumState"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

Endpoints = tuple[tuple[str, str, int], ...]


def _directory_str(directory_id: uuid.UUID | None) -> str | None:
    return None if directory_id is None else uuid_to_text(directory_id)


def _directory_uuid(directory_id: str | None) -> uuid.UUID | None:
    return None if directory_id is None else uuid_from_text(directory_id)


class QuorumState(Generic[T]):
    """Owns the replica's epoch state and every transition between states."""

    def __init__(
        self,
        local_id: int | None,
        local_directory_id: uuid.UUID | None,
        config: QuorumConfig,
        store: QuorumStateStore,
        rand: random.Random,
    ) -> None:
        self.local_id = local_id
        self.local_directory_id = local_directory_id
        self.config = config
        self.voters = config.voter_ids
        self.store = store
        self.rand = rand
        #: Consecutive elections this replica stood in (drives the candidate backoff).
        self.candidate_retries = 0
        self.state: EpochState | LeaderState[T] = UnattachedState(
            epoch=0, high_watermark=None, leader_id=None, voted_key=None,
            election_deadline_ms=NO_DEADLINE,
        )

    # -- what the state says -----------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def is_voter(self) -> bool:
        return self.local_id is not None and self.local_id in self.voters

    @property
    def is_observer(self) -> bool:
        return not self.is_voter

    @property
    def local_key(self) -> ReplicaKey | None:
        if self.local_id is None:
            return None
        return ReplicaKey(self.local_id, self.local_directory_id)

    @property
    def leader_id(self) -> int | None:
        state = self.state
        if isinstance(state, LeaderState | ResignedState):
            return self.local_id
        if isinstance(state, FollowerState):
            return state.leader_id
        if isinstance(state, UnattachedState | ProspectiveState):
            return state.leader_id
        return None

    @property
    def voted_key(self) -> ReplicaKey | None:
        state = self.state
        if isinstance(state, UnattachedState | ProspectiveState | FollowerState):
            return state.voted_key
        if isinstance(state, CandidateState):
            return self.local_key
        return None

    @property
    def high_watermark(self) -> int | None:
        return self.state.high_watermark

    def leader_endpoints(self, leader_id: int) -> Endpoints:
        endpoint = self.config.voters.get(leader_id)
        if endpoint is None:
            return ()
        return (("CONTROLLER", endpoint.host, endpoint.port),)

    def random_election_timeout_ms(self) -> int:
        """Kafka's randomized election timeout: uniform in [T, 2T)."""
        timeout = self.config.election_timeout_ms
        return timeout + self.rand.randrange(timeout)

    def _election_deadline(self, now_ms: int) -> int:
        return now_ms + self.random_election_timeout_ms() if self.is_voter else NO_DEADLINE

    # -- startup -----------------------------------------------------------------------------
    def initialize(self, log_last_epoch: int, now_ms: int) -> None:
        """Restore the state from the store and the log (§1.1 startup rules, in order)."""
        stored = self.store.read_election_state() or ElectionState(0)
        local = self.local_key
        if stored.voted_id is not None and local is None:
            raise IllegalStateError("the stored state holds a vote but this replica has no id")
        voted = (
            ReplicaKey(stored.voted_id, _directory_uuid(stored.voted_directory_id))
            if stored.voted_id is not None
            else None
        )
        deadline = self._election_deadline(now_ms)
        if stored.epoch < log_last_epoch:
            # The log has seen a later epoch than the store: trust the log, forget the vote.
            logger.info("stored epoch %d is below the log's epoch %d", stored.epoch,
                        log_last_epoch)
            self.state = UnattachedState(log_last_epoch, None, None, None, deadline)
        elif local is not None and stored.leader_id == local.id:
            # Never resume as leader: come back Resigned, unable to vote again in this epoch.
            # It still owes the other voters an EndQuorumEpoch (Kafka's ResignedState).
            self.state = ResignedState(
                stored.epoch, None, local.id, self.voters, deadline,
                preferred_successors=[], unacknowledged=set(self.voters) - {local.id},
            )
        elif local is not None and voted is not None and voted.matches(local) and self.is_voter:
            self.state = CandidateState(
                stored.epoch, None, local.id, self.local_directory_id, self.voters, deadline,
                retries=1,
            )
            self.candidate_retries = 1
        elif stored.leader_id is not None:
            endpoints = self.leader_endpoints(stored.leader_id)
            if endpoints:
                self.state = FollowerState(
                    stored.epoch, None, stored.leader_id, endpoints, voted,
                    now_ms + self.config.fetch_timeout_ms,
                )
            else:
                self.state = UnattachedState(stored.epoch, None, stored.leader_id, voted, deadline)
        else:
            self.state = UnattachedState(stored.epoch, None, None, voted, deadline)
        # As Kafka's initialize, a durable restored state is written back (Resigned never is:
        # the store already says this replica led the epoch).
        if not isinstance(self.state, ResignedState):
            self._persist()
        logger.info("initialized at epoch %d as %s", self.epoch, self.state.name)

    # -- transitions ---------------------------------------------------------------------------
    def transition_to_unattached(
        self, epoch: int, now_ms: int, leader_id: int | None = None
    ) -> None:
        """A new epoch with no known leader (or one without endpoints), or a lost pre-vote."""
        state = self.state
        if epoch < self.epoch or (epoch == self.epoch and not isinstance(state, ProspectiveState)):
            raise IllegalStateError(
                f"cannot become Unattached in epoch {epoch} from {state.name} in {self.epoch}"
            )
        voted = state.voted_key if isinstance(state, ProspectiveState) and epoch == self.epoch \
            else None
        if epoch == self.epoch and isinstance(state, ProspectiveState):
            leader_id = leader_id if leader_id is not None else state.leader_id
        # Kafka: a replica already waiting on an election timer (Unattached, Candidate,
        # Resigned, a Prospective that has not lost) keeps what remains of it when a higher
        # epoch arrives, so a stream of new epochs cannot postpone its election forever.
        if epoch > self.epoch and self.is_voter and isinstance(
            state, UnattachedState | CandidateState | ResignedState | ProspectiveState
        ):
            deadline = state.election_deadline_ms
        else:
            deadline = self._election_deadline(now_ms)
        self._durable(UnattachedState(epoch, state.high_watermark, leader_id, voted, deadline))

    def transition_to_voted(self, candidate: ReplicaKey, now_ms: int) -> None:
        """Record a standard vote for ``candidate`` in the current epoch (persisted first)."""
        state = self.state
        if isinstance(state, UnattachedState | ProspectiveState):
            if state.voted_key is not None or state.leader_id is not None:
                raise IllegalStateError(
                    f"cannot vote for {candidate.id} in epoch {self.epoch}: "
                    f"voted {state.voted_key}, leader {state.leader_id}"
                )
            if isinstance(state, UnattachedState):
                self._durable(UnattachedState(state.epoch, state.high_watermark, None, candidate,
                                              self._election_deadline(now_ms)))
            else:
                # Kafka's prospectiveAddVotedState: still Prospective, the vote made durable,
                # and a fresh election timeout.
                state.voted_key = candidate
                state.election_deadline_ms = self._election_deadline(now_ms)
                self._persist()
            return
        raise IllegalStateError(f"cannot vote from {state.name}")

    def transition_to_prospective(self, now_ms: int) -> None:
        """KIP-996: ask for pre-votes without changing the epoch (never persisted)."""
        state = self.state
        if not self.is_voter or self.local_id is None:
            raise IllegalStateError("an observer never becomes Prospective")
        if isinstance(state, LeaderState | ProspectiveState):
            raise IllegalStateError(f"cannot become Prospective from {state.name}")
        leader_id: int | None = None
        voted: ReplicaKey | None = None
        if isinstance(state, UnattachedState | FollowerState):
            leader_id, voted = state.leader_id, state.voted_key
        elif isinstance(state, CandidateState):
            voted = self.local_key
        self.state = ProspectiveState(
            self.epoch, state.high_watermark, self.local_id, leader_id, voted, self.voters,
            self._election_deadline(now_ms),
        )
        logger.info("epoch %d: Prospective (pre-vote)", self.epoch)

    def transition_to_candidate(self, now_ms: int) -> None:
        """Stand for election in epoch + 1, voting for ourselves (persisted)."""
        state = self.state
        if not isinstance(state, ProspectiveState) or self.local_id is None:
            raise IllegalStateError(f"only a Prospective voter may become Candidate, not "
                                    f"{state.name}")
        self.candidate_retries += 1
        self._durable(CandidateState(
            self.epoch + 1, state.high_watermark, self.local_id, self.local_directory_id,
            self.voters, self._election_deadline(now_ms), retries=self.candidate_retries,
        ))

    def transition_to_leader(
        self, epoch_start_offset: int, accumulator: BatchAccumulator[T], now_ms: int
    ) -> LeaderState[T]:
        """Won the election: lead this epoch (persisted). Starts with no high watermark."""
        state = self.state
        local = self.local_key
        if not isinstance(state, CandidateState) or local is None:
            raise IllegalStateError(f"only a Candidate may become Leader, not {state.name}")
        if not state.is_vote_granted():
            raise IllegalStateError("cannot become Leader without a majority of votes")
        fetch_timeout = self.config.fetch_timeout_ms
        leader: LeaderState[T] = LeaderState(
            epoch=state.epoch, local=local, epoch_start_offset=epoch_start_offset,
            voters=self.voters, accumulator=accumulator,
            check_quorum_timeout_ms=fetch_timeout * 3 // 2,
            begin_quorum_epoch_interval_ms=fetch_timeout // 2,
            check_quorum_deadline_ms=now_ms + fetch_timeout * 3 // 2,
        )
        self._durable(leader)
        self.candidate_retries = 0
        return leader

    def transition_to_follower(
        self, epoch: int, leader_id: int, endpoints: Endpoints, now_ms: int
    ) -> None:
        """Follow ``leader_id`` in ``epoch`` (persisted)."""
        state = self.state
        if epoch < self.epoch:
            raise IllegalStateError(f"cannot follow in epoch {epoch}, below {self.epoch}")
        if leader_id == self.local_id:
            raise IllegalStateError("cannot follow ourselves")
        voted: ReplicaKey | None = None
        if epoch == self.epoch:
            if isinstance(state, LeaderState | ResignedState):
                raise IllegalStateError(
                    f"cannot follow {leader_id} in epoch {epoch}: we lead(led) it"
                )
            if isinstance(state, FollowerState):
                if state.leader_id != leader_id:
                    raise IllegalStateError(
                        f"epoch {epoch} has two leaders: {state.leader_id} and {leader_id}"
                    )
                if not set(endpoints) > set(state.leader_endpoints):
                    raise IllegalStateError("already following this leader with these endpoints")
            if isinstance(state, UnattachedState | ProspectiveState | FollowerState):
                voted = state.voted_key
            elif isinstance(state, CandidateState):
                voted = self.local_key
        self._durable(FollowerState(
            epoch, state.high_watermark, leader_id, endpoints, voted,
            now_ms + self.config.fetch_timeout_ms,
        ))
        self.candidate_retries = 0

    def transition_to_resigned(self, preferred_successors: list[int], now_ms: int) -> None:
        """Give up leadership of the current epoch (not persisted)."""
        state = self.state
        if not isinstance(state, LeaderState) or self.local_id is None:
            raise IllegalStateError(f"only the Leader may resign, not {state.name}")
        state.accumulator.close()
        self.state = ResignedState(
            state.epoch, state.high_watermark, self.local_id, self.voters,
            self._election_deadline(now_ms), preferred_successors=list(preferred_successors),
            unacknowledged=set(state.other_voters()),
        )
        logger.info("epoch %d: Resigned; preferred successors %s", self.epoch,
                    preferred_successors)

    # -- helpers -------------------------------------------------------------------------------
    def _durable(self, new_state: EpochState | LeaderState[T]) -> None:
        """Persist, then switch: a crash in between leaves the old, consistent state."""
        old = self.state
        if isinstance(old, LeaderState) and not isinstance(new_state, LeaderState):
            old.accumulator.close()
        self.state = new_state
        try:
            self._persist()
        except BaseException:
            self.state = old
            raise
        logger.info("epoch %d: %s -> %s", new_state.epoch, old.name, new_state.name)

    def _persist(self) -> None:
        state = self.state
        leader_id = self.leader_id if not isinstance(state, ProspectiveState) else state.leader_id
        voted = self.voted_key
        self.store.write_election_state(ElectionState(
            epoch=state.epoch,
            leader_id=leader_id,
            voted_id=None if voted is None else voted.id,
            voted_directory_id=None if voted is None else _directory_str(voted.directory_id),
        ))

