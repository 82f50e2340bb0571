"""``MockNetworkChannel``: the simulator's in-memory channel, with a test's view of what was
sent."""

from __future__ import annotations

from typing import Any, TypeVar

from kraft.protocol.envelope import OutboundRequest, OutboundResponse
from kraft.raft.memory_channel import MemoryChannel

__all__ = ["MockNetworkChannel"]

E = TypeVar("E", OutboundRequest, OutboundResponse)


class MockNetworkChannel(MemoryChannel):
    """A ``NetworkChannel`` that keeps what it is given, in order, for a test to look at:
    the requests and the responses apart, and by message type."""

    __slots__ = ()

    @property
    def requests(self) -> list[OutboundRequest]:
        """The requests sent and not drained yet, in order."""
        return [m for m in self.outbox if isinstance(m, OutboundRequest)]

    @property
    def responses(self) -> list[OutboundResponse]:
        """The responses sent and not drained yet, in order."""
        return [m for m in self.outbox if isinstance(m, OutboundResponse)]

    def drain_requests(self, kind: type[Any] | None = None) -> list[OutboundRequest]:
        """Remove and return the requests sent (only those whose body is a ``kind``, if given)."""
        return self._take(OutboundRequest, kind)

    def drain_responses(self, kind: type[Any] | None = None) -> list[OutboundResponse]:
        """Remove and return the responses sent (only those whose body is a ``kind``, if given)."""
        return self._take(OutboundResponse, kind)

    def _take(self, envelope: type[E], kind: type[Any] | None) -> list[E]:
        taken: list[E] = []
        kept: list[Any] = []
        for message in self.outbox:
            if isinstance(message, envelope) and (kind is None or isinstance(message.body, kind)):
                taken.append(message)
            else:
                kept.append(message)
        self.outbox = kept
        return taken
