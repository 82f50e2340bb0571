"""What a node's listener lets peers hold: connections, idle time, partial requests.

Kafka's socket-server limits under their names (``max.connections`` is ``max_connections``
and so on, as :mod:`kraft.runtime.config` translates every Kafka name), with what each one
counted since the channel started (:class:`ConnectionStats`, read by the metrics). What the
transport does when a limit is hit is in docs/transport.md ("Limits"); docs/operations.md
lists the keys.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Final

from kraft.common.limits import INT32_MAX
from kraft.config import ConfigError
from kraft.protocol.frame import DEFAULT_MAX_FRAME_SIZE

__all__ = [
    "DEFAULT_CONNECTIONS_MAX_IDLE_MS",
    "DEFAULT_QUEUED_MAX_REQUEST_BYTES",
    "ConnectionLimits",
    "ConnectionStats",
    "default_max_connections",
]

#: Kafka's ``connections.max.idle.ms`` for brokers and controllers (10 minutes).
DEFAULT_CONNECTIONS_MAX_IDLE_MS: Final = 600_000
#: Room for two partial requests of the default maximum frame size at once. Kafka's default
#: (-1) does not bound them: 60 peers each sending most of a 16 MiB frame took a node past
#: 1 GB. Every request a replica sends fits in the free part each connection has
#: (``DEFAULT_FREE_PARTIAL_BYTES``), so the budget only limits unusual, large requests.
DEFAULT_QUEUED_MAX_REQUEST_BYTES: Final = 2 * DEFAULT_MAX_FRAME_SIZE
#: Kafka's ``max.connections.per.ip`` default (``Int.MaxValue``: no limit).
UNLIMITED_PER_IP: Final = INT32_MAX
#: Without a descriptor limit (RLIMIT_NOFILE unlimited), the default connection cap.
_UNLIMITED_NOFILE_MAX_CONNECTIONS: Final = 65_536
#: Connections beyond ``max_connections`` kept for peers at a voter's address, per voter:
#: its connection to this node and a replacement opened while the old one closes.
VOTER_RESERVED_CONNECTIONS: Final = 2


def default_max_connections() -> int:
    """Half the process's descriptors (the soft RLIMIT_NOFILE): the other half stays for the
    log's segments, snapshots, the quorum-state file, outbound connections and Python itself,
    so that no number of peers can make a segment roll or a quorum-state write fail with
    "Too many open files". Kafka's default (``Int.MaxValue``) has no such bound."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _UNLIMITED_NOFILE_MAX_CONNECTIONS
    return max(1, soft // 2)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The limits on connections peers open to this node (Kafka's names, translated).

    ``max_connections`` ``None`` means :func:`default_max_connections`, taken when the
    channel starts.
    """

    #: Kafka's ``max.connections``: inbound connections open at once (voters' addresses get
    #: :data:`VOTER_RESERVED_CONNECTIONS` more each).
    max_connections: int | None = None
    #: Kafka's ``max.connections.per.ip``.
    max_connections_per_ip: int = UNLIMITED_PER_IP
    #: Kafka's ``connections.max.idle.ms``: a connection that sends nothing this long is
    #: closed.
    connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS
    #: Kafka's ``queued.max.request.bytes``: the bytes of partially received requests, across
    #: all connections, beyond each connection's free part.
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES

    def __post_init__(self) -> None:
        if self.max_connections is not None and self.max_connections < 1:
            raise ConfigError(f"max_connections must be at least 1, not {self.max_connections}")
        if self.max_connections_per_ip < 1:
            raise ConfigError(
                f"max_connections_per_ip must be at least 1, not {self.max_connections_per_ip}"
            )
        if self.connections_max_idle_ms < 1:
            raise ConfigError(
                f"connections_max_idle_ms must be positive, not {self.connections_max_idle_ms}"
            )
        if self.queued_max_request_bytes < 0:
            raise ConfigError(
                "queued_max_request_bytes must not be negative (kraft has no unbounded "
                f"setting), not {self.queued_max_request_bytes}"
            )


class ConnectionStats:
    """What the listener's limits did since the channel started.

    Written on the channel's trio thread only; read from any thread (int reads are atomic).
    """

    __slots__ = (
        "closed_idle",
        "closed_request_bytes",
        "closed_slow_request",
        "partial_request_bytes",
        "refused_max_connections",
        "refused_per_ip",
    )

    def __init__(self) -> None:
        #: Connections refused at accept: ``max_connections`` reached.
        self.refused_max_connections = 0
        #: Connections refused at accept: ``max_connections_per_ip`` reached for their address.
        self.refused_per_ip = 0
        #: Connections closed after ``connections_max_idle_ms`` without a byte.
        self.closed_idle = 0
        #: Connections closed because a request stayed incomplete for a request timeout.
        self.closed_slow_request = 0
        #: Connections closed because their partial request did not fit the budget.
        self.closed_request_bytes = 0
        #: Bytes held now in partially received requests, over all inbound connections.
        self.partial_request_bytes = 0
