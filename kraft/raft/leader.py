"""The leader's state: replica progress, the high watermark, check-quorum, heartbeats.

Kafka's ``LeaderState``: the high watermark (KIP-595) and check-quorum and the BeginQuorumEpoch
heartbeats (KIP-595, KAFKA-16536):

- The leader tracks every voter's log end offset as reported by its fetches (its own from its
  appends). Sorting the voters by end offset, best first, the offset at index ``voters // 2``
  is held by a majority: that is the candidate high watermark.
- KIP-595: the high watermark is only *set* once that candidate passes the epoch start offset,
  i.e. once a majority holds a record of this epoch (the LeaderChange control record written
  at the start of the epoch). Older records commit only indirectly. A new leader starts with
  no high watermark, and it never decreases.
- Only fetches from a matching voter (id and directory id) move the high watermark; observers
  are tracked for DescribeQuorum only.
- KIP-853: the voters are the latest set in the log, from the moment it is appended
  (:meth:`LeaderState.update_voter_set`): a replica added moves from the observers to the
  voters with its progress, a replica removed the other way -- the leader itself included: a
  leader that removed itself counts for nothing until it resigns, once the removal commits.
- Check-quorum: unless a majority of voters (the leader counts) fetched within 1.5 x the fetch
  timeout, the leader resigns. A single voter never does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Generic, TypeVar

from kraft.raft.states import NO_DEADLINE, ReplicaKey

if TYPE_CHECKING:
    from kraft.raft.accumulator import BatchAccumulator, CompletedBatch
    from kraft.raft.voter_set import VoterSet

__all__ = ["LeaderState", "ReplicaState"]

T = TypeVar("T")

#: Observers that have not fetched for this long are dropped from DescribeQuorum (Kafka: 5 min).
OBSERVER_SESSION_TIMEOUT_MS = 5 * 60 * 1000


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one replica's progress."""

    key: ReplicaKey
    end_offset: int | None = None
    last_fetch_timestamp_ms: int = -1
    last_caught_up_timestamp_ms: int = -1
    #: The leader's end offset when this replica last fetched (for the caught-up time).
    leader_end_at_last_fetch: int = -1


