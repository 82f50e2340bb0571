"""What the Raft core needs from the outside world, as protocols.

The core never reads a clock, opens a socket or waits on a thread: a
:class:`~kraft.common.clock.Clock`, a :class:`NetworkChannel` and a :class:`RaftMessageQueue`
are handed to it. The runtime implements them with the system clock, a trio TCP transport and
a thread-safe queue; the simulator and the tests with virtual time and in-memory queues
(:class:`DequeMessageQueue`).
"""

from __future__ import annotations

from collections import deque
from typing import Protocol, runtime_checkable

from kraft.protocol.envelope import (
    InboundRequest,
    InboundResponse,
    OutboundRequest,
    OutboundResponse,
)

__all__ = [
    "NO_METRICS",
    "DequeMessageQueue",
    "InboundMessage",
    "MetricsRecorder",
    "NetworkChannel",
    "RaftMessageQueue",
]

InboundMessage = InboundRequest | InboundResponse


@runtime_checkable
class NetworkChannel(Protocol):
    """Sends the core's requests and responses; inbound traffic arrives via the queue.

    ``send`` never blocks and never raises for a peer that is down: a request that gets no
    answer simply times out in the core's request manager.
    """

    def new_correlation_id(self) -> int:
        """A correlation id not in use by any request this channel has outstanding."""

    def send(self, request: OutboundRequest) -> None:
        """Send a request; its response (or none) arrives later as an ``InboundResponse``."""

    def respond(self, response: OutboundResponse) -> None:
        """Answer an ``InboundRequest`` received earlier."""


@runtime_checkable
class RaftMessageQueue(Protocol):
    """Inbound requests and responses, in arrival order."""

    def add(self, message: InboundMessage) -> None:
        """Queue a message (from any thread, in the runtime) and wake the poller."""

    def poll(self, timeout_ms: int) -> InboundMessage | None:
        """The next message, waiting at most ``timeout_ms`` for one (0: do not wait)."""

    def is_empty(self) -> bool:
        """Whether no message is waiting."""

    def wakeup(self) -> None:
        """End a ``poll`` that is waiting, so the client re-evaluates its state."""


class DequeMessageQueue:
    """A queue that never blocks: ``poll`` returns at once. For the simulator and tests."""

    __slots__ = ("_messages", "wakeups")

    def __init__(self) -> None:
        self._messages: deque[InboundMessage] = deque()
        #: How often ``wakeup`` was called (a test can check that appends wake the client).
        self.wakeups = 0

    def add(self, message: InboundMessage) -> None:
        self._messages.append(message)

    def poll(self, timeout_ms: int) -> InboundMessage | None:
        return self._messages.popleft() if self._messages else None

    def is_empty(self) -> bool:
        return not self._messages

    def wakeup(self) -> None:
        self.wakeups += 1

    def __len__(self) -> int:
        return len(self._messages)


@runtime_checkable
class MetricsRecorder(Protocol):
    """Where the core reports what it measures (Kafka's ``KafkaRaftMetrics`` updates).

    The gauges (state, epoch, leader, high watermark, ...) are read from the client when they
    are wanted; only the events below are pushed, on the thread that calls ``poll``. Times are
    the core's clock (``now_ms`` monotonic, latencies in milliseconds).
    """

    def record_append_records(self, count: int, now_ms: int) -> None:
        """The leader appended ``count`` records (data and control) to its log."""

    def record_fetch_records(self, count: int, now_ms: int) -> None:
        """This follower appended ``count`` fetched records to its log."""

    def record_commit_latency(self, latency_ms: float, now_ms: int) -> None:
        """A batch this leader appended committed ``latency_ms`` after it was appended."""

    def record_election_latency(self, latency_ms: float, now_ms: int) -> None:
        """An election this replica took part in ended (it leads, or follows a leader)
        ``latency_ms`` after it started (the replica left Follower/Unattached to elect)."""

    def record_corruption_found(self, now_ms: int) -> None:
        """A read found corrupt bytes in this replica's log or snapshots, which were set
        aside (docs/protocol.md §1.14)."""

    def record_repair_completed(self, now_ms: int) -> None:
        """The log, under repair, fetched as far as it held before setting data aside."""


class _NoMetrics:
    """The recorder that records nothing (the default)."""

    __slots__ = ()

    def record_append_records(self, count: int, now_ms: int) -> None:
        pass

    def record_fetch_records(self, count: int, now_ms: int) -> None:
        pass

    def record_commit_latency(self, latency_ms: float, now_ms: int) -> None:
        pass

    def record_election_latency(self, latency_ms: float, now_ms: int) -> None:
        pass

    def record_corruption_found(self, now_ms: int) -> None:
        pass

    def record_repair_completed(self, now_ms: int) -> None:
        pass


#: A :class:`MetricsRecorder` that records nothing.
NO_METRICS: MetricsRecorder = _NoMetrics()
