"""RequestManager: one request in flight per destination, stale responses dropped, retry
backoff, timeouts (docs/protocol.md §1.3)."""

from __future__ import annotations

import random

from kraft.raft.channel import DequeMessageQueue
from kraft.raft.requests import RequestManager

BACKOFF, TIMEOUT = 20, 2000


def manager(bootstrap: tuple[int, ...] = ()) -> RequestManager:
    return RequestManager(bootstrap, BACKOFF, TIMEOUT, random.Random(1))


def test_one_request_in_flight_per_destination() -> None:
    m = manager()
    assert m.is_ready(2, 0)
    m.on_request_sent(2, 7, 0)
    assert not m.is_ready(2, 100)
    assert m.is_ready(3, 100)  # other destinations are independent
    assert m.remaining_request_time_ms(2, 100) == TIMEOUT - 100


def test_only_the_response_to_the_request_in_flight_is_expected() -> None:
    m = manager()
    m.on_request_sent(2, 7, 0)
    assert m.is_response_expected(2, 7)
    assert not m.is_response_expected(2, 6)
    assert not m.is_response_expected(3, 7)
    m.on_response_result(2, 7, True, 10)
    assert not m.is_response_expected(2, 7)  # a duplicate of that response is stale too
    assert m.is_ready(2, 10)


def test_a_failed_response_backs_off_for_retry_backoff() -> None:
    m = manager()
    m.on_request_sent(2, 7, 0)
    m.on_response_result(2, 7, False, 100)
    assert m.is_backing_off(2, 100)
    assert not m.is_ready(2, 100 + BACKOFF - 1)
    assert m.remaining_backoff_ms(2, 110) == BACKOFF - 10
    assert m.is_ready(2, 100 + BACKOFF)


def test_a_stale_result_changes_nothing() -> None:
    m = manager()
    m.on_request_sent(2, 7, 0)
    m.on_response_result(2, 6, False, 100)
    assert not m.is_backing_off(2, 100)
    assert m.is_response_expected(2, 7)


def test_a_timed_out_request_frees_the_destination() -> None:
    m = manager()
    m.on_request_sent(2, 7, 0)
    assert not m.has_request_timed_out(2, TIMEOUT - 1)
    assert m.has_request_timed_out(2, TIMEOUT)
    assert m.is_ready(2, TIMEOUT)
    m.on_request_sent(2, 8, TIMEOUT)
    assert not m.is_response_expected(2, 7)  # the late answer to 7 is now stale


def test_reset_all_drops_every_expectation() -> None:
    m = manager()
    m.on_request_sent(2, 7, 0)
    m.on_request_sent(3, 8, 0)
    m.reset_all()
    assert not m.is_response_expected(2, 7)
    assert not m.is_response_expected(3, 8)
    assert m.is_ready(2, 0) and m.is_ready(3, 0)


def test_bootstrap_server_choice_skips_busy_servers_and_is_seeded() -> None:
    m = manager((1, 2, 3))
    first = m.find_ready_bootstrap_server(0)
    assert first in (1, 2, 3)
    for node in (1, 2, 3):
        m.on_request_sent(node, node, 0)
    assert m.find_ready_bootstrap_server(10) is None
    assert m.backoff_before_any_bootstrap_server_ms(10) == TIMEOUT - 10
    again = manager((1, 2, 3)).find_ready_bootstrap_server(0)
    assert again == first  # same seed, same choice


def test_deque_queue_never_blocks_and_counts_wakeups() -> None:
    queue = DequeMessageQueue()
    assert queue.poll(10_000) is None
    assert queue.is_empty()
    queue.wakeup()
    assert queue.wakeups == 1
