"""What the threaded and the deterministic queue share: the public API over one core.

Every call takes the lock, changes the :class:`~kraft.queue.core.EventQueueCore`, and
notifies the condition so that a waiting loop thread looks again. Errors for an event refused
at the door are delivered after the lock is released, on the caller's thread, as Kafka does.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

from kraft.common.clock import Clock
from kraft.queue.core import EventQueueCore, Insertion, deliver_exception
from kraft.queue.event import DeadlineFunction, Event

__all__ = ["EventQueueBase"]

logger = logging.getLogger(__name__)


class EventQueueBase(ABC):
    """The :class:`~kraft.queue.EventQueue` API over an :class:`EventQueueCore`.

    Subclasses decide who runs the loop: a thread of its own, or the caller.
    """

    def __init__(self, clock: Clock, cleanup_event: Event | None) -> None:
        self._clock = clock
        self._cleanup_event = cleanup_event
        self._core = EventQueueCore()
        # One lock guards the core; the loop waits on the condition for work or a deadline.
        self._cond = threading.Condition(threading.Lock())

    @property
    def clock(self) -> Clock:
        """The clock that deadlines are measured against."""
        return self._clock

    def prepend(self, event: Event) -> None:
        """Put ``event`` at the head of the queue: it runs next (last prepended runs first)."""
        self._enqueue(Insertion.PREPEND, None, None, event)

    def append(self, event: Event) -> None:
        """Put ``event`` at the tail of the queue: appends run in the order they were made."""
        self._enqueue(Insertion.APPEND, None, None, event)

    def append_with_deadline(self, deadline_ns: int, event: Event) -> None:
        """Append ``event``; if it has not *started* by ``deadline_ns`` (monotonic ns on the
        queue's clock) it never runs and gets :class:`~kraft.queue.EventTimeoutError`.

        Shutting down or interrupting the queue fails a waiting event with a deadline at once.
        """
        self._enqueue(Insertion.APPEND, None, lambda _previous: deadline_ns, event)

    def schedule_deferred(
        self, tag: str | None, deadline_fn: DeadlineFunction, event: Event
    ) -> None:
        """Run ``event`` once the clock reaches ``deadline_fn(previous_deadline_ns)``.

        ``previous_deadline_ns`` is the deadline of the event already scheduled under ``tag``,
        which this one replaces (dropped: neither run nor failed), or ``None``. A due
        deferred event runs before events appended after it fell due. If ``deadline_fn``
        returns ``None`` the event gets :class:`~kraft.queue.NoDeadlineError` (and the event it
        would have replaced is dropped, as in Kafka). If it raises, the exception propagates
        and the queue is unchanged. It runs under the queue's lock and must not call the queue.
        """
        self._enqueue(Insertion.DEFERRED, tag, deadline_fn, event)

    def cancel_deferred(self, tag: str) -> None:
        """Drop the deferred event scheduled under ``tag``, if any, without completing it."""
        with self._cond:
            self._core.cancel_deferred(tag)
            self._cond.notify()

    def begin_shutdown(self, source: str = "unknown") -> None:
        """Stop accepting events and start shutting down; idempotent, does not wait.

        Later offers get :class:`~kraft.queue.RejectedExecutionError` on the caller's thread.
        Deferred events and events with a deadline that are not yet due get it too, on the
        queue's thread; events already queued still run; then the cleanup event runs.
        """
        with self._cond:
            started = self._core.begin_shutdown()
            self._cond.notify()
        if started:
            logger.info("%s: shutting down event queue.", source)
        else:
            logger.debug("%s: event queue is already shutting down.", source)

    def interrupt(self) -> None:
        """Interrupt the queue, as interrupting the thread of Kafka's queue does.

        Python threads cannot be interrupted, so the running event (if any) finishes; every
        event queued or deferred is then failed with
        :class:`~kraft.queue.EventQueueInterruptedError` without running, and the cleanup event
        runs. Later offers get that error on the caller's thread until the queue is closed,
        then :class:`~kraft.queue.RejectedExecutionError`. Safe to call from an event.
        """
        with self._cond:
            self._core.interrupt()
            self._cond.notify()
        logger.warning("Event queue interrupted. Shutting down event queue")

    def size(self) -> int:
        """Return the number of queued, deferred and running events."""
        with self._cond:
            return self._core.size()

    def is_empty(self) -> bool:
        """Return True when no event is queued, deferred or running."""
        return self.size() == 0

    def wakeup(self) -> None:
        """Make a waiting loop re-read its clock, e.g. after a
        :class:`~kraft.common.clock.ManualClock` moved."""
        with self._cond:
            self._cond.notify()

    @abstractmethod
    def close(self) -> None:
        """Shut down, wait until every event is done and the cleanup has run."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _enqueue(
        self,
        insertion: Insertion,
        tag: str | None,
        deadline_fn: DeadlineFunction | None,
        event: Event,
    ) -> None:
        with self._cond:
            error = self._core.enqueue(insertion, tag, deadline_fn, event)
            if error is None:
                self._cond.notify()
        if error is not None:
            deliver_exception(event, error)

    def _run_cleanup(self) -> None:
        if self._cleanup_event is None:
            return
        try:
            self._cleanup_event.run()
        except Exception:
            # Kafka: the cleanup event's failure is logged, never delivered.
            logger.warning("cleanup event threw exception", exc_info=True)
