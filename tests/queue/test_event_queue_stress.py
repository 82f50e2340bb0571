"""Concurrency and model-based tests for kraft.queue.

* Many producer threads offer events at once; every event must run exactly once and each
  producer's appends must run in the order it made them (per-producer FIFO), on both runners.
* Hypothesis drives the deterministic queue with random operation sequences and checks it
  against a small model: size() accounting, exactly-once completion, silent drops only for
  replaced or cancelled tags, FIFO appends, and deadline rules.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.common.clock import ManualClock
from kraft.queue import (
    DeterministicEventQueue,
    Event,
    EventQueueInterruptedError,
    EventTimeoutError,
    KafkaEventQueue,
    NoDeadlineError,
    RejectedExecutionError,
)

HANG_GUARD_S = 30.0
HOUR_NS = 3600 * 1_000_000_000


class Record(Event):
    """Records (producer, sequence) in a shared list when run; any failure is a test failure."""

    def __init__(
        self,
        producer: int,
        seq: int,
        kind: str,
        out: list[tuple[int, int, str]],
        errors: list[BaseException],
    ) -> None:
        self.key = (producer, seq, kind)
        self.out = out
        self.errors = errors

    def run(self) -> None:
        self.out.append(self.key)

    def handle_exception(self, exc: BaseException) -> None:
        self.errors.append(exc)


class Drained(Event):
    def __init__(self, done: threading.Event) -> None:
        self.done = done

    def run(self) -> None:
        self.done.set()


@pytest.mark.parametrize("kind", ["threaded", "deterministic"])
def test_many_producers_every_event_runs_once_and_appends_keep_producer_order(
    kind: str,
) -> None:
    producers, per_producer = 8, 1500
    clock = ManualClock()
    queue: KafkaEventQueue | DeterministicEventQueue
    if kind == "threaded":
        queue = KafkaEventQueue(clock, "stress-")
    else:
        queue = DeterministicEventQueue(clock)
    ran: list[tuple[int, int, str]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(producers + 1)

    def produce(producer: int) -> None:
        barrier.wait(HANG_GUARD_S)
        for seq in range(per_producer):
            if seq % 3 == 0:
                queue.append(Record(producer, seq, "append", ran, errors))
            elif seq % 3 == 1:
                # An unexpired deadline keeps the event in its place in the run list.
                queue.append_with_deadline(
                    clock.now_ns() + HOUR_NS, Record(producer, seq, "append", ran, errors)
                )
            else:
                # Due at once; colliding deadlines are bumped by 1 ns, none may be lost.
                queue.schedule_deferred(
                    None, lambda _: clock.now_ns(), Record(producer, seq, "deferred", ran, errors)
                )

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    for thread in threads:
        thread.start()
    barrier.wait(HANG_GUARD_S)
    if isinstance(queue, DeterministicEventQueue):
        # The test thread is the queue's loop, running concurrently with the producers.
        while any(thread.is_alive() for thread in threads):
            queue.run_until_idle()
    for thread in threads:
        thread.join(HANG_GUARD_S)
        assert not thread.is_alive()
    # Colliding deferred deadlines were bumped 1 ns apart, past the manual clock: move it on
    # (well short of the appends' deadlines). Then drain before closing, since shutdown
    # would fail the events with deadlines still waiting.
    clock.advance_ns(1_000_000_000)
    queue.wakeup()
    if isinstance(queue, DeterministicEventQueue):
        queue.run_until_idle()
    else:
        drained = threading.Event()
        queue.append(Drained(drained))
        assert drained.wait(HANG_GUARD_S)
    queue.close()

    assert errors == []
    counts = Counter(ran)
    assert len(counts) == producers * per_producer, "an event was lost"
    assert max(counts.values()) == 1, "an event ran twice"
    for producer in range(producers):
        appended = [seq for (p, seq, k) in ran if p == producer and k == "append"]
        assert appended == sorted(appended), f"producer {producer}'s appends ran out of order"
    assert queue.size() == 0


# -- model-based test of the deterministic queue --------------------------------------------


@dataclass
class Tracked(Event):
    """An event that reports its outcome to the model."""

    ident: int
    kind: str
    requested_ns: int | None
    model: Model
    outcomes: list[str | BaseException] = field(default_factory=list)
    at_ns: list[int] = field(default_factory=list)

    def run(self) -> None:
        self.outcomes.append("ran")
        self.model.on_complete(self)

    def handle_exception(self, exc: BaseException) -> None:
        self.outcomes.append(exc)
        self.model.on_complete(self)


class Model:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.queue = DeterministicEventQueue(self.clock)
        self.events: list[Tracked] = []
        self.tags: dict[str, Tracked] = {}
        self.dropped: set[int] = set()
        self.accepting = True
        self.appended_runs: list[int] = []

    def new(self, kind: str, requested_ns: int | None) -> Tracked:
        event = Tracked(len(self.events), kind, requested_ns, self)
        self.events.append(event)
        return event

    def on_complete(self, event: Tracked) -> None:
        event.at_ns.append(self.clock.now_ns())
        for tag, holder in list(self.tags.items()):
            if holder is event:
                del self.tags[tag]
        if event.outcomes[-1] == "ran" and event.kind in ("append", "deadline"):
            self.appended_runs.append(event.ident)

    def outstanding(self) -> int:
        return sum(1 for e in self.events if not e.outcomes and e.ident not in self.dropped)

    def apply(self, op: tuple[object, ...]) -> None:
        name = op[0]
        now = self.clock.now_ns()
        if name == "append":
            self.queue.append(self.new("append", None))
        elif name == "prepend":
            self.queue.prepend(self.new("prepend", None))
        elif name == "deadline":
            assert isinstance(op[1], int)
            self.queue.append_with_deadline(now + op[1], self.new("deadline", now + op[1]))
        elif name == "deferred":
            tag, delta = op[1], op[2]
            assert tag is None or isinstance(tag, str)
            assert delta is None or isinstance(delta, int)
            deadline = None if delta is None else now + delta
            event = self.new("deferred", deadline)
            if self.accepting and tag is not None:
                replaced = self.tags.pop(tag, None)
                if replaced is not None:
                    self.dropped.add(replaced.ident)
            self.queue.schedule_deferred(tag, lambda _: deadline, event)
            if self.accepting and tag is not None and deadline is not None:
                self.tags[tag] = event
        elif name == "cancel":
            assert isinstance(op[1], str)
            replaced = self.tags.pop(op[1], None)
            if replaced is not None:
                self.dropped.add(replaced.ident)
            self.queue.cancel_deferred(op[1])
        elif name == "advance":
            assert isinstance(op[1], int)
            self.clock.advance_ns(op[1])
        elif name == "run_one":
            self.queue.run_one()
        elif name == "run_until_idle":
            self.queue.run_until_idle()
        elif name == "shutdown":
            self.accepting = False
            self.queue.begin_shutdown("model")
        elif name == "interrupt":
            self.accepting = False
            self.queue.interrupt()
        assert self.queue.size() == self.outstanding()


deltas = st.integers(min_value=0, max_value=20)
tags = st.sampled_from([None, "a", "b"])
operations = st.one_of(
    st.just(("append",)),
    st.just(("prepend",)),
    st.tuples(st.just("deadline"), deltas),
    st.tuples(st.just("deferred"), tags, st.one_of(st.none(), deltas)),
    st.tuples(st.just("cancel"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("advance"), st.integers(min_value=0, max_value=10)),
    st.just(("run_one",)),
    st.just(("run_until_idle",)),
    st.just(("shutdown",)),
    st.just(("interrupt",)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(operations, max_size=60))
def test_deterministic_queue_matches_the_model(ops: list[tuple[object, ...]]) -> None:
    model = Model()
    for op in ops:
        model.apply(op)
    model.queue.close()
    assert model.queue.finished
    assert model.queue.size() == 0
    for event in model.events:
        if event.ident in model.dropped:
            assert event.outcomes == [], "a replaced or cancelled event was completed"
            continue
        assert len(event.outcomes) == 1, f"event {event.ident}: {event.outcomes}"
        outcome = event.outcomes[0]
        at = event.at_ns[0]
        if isinstance(outcome, EventTimeoutError):
            assert event.kind == "deadline"
            assert event.requested_ns is not None and at >= event.requested_ns
        elif isinstance(outcome, NoDeadlineError):
            assert event.kind == "deferred" and event.requested_ns is None
        elif outcome == "ran":
            if event.kind == "deferred":
                assert event.requested_ns is not None and at >= event.requested_ns
        else:
            assert isinstance(outcome, RejectedExecutionError | EventQueueInterruptedError)
    assert model.appended_runs == sorted(model.appended_runs), "appends ran out of order"
