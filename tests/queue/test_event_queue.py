"""KafkaEventQueue behaviour (docs/event-queue.md; Kafka's ``KafkaEventQueueTest``), each test
on both runners where it applies.

Every behavioural test takes the ``runner`` fixture: once with :class:`KafkaEventQueue` (its
own thread) and once with :class:`DeterministicEventQueue` (run by the test). Both read a
:class:`ManualClock`, so deadlines fire exactly when a test moves the clock.

Threaded tests never sleep to wait: they wait on futures and ``threading.Event``s, with
``HANG_GUARD_S`` only as a guard against hangs. To show that something did *not* happen, a
test drains the queue: it appends a marker and waits for it; the queue is FIFO and checks
deadlines before each event, so whatever was due before the marker has been handled.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import pytest

from kraft.errors import KraftError
from kraft.queue import (
    EVENT_HANDLER_THREAD_SUFFIX,
    DeterministicEventQueue,
    Event,
    EventQueue,
    EventQueueInterruptedError,
    EventTimeoutError,
    KafkaEventQueue,
    ManualClock,
    NoDeadlineError,
    RejectedExecutionError,
    SystemClock,
    earliest_deadline,
    latest_deadline,
)

HANG_GUARD_S = 10.0
MS = 1_000_000
SECOND = 1_000 * MS
HOUR = 3600 * SECOND
START_NS = 1_000 * SECOND  # not 0, so that "previous deadline" arithmetic is visible


class Probe(Event):
    """An event that records what the queue did with it, in a log shared by a test."""

    def __init__(
        self,
        name: str,
        log: list[str],
        action: Callable[[], Any] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.name = name
        self.log = log
        self.action = action
        self.on_error = on_error
        self.future: Future[Any] = Future()
        self.runs = 0
        self.started = threading.Event()
        self.errors: list[BaseException] = []
        self.run_thread: threading.Thread | None = None
        self.error_thread: threading.Thread | None = None

    def run(self) -> None:
        self.runs += 1
        self.started.set()
        self.run_thread = threading.current_thread()
        self.log.append(self.name)
        result = self.action() if self.action is not None else None
        self.future.set_result(result)

    def handle_exception(self, exc: BaseException) -> None:
        self.errors.append(exc)
        self.error_thread = threading.current_thread()
        self.log.append(f"{self.name}!{type(exc).__name__}")
        if not self.future.done():
            self.future.set_exception(exc)
        if self.on_error is not None:
            self.on_error(exc)

    @property
    def completed(self) -> bool:
        return self.runs > 0 or bool(self.errors)


class Runner:
    """One queue under test plus the few operations whose mechanics differ per runner."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.clock = ManualClock(START_NS)
        self.log: list[str] = []
        self.cleanup = Probe("cleanup", self.log)
        self.queue: KafkaEventQueue | DeterministicEventQueue
        if kind == "threaded":
            self.queue = KafkaEventQueue(self.clock, "test-queue-", self.cleanup)
        else:
            self.queue = DeterministicEventQueue(self.clock, self.cleanup)

    @property
    def threaded(self) -> bool:
        return self.kind == "threaded"

    def probe(self, name: str, action: Callable[[], Any] | None = None, **kw: Any) -> Probe:
        return Probe(name, self.log, action, **kw)

    def result(self, probe: Probe) -> Any:
        """The value of a probe that ran; fail if it has not run (deterministic: after the
        queue ran until idle)."""
        if not self.threaded:
            assert isinstance(self.queue, DeterministicEventQueue)
            self.queue.run_until_idle()
            assert probe.future.done(), f"{probe.name} did not complete"
        return probe.future.result(HANG_GUARD_S)

    def error(self, probe: Probe) -> BaseException:
        """The exception a probe was failed with; fail if it ran or did not complete."""
        if not self.threaded:
            assert isinstance(self.queue, DeterministicEventQueue)
            self.queue.run_until_idle()
            assert probe.future.done(), f"{probe.name} did not complete"
        exc = probe.future.exception(HANG_GUARD_S)
        assert exc is not None, f"{probe.name} ran instead of failing"
        assert probe.runs == 0
        return exc

    def drain(self) -> None:
        """Let the queue handle everything it can at the current time."""
        if self.threaded:
            marker = Probe("drain-marker", [])
            self.queue.append(marker)
            marker.future.result(HANG_GUARD_S)
        else:
            assert isinstance(self.queue, DeterministicEventQueue)
            self.queue.run_until_idle()

    def idle_size(self) -> int:
        """``size()`` once the queue has handled all it can (race-free on a thread: measured
        from inside a marker event, which counts itself)."""
        if self.threaded:
            marker = Probe("size-marker", [], lambda: self.queue.size() - 1)
            self.queue.append(marker)
            return int(marker.future.result(HANG_GUARD_S))
        assert isinstance(self.queue, DeterministicEventQueue)
        self.queue.run_until_idle()
        return self.queue.size()

    def advance(self, delta_ns: int) -> None:
        self.clock.advance_ns(delta_ns)
        self.queue.wakeup()  # Kafka's wakeup(): tell a waiting thread that mock time moved

    @contextmanager
    def hold(self) -> Iterator[int]:
        """Keep the queue from running anything inside the block; yield how many events the
        hold itself adds to ``size()`` (a running gate event on the threaded runner)."""
        if not self.threaded:
            yield 0
            return
        started, release = threading.Event(), threading.Event()

        def block() -> None:
            started.set()
            assert release.wait(HANG_GUARD_S), "hold never released"

        self.queue.append(Probe("hold", [], block))
        assert started.wait(HANG_GUARD_S)
        try:
            yield 1
        finally:
            release.set()

    def close(self) -> None:
        """``queue.close()``, with a hang guard on the threaded runner."""
        if isinstance(self.queue, KafkaEventQueue):
            self.queue.begin_shutdown("test")
            self.queue.thread.join(HANG_GUARD_S)
            assert not self.queue.thread.is_alive(), "the queue thread did not exit"
        self.queue.close()

    def wait_cleanup(self) -> None:
        """Wait until the queue has exited and run its cleanup event."""
        if not self.threaded:
            assert isinstance(self.queue, DeterministicEventQueue)
            self.queue.run_until_idle()
            assert self.queue.finished
        assert self.cleanup.started.wait(HANG_GUARD_S)
        if isinstance(self.queue, KafkaEventQueue):
            self.queue.thread.join(HANG_GUARD_S)
            assert not self.queue.thread.is_alive()


