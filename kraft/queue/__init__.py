"""``kraft.queue``: Kafka's ``KafkaEventQueue``, the single-threaded event queue that the
QuorumController runs on (docs/event-queue.md), with its logic apart from its thread.

* :class:`KafkaEventQueue` runs events on a thread of its own.
* :class:`DeterministicEventQueue` runs the same core when the caller says so, against the
  caller's clock: for the simulator and for tests.

See docs/event-queue.md.
"""

from __future__ import annotations

from kraft.queue.deterministic import DeterministicEventQueue
from kraft.queue.errors import (
    EventQueueInterruptedError,
    EventTimeoutError,
    NoDeadlineError,
    RejectedExecutionError,
)
from kraft.queue.event import (
    DeadlineFunction,
    Event,
    EventQueue,
    earliest_deadline,
    latest_deadline,
)
from kraft.queue.threaded import EVENT_HANDLER_THREAD_SUFFIX, KafkaEventQueue

__all__ = [
    "EVENT_HANDLER_THREAD_SUFFIX",
    "DeadlineFunction",
    "DeterministicEventQueue",
    "Event",
    "EventQueue",
    "EventQueueInterruptedError",
    "EventTimeoutError",
    "KafkaEventQueue",
    "NoDeadlineError",
    "RejectedExecutionError",
    "earliest_deadline",
    "latest_deadline",
]
