"""``SnapshotWriter[T]``: a state machine's records written as a KIP-630 snapshot.

A snapshot is Kafka v2 batches with base offsets counting from 0 and the snapshot's epoch as
every batch's partition leader epoch (KIP-630, Kafka's ``RecordsSnapshotWriter``):

1. a control batch holding one ``SnapshotHeader`` (version 0, the last contained log
   timestamp), written as soon as the writer exists;
2. data batches: each ``append`` keeps its records in one batch, and appends accumulate into
   the current batch until the next would make it pass ``max_batch_size_bytes``;
3. on ``freeze``, a control batch holding one ``SnapshotFooter``; then the raw snapshot is
   frozen (made durable and visible).

Values are encoded with the serde at ``append`` (a value the serde refuses raises there, and
nothing of that append is kept); ``encode_batch`` runs once per batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from kraft.errors import IllegalStateError, RecordBatchTooLargeError
from kraft.record.batch import RECORD_BATCH_OVERHEAD, encode_batch
from kraft.record.control import (
    ControlMessage,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    control_batch,
)
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.serde import RecordSerde
from kraft.snapshot.raw import RawSnapshotWriter

__all__ = ["DEFAULT_MAX_BATCH_SIZE_BYTES", "SnapshotWriter"]

T = TypeVar("T")

DEFAULT_MAX_BATCH_SIZE_BYTES = 8 * 1024 * 1024


def _records_size(values: Sequence[bytes], first_offset_delta: int) -> int:
    """The encoded size of ``values`` as value-only records (null key, no headers, timestamp
    delta 0) at offset deltas from ``first_offset_delta``: exactly what ``encode_batch`` writes.

    A record is ``varint(len(body)) body`` with ``body`` = attributes, timestamp delta, null
    key and header count (one byte each), ``varint(offset delta)``, ``varint(len(value))``
    and the value. A zig-zag varint of ``n >= 0`` takes 1 byte below 64, 2 below 8192, 3 below
    2**20, 4 below 2**27, else 5; the comparisons are inlined (this runs once per record).
    """
    total = 0
    delta = first_offset_delta
    for n in map(len, values):
        body = (
            n
            + (
                5
                if delta < 64
                else 6
                if delta < 8192
                else 7
                if delta < 1 << 20
                else 8
                if delta < 1 << 27
                else 9
            )
            + (1 if n < 64 else 2 if n < 8192 else 3 if n < 1 << 20 else 4 if n < 1 << 27 else 5)
        )
        total += body + (
            1
            if body < 64
            else 2
            if body < 8192
            else 3
            if body < 1 << 20
            else 4
            if body < 1 << 27
            else 5
        )
        delta += 1
    return total


class SnapshotWriter(Generic[T]):
    """Writes one snapshot through a :class:`~kraft.snapshot.raw.RawSnapshotWriter`.

    Use it as a context manager, or call :meth:`close`: leaving without :meth:`freeze`
    abandons the snapshot (its partial file is removed). ``control_messages`` (the
    ``kraft.version`` and voter set under KIP-853) go in one control batch after the header.
    """

    __slots__ = (
        "_closed",
        "_last_contained_log_timestamp_ms",
        "_max_batch_size_bytes",
        "_next_offset",
        "_pending",
        "_pending_size",
        "_raw",
        "_serde",
        "_timestamp_ms",
    )

    def __init__(
        self,
        raw: RawSnapshotWriter,
        serde: RecordSerde[T],
        *,
        last_contained_log_timestamp_ms: int,
        timestamp_ms: int,
        max_batch_size_bytes: int = DEFAULT_MAX_BATCH_SIZE_BYTES,
        control_messages: Sequence[ControlMessage] = (),
    ) -> None:
        if raw.size_in_bytes != 0 or raw.is_frozen:
            raise IllegalStateError(f"a snapshot writer needs an empty raw snapshot, got {raw!r}")
        if max_batch_size_bytes <= RECORD_BATCH_OVERHEAD:
            raise ValueError(f"max_batch_size_bytes {max_batch_size_bytes} cannot hold a record")
        self._raw = raw
        self._serde = serde
        self._last_contained_log_timestamp_ms = last_contained_log_timestamp_ms
        self._timestamp_ms = timestamp_ms
        self._max_batch_size_bytes = max_batch_size_bytes
        self._pending: list[bytes] = []
        self._pending_size = RECORD_BATCH_OVERHEAD
        self._closed = False
        epoch = self.snapshot_id.epoch
        header = SnapshotHeaderRecord(0, last_contained_log_timestamp_ms)
        raw.append(control_batch(0, epoch, [header], timestamp_ms=timestamp_ms))
        self._next_offset = 1
        if control_messages:
            # KIP-853: the kraft.version and the voter set right after the header, as Kafka's
            # RecordsSnapshotWriter writes them.
            raw.append(control_batch(1, epoch, control_messages, timestamp_ms=timestamp_ms))
            self._next_offset += len(control_messages)

    # -- properties --------------------------------------------------------------------------
    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        """The snapshot's end offset (exclusive) and epoch."""
        return self._raw.snapshot_id

    @property
    def last_contained_log_offset(self) -> int:
        """The last log offset the snapshot covers (its end offset - 1)."""
        return self.snapshot_id.offset - 1

    @property
    def last_contained_log_epoch(self) -> int:
        return self.snapshot_id.epoch

    @property
    def last_contained_log_timestamp_ms(self) -> int:
        """The append time of the last record the snapshot covers (in its header)."""
        return self._last_contained_log_timestamp_ms

    @property
    def is_frozen(self) -> bool:
        return self._raw.is_frozen

    # -- writing -----------------------------------------------------------------------------
    def _check_writable(self, operation: str) -> None:
        if self._raw.is_frozen or self._closed:
            state = "frozen" if self._raw.is_frozen else "closed"
            raise IllegalStateError(f"{operation} on snapshot {self.snapshot_id}: it is {state}")

    def append(self, records: Sequence[T]) -> None:
        """Add ``records`` to the snapshot, all in one batch.

        ``RecordBatchTooLargeError`` if they cannot fit in one batch of
        ``max_batch_size_bytes``; ``ValueError`` for no records. Either way nothing is written.
        """
        self._check_writable("append")
        if not records:
            raise ValueError("append of no records")
        encode = self._serde.encode
        values = [encode(record) for record in records]
        pending = self._pending
        limit = self._max_batch_size_bytes
        if pending:
            size = self._pending_size + _records_size(values, len(pending))
            if size <= limit:
                pending.extend(values)
                self._pending_size = size
                return
        # An offset delta only grows a record, so these records alone (deltas from 0) are the
        # smallest batch they can make: past the limit, they fit in none.
        alone = RECORD_BATCH_OVERHEAD + _records_size(values, 0)
        if alone > limit:
            raise RecordBatchTooLargeError(
                f"{len(values)} records need a batch of {alone} bytes, more than the "
                f"{limit}-byte maximum"
            )
        self._write_pending()
        self._pending = values
        self._pending_size = alone

    def _write_pending(self) -> None:
        pending = self._pending
        if not pending:
            return
        batch = encode_batch(
            self._next_offset, self.snapshot_id.epoch, pending, timestamp_ms=self._timestamp_ms
        )
        self._raw.append(batch)
        self._next_offset += len(pending)
        self._pending = []
        self._pending_size = RECORD_BATCH_OVERHEAD

    def freeze(self) -> int:
        """Write the pending batch and the footer, freeze the raw snapshot; its size in bytes.

        ``IllegalStateError`` if the writer is already frozen or closed.
        """
        self._check_writable("freeze")
        self._write_pending()
        footer = control_batch(
            self._next_offset,
            self.snapshot_id.epoch,
            [SnapshotFooterRecord(0)],
            timestamp_ms=self._timestamp_ms,
        )
        self._raw.append(footer)
        self._next_offset += 1
        reader = self._raw.freeze()
        return reader.size_in_bytes

    def close(self) -> None:
        """Release the writer; a snapshot not frozen is abandoned. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pending = []
        self._raw.close()

    def __enter__(self) -> SnapshotWriter[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"SnapshotWriter({self.snapshot_id}, next_offset={self._next_offset}, "
            f"frozen={self.is_frozen})"
        )
