"""``ListenerRegistry``: the registered listeners and what each has been delivered.

Kafka keeps this inside ``KafkaRaftClient`` (its ``listenerContexts``, ``pendingRegistrations``
and the append purgatory's ``onCommit``); kraft gives it one object, which the client drives
at the end of each poll (:meth:`ListenerRegistry.deliver`, then
:meth:`ListenerRegistry.fire_leader_change`) and which owns:

- the contexts of the registered listeners (their next offsets, the reader each holds open),
  and the registrations and unregistrations waiting for the next poll;
- the leader's drained data batches waiting for the high watermark (Kafka's append
  purgatory): a batch that commits while a listener expects exactly its base offset is handed
  to it from memory; a listener that lags reads the log instead.

A new listener, or one the log has moved past, starts from the latest snapshot (KIP-630).
Every callback runs on the thread that polls the client.

A read that finds the log or a snapshot corrupt hands nothing to the listener: the bytes are
set aside (``StorageRepair``), and the listener waits, at the offset it expects, until the log
has fetched that far again (docs/protocol.md §1.14). It is never handed a batch twice, nor
skips one.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from kraft.common.clock import Clock
from kraft.errors import CorruptRecordError, IllegalStateError
from kraft.log.api import Isolation, LogFetchInfo, ReplicatedLog
from kraft.raft.accumulator import CompletedBatch
from kraft.raft.channel import MetricsRecorder
from kraft.raft.listeners import (
    Batch,
    BatchReader,
    LeaderAndEpoch,
    Listener,
    ListenerContext,
    LogBatchReader,
    MemoryBatchReader,
)
from kraft.raft.repair import StorageRepair
from kraft.record.serde import RecordSerde
from kraft.snapshot.reader import SnapshotReader

__all__ = ["ListenerRegistry"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ListenerRegistry(Generic[T]):
    """The listeners of one client; ``wakeup`` wakes the client when a reader is closed;
    ``repair`` sets aside what a read finds corrupt."""

    def __init__(
        self,
        log: ReplicatedLog,
        serde: RecordSerde[T],
        wakeup: Callable[[], None],
        clock: Clock,
        metrics: MetricsRecorder,
        repair: StorageRepair[T],
    ) -> None:
        self._log = log
        self._repair = repair
        self._clock = clock
        self._serde = serde
        self._wakeup = wakeup
        #: Where commit latencies are reported (the client's recorder; it may replace it).
        self.metrics = metrics
        self._contexts: dict[int, ListenerContext[T]] = {}
        self._pending: deque[tuple[bool, Listener[T]]] = deque()
        #: Drained data batches of the current leader epoch waiting for the high watermark.
        self._uncommitted: deque[CompletedBatch[T]] = deque()
        #: The quorum state whose leader every listener has been told of: the client asks
        #: after every poll, and the answer only changes with the state or the listeners.
        self.told_of: object | None = None

    # -- registrations ----------------------------------------------------------------------------
    def register(self, listener: Listener[T]) -> None:
        """Register ``listener`` at the next :meth:`deliver`."""
        self._pending.append((True, listener))

    def unregister(self, listener: Listener[T]) -> None:
        """Unregister ``listener`` at the next :meth:`deliver`."""
        self._pending.append((False, listener))

    def listeners(self) -> list[Listener[T]]:
        return [context.listener for context in self._contexts.values()]

    def next_offset(self, listener: Listener[T]) -> int | None:
        """The offset ``listener`` expects next; ``KeyError`` if it is not registered."""
        return self._contexts[id(listener)].next_expected_offset()

    def delivered_end(self, high_watermark: int) -> int:
        """Every listener was handed every record below this offset (the high watermark when
        none is registered): what commit futures wait for (kraft/raft/commits.py)."""
        end = high_watermark
        for context in self._contexts.values():
            offset = context.next_expected_offset()
            if offset is None:  # a reader still open: its records are not handed over yet
                return 0
            end = min(end, max(offset, 0))
        return end

    def _apply_registrations(self) -> None:
        while self._pending:
            add, listener = self._pending.popleft()
            key = id(listener)
            if add:
                if key in self._contexts:
                    logger.warning("listener %r is registered already", listener)
                else:
                    self._contexts[key] = ListenerContext(listener, self._wakeup)
                    self.told_of = None
            elif self._contexts.pop(key, None) is None:
                logger.warning("listener %r is not registered", listener)

    # -- the leader's batches in memory -----------------------------------------------------------
    def hold(self, batch: CompletedBatch[T]) -> None:
        """A data batch the leader appended: delivered from memory once it commits."""
        self._uncommitted.append(batch)

    def drop_uncommitted(self) -> None:
        """Leadership began or ended: batches held from memory are no longer to be trusted."""
        self._uncommitted.clear()

    # -- delivery ---------------------------------------------------------------------------------
    def deliver(self, high_watermark: int | None, leading: bool) -> None:
        """Apply (un)registrations, then deliver what committed below ``high_watermark``:
        the leader's batches from memory first, then from the log."""
        if self._pending:
            self._apply_registrations()
        if high_watermark is None:
            return
        if leading:
            self._deliver_memory_commits(high_watermark)
        self._deliver_from_log(high_watermark)

    def _deliver_memory_commits(self, high_watermark: int) -> None:
        uncommitted = self._uncommitted
        if not uncommitted or uncommitted[0].last_offset >= high_watermark:
            return
        wall_ms = self._clock.wall_ms()
        now_ms = self._clock.now_ms()
        metrics = self.metrics
        while uncommitted and uncommitted[0].last_offset < high_watermark:
            batch = uncommitted.popleft()
            metrics.record_commit_latency(max(0, wall_ms - batch.append_timestamp_ms), now_ms)
            for context in list(self._contexts.values()):
                if context.next_expected_offset() == batch.base_offset:
                    reader: BatchReader[T] = MemoryBatchReader(
                        Batch(
                            batch.base_offset,
                            batch.last_offset,
                            batch.epoch,
                            batch.append_timestamp_ms,
                            batch.size_in_bytes,
                            list(batch.records),
                        ),
                        context.on_close,
                    )
                    context.fire_handle_commit(reader)

    def _deliver_from_log(self, high_watermark: int) -> None:
        log = self._log
        # Listeners at the same offset share the read and its decoded batches.
        reads: dict[int, tuple[LogFetchInfo, dict[int, Batch[T]]]] = {}
        for context in list(self._contexts.values()):
            next_offset = context.next_expected_offset()
            if next_offset is None:
                continue
            if next_offset == ListenerContext.STARTING_NEXT_OFFSET or (
                next_offset < log.log_start_offset
            ):
                next_offset = self._start_from_snapshot(context, next_offset, high_watermark)
                if next_offset is None:
                    return  # the snapshot was corrupt: the log changed under every listener
            if next_offset < min(high_watermark, log.high_watermark):
                read = reads.get(next_offset)
                if read is None:
                    try:
                        info = log.read(next_offset, Isolation.COMMITTED)
                    except CorruptRecordError as exc:
                        now = self._clock.now_ms()
                        self._repair.on_corrupt_log(
                            exc, next_offset, "delivering to listeners", now
                        )
                        return
                    read = reads[next_offset] = (info, {})
                info, decoded = read
                if info.records:
                    context.fire_handle_commit(
                        LogBatchReader(
                            info.start_offset,
                            info.records,
                            self._serde,
                            context.on_close,
                            decoded,
                        )
                    )

    def _start_from_snapshot(
        self, context: ListenerContext[T], next_offset: int, high_watermark: int
    ) -> int | None:
        """A new listener, or one the log has moved past, loads the latest snapshot (KIP-630);
        a new listener without a snapshot reads the log from its start. Returns the offset
        the listener expects next; None if the snapshot is corrupt (it is set aside)."""
        log = self._log
        snapshot = log.latest_snapshot()
        if snapshot is not None:
            try:
                if snapshot.snapshot_id.offset <= high_watermark:
                    # The SnapshotReader takes (and checks) the whole snapshot as it is built,
                    # so the raw reader is closed here, whether or not the listener closes its
                    # reader.
                    try:
                        reader = SnapshotReader(snapshot, self._serde)
                    except CorruptRecordError as exc:
                        self._repair.on_corrupt_snapshot(
                            snapshot.snapshot_id, exc, "loading it", self._clock.now_ms()
                        )
                        return None
                    context.fire_handle_load_snapshot(reader)
                    return snapshot.snapshot_id.offset
            finally:
                snapshot.close()
        if next_offset == ListenerContext.STARTING_NEXT_OFFSET:
            context.next_offset = log.log_start_offset
            return log.log_start_offset
        raise IllegalStateError(
            f"listener {context.listener!r} expects offset {next_offset}, below "
            f"the log start {log.log_start_offset}, and there is no snapshot"
        )

    def fire_leader_change(
        self, state: object, leader: LeaderAndEpoch, epoch_start_offset: int | None
    ) -> None:
        """Tell each listener of ``leader``, the leader of quorum state ``state``, unless it
        knows already (``epoch_start_offset``: this replica leads, and the news waits until
        the listener has read past it). Once every listener knows, :attr:`told_of` is
        ``state``."""
        told = True
        for context in list(self._contexts.values()):
            context.maybe_fire_leader_change(leader, epoch_start_offset)
            told = told and context.last_fired == leader
        if told:
            self.told_of = state

    def begin_shutdown(self) -> None:
        for context in list(self._contexts.values()):
            context.listener.begin_shutdown()
