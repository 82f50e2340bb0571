"""The messages between simulated nodes, from a sender's outbox to the destination's queue
(Kafka's ``MessageRouter`` in ``RaftEventSimulationTest``).

A node's outbox is routed after each of its polls: the :class:`SimNetwork` says when the copies
of each message arrive (none when it is lost), and each arrival becomes an event of the
cluster's scheduler. A copy is delivered only if, when it arrives, its link is not cut, the
destination still runs the process the message was sent to, and the sender has not stopped
since (a stop resets its connections). Every step is an event in the log.

A request sent to a bootstrap server (a negative id) reaches the node listening at that
server's address (the sender's ``bootstrap_servers``), and its response comes back from that
negative id, as it would over a real connection to the address. A response to the admin
client (:data:`~kraft.simulation.admin.ADMIN_ID`) is handed to it.
"""

from __future__ import annotations

from collections.abc import Callable

from kraft.common.clock import ManualClock
from kraft.common.uuids import ZERO_UUID
from kraft.protocol.envelope import (
    InboundRequest,
    InboundResponse,
    OutboundRequest,
    OutboundResponse,
)
from kraft.protocol.messages import VoteRequest, VoteResponse
from kraft.simulation.admin import ADMIN_ID
from kraft.simulation.events import Event, EventLog
from kraft.simulation.network import SimNetwork
from kraft.simulation.node import SIM_PORT_BASE, SimNode

__all__ = ["MessageRouter", "Transit"]


class Transit:
    """A message on its way: who sent it to whom, and the incarnations both had then."""

    __slots__ = ("alias", "dst", "dst_incarnation", "envelope", "src", "src_incarnation")

    def __init__(
        self,
        src: SimNode,
        dst: SimNode,
        alias: int | None,
        envelope: OutboundRequest | OutboundResponse,
    ) -> None:
        self.src = src
        self.dst = dst
        self.src_incarnation = src.incarnation
        self.dst_incarnation = dst.incarnation
        self.alias = alias
        self.envelope = envelope


class MessageRouter:
    """Routes the cluster's messages over ``network``.

    ``deliver_at(at_ms, transit)`` schedules an arrival, ``wake(node)`` has a node polled now,
    ``emit_node(node, kind, **fields)`` logs an event with the node's state, and
    ``to_admin(node, response)`` takes a response to the admin client: the cluster's.
    ``message_events=False`` leaves out the events of messages sent, duplicated and delivered
    (a dropped message is always logged).
    """

    __slots__ = (
        "_deliver_at",
        "_emit_node",
        "_to_admin",
        "_wake",
        "clock",
        "events",
        "message_events",
        "network",
        "nodes",
    )

    def __init__(
        self,
        nodes: dict[int, SimNode],
        network: SimNetwork,
        events: EventLog,
        clock: ManualClock,
        *,
        message_events: bool,
        deliver_at: Callable[[int, Transit], None],
        wake: Callable[[SimNode], None],
        emit_node: Callable[..., Event],
        to_admin: Callable[[SimNode, OutboundResponse], None],
    ) -> None:
        self.nodes = nodes
        self.network = network
        self.events = events
        self.clock = clock
        self.message_events = message_events
        self._deliver_at = deliver_at
        self._wake = wake
        self._emit_node = emit_node
        self._to_admin = to_admin

    def route(self, node: SimNode) -> None:
        """Send what ``node``'s outbox holds."""
        messages = node.channel.drain()
        now = self.clock.now_ms()
        for envelope in messages:
            destination = envelope.destination
            alias: int | None = None
            if isinstance(envelope, OutboundResponse):
                if destination == ADMIN_ID:
                    self._to_admin(node, envelope)
                    continue
                alias = node.request_aliases.pop((destination, envelope.correlation_id), None)
                if isinstance(envelope.body, VoteResponse):
                    self._vote_event(node, destination, envelope)
            elif destination < -1:
                alias = destination
                destination = self._resolve_bootstrap(node, destination)
            target = self.nodes.get(destination)
            name = type(envelope.body).__name__
            if target is None:
                self._message_event(
                    now, "message_dropped", node, destination, name, "unknown destination"
                )
                continue
            if self.message_events:
                self._message_event(now, "message_sent", node, destination, name)
            times = self.network.delivery_times(node.node_id, destination, now)
            if not times:
                self._message_event(now, "message_dropped", node, destination, name, "lost")
                continue
            if len(times) > 1 and self.message_events:
                self._message_event(now, "message_duplicated", node, destination, name)
            transit = Transit(node, target, alias, envelope)
            for at in times:
                self._deliver_at(at, transit)

    def _message_event(
        self, now: int, kind: str, node: SimNode, peer: int, message: str, reason: str = ""
    ) -> None:
        """A message's event: sent, duplicated, or dropped (with ``reason``)."""
        if reason:
            self.events.emit(
                now,
                kind,
                node=node.node_id,
                peer=peer,
                message=message,
                details={"reason": reason},
            )
        else:
            self.events.emit(now, kind, node=node.node_id, peer=peer, message=message)

    def _resolve_bootstrap(self, node: SimNode, alias: int) -> int:
        index = -2 - alias
        servers = node.bootstrap_servers
        if 0 <= index < len(servers):
            listener = servers[index].port - SIM_PORT_BASE
            return listener if listener in self.nodes else alias
        return alias

    def _vote_event(self, node: SimNode, peer: int, envelope: OutboundResponse) -> None:
        body = envelope.body
        assert isinstance(body, VoteResponse)
        pre_vote = node.vote_kinds.pop((peer, envelope.correlation_id), False)
        self._emit_node(
            node,
            "vote_granted" if body.vote_granted else "vote_refused",
            peer=peer,
            details={"pre_vote": pre_vote, "error_code": body.error_code},
        )

    def deliver(self, transit: Transit) -> None:
        """A copy of a message arrives now: queue it at its destination, or drop it."""
        src, dst, envelope = transit.src, transit.dst, transit.envelope
        name = type(envelope.body).__name__
        now = self.clock.now_ms()
        reason = None
        if dst.client is None or dst.incarnation != transit.dst_incarnation:
            reason = "destination down"
        elif src.incarnation != transit.src_incarnation:
            reason = "connection reset"
        elif (src.node_id, dst.node_id) in self.network.blocked:
            reason = "partitioned"
        if reason is not None:
            self.events.emit(
                now,
                "message_dropped",
                node=src.node_id,
                peer=dst.node_id,
                message=name,
                details={"reason": reason},
            )
            return
        if self.message_events:
            self.events.emit(
                now,
                "message_delivered",
                node=dst.node_id,
                peer=src.node_id,
                message=name,
            )
        if isinstance(envelope, OutboundRequest):
            key = (src.node_id, envelope.correlation_id)
            if transit.alias is not None:
                dst.request_aliases[key] = transit.alias
            body = envelope.body
            if isinstance(body, VoteRequest):
                dst.vote_kinds[key] = body.pre_vote
            dst.queue.add(
                InboundRequest(
                    envelope.correlation_id,
                    src.node_id,
                    ZERO_UUID,
                    None,
                    body,
                    now,
                )
            )
        else:
            source = src.node_id if transit.alias is None else transit.alias
            dst.queue.add(InboundResponse(envelope.correlation_id, source, envelope.body, now))
        if not dst.paused:
            self._wake(dst)
