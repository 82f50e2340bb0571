"""The errors a :class:`~kraft.queue.EventQueue` delivers to ``Event.handle_exception``.

Kafka hands an event one of four exceptions when the queue, not the event, decides its fate.
kraft maps each onto its own class under :class:`~kraft.errors.KraftError`; where Python has a
built-in that names the same condition, the class derives from it too, so that
``except TimeoutError`` and ``except InterruptedError`` catch what a Python reader expects.
"""

from __future__ import annotations

from kraft.errors import KraftError

__all__ = [
    "EventQueueInterruptedError",
    "EventTimeoutError",
    "NoDeadlineError",
    "RejectedExecutionError",
]


class RejectedExecutionError(KraftError):
    """The queue is shutting down or closed and will not run the event.

    Kafka's ``RejectedExecutionException``. Delivered on the caller's thread to an event
    offered after ``begin_shutdown``, and on the queue's thread to deferred events and events
    with a deadline still waiting when the queue shuts down.
    """


class EventTimeoutError(KraftError, TimeoutError):
    """The event had not started by its deadline; it was dropped without running.

    Kafka's ``TimeoutException`` (error code REQUEST_TIMED_OUT). A deadline is a start-by
    time: an event that starts in time and runs past its deadline is not failed.
    """

    error_code = 7  # REQUEST_TIMED_OUT


class EventQueueInterruptedError(KraftError, InterruptedError):
    """The queue was interrupted (:meth:`~kraft.queue.KafkaEventQueue.interrupt`).

    Kafka delivers ``InterruptedException`` to every event still queued or deferred when its
    thread is interrupted, and to every event offered afterwards until the queue is closed.
    """


class NoDeadlineError(KraftError, RuntimeError):
    """``schedule_deferred`` was called with a deadline function that returned ``None``.

    Kafka: ``RuntimeException("You must specify a deadline for deferred events.")``, delivered
    to the event on the caller's thread.
    """
