"""What ``MemoryLog`` and ``FileLog`` share: epochs, validation, the high watermark, and the
checks on batches a follower appends.

The storage-specific parts (where bytes live, how they become durable) are left to the
subclasses; everything that decides *whether* an operation is legal lives here once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from kraft.errors import InvalidAppendError
from kraft.log.api import OffsetAndEpoch, ValidOffsetAndEpoch
from kraft.log.epoch_cache import EpochCache, validate_offset_and_epoch
from kraft.record.batch import Buffer, RecordBatch, iter_batches, read_batch

__all__ = ["LogBase", "check_encoded_batch", "validate_follower_batches"]


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


def check_encoded_batch(
    data: bytes, log_end_offset: int, latest_epoch: int | None
) -> RecordBatch:
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

    def __init__(self, epoch_cache: EpochCache) -> None:
        self._epochs = epoch_cache
        self._high_watermark = 0

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
        return 0 if latest is None else latest

    def epoch_entries(self) -> list[tuple[int, int]]:
        """The epoch cache as ``(epoch, start_offset)`` pairs (for tools and tests)."""
        return self._epochs.entries()

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return self._epochs.end_offset_for(epoch, self.log_end_offset)

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> ValidOffsetAndEpoch:
        return validate_offset_and_epoch(
            self._epochs, self.log_start_offset, self.log_end_offset, offset, epoch
        )

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
