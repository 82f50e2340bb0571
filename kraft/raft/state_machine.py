"""``StateMachine`` and ``StateMachineListener``: a replicated state machine without the
listener bookkeeping.

A :class:`StateMachine` subclass says how one committed record changes its state
(:meth:`~StateMachine.apply`), what records rebuild the state (:meth:`~StateMachine.
snapshot_records`) and how to rebuild it from them (:meth:`~StateMachine.load_snapshot`).
:class:`StateMachineListener` is the :class:`~kraft.raft.listeners.Listener` that drives it:

- committed batches are applied in offset order, every data record with its own offset
  (control batches carry no data records and only move :attr:`~StateMachineListener.
  applied_offset`);
- a snapshot handed over by the client (one downloaded from the leader, or the latest one
  on disk at start-up) replaces the state: :meth:`~StateMachine.reset`, then
  :meth:`~StateMachine.load_snapshot`;
- snapshots are written automatically, as Kafka's controller does (``SnapshotGenerator`` in
  Kafka's ``metadata`` module): after a ``handle_commit``, once at least
  :attr:`SnapshotPolicy.max_bytes_between_snapshots` bytes of batches were applied since the
  last snapshot (``metadata.log.max.record.bytes.between.snapshots``, 20 MiB), or once
  :attr:`SnapshotPolicy.max_interval_ms` went by since the last snapshot and something new
  was applied (``metadata.log.max.snapshot.interval.ms``, one hour; 0 turns it off). Loading a
  snapshot restarts both counts, and no snapshot is started once the client begins shutting
  down (``SnapshotGenerator.beginShutdown``). The snapshot ends after the last applied batch:
  ``client.create_snapshot(OffsetAndEpoch(last_offset + 1, epoch), append_time)``, written
  from :meth:`~StateMachine.snapshot_records` and frozen.

The log below a snapshot is deleted by the log's own retention, not here: the client runs
``ReplicatedLog.maybe_clean`` every ``log_clean_interval_ms``, which moves the log start up to
a newer snapshot while more than ``SnapshotRetention.retained_snapshots`` snapshots are kept
or the log is past ``retention_bytes`` / ``retention_ms`` (Kafka's
``metadata.max.retention.bytes`` / ``metadata.max.retention.ms``; see docs/storage.md).

Time is the client's clock (``client.clock.now_ms()``), so tests and the simulator move it.
Every callback runs on the polling thread, as every listener's does.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Generic, TypeVar

from kraft.common.ratelimit import LogLimiter
from kraft.errors import KraftError
from kraft.raft.listeners import BatchReader, Listener, SnapshotReaderLike
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.typed import Batch

if TYPE_CHECKING:
    from kraft.raft.client import KafkaRaftClient

__all__ = ["SnapshotGenerator", "SnapshotPolicy", "StateMachine", "StateMachineListener"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Records per ``SnapshotWriter.append``: each append is one batch at most, so a state of
#: millions of records is written in bounded batches.
SNAPSHOT_CHUNK_RECORDS = 1000


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When :class:`StateMachineListener` writes a snapshot (see the module docstring)."""

    #: Kafka's ``metadata.log.max.record.bytes.between.snapshots``.
    max_bytes_between_snapshots: int = 20 * 1024 * 1024
    #: Kafka's ``metadata.log.max.snapshot.interval.ms``; 0: no snapshot by time.
    max_interval_ms: int = 3_600_000

    def __post_init__(self) -> None:
        if self.max_bytes_between_snapshots < 1:
            raise ValueError(
                f"max_bytes_between_snapshots must be positive: {self.max_bytes_between_snapshots}"
            )
        if self.max_interval_ms < 0:
            raise ValueError(f"negative max_interval_ms {self.max_interval_ms}")


class StateMachine(ABC, Generic[T]):
    """A deterministic state built from committed records: same records, same state, on
    every replica. Subclasses implement the four methods; none of them may block."""

    @abstractmethod
    def apply(self, offset: int, record: T) -> None:
        """Apply the committed ``record`` found at ``offset`` (offsets only grow)."""

    @abstractmethod
    def snapshot_records(self) -> Iterable[T]:
        """The whole state as records, which :meth:`load_snapshot` turns back into it."""

    @abstractmethod
    def load_snapshot(self, records: Iterable[T]) -> None:
        """Rebuild the state from a snapshot's records (the state was just :meth:`reset`)."""

    @abstractmethod
    def reset(self) -> None:
        """Forget everything: back to the state before any record."""


