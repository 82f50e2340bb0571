"""The brokers' sessions as the active controller sees them (Kafka's ``BrokerHeartbeatManager``).

Only the active controller keeps this state, and not in timeline collections: it is rebuilt
when a controller becomes active (``ClusterControlManager.activate``), each registered broker
getting a fresh session. A broker's session lasts ``broker.session.timeout.ms`` (9 s) from its
last heartbeat; an unfenced broker whose session ran out is stale, and the controller fences it.

A heartbeat counts from when it arrives, not from when the controller's queue gets to it
(KAFKA-17793, Kafka's ``BrokerHeartbeatTracker``): :meth:`BrokerHeartbeatManager.record_contact`
is called on the caller's thread before the heartbeat is queued, so that a queue busy with a
burst of operations for longer than the session timeout does not fence healthy brokers.

There is no clock here: every call that depends on time takes ``now_ms``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from kraft.common.limits import INT64_MAX
from kraft.errors import IllegalStateError
from kraft.protocol.controller_messages import BrokerHeartbeatRequest

__all__ = [
    "BROKER_SESSION_TIMEOUT_MS",
    "BrokerControlState",
    "BrokerControlStates",
    "BrokerHeartbeatManager",
    "UsableBroker",
]

#: Kafka's ``broker.session.timeout.ms`` default.
BROKER_SESSION_TIMEOUT_MS: Final = 9000


class BrokerControlState(enum.Enum):
    """Where a broker is in its life as the controller drives it (Kafka's
    ``BrokerControlState``): each carries what a heartbeat response says about it."""

    FENCED = (True, False, False)
    UNFENCED = (False, False, False)
    CONTROLLED_SHUTDOWN = (False, True, False)
    SHUTDOWN_NOW = (True, False, True)

    @property
    def fenced(self) -> bool:
        return self.value[0]

    @property
    def in_controlled_shutdown(self) -> bool:
        return self.value[1]

    @property
    def should_shut_down(self) -> bool:
        return self.value[2]


@dataclass(frozen=True, slots=True)
class BrokerControlStates:
    """A broker's state before and after a heartbeat (Kafka's ``BrokerControlStates``)."""

    current: BrokerControlState
    next: BrokerControlState


@dataclass(frozen=True, slots=True)
class UsableBroker:
    """A broker replicas may be placed on (Kafka's ``UsableBroker``): not shutting down;
    fenced brokers are usable only when no unfenced one is left."""

    id: int
    rack: str | None
    fenced: bool


@dataclass(slots=True)
class _Session:
    """One broker's session at its registered ``epoch``. ``last_contact_ms`` ``None``:
    registered while the controller was active but not heard from yet; the session starts at
    the next staleness check."""

    broker_id: int
    epoch: int
    fenced: bool = True
    last_contact_ms: int | None = None
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0


class BrokerHeartbeatManager:
    """The registered brokers' sessions: last contact, the metadata offset each has replayed,
    and controlled shutdown."""

    def __init__(self, session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS) -> None:
        self.session_timeout_ms = session_timeout_ms
        self._sessions: dict[int, _Session] = {}
        #: (broker epoch, arrival ms) of each broker's latest heartbeat, written by
        #: :meth:`record_contact` from any thread. No lock: under the GIL one dict item
        #: assignment of an immutable tuple is atomic, and the queue's thread only reads it
        #: key by key (``get``/``pop``), never iterating it while another thread may insert.
        self._contacts: dict[int, tuple[int, int]] = {}

    # -- registration (from replay) --------------------------------------------

    def register(self, broker_id: int, epoch: int, fenced: bool, now_ms: int | None = None) -> None:
        """Track ``broker_id`` at ``epoch``, fenced or not (Kafka's ``register``); a change of
        fencing keeps the broker's metadata offset, and ``now_ms`` (when known) is a contact."""
        session = self._sessions.get(broker_id)
        if session is None:
            session = self._sessions[broker_id] = _Session(broker_id, epoch)
        elif session.fenced == fenced:
            session.metadata_offset = -1
        session.epoch = epoch
        if now_ms is not None:
            session.last_contact_ms = now_ms
        self._set_fenced(session, fenced)

    def remove(self, broker_id: int) -> None:
        self._sessions.pop(broker_id, None)
        self._contacts.pop(broker_id, None)

    def fence(self, broker_id: int) -> None:
        """Stop counting ``broker_id`` as unfenced (Kafka's ``fence``); a controlled shutdown
        in progress stays, so that its next heartbeat is told to shut down."""
        session = self._sessions.get(broker_id)
        if session is not None:
            session.fenced = True

    # -- heartbeats ------------------------------------------------------------

    def record_contact(self, broker_id: int, epoch: int, now_ms: int) -> None:
        """A heartbeat from ``broker_id`` at ``epoch`` arrived at ``now_ms`` (Kafka's
        ``BrokerHeartbeatTracker.updateContactTime``); safe from any thread. It renews the
        session only if the broker is registered at ``epoch`` when the session is checked, as
        Kafka's ``maybeFenceOneStaleBroker`` ignores a contact from another epoch."""
        self._contacts[broker_id] = (epoch, now_ms)

    def touch(self, broker_id: int, fenced: bool, metadata_offset: int, now_ms: int) -> None:
        """A heartbeat from ``broker_id`` at ``now_ms``, which leaves it ``fenced`` or not."""
        session = self._session(broker_id)
        session.last_contact_ms = now_ms
        session.metadata_offset = metadata_offset
        self._set_fenced(session, fenced)

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        """Whether ``broker_id`` is unfenced and heard from within the session timeout."""
        session = self._sessions.get(broker_id)
        return session is not None and self._valid(session, now_ms)

    def find_stale_brokers(self, now_ms: int) -> list[int]:
        """The unfenced brokers whose session ran out, longest silent first (the controller
        fences them one at a time, as Kafka's ``maybeFenceOneStaleBroker`` does)."""
        stale = []
        for session in self._sessions.values():
            if session.fenced:
                continue
            last_contact_ms = self._last_contact_ms(session)
            if last_contact_ms is None:
                session.last_contact_ms = now_ms
            elif last_contact_ms + self.session_timeout_ms < now_ms:
                stale.append((last_contact_ms, session.broker_id))
        return [broker_id for _, broker_id in sorted(stale)]

    def next_check_time_ms(self) -> int | None:
        """The first millisecond at which an unfenced broker's session has run out, ``None``
        if none is unfenced. A session is still valid at last contact + timeout, so the
        check is due one millisecond later (Kafka's nanosecond clock hides the difference; a
        virtual clock checking at the boundary would find nothing stale and check again at
        once, forever)."""
        contacts = [
            contact_ms
            for s in self._sessions.values()
            if not s.fenced and (contact_ms := self._last_contact_ms(s)) is not None
        ]
        return min(contacts) + self.session_timeout_ms + 1 if contacts else None

    # -- controlled shutdown ---------------------------------------------------

    def lowest_active_offset(self) -> int:
        """The lowest metadata offset of the unfenced brokers not shutting down
        (``INT64_MAX`` when there is none)."""
        offsets = [
            s.metadata_offset
            for s in self._sessions.values()
            if not s.fenced and not s.shutting_down
        ]
        return min(offsets, default=INT64_MAX)

    def maybe_update_controlled_shutdown_offset(self, broker_id: int, offset: int) -> None:
        """``broker_id`` entered controlled shutdown at ``offset`` (kept if already set): it
        may shut down once every active broker has replayed that far."""
        session = self._session(broker_id)
        if session.fenced:
            raise IllegalStateError(f"fenced broker {broker_id} cannot enter controlled shutdown")
        if session.controlled_shutdown_offset < 0:
            session.controlled_shutdown_offset = offset

    def controlled_shutdown_offset(self, broker_id: int) -> int | None:
        session = self._sessions.get(broker_id)
        if session is None or session.controlled_shutdown_offset < 0:
            return None
        return session.controlled_shutdown_offset

    def current_state(self, broker_id: int) -> BrokerControlState:
        session = self._session(broker_id)
        if session.shutting_down:
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.FENCED if session.fenced else BrokerControlState.UNFENCED

    def next_broker_state(
        self,
        broker_id: int,
        request: BrokerHeartbeatRequest,
        register_broker_record_offset: int,
        has_leaderships: Callable[[], bool],
    ) -> BrokerControlStates:
        """The state a heartbeat moves ``broker_id`` to (Kafka's
        ``calculateNextBrokerState``): a fenced broker is unfenced once it has replayed its own
        registration record; an unfenced broker asking to shut down goes through controlled
        shutdown while it leads partitions, and may shut down once no partition is left to move
        and every active broker has replayed past its controlled shutdown offset."""
        current = self.current_state(broker_id)
        next_state = current
        if current is BrokerControlState.FENCED:
            if request.want_shut_down:
                next_state = BrokerControlState.SHUTDOWN_NOW
            elif (
                not request.want_fence
                and request.current_metadata_offset >= register_broker_record_offset
            ):
                next_state = BrokerControlState.UNFENCED
        elif current is BrokerControlState.UNFENCED:
            if request.want_fence:
                next_state = (
                    BrokerControlState.SHUTDOWN_NOW
                    if request.want_shut_down
                    else BrokerControlState.FENCED
                )
            elif request.want_shut_down:
                next_state = (
                    BrokerControlState.CONTROLLED_SHUTDOWN
                    if has_leaderships()
                    else BrokerControlState.SHUTDOWN_NOW
                )
        elif not has_leaderships():
            offset = self._session(broker_id).controlled_shutdown_offset
            if offset <= self.lowest_active_offset():
                next_state = BrokerControlState.SHUTDOWN_NOW
        return BrokerControlStates(current, next_state)

    # -- placement -------------------------------------------------------------

    def usable_brokers(self, rack_of: Callable[[int], str | None]) -> Iterator[UsableBroker]:
        """The brokers not shutting down, in registration order, with their racks."""
        for session in list(self._sessions.values()):
            if not session.shutting_down:
                yield UsableBroker(session.broker_id, rack_of(session.broker_id), session.fenced)

    def broker_ids(self) -> list[int]:
        return list(self._sessions)

    # -- internals -------------------------------------------------------------

    def _session(self, broker_id: int) -> _Session:
        session = self._sessions.get(broker_id)
        if session is None:
            raise IllegalStateError(f"broker {broker_id} is not registered")
        return session

    def _last_contact_ms(self, session: _Session) -> int | None:
        """The later of the session's last contact and its latest heartbeat's arrival at its
        epoch (a heartbeat may arrive before the queue replays what renews the session, or
        wait in the queue behind later ones)."""
        contact = self._contacts.get(session.broker_id)
        if contact is None or contact[0] != session.epoch:
            return session.last_contact_ms
        if session.last_contact_ms is None:
            return contact[1]
        return max(session.last_contact_ms, contact[1])

    def _valid(self, session: _Session, now_ms: int) -> bool:
        if session.fenced:
            return False
        last_contact_ms = self._last_contact_ms(session)
        if last_contact_ms is None:
            return True  # its session has not started yet
        return last_contact_ms + self.session_timeout_ms >= now_ms

    @staticmethod
    def _set_fenced(session: _Session, fenced: bool) -> None:
        session.fenced = fenced
        if fenced:
            # A fenced broker leaves controlled shutdown: its next heartbeat shuts it down.
            session.controlled_shutdown_offset = -1
