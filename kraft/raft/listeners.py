"""What a state machine sees of the log: ``Listener``, ``Batch``, ``BatchReader``, leader changes.

Kafka's ``RaftClient.Listener`` and ``KafkaRaftClient.ListenerContext`` (KIP-595):

- A listener receives committed data only, from its *own* next offset: each registered
  listener has a context holding the offset it expects next (-1 for a new one).
- ``handle_commit`` gets a :class:`BatchReader`. On the leader, a batch that commits while a
  listener expects exactly its base offset is handed over from memory (its records are the
  objects that were appended, no decoding). Otherwise batches are read from the log.
- A reader over the log does not know its last offset until it is closed (Kafka's
  ``RecordsBatchReader``): while such a reader is open the listener gets nothing more, and
  ``close()`` moves the listener past the last batch it *iterated* and wakes the client. A
  reader closed without being iterated delivers the same batches again. A reader from memory
  knows its last offset at once, so the next batch may follow before it is closed.
- Listeners that expect the same offset share one read of the log and one decoding of each
  batch: like batches from memory, they are handed the same record objects (each in a list of
  its own), so a listener treats records as read-only. A standby controller's image loader and
  controller are two such listeners; decoding was half of a standby's CPU.
- ``handle_leader_change`` fires when the epoch grows, or when the leader of the current epoch
  becomes known; never twice for the same value. When the local replica is the leader it waits
  until the listener has passed the epoch's start offset (the LeaderChange record), so the
  state machine has seen every earlier commit before it starts writing.

The callbacks run on the thread that calls ``KafkaRaftClient.poll()``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Generic, NamedTuple, Protocol, TypeVar

from kraft.record.batch import iter_batches
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.serde import RecordSerde
from kraft.record.typed import Batch, ControlRecord, decode_batch

__all__ = [
    "Batch",
    "BatchReader",
    "ControlRecord",
    "LeaderAndEpoch",
    "Listener",
    "LogBatchReader",
    "MemoryBatchReader",
    "SnapshotReaderLike",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class LeaderAndEpoch(NamedTuple):
    """The leader of ``epoch`` as this replica knows it (``None``: unknown)."""

    leader_id: int | None
    epoch: int

    def is_leader(self, replica_id: int | None) -> bool:
        return replica_id is not None and self.leader_id == replica_id


#: What a listener has been told before anything: no leader, epoch 0 (Kafka's
#: ``LeaderAndEpoch.UNKNOWN``).
UNKNOWN_LEADER = LeaderAndEpoch(None, 0)


class BatchReader(ABC, Generic[T]):
    """Committed batches for one ``handle_commit`` call. Iterate it, then :meth:`close` it.

    Also a context manager (closing on exit).
    """

    __slots__ = ("_closed", "_on_close", "base_offset")

    def __init__(self, base_offset: int, on_close: Callable[[BatchReader[T]], None]) -> None:
        self.base_offset = base_offset
        self._on_close = on_close
        self._closed = False

    def __iter__(self) -> Iterator[Batch[T]]:
        return self

    @abstractmethod
    def __next__(self) -> Batch[T]:
        """The next batch."""

    @abstractmethod
    def last_offset(self) -> int | None:
        """The last offset this reader delivers, when known (see the module docstring)."""

    @property
    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Done with this reader: the listener's next offset moves past what it delivered."""
        if not self._closed:
            self._closed = True
            self._on_close(self)

    def __enter__(self) -> BatchReader[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class MemoryBatchReader(BatchReader[T]):
    """One batch the leader appended, delivered from memory as it commits."""

    __slots__ = ("_batch", "_done")

    def __init__(self, batch: Batch[T], on_close: Callable[[BatchReader[T]], None]) -> None:
        super().__init__(batch.base_offset, on_close)
        self._batch = batch
        self._done = False

    def __next__(self) -> Batch[T]:
        if self._done or self._closed:
            raise StopIteration
        self._done = True
        return self._batch

    def last_offset(self) -> int | None:
        return self._batch.last_offset


class LogBatchReader(BatchReader[T]):
    """Whole committed batches read from the log, decoded lazily, one batch per step.

    Every batch's CRC is checked as it is read; a corrupt one raises
    :class:`~kraft.errors.CorruptRecordError` from the iteration.
    """

    __slots__ = ("_batches", "_decoded", "_last_returned", "_serde")

    def __init__(
        self,
        base_offset: int,
        data: bytes,
        serde: RecordSerde[T],
        on_close: Callable[[BatchReader[T]], None],
        decoded: dict[int, Batch[T]] | None = None,
    ) -> None:
        """``decoded``: the batches of ``data`` already decoded, by base offset, shared by
        every reader of the same ``data`` (each decodes what it finds missing and adds it)."""
        super().__init__(base_offset, on_close)
        self._batches = iter_batches(data, verify_crc=True)
        self._serde = serde
        self._decoded = {} if decoded is None else decoded
        self._last_returned: int | None = None

    def __next__(self) -> Batch[T]:
        if self._closed:
            raise StopIteration
        view = next(self._batches)
        # Readers may run on different threads: a lost race only decodes a batch twice.
        shared = self._decoded.get(view.base_offset)
        if shared is None:
            shared = self._decoded[view.base_offset] = decode_batch(view, self._serde)
        self._last_returned = view.last_offset
        return Batch(
            shared.base_offset,
            shared.last_offset,
            shared.epoch,
            shared.append_timestamp_ms,
            shared.size_in_bytes,
            list(shared.records),
            list(shared.control_records),
        )

    def last_offset(self) -> int | None:
        # Kafka: known only once closed, and then it is the last batch handed out.
        return self._last_returned if self._closed else None


class SnapshotReaderLike(Protocol[T]):
    """What ``handle_load_snapshot`` receives (the snapshot issue supplies the reader)."""

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        """The snapshot's end offset (exclusive) and epoch."""

    @property
    def last_contained_log_timestamp_ms(self) -> int:
        """The append time of the last record the snapshot covers (from its header)."""

    def __iter__(self) -> Iterator[Batch[T]]:
        """The snapshot's batches."""

    def close(self) -> None:
        """Done with the snapshot."""


class Listener(ABC, Generic[T]):
    """A state machine fed by the client. Implement ``handle_commit``; the rest is optional.

    Every callback runs on the thread that polls the client and must return quickly.
    """

    @abstractmethod
    def handle_commit(self, reader: BatchReader[T]) -> None:
        """Newly committed batches, from this listener's next offset. Close ``reader``."""

    def handle_load_snapshot(self, reader: SnapshotReaderLike[T]) -> None:
        """Replace all state with this snapshot's. Close ``reader``."""
        reader.close()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        """The leader or epoch changed (see the module docstring for when this fires)."""

    def begin_shutdown(self) -> None:
        """The client started shutting down (kraft calls this; Kafka never does)."""


class ListenerContext(Generic[T]):
    """The client's bookkeeping for one registered listener (Kafka's ``ListenerContext``)."""

    __slots__ = ("_wakeup", "last_fired", "last_sent", "listener", "next_offset")

    #: The next offset of a listener that has received nothing yet.
    STARTING_NEXT_OFFSET = -1

    def __init__(self, listener: Listener[T], wakeup: Callable[[], None]) -> None:
        self.listener = listener
        self.next_offset = self.STARTING_NEXT_OFFSET
        self.last_sent: BatchReader[T] | None = None
        self.last_fired = UNKNOWN_LEADER
        self._wakeup = wakeup

    def next_expected_offset(self) -> int | None:
        """The offset to deliver next; ``None`` while an open reader's end is unknown."""
        sent = self.last_sent
        if sent is not None:
            last = sent.last_offset()
            return None if last is None else last + 1
        return self.next_offset

    def fire_handle_commit(self, reader: BatchReader[T]) -> None:
        # Everything before the reader's first offset has been delivered.
        self.next_offset = max(self.next_offset, reader.base_offset)
        self.last_sent = reader
        self.listener.handle_commit(reader)

    def fire_handle_load_snapshot(self, reader: SnapshotReaderLike[T]) -> None:
        """Hand the listener a snapshot: everything it had is replaced, and it continues from
        the snapshot's end offset."""
        self.next_offset = reader.snapshot_id.offset
        self.last_sent = None
        self.listener.handle_load_snapshot(reader)

    def on_close(self, reader: BatchReader[T]) -> None:
        last = reader.last_offset()
        if last is not None:
            self.next_offset = max(self.next_offset, last + 1)
        if self.last_sent is reader:
            self.last_sent = None
            self._wakeup()

    def _should_fire(self, leader: LeaderAndEpoch) -> bool:
        fired = self.last_fired
        if leader == fired:
            return False
        if leader.epoch > fired.epoch:
            return True
        return (
            leader.epoch == fired.epoch
            and leader.leader_id is not None
            and (fired.leader_id is None)
        )

    def maybe_fire_leader_change(
        self, leader: LeaderAndEpoch, epoch_start_offset: int | None = None
    ) -> None:
        """Tell the listener of ``leader`` unless it knows already.

        ``epoch_start_offset`` is given when the local replica leads: then the news waits
        until the listener has read past the epoch's first record.
        """
        if not self._should_fire(leader):
            return
        if epoch_start_offset is not None:
            next_offset = self.next_expected_offset()
            if next_offset is None or next_offset <= epoch_start_offset:
                return
        self.last_fired = leader
        self.listener.handle_leader_change(leader)