class StateMachineListener(Listener[T]):
    """Drives ``machine`` from ``client``'s commits and snapshots (see the module docstring).

    Register it with ``client.register(listener)`` (or ``RaftNode.register``).
    """

    def __init__(
        self,
        client: KafkaRaftClient[T],
        machine: StateMachine[T],
        policy: SnapshotPolicy | None = None,
    ) -> None:
        self.client = client
        self.machine = machine
        self.snapshots = SnapshotGenerator(client, policy)
        #: The offset of the last record applied (or covered by the loaded snapshot); -1: none.
        self.applied_offset = -1

    def handle_commit(self, reader: BatchReader[T]) -> None:
        last: Batch[T] | None = None
        apply = self.machine.apply
        with reader:
            for batch in reader:
                for offset, record in enumerate(batch.records, start=batch.base_offset):
                    apply(offset, record)
                self.applied_offset = batch.last_offset
                self.snapshots.applied(batch.size_in_bytes)
                last = batch
        if last is not None:
            self.snapshots.maybe_snapshot(last, self.machine.snapshot_records)

    def handle_load_snapshot(self, reader: SnapshotReaderLike[T]) -> None:
        try:
            self.machine.reset()
            self.machine.load_snapshot(_records(reader))
        finally:
            reader.close()
        self.applied_offset = reader.snapshot_id.offset - 1
        self.snapshots.restart()

    def begin_shutdown(self) -> None:
        self.snapshots.begin_shutdown()


class SnapshotGenerator(Generic[T]):
    """When to write a snapshot, and writing it (Kafka's ``SnapshotGenerator``; see the module
    docstring): :meth:`applied` counts the bytes of each batch applied, :meth:`maybe_snapshot`
    after a ``handle_commit`` writes one when the policy says so, :meth:`restart` after a
    snapshot is loaded. Shared by every listener that writes snapshots of its state."""

    def __init__(self, client: KafkaRaftClient[T], policy: SnapshotPolicy | None = None) -> None:
        self.client = client
        self.policy = policy or SnapshotPolicy()
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = client.clock.now_ms()
        self._shutting_down = False
        self._failure_log = LogLimiter(60_000)

    def applied(self, size_in_bytes: int) -> None:
        """A batch of ``size_in_bytes`` was applied."""
        self._bytes_since_snapshot += size_in_bytes

    def begin_shutdown(self) -> None:
        """No snapshot is started from now on (Kafka's ``SnapshotGenerator.beginShutdown``)."""
        self._shutting_down = True

    def restart(self) -> None:
        """Both counts start again (a snapshot was written or loaded)."""
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self.client.clock.now_ms()

    def maybe_snapshot(self, last: Batch[T], records: Callable[[], Iterable[T]]) -> None:
        """Kafka's ``SnapshotGenerator.publishLogDelta``: by bytes, else by time. ``last`` is
        the last batch applied; ``records`` gives the state as records, called only when a
        snapshot is written."""
        policy = self.policy
        now = self.client.clock.now_ms()
        if self._bytes_since_snapshot >= policy.max_bytes_between_snapshots:
            reason = f"at least {policy.max_bytes_between_snapshots} bytes were applied"
        elif policy.max_interval_ms and now - self._last_snapshot_ms >= policy.max_interval_ms:
            reason = f"at least {policy.max_interval_ms} ms went by"
        else:
            return
        self.restart()
        if self._shutting_down:
            return
        snapshot_id = OffsetAndEpoch(last.last_offset + 1, last.epoch)
        logger.info("writing snapshot %s because %s since the last one", snapshot_id, reason)
        try:
            writer = self.client.create_snapshot(snapshot_id, last.append_timestamp_ms)
            if writer is None:
                return  # the log starts past it already, or it exists
            with writer:
                iterator = iter(records())
                while chunk := list(islice(iterator, SNAPSHOT_CHUNK_RECORDS)):
                    writer.append(chunk)
                writer.freeze()
        except (KraftError, OSError) as exc:
            # The state is intact; the next trigger tries again.
            if self._failure_log.allow(now):
                logger.error("writing snapshot %s failed: %s", snapshot_id, exc)


def _records(reader: SnapshotReaderLike[T]) -> Iterator[T]:
    for batch in reader:
        yield from batch.records
