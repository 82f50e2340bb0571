"""BrokerHeartbeatManager: sessions, stale brokers, and the broker state machine of Kafka's
``calculateNextBrokerState``."""

from __future__ import annotations

import pytest

from kraft.common.limits import INT64_MAX
from kraft.controller.heartbeats import (
    BrokerControlState,
    BrokerHeartbeatManager,
    UsableBroker,
)
from kraft.errors import IllegalStateError
from kraft.protocol.controller_messages import BrokerHeartbeatRequest

FENCED = BrokerControlState.FENCED
UNFENCED = BrokerControlState.UNFENCED
CONTROLLED_SHUTDOWN = BrokerControlState.CONTROLLED_SHUTDOWN
SHUTDOWN_NOW = BrokerControlState.SHUTDOWN_NOW


def heartbeat(
    broker_id: int, offset: int, *, want_fence: bool = False, want_shut_down: bool = False
) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(
        broker_id=broker_id,
        broker_epoch=0,
        current_metadata_offset=offset,
        want_fence=want_fence,
        want_shut_down=want_shut_down,
    )


def manager_with(*brokers: tuple[int, bool]) -> BrokerHeartbeatManager:
    manager = BrokerHeartbeatManager(session_timeout_ms=10)
    for broker_id, fenced in brokers:
        manager.register(broker_id, 0, fenced, now_ms=0)
    return manager


def test_a_session_lasts_the_timeout_from_the_last_contact() -> None:
    manager = manager_with((0, False), (1, False), (2, True))
    assert manager.has_valid_session(0, 10) and not manager.has_valid_session(0, 11)
    assert not manager.has_valid_session(2, 0)  # a fenced broker has no session
    assert not manager.has_valid_session(7, 0)  # nor an unknown one
    manager.touch(0, fenced=False, metadata_offset=5, now_ms=8)
    assert manager.has_valid_session(0, 18)
    assert manager.find_stale_brokers(11) == [1]
    assert manager.find_stale_brokers(19) == [1, 0]  # longest silent first
    manager.fence(1)
    assert manager.find_stale_brokers(19) == [0]
    manager.remove(0)
    assert manager.find_stale_brokers(100) == [] and manager.broker_ids() == [1, 2]


def test_next_check_time_is_when_the_oldest_unfenced_session_has_ended() -> None:
    manager = manager_with((0, True))
    assert manager.next_check_time_ms() is None
    manager.touch(0, fenced=False, metadata_offset=0, now_ms=3)
    manager.register(1, 0, fenced=False, now_ms=5)
    # Valid through 3 + 10 = 13; stale, and so due for the check, from 14.
    assert manager.next_check_time_ms() == 14
    assert manager.find_stale_brokers(13) == []
    assert manager.find_stale_brokers(14) == [0]


def test_a_recorded_arrival_renews_the_session_only_at_the_registered_epoch() -> None:
    # KAFKA-17793: record_contact is the arrival of a heartbeat not yet processed.
    manager = manager_with((0, False), (1, False))
    manager.record_contact(0, 0, now_ms=8)
    manager.record_contact(1, 5, now_ms=8)  # an epoch broker 1 is not registered at
    assert manager.next_check_time_ms() == 11
    assert manager.find_stale_brokers(11) == [1]
    assert manager.has_valid_session(0, 18) and not manager.has_valid_session(0, 19)
    manager.touch(0, fenced=False, metadata_offset=1, now_ms=3)  # processed late
    assert manager.has_valid_session(0, 18)  # the later arrival still counts
    manager.register(1, 5, fenced=False)  # re-registered at epoch 5
    assert manager.has_valid_session(1, 18) and not manager.has_valid_session(1, 19)
    manager.remove(1)
    manager.register(1, 5, fenced=False)
    assert manager.find_stale_brokers(100) == [0]  # removal forgot the arrival


def test_a_broker_registered_without_a_time_starts_its_session_at_the_next_check() -> None:
    manager = BrokerHeartbeatManager(session_timeout_ms=10)
    manager.register(4, 0, fenced=False)
    assert manager.has_valid_session(4, 1_000)
    assert manager.find_stale_brokers(1_000) == []
    assert manager.find_stale_brokers(1_010) == []
    assert manager.find_stale_brokers(1_011) == [4]


def test_touch_and_shutdown_of_an_unregistered_broker_fail() -> None:
    manager = BrokerHeartbeatManager()
    with pytest.raises(IllegalStateError, match="broker 3 is not registered"):
        manager.touch(3, fenced=False, metadata_offset=0, now_ms=0)
    manager.register(3, 0, fenced=True, now_ms=0)
    with pytest.raises(IllegalStateError, match="fenced broker 3"):
        manager.maybe_update_controlled_shutdown_offset(3, 10)


