"""``SystemClock``: the process's clocks as the Raft core's :class:`~kraft.raft.channel.Clock`."""

from __future__ import annotations

import time

__all__ = ["SystemClock"]


class SystemClock:
    """Monotonic milliseconds for timers, wall-clock milliseconds for record timestamps."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000
