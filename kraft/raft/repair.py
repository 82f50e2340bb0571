"""``StorageRepair``: the client's reaction to a log that found its own bytes corrupt.

The log checks every batch it reads (docs/storage.md, "When a disk lies"): a corrupt batch
raises :class:`~kraft.errors.CorruptRecordError` and is never returned. This module is what
the replica does then, and while its log is under repair (docs/protocol.md §1.14):

- Corrupt bytes found where they are read (a Fetch served, a listener's delivery, a snapshot
  served or loaded) are set aside (``ReplicatedLog.quarantine_from``,
  ``ReplicatedLog.quarantine_snapshot``) and counted. A leader resigns (Kafka's
  resign/EndQuorumEpoch path, the other voters most caught up first) and goes on as a
  follower of whoever wins; a follower forgets the Fetch in flight (it asked for an offset the
  log no longer ends at) and fetches again from its new log end.
- While ``ReplicatedLog.repair_target`` is set the replica may have acknowledged records it no
  longer holds, so it never stands for election: a leader resigns, a Candidate or Prospective
  replica withdraws, and the fetch and election timers of a Follower or Unattached voter
  restart instead of starting an election. It grants no vote to a log behind the target
  (:func:`behind_repair_target`, used by ``VoteRpcs``). The log clears the target itself once
  it has fetched that far again; :meth:`StorageRepair.poll` notices and counts the repair.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from kraft.common.ratelimit import LogLimiter
from kraft.errors import CorruptRecordError
from kraft.log.api import OffsetAndEpoch, ReplicatedLog
from kraft.raft.channel import NO_METRICS, MetricsRecorder
from kraft.raft.leader import LeaderState
from kraft.raft.quorum import QuorumState
from kraft.raft.requests import RequestManager
from kraft.raft.states import (
    NO_DEADLINE,
    CandidateState,
    FollowerState,
    ProspectiveState,
    UnattachedState,
)

__all__ = ["StorageRepair", "behind_repair_target"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How often a replica under repair says at most that it holds back from elections.
REPAIR_LOG_INTERVAL_MS = 60_000


def behind_repair_target(log: ReplicatedLog, candidate: OffsetAndEpoch) -> bool:
    """Whether a candidate's log (end offset, last epoch) is behind what this replica's log
    held before it set data aside: such a candidate may lack records this replica
    acknowledged, so it gets no vote (Raft's log comparison, epoch first)."""
    target = log.repair_target
    return target is not None and candidate < target


class StorageRepair(Generic[T]):
    """Sets aside what a read found corrupt, and keeps a replica under repair out of
    elections. ``to_resigned`` and ``prospective_lost`` are the client's transitions (with
    their side effects); ``requests`` is its request manager."""

    def __init__(
        self,
        quorum: QuorumState[T],
        log: ReplicatedLog,
        requests: RequestManager,
        to_resigned: Callable[[list[int], int], None],
        prospective_lost: Callable[[ProspectiveState, int], None],
    ) -> None:
        self._quorum = quorum
        self._log = log
        self._requests = requests
        self._to_resigned = to_resigned
        self._prospective_lost = prospective_lost
        #: Where corruptions and repairs are counted (the client's recorder; it may replace it).
        self.metrics: MetricsRecorder = NO_METRICS
        #: The repair target last seen, to notice when the log clears it.
        self._target = log.repair_target
        self._holding_back_log = LogLimiter(REPAIR_LOG_INTERVAL_MS)
        self._corrupt_log = LogLimiter(REPAIR_LOG_INTERVAL_MS)

    # -- corruption found where it is read ------------------------------------------------------
    def on_corrupt_log(
        self, exc: CorruptRecordError, read_offset: int, where: str, now: int
    ) -> None:
        """A read of the log at ``read_offset`` (``where`` says whose) met a corrupt first
        batch: set it aside with everything after it, and stop leading."""
        offset = read_offset if exc.offset is None else exc.offset
        target = self._log.quarantine_from(offset, f"corrupt batch found {where}: {exc}")
        self._found(f"a corrupt batch at offset {offset} {where}", target, now)

    def on_corrupt_snapshot(
        self, snapshot_id: OffsetAndEpoch, exc: CorruptRecordError, where: str, now: int
    ) -> bool:
        """Snapshot ``snapshot_id`` read corrupt ``where``: set it aside. True if this
        replica led and resigned (its log can no longer serve the followers behind it)."""
        self._log.quarantine_snapshot(snapshot_id, f"corrupt {where}: {exc}")
        leading = isinstance(self._quorum.state, LeaderState)
        self._found(f"corrupt snapshot {snapshot_id} {where}", self._log.repair_target, now)
        return leading and not isinstance(self._quorum.state, LeaderState)

    def _found(self, what: str, target: OffsetAndEpoch | None, now: int) -> None:
        self.metrics.record_corruption_found(now)
        if self._corrupt_log.allow(now):
            logger.error(
                "found %s: set aside, never served; repair target %s (logged at most once a "
                "minute)",
                what,
                target,
            )
        if target is not None:
            self._target = target
            self._hold_back(now)
        if not isinstance(self._quorum.state, LeaderState):
            # The Fetch in flight asked for an offset the log may no longer end at.
            self._requests.reset_all()

    # -- under repair ---------------------------------------------------------------------------
    def poll(self, now: int) -> bool:
        """At the start of each poll (and at startup): True while the log is under repair,
        after keeping this replica out of elections; notices a repair the log completed."""
        target = self._log.repair_target
        if target is None:
            if self._target is not None:
                logger.info("the log holds %s again: repair complete", self._target)
                self._target = None
                self.metrics.record_repair_completed(now)
            return False
        self._target = target
        self._hold_back(now)
        return True

    def _hold_back(self, now: int) -> None:
        """Leave or restart whatever would lead to an election (the log is under repair)."""
        quorum = self._quorum
        state = quorum.state
        if isinstance(state, LeaderState):
            logger.error(
                "epoch %d: resigning, the log is under repair (target %s)",
                state.epoch,
                self._target,
            )
            # Found in the leader's append path, the rest of that step still holds this
            # state: it must send no heartbeat for an epoch it no longer leads.
            state.begin_quorum_epoch_deadline_ms = NO_DEADLINE
            self._to_resigned(state.successors_by_fetch_offset(), now)
        elif isinstance(state, CandidateState):
            # Candidate -> Prospective -> lost: Unattached (or Follower) in the same epoch,
            # keeping the vote it cast for itself.
            quorum.transition_to_prospective(now)
            prospective = quorum.state
            assert isinstance(prospective, ProspectiveState)
            self._prospective_lost(prospective, now)
        elif isinstance(state, ProspectiveState):
            self._prospective_lost(state, now)
        elif not quorum.is_voter:
            return  # an observer never stands for election
        elif isinstance(state, FollowerState) and now >= state.fetch_deadline_ms:
            state.fetch_deadline_ms = now + quorum.config.fetch_timeout_ms
            self._log_holding_back(now)
        elif isinstance(state, UnattachedState) and now >= state.election_deadline_ms:
            state.election_deadline_ms = now + quorum.config.election_timeout_ms
            self._log_holding_back(now)

    def _log_holding_back(self, now: int) -> None:
        if not self._holding_back_log.allow(now):
            return
        if self._quorum.is_only_voter:
            logger.error(
                "the log is under repair (target %s) and this replica is the only voter: no "
                "other voter holds a copy to repair it from, so it cannot lead. Restore the "
                "data directory or add voters (logged at most once a minute)",
                self._target,
            )
        else:
            logger.warning(
                "the log is under repair (target %s): this replica does not stand for "
                "election until it has fetched that far again (logged at most once a minute)",
                self._target,
            )
