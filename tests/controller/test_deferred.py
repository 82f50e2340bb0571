"""DeferredEventQueue: writes complete in offset order once their offset commits."""

from __future__ import annotations

import pytest

from kraft.controller.deferred import DeferredEventQueue


class Recorder:
    def __init__(self, name: str, log: list[tuple[str, BaseException | None]]) -> None:
        self.name = name
        self.log = log

    def complete(self, exception: BaseException | None) -> None:
        self.log.append((self.name, exception))


def test_events_complete_in_offset_order_up_to_the_committed_offset() -> None:
    log: list[tuple[str, BaseException | None]] = []
    queue = DeferredEventQueue()
    queue.add(3, Recorder("a", log))
    queue.add(3, Recorder("b", log))
    queue.add(7, Recorder("c", log))
    assert queue.highest_pending_offset() == 7
    queue.complete_up_to(2)
    assert log == []
    queue.complete_up_to(6)
    assert log == [("a", None), ("b", None)]
    assert len(queue) == 1
    queue.complete_up_to(7)
    assert log[-1] == ("c", None)
    assert queue.highest_pending_offset() is None


def test_fail_all_fails_every_waiting_event_once() -> None:
    log: list[tuple[str, BaseException | None]] = []
    queue = DeferredEventQueue()
    queue.add(1, Recorder("a", log))
    queue.add(2, Recorder("b", log))
    error = RuntimeError("renounced")
    queue.fail_all(error)
    assert log == [("a", error), ("b", error)]
    queue.complete_up_to(10)
    assert len(log) == 2


def test_an_offset_below_the_highest_pending_is_refused() -> None:
    queue = DeferredEventQueue()
    queue.add(5, Recorder("a", []))
    with pytest.raises(ValueError, match="below the highest pending offset 5"):
        queue.add(4, Recorder("b", []))