@pytest.fixture(params=["threaded", "deterministic"])
def runner(request: pytest.FixtureRequest) -> Iterator[Runner]:
    r = Runner(request.param)
    yield r
    r.close()  # a broken queue must fail the test, not hang the run


def assert_rejected_on_caller_thread(probe: Probe, error_type: type[BaseException]) -> None:
    assert probe.future.done(), "the rejection must be delivered before the call returns"
    assert probe.runs == 0
    assert len(probe.errors) == 1
    assert isinstance(probe.errors[0], error_type)
    assert probe.error_thread is threading.current_thread()


# -- lifecycle ------------------------------------------------------------------------------


def test_create_and_close(runner: Runner) -> None:
    # testCreateAndClose: close() = begin_shutdown + wait: when it returns, queued events have
    # run and the cleanup event has run, once.
    runner.queue.close()
    assert runner.cleanup.runs == 1
    if isinstance(runner.queue, KafkaEventQueue):
        assert not runner.queue.thread.is_alive()
    runner.close()  # idempotent
    assert runner.cleanup.runs == 1
    assert runner.log == ["cleanup"]


def test_close_waits_for_queued_events(runner: Runner) -> None:
    with runner.hold():
        for name in "abc":
            runner.queue.append(runner.probe(name))
        runner.queue.begin_shutdown("test")
    runner.queue.close()
    assert runner.log == ["a", "b", "c", "cleanup"]


def test_queue_is_a_context_manager(runner: Runner) -> None:
    with runner.queue as queue:
        ran = runner.probe("a")
        queue.append(ran)
    assert runner.cleanup.runs == 1
    assert runner.log == ["a", "cleanup"]


def test_both_queues_satisfy_the_protocol(runner: Runner) -> None:
    queue: EventQueue = runner.queue  # checked by mypy
    assert queue.is_empty()


