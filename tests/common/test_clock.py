"""ManualClock: one virtual clock for the Raft core (milliseconds) and the event queue
(nanoseconds), so both read the same time."""

from __future__ import annotations

import pytest

from kraft.common.clock import DEFAULT_WALL_START_MS, Clock, ManualClock
from kraft.runtime.clock import SystemClock


def read(clock: ManualClock) -> tuple[int, int, int]:
    """Monotonic ms, monotonic ns, and wall ms since the clock's wall start."""
    return clock.now_ms(), clock.now_ns(), clock.wall_ms() - DEFAULT_WALL_START_MS


def test_milliseconds_and_nanoseconds_are_one_clock() -> None:
    clock = ManualClock(start_ms=5)
    assert read(clock) == (5, 5_000_000, 0)
    clock.advance_ns(999_999)  # not yet a whole millisecond
    assert read(clock) == (5, 5_999_999, 0)
    clock.advance_ns(1)
    assert read(clock) == (6, 6_000_000, 1)
    clock.advance(2)
    assert read(clock) == (8, 8_000_000, 3)


def test_time_never_goes_back() -> None:
    clock = ManualClock()
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        clock.advance_ns(-1)
    assert clock.now_ns() == 0


def test_both_clocks_are_clocks() -> None:
    assert isinstance(ManualClock(), Clock)
    assert isinstance(SystemClock(), Clock)
    system = SystemClock()
    assert system.now_ns() // 1_000_000 <= system.now_ms()