def test_the_controlled_shutdown_offset_is_set_once_and_fencing_clears_it() -> None:
    manager = manager_with((0, False))
    manager.maybe_update_controlled_shutdown_offset(0, 42)
    manager.maybe_update_controlled_shutdown_offset(0, 50)
    assert manager.controlled_shutdown_offset(0) == 42
    assert manager.current_state(0) is CONTROLLED_SHUTDOWN
    manager.touch(0, fenced=True, metadata_offset=60, now_ms=1)
    assert manager.controlled_shutdown_offset(0) is None
    assert manager.current_state(0) is FENCED


def test_lowest_active_offset_ignores_fenced_and_shutting_down_brokers() -> None:
    manager = manager_with((0, False), (1, False), (2, True))
    assert manager.lowest_active_offset() == -1
    manager.touch(0, fenced=False, metadata_offset=30, now_ms=1)
    manager.touch(1, fenced=False, metadata_offset=20, now_ms=1)
    manager.touch(2, fenced=True, metadata_offset=1, now_ms=1)
    assert manager.lowest_active_offset() == 20
    manager.maybe_update_controlled_shutdown_offset(1, 25)
    assert manager.lowest_active_offset() == 30
    manager.fence(0)
    assert manager.lowest_active_offset() == INT64_MAX


def test_usable_brokers_skip_those_shutting_down() -> None:
    manager = manager_with((0, False), (1, True), (2, False))
    manager.maybe_update_controlled_shutdown_offset(2, 5)
    racks = {0: "a", 1: None, 2: "b"}
    assert list(manager.usable_brokers(racks.get)) == [
        UsableBroker(0, "a", False),
        UsableBroker(1, None, True),
    ]


def test_register_keeps_the_offset_only_when_fencing_changes() -> None:
    # Kafka's register: a change of fencing keeps the broker's metadata offset, a register
    # in the same state forgets it.
    manager = manager_with((0, False))
    manager.touch(0, fenced=False, metadata_offset=9, now_ms=1)
    manager.register(0, 0, fenced=False)
    assert manager.lowest_active_offset() == -1
    manager.touch(0, fenced=True, metadata_offset=9, now_ms=1)
    manager.register(0, 0, fenced=False)
    assert manager.lowest_active_offset() == 9


@pytest.mark.parametrize(
    ("fenced", "request_", "leads", "expected"),
    [
        # A fenced broker is unfenced once it has replayed its registration (offset 10).
        (True, heartbeat(0, 9), False, FENCED),
        (True, heartbeat(0, 10), False, UNFENCED),
        (True, heartbeat(0, 10, want_fence=True), False, FENCED),
        (True, heartbeat(0, 0, want_shut_down=True), False, SHUTDOWN_NOW),
        # An unfenced broker.
        (False, heartbeat(0, 12), True, UNFENCED),
        (False, heartbeat(0, 12, want_fence=True), True, FENCED),
        (False, heartbeat(0, 12, want_fence=True, want_shut_down=True), True, SHUTDOWN_NOW),
        (False, heartbeat(0, 12, want_shut_down=True), True, CONTROLLED_SHUTDOWN),
        (False, heartbeat(0, 12, want_shut_down=True), False, SHUTDOWN_NOW),
    ],
)
def test_next_broker_state(
    fenced: bool, request_: BrokerHeartbeatRequest, leads: bool, expected: BrokerControlState
) -> None:
    manager = manager_with((0, fenced))
    states = manager.next_broker_state(0, request_, 10, lambda: leads)
    assert states.current is (FENCED if fenced else UNFENCED)
    assert states.next is expected


def test_controlled_shutdown_ends_once_leaders_moved_and_active_brokers_caught_up() -> None:
    manager = manager_with((0, False), (1, False))
    manager.touch(1, fenced=False, metadata_offset=40, now_ms=1)
    manager.maybe_update_controlled_shutdown_offset(0, 50)
    shut_down = heartbeat(0, 55, want_shut_down=True)
    assert manager.next_broker_state(0, shut_down, 10, lambda: True).next is CONTROLLED_SHUTDOWN
    # Leaders moved, but broker 1 has not replayed the shutdown offset yet.
    assert manager.next_broker_state(0, shut_down, 10, lambda: False).next is CONTROLLED_SHUTDOWN
    manager.touch(1, fenced=False, metadata_offset=50, now_ms=2)
    assert manager.next_broker_state(0, shut_down, 10, lambda: False).next is SHUTDOWN_NOW


def test_control_states_say_what_the_heartbeat_response_says() -> None:
    assert (FENCED.fenced, FENCED.in_controlled_shutdown, FENCED.should_shut_down) == (
        True,
        False,
        False,
    )
    assert CONTROLLED_SHUTDOWN.in_controlled_shutdown and not CONTROLLED_SHUTDOWN.fenced
    assert SHUTDOWN_NOW.should_shut_down and SHUTDOWN_NOW.fenced
    assert not (UNFENCED.fenced or UNFENCED.should_shut_down)
