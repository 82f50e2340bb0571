"""``LeaderAppender``: the leader's write path, from the accumulator to the log.

Once per poll the leader drains the batches whose linger expired (or that are full) and writes
them, in offset order, after any that a lack of descriptors kept back
(``kraft.raft.resources``). Each written batch is then:

- held for the listeners (a data batch): they get the leader's own records without reading
  the log back;
- shown to the voter history: a control batch may carry a ``VotersRecord``, which applies from
  the moment it is appended (KIP-853); a data batch only moves the history's read position;
- counted for the leader's own end offset, which may move the high watermark, and the parked
  fetches are answered -- all before the fsync, so the followers' round trip overlaps the
  leader's flush (as Kafka's ``KafkaRaftClient.maybeAppendBatches``). A single voter commits
  on its own append.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from kraft.common.clock import Clock
from kraft.log.api import ReplicatedLog
from kraft.raft.accumulator import NOTHING_TO_DRAIN_MS
from kraft.raft.channel import MetricsRecorder
from kraft.raft.fetch_server import FetchServer
from kraft.raft.leader import LeaderState
from kraft.raft.listener_registry import ListenerRegistry
from kraft.raft.resources import RESOURCE_RETRY_MS, ResourceFailures, append_leader_batches
from kraft.raft.states import NO_DEADLINE
from kraft.raft.voter_history import VoterHistory

__all__ = ["LeaderAppender"]

T = TypeVar("T")


class LeaderAppender(Generic[T]):
    """Drains the leader's accumulator into the log. ``voters_changed(now)`` is called when
    an appended control batch changed the voter set."""

    def __init__(
        self,
        log: ReplicatedLog,
        clock: Clock,
        history: VoterHistory,
        listeners: ListenerRegistry[T],
        fetch_server: FetchServer[T],
        metrics: MetricsRecorder,
        voters_changed: Callable[[int], None],
    ) -> None:
        self._log = log
        self._clock = clock
        self._history = history
        self._listeners = listeners
        self._fetch_server = fetch_server
        self.metrics = metrics
        self._voters_changed = voters_changed
        self._resource_failures = ResourceFailures()

    def maybe_append(self, state: LeaderState[T], now: int) -> int:
        """Write what is due; the milliseconds until the next drain (or retry) is due."""
        accumulator = state.accumulator
        due = accumulator.time_until_drain(self._clock.wall_ms()) <= 0
        if due or state.unwritten:  # what a lack of descriptors kept goes first
            batches = state.unwritten + (accumulator.drain() if due else [])
            log, history = self._log, self._history
            written = append_leader_batches(log, batches, self._resource_failures, now)
            state.unwritten = batches[written:]
            appended = 0
            voters_changed = False
            for batch in batches[:written]:
                appended += batch.num_records
                if batch.is_control:
                    voters_changed |= history.appended(log, batch.base_offset, batch.data)
                else:
                    history.advanced(log, batch.base_offset, batch.last_offset + 1)
                    self._listeners.hold(batch)
            if voters_changed:
                self._voters_changed(now)
            if written:
                self.metrics.record_append_records(appended, now)
                self._flush(state, now)
        until = accumulator.time_until_drain(self._clock.wall_ms())
        until = min(until, RESOURCE_RETRY_MS) if state.unwritten else until
        return NO_DEADLINE if until >= NOTHING_TO_DRAIN_MS else until

    def _flush(self, state: LeaderState[T], now: int) -> None:
        fetch_server = self._fetch_server
        if state.update_local_state(self._log.log_end_offset, now):
            fetch_server.on_update_leader_high_watermark(state)
        fetch_server.complete_parked(self._clock.now_ms())
        self._log.flush()
