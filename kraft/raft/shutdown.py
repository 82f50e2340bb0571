"""``GracefulShutdown``: a shutdown in progress, and when it may complete (Kafka's class).

``KafkaRaftClient.shutdown(timeout_ms)`` starts one; each poll then asks
:meth:`GracefulShutdown.maybe_complete` whether it is over: it completes once the replica
no longer holds up the quorum (an observer, the only voter, or a replica that knows another
leader), and fails with ``TimeoutError`` at its deadline otherwise. Until then a leader
resigns and the replica's states keep going, each towards that end.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future

__all__ = ["GracefulShutdown"]

logger = logging.getLogger(__name__)


class GracefulShutdown:
    """A graceful shutdown due by ``deadline_ms``; ``future`` completes when it is over."""

    __slots__ = ("deadline_ms", "future", "listeners_told")

    def __init__(self, deadline_ms: int) -> None:
        self.deadline_ms = deadline_ms
        self.future: Future[None] = Future()
        #: Whether the listeners heard ``begin_shutdown`` (once, on the first poll).
        self.listeners_told = False

    @property
    def is_finished(self) -> bool:
        return self.future.done()

    def remaining_ms(self, now_ms: int) -> int:
        return max(0, self.deadline_ms - now_ms)

    def maybe_complete(self, now_ms: int, may_complete: bool) -> bool:
        """Whether the shutdown is over: it was, it timed out now, or it completes now
        because the replica ``may_complete`` (it holds up no quorum any more)."""
        future = self.future
        if future.done():
            return True
        if now_ms >= self.deadline_ms:
            logger.warning("graceful shutdown timed out")
            future.set_exception(TimeoutError("graceful shutdown timed out"))
            return True
        if may_complete:
            logger.info("graceful shutdown completed")
            future.set_result(None)
            return True
        return False
