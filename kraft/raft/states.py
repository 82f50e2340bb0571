"""The epoch states of a replica, and the vote each of them may grant.

A replica is always in exactly one of these states (Kafka's ``EpochState`` classes);
``QuorumState`` in ``kraft.raft.quorum`` owns the transitions between them. The states here
are plain data plus the state-local rules: timers (absolute deadlines in the client's
monotonic milliseconds) and ``can_grant_vote`` (the vote-granting rules listed in
docs/protocol.md). They never persist anything and never change state themselves.

The leader's state, with its replica tracking and high-watermark rules, lives in
``kraft.raft.leader``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

__all__ = [
    "CandidateState",
    "Endpoints",
    "EpochState",
    "FollowerState",
    "NO_DEADLINE",
    "ProspectiveState",
    "ReplicaKey",
    "ResignedState",
    "UnattachedState",
]

#: A deadline that never comes (an observer's election timer).
NO_DEADLINE = 2**63 - 1

#: A leader's endpoints as the replica keeps them: (listener name, host, port) each.
Endpoints = tuple[tuple[str, str, int], ...]


@dataclass(frozen=True, slots=True)
class ReplicaKey:
    """A replica's id and, since KIP-853, its directory id (``None``: not known / not sent)."""

    id: int
    directory_id: uuid.UUID | None = None

    def matches(self, other: ReplicaKey) -> bool:
        """Same id, and same directory unless either side does not know it (Kafka's rule)."""
        if self.id != other.id:
            return False
        if self.directory_id is None or other.directory_id is None:
            return True
        return self.directory_id == other.directory_id


def _unattached_grant(
    voted_key: ReplicaKey | None,
    leader_id: int | None,
    candidate: ReplicaKey,
    log_up_to_date: bool,
    pre_vote: bool,
) -> bool:
    """Vote granting for a replica with no leader to follow (Unattached; Prospective alike)."""
    if pre_vote:
        return log_up_to_date
    if voted_key is not None:
        # Only the same candidate again (a retried request): never two votes in one epoch.
        # A stored directory id must be matched exactly (Kafka's UnattachedState); a vote
        # stored without one matches the id alone.
        return voted_key.id == candidate.id and (
            voted_key.directory_id is None or voted_key.directory_id == candidate.directory_id
        )
    if leader_id is not None:
        return False
    return log_up_to_date


class _VoteTally:
    """Counting (pre-)votes among the voters; the local replica grants its own."""

    __slots__ = ()
    voters: frozenset[int]
    granting: set[int]
    rejecting: set[int]

    def majority_size(self) -> int:
        return len(self.voters) // 2 + 1

    def is_vote_granted(self) -> bool:
        return len(self.granting & self.voters) >= self.majority_size()

    def is_vote_rejected(self) -> bool:
        return len(self.rejecting & self.voters) > len(self.voters) - self.majority_size()

    def unrecorded_voters(self) -> set[int]:
        return set(self.voters) - self.granting - self.rejecting


@dataclass(slots=True)
class _Base:
    """What every state has: its epoch, and the high watermark known in it (if any)."""

    epoch: int
    high_watermark: int | None


@dataclass(slots=True)
class UnattachedState(_Base):
    """No leader known for this epoch (or one known whose endpoints are not), maybe a vote cast.

    With ``voted_key`` set this is Kafka's "Voted" state: no second standard vote in the epoch.
    """

    leader_id: int | None
    voted_key: ReplicaKey | None
    election_deadline_ms: int

    @property
    def name(self) -> str:
        return "Unattached" if self.voted_key is None else "Voted"

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool) -> bool:
        return _unattached_grant(
            self.voted_key, self.leader_id, candidate, log_up_to_date, pre_vote
        )


@dataclass(slots=True)
class ProspectiveState(_Base, _VoteTally):
    """KIP-996 pre-vote: asking whether an election could succeed, without bumping the epoch.

    Keeps the leader id and vote of the state it came from; never persisted.
    """

    local_id: int
    leader_id: int | None
    voted_key: ReplicaKey | None
    voters: frozenset[int]
    election_deadline_ms: int
    granting: set[int] = field(default_factory=set)
    rejecting: set[int] = field(default_factory=set)
    #: The endpoints of ``leader_id`` the Follower state had (Kafka keeps them): a leader
    #: no longer in the voter set (KIP-853) has none there.
    leader_endpoints: Endpoints = ()

    def __post_init__(self) -> None:
        self.granting.add(self.local_id)

    @property
    def name(self) -> str:
        return "Prospective"

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool) -> bool:
        return _unattached_grant(
            self.voted_key, self.leader_id, candidate, log_up_to_date, pre_vote
        )


@dataclass(slots=True)
class CandidateState(_Base, _VoteTally):
    """Standing for election in ``epoch``, having voted for itself (persisted).

    After losing (a majority rejected) it backs off until ``backoff_deadline_ms``, then goes
    back to Prospective (KIP-996) rather than straight to a new epoch.
    """

    local_id: int
    local_directory_id: uuid.UUID | None
    voters: frozenset[int]
    election_deadline_ms: int
    retries: int
    granting: set[int] = field(default_factory=set)
    rejecting: set[int] = field(default_factory=set)
    backoff_deadline_ms: int | None = None

    def __post_init__(self) -> None:
        self.granting.add(self.local_id)

    @property
    def name(self) -> str:
        return "Candidate"

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool) -> bool:
        # A candidate has voted for itself; it still answers pre-votes on their merit.
        return pre_vote and log_up_to_date


@dataclass(slots=True)
class FollowerState(_Base):
    """Following a known leader of ``epoch`` (a voter or an observer).

    ``has_fetched`` records a successful fetch from that leader in this epoch: from then on a
    follower refuses pre-votes (KIP-996), since the leader is evidently alive.
    """

    leader_id: int
    leader_endpoints: Endpoints
    voted_key: ReplicaKey | None
    fetch_deadline_ms: int
    has_fetched: bool = False

    @property
    def name(self) -> str:
        return "Follower"

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool) -> bool:
        return pre_vote and log_up_to_date and not self.has_fetched


@dataclass(slots=True)
class ResignedState(_Base):
    """A leader that gave up its epoch (shutdown, ``resign()``, check-quorum). Never persisted.

    It tells the other voters with EndQuorumEpoch until each has acknowledged, naming its
    preferred successors (the other voters by fetch offset, best first).
    """

    local_id: int
    voters: frozenset[int]
    election_deadline_ms: int
    preferred_successors: list[int]
    unacknowledged: set[int] = field(default_factory=set)

    @property
    def name(self) -> str:
        return "Resigned"

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool) -> bool:
        return pre_vote and log_up_to_date


EpochState = UnattachedState | ProspectiveState | CandidateState | FollowerState | ResignedState
