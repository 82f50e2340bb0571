"""``RaftClientDriver``: the thread that polls a Raft client (Kafka's ``KafkaRaftClientDriver``).

Theory of operation
    The sans-IO client does nothing until ``poll()`` is called, and ``poll()`` waits on its
    message queue at most until the client's next deadline. The driver is the one thread that
    calls it, ``kraft-<id>-io``, in a loop, for as long as the client runs: until a graceful
    shutdown it asked for completes (or times out), or a poll fails.

    A poll that raises is a fatal fault, as in Kafka: the exception is logged with its trace,
    kept as :attr:`RaftClientDriver.failure`, and handed to the fatal-fault handler (the node
    uses it to stop); the loop ends. Nothing is swallowed and nothing hangs: whoever waits on
    the driver (``join``, ``shutdown``) returns. One exception: a quorum-state write that
    failed for lack of descriptors or memory (EMFILE, ENFILE, ENOMEM) left the state as it
    was (the transition did not happen), so the driver polls again after a pause that doubles
    from 100 ms to 2 s while the failures go on (kraft/raft/resources.py).

    Shutdown follows Kafka's order: :meth:`initiate_shutdown` asks the client for a graceful
    shutdown (a leader resigns and tells the voters with EndQuorumEpoch) and the loop goes on
    polling until it completes; :meth:`shutdown` then joins the thread and, in every case,
    closes the client (flushes the log).

    After each poll the driver calls ``after_poll`` (the node uses it to follow the voter set)
    and reports the fraction of the iteration spent waiting on the queue
    (Kafka's ``poll-idle-ratio-avg``) to a metrics sink that wants it.

    The core is called on this thread only (its futures and state have no locks): other
    threads hand it work with :meth:`RaftClientDriver.call_soon`, which queues a function and
    wakes the queue; the driver runs the queued functions, in order, before its next poll. A
    function that raises is logged (at most once a minute) and the driver goes on: a caller's
    mistake is not a fault of the quorum. Functions still queued when the driver stops never
    run; their owner settles what they were for (``RaftNode`` fails its futures at close).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from kraft.common.ratelimit import LogLimiter
from kraft.errors import IllegalStateError, QuorumStateError
from kraft.raft.client import KafkaRaftClient
from kraft.raft.resources import ResourceFailures

__all__ = ["DEFAULT_SHUTDOWN_TIMEOUT_MS", "PollIdleRecorder", "RaftClientDriver"]

logger = logging.getLogger(__name__)

#: How long a graceful shutdown may take (Kafka's driver uses 5 s).
DEFAULT_SHUTDOWN_TIMEOUT_MS = 5000
#: The pause before polling again after a quorum-state write failed for lack of a resource,
#: doubled at each failure in a row up to the maximum.
_MIN_RETRY_PAUSE_S = 0.1
_MAX_RETRY_PAUSE_S = 2.0
#: At most one log line per interval for functions given to ``call_soon`` that raise.
_CALL_FAILURE_LOG_INTERVAL_MS = 60_000


class PollIdleRecorder(Protocol):
    """Takes the poll idle ratio after every poll (``RaftMetrics`` is one)."""

    def record_poll_idle_ratio(
        self, ratio: float, now_ms: int, *, duration_ms: float | None = None
    ) -> None: ...


class _IdleCounter(Protocol):
    idle_ns: int


class RaftClientDriver:
    """Polls ``client`` on its own thread until it shuts down or fails."""

    def __init__(
        self,
        client: KafkaRaftClient[Any],
        *,
        fatal_fault_handler: Callable[[BaseException], None] | None = None,
        poll_idle: PollIdleRecorder | None = None,
        shutdown_timeout_ms: int = DEFAULT_SHUTDOWN_TIMEOUT_MS,
        thread_name: str | None = None,
        after_poll: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self._after_poll = after_poll
        self._fatal_fault_handler = fatal_fault_handler
        self._poll_idle = poll_idle
        self._shutdown_timeout_ms = shutdown_timeout_ms
        local = "observer" if client.local_id is None else client.local_id
        name = thread_name or f"kraft-{local}-io"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._shutdown_future: Future[None] | None = None
        self._closed = False
        self._lock = threading.Lock()
        #: The exception a poll raised (the driver stopped on it), or ``None``.
        self.failure: BaseException | None = None
        self._resource_failures = ResourceFailures()
        self._retry_pause_s = _MIN_RETRY_PAUSE_S
        #: Functions from other threads, run before the next poll (see :meth:`call_soon`).
        self._calls: deque[Callable[[], None]] = deque()
        #: Whether ``call_soon`` still takes functions: until the polling loop has ended.
        self._accepting = True
        self._call_failure_log = LogLimiter(_CALL_FAILURE_LOG_INTERVAL_MS)
        self._suppressed_call_failures = 0

    @property
    def thread_name(self) -> str:
        return self._thread.name

    def start(self) -> None:
        """Start polling. The client must be initialized."""
        if not self.client.is_initialized:
            raise IllegalStateError("initialize the client before starting its driver")
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` on the driver thread before its next poll (from any thread; in order).

        Raises :class:`~kraft.errors.IllegalStateError` once the driver has stopped polling.
        """
        with self._lock:
            if not self._accepting:
                raise IllegalStateError(f"{self._thread.name} has stopped polling")
            self._calls.append(fn)
        self.client.queue.wakeup()  # ends the poll's wait: the call runs now, not at a timeout

    def _run_calls(self) -> None:
        calls = self._calls
        while calls:
            fn = calls.popleft()
            try:
                fn()
            except Exception as exc:
                if self._call_failure_log.allow(self.client.clock.now_ms()):
                    logger.error(
                        "%s: a function given to call_soon raised (%d more not logged): %r",
                        self._thread.name,
                        self._suppressed_call_failures,
                        exc,
                        exc_info=exc,
                    )
                    self._suppressed_call_failures = 0
                else:
                    self._suppressed_call_failures += 1

    def _run(self) -> None:
        client = self.client
        recorder = self._poll_idle
        queue: _IdleCounter | None = None
        if recorder is not None and hasattr(client.queue, "idle_ns"):
            queue = client.queue  # type: ignore[assignment]
        logger.info("%s: polling the Raft client", self._thread.name)
        try:
            if queue is None or recorder is None:
                while not client.is_shutdown:
                    self._poll_once()
            else:
                clock = time.monotonic_ns
                while not client.is_shutdown:
                    started = clock()
                    idle_before = queue.idle_ns
                    self._poll_once()
                    elapsed = clock() - started
                    if elapsed > 0:
                        idle = queue.idle_ns - idle_before
                        recorder.record_poll_idle_ratio(
                            min(1.0, idle / elapsed),
                            client.clock.now_ms(),
                            duration_ms=elapsed / 1e6,
                        )
        except BaseException as exc:
            self.failure = exc
            logger.critical(
                "%s: fatal fault, the Raft client stopped: %r", self._thread.name, exc, exc_info=exc
            )
            handler = self._fatal_fault_handler
            if handler is not None:
                try:
                    handler(exc)
                except Exception:
                    logger.exception("the fatal-fault handler failed")
            return
        finally:
            with self._lock:
                self._accepting = False
                self._calls.clear()
        logger.info("%s: the Raft client has shut down", self._thread.name)

    def _poll_once(self) -> None:
        self._run_calls()
        try:
            self.client.poll()
        except QuorumStateError as exc:
            if not self._resource_failures.absorb(
                exc, "a quorum-state write", self.client.clock.now_ms()
            ):
                raise
            time.sleep(self._retry_pause_s)
            self._retry_pause_s = min(self._retry_pause_s * 2, _MAX_RETRY_PAUSE_S)
            return
        self._retry_pause_s = _MIN_RETRY_PAUSE_S
        if self._after_poll is not None:
            self._after_poll()

    def initiate_shutdown(self) -> Future[None]:
        """Ask the client for a graceful shutdown (idempotent); the driver keeps polling until
        it completes. The future fails with ``TimeoutError`` if it does not in time."""
        with self._lock:
            if self._shutdown_future is None:
                if self.failure is not None or not self._thread.is_alive():
                    future: Future[None] = Future()
                    future.set_result(None)
                    self._shutdown_future = future
                else:
                    self._shutdown_future = self.client.shutdown(self._shutdown_timeout_ms)
            return self._shutdown_future

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Shut down gracefully, join the thread, then close the client (Kafka's order)."""
        if self._thread.is_alive():
            self.initiate_shutdown()
            wait = (self._shutdown_timeout_ms / 1000 + 5) if timeout_s is None else timeout_s
            self._thread.join(wait)
            if self._thread.is_alive():
                logger.error(
                    "%s did not stop within %.1f s; the client is left open",
                    self._thread.name,
                    wait,
                )
                return
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self.client.close()
        except Exception:
            logger.exception("closing the Raft client failed")
