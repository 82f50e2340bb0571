"""``BlockingMessageQueue``: the runtime's thread-safe ``RaftMessageQueue``.

The transport thread adds inbound requests and responses; the driver thread polls them, waiting
at most until the client's next deadline. ``wakeup()`` (from a caller appending records, or
from ``close``) ends a wait early without a message, as Kafka's ``BlockingMessageQueue`` does.
The queue also counts how long ``poll`` sat waiting, so the driver can report the poll idle
ratio.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from kraft.raft.channel import InboundMessage

__all__ = ["BlockingMessageQueue"]


class BlockingMessageQueue:
    """An unbounded FIFO of inbound messages with a blocking ``poll`` and ``wakeup``."""

    __slots__ = ("_cond", "_messages", "_woken", "idle_ns")

    def __init__(self) -> None:
        self._messages: deque[InboundMessage] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._woken = False
        #: Nanoseconds ``poll`` has spent waiting, in total (read by the driver).
        self.idle_ns = 0

    def add(self, message: InboundMessage) -> None:
        with self._cond:
            self._messages.append(message)
            self._cond.notify()

    def poll(self, timeout_ms: int) -> InboundMessage | None:
        """The next message; if none, wait up to ``timeout_ms`` for one or for ``wakeup``."""
        messages = self._messages
        if messages:  # the common case under load: no lock wait, no clock read
            try:
                return messages.popleft()
            except IndexError:
                pass
        with self._cond:
            if not messages and not self._woken and timeout_ms > 0:
                started = time.monotonic_ns()
                self._cond.wait(timeout_ms / 1000)
                self.idle_ns += time.monotonic_ns() - started
            self._woken = False
            return messages.popleft() if messages else None

    def is_empty(self) -> bool:
        return not self._messages

    def wakeup(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify()

    def __len__(self) -> int:
        return len(self._messages)