# -- order ----------------------------------------------------------------------------------


def test_handle_events_in_order(runner: Runner) -> None:
    # testHandleEvents: an unexpired deadline does not reorder an appended event.
    e1, e2, e3, e4 = (runner.probe(f"e{i}") for i in range(1, 5))
    runner.queue.prepend(e1)
    runner.queue.append_with_deadline(runner.clock.now_ns() + 60 * SECOND, e2)
    runner.queue.append(e3)
    runner.result(e3)
    runner.queue.append_with_deadline(runner.clock.now_ns() + 60 * SECOND, e4)
    runner.result(e4)
    assert runner.log == ["e1", "e2", "e3", "e4"]


def test_prepend_is_lifo_at_the_head_append_fifo_at_the_tail(runner: Runner) -> None:
    a, b, c, d, e = (runner.probe(n) for n in "abcde")
    with runner.hold():
        runner.queue.append(a)
        runner.queue.append(b)
        runner.queue.prepend(c)
        runner.queue.prepend(d)
        runner.queue.append(e)
    runner.result(e)
    assert runner.log == ["d", "c", "a", "b", "e"]


# -- deadlines ------------------------------------------------------------------------------


def test_late_event_gets_timeout_and_never_runs(runner: Runner) -> None:
    # testTimeouts: e2 takes 1 ms, after which e3's deadline (now + 1 ns) has passed.
    e1 = runner.probe("e1")
    e2 = runner.probe("e2", lambda: runner.clock.advance_ms(1))
    e3 = runner.probe("e3")
    e4 = runner.probe("e4")
    with runner.hold():
        runner.queue.append(e1)
        runner.queue.append(e2)
        runner.queue.append_with_deadline(runner.clock.now_ns() + 1, e3)
        runner.queue.append(e4)
    runner.result(e4)
    exc = runner.error(e3)
    assert isinstance(exc, EventTimeoutError)
    assert isinstance(exc, TimeoutError) and isinstance(exc, KraftError)
    assert runner.log == ["e1", "e2", "e3!EventTimeoutError", "e4"]
    assert runner.idle_size() == 0


def test_deadline_is_a_start_by_time(runner: Runner) -> None:
    # An event that starts before its deadline and runs past it is not failed.
    slow = runner.probe("slow", lambda: runner.clock.advance_ns(SECOND))
    runner.queue.append_with_deadline(runner.clock.now_ns() + 10, slow)
    runner.result(slow)
    runner.drain()
    assert slow.errors == []
    assert runner.log == ["slow"]


def test_expired_deadline_fails_before_the_head_runs(runner: Runner) -> None:
    # The deadline map is checked before the run list: a late event at the tail is failed
    # before the event at the head runs.
    head, late = runner.probe("head"), runner.probe("late")
    with runner.hold():
        runner.queue.append(head)
        runner.queue.append_with_deadline(runner.clock.now_ns() + 5, late)
        runner.clock.advance_ns(5)
    runner.result(head)
    assert isinstance(runner.error(late), EventTimeoutError)
    assert runner.log == ["late!EventTimeoutError", "head"]


# -- deferred events ------------------------------------------------------------------------


def test_deferred_event_runs_only_once_due(runner: Runner) -> None:
    # testScheduleDeferred: later appends run first; the deferred event waits for its time.
    seen: list[int | None] = []

    def deadline(previous_ns: int | None) -> int:
        seen.append(previous_ns)
        return runner.clock.now_ns() + MS

    deferred, plain = runner.probe("deferred"), runner.probe("plain")
    runner.queue.schedule_deferred(None, deadline, deferred)
    runner.queue.append(plain)
    runner.result(plain)
    runner.drain()
    assert not deferred.completed
    assert runner.idle_size() == 1
    runner.advance(MS - 1)
    runner.drain()
    assert not deferred.completed
    runner.advance(1)
    runner.result(deferred)
    assert runner.log == ["plain", "deferred"]
    assert seen == [None]  # an untagged event replaces nothing


