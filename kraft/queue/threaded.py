"""Kafka's ``KafkaEventQueue``: the queue core driven by a thread of its own."""

from __future__ import annotations

import logging
import threading

from kraft.common.clock import Clock
from kraft.queue.base import EventQueueBase
from kraft.queue.core import EXIT, Wait, run_step
from kraft.queue.event import Event

__all__ = ["EVENT_HANDLER_THREAD_SUFFIX", "KafkaEventQueue"]

logger = logging.getLogger(__name__)

#: The loop thread is named ``thread_name_prefix + EVENT_HANDLER_THREAD_SUFFIX``, as in Kafka.
EVENT_HANDLER_THREAD_SUFFIX = "event-handler"


class KafkaEventQueue(EventQueueBase):
    """An event queue that runs its events one at a time on its own thread.

    The thread starts in the constructor and ends after :meth:`close` (or
    :meth:`begin_shutdown`, or :meth:`interrupt`) once the queue has drained and
    ``cleanup_event`` has run. The thread is a daemon (unlike Kafka's), so a queue that is
    never closed does not keep the interpreter alive.
    """

    def __init__(
        self,
        clock: Clock,
        thread_name_prefix: str,
        cleanup_event: Event | None = None,
    ) -> None:
        super().__init__(clock, cleanup_event)
        self._thread = threading.Thread(
            target=self._thread_main,
            name=thread_name_prefix + EVENT_HANDLER_THREAD_SUFFIX,
            daemon=True,
        )
        self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        """The thread that runs the events."""
        return self._thread

    def close(self) -> None:
        """Begin shutdown and wait for the thread: queued events, then the cleanup, then exit.

        Called from one of the queue's own events it cannot wait for itself (Kafka would
        deadlock); it only begins the shutdown.
        """
        self.begin_shutdown("KafkaEventQueue.close")
        if threading.current_thread() is self._thread:
            return
        self._thread.join()
        logger.info("closed event queue.")

    def _thread_main(self) -> None:
        try:
            self._handle_events()
        except BaseException:
            # run_step never raises an Exception; this is a clock failure or a BaseException
            # (SystemExit) out of an event. Refuse further offers rather than lose them.
            logger.warning("event handler thread exiting with exception", exc_info=True)
            with self._cond:
                self._core.begin_shutdown()
        self._run_cleanup()

    def _handle_events(self) -> None:
        ran = False
        while True:
            with self._cond:
                if ran:
                    # Decrement size and choose the next step atomically, as Kafka does.
                    self._core.step_done()
                    ran = False
                now_ns = self._clock.now_ns()
                step = self._core.next_step(now_ns)
                if step is EXIT:
                    return
                if isinstance(step, Wait):
                    timeout_s: float | None = None
                    if step.until_ns is not None:
                        timeout_s = min((step.until_ns - now_ns) / 1e9, threading.TIMEOUT_MAX)
                    self._cond.wait(timeout_s)
                    continue
            run_step(step)
            ran = True
