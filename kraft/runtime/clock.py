"""``SystemClock``: the process's clocks as a :class:`~kraft.common.clock.Clock`.

Here, in the runtime, because it reads ``time``: the core, which only takes a ``Clock``, never
imports this module (tests/test_sans_io.py).
"""

from __future__ import annotations

import time

__all__ = ["SystemClock"]


class SystemClock:
    """``time.monotonic_ns`` for timers and deadlines, ``time.time_ns`` for timestamps."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def now_ns(self) -> int:
        return time.monotonic_ns()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000
