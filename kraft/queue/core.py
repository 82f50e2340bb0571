"""The event queue's state machine: what runs next, with no thread, no lock and no clock.

Theory of operation (Kafka's ``KafkaEventQueue.EventHandler``):

* The *run list* holds appended and prepended events in the order they will run: ``append``
  adds at the tail (FIFO), ``prepend`` at the head (LIFO).
* The *deadline map* holds, keyed by a unique monotonic nanosecond, every event that has a
  time: deferred events (the time is when to run them) and appended events with a deadline
  (the time is when to give up on them; they are in the run list too). Two events never share
  a key: a taken key is bumped by 1 ns, as Kafka does.
* The *tag map* finds the deferred event scheduled under a tag, to replace or cancel it.

One step of the loop (:meth:`EventQueueCore.next_step`) takes, in this order:

1. the earliest deadline entry if it is due: a deferred event runs; an appended event fails
   with :class:`EventTimeoutError` without running;
2. else, if interrupted or shutting down, that entry, failed with
   :class:`EventQueueInterruptedError` or :class:`RejectedExecutionError`;
3. else the head of the run list (failed with :class:`EventQueueInterruptedError` instead of
   running if interrupted; plain events still run while shutting down);
4. else, once shutting down or interrupted with nothing left, :data:`EXIT`; otherwise
   :class:`Wait` until the earliest deadline (or a new event).

The driver runs the chosen step outside its lock (:func:`run_step`), then calls
:meth:`EventQueueCore.step_done`: ``size`` counts the running event until then, as Kafka's
does. The core is not thread-safe; its drivers hold a lock around every call.
"""

from __future__ import annotations

import heapq
import logging
from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum
from typing import Final

from kraft.queue.errors import (
    EventQueueInterruptedError,
    EventTimeoutError,
    NoDeadlineError,
    RejectedExecutionError,
)
from kraft.queue.event import DeadlineFunction, Event

__all__ = [
    "EXIT",
    "EventQueueCore",
    "Insertion",
    "RunStep",
    "Step",
    "Wait",
    "deliver_exception",
    "run_step",
]

logger = logging.getLogger(__name__)

_SHUTTING_DOWN = "The event queue is shutting down"
_INTERRUPTED = "The event handler thread is interrupted"


class Insertion(Enum):
    """How an event enters the queue (Kafka's ``EventInsertionType``)."""

    PREPEND = "prepend"
    APPEND = "append"
    DEFERRED = "deferred"


class _EventContext:
    """An event plus its place in the queue (Kafka's ``EventContext``)."""

    __slots__ = ("deadline_ns", "event", "insertion", "tag")

    def __init__(self, event: Event, insertion: Insertion, tag: str | None) -> None:
        self.event = event
        self.insertion = insertion
        self.tag = tag
        # The key under which this context sits in the deadline map, None when it is not there.
        self.deadline_ns: int | None = None


