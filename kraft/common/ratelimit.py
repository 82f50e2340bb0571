"""``LogLimiter``: at most one line per interval for a log message that can repeat.

A peer that keeps sending the same bad message would otherwise fill the log with one line per
message; the time comes from the caller (the core's clock), so the core stays sans-IO.
"""

from __future__ import annotations

__all__ = ["LogLimiter"]


class LogLimiter:
    """Whether a repeating message may be logged now: the first time, then once per
    ``interval_ms``."""

    __slots__ = ("_interval_ms", "_last_ms")

    def __init__(self, interval_ms: int) -> None:
        self._interval_ms = interval_ms
        self._last_ms: int | None = None

    def allow(self, now_ms: int) -> bool:
        """True (and the interval restarts) if nothing was allowed in the last interval."""
        if self._last_ms is not None and now_ms - self._last_ms < self._interval_ms:
            return False
        self._last_ms = now_ms
        return True
