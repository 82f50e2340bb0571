"""``MemoryChannel``: the in-memory :class:`~kraft.raft.channel.NetworkChannel` of the simulator
and the tests, the counterpart of :class:`~kraft.raft.channel.DequeMessageQueue`.

It delivers nothing: what the client sends waits in :attr:`MemoryChannel.outbox`, requests and
responses in the one order the client sent them, until the owner drains it. The simulator
routes each drained message through its network; ``kraft.testing.MockNetworkChannel`` builds on
it to let a test look at what was sent by message type.
"""

from __future__ import annotations

from kraft.protocol.envelope import OutboundRequest, OutboundResponse

__all__ = ["MemoryChannel", "OutboundMessage"]

OutboundMessage = OutboundRequest | OutboundResponse


class MemoryChannel:
    """Keeps what the client sends, in order; correlation ids count up from
    ``first_correlation_id`` (give each node its own range to tell their requests apart)."""

    __slots__ = ("_next_correlation_id", "outbox")

    def __init__(self, first_correlation_id: int = 1) -> None:
        self._next_correlation_id = first_correlation_id
        self.outbox: list[OutboundMessage] = []

    def new_correlation_id(self) -> int:
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        return correlation_id

    def send(self, request: OutboundRequest) -> None:
        self.outbox.append(request)

    def respond(self, response: OutboundResponse) -> None:
        self.outbox.append(response)

    def drain(self) -> list[OutboundMessage]:
        """Remove and return everything sent, in the order it was sent."""
        sent, self.outbox = self.outbox, []
        return sent
