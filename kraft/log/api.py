"""The ``ReplicatedLog`` contract (Kafka's ``ReplicatedLog``) and the value types it speaks in.

The Raft core reads and writes its log only through :class:`ReplicatedLog`. Two
implementations honour it: :class:`~kraft.log.memory.MemoryLog` (tests and the simulator) and
:class:`~kraft.log.file.FileLog` (segment files on disk). Both hold their snapshots and clean the
log below them.

Offsets are Kafka's: the log end offset (LEO) is the offset the next record will take; the
high watermark (HW) is exclusive (records below it are committed); the log start offset is the
first offset still held.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from kraft.record.batch import Buffer, SimpleRecord
from kraft.record.offsets import OffsetAndEpoch
from kraft.snapshot.raw import RawSnapshotReader, RawSnapshotWriter

__all__ = [
    "DEFAULT_MAX_READ_BYTES",
    "Isolation",
    "LogAppendInfo",
    "LogFetchInfo",
    "OffsetAndEpoch",
    "ReplicatedLog",
    "ValidOffsetAndEpoch",
    "ValidationKind",
]

#: Default cap on the bytes one ``read`` returns (Kafka's fetch MaxBytes for KRaft: 8 MiB).
DEFAULT_MAX_READ_BYTES = 8 * 1024 * 1024


class Isolation(enum.Enum):
    """How far a read may see: up to the high watermark, or up to the log end offset."""

    COMMITTED = "committed"
    UNCOMMITTED = "uncommitted"


class ValidationKind(enum.Enum):
    VALID = "valid"
    DIVERGING = "diverging"
    SNAPSHOT = "snapshot"


class ValidOffsetAndEpoch(NamedTuple):
    """The answer of ``validate_offset_and_epoch``: VALID, or where the fetcher must go."""

    kind: ValidationKind
    offset_and_epoch: OffsetAndEpoch

    @classmethod
    def valid(cls, offset_and_epoch: OffsetAndEpoch) -> ValidOffsetAndEpoch:
        return cls(ValidationKind.VALID, offset_and_epoch)

    @classmethod
    def diverging(cls, offset_and_epoch: OffsetAndEpoch) -> ValidOffsetAndEpoch:
        return cls(ValidationKind.DIVERGING, offset_and_epoch)

    @classmethod
    def snapshot(cls, offset_and_epoch: OffsetAndEpoch) -> ValidOffsetAndEpoch:
        return cls(ValidationKind.SNAPSHOT, offset_and_epoch)


class LogAppendInfo(NamedTuple):
    """First and last offset of what one append wrote."""

    first_offset: int
    last_offset: int


class LogFetchInfo(NamedTuple):
    """What a read returned: whole v2 batches as bytes, and the base offset of the first one.

    ``records`` is empty when there is nothing to read at ``start_offset`` under the isolation;
    ``start_offset`` is then the offset asked for.
    """

    records: bytes
    start_offset: int


@runtime_checkable
class ReplicatedLog(Protocol):
    """The log of the Raft core. Not thread-safe: one caller (the core's poll thread) at a time."""

    # -- appends ---------------------------------------------------------------------------
    def append_as_leader(
        self,
        records: Sequence[bytes | SimpleRecord],
        epoch: int,
        *,
        timestamp_ms: int,
        control: bool = False,
    ) -> LogAppendInfo:
        """Encode ``records`` as one batch at the log end offset, stamped with ``epoch``.

        ``epoch`` below the latest epoch in the log is an :class:`~kraft.errors.InvalidAppendError`.
        """

    def append_encoded(self, data: bytes) -> LogAppendInfo:
        """Append one batch the leader encoded itself (the batch accumulator's bytes).

        The batch must start at the log end offset and its epoch must not go back
        (:class:`~kraft.errors.InvalidAppendError`); its CRC is trusted, not recomputed: these
        bytes never left the process. This is the leader's fast path: no re-encoding.
        """

    def append_as_follower(self, batches: Buffer) -> LogAppendInfo:
        """Append whole batches fetched from the leader, as bytes (no re-encoding).

        Each batch is validated (length, magic, CRC) and must start at the log end offset;
        its epoch must not go back. Nothing is appended if any batch is bad:
        :class:`~kraft.errors.CorruptRecordError` or :class:`~kraft.errors.InvalidAppendError`.
        """

    # -- reads -----------------------------------------------------------------------------
    def read(
        self,
        start_offset: int,
        isolation: Isolation = Isolation.UNCOMMITTED,
        max_bytes: int = DEFAULT_MAX_READ_BYTES,
    ) -> LogFetchInfo:
        """Whole batches from the one holding ``start_offset``, up to the HW or the LEO.

        A batch whose last offset is at or past the isolation limit is not returned. At least
        one batch is returned when one is visible, even if it is larger than ``max_bytes``.
        ``start_offset`` outside ``[log_start_offset, log_end_offset]`` is a ``ValueError``.

        Every batch returned has been checked (length, magic, CRC, the base and last offsets
        the log expects there and, as neither the base offset nor the epoch is under the CRC,
        the epoch its epoch cache has for them): bytes known to be corrupt are never returned. The
        read stops before the first bad batch; if that is the first one, it raises
        :class:`~kraft.errors.CorruptRecordError` whose ``offset`` is the offset to hand to
        :meth:`quarantine_from` (at or below the bad batch, at or above the log start).
        """

    @property
    def log_start_offset(self) -> int:
        """The first offset the log holds (the LEO when it holds nothing)."""

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will take."""

    @property
    def high_watermark(self) -> int:
        """Records below this offset are committed."""

    def update_high_watermark(self, offset: int) -> None:
        """Move the HW; it never decreases, and never passes the LEO (``ValueError``)."""

    @property
    def last_flushed_offset(self) -> int:
        """Every offset below this survives a crash."""

    # -- epochs ----------------------------------------------------------------------------
    @property
    def last_fetched_epoch(self) -> int:
        """The latest epoch in the epoch cache: that of the last batch, or a newer one a new
        leader started with ``initialize_leader_epoch`` before appending; 0 when empty."""

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch ``<= epoch`` in the log and the offset where it ends (exclusive)."""

    def epoch_at(self, offset: int) -> int | None:
        """The epoch of the record at ``offset``; None outside ``[log start, log end)``."""

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> ValidOffsetAndEpoch:
        """Whether a fetcher at ``(offset, epoch)`` agrees with this log (Kafka's
        ``ReplicatedLog.validateOffsetAndEpoch``)."""

    def initialize_leader_epoch(self, epoch: int) -> None:
        """Record that ``epoch`` starts at the log end offset (a new leader's first step)."""

    # -- repair (docs/storage.md, "When a disk lies") -------------------------------------
    @property
    def repair_target(self) -> OffsetAndEpoch | None:
        """Where this log ended (offset, epoch of its last batch) before it set aside data it
        found corrupt or lost; None while it holds everything it ever acknowledged.

        While set, the replica may have acknowledged records it no longer holds, so it must
        not stand for election, must not grant a vote to a candidate whose log (last epoch,
        end offset) is behind this target, and as leader must resign. It is durable (it
        survives restarts) and clears itself once the log's (last epoch, end offset) reaches
        it again: by then the log holds the current leader's copy of everything it had lost.
        """

    def quarantine_from(self, offset: int, reason: str) -> OffsetAndEpoch:
        """Set aside every batch from the one holding ``offset`` on, because it is corrupt or
        missing (``reason`` says which, for the log line). Even below the high watermark,
        which falls to the new log end. The bytes are kept beside the log for inspection,
        never deleted. Raises the repair target (durably, before anything moves) to the
        (end offset, last epoch) the log had, and returns it. ``offset`` at or below the log
        start empties the log onto the snapshot there.
        """

    def quarantine_snapshot(self, snapshot_id: OffsetAndEpoch, reason: str) -> None:
        """Set aside a frozen snapshot found corrupt (renamed, not deleted). If the log
        started at it, the log start moves up to the next snapshot inside the log when there
        is one; otherwise the log is set aside whole and empties to offset 0 with the repair
        target raised, so that the replica fetches the leader's snapshot before it delivers
        anything. Unknown ids are ignored."""

    # -- truncation and durability ---------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Remove every batch whose last offset is ``>= offset``.

        The LEO becomes the base offset of the batch holding ``offset`` (or ``offset`` on a
        batch boundary). Truncating below the high watermark is a ``ValueError``.
        """

    def truncate_to_end_offset(self, end_offset: OffsetAndEpoch) -> int:
        """Truncate to where this log and a leader's ``end_offset`` agree; return that offset."""

    def flush(self, force: bool = False) -> None:
        """Make every appended batch durable (fsync)."""

    def close(self) -> None:
        """Flush and release the log's resources; the log is unusable afterwards."""

    # -- snapshots (KIP-630, docs/snapshots.md) -----------------------------------------------
    @property
    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        """The id of the newest frozen snapshot."""

    @property
    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        """The id of the oldest frozen snapshot (at the log start once the log was cleaned)."""

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotReader | None:
        """A reader of the frozen snapshot ``snapshot_id``, or None. The reader is the
        caller's: it keeps reading if the cleaner deletes the snapshot, and the caller closes
        it."""

    def latest_snapshot(self) -> RawSnapshotReader | None:
        """A reader of the newest frozen snapshot (the caller's, as ``read_snapshot``), or
        None."""

    def create_new_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter | None:
        """A writer for a snapshot of this log up to ``snapshot_id`` (checked against the log:
        at or below the HW, on a batch boundary, the epoch of the record before it)."""

    def create_new_snapshot_unchecked(
        self, snapshot_id: OffsetAndEpoch
    ) -> RawSnapshotWriter | None:
        """A writer for a snapshot downloaded from the leader; None if it exists."""

    def delete_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Drop one snapshot the log does not start at; True if it existed."""

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Move the log start up to the snapshot, dropping what lies below it."""

    def truncate_to_latest_snapshot(self) -> bool:
        """Empty the log onto the latest snapshot if that is ahead of it; True if it did."""

    def maybe_clean(self, now_ms: int) -> bool:
        """Apply the snapshot retention policy; True if anything was deleted."""
