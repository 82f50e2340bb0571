"""The leader's append buffer: Kafka's ``BatchAccumulator`` (KIP-595), sans-IO.

Theory of operation
-------------------
A leader creates one accumulator for its epoch, at its log end offset, and closes it when the
epoch ends (which drops whatever was not drained). Records flow one way::

    append(epoch, records) ──> current batch ──complete──> completed batches ──drain()──> log
                               values, exact size           v2 bytes built once

- ``append`` serializes each record once (the serde call is the only per-record work that
  cannot be per batch), computes the exact encoded size of the records in the current batch,
  and adds them to it. The records of one append never split across batches (Kafka's
  ``RaftClient.prepareAppend``: its records stay within one ``Batch``): if they do not fit, the
  current batch is completed and they start a new one; if they cannot fit even in an empty
  batch, :class:`~kraft.errors.RecordBatchTooLargeError` and nothing is appended.
- A batch is *completed* (its v2 bytes encoded, once) when an append does not fit in it, when
  the poll thread drains, or when control messages are appended.
- The **drain offset** (Kafka's ``drainOffset``): ``append(..., delay_drain=True)`` -- Kafka's
  ``prepareAppend`` -- sets it to the first record it appends, unless it is set already, so
  nothing at or after that record is drained until :meth:`BatchAccumulator.allow_drain`
  (Kafka's ``schedulePreparedAppend``) clears it. A batch drains only once its *last* offset
  is below the drain offset, so a prepared append also holds back the records that share its
  batch.
- **Linger**: the first append after a drain (or into a new accumulator) starts a timer of
  ``linger_ms``; a drain stops it. :meth:`BatchAccumulator.time_until_drain` is 0 when the
  oldest completed batch may drain, else what remains of the linger. ``drain`` completes the
  open batch whatever its linger, as Kafka's does: the poll thread calls it when
  ``needs_drain`` says so.
- **Timestamps**: a batch, and every record in it, carries the ``now_ms`` of the append that
  opened the batch (Kafka's ``BatchBuilder`` takes its append time when the batch is started).
  When the batch completes or drains does not matter: its bytes depend on the appends alone.

Time is passed in as ``now_ms``; nothing here reads a clock, sleeps or starts a thread.

Threading
---------
In Kafka, ``append`` runs on user threads while ``drain`` runs on the raft thread. The core
imports no ``threading``, so the accumulator takes the lock to use as an argument: anything
with ``__enter__``/``__exit__``. The runtime passes a ``threading.Lock()``; the default is a
no-op, for the single-threaded simulator and tests. Every public method that reads or changes
more than one field holds the lock for its whole body and never calls another public method,
so a non-reentrant lock is enough. The serde runs *before* the lock is taken, so a slow serde
never blocks the raft thread.

Size accounting
---------------
KRaft's data records have a null key, no headers and the batch's timestamp, so a value of
``L`` bytes at offset delta ``d`` takes ``body + varint(body)`` bytes with
``body = 4 + varint(d) + varint(L) + L`` (the 4 single bytes: attributes, timestamp delta 0,
key length -1, header count 0; docs/storage.md). The accumulator sums this exactly, so
``max_batch_size_bytes`` bounds the real encoded batch (61-byte header included) and the size
it predicts is the length of the bytes ``encode_batch`` later builds.

Differences from Kafka
----------------------
- Too many completed batches is :class:`~kraft.errors.BufferAllocationError` (Kafka: an
  ``IllegalStateException``): like Kafka's ``BufferAllocationException`` it means "the leader
  is not keeping up, try later", and it is part of kraft's error tree.
- Kafka rejects an append as too large when it does not fit in the *current* batch with the
  current batch's offset deltas; kraft rejects only what cannot fit in an empty batch.
- Kafka infers ``isEmpty`` from the linger timer; :attr:`BatchAccumulator.is_empty` is exact.
- Kafka's ``drain`` completes the current batch only if it wins a ``tryLock`` race with an
  appending thread; kraft's waits for the lock (an append holds it for microseconds).
- An empty append is a ``ValueError``; calls after :meth:`BatchAccumulator.close` raise
  :class:`~kraft.errors.NotLeaderError`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, Protocol, TypeVar

from kraft.common.limits import INT32_MAX
from kraft.errors import BufferAllocationError, NotLeaderError, RecordBatchTooLargeError
from kraft.record.batch import RECORD_BATCH_OVERHEAD, encode_batch
from kraft.record.control import ControlMessage, control_batch
from kraft.record.serde import RecordSerde

__all__ = ["NOTHING_TO_DRAIN_MS", "AppendLock", "BatchAccumulator", "CompletedBatch"]

T = TypeVar("T")

#: What :meth:`BatchAccumulator.time_until_drain` returns when no batch waits on a timer
#: (Kafka: ``Long.MAX_VALUE``; the same value as ``kraft.raft.states.NO_DEADLINE``).
NOTHING_TO_DRAIN_MS = 2**63 - 1

# "No drain offset": every completed batch may drain (Kafka's drainOffset == Long.MAX_VALUE).
_NO_DRAIN_LIMIT = 2**63 - 1
# Attributes, timestamp delta (0), key length (-1: null) and header count (0): one byte each.
_RECORD_FIXED_BYTES = 4


class AppendLock(Protocol):
    """The lock an accumulator holds around its state: any context manager will do.

    The runtime passes a ``threading.Lock()`` (appends come from user threads, drains from
    the raft thread); single-threaded drivers leave the default, which does nothing.
    """

    def __enter__(self) -> object:
        """Acquire."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> bool | None:
        """Release."""


