"""Per-destination request bookkeeping: one request in flight, timeouts, retry backoff.

Kafka's ``RequestManager`` (KIP-595): the client sends at most one request to a
node at a time; a response counts only if it answers that very request (its correlation id),
so a response that arrives after the request timed out, or after the client changed state
(every transition calls :meth:`RequestManager.reset_all`), is dropped as stale. A failed
request backs the destination off for ``retry_backoff_ms``; a timed-out one frees it at once.

Each request in flight carries its own timeout: ``request_timeout_ms`` unless the sender
gives another (a follower's Fetch has a shorter one, docs/protocol.md §1.4.1).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kraft.protocol.envelope import OutboundRequest

if TYPE_CHECKING:
    from kraft.protocol.messages import Request
    from kraft.raft.channel import NetworkChannel

__all__ = ["RequestManager", "bootstrap_server_id"]


def bootstrap_server_id(index: int) -> int:
    """The destination id of ``QuorumConfig.bootstrap_servers[index]``: -2, -3, ...

    Requests to a bootstrap server go to these negative ids; -1 stays "no id".
    """
    return -2 - index


def _no_address(destination: int) -> tuple[str, int] | None:
    return None


@dataclass(slots=True)
class _Connection:
    correlation_id: int | None = None  # the request in flight, if any
    api_key: int | None = None  # its API key: a response of another API is not its answer
    sent_ms: int = 0
    timeout_ms: int = 0  # the request in flight times out at sent_ms + timeout_ms
    backoff_until_ms: int = 0

    def in_flight(self, now_ms: int) -> bool:
        return self.correlation_id is not None and now_ms < self.sent_ms + self.timeout_ms


class RequestManager:
    """Tracks, for each destination, the request in flight and any backoff."""

    def __init__(
        self,
        bootstrap_servers: Iterable[int],
        retry_backoff_ms: int,
        request_timeout_ms: int,
        rand: random.Random,
    ) -> None:
        self._bootstrap_servers = list(bootstrap_servers)
        self._retry_backoff_ms = retry_backoff_ms
        self._request_timeout_ms = request_timeout_ms
        self._rand = rand
        self._connections: dict[int, _Connection] = {}
        #: Where a destination listens, as the core knows it (the voter set, the leader's
        #: endpoints): carried on each request for the channel (KIP-853 voters move).
        self.address_of: Callable[[int], tuple[str, int] | None] = _no_address

    def _connection(self, node: int) -> _Connection:
        connection = self._connections.get(node)
        if connection is None:
            connection = self._connections[node] = _Connection()
        return connection

    # -- queries ---------------------------------------------------------------------------
    def has_request_in_flight(self, node: int, now_ms: int) -> bool:
        connection = self._connections.get(node)
        return connection is not None and connection.in_flight(now_ms)

    def has_request_timed_out(self, node: int, now_ms: int) -> bool:
        connection = self._connections.get(node)
        return (
            connection is not None
            and connection.correlation_id is not None
            and now_ms >= connection.sent_ms + connection.timeout_ms
        )

    def is_backing_off(self, node: int, now_ms: int) -> bool:
        connection = self._connections.get(node)
        return connection is not None and now_ms < connection.backoff_until_ms

    def is_ready(self, node: int, now_ms: int) -> bool:
        """Nothing in flight (a timed-out request no longer counts) and not backing off."""
        return not self.has_request_in_flight(node, now_ms) and not self.is_backing_off(
            node, now_ms
        )

    def remaining_request_time_ms(self, node: int, now_ms: int) -> int:
        if not self.has_request_in_flight(node, now_ms):
            return 0
        connection = self._connections[node]
        return connection.sent_ms + connection.timeout_ms - now_ms

    def remaining_backoff_ms(self, node: int, now_ms: int) -> int:
        connection = self._connections.get(node)
        if connection is None:
            return 0
        return max(0, connection.backoff_until_ms - now_ms)

    def time_until_ready_ms(self, node: int, now_ms: int) -> int:
        return max(
            self.remaining_request_time_ms(node, now_ms), self.remaining_backoff_ms(node, now_ms)
        )

    def is_response_expected(
        self, node: int, correlation_id: int, api_key: int | None = None
    ) -> bool:
        """Whether this answers the request in flight to ``node`` (and, given ``api_key``,
        is a response of the same API)."""
        connection = self._connections.get(node)
        return (
            connection is not None
            and connection.correlation_id == correlation_id
            and (api_key is None or connection.api_key is None or connection.api_key == api_key)
        )

    @property
    def bootstrap_servers(self) -> list[int]:
        return list(self._bootstrap_servers)

    def set_bootstrap_servers(self, servers: Iterable[int]) -> None:
        """Replace the servers an observer asks for the leader (the voters, when they change
        and no ``bootstrap_servers`` are configured)."""
        self._bootstrap_servers = list(servers)

    def remaining_any_request_time_ms(self, now_ms: int) -> int:
        """Time until the earliest request in flight times out (0: none in flight)."""
        # A loop rather than a generator: a follower asks on every poll.
        soonest: int | None = None
        for c in self._connections.values():
            if c.in_flight(now_ms):
                left = c.sent_ms + c.timeout_ms - now_ms
                if soonest is None or left < soonest:
                    soonest = left
        return 0 if soonest is None else max(0, soonest)

    def has_any_inflight_request(self, now_ms: int) -> bool:
        """Whether any destination has a request in flight (not timed out)."""
        return any(c.in_flight(now_ms) for c in self._connections.values())

    def find_ready_bootstrap_server(self, now_ms: int) -> int | None:
        """A bootstrap server ready for a request, starting the search at a random one."""
        servers = self._bootstrap_servers
        if not servers:
            return None
        start = self._rand.randrange(len(servers))
        for i in range(len(servers)):
            node = servers[(start + i) % len(servers)]
            if self.is_ready(node, now_ms):
                return node
        return None

    def backoff_before_any_bootstrap_server_ms(self, now_ms: int) -> int:
        """How long until some bootstrap server is ready (0 if one is)."""
        if not self._bootstrap_servers:
            return 0
        return min(self.time_until_ready_ms(n, now_ms) for n in self._bootstrap_servers)

    # -- sending ---------------------------------------------------------------------------
    def maybe_send(
        self,
        channel: NetworkChannel,
        destination: int,
        build: Callable[[int], Request],
        now_ms: int,
        timeout_ms: int | None = None,
    ) -> int:
        """Send ``build(destination)`` if the destination is ready, to time out after
        ``timeout_ms`` (``request_timeout_ms`` when None); return the milliseconds until this
        destination needs attention again (its backoff, or the request's timeout)."""
        if self.is_backing_off(destination, now_ms):
            return self.remaining_backoff_ms(destination, now_ms)
        if self.is_ready(destination, now_ms):
            body = build(destination)
            correlation_id = channel.new_correlation_id()
            if timeout_ms is None:
                timeout_ms = self._request_timeout_ms
            self.on_request_sent(
                destination, correlation_id, now_ms, body.API_KEY.value, timeout_ms
            )
            channel.send(
                OutboundRequest(
                    correlation_id, destination, body, now_ms, self.address_of(destination)
                )
            )
            return timeout_ms
        return self.remaining_request_time_ms(destination, now_ms)

    # -- updates ---------------------------------------------------------------------------
    def on_request_sent(
        self,
        node: int,
        correlation_id: int,
        now_ms: int,
        api_key: int | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        connection = self._connection(node)
        connection.correlation_id = correlation_id
        connection.api_key = api_key
        connection.sent_ms = now_ms
        connection.timeout_ms = self._request_timeout_ms if timeout_ms is None else timeout_ms
        connection.backoff_until_ms = 0

    def on_response_result(
        self, node: int, correlation_id: int, success: bool, now_ms: int
    ) -> None:
        """The expected response arrived (or failed); a failure backs the node off."""
        if not self.is_response_expected(node, correlation_id):
            return
        connection = self._connections[node]
        connection.correlation_id = None
        connection.api_key = None
        connection.backoff_until_ms = 0 if success else now_ms + self._retry_backoff_ms

    def reset(self, node: int) -> None:
        self._connections.pop(node, None)

    def reset_all(self) -> None:
        """Forget every request in flight: their responses will be dropped as stale."""
        self._connections.clear()
