"""The runtime's message queue and driver thread, with a real client of a single voter.

Threads are real here; every wait is on an event with a bound, never a sleep.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft.config import Endpoint, QuorumConfig
from kraft.errors import IllegalStateError
from kraft.log.memory import MemoryLog
from kraft.log.quorum_state import MemoryQuorumStateStore
from kraft.protocol.envelope import InboundRequest
from kraft.protocol.messages import DescribeQuorumRequest
from kraft.raft.client import KafkaRaftClient
from kraft.raft.listeners import BatchReader, Listener
from kraft.record.serde import BytesSerde
from kraft.runtime.clock import SystemClock
from kraft.runtime.driver import RaftClientDriver
from kraft.runtime.queue import BlockingMessageQueue
from kraft.testing import MockNetworkChannel

WAIT_S = 10.0


def _request(correlation_id: int) -> InboundRequest:
    return InboundRequest(correlation_id, -1, uuid.UUID(int=0), None, DescribeQuorumRequest(), 0)


def test_queue_is_fifo_and_poll_without_timeout_does_not_wait() -> None:
    queue = BlockingMessageQueue()
    assert queue.poll(0) is None and queue.is_empty()
    for i in range(3):
        queue.add(_request(i))
    assert len(queue) == 3
    assert [queue.poll(1000).correlation_id for _ in range(3)] == [0, 1, 2]  # type: ignore[union-attr]
    assert queue.is_empty()


def test_wakeup_ends_a_wait_without_a_message() -> None:
    queue = BlockingMessageQueue()
    results: list[object] = []
    done = threading.Event()

    def poller() -> None:
        results.append(queue.poll(600_000))  # ten minutes unless woken
        done.set()

    thread = threading.Thread(target=poller)
    thread.start()
    queue.wakeup()
    assert done.wait(WAIT_S)
    thread.join(WAIT_S)
    assert results == [None]


def test_add_from_another_thread_wakes_the_poller() -> None:
    queue = BlockingMessageQueue()
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(queue.poll(600_000)))
    thread.start()
    queue.add(_request(7))
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert got[0] is not None and got[0].correlation_id == 7  # type: ignore[attr-defined]


class _Commits(Listener[bytes]):
    def __init__(self, fail_on: bytes | None = None) -> None:
        self.records: list[bytes] = []
        self.changed = threading.Condition()
        self.fail_on = fail_on
        self.shutdown_begun = threading.Event()

    def handle_commit(self, reader: BatchReader[bytes]) -> None:
        try:
            for batch in reader:
                if self.fail_on is not None and self.fail_on in batch.records:
                    raise RuntimeError("a listener bug")
                with self.changed:
                    self.records.extend(batch.records)
                    self.changed.notify_all()
        finally:
            reader.close()

    def begin_shutdown(self) -> None:
        self.shutdown_begun.set()

    def wait_for(self, count: int) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: len(self.records) >= count, WAIT_S)


def _single_voter(tmp_path: Path) -> KafkaRaftClient[bytes]:
    config = QuorumConfig(voters={1: Endpoint("127.0.0.1", 1)}, append_linger_ms=0)
    client: KafkaRaftClient[bytes] = KafkaRaftClient(
        local_id=1,
        config=config,
        log=MemoryLog(),
        store=MemoryQuorumStateStore(),
        channel=MockNetworkChannel(),
        queue=BlockingMessageQueue(),
        clock=SystemClock(),
        rand=random.Random(1),
        serde=BytesSerde(),
        append_lock=threading.Lock(),
    )
    client.initialize()
    return client


class _Ratios:
    def __init__(self) -> None:
        self.ratios: list[float] = []

    def record_poll_idle_ratio(
        self, ratio: float, now_ms: int, *, duration_ms: float | None = None
    ) -> None:
        self.ratios.append(ratio)


def test_driver_polls_appends_from_another_thread_and_shuts_down(tmp_path: Path) -> None:
    client = _single_voter(tmp_path)
    assert client.is_leader
    listener = _Commits()
    client.register(listener)
    ratios = _Ratios()
    driver = RaftClientDriver(client, poll_idle=ratios)
    assert driver.thread_name == "kraft-1-io"
    driver.start()
    try:
        epoch = client.leader_and_epoch().epoch
        for i in range(50):
            client.prepare_append(epoch, [b"r%d" % i])
            client.schedule_prepared_append()
        assert listener.wait_for(50)
        assert listener.records == [b"r%d" % i for i in range(50)]
    finally:
        driver.shutdown()
    assert not driver.is_alive()
    assert driver.failure is None
    assert listener.shutdown_begun.is_set()
    assert client.is_shutdown
    assert ratios.ratios and all(0.0 <= r <= 1.0 for r in ratios.ratios)
    assert not any(t.name == "kraft-1-io" for t in threading.enumerate())


def test_an_exception_in_poll_is_a_fatal_fault_not_a_hang(tmp_path: Path) -> None:
    client = _single_voter(tmp_path)
    listener = _Commits(fail_on=b"boom")
    client.register(listener)
    faults: list[BaseException] = []
    faulted = threading.Event()

    def handler(exc: BaseException) -> None:
        faults.append(exc)
        faulted.set()

    driver = RaftClientDriver(client, fatal_fault_handler=handler)
    driver.start()
    client.prepare_append(client.leader_and_epoch().epoch, [b"boom"])
    client.schedule_prepared_append()
    assert faulted.wait(WAIT_S)
    driver.shutdown(timeout_s=WAIT_S)
    assert not driver.is_alive()
    assert isinstance(driver.failure, RuntimeError) and faults == [driver.failure]


def test_the_driver_refuses_an_uninitialized_client(tmp_path: Path) -> None:
    config = QuorumConfig(voters={1: Endpoint("127.0.0.1", 1)})
    client: KafkaRaftClient[bytes] = KafkaRaftClient(
        local_id=1,
        config=config,
        log=MemoryLog(),
        store=MemoryQuorumStateStore(),
        channel=MockNetworkChannel(),
        queue=BlockingMessageQueue(),
        clock=SystemClock(),
        rand=random.Random(1),
        serde=BytesSerde(),
    )
    with pytest.raises(IllegalStateError):
        RaftClientDriver(client).start()


def _idle_single_voter() -> KafkaRaftClient[bytes]:
    """A lone leader whose every timer is ten minutes away: its poll waits that long unless
    something wakes the queue."""
    long = 600_000
    config = QuorumConfig(
        voters={1: Endpoint("127.0.0.1", 1)},
        election_timeout_ms=long,
        election_backoff_max_ms=long,
        fetch_timeout_ms=long,
        request_timeout_ms=long,
        log_clean_interval_ms=long,
    )
    client: KafkaRaftClient[bytes] = KafkaRaftClient(
        local_id=1,
        config=config,
        log=MemoryLog(),
        store=MemoryQuorumStateStore(),
        channel=MockNetworkChannel(),
        queue=BlockingMessageQueue(),
        clock=SystemClock(),
        rand=random.Random(1),
        serde=BytesSerde(),
    )
    client.initialize()
    return client


def test_call_soon_runs_on_the_driver_thread_in_order_and_wakes_an_idle_poll() -> None:
    client = _idle_single_voter()
    driver = RaftClientDriver(client)
    driver.start()
    ran: list[tuple[int, str]] = []
    done = threading.Event()

    def record(i: int) -> Callable[[], None]:
        return lambda: ran.append((i, threading.current_thread().name))

    try:
        # Idle: the driver is now inside a poll that would wait ten minutes.
        for i in range(3):
            driver.call_soon(record(i))
        driver.call_soon(done.set)
        assert done.wait(WAIT_S)
    finally:
        driver.shutdown(timeout_s=WAIT_S)
    assert ran == [(0, "kraft-1-io"), (1, "kraft-1-io"), (2, "kraft-1-io")]


def test_a_function_that_raises_is_logged_once_and_the_driver_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = _idle_single_voter()
    driver = RaftClientDriver(client)
    driver.start()
    done = threading.Event()

    def bug() -> None:
        raise ValueError("a caller's bug")

    try:
        with caplog.at_level("ERROR", logger="kraft.runtime.driver"):
            for _ in range(5):
                driver.call_soon(bug)
            driver.call_soon(done.set)
            assert done.wait(WAIT_S)
        assert driver.is_alive() and driver.failure is None
    finally:
        driver.shutdown(timeout_s=WAIT_S)
    lines = [r for r in caplog.records if "call_soon raised" in r.getMessage()]
    assert len(lines) == 1  # rate-limited: one line a minute
    assert "a caller's bug" in lines[0].getMessage()


def test_call_soon_refuses_once_the_driver_has_stopped() -> None:
    client = _idle_single_voter()
    driver = RaftClientDriver(client)
    driver.start()
    driver.shutdown(timeout_s=WAIT_S)
    with pytest.raises(IllegalStateError, match="stopped polling"):
        driver.call_soon(lambda: None)