def test_due_deferred_event_runs_before_later_appends(runner: Runner) -> None:
    # testDeferredIsQueuedAfterTriggering.
    count = iter(range(10))
    deferred = runner.probe("deferred", lambda: next(count))
    first = runner.probe("first", lambda: next(count))
    last = runner.probe("last", lambda: next(count))
    runner.queue.schedule_deferred("foo", lambda _: runner.clock.now_ns() + 1, deferred)
    runner.queue.append(first)
    assert runner.result(first) == 0
    with runner.hold():
        runner.clock.advance_ms(1)
        runner.queue.append(last)
    assert runner.result(deferred) == 1
    assert runner.result(last) == 2


def test_tag_replacement_drops_the_earlier_event_silently(runner: Runner) -> None:
    # testScheduleDeferredWithTagReplacement: the deadline function gets the replaced event's
    # deadline; (previous - 1 h) is due at once; the replaced event is never run nor failed.
    first_deadline = runner.clock.now_ns() + HOUR
    received: list[int | None] = []

    def one_hour_earlier(previous_ns: int | None) -> int:
        received.append(previous_ns)
        return (previous_ns or 0) - HOUR

    replaced, replacement = runner.probe("replaced"), runner.probe("replacement")
    runner.queue.schedule_deferred("foo", lambda _: first_deadline, replaced)
    runner.queue.schedule_deferred("foo", one_hour_earlier, replacement)
    runner.result(replacement)
    assert received == [first_deadline]
    assert runner.idle_size() == 0
    runner.advance(2 * HOUR)
    runner.close()
    runner.wait_cleanup()
    assert not replaced.completed  # not even rejected at shutdown
    assert runner.log == ["replacement", "cleanup"]


def test_deadline_collision_takes_the_next_nanosecond(runner: Runner) -> None:
    # Kafka: "If the time in nanoseconds is already taken, take the next one."
    t = runner.clock.now_ns() + HOUR
    received: list[int | None] = []
    a, b, c = runner.probe("a"), runner.probe("b"), runner.probe("c")
    runner.queue.schedule_deferred("a", lambda _: t, a)
    runner.queue.schedule_deferred("b", lambda _: t, b)  # t is taken: b gets t + 1

    def capture(previous_ns: int | None) -> int:
        received.append(previous_ns)
        return t  # a still holds t, so c gets t + 1 (freed by b)

    runner.queue.schedule_deferred("b", capture, c)
    assert received == [t + 1]
    runner.advance(HOUR)
    runner.result(a)
    runner.drain()
    assert not c.completed  # due at t + 1, the clock is at t
    runner.advance(1)
    runner.result(c)
    assert runner.log == ["a", "c"]
    assert not b.completed


def test_cancel_deferred_removes_without_completing(runner: Runner) -> None:
    # testSize (second half): cancel_deferred drops an event; it never runs nor fails.
    later, soon = runner.probe("later"), runner.probe("soon")
    runner.queue.schedule_deferred("later", lambda _: runner.clock.now_ns() + HOUR, later)
    runner.queue.schedule_deferred("soon", lambda _: runner.clock.now_ns() + MS, soon)
    assert runner.idle_size() == 2
    runner.queue.cancel_deferred("later")
    assert runner.idle_size() == 1
    runner.queue.cancel_deferred("soon")
    runner.queue.cancel_deferred("soon")  # unknown tag: ignored
    runner.queue.cancel_deferred("never-scheduled")
    assert runner.idle_size() == 0
    runner.advance(2 * HOUR)
    runner.drain()
    runner.close()
    runner.wait_cleanup()
    assert not later.completed and not soon.completed
    assert runner.log == ["cleanup"]


def test_deferred_without_deadline_fails_on_the_caller_thread(runner: Runner) -> None:
    # Kafka: RuntimeException("You must specify a deadline for deferred events."). Kafka also
    # drops the event the rejected one would have replaced.
    replaced, rejected = runner.probe("replaced"), runner.probe("rejected")
    runner.queue.schedule_deferred("t", lambda _: runner.clock.now_ns() + HOUR, replaced)
    runner.queue.schedule_deferred("t", lambda _: None, rejected)
    assert_rejected_on_caller_thread(rejected, NoDeadlineError)
    assert isinstance(rejected.errors[0], RuntimeError)
    assert runner.idle_size() == 0
    # The tag does not linger: cancelling it cannot make size() negative, and a new event
    # under it replaces nothing.
    runner.queue.cancel_deferred("t")
    assert runner.idle_size() == 0
    received: list[int | None] = []

    def now_recording_previous(previous_ns: int | None) -> int:
        received.append(previous_ns)
        return runner.clock.now_ns()

    again = runner.probe("again")
    runner.queue.schedule_deferred("t", now_recording_previous, again)
    runner.result(again)
    assert received == [None]
    assert not replaced.completed


