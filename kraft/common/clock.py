"""Time as kraft sees it: the :class:`Clock` protocol and :class:`ManualClock`.

Nothing below the runtime reads a clock: the Raft core, the metrics and the event queue are
handed a :class:`Clock`. The runtime hands them the process's clocks
(:class:`kraft.runtime.clock.SystemClock`, kept there so that importing this module never
imports ``time``); tests and the simulator hand them a :class:`ManualClock` and move time
themselves, so every timer and every deadline fires exactly when they say.
"""

from __future__ import annotations

from typing import Final, Protocol, runtime_checkable

__all__ = ["DEFAULT_WALL_START_MS", "Clock", "ManualClock"]

_NS_PER_MS: Final = 1_000_000

#: The wall clock a ManualClock starts at: 2024-01-01T00:00:00Z, so timestamps look real.
DEFAULT_WALL_START_MS: Final = 1_704_067_200_000


@runtime_checkable
class Clock(Protocol):
    """A monotonic clock for timers and deadlines, and a wall clock for timestamps."""

    def now_ms(self) -> int:
        """Monotonic milliseconds: every Raft timer is measured against this."""

    def now_ns(self) -> int:
        """Monotonic nanoseconds, the same clock as :meth:`now_ms` (Kafka's
        ``Time.nanoseconds()``): the event queue's deadlines."""

    def wall_ms(self) -> int:
        """Wall-clock milliseconds since the epoch: only for record timestamps."""


class ManualClock:
    """Virtual time: it moves only by :meth:`advance` (milliseconds) or :meth:`advance_ns`.

    Monotonic time starts at ``start_ms``; ``wall_ms`` is the monotonic time plus a fixed
    offset, starting at ``wall_start_ms``. One thread moves it at a time (the test, or the
    simulator's loop). A threaded event queue waiting on a deadline does not notice the clock
    moving (it waits in real time): call the queue's ``wakeup()`` after advancing, as Kafka's
    tests do with ``MockTime``.
    """

    # The milliseconds are kept beside the nanoseconds, not divided out on every read: the
    # Raft core and the simulator read now_ms() far more often than anything moves the clock.
    __slots__ = ("_now_ms", "_now_ns", "_wall_offset_ms")

    def __init__(self, start_ms: int = 0, wall_start_ms: int = DEFAULT_WALL_START_MS) -> None:
        self._now_ms = start_ms
        self._now_ns = start_ms * _NS_PER_MS
        self._wall_offset_ms = wall_start_ms - start_ms

    def now_ms(self) -> int:
        return self._now_ms

    def now_ns(self) -> int:
        return self._now_ns

    def wall_ms(self) -> int:
        return self._now_ms + self._wall_offset_ms

    def advance(self, ms: int) -> None:
        """Move time forward by ``ms`` milliseconds (never back)."""
        if ms < 0:
            raise ValueError(f"time never goes back: advance({ms})")
        self.advance_ns(ms * _NS_PER_MS)

    def advance_ns(self, ns: int) -> None:
        """Move time forward by ``ns`` nanoseconds (never back)."""
        if ns < 0:
            raise ValueError(f"time never goes back: advance_ns({ns})")
        self._now_ns += ns
        self._now_ms = self._now_ns // _NS_PER_MS
