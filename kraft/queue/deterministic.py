"""The queue core driven by the caller, on the caller's thread, against the caller's clock.

For the simulator and for tests: nothing runs until :meth:`DeterministicEventQueue.run_one`
or :meth:`DeterministicEventQueue.run_until_idle` is called, and time is whatever the injected
clock says, so a run is a pure function of the calls made.
"""

from __future__ import annotations

from kraft.common.clock import Clock
from kraft.queue.base import EventQueueBase
from kraft.queue.core import EXIT, Wait, run_step
from kraft.queue.event import Event

__all__ = ["DeterministicEventQueue"]


class DeterministicEventQueue(EventQueueBase):
    """An event queue with no thread: the caller runs its loop, one step at a time.

    A step is what one turn of Kafka's loop does: run one event, fail one event (timeout,
    shutdown, interrupt), or, once shut down and drained, run the cleanup event. Offering
    events is thread-safe, but the loop must be driven from one thread, and not from inside
    one of the queue's own events.

    Typical driver (the simulator's scheduler)::

        queue.run_until_idle()
        wake_at = queue.next_deadline_ns()   # None: nothing scheduled
        # ... advance the clock to wake_at (or until something is appended), repeat
    """

    def __init__(self, clock: Clock, cleanup_event: Event | None = None) -> None:
        super().__init__(clock, cleanup_event)
        self._driving = False
        self._finished = False

    @property
    def finished(self) -> bool:
        """True once the queue has shut down (or been interrupted), drained, and cleaned up."""
        return self._finished

    def run_one(self) -> bool:
        """Take one step at the clock's current time; return False when there was none.

        Raises ``RuntimeError`` if called from inside one of this queue's events.
        """
        if self._driving:
            raise RuntimeError("a DeterministicEventQueue cannot be driven from its own event")
        self._driving = True
        try:
            with self._cond:
                step = self._core.next_step(self._clock.now_ns())
            if isinstance(step, Wait):
                return False
            if step is EXIT:
                if self._finished:
                    return False
                self._finished = True
                self._run_cleanup()
                return True
            run_step(step)
            with self._cond:
                self._core.step_done()
            return True
        finally:
            self._driving = False

    def run_until_idle(self) -> int:
        """Take steps until none is ready at the clock's current time; return how many.

        Events appended by running events are run too; deferred events and deadlines later
        than the current time are left for a later call, after the clock has moved.
        """
        steps = 0
        while self.run_one():
            steps += 1
        return steps

    def next_deadline_ns(self) -> int | None:
        """The earliest time at which a deferred event falls due or a deadline expires.

        ``None`` when nothing is scheduled. A driver that has run the queue until idle has
        nothing to do before this time unless a new event is offered.
        """
        with self._cond:
            return self._core.next_deadline_ns()

    def close(self) -> None:
        """Begin shutdown and drain: queued events run, the rest fail, then the cleanup runs.

        Called from inside one of the queue's events, it only begins the shutdown; the loop
        that is running the event drains the queue.
        """
        self.begin_shutdown("DeterministicEventQueue.close")
        if not self._driving:
            self.run_until_idle()