def test_raising_deadline_function_leaves_the_queue_unchanged(runner: Runner) -> None:
    scheduled = runner.probe("scheduled")
    deadline = runner.clock.now_ns() + HOUR
    runner.queue.schedule_deferred("t", lambda _: deadline, scheduled)

    def broken(_previous: int | None) -> int:
        raise ValueError("broken deadline function")

    with pytest.raises(ValueError, match="broken"):
        runner.queue.schedule_deferred("t", broken, runner.probe("never"))
    assert runner.idle_size() == 1
    received: list[int | None] = []

    def keep_previous(previous_ns: int | None) -> int | None:
        received.append(previous_ns)
        return previous_ns

    runner.queue.schedule_deferred("t", keep_previous, runner.probe("x"))
    assert received == [deadline]  # the first event was still scheduled


def test_earliest_and_latest_deadline_functions(runner: Runner) -> None:
    now = runner.clock.now_ns()
    assert earliest_deadline(5)(None) == 5
    assert earliest_deadline(5)(3) == 3
    assert earliest_deadline(5)(7) == 5
    assert latest_deadline(5)(None) == 5
    assert latest_deadline(5)(3) == 5
    assert latest_deadline(5)(7) == 7
    # Rescheduling with earliest_deadline never postpones the tag.
    first, second = runner.probe("first"), runner.probe("second")
    runner.queue.schedule_deferred("t", earliest_deadline(now + MS), first)
    runner.queue.schedule_deferred("t", earliest_deadline(now + HOUR), second)
    runner.advance(MS)
    runner.result(second)
    assert not first.completed


# -- size -----------------------------------------------------------------------------------


def test_size_counts_queued_deferred_and_running_events(runner: Runner) -> None:
    # testSize: size()/is_empty() include deferred events and the running event.
    assert runner.queue.is_empty()
    x = runner.probe("x", runner.queue.size)
    y = runner.probe("y", runner.queue.size)
    with runner.hold() as held:
        runner.queue.append(x)
        assert not runner.queue.is_empty()
        assert runner.queue.size() == held + 1
        runner.queue.append(y)
        assert runner.queue.size() == held + 2
    assert runner.result(x) == 2  # itself, running, and y
    assert runner.result(y) == 1  # itself
    assert runner.idle_size() == 0
    runner.queue.schedule_deferred("later", lambda _: runner.clock.now_ns() + HOUR, x)
    assert runner.idle_size() == 1
    runner.queue.cancel_deferred("later")
    assert runner.idle_size() == 0


# -- exceptions -----------------------------------------------------------------------------


def test_exception_from_run_goes_to_handle_exception(runner: Runner) -> None:
    boom = ValueError("boom")

    def fail() -> None:
        raise boom

    failing, after = runner.probe("failing", fail), runner.probe("after")
    runner.queue.append(failing)
    runner.queue.append(after)
    runner.result(after)
    assert failing.errors == [boom]
    assert failing.error_thread is failing.run_thread
    assert runner.log == ["failing", "failing!ValueError", "after"]


def test_exception_from_handle_exception_is_logged_and_queue_goes_on(
    runner: Runner, caplog: pytest.LogCaptureFixture
) -> None:
    # testHandleExceptionThrowingAnException.
    caplog.set_level(logging.DEBUG, logger="kraft.queue")

    def first() -> None:
        raise RuntimeError("First exception")

    def second(exc: BaseException) -> None:
        raise RuntimeError("Second exception")

    failing = runner.probe("failing", first, on_error=second)
    after = runner.probe("after")
    runner.queue.append(failing)
    runner.queue.append(after)
    runner.result(after)
    assert runner.log == ["failing", "failing!RuntimeError", "after"]
    logged = [r for r in caplog.records if "Unexpected exception in handle_exception" in r.msg]
    assert len(logged) == 1
    assert logged[0].levelno == logging.ERROR
    assert logged[0].exc_info is not None
    assert str(logged[0].exc_info[1]) == "Second exception"


