"""The leader-epoch cache: which offset each leader epoch starts at.

Kafka keeps, beside every log, the list of ``(epoch, start_offset)`` for the epochs present in
it (``LeaderEpochFileCache``); this is what answers "where does epoch E end in your log?", the
question a follower's fetch asks (KIP-595 diverging epochs). Entries are strictly increasing
in both epoch and start offset.

:class:`EpochCache` is the in-memory logic, shared by ``MemoryLog`` and ``FileLog``;
:func:`read_checkpoint` / :func:`write_checkpoint` store it as Kafka's
``leader-epoch-checkpoint`` text file::

    0               <- format version
    2               <- number of entries
    1 0             <- epoch start_offset
    3 120
"""

from __future__ import annotations

import bisect
from pathlib import Path

from kraft.common.fsutil import write_atomically
from kraft.errors import InvalidAppendError, LogDirectoryError, StorageError
from kraft.log.api import OffsetAndEpoch

__all__ = ["EpochCache", "read_checkpoint", "write_checkpoint"]

CHECKPOINT_VERSION = 0


class EpochCache:
    """Epoch start offsets, kept in two parallel lists for bisection."""

    __slots__ = ("_epochs", "_starts")

    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries or []:
            self.assign(epoch, start)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Note that ``epoch`` starts at ``start_offset``; True if the cache changed.

        An epoch below the latest one is refused: a log's epochs never go back.
        """
        if epoch < 0:
            raise InvalidAppendError(f"negative epoch {epoch}")
        if self._epochs:
            latest = self._epochs[-1]
            if epoch == latest:
                return False
            if epoch < latest:
                raise InvalidAppendError(
                    f"epoch {epoch} at offset {start_offset} is below the log's latest epoch "
                    f"{latest} (which starts at {self._starts[-1]})"
                )
            if start_offset < self._starts[-1]:
                raise InvalidAppendError(
                    f"epoch {epoch} would start at {start_offset}, before epoch {latest} "
                    f"starts at {self._starts[-1]}"
                )
            if start_offset == self._starts[-1]:
                # The previous epoch holds no record: the new one replaces it (Kafka does the
                # same, so an empty epoch never answers an end-offset query).
                self._epochs[-1] = epoch
                return True
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def epoch_at(self, offset: int, lower_bound_epoch: int = 0) -> int:
        """The epoch of the record at ``offset``: that of the last epoch starting at or
        before it, or ``lower_bound_epoch`` if it lies before every epoch."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else lower_bound_epoch

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop the epochs that start at or after ``end_offset`` (the log was truncated)."""
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep == len(self._starts):
            return False
        del self._epochs[keep:]
        del self._starts[keep:]
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """Forget epochs wholly below ``start_offset``; the one holding it now starts there."""
        i = bisect.bisect_right(self._starts, start_offset) - 1
        if i < 0 or (i == 0 and self._starts[0] == start_offset):
            return False
        del self._epochs[:i]
        del self._starts[:i]
        self._starts[0] = start_offset
        return True

    def end_offset_for(
        self, epoch: int, log_end_offset: int, lower_bound_epoch: int = 0
    ) -> OffsetAndEpoch:
        """The largest epoch ``<= epoch`` and the offset where it ends (exclusive).

        If ``epoch`` is at or past the latest epoch, the answer is the latest epoch and the log
        end offset. If it is below every epoch in the log, the answer is the first epoch's
        start with ``lower_bound_epoch`` (the epoch of the snapshot the log starts from, or 0).
        """
        i = bisect.bisect_right(self._epochs, epoch)
        if i == len(self._epochs):
            latest = self._epochs[-1] if self._epochs else lower_bound_epoch
            return OffsetAndEpoch(log_end_offset, latest)
        previous = self._epochs[i - 1] if i > 0 else lower_bound_epoch
        return OffsetAndEpoch(self._starts[i], previous)


def write_checkpoint(path: Path, cache: EpochCache) -> None:
    """Replace ``path`` crash-safely with the cache in Kafka's checkpoint text format."""
    entries = cache.entries()
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{epoch} {start}" for epoch, start in entries]
    try:
        write_atomically(path, ("\n".join(lines) + "\n").encode("ascii"))
    except OSError as exc:
        raise StorageError(f"cannot write epoch checkpoint {path}: {exc}") from exc


def read_checkpoint(path: Path) -> EpochCache | None:
    """The cache stored at ``path``; ``None`` when the file is missing or unusable.

    The checkpoint is derived data (the batches carry their epochs), so a damaged one is not
    an error: the caller rebuilds it from the log.
    """
    try:
        text = path.read_text("ascii")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        return None  # garbage bytes: damaged, rebuilt by the caller like any other damage
    except OSError as exc:
        raise LogDirectoryError(f"cannot read epoch checkpoint {path}: {exc}") from exc
    lines = text.splitlines()
    try:
        if len(lines) < 2 or int(lines[0]) != CHECKPOINT_VERSION:
            return None
        count = int(lines[1])
        if count != len(lines) - 2:
            return None
        cache = EpochCache()
        for line in lines[2:]:
            epoch_text, start_text = line.split()
            cache.assign(int(epoch_text), int(start_text))
    except (ValueError, InvalidAppendError):
        return None
    return cache
