"""``ManualClock``: virtual time for the simulator and the tests."""

from __future__ import annotations

__all__ = ["DEFAULT_WALL_START_MS", "ManualClock"]

#: The wall clock a ManualClock starts at: 2024-01-01T00:00:00Z, so timestamps look real.
DEFAULT_WALL_START_MS = 1_704_067_200_000


class ManualClock:
    """Virtual time: monotonic milliseconds from ``start_ms``, moved only by :meth:`advance`.

    ``wall_ms`` is the monotonic time plus a fixed offset. ``now_ns`` makes it usable as the
    ``Clock`` of :mod:`kraft.queue` too.
    """

    __slots__ = ("_now_ms", "_wall_offset_ms")

    def __init__(self, start_ms: int = 0, wall_start_ms: int = DEFAULT_WALL_START_MS) -> None:
        self._now_ms = start_ms
        self._wall_offset_ms = wall_start_ms - start_ms

    def now_ms(self) -> int:
        return self._now_ms

    def wall_ms(self) -> int:
        return self._now_ms + self._wall_offset_ms

    def now_ns(self) -> int:
        return self._now_ms * 1_000_000

    def advance(self, ms: int) -> None:
        """Move time forward by ``ms`` (never back)."""
        if ms < 0:
            raise ValueError(f"time never goes back: advance({ms})")
        self._now_ms += ms

    sleep = advance