def test_exception_from_cleanup_event_is_logged(
    runner: Runner, caplog: pytest.LogCaptureFixture
) -> None:
    def fail() -> None:
        raise RuntimeError("cleanup failed")

    runner.cleanup.action = fail
    runner.close()
    runner.wait_cleanup()
    assert runner.cleanup.errors == []  # Kafka logs it, never delivers it
    assert any("cleanup event threw exception" in r.msg for r in caplog.records)


# -- shutdown -------------------------------------------------------------------------------


def test_shutdown_fails_deferred_and_deadline_events_then_drains_the_rest(
    runner: Runner,
) -> None:
    # testShutdownBeforeDeferred, plus events with deadlines and already-queued events.
    now = runner.clock.now_ns()
    d1, d2 = runner.probe("d1"), runner.probe("d2")
    timed, p1, p2 = runner.probe("timed"), runner.probe("p1"), runner.probe("p2")
    with runner.hold():
        runner.queue.schedule_deferred("d2", lambda _: now + 2 * HOUR, d2)
        runner.queue.schedule_deferred("d1", lambda _: now + HOUR, d1)
        runner.queue.append(p1)
        runner.queue.append_with_deadline(now + 90 * 60 * SECOND, timed)
        runner.queue.append(p2)
        runner.queue.begin_shutdown("test")
        runner.queue.begin_shutdown("test")  # idempotent
    runner.wait_cleanup()
    for probe in (d1, d2, timed):
        assert isinstance(runner.error(probe), RejectedExecutionError)
    # Failures in deadline order first (the deadline map is served before the run list),
    # then the queued events, then the cleanup.
    assert runner.log == [
        "d1!RejectedExecutionError",
        "timed!RejectedExecutionError",
        "d2!RejectedExecutionError",
        "p1",
        "p2",
        "cleanup",
    ]
    assert runner.queue.size() == 0


def test_due_deferred_event_still_runs_during_shutdown(runner: Runner) -> None:
    # Kafka checks "due" before "shutting down".
    due = runner.probe("due")
    with runner.hold():
        runner.queue.schedule_deferred("due", lambda _: runner.clock.now_ns(), due)
        runner.queue.begin_shutdown("test")
    runner.wait_cleanup()
    assert runner.log == ["due", "cleanup"]


def test_offers_after_shutdown_are_rejected_on_the_caller_thread(runner: Runner) -> None:
    # testRejectedExecutionException, for every kind of offer.
    runner.queue.begin_shutdown("test")
    early = runner.probe("early")
    runner.queue.append(early)
    assert_rejected_on_caller_thread(early, RejectedExecutionError)
    runner.close()
    offers: list[tuple[str, Callable[[Event], None]]] = [
        ("append", runner.queue.append),
        ("prepend", runner.queue.prepend),
        ("deadline", lambda e: runner.queue.append_with_deadline(START_NS + HOUR, e)),
        ("deferred", lambda e: runner.queue.schedule_deferred("t", lambda _: 0, e)),
    ]
    for name, offer in offers:
        probe = runner.probe(name)
        offer(probe)
        assert_rejected_on_caller_thread(probe, RejectedExecutionError)
    assert runner.queue.size() == 0


# -- interruption ---------------------------------------------------------------------------


def test_interrupt_while_an_event_runs(runner: Runner) -> None:
    # testInterruptedExceptionHandling: the running event finishes and is not failed; every
    # queued, deferred and deadline event gets InterruptedError and never runs.
    first = runner.probe("first", runner.queue.interrupt)  # interrupted while it runs
    queued = [runner.probe(f"q{i}") for i in range(3)]
    deferred, timed = runner.probe("deferred"), runner.probe("timed")
    with runner.hold():
        runner.queue.append(first)
        for probe in queued:
            runner.queue.append(probe)
        runner.queue.schedule_deferred("d", lambda _: runner.clock.now_ns() + HOUR, deferred)
        runner.queue.append_with_deadline(runner.clock.now_ns() + HOUR, timed)
    runner.wait_cleanup()
    assert first.runs == 1 and first.errors == []
    for probe in [*queued, deferred, timed]:
        exc = runner.error(probe)
        assert isinstance(exc, EventQueueInterruptedError)
        assert isinstance(exc, InterruptedError) and isinstance(exc, KraftError)
    assert runner.log[0] == "first"
    assert runner.log[-1] == "cleanup"
    assert runner.queue.size() == 0


