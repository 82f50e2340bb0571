"""What ``MemoryLog`` and ``FileLog`` share: epochs, validation, the high watermark, and the
checks on batches a follower appends.

The storage-specific parts (where bytes live, how they become durable) are left to the
subclasses; everything that decides *whether* an operation is legal lives here once.
"""

from __future__ import annotations

import bisect
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass

from kraft.errors import CorruptSnapshotError, InvalidAppendError, StorageError
from kraft.log.api import OffsetAndEpoch, ValidationKind, ValidOffsetAndEpoch
from kraft.log.epoch_cache import EpochCache
from kraft.record.batch import Buffer, RecordBatch, iter_batches, read_batch
from kraft.snapshot.raw import RawSnapshotReader, RawSnapshotWriter
from kraft.snapshot.reader import read_snapshot_header

__all__ = ["LogBase", "SnapshotRetention", "check_encoded_batch", "validate_follower_batches"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SnapshotRetention:
    """When the cleaner moves the log start up to a snapshot, dropping the log below it and
    every older snapshot (Kafka's ``ReplicatedLog.maybeClean``, KIP-630).

    The latest snapshot is never deleted. The log start moves to the next snapshot while any
    of these holds for what lies below it:

    - more than ``retained_snapshots`` snapshots are held (the one at the log start counts);
    - the log holds more than ``retention_bytes`` bytes (None: no limit);
    - the oldest snapshot's last contained log time is more than ``retention_ms`` old
      (None: no limit).
    """

    retained_snapshots: int = 2
    retention_bytes: int | None = 100 * 1024 * 1024  # metadata.max.retention.bytes
    retention_ms: int | None = 7 * 24 * 3600 * 1000  # metadata.max.retention.ms

    def __post_init__(self) -> None:
        if self.retained_snapshots < 1:
            raise ValueError(f"retained_snapshots must be at least 1: {self.retained_snapshots}")
        if self.retention_bytes is not None and self.retention_bytes < 0:
            raise ValueError(f"negative retention_bytes {self.retention_bytes}")
        if self.retention_ms is not None and self.retention_ms < 0:
            raise ValueError(f"negative retention_ms {self.retention_ms}")


def validate_follower_batches(
    batches: Buffer, log_end_offset: int, latest_epoch: int | None
) -> list[RecordBatch]:
    """Check fetched batches before any of them is written; return their views.

    Every batch must be well formed with a valid CRC (:class:`~kraft.errors.CorruptRecordError`
    otherwise), start exactly where the previous one ended, the first at ``log_end_offset``,
    and carry an epoch that never goes back (:class:`InvalidAppendError` otherwise).
    """
    views = list(iter_batches(batches))
    if not views:
        raise InvalidAppendError("attempt to append an empty record set")
    expected = log_end_offset
    epoch_floor = -1 if latest_epoch is None else latest_epoch
    for batch in views:
        if batch.base_offset != expected:
            raise InvalidAppendError(
                f"batch at byte {batch.position} has base offset {batch.base_offset}, "
                f"expected {expected}"
            )
        if batch.partition_leader_epoch < epoch_floor:
            raise InvalidAppendError(
                f"batch at offset {batch.base_offset} has epoch {batch.partition_leader_epoch}, "
                f"below the log's latest epoch {epoch_floor}"
            )
        epoch_floor = batch.partition_leader_epoch
        expected = batch.next_offset
    return views


def check_encoded_batch(data: bytes, log_end_offset: int, latest_epoch: int | None) -> RecordBatch:
    """Check a leader's pre-encoded batch (``append_encoded``) without its CRC."""
    batch = read_batch(data, verify_crc=False)
    if batch.size_in_bytes != len(data):
        raise InvalidAppendError(
            f"append_encoded takes exactly one batch: {len(data)} bytes, the batch has "
            f"{batch.size_in_bytes}"
        )
    if batch.base_offset != log_end_offset:
        raise InvalidAppendError(
            f"batch has base offset {batch.base_offset}, expected the log end offset "
            f"{log_end_offset}"
        )
    if latest_epoch is not None and batch.partition_leader_epoch < latest_epoch:
        raise InvalidAppendError(
            f"batch has epoch {batch.partition_leader_epoch}, below the log's latest epoch "
            f"{latest_epoch}"
        )
    return batch


class LogBase(ABC):
    """Epoch cache, high watermark and the derived parts of the ``ReplicatedLog`` contract."""

    def __init__(self, epoch_cache: EpochCache, retention: SnapshotRetention | None = None) -> None:
        self._epochs = epoch_cache
        self._high_watermark = 0
        #: Frozen snapshots by id, and their ids sorted by offset.
        self._snapshots: dict[OffsetAndEpoch, RawSnapshotReader] = {}
        self._snapshot_ids: list[OffsetAndEpoch] = []
        self.retention = retention or SnapshotRetention()
        #: See ``ReplicatedLog.repair_target``; subclasses load it when they open.
        self._repair_target: OffsetAndEpoch | None = None

    # Provided by subclasses: where the bytes live.
    @property
    @abstractmethod
    def log_start_offset(self) -> int:
        """The first offset the log holds."""

    @property
    @abstractmethod
    def log_end_offset(self) -> int:
        """The offset the next appended record will take."""

    @abstractmethod
    def truncate_to(self, offset: int) -> None:
        """Remove every batch whose last offset is ``>= offset``."""

    # Provided by subclasses: where snapshots and the log start live.
    @abstractmethod
    def _new_snapshot_writer(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter:
        """A writer for a new snapshot that calls :meth:`_on_snapshot_frozen` when frozen."""

    @abstractmethod
    def _delete_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Remove a frozen snapshot from storage."""

    @abstractmethod
    def _advance_log_start(self, offset: int) -> None:
        """Make ``offset`` the log start (durably), dropping whole batches below it."""

    @abstractmethod
    def _reset_to(self, offset: int) -> None:
        """Empty the log: it starts and ends at ``offset``, with the (now empty) epoch cache,
        durably."""

    @abstractmethod
    def _is_batch_boundary(self, offset: int) -> bool:
        """Whether a batch starts at ``offset``, or ``offset`` is the log end offset."""

    @abstractmethod
    def size_in_bytes(self) -> int:
        """The bytes the log's batches take."""

    @abstractmethod
    def _set_aside_from(self, offset: int) -> None:
        """Move every batch from the one holding ``offset`` on out of the log, keeping the
        bytes beside it (never deleting them); the log ends where they began. Ignores the
        high watermark (the caller lowers it) and leaves the epoch cache to the caller."""

    @abstractmethod
    def _set_aside_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Move a frozen snapshot's bytes out of the log's snapshots, keeping them."""

    @abstractmethod
    def _persist_repair_target(self, target: OffsetAndEpoch | None) -> None:
        """Make the repair target (or its absence) durable."""

    # -- high watermark --------------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def update_high_watermark(self, offset: int) -> None:
        """Move the high watermark. It never decreases and never passes the log end offset."""
        if offset < self._high_watermark:
            raise ValueError(
                f"non-monotonic high watermark update from {self._high_watermark} to {offset}"
            )
        if offset > self.log_end_offset:
            raise ValueError(
                f"high watermark {offset} is past the log end offset {self.log_end_offset}"
            )
        if offset < self.log_start_offset:
            raise ValueError(
                f"high watermark {offset} is below the log start offset {self.log_start_offset}"
            )
        self._high_watermark = offset

    def _check_truncation(self, offset: int, new_end: int | None = None) -> None:
        """Refuse a truncation that would remove a committed record.

        ``new_end`` is where the log would really end: the base offset of the batch holding
        ``offset``. When the high watermark falls inside that batch, cutting the whole batch
        would lose committed records below ``offset`` and leave the HW past the LEO, so it is
        refused like a truncation below the HW.
        """
        if offset < self._high_watermark:
            raise ValueError(
                f"illegal attempt to truncate to offset {offset}, below the high watermark "
                f"{self._high_watermark}"
            )
        if offset < 0:
            raise ValueError(f"negative truncation offset {offset}")
        if new_end is not None and new_end < self._high_watermark:
            raise ValueError(
                f"illegal attempt to truncate to offset {offset}: the batch holding it starts "
                f"at {new_end}, below the high watermark {self._high_watermark}"
            )

    # -- epochs ----------------------------------------------------------------------------
    @property
    def last_fetched_epoch(self) -> int:
        latest = self._epochs.latest_epoch
        if latest is not None:
            return latest
        # An empty log that starts at a snapshot continues that snapshot's epoch.
        snapshot = self.latest_snapshot_id
        return 0 if snapshot is None else snapshot.epoch

    def epoch_entries(self) -> list[tuple[int, int]]:
        """The epoch cache as ``(epoch, start_offset)`` pairs (for tools and tests)."""
        return self._epochs.entries()

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return self._epochs.end_offset_for(epoch, self.log_end_offset, self._start_epoch())

    def _epoch_floor(self) -> int | None:
        """The lowest epoch an append may carry: the log's latest, or once the log was emptied
        onto a snapshot, that snapshot's (None for an empty log from offset 0)."""
        latest = self._epochs.latest_epoch
        if latest is not None:
            return latest
        earliest = self.earliest_snapshot_id
        if earliest is not None and earliest.offset == self.log_start_offset > 0:
            return earliest.epoch
        return None

    def _check_leader_epoch(self, epoch: int) -> None:
        floor = self._epoch_floor()
        if floor is not None and epoch < floor:
            raise InvalidAppendError(f"epoch {epoch} is below the log's latest epoch {floor}")

    def _start_epoch(self) -> int:
        """The epoch before the log start: that of the snapshot there, or 0."""
        earliest = self.earliest_snapshot_id
        if earliest is not None and earliest.offset == self.log_start_offset:
            return earliest.epoch
        return 0

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> ValidOffsetAndEpoch:
        """Kafka's ``ReplicatedLog.validateOffsetAndEpoch`` with the snapshot cases: a fetcher
        below the log start, at the log start in another epoch than the snapshot there, or in
        an epoch older than the earliest snapshot is sent the latest snapshot."""
        start = self.log_start_offset
        if start == 0 and offset == 0:
            return ValidOffsetAndEpoch.valid(OffsetAndEpoch(offset, epoch))
        earliest = self.earliest_snapshot_id
        latest = self.latest_snapshot_id
        if (
            earliest is not None
            and latest is not None
            and (
                offset < start
                or (offset == start and epoch != earliest.epoch)
                or epoch < earliest.epoch
            )
        ):
            return ValidOffsetAndEpoch.snapshot(latest)
        # The snapshot at the log start is the epoch before the first entry of the cache.
        end = self.end_offset_for_epoch(epoch)
        if end.epoch != epoch or end.offset < offset:
            return ValidOffsetAndEpoch.diverging(end)
        return ValidOffsetAndEpoch.valid(OffsetAndEpoch(offset, epoch))

    def truncate_to_end_offset(self, end_offset: OffsetAndEpoch) -> int:
        """Truncate to where this log agrees with a leader's ``end_offset`` (a diverging epoch).

        Epoch 0 never has a leader, so its end is simply capped at our LEO. Otherwise we look up
        where *our* copy of that epoch ends: if we have the epoch, the logs agree up to the
        smaller of the two ends; if we do not, up to the end of our largest epoch below it.
        """
        if end_offset.epoch == 0:
            target = min(end_offset.offset, self.log_end_offset)
        else:
            local = self.end_offset_for_epoch(end_offset.epoch)
            if local.epoch == end_offset.epoch:
                target = min(local.offset, end_offset.offset)
            else:
                target = local.offset
        self.truncate_to(target)
        return target

    # -- repair (docs/storage.md, "When a disk lies") ------------------------------------
    @property
    def repair_target(self) -> OffsetAndEpoch | None:
        return self._repair_target

    def _end_and_epoch(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.log_end_offset, self.last_fetched_epoch)

    def _raise_repair_target(self, target: OffsetAndEpoch) -> OffsetAndEpoch:
        """Make ``target`` the repair target unless a later one is already set (durably)."""
        current = self._repair_target
        if current is None or (target.epoch, target.offset) > (current.epoch, current.offset):
            self._persist_repair_target(target)
            self._repair_target = target
            return target
        return current

    def _check_repaired(self) -> None:
        """Clear the repair target once the log has reached it again (call after appends)."""
        target = self._repair_target
        if target is None:
            return
        end = self._end_and_epoch()
        if (end.epoch, end.offset) >= (target.epoch, target.offset):
            self._persist_repair_target(None)
            self._repair_target = None
            logger.warning("log repaired: it reaches %s again (repair target %s)", end, target)

    def quarantine_from(self, offset: int, reason: str) -> OffsetAndEpoch:
        before = self._end_and_epoch()
        target = self._raise_repair_target(before)
        self._set_aside_from(max(offset, self.log_start_offset))
        self._epochs.truncate_from_end(self.log_end_offset)
        self._high_watermark = min(self._high_watermark, self.log_end_offset)
        logger.error(
            "set aside the log from offset %d to %d (%s): this replica will not vote for a "
            "log behind %s nor stand for election until it has fetched that far again",
            self.log_end_offset,
            before.offset,
            reason,
            target,
        )
        return target

    def quarantine_snapshot(self, snapshot_id: OffsetAndEpoch, reason: str) -> None:
        if snapshot_id not in self._snapshots:
            return
        at_start = 0 < self.log_start_offset == snapshot_id.offset
        self._set_aside_snapshot(snapshot_id)
        self._snapshots.pop(snapshot_id).close()
        self._snapshot_ids.remove(snapshot_id)
        logger.error("set aside snapshot %s: %s", snapshot_id, reason)
        if not at_start:
            return
        inside = [s for s in self._snapshot_ids if self.log_start_offset < s.offset]
        if inside and inside[0].offset <= self.log_end_offset:
            # The log holds what lies between: start it at the next snapshot instead.
            self._advance_log_start(inside[0].offset)
            self._epochs.truncate_from_start(inside[0].offset)
            return
        self._start_over(f"the log started at snapshot {snapshot_id}, now set aside")

    def _start_over(self, why: str) -> None:
        """Nothing stands for the records below the log start any more: set the log aside
        whole and empty it to offset 0 (repair target raised), so that the replica fetches
        the leader's snapshot before it delivers anything."""
        target = self._raise_repair_target(self._end_and_epoch())
        self._set_aside_from(self.log_start_offset)
        self._epochs = EpochCache()
        self._reset_to(0)
        self._high_watermark = 0
        logger.error(
            "%s: the log is set aside and emptied to offset 0, to fetch the leader's "
            "snapshot first; repair target %s",
            why,
            target,
        )

    # -- snapshots (KIP-630, docs/snapshots.md) -----------------------------------------------
    @property
    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self._snapshot_ids[-1] if self._snapshot_ids else None

    @property
    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self._snapshot_ids[0] if self._snapshot_ids else None

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        """Every frozen snapshot's id, oldest first."""
        return list(self._snapshot_ids)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotReader | None:
        """A reader of the frozen snapshot ``snapshot_id`` that the caller closes, or None."""
        reader = self._snapshots.get(snapshot_id)
        return None if reader is None else reader.reopen()

    def latest_snapshot(self) -> RawSnapshotReader | None:
        latest = self.latest_snapshot_id
        return None if latest is None else self.read_snapshot(latest)

    def create_new_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter | None:
        """A writer for a snapshot of this log up to ``snapshot_id.offset`` (exclusive).

        None if the log already starts past it or the snapshot exists. ``ValueError`` if it is
        above the high watermark, not on a batch boundary, or ``snapshot_id.epoch`` is not the
        epoch of the record before ``snapshot_id.offset``.
        """
        offset, epoch = snapshot_id
        if offset < self.log_start_offset or snapshot_id in self._snapshots:
            logger.info(
                "not creating snapshot %s: the log starts at %d or it exists",
                snapshot_id,
                self.log_start_offset,
            )
            return None
        if offset > self._high_watermark:
            raise ValueError(
                f"cannot create snapshot {snapshot_id} above the high watermark "
                f"{self._high_watermark}"
            )
        if self.validate_offset_and_epoch(offset, epoch).kind is not ValidationKind.VALID:
            raise ValueError(f"snapshot {snapshot_id} does not match the log's epochs")
        before = self._epoch_at(offset - 1)
        if offset > self.log_start_offset and before != epoch:
            raise ValueError(
                f"snapshot {snapshot_id}: the record at offset {offset - 1} has epoch {before}"
            )
        if not self._is_batch_boundary(offset):
            raise ValueError(f"snapshot {snapshot_id} does not end on a batch boundary")
        return self._new_snapshot_writer(snapshot_id)

    def create_new_snapshot_unchecked(
        self, snapshot_id: OffsetAndEpoch
    ) -> RawSnapshotWriter | None:
        """A writer for a snapshot downloaded from the leader (no check against this log);
        None if it exists."""
        if snapshot_id in self._snapshots:
            return None
        return self._new_snapshot_writer(snapshot_id)

    def epoch_at(self, offset: int) -> int | None:
        if not self.log_start_offset <= offset < self.log_end_offset:
            return None
        return self._epoch_at(offset)

    def _epoch_at(self, offset: int) -> int:
        return self._epochs.epoch_at(offset, self._start_epoch())

    def _on_snapshot_frozen(self, reader: RawSnapshotReader) -> None:
        """A writer froze: the snapshot is durable and becomes visible."""
        snapshot_id = reader.snapshot_id
        self._snapshots[snapshot_id] = reader
        bisect.insort(self._snapshot_ids, snapshot_id, key=lambda s: (s.offset, s.epoch))
        logger.info("snapshot %s frozen (%d bytes)", snapshot_id, reader.size_in_bytes)

    def delete_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Drop one snapshot that the log does not start at (a corrupt download, say);
        ``ValueError`` for the snapshot at a log start past 0."""
        if snapshot_id not in self._snapshots:
            return False
        if 0 < self.log_start_offset == snapshot_id.offset:
            raise ValueError(f"snapshot {snapshot_id} is where the log starts")
        self._drop_snapshot(snapshot_id)
        return True

    def _drop_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        # The log's own reader goes now (for a FileLog, its descriptor: the unlinked file's
        # space is freed); a reader handed out is the caller's and keeps reading.
        self._snapshots.pop(snapshot_id).close()
        self._snapshot_ids.remove(snapshot_id)
        self._delete_snapshot(snapshot_id)

    def _close_snapshots(self) -> None:
        """Close the log's own snapshot readers (the log closes)."""
        for reader in self._snapshots.values():
            reader.close()

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Move the log start up to the snapshot ``snapshot_id`` (which must exist and be at or
        below the high watermark), dropping the log below it and every older snapshot."""
        if snapshot_id not in self._snapshots:
            raise ValueError(f"no snapshot {snapshot_id}")
        if snapshot_id.offset > self._high_watermark:
            raise ValueError(
                f"cannot delete the log before snapshot {snapshot_id}: the high watermark is "
                f"{self._high_watermark}"
            )
        if snapshot_id.offset < self.log_start_offset:
            return False
        changed = snapshot_id.offset > self.log_start_offset
        if changed:
            self._advance_log_start(snapshot_id.offset)
            self._epochs.truncate_from_start(snapshot_id.offset)
        return self._forget_snapshots_before(snapshot_id) or changed

    def _forget_snapshots_before(self, snapshot_id: OffsetAndEpoch) -> bool:
        older = [s for s in self._snapshot_ids if s.offset < snapshot_id.offset]
        for old in older:
            self._drop_snapshot(old)
        return bool(older)

    def truncate_to_latest_snapshot(self) -> bool:
        """Unless the log holds what the latest snapshot stands for (it reaches the snapshot's
        end with the same epoch there), empty it so that it starts and ends at the snapshot,
        with the high watermark there; True if it did. A log that diverges from a downloaded
        snapshot held only uncommitted records there."""
        latest = self.latest_snapshot_id
        if latest is None:
            return False
        if self._holds_prefix_of(latest):
            return False
        self._epochs = EpochCache()
        self._reset_to(latest.offset)
        self._high_watermark = latest.offset
        self._forget_snapshots_before(latest)
        logger.info("log truncated to snapshot %s", latest)
        # A replica repairing itself may catch up through the snapshot alone.
        self._check_repaired()
        return True

    def _holds_prefix_of(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Whether this log holds what ``snapshot_id`` stands for: it reaches the snapshot's
        end, and the record before that end has the snapshot's epoch."""
        offset, epoch = snapshot_id
        if not self.log_start_offset <= offset <= self.log_end_offset:
            return False
        if offset == self.log_start_offset:
            return self._start_epoch() == epoch or (offset == 0 and epoch == 0)
        return self._epoch_at(offset - 1) == epoch

    def maybe_clean(self, now_ms: int) -> bool:
        """Apply the retention policy (Kafka's ``ReplicatedLog.maybeClean``): while the policy
        says so, move the log start up to the next snapshot. True if anything was deleted."""
        policy = self.retention
        changed = False
        while True:
            above = [
                s
                for s in self._snapshot_ids
                if self.log_start_offset <= s.offset <= self._high_watermark
            ]
            at_start = bool(above) and above[0].offset == self.log_start_offset
            candidates = above[1:] if at_start else above
            if not candidates:
                break  # the latest snapshot is at the log start: nothing to drop
            too_many = len(above) > policy.retained_snapshots
            too_big = (
                policy.retention_bytes is not None and self.size_in_bytes() > policy.retention_bytes
            )
            too_old = (
                policy.retention_ms is not None
                and now_ms - _snapshot_timestamp(self._snapshots[above[0]]) > policy.retention_ms
            )
            if not (too_many or too_big or too_old):
                break
            target = candidates[0]
            logger.info(
                "cleaner: moving the log start from %d to snapshot %s",
                self.log_start_offset,
                target,
            )
            self.delete_before_snapshot(target)
            changed = True
        return changed


def _snapshot_timestamp(raw: RawSnapshotReader) -> int:
    """The last contained log time of a snapshot (-1 if its header is unreadable: such a
    snapshot is never too old)."""
    try:
        return read_snapshot_header(raw).last_contained_log_timestamp
    except (CorruptSnapshotError, StorageError) as exc:
        logger.warning("snapshot %s: cannot read its header: %s", raw.snapshot_id, exc)
    return -1