@dataclass(slots=True)
class LeaderState(Generic[T]):
    """Leading ``epoch``. ``epoch_start_offset`` is the offset of the epoch's LeaderChange."""

    epoch: int
    local: ReplicaKey
    epoch_start_offset: int
    voter_set: VoterSet
    accumulator: BatchAccumulator[T]
    check_quorum_timeout_ms: int
    begin_quorum_epoch_interval_ms: int
    check_quorum_deadline_ms: int
    begin_quorum_epoch_deadline_ms: int = 0
    high_watermark: int | None = None
    voter_states: dict[int, ReplicaState] = field(default_factory=dict)
    observer_states: dict[int, ReplicaState] = field(default_factory=dict)
    fetched_voters: set[int] = field(default_factory=set)
    resign_requested: bool = False
    #: The voter a leader transfer names as the only preferred successor (kraft/raft/embedding.py).
    transfer_to: int | None = None
    #: Drained batches a lack of descriptors or memory kept out of the log, in offset order:
    #: appended before anything drained later (kraft/raft/resources.py).
    unwritten: list[CompletedBatch[T]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Voters are keyed as the voter set has them: by id alone under kraft.version 0 (the
        # static set has no directory ids; DescribeQuorum then reports none), by id and
        # directory id under 1.
        for key in self.voter_set.keys:
            self.voter_states.setdefault(key.id, ReplicaState(key))
        if len(self.voter_set) <= 1:
            self.check_quorum_deadline_ms = NO_DEADLINE

    @property
    def voters(self) -> frozenset[int]:
        return self.voter_set.ids

    def update_voter_set(self, voter_set: VoterSet, now_ms: int) -> bool:
        """The voter set changed (a VotersRecord was appended or truncated away): move the
        replicas between voters and observers, keeping what is known of their progress.
        True if the high watermark moved."""
        old = self.voter_states
        observers = self.observer_states
        self.voter_set = voter_set
        self.voter_states = {}
        for key in voter_set.keys:
            state = old.pop(key.id, None)
            if state is None or not state.key.matches(key):
                state = observers.pop(key.id, None)
            if state is None or not state.key.matches(key):
                state = ReplicaState(key)
            self.voter_states[key.id] = replace(state, key=key)  # the set's key: directory id
        for replica_id, state in old.items():
            observers[replica_id] = state  # removed voters are observers from now on
        self.fetched_voters &= set(voter_set.ids)
        if len(voter_set) <= 1:
            self.check_quorum_deadline_ms = NO_DEADLINE
        elif self.check_quorum_deadline_ms == NO_DEADLINE:
            self.check_quorum_deadline_ms = now_ms + self.check_quorum_timeout_ms
        return self._maybe_update_high_watermark()

    def is_replica_caught_up(self, key: ReplicaKey, now_ms: int, max_lag_ms: int) -> bool:
        """Whether replica ``key`` has been caught up with this leader's end offset within
        the last ``max_lag_ms`` (Kafka's ``isReplicaCaughtUp``, for AddRaftVoter)."""
        state = self.voter_states.get(key.id) or self.observer_states.get(key.id)
        if state is None or not state.key.matches(key) or state.end_offset is None:
            return False
        return state.last_caught_up_timestamp_ms >= now_ms - max_lag_ms

    @property
    def name(self) -> str:
        return "Leader"

    # -- progress and the high watermark ---------------------------------------------------
    def update_local_state(self, end_offset: int, now_ms: int) -> bool:
        """The leader's own log end offset moved (after a drain); True if the HW moved."""
        state = self.voter_states.get(self.local.id)
        if state is None:  # a leader that removed itself (KIP-853) counts for nothing
            return False
        state.end_offset = end_offset
        state.last_fetch_timestamp_ms = now_ms
        state.last_caught_up_timestamp_ms = now_ms
        return self._maybe_update_high_watermark()

    def update_replica_state(
        self, key: ReplicaKey, now_ms: int, fetch_offset: int, leader_end_offset: int
    ) -> bool:
        """A replica fetched at ``fetch_offset``; True if the high watermark moved.

        The fetch offset is the replica's log end offset: everything below it is in its log.
        """
        if key.id < 0:
            return False  # an anonymous fetcher is never tracked
        voter = self.voter_states.get(key.id)
        if voter is not None and voter.key.matches(key):
            state = voter
        else:
            state = self.observer_states.get(key.id) or ReplicaState(key)
            if not state.key.matches(key):
                state = ReplicaState(key)  # the same id with another disk: a new replica
            self.observer_states[key.id] = state
        # Kafka's caught-up time: caught up now if it reached our end offset; caught up as of
        # its previous fetch if it reached what our end offset was back then.
        if fetch_offset >= leader_end_offset:
            state.last_caught_up_timestamp_ms = now_ms
        elif 0 <= state.leader_end_at_last_fetch <= fetch_offset:
            state.last_caught_up_timestamp_ms = state.last_fetch_timestamp_ms
        state.leader_end_at_last_fetch = leader_end_offset
        state.end_offset = fetch_offset
        state.last_fetch_timestamp_ms = now_ms
        if state is voter:
            return self._maybe_update_high_watermark()
        return False

    def _maybe_update_high_watermark(self) -> bool:
        offsets = sorted(
            (s.end_offset for s in self.voter_states.values() if s.end_offset is not None),
            reverse=True,
        )
        index = len(self.voter_states) // 2
        if index >= len(offsets):
            return False
        candidate = offsets[index]
        # KIP-595: no high watermark until a majority holds a record of this epoch.
        if candidate <= self.epoch_start_offset:
            return False
        if self.high_watermark is not None and candidate <= self.high_watermark:
            return False  # never decreases (a lower candidate after a voter change is ignored)
        self.high_watermark = candidate
        return True

    # -- check-quorum and heartbeats -------------------------------------------------------
    def record_fetch_for_check_quorum(self, replica_id: int, now_ms: int) -> None:
        """A voter fetched (or fetched a snapshot): maybe restart the check-quorum interval."""
        voters = self.voter_states
        if replica_id not in voters or replica_id == self.local.id:
            return
        self.fetched_voters.add(replica_id)
        # The leader counts itself towards the majority (while it is a voter).
        own = 1 if self.local.id in voters else 0
        if len(self.fetched_voters) + own >= len(voters) // 2 + 1:
            self.fetched_voters.clear()
            self.check_quorum_deadline_ms = now_ms + self.check_quorum_timeout_ms

    def check_quorum_expired(self, now_ms: int) -> bool:
        return now_ms >= self.check_quorum_deadline_ms

    def begin_quorum_epoch_due(self, now_ms: int) -> bool:
        return now_ms >= self.begin_quorum_epoch_deadline_ms

    def reset_begin_quorum_epoch_timer(self, now_ms: int) -> None:
        self.begin_quorum_epoch_deadline_ms = now_ms + self.begin_quorum_epoch_interval_ms

    def other_voters(self) -> list[int]:
        return sorted(v for v in self.voter_states if v != self.local.id)

    def successors_by_fetch_offset(self) -> list[int]:
        """The other voters, most caught-up first (EndQuorumEpoch's preferred candidates)."""
        others = [self.voter_states[v] for v in self.other_voters()]
        others.sort(key=lambda s: -1 if s.end_offset is None else s.end_offset, reverse=True)
        return [s.key.id for s in others]

    def preferred_successors(self) -> list[int]:
        """Whom the EndQuorumEpoch of a resignation names: a transfer's target alone, else
        every other voter, most caught-up first."""
        if self.transfer_to is not None:
            return [self.transfer_to]
        return self.successors_by_fetch_offset()

    def active_observers(self, now_ms: int) -> list[ReplicaState]:
        """Observers seen within the session timeout (older ones are dropped, as in Kafka)."""
        for replica_id, state in list(self.observer_states.items()):
            if now_ms - state.last_fetch_timestamp_ms > OBSERVER_SESSION_TIMEOUT_MS:
                del self.observer_states[replica_id]
        return list(self.observer_states.values())
