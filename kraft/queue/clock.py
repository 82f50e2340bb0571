"""Time as the queue sees it: monotonic nanoseconds from an injected clock.

The queue core never reads a clock; its drivers do, through :class:`Clock`. The threaded
queue reads :class:`SystemClock` in production. Tests and the simulator pass a
:class:`ManualClock` and move time themselves, so deadlines fire exactly when they say.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """A source of monotonic time in nanoseconds (Kafka's ``Time.nanoseconds()``)."""

    def now_ns(self) -> int:
        """Return the current monotonic time in nanoseconds."""


class SystemClock:
    """The process's monotonic clock (``time.monotonic_ns``)."""

    def now_ns(self) -> int:
        """Return ``time.monotonic_ns()``."""
        return time.monotonic_ns()


class ManualClock:
    """A clock that only moves when told to: for tests and deterministic runs.

    A threaded queue waiting on a deadline does not notice the clock moving by itself (it
    waits in real time); call the queue's ``wakeup()`` after advancing, as Kafka's tests do
    with ``MockTime``.
    """

    def __init__(self, now_ns: int = 0) -> None:
        self._now_ns = now_ns
        # An event on the queue's thread may advance the clock while a test thread does too.
        self._lock = threading.Lock()

    def now_ns(self) -> int:
        """Return the clock's current time in nanoseconds."""
        return self._now_ns

    def advance_ns(self, delta_ns: int) -> None:
        """Move the clock forward by ``delta_ns`` nanoseconds (never backward: it is monotonic)."""
        if delta_ns < 0:
            raise ValueError(f"a monotonic clock cannot go back ({delta_ns} ns)")
        with self._lock:
            self._now_ns += delta_ns

    def advance_ms(self, delta_ms: int) -> None:
        """Move the clock forward by ``delta_ms`` milliseconds."""
        self.advance_ns(delta_ms * 1_000_000)
