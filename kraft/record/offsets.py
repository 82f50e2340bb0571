"""``OffsetAndEpoch``: a log position and the epoch before it (a snapshot id, an epoch's end).

It lives at the bottom of the layers because the log, snapshots and the protocol all speak it.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["OffsetAndEpoch"]


class OffsetAndEpoch(NamedTuple):
    """An offset and the epoch of the record before it (a snapshot id, an epoch's end).

    Ordered as Kafka orders it: by epoch first, then by offset. (A plain tuple would compare
    the offset first, so the comparisons are spelled out.)
    """

    offset: int
    epoch: int

    def _key(self) -> tuple[int, int]:
        return (self.epoch, self.offset)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, OffsetAndEpoch):
            return NotImplemented
        return self._key() < other._key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, OffsetAndEpoch):
            return NotImplemented
        return self._key() <= other._key()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, OffsetAndEpoch):
            return NotImplemented
        return self._key() > other._key()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, OffsetAndEpoch):
            return NotImplemented
        return self._key() >= other._key()
