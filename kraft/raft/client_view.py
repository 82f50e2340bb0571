"""``ClientView``: what a replica's state says, read-only, for tests, tools and the runtime.

``KafkaRaftClient`` derives from it; the properties read its quorum state and its log, and
change nothing. Kept apart so that the client module holds behaviour only.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from kraft.log.api import OffsetAndEpoch, ReplicatedLog
from kraft.raft.leader import LeaderState
from kraft.raft.listeners import LeaderAndEpoch
from kraft.raft.quorum import QuorumState
from kraft.raft.shutdown import GracefulShutdown
from kraft.raft.states import EpochState, ReplicaKey
from kraft.raft.voter_set import VoterSet

__all__ = ["ClientView"]

T = TypeVar("T")


class ClientView(Generic[T]):
    """Read-only views of a replica: see the module docstring."""

    quorum: QuorumState[T]
    log: ReplicatedLog
    _shutdown: GracefulShutdown | None

    @property
    def is_shutdown(self) -> bool:
        """True once a requested shutdown completed (or timed out): stop polling."""
        return self._shutdown is not None and self._shutdown.is_finished

    @property
    def is_shutting_down(self) -> bool:
        """True from :meth:`shutdown` until the shutdown completes (Kafka's
        ``isShuttingDown``)."""
        return self._shutdown is not None and not self._shutdown.is_finished

    @property
    def is_running(self) -> bool:
        """True until a requested shutdown completes, while shutting down too (Kafka's
        ``isRunning``)."""
        return not self.is_shutdown

    @property
    def state(self) -> EpochState | LeaderState[T]:
        """The current epoch state object (``UnattachedState``, ``LeaderState``, ...)."""
        return self.quorum.state

    @property
    def role(self) -> str:
        """ "Unattached", "Voted", "Prospective", "Candidate", "Leader", "Follower", "Resigned"."""
        return self.quorum.state.name

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def leader_id(self) -> int | None:
        return self.quorum.leader_id

    @property
    def voted_key(self) -> ReplicaKey | None:
        return self.quorum.voted_key

    @property
    def voted_id(self) -> int | None:
        key = self.quorum.voted_key
        return None if key is None else key.id

    @property
    def voter_set(self) -> VoterSet:
        """The voters in force: the latest set in the log, committed or not (KIP-853); the
        configured ones under ``kraft.version`` 0."""
        return self.quorum.voter_set

    @property
    def voter_ids(self) -> frozenset[int]:
        return self.quorum.voters

    @property
    def kraft_version(self) -> int:
        """The ``kraft.version`` in force: 0 (static voters) or 1 (voters in the log)."""
        return self.quorum.history.kraft_version

    @property
    def high_watermark(self) -> int | None:
        """The high watermark this replica knows in its state (``None``: unknown yet)."""
        return self.quorum.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        """The id of the newest snapshot in the log (made here or downloaded)."""
        return self.log.latest_snapshot_id

    @property
    def is_leader(self) -> bool:
        return isinstance(self.quorum.state, LeaderState)

    @property
    def is_voter(self) -> bool:
        return self.quorum.is_voter

    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.quorum.leader_id, self.quorum.epoch)