def test_interrupt_with_an_empty_queue(runner: Runner) -> None:
    # testInterruptedWithEmptyQueue: the loop exits and the cleanup runs; later offers get
    # InterruptedError until close(), then RejectedExecutionError.
    warmup = runner.probe("warmup")
    runner.queue.append(warmup)
    runner.result(warmup)
    runner.queue.interrupt()
    runner.wait_cleanup()
    interrupted = runner.probe("interrupted")
    runner.queue.append(interrupted)
    assert_rejected_on_caller_thread(interrupted, EventQueueInterruptedError)
    runner.close()
    rejected = runner.probe("rejected")
    runner.queue.append(rejected)
    assert_rejected_on_caller_thread(rejected, RejectedExecutionError)
    assert runner.cleanup.runs == 1


def test_interrupt_with_deferred_events(runner: Runner) -> None:
    # testInterruptedWithDeferredEvents.
    ie1, ie2 = runner.probe("ie1"), runner.probe("ie2")
    runner.queue.schedule_deferred("ie2", lambda _: runner.clock.now_ns() + 2 * HOUR, ie2)
    runner.queue.schedule_deferred("ie1", lambda _: runner.clock.now_ns() + HOUR, ie1)
    assert runner.idle_size() == 2
    runner.queue.interrupt()
    runner.wait_cleanup()
    assert isinstance(runner.error(ie1), EventQueueInterruptedError)
    assert isinstance(runner.error(ie2), EventQueueInterruptedError)
    assert runner.log == [
        "ie1!EventQueueInterruptedError",
        "ie2!EventQueueInterruptedError",
        "cleanup",
    ]


# -- threaded runner only -------------------------------------------------------------------


def test_threaded_events_run_on_the_named_queue_thread() -> None:
    log: list[str] = []
    with KafkaEventQueue(ManualClock(), "node-1-") as queue:
        probe = Probe("p", log)
        queue.append(probe)
        probe.future.result(HANG_GUARD_S)
        assert probe.run_thread is queue.thread
        assert queue.thread.name == "node-1-" + EVENT_HANDLER_THREAD_SUFFIX
    assert not queue.thread.is_alive()


def test_threaded_interrupt_from_another_thread_while_an_event_blocks() -> None:
    # testInterruptedExceptionHandling as Kafka writes it: the test thread interrupts while
    # event 1 is blocked.
    log: list[str] = []
    started, release = threading.Event(), threading.Event()

    def block() -> None:
        started.set()
        assert release.wait(HANG_GUARD_S)

    cleanup = Probe("cleanup", log)
    queue = KafkaEventQueue(ManualClock(), "interrupt-", cleanup)
    first = Probe("first", log, block)
    queued = [Probe(f"q{i}", log) for i in range(3)]
    queue.append(first)
    for probe in queued:
        queue.append(probe)
    assert started.wait(HANG_GUARD_S)
    queue.interrupt()
    release.set()
    cleanup.future.result(HANG_GUARD_S)
    assert first.runs == 1 and first.errors == []
    for probe in queued:
        assert probe.runs == 0
        assert isinstance(probe.future.exception(HANG_GUARD_S), EventQueueInterruptedError)
    queue.close()


def test_threaded_wakeup_makes_the_thread_reread_a_manual_clock() -> None:
    # EventQueue.wakeup(): "alert the queue that the mock time has changed". Without it the
    # thread would wait an hour of real time for a deadline an hour away.
    clock = ManualClock()
    log: list[str] = []
    with KafkaEventQueue(clock, "wakeup-") as queue:
        deferred = Probe("deferred", log)
        queue.schedule_deferred(None, lambda _: clock.now_ns() + HOUR, deferred)
        clock.advance_ns(HOUR)
        queue.wakeup()
        deferred.future.result(HANG_GUARD_S)


