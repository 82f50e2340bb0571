"""What goes into an event queue: :class:`Event`, deadline functions, the :class:`EventQueue`
protocol (Kafka's ``EventQueue`` interface).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Protocol

__all__ = [
    "DeadlineFunction",
    "Event",
    "EventQueue",
    "earliest_deadline",
    "latest_deadline",
]

#: Computes a deferred event's deadline (monotonic ns) from the deadline of the event it
#: replaces (same tag), or ``None`` when it replaces nothing. Kafka's
#: ``Function<OptionalLong, OptionalLong>``. It runs under the queue's lock: it must be quick
#: and must not call the queue.
DeadlineFunction = Callable[[int | None], int | None]


class Event(ABC):
    """A unit of work for an event queue (Kafka's ``EventQueue.Event``).

    The queue calls exactly one of :meth:`run` and :meth:`handle_exception`, at most once,
    except when ``run`` raises: then ``handle_exception`` gets what it raised. An event that a
    later ``schedule_deferred`` with the same tag replaces, or that ``cancel_deferred``
    cancels, gets neither call.
    """

    @abstractmethod
    def run(self) -> None:
        """Do the work, on the queue's thread."""

    def handle_exception(self, exc: BaseException) -> None:  # noqa: B027 (a no-op by default)
        """Handle a failure: what :meth:`run` raised, or why the queue did not run the event.

        The queue's reasons are :class:`~kraft.queue.EventTimeoutError` (not started by its
        deadline), :class:`~kraft.queue.RejectedExecutionError` (the queue is shutting down),
        :class:`~kraft.queue.EventQueueInterruptedError` (the queue was interrupted) and
        :class:`~kraft.queue.NoDeadlineError` (a deferred event without a deadline). Rejections
        at the door are delivered on the caller's thread, the rest on the queue's thread. An
        exception raised here is logged and the queue goes on. The default does nothing, as
        in Kafka.
        """


def earliest_deadline(deadline_ns: int) -> DeadlineFunction:
    """Keep whichever is earlier: the replaced event's deadline or ``deadline_ns``.

    Kafka's ``EarliestDeadlineFunction``: rescheduling a tag never postpones it.
    """

    def compute(previous_ns: int | None) -> int:
        return deadline_ns if previous_ns is None else min(previous_ns, deadline_ns)

    return compute


def latest_deadline(deadline_ns: int) -> DeadlineFunction:
    """Keep whichever is later: the replaced event's deadline or ``deadline_ns``.

    Kafka's ``LatestDeadlineFunction``: rescheduling a tag never brings it forward.
    """

    def compute(previous_ns: int | None) -> int:
        return deadline_ns if previous_ns is None else max(previous_ns, deadline_ns)

    return compute


class EventQueue(Protocol):
    """A queue of events run one at a time, in order, on one thread (Kafka's ``EventQueue``).

    Implemented by :class:`~kraft.queue.KafkaEventQueue` (its own thread) and
    :class:`~kraft.queue.DeterministicEventQueue` (run by the caller).
    """

    def prepend(self, event: Event) -> None:
        """Put ``event`` at the head of the queue: it runs next (last prepended runs first)."""

    def append(self, event: Event) -> None:
        """Put ``event`` at the tail of the queue: appends run in the order they were made."""

    def append_with_deadline(self, deadline_ns: int, event: Event) -> None:
        """Append ``event``; if it has not started by ``deadline_ns`` it fails with a timeout."""

    def schedule_deferred(
        self, tag: str | None, deadline_fn: DeadlineFunction, event: Event
    ) -> None:
        """Run ``event`` once the clock reaches ``deadline_fn(previous deadline)``.

        An event already scheduled under the same non-``None`` ``tag`` is replaced: it is
        dropped without being run or failed, and its deadline is what ``deadline_fn`` gets.
        """

    def cancel_deferred(self, tag: str) -> None:
        """Drop the deferred event scheduled under ``tag``, if any, without completing it."""

    def begin_shutdown(self, source: str = ...) -> None:
        """Stop accepting events; fail deferred ones; run what is queued, then the cleanup."""

    def size(self) -> int:
        """Return the number of queued, deferred and running events."""

    def is_empty(self) -> bool:
        """Return True when no event is queued, deferred or running."""

    def wakeup(self) -> None:
        """Make the queue re-read its clock (after a manual clock moved)."""

    def close(self) -> None:
        """Shut down and wait until every event is done and the cleanup has run."""
