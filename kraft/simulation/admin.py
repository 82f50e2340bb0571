"""The simulated admin client: what ``kafka-metadata-quorum add-controller`` and
``remove-controller`` do against a quorum (KIP-853), on the simulated network.

It sends an AddRaftVoter or RemoveRaftVoter request to the leader as an anonymous client (source
:data:`ADMIN_ID`, as Kafka's admin client, which has no replica id) and waits for the answer.
Its messages take the network's latency and loss like any other, but no partition cuts the
admin off (it stands outside the cluster's groups), and a request sent to a node that stopped
since, or answered by one that stopped since, is lost as a reset connection is. An answer that
does not come within the request's ``timeout_ms`` plus the quorum's request timeout counts as
``REQUEST_TIMED_OUT`` (the admin client's own timeout).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kraft.common.clock import ManualClock
from kraft.common.uuids import ZERO_UUID
from kraft.protocol.envelope import InboundRequest, OutboundResponse
from kraft.protocol.errors import error_name
from kraft.protocol.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
)
from kraft.simulation.events import Event
from kraft.simulation.network import SimNetwork
from kraft.simulation.node import SimNode

__all__ = ["ADMIN_ID", "AdminClient", "VoterChange"]

#: The admin client's id on the simulated network: -1, an anonymous client.
ADMIN_ID = -1
#: The error an answer that never came counts as (the admin client's own timeout).
_TIMED_OUT = "REQUEST_TIMED_OUT"


@dataclass(frozen=True, slots=True)
class VoterChange:
    """One answer to a voter change: ``kind`` ``"add"`` or ``"remove"``, the replica
    ``node_id``, Kafka's ``error`` name (``"NONE"``: the change committed), when the answer
    came (``time_ms``), the ``leader`` it was sent to and when (``sent_ms``)."""

    kind: str
    node_id: int
    error: str
    time_ms: int
    leader: int
    sent_ms: int


class _Pending:
    __slots__ = ("kind", "leader", "node_id", "sent_ms")

    def __init__(self, kind: str, node_id: int, leader: int, sent_ms: int) -> None:
        self.kind = kind
        self.node_id = node_id
        self.leader = leader
        self.sent_ms = sent_ms


class AdminClient:
    """Sends voter changes and collects their answers in :attr:`changes`.

    ``call_at(at_ms, action)`` schedules an event, ``wake(node)`` has a node polled now and
    ``emit(kind, **fields)`` logs an event: the cluster's.
    """

    def __init__(
        self,
        network: SimNetwork,
        clock: ManualClock,
        request_timeout_ms: int,
        *,
        call_at: Callable[[int, Callable[[], None]], None],
        wake: Callable[[SimNode], None],
        emit: Callable[..., Event],
    ) -> None:
        self.network = network
        self.clock = clock
        self.request_timeout_ms = request_timeout_ms
        self.changes: list[VoterChange] = []
        self._pending: dict[int, _Pending] = {}
        self._next_correlation_id = 1
        self._call_at = call_at
        self._wake = wake
        self._emit = emit

    def send(
        self,
        kind: str,
        node_id: int,
        leader: SimNode,
        body: AddRaftVoterRequest | RemoveRaftVoterRequest,
        timeout_ms: int,
    ) -> None:
        """Send ``body`` (the change ``kind`` of replica ``node_id``) to ``leader``."""
        now = self.clock.now_ms()
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        self._pending[correlation_id] = _Pending(kind, node_id, leader.node_id, now)
        self._emit(
            "voter_change_requested", node=node_id, peer=leader.node_id, details={"change": kind}
        )
        incarnation = leader.incarnation

        def arrive() -> None:
            if leader.client is None or leader.incarnation != incarnation:
                return  # the connection to a node that stopped is gone, and the request
            leader.queue.add(
                InboundRequest(correlation_id, ADMIN_ID, ZERO_UUID, None, body, self.clock.now_ms())
            )
            if not leader.paused:
                self._wake(leader)

        for at in self.network.delivery_times(ADMIN_ID, leader.node_id, now):
            self._call_at(at, arrive)
        self._call_at(
            now + timeout_ms + self.request_timeout_ms,
            lambda: self._answer(correlation_id, _TIMED_OUT),
        )

    def response_sent(self, node: SimNode, envelope: OutboundResponse) -> None:
        """``node`` answered the admin (the router hands over what goes to :data:`ADMIN_ID`)."""
        body: Any = envelope.body
        if not isinstance(body, AddRaftVoterResponse | RemoveRaftVoterResponse):
            return
        error = error_name(body.error_code)
        incarnation = node.incarnation
        correlation_id = envelope.correlation_id

        def arrive() -> None:
            if node.incarnation == incarnation:
                self._answer(correlation_id, error)

        times = self.network.delivery_times(node.node_id, ADMIN_ID, self.clock.now_ms())
        if times:
            self._call_at(times[0], arrive)

    def _answer(self, correlation_id: int, error: str) -> None:
        pending = self._pending.pop(correlation_id, None)
        if pending is None:
            return  # answered already (a duplicate, or the admin's timeout came first)
        now = self.clock.now_ms()
        self.changes.append(
            VoterChange(pending.kind, pending.node_id, error, now, pending.leader, pending.sent_ms)
        )
        self._emit(
            "voter_change_answered",
            node=pending.node_id,
            peer=pending.leader,
            details={"change": pending.kind, "error": error},
        )