def test_threaded_queue_on_the_system_clock() -> None:
    clock = SystemClock()
    log: list[str] = []
    with KafkaEventQueue(clock, "system-") as queue:
        deferred, timed = Probe("deferred", log), Probe("timed", log)
        queue.schedule_deferred(None, lambda _: clock.now_ns() + MS, deferred)
        queue.append_with_deadline(clock.now_ns() + HOUR, timed)
        deferred.future.result(HANG_GUARD_S)
        timed.future.result(HANG_GUARD_S)
    assert sorted(log) == ["deferred", "timed"]


def test_threaded_close_from_an_own_event_begins_shutdown() -> None:
    log: list[str] = []
    cleanup = Probe("cleanup", log)
    queue = KafkaEventQueue(ManualClock(), "self-close-", cleanup)
    closer = Probe("closer", log, queue.close)
    after = Probe("after", log)
    queue.append(closer)
    closer.future.result(HANG_GUARD_S)  # returned rather than joining its own thread
    queue.append(after)
    assert_rejected_on_caller_thread(after, RejectedExecutionError)
    cleanup.future.result(HANG_GUARD_S)
    queue.close()
    assert not queue.thread.is_alive()


# -- deterministic runner only --------------------------------------------------------------


def test_deterministic_runs_nothing_until_driven() -> None:
    clock = ManualClock()
    log: list[str] = []
    cleanup = Probe("cleanup", log)
    queue = DeterministicEventQueue(clock, cleanup)
    assert queue.next_deadline_ns() is None
    queue.append(Probe("a", log))
    queue.schedule_deferred(None, lambda _: 50, Probe("later", log))
    queue.append_with_deadline(80, Probe("timed", log))
    assert log == []
    assert queue.next_deadline_ns() == 50
    assert queue.run_one()
    assert log == ["a"]
    assert queue.next_deadline_ns() == 50
    assert queue.run_until_idle() == 1  # "timed" ran; "later" is not due
    assert not queue.run_one()
    clock.advance_ns(50)
    assert queue.run_until_idle() == 1
    assert queue.next_deadline_ns() is None
    assert log == ["a", "timed", "later"]
    assert [queue.finished] == [False]  # (a list: mypy would keep the narrowing past close())
    queue.close()
    assert queue.finished
    assert log[-1] == "cleanup"
    assert not queue.run_one()  # the cleanup runs once


def test_deterministic_queue_cannot_be_driven_from_its_own_event() -> None:
    queue = DeterministicEventQueue(ManualClock())
    log: list[str] = []
    nested = Probe("nested", log, queue.run_until_idle)
    queue.append(nested)
    queue.run_until_idle()
    assert len(nested.errors) == 1 and isinstance(nested.errors[0], RuntimeError)


def test_deterministic_close_from_an_own_event_drains_in_the_outer_loop() -> None:
    log: list[str] = []
    cleanup = Probe("cleanup", log)
    queue = DeterministicEventQueue(ManualClock(), cleanup)
    queue.append(Probe("closer", log, queue.close))
    queue.append(Probe("queued", log))
    queue.schedule_deferred(None, lambda _: 10, Probe("deferred", log))
    assert queue.run_until_idle() == 4
    assert queue.finished
    assert log == ["closer", "deferred!RejectedExecutionError", "queued", "cleanup"]


def test_deterministic_runs_replay_identically() -> None:
    def scenario() -> list[str]:
        clock = ManualClock()
        log: list[str] = []
        queue = DeterministicEventQueue(clock, Probe("cleanup", log))
        for i in range(20):
            if i % 3 == 0:
                queue.schedule_deferred(f"t{i % 4}", earliest_deadline(i * 7), Probe(f"d{i}", log))
            elif i % 3 == 1:
                queue.append_with_deadline(i * 5, Probe(f"w{i}", log))
            else:
                queue.prepend(Probe(f"p{i}", log))
            if i % 5 == 0:
                clock.advance_ns(13)
                queue.run_until_idle()
        queue.close()
        return log

    assert scenario() == scenario()