@dataclass(frozen=True, slots=True)
class RunStep:
    """Run ``event``, or, when ``error`` is set, deliver ``error`` to it instead."""

    event: Event
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do until ``until_ns`` (``None``: until an event arrives or a state change)."""

    until_ns: int | None


class _Exit(Enum):
    """The queue is finished: run the cleanup event and stop."""

    EXIT = "exit"


#: The step that ends the loop.
EXIT: Final = _Exit.EXIT

Step = RunStep | Wait | _Exit


class EventQueueCore:
    """The queue's state and its transitions; see the module docstring."""

    def __init__(self) -> None:
        # Insertion-ordered set of contexts; O(1) removal when a deadline fires first.
        self._run_list: OrderedDict[_EventContext, None] = OrderedDict()
        # Kafka's TreeMap as a dict plus a heap of keys. A heap key whose dict entry is gone
        # is stale and skipped; the heap is rebuilt when stale keys dominate it.
        self._deadlines: dict[int, _EventContext] = {}
        self._deadline_heap: list[int] = []
        self._tags: dict[str, _EventContext] = {}
        self._size = 0
        self.shutting_down = False
        self.interrupted = False
        self.exited = False

    # -- callers' side ---------------------------------------------------------------------

    def enqueue(
        self,
        insertion: Insertion,
        tag: str | None,
        deadline_fn: DeadlineFunction | None,
        event: Event,
    ) -> BaseException | None:
        """Add ``event``; return the error to deliver to it on the caller's thread, if any.

        If ``deadline_fn`` raises, the exception propagates and the queue is unchanged.
        """
        # Kafka checks shutdown first: after an interrupt, close() turns InterruptedException
        # into RejectedExecutionException for later offers.
        if self.shutting_down:
            return RejectedExecutionError(_SHUTTING_DOWN)
        if self.interrupted:
            return EventQueueInterruptedError(_INTERRUPTED)
        replaced = self._tags.get(tag) if tag is not None else None
        previous_ns = replaced.deadline_ns if replaced is not None else None
        # Computed before anything changes, so a raising deadline function leaves no trace
        # (Kafka would already have dropped the replaced event and left the tag pointing at
        # an event that is nowhere).
        deadline_ns = deadline_fn(previous_ns) if deadline_fn is not None else None
        if replaced is not None:
            # Kafka: the replaced event is dropped silently, never run and never failed.
            self._remove(replaced)
            self._size -= 1
        if insertion is Insertion.DEFERRED and deadline_ns is None:
            # Kafka drops the replaced event in this case too, but (unlike Kafka) the tag is
            # not left naming the rejected event, so size() cannot go wrong later.
            return NoDeadlineError("You must specify a deadline for deferred events.")
        context = _EventContext(event, insertion, tag)
        if insertion is Insertion.APPEND:
            self._run_list[context] = None
        elif insertion is Insertion.PREPEND:
            self._run_list[context] = None
            self._run_list.move_to_end(context, last=False)
        if deadline_ns is not None:
            while deadline_ns in self._deadlines:
                deadline_ns += 1  # Kafka: "If the time in nanoseconds is already taken..."
            self._deadlines[deadline_ns] = context
            heapq.heappush(self._deadline_heap, deadline_ns)
            context.deadline_ns = deadline_ns
        if tag is not None:
            self._tags[tag] = context
        self._size += 1
        return None

    def cancel_deferred(self, tag: str) -> None:
        """Drop the event scheduled under ``tag`` without completing it; no-op if none."""
        context = self._tags.get(tag)
        if context is not None:
            self._remove(context)
            self._size -= 1

    def begin_shutdown(self) -> bool:
        """Start shutting down; return False if the queue already was."""
        if self.shutting_down:
            return False
        self.shutting_down = True
        return True

    def interrupt(self) -> None:
        """Mark the queue interrupted: the running event finishes, everything else fails."""
        self.interrupted = True

    def size(self) -> int:
        """Queued, deferred and running events."""
        return self._size

    def next_deadline_ns(self) -> int | None:
        """The earliest time in the deadline map, or None when it is empty."""
        return self._first_deadline()

    # -- the loop's side -------------------------------------------------------------------

    def next_step(self, now_ns: int) -> Step:
        """Choose and remove what the loop does next at ``now_ns``."""
        if self.exited:
            return EXIT
        until_ns = self._first_deadline()
        if until_ns is not None:
            step = self._deadline_step(self._deadlines[until_ns], due=until_ns <= now_ns)
            if step is not None:
                return step
        if self._run_list:
            context = next(iter(self._run_list))
            self._remove(context)
            if self.interrupted:
                return RunStep(context.event, EventQueueInterruptedError(_INTERRUPTED))
            return RunStep(context.event, None)
        if until_ns is None and (self.shutting_down or self.interrupted):
            self.exited = True
            return EXIT
        return Wait(until_ns)

    def _deadline_step(self, context: _EventContext, *, due: bool) -> RunStep | None:
        """What becomes of the event with the earliest deadline, if it is settled now."""
        if due:
            self._remove(context)
            if context.insertion is Insertion.DEFERRED:
                # A due deferred event runs even while shutting down or interrupted:
                # Kafka checks "due" before anything else.
                return RunStep(context.event, None)
            # A deadline is a start-by time: the event never runs.
            return RunStep(context.event, EventTimeoutError())
        if self.interrupted:
            self._remove(context)
            return RunStep(context.event, EventQueueInterruptedError(_INTERRUPTED))
        if self.shutting_down:
            self._remove(context)
            return RunStep(context.event, RejectedExecutionError(_SHUTTING_DOWN))
        return None

    def step_done(self) -> None:
        """The event of the last :class:`RunStep` has finished: stop counting it."""
        self._size -= 1

    # -- internals -------------------------------------------------------------------------

    def _first_deadline(self) -> int | None:
        heap = self._deadline_heap
        while heap and heap[0] not in self._deadlines:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _remove(self, context: _EventContext) -> None:
        self._run_list.pop(context, None)
        if context.deadline_ns is not None:
            del self._deadlines[context.deadline_ns]
            context.deadline_ns = None
            if len(self._deadline_heap) > 64 + 2 * len(self._deadlines):
                # Rescheduling a tag over and over leaves stale keys behind; bound them.
                self._deadline_heap = list(self._deadlines)
                heapq.heapify(self._deadline_heap)
        if context.tag is not None:
            if self._tags.get(context.tag) is context:
                del self._tags[context.tag]
            context.tag = None


def run_step(step: RunStep) -> None:
    """Run the event of ``step`` or deliver its error; never raise an ``Exception``.

    Kafka: an exception from ``run`` goes to ``handle_exception``; an exception from
    ``handle_exception`` is logged and the queue goes on.
    """
    error = step.error
    if error is None:
        try:
            step.event.run()
            return
        except Exception as exc:
            logger.debug(
                "Got exception while running %r. Invoking handle_exception.",
                step.event,
                exc_info=True,
            )
            error = exc
    deliver_exception(step.event, error)


def deliver_exception(event: Event, error: BaseException) -> None:
    """Call ``event.handle_exception(error)``, logging what it raises."""
    try:
        event.handle_exception(error)
    except Exception:
        logger.exception("Unexpected exception in handle_exception of %r", event)