class _NoLock:
    """The default lock: nothing to guard when one thread does everything."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


@dataclass(frozen=True, slots=True)
class CompletedBatch(Generic[T]):
    """One batch ready for the log: its records and their encoded v2 bytes.

    ``data`` is the whole v2 batch at ``base_offset`` with partition leader epoch ``epoch``,
    ready for ``ReplicatedLog.append_as_leader``. ``records`` holds the user's values in
    offset order; it is empty for a control batch, whose ``num_records`` still counts its
    control records (Kafka's ``CompletedBatch.records`` is then ``Optional.empty()``).
    ``append_timestamp_ms`` is the batch timestamp (Kafka's ``appendTimestamp()``, the batch's
    max timestamp).
    """

    base_offset: int
    last_offset: int
    epoch: int
    records: list[T]
    num_records: int
    data: bytes
    size_in_bytes: int
    append_timestamp_ms: int
    is_control: bool


def _varint_size_of(n: int) -> int:
    """Bytes in the zig-zag varint of ``0 <= n <= 2**31 - 1`` (``2n``, 7 bits a byte)."""
    if n < 64:
        return 1
    if n < 8192:
        return 2
    if n < 1 << 20:
        return 3
    if n < 1 << 27:
        return 4
    return 5


# The same, as a table for the small numbers that offset deltas and lengths nearly always are:
# indexing ``bytes`` is several times cheaper than a Python call on the per-append path.
_TABLE_SIZE = 1 << 16
_VARINT_SIZE = bytes(_varint_size_of(n) for n in range(_TABLE_SIZE))


def _varint_size(n: int) -> int:
    """Bytes in the zig-zag varint of ``0 <= n <= 2**31 - 1``."""
    return _VARINT_SIZE[n] if n < _TABLE_SIZE else _varint_size_of(n)


def _varint_size_sum(n: int) -> int:
    """``sum(_varint_size(d) for d in range(n))``: a byte each, one more past each threshold."""
    total = n
    if n > 64:
        total += n - 64
        if n > 8192:
            total += n - 8192
            if n > 1 << 20:
                total += n - (1 << 20)
                if n > 1 << 27:
                    total += n - (1 << 27)
    return total


def _records_size(
    values: list[bytes], first_delta: int, total_len: int, min_len: int, max_len: int
) -> int:
    """Encoded bytes of ``values`` as records at offset deltas ``first_delta, ...`` of a batch.

    Exact: a record of ``L`` bytes at delta ``d`` takes ``body + varint(body)`` bytes, with
    ``body = 4 + varint(d) + varint(L) + L``. When every value's length varint and every
    record's length prefix take the same number of bytes (nearly always: the smallest and
    largest body bracket every record's), the sum is closed-form and costs no per-record
    Python; otherwise each record is sized in turn.
    """
    count = len(values)
    if count == 1 and first_delta < _TABLE_SIZE and max_len < _TABLE_SIZE - 16:
        # One record, small numbers (the common append): three table lookups.
        sizes = _VARINT_SIZE
        body = _RECORD_FIXED_BYTES + sizes[first_delta] + sizes[max_len] + max_len
        return body + sizes[body]
    last_delta = first_delta + count - 1
    len_varint = _varint_size(min_len)
    min_body = _RECORD_FIXED_BYTES + _varint_size(first_delta) + len_varint + min_len
    max_body = _RECORD_FIXED_BYTES + _varint_size(last_delta) + _varint_size(max_len) + max_len
    prefix = _varint_size(min_body)
    if len_varint == _varint_size(max_len) and prefix == _varint_size(max_body):
        return (
            total_len
            + count * (_RECORD_FIXED_BYTES + len_varint + prefix)
            + _varint_size_sum(last_delta + 1)
            - _varint_size_sum(first_delta)
        )
    size = 0
    delta = first_delta
    for value in values:
        length = len(value)
        body = _RECORD_FIXED_BYTES + _varint_size(delta) + _varint_size(length) + length
        size += _varint_size(body) + body
        delta += 1
    return size


_ONLY_BYTES = {bytes}


def _check_values(values: list[bytes]) -> None:
    """Refuse what a serde returned that is not ``bytes``, before it can poison a batch.

    The batch is encoded only when it completes, maybe appends later: a bad value found then
    could not be traced to its append, and the batch could never be built.
    """
    for value in values:
        if not isinstance(value, bytes):
            raise TypeError(f"the serde returned {type(value).__name__}, not bytes")


class BatchAccumulator(Generic[T]):
    """The leader's append buffer for one epoch (Kafka's ``BatchAccumulator``).

    ``BatchAccumulator(epoch, base_offset, linger_ms, max_batch_size_bytes, serde)`` buffers
    records appended in ``epoch`` from ``base_offset`` (the log end offset when leadership
    began) into v2 batches of at most ``max_batch_size_bytes`` bytes, header included. At most
    ``max_batches`` completed batches wait for a drain before appends are refused. ``lock``
    guards the state against concurrent callers (see the module docstring; the runtime passes
    a ``threading.Lock()``).
    """

    __slots__ = (
        "_batch_base_offset",
        "_batch_records",
        "_batch_size",
        "_batch_timestamp_ms",
        "_batch_values",
        "_closed",
        "_completed",
        "_drain_offset",
        "_encode",
        "_epoch",
        "_linger_deadline_ms",
        "_linger_ms",
        "_lock",
        "_max_batch_size",
        "_max_batches",
        "_next_offset",
    )

    def __init__(
        self,
        epoch: int,
        base_offset: int,
        linger_ms: int,
        max_batch_size_bytes: int,
        serde: RecordSerde[T],
        *,
        max_batches: int = 10,
        lock: AppendLock | None = None,
    ) -> None:
        if epoch < 0:
            raise ValueError(f"negative epoch {epoch}")
        if base_offset < 0:
            raise ValueError(f"negative base offset {base_offset}")
        if linger_ms < 0:
            raise ValueError(f"negative linger_ms {linger_ms}")
        # Room for the header and at least one record; the length field is an int32.
        if not RECORD_BATCH_OVERHEAD < max_batch_size_bytes <= INT32_MAX:
            raise ValueError(
                f"max_batch_size_bytes {max_batch_size_bytes} must be above the "
                f"{RECORD_BATCH_OVERHEAD}-byte batch header and at most {INT32_MAX}"
            )
        if max_batches < 1:
            raise ValueError(f"max_batches {max_batches} must be at least 1")
        self._epoch = epoch
        self._next_offset = base_offset
        self._linger_ms = linger_ms
        self._max_batch_size = max_batch_size_bytes
        self._max_batches = max_batches
        self._encode = serde.encode
        self._lock: AppendLock = _NoLock() if lock is None else lock
        self._completed: deque[CompletedBatch[T]] = deque()
        self._drain_offset = _NO_DRAIN_LIMIT
        self._linger_deadline_ms: int | None = None
        self._closed = False
        # The current batch: empty lists when there is none. Its size counts the header.
        self._batch_base_offset = base_offset
        self._batch_timestamp_ms = 0
        self._batch_values: list[bytes] = []
        self._batch_records: list[T] = []
        self._batch_size = RECORD_BATCH_OVERHEAD

    # -- properties -------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The leader epoch of every batch; constant for the accumulator's life."""
        return self._epoch

    @property
    def next_offset(self) -> int:
        """The offset the next appended record will get."""
        return self._next_offset

    @property
    def num_completed_batches(self) -> int:
        """Completed batches not drained yet (the current, open batch is not counted)."""
        return len(self._completed)

    @property
    def drain_offset(self) -> int | None:
        """The first offset held back by a prepared append, or ``None`` when none is."""
        offset = self._drain_offset
        return None if offset == _NO_DRAIN_LIMIT else offset

    @property
    def is_empty(self) -> bool:
        """True when the accumulator holds no record: nothing open, nothing completed."""
        with self._lock:
            return not self._batch_values and not self._completed

    @property
    def is_closed(self) -> bool:
        """True once :meth:`close` has been called (leadership of the epoch ended)."""
        return self._closed

    # -- appending ----------------------------------------------------------------------------
    def append(
        self, epoch: int, records: Sequence[T], now_ms: int, *, delay_drain: bool = False
    ) -> int:
        """Append ``records`` in ``epoch``, all in one batch; return the last one's offset.

        With ``delay_drain`` (Kafka's ``prepareAppend``) nothing from the first record on is
        drained until :meth:`allow_drain`; if an earlier prepared append still holds the drain
        back, this one waits with it.

        Raises :class:`~kraft.errors.NotLeaderError` if ``epoch`` is older than the
        accumulator's or it is closed; ``ValueError`` if ``epoch`` is newer or ``records`` is
        empty; :class:`~kraft.errors.BufferAllocationError` if ``max_batches`` completed
        batches wait for a drain; :class:`~kraft.errors.RecordBatchTooLargeError` if the
        records cannot fit in one batch. On any error nothing is appended. What the serde
        raises for a record it cannot encode propagates (``TypeError`` if it returns anything
        but ``bytes``), and nothing is appended either.
        """
        count = len(records)
        self._check_append(epoch, count)
        values, total_len, min_len, max_len = self._encode_values(records)
        with self._lock:
            if self._closed:
                raise NotLeaderError(f"append failed: leadership of epoch {self._epoch} ended")
            if len(self._completed) >= self._max_batches:
                # Kafka: IllegalStateException; the raft thread is not draining fast enough.
                raise BufferAllocationError(
                    f"append failed: {len(self._completed)} completed batches wait for a "
                    f"drain, the most allowed is {self._max_batches}"
                )
            size = self._make_room(values, total_len, min_len, max_len, now_ms)
            if delay_drain and self._drain_offset == _NO_DRAIN_LIMIT:
                # Kafka: drainOffset.compareAndSet(MAX_VALUE, nextOffset); only the first
                # pending prepared append sets it.
                self._drain_offset = self._next_offset
            self._batch_values += values
            self._batch_records += records
            self._batch_size += size
            if self._linger_deadline_ms is None:
                # Kafka's maybeResetLinger: linger starts at the first append after a drain.
                self._linger_deadline_ms = now_ms + self._linger_ms
            self._next_offset += count
            return self._next_offset - 1

    def _check_append(self, epoch: int, count: int) -> None:
        if self._closed:
            raise NotLeaderError(f"append failed: leadership of epoch {self._epoch} ended")
        # Kafka: a stale epoch means the caller has not yet seen the new leader
        # (NotLeaderException); a newer one is a caller bug (IllegalArgumentException).
        if epoch < self._epoch:
            raise NotLeaderError(
                f"append failed: epoch {epoch} is stale, the leader epoch is {self._epoch}"
            )
        if epoch > self._epoch:
            raise ValueError(
                f"append from epoch {epoch}, above the current leader epoch {self._epoch}"
            )
        if not count:
            raise ValueError("append needs at least one record")

    def _encode_values(self, records: Sequence[T]) -> tuple[list[bytes], int, int, int]:
        """The records' values, their total, smallest and largest length. Serialized once,
        outside the lock: the serde is the only per-record work of an append."""
        encode = self._encode
        if len(records) == 1:  # the common case, without a comprehension's frame
            values = [encode(records[0])]
            if type(values[0]) is not bytes:
                _check_values(values)
            length = len(values[0])
            return values, length, length, length
        values = [encode(record) for record in records]
        if set(map(type, values)) != _ONLY_BYTES:
            _check_values(values)
        return values, sum(map(len, values)), min(map(len, values)), max(map(len, values))

    def _make_room(
        self, values: list[bytes], total_len: int, min_len: int, max_len: int, now_ms: int
    ) -> int:
        """The size ``values`` add to the current batch, completing it first (and starting a
        new one at ``now_ms``) when they do not fit. The caller holds the lock."""
        max_size = self._max_batch_size
        in_batch = len(self._batch_values)
        if in_batch:
            size = _records_size(values, in_batch, total_len, min_len, max_len)
            if self._batch_size + size <= max_size:
                return size
        size = _records_size(values, 0, total_len, min_len, max_len)
        if RECORD_BATCH_OVERHEAD + size > max_size:
            raise RecordBatchTooLargeError(
                f"{len(values)} record(s) take {RECORD_BATCH_OVERHEAD + size} bytes as a "
                f"batch, more than the maximum batch size of {max_size}"
            )
        # Records never split across batches: complete the current one, start anew.
        if in_batch:
            self._complete_batch()
        self._batch_base_offset = self._next_offset
        # Kafka's BatchBuilder stamps a batch with the time it was started: the time of the
        # append that opened it.
        self._batch_timestamp_ms = now_ms
        return size

    def append_control_messages(self, messages: Sequence[ControlMessage], now_ms: int) -> int:
        """Append one control batch holding ``messages``; return its last offset.

        As Kafka's ``appendControlMessages``: pending data is completed first (``forceDrain``)
        so the control batch follows it, the linger timer stops, and the control batch drains
        as soon as the drain offset allows (it waits behind a pending prepared append, like
        any batch). The ``max_batches`` limit does not apply: a new leader must always be able
        to write its LeaderChange record. Raises ``ValueError`` without messages or for a
        message that cannot be encoded, :class:`~kraft.errors.RecordBatchTooLargeError` if the
        batch exceeds the maximum batch size (nothing appended) and
        :class:`~kraft.errors.NotLeaderError` once closed.
        """
        count = len(messages)
        if not count:
            raise ValueError("a control batch needs at least one control message")
        with self._lock:
            if self._closed:
                raise NotLeaderError(
                    f"control append failed: leadership of epoch {self._epoch} ended"
                )
            base_offset = self._next_offset
            data = control_batch(base_offset, self._epoch, messages, timestamp_ms=now_ms)
            if len(data) > self._max_batch_size:
                raise RecordBatchTooLargeError(
                    f"control batch of {count} message(s) takes {len(data)} bytes, more than "
                    f"the maximum batch size of {self._max_batch_size}"
                )
            self._force_complete()
            self._completed.append(
                CompletedBatch(
                    base_offset=base_offset,
                    last_offset=base_offset + count - 1,
                    epoch=self._epoch,
                    records=[],
                    num_records=count,
                    data=data,
                    size_in_bytes=len(data),
                    append_timestamp_ms=now_ms,
                    is_control=True,
                )
            )
            self._next_offset = base_offset + count
            return base_offset + count - 1

    def allow_drain(self) -> None:
        """Let every completed batch drain: the prepared appends are scheduled.

        Kafka's ``allowDrain`` (behind ``schedulePreparedAppend``): the drain offset is
        cleared, whichever prepared append set it. Raises :class:`~kraft.errors.NotLeaderError`
        once closed.
        """
        with self._lock:
            if self._closed:
                raise NotLeaderError(f"leadership of epoch {self._epoch} ended")
            self._drain_offset = _NO_DRAIN_LIMIT

    # -- draining -----------------------------------------------------------------------------
    def time_until_drain(self, now_ms: int) -> int:
        """Milliseconds until :meth:`drain` has work: 0 if it has now.

        0 when the oldest completed batch lies below the drain offset, else what remains of
        the linger (0 once it expired), else :data:`NOTHING_TO_DRAIN_MS` when no appended
        record waits on the linger (empty, closed, or only batches held by the drain offset,
        which wait for :meth:`allow_drain`, not for time).
        """
        with self._lock:
            completed = self._completed
            if completed and completed[0].last_offset < self._drain_offset:
                return 0
            deadline = self._linger_deadline_ms
            if deadline is None:
                return NOTHING_TO_DRAIN_MS
            return max(0, deadline - now_ms)

    def needs_drain(self, now_ms: int) -> bool:
        """True when :meth:`drain` has work now (``time_until_drain(now_ms) == 0``)."""
        return self.time_until_drain(now_ms) <= 0

    def drain(self) -> list[CompletedBatch[T]]:
        """Complete the current batch and return the batches below the drain offset.

        As Kafka's ``drain``: the current batch is completed whatever its linger (the caller
        drains when :meth:`needs_drain` says so, as ``KafkaRaftClient.maybeAppendBatches``
        does), the linger timer stops, and the completed batches whose last offset is below
        the drain offset are removed and returned in offset order. The batches from the one
        holding the drain offset on stay until :meth:`allow_drain`. Raises
        :class:`~kraft.errors.NotLeaderError` once closed.
        """
        with self._lock:
            if self._closed:
                raise NotLeaderError(f"drain failed: leadership of epoch {self._epoch} ended")
            self._force_complete()
            completed = self._completed
            drain_offset = self._drain_offset
            if not completed or completed[-1].last_offset < drain_offset:
                drained = list(completed)
                completed.clear()
                return drained
            drained = []
            while completed[0].last_offset < drain_offset:
                drained.append(completed.popleft())
            return drained

    def close(self) -> None:
        """Drop every record not drained: leadership of the epoch ended. Idempotent.

        Kafka's ``close`` releases the buffers of undrained batches; their records are never
        written. Later appends, drains and :meth:`allow_drain` raise
        :class:`~kraft.errors.NotLeaderError`; :meth:`time_until_drain` reports nothing to
        drain.
        """
        with self._lock:
            self._closed = True
            self._completed.clear()
            self._batch_values = []
            self._batch_records = []
            self._batch_size = RECORD_BATCH_OVERHEAD
            self._linger_deadline_ms = None
            self._drain_offset = _NO_DRAIN_LIMIT

    # -- internals (the caller holds the lock) --------------------------------------------------
    def _force_complete(self) -> None:
        """Kafka's ``forceDrain``: complete the open batch and stop the linger timer."""
        if self._batch_values:
            self._complete_batch()
        # Kafka: "the linger clock will begin ticking after the next append".
        self._linger_deadline_ms = None

    def _complete_batch(self) -> None:
        """Encode the open batch, once, and move it to the completed queue."""
        values = self._batch_values
        base_offset = self._batch_base_offset
        timestamp_ms = self._batch_timestamp_ms
        data = encode_batch(base_offset, self._epoch, values, timestamp_ms=timestamp_ms)
        assert len(data) == self._batch_size, (len(data), self._batch_size)
        count = len(values)
        self._completed.append(
            CompletedBatch(
                base_offset=base_offset,
                last_offset=base_offset + count - 1,
                epoch=self._epoch,
                records=self._batch_records,
                num_records=count,
                data=data,
                size_in_bytes=self._batch_size,
                append_timestamp_ms=timestamp_ms,
                is_control=False,
            )
        )
        self._batch_values = []
        self._batch_records = []
        self._batch_size = RECORD_BATCH_OVERHEAD

    def __repr__(self) -> str:
        return (
            f"BatchAccumulator(epoch={self._epoch}, next_offset={self._next_offset}, "
            f"open_records={len(self._batch_values)}, completed={len(self._completed)}, "
            f"drain_offset={self.drain_offset}, closed={self._closed})"
        )
