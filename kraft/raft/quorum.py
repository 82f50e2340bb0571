"""``QuorumState``: the one place where a replica changes epoch state (Kafka's ``QuorumState``).

A replica is in exactly one state at a time, tagged with an epoch that never decreases. The
transitions it may make are the table :data:`TRANSITIONS` -- from each state, the states it may
enter and how the epoch must change -- which every ``transition_to_*`` method checks before
it changes anything; docs/protocol.md shows the same table as a diagram (generated from it, and
tests/raft/test_raft_quorum_state.py fails when the two differ). A few transitions also need
something of the state itself (:meth:`QuorumState._check_transition`): a vote only while none
was cast and no leader is known, a second Follower state in one epoch only for the same leader
with more endpoints, Leader only with a majority, and only a voter may stand for election.

Rules enforced here, and only here:

- Durable states (Unattached, Voted, Candidate, Leader, Follower) are written to the
  quorum-state store *before* the replica acts in them; Prospective and Resigned never are.
- At most one standard vote per epoch: a vote is persisted before it is granted.
- Illegal transitions raise :class:`~kraft.errors.IllegalStateError`.
- Startup (``initialize``) restores a state from the store and the log, never as Leader: a
  replica that was leader comes back Resigned in that epoch, so it cannot vote in it again.
- The leader's ``BatchAccumulator`` belongs to the quorum state from ``transition_to_leader``
  on: leaving Leader (and :meth:`QuorumState.close`) closes it, dropping what was not drained.

The high watermark a replica knows travels with it from state to state, except into Leader:
a new leader starts with none (KIP-595).
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Generic, TypeVar

from kraft.common.uuids import uuid_from_text, uuid_to_text
from kraft.config import QuorumConfig
from kraft.errors import IllegalStateError
from kraft.log.quorum_state import ElectionState, QuorumStateStore
from kraft.raft.leader import LeaderState
from kraft.raft.states import (
    NO_DEADLINE,
    CandidateState,
    Endpoints,
    EpochState,
    FollowerState,
    ProspectiveState,
    ReplicaKey,
    ResignedState,
    UnattachedState,
)
from kraft.raft.voter_history import VoterHistory
from kraft.raft.voter_set import VoterSet

if TYPE_CHECKING:
    from kraft.raft.accumulator import BatchAccumulator

__all__ = ["TRANSITIONS", "EpochChange", "QuorumState"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class EpochChange(Enum):
    """How a transition changes the epoch."""

    SAME = "same epoch"
    HIGHER = "higher epoch"
    SAME_OR_HIGHER = "same or higher epoch"
    NEXT = "epoch + 1"

    def allows(self, old: int, new: int) -> bool:
        if self is EpochChange.SAME:
            return new == old
        if self is EpochChange.HIGHER:
            return new > old
        if self is EpochChange.SAME_OR_HIGHER:
            return new >= old
        return new == old + 1


_SAME, _HIGHER, _SAME_OR_HIGHER = EpochChange.SAME, EpochChange.HIGHER, EpochChange.SAME_OR_HIGHER

#: The transitions a replica may make: from each state (by name; "Voted" is Unattached with a
#: vote), the states it may enter and how the epoch changes. "Voted" as a target is the
#: recording of a standard vote: a Prospective replica records it and stays Prospective
#: (Kafka's ``prospectiveAddVotedState``). Anything not listed raises ``IllegalStateError``.
TRANSITIONS: dict[str, dict[str, EpochChange]] = {
    "Unattached": {
        "Unattached": _HIGHER,
        "Voted": _SAME,
        "Prospective": _SAME,
        "Follower": _SAME_OR_HIGHER,
    },
    "Voted": {"Unattached": _HIGHER, "Prospective": _SAME, "Follower": _SAME_OR_HIGHER},
    "Prospective": {
        "Unattached": _SAME_OR_HIGHER,
        "Voted": _SAME,
        "Candidate": EpochChange.NEXT,
        "Follower": _SAME_OR_HIGHER,
    },
    "Candidate": {
        "Unattached": _HIGHER,
        "Prospective": _SAME,
        "Leader": _SAME,
        "Follower": _SAME_OR_HIGHER,
    },
    "Leader": {"Unattached": _HIGHER, "Resigned": _SAME, "Follower": _HIGHER},
    "Follower": {"Unattached": _HIGHER, "Prospective": _SAME, "Follower": _SAME_OR_HIGHER},
    "Resigned": {"Unattached": _HIGHER, "Prospective": _SAME, "Follower": _HIGHER},
}


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
        local_endpoints: Endpoints = (),
    ) -> None:
        self.local_id = local_id
        self.local_directory_id = local_directory_id
        #: This replica's listeners (what it tells a leader in UpdateRaftVoter, and announces
        #: when it leads); none: the voter set's entry for it, if any.
        self.local_endpoints = local_endpoints
        self.config = config
        #: The voter set and kraft.version by offset, as the log says (KIP-853).
        self.history = VoterHistory(VoterSet.from_static(config.voters))
        self._is_voter_at = -1
        self._is_voter = False
        self.store = store
        self.rand = rand
        #: Consecutive elections this replica stood in (drives the candidate backoff).
        self.candidate_retries = 0
        self.state: EpochState | LeaderState[T] = UnattachedState(
            epoch=0,
            high_watermark=None,
            leader_id=None,
            voted_key=None,
            election_deadline_ms=NO_DEADLINE,
        )
        #: What the state must allow, beyond :data:`TRANSITIONS`, per target state.
        self._guards: dict[str, Callable[[int, int | None, Endpoints], str | None]] = {
            "Voted": self._guard_vote,
            "Prospective": self._guard_election,
            "Candidate": self._guard_election,
            "Leader": self._guard_leader,
            "Follower": self._guard_follower,
        }

    # -- what the state says ----------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def voter_set(self) -> VoterSet:
        """The voters in force: the latest set in the log, committed or not (KIP-853)."""
        return self.history.last_voter_set

    @property
    def voters(self) -> frozenset[int]:
        return self.history.last_voter_set.ids

    @property
    def is_voter(self) -> bool:
        # Asked several times a poll: recomputed only when the voter set changed.
        changes = self.history.changes
        if changes != self._is_voter_at:
            local = self.local_key
            self._is_voter = local is not None and self.history.last_voter_set.is_voter(local)
            self._is_voter_at = changes
        return self._is_voter

    @property
    def is_observer(self) -> bool:
        return not self.is_voter

    @property
    def is_only_voter(self) -> bool:
        local = self.local_key
        return local is not None and self.history.last_voter_set.is_only_voter(local)

    def own_endpoints(self) -> Endpoints:
        """The listeners this replica announces: its own, else the voter set's entry."""
        if self.local_endpoints or self.local_id is None:
            return self.local_endpoints
        return self.leader_endpoints(self.local_id)

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
        """What the voter set knows of ``leader_id``'s listeners (none for a non-voter)."""
        if leader_id == self.local_id and self.local_endpoints:
            return self.local_endpoints
        return self.history.last_voter_set.endpoints(leader_id)

    def current_leader_endpoints(self) -> Endpoints:
        """The endpoints this replica knows for its current leader (none without one)."""
        state = self.state
        if isinstance(state, FollowerState):
            return state.leader_endpoints
        if isinstance(state, ProspectiveState) and state.leader_endpoints:
            return state.leader_endpoints
        leader = self.leader_id
        # Leader, Resigned, and a Prospective or Unattached replica that knows its leader:
        # the voter set holds that leader's address (Kafka keeps the endpoints a
        # Follower had when it turns Prospective).
        return () if leader is None else self.leader_endpoints(leader)

    def has_consistent_leader(self, epoch: int, leader_id: int | None) -> bool:
        """Whether a peer naming ``leader_id`` for ``epoch`` agrees with the leader we know."""
        if epoch != self.epoch or leader_id is None:
            return True
        known = self.leader_id
        return known is None or known == leader_id

    def learns_leader(self, leader_id: int | None, endpoints: Endpoints) -> bool:
        """Whether a peer naming ``leader_id`` for the current epoch tells us something: a
        leader we did not know, or more endpoints for the one we follow."""
        state = self.state
        if isinstance(state, ProspectiveState) and leader_id == state.leader_id:
            return False  # the leader it gave up on when it turned Prospective: no news
        if leader_id is None or leader_id == self.local_id or not endpoints:
            return False
        if self.leader_id is None:
            return True
        known = self.current_leader_endpoints()
        # The same endpoints again (every response from the leader we follow): no sets built.
        return endpoints != known and set(endpoints) > set(known)

    def random_election_timeout_ms(self) -> int:
        """Kafka's randomized election timeout: uniform in [T, 2T)."""
        timeout = self.config.election_timeout_ms
        return timeout + self.rand.randrange(timeout)

    def _election_deadline(self, now_ms: int) -> int:
        return now_ms + self.random_election_timeout_ms() if self.is_voter else NO_DEADLINE

    # -- startup ----------------------------------------------------------------------------------
    def initialize(self, log_last_epoch: int, now_ms: int) -> None:
        """Restore the state from the store and the log (Kafka's startup rules, in the order
        docs/protocol.md lists them)."""
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
            logger.info("stored epoch %d is below the log's epoch %d", stored.epoch, log_last_epoch)
            self.state = UnattachedState(log_last_epoch, None, None, None, deadline)
        elif local is not None and stored.leader_id == local.id:
            # Never resume as leader: come back Resigned, unable to vote again in this epoch.
            # It still owes the other voters an EndQuorumEpoch (Kafka's ResignedState).
            self.state = ResignedState(
                stored.epoch,
                None,
                local.id,
                self.voters,
                deadline,
                preferred_successors=[],
                unacknowledged=set(self.voters) - {local.id},
            )
        elif local is not None and voted is not None and voted.matches(local) and self.is_voter:
            self.state = CandidateState(
                stored.epoch,
                None,
                local.id,
                self.local_directory_id,
                self.voters,
                deadline,
                retries=1,
            )
            self.candidate_retries = 1
        elif stored.leader_id is not None:
            endpoints = self.leader_endpoints(stored.leader_id)
            if endpoints:
                self.state = FollowerState(
                    stored.epoch,
                    None,
                    stored.leader_id,
                    endpoints,
                    voted,
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

    # -- transitions ------------------------------------------------------------------------------
    def transition_to_unattached(
        self, epoch: int, now_ms: int, leader_id: int | None = None
    ) -> None:
        """A new epoch with no known leader (or one without endpoints), or a lost pre-vote."""
        state = self.state
        self._check_transition("Unattached", epoch)
        voted: ReplicaKey | None = None
        if epoch == self.epoch and isinstance(state, ProspectiveState):
            voted = state.voted_key
            leader_id = leader_id if leader_id is not None else state.leader_id
        # Kafka: a replica already waiting on an election timer (Unattached, Candidate,
        # Resigned, a Prospective that has not lost) keeps what remains of it when a higher
        # epoch arrives, so a stream of new epochs cannot postpone its election forever.
        if (
            epoch > self.epoch
            and self.is_voter
            and isinstance(
                state, UnattachedState | CandidateState | ResignedState | ProspectiveState
            )
        ):
            deadline = state.election_deadline_ms
        else:
            deadline = self._election_deadline(now_ms)
        self._durable(UnattachedState(epoch, state.high_watermark, leader_id, voted, deadline))

    def transition_to_voted(self, candidate: ReplicaKey, now_ms: int) -> None:
        """Record a standard vote for ``candidate`` in the current epoch (persisted first)."""
        state = self.state
        self._check_transition("Voted", self.epoch)
        if isinstance(state, UnattachedState):
            self._durable(
                UnattachedState(
                    state.epoch,
                    state.high_watermark,
                    None,
                    candidate,
                    self._election_deadline(now_ms),
                )
            )
        else:
            assert isinstance(state, ProspectiveState)
            # Kafka's prospectiveAddVotedState: still Prospective, the vote made durable,
            # and a fresh election timeout. A write that fails leaves no vote behind (it may
            # be retried: kraft/raft/resources.py).
            previous, state.voted_key = state.voted_key, candidate
            try:
                self._persist()
            except BaseException:
                state.voted_key = previous
                raise
            state.election_deadline_ms = self._election_deadline(now_ms)

    def transition_to_prospective(self, now_ms: int) -> None:
        """KIP-996: ask for pre-votes without changing the epoch (never persisted)."""
        state = self.state
        self._check_transition("Prospective", self.epoch)
        assert self.local_id is not None
        leader_id: int | None = None
        voted: ReplicaKey | None = None
        endpoints = self.current_leader_endpoints()
        if isinstance(state, UnattachedState | FollowerState):
            leader_id, voted = state.leader_id, state.voted_key
        elif isinstance(state, CandidateState):
            voted = self.local_key
        self._switch(
            ProspectiveState(
                self.epoch,
                state.high_watermark,
                self.local_id,
                leader_id,
                voted,
                self.voters,
                self._election_deadline(now_ms),
                leader_endpoints=endpoints if leader_id is not None else (),
            )
        )
        logger.info("epoch %d: Prospective (pre-vote)", self.epoch)

    def transition_to_candidate(self, now_ms: int) -> None:
        """Stand for election in epoch + 1, voting for ourselves (persisted)."""
        state = self.state
        self._check_transition("Candidate", self.epoch + 1)
        assert self.local_id is not None
        self.candidate_retries += 1
        self._durable(
            CandidateState(
                self.epoch + 1,
                state.high_watermark,
                self.local_id,
                self.local_directory_id,
                self.voters,
                self._election_deadline(now_ms),
                retries=self.candidate_retries,
            )
        )

    def transition_to_leader(
        self, epoch_start_offset: int, accumulator: BatchAccumulator[T], now_ms: int
    ) -> LeaderState[T]:
        """Won the election: lead this epoch (persisted), appending through ``accumulator``,
        which this quorum state owns from now on. Starts with no high watermark."""
        self._check_transition("Leader", self.epoch)
        local = self.local_key
        assert local is not None
        fetch_timeout = self.config.fetch_timeout_ms
        leader: LeaderState[T] = LeaderState(
            epoch=self.epoch,
            local=local,
            epoch_start_offset=epoch_start_offset,
            voter_set=self.voter_set,
            accumulator=accumulator,
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
        self._check_transition("Follower", epoch, leader_id, endpoints)
        voted: ReplicaKey | None = None
        if epoch == self.epoch:
            if isinstance(state, UnattachedState | ProspectiveState | FollowerState):
                voted = state.voted_key
            elif isinstance(state, CandidateState):
                voted = self.local_key
        self._durable(
            FollowerState(
                epoch,
                state.high_watermark,
                leader_id,
                endpoints,
                voted,
                now_ms + self.config.fetch_timeout_ms,
            )
        )
        self.candidate_retries = 0

    def transition_to_resigned(self, preferred_successors: list[int], now_ms: int) -> None:
        """Give up leadership of the current epoch (not persisted)."""
        state = self.state
        self._check_transition("Resigned", self.epoch)
        assert isinstance(state, LeaderState) and self.local_id is not None
        self._switch(
            ResignedState(
                state.epoch,
                state.high_watermark,
                self.local_id,
                self.voters,
                # A leader that removed itself is no voter, yet it must leave Resigned too.
                now_ms + self.random_election_timeout_ms(),
                preferred_successors=list(preferred_successors),
                unacknowledged=set(state.other_voters()),
            )
        )
        logger.info("epoch %d: Resigned; preferred successors %s", self.epoch, preferred_successors)

    def close(self) -> None:
        """The replica stops: a leader's unwritten appends are dropped."""
        state = self.state
        if isinstance(state, LeaderState):
            state.accumulator.close()

    # -- helpers ----------------------------------------------------------------------------------
    def _check_transition(
        self,
        target: str,
        epoch: int,
        leader_id: int | None = None,
        endpoints: Endpoints = (),
    ) -> None:
        """Raise ``IllegalStateError`` unless :data:`TRANSITIONS` allows entering ``target``
        in ``epoch`` from the current state, and the state allows it too (see the module
        docstring). ``leader_id`` and ``endpoints`` are the leader a Follower would follow."""
        state = self.state
        change = TRANSITIONS[state.name].get(target)
        if change is None or not change.allows(self.epoch, epoch):
            raise IllegalStateError(
                f"cannot become {target} in epoch {epoch} from {state.name} in epoch {self.epoch}"
            )
        guard = self._guards.get(target)
        problem = None if guard is None else guard(epoch, leader_id, endpoints)
        if problem is not None:
            raise IllegalStateError(f"cannot become {target} in epoch {epoch}: {problem}")

    def _guard_vote(self, epoch: int, leader_id: int | None, endpoints: Endpoints) -> str | None:
        state = self.state
        if isinstance(state, UnattachedState | ProspectiveState) and (
            state.voted_key is not None or state.leader_id is not None
        ):
            return f"voted for {state.voted_key}, leader {state.leader_id}"
        return None

    def _guard_election(
        self, epoch: int, leader_id: int | None, endpoints: Endpoints
    ) -> str | None:
        return None if self.is_voter else "an observer never stands for election"

    def _guard_leader(self, epoch: int, leader_id: int | None, endpoints: Endpoints) -> str | None:
        state = self.state
        if isinstance(state, CandidateState) and state.is_vote_granted():
            return None
        return "no majority of votes"

    def _guard_follower(
        self, epoch: int, leader_id: int | None, endpoints: Endpoints
    ) -> str | None:
        state = self.state
        if leader_id == self.local_id:
            return "a replica never follows itself"
        if isinstance(state, FollowerState) and epoch == self.epoch:
            if state.leader_id != leader_id:
                return f"epoch {epoch} has two leaders: {state.leader_id} and {leader_id}"
            if not set(endpoints) > set(state.leader_endpoints):
                return "already following this leader with these endpoints"
        return None

    def _durable(self, new_state: EpochState | LeaderState[T]) -> None:
        """Persist, then switch: a crash in between leaves the old, consistent state."""
        old = self.state
        self.state = new_state
        try:
            self._persist()
        except BaseException:
            self.state = old
            raise
        self._left(old)
        logger.info("epoch %d: %s -> %s", new_state.epoch, old.name, new_state.name)

    def _switch(self, new_state: EpochState | LeaderState[T]) -> None:
        """Enter a state that is never persisted (Prospective, Resigned)."""
        old = self.state
        self.state = new_state
        self._left(old)

    def _left(self, old: EpochState | LeaderState[T]) -> None:
        if isinstance(old, LeaderState) and not isinstance(self.state, LeaderState):
            old.accumulator.close()  # the epoch's unwritten appends die with it

    def _persist(self) -> None:
        state = self.state
        leader_id = self.leader_id if not isinstance(state, ProspectiveState) else state.leader_id
        voted = self.voted_key
        self.store.write_election_state(
            ElectionState(
                epoch=state.epoch,
                leader_id=leader_id,
                voted_id=None if voted is None else voted.id,
                voted_directory_id=None if voted is None else _directory_str(voted.directory_id),
            )
        )
