"""Quorum configuration: Kafka's ``controller.quorum.*`` settings as one frozen value.

``QuorumConfig`` carries what every replica of a quorum must agree on (the static voter set)
and its timers, with the defaults of Kafka's ``QuorumConfig``. ``parse_voters`` reads Kafka's
``controller.quorum.voters`` syntax, ``"1@host:9091,2@host:9092"``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field

from kraft.errors import KraftError

__all__ = [
    "ConfigError",
    "Endpoint",
    "QuorumConfig",
    "parse_bootstrap_servers",
    "parse_endpoint",
    "parse_voters",
    "split_node_id",
]


class ConfigError(KraftError, ValueError):
    """A configuration value is missing, malformed or out of range."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a replica listens."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


#: Characters a host name never holds: they separate the parts of a voters string (a host
#: that holds one is a typo, such as ``;`` for ``,``). An IPv6 literal goes in brackets.
_HOST_SEPARATORS = frozenset("@:;,[] \t")


def _parse_port(text: str, context: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise ConfigError(f"{context}: port {text!r} is not a number")
    port = int(text)
    if not 1 <= port <= 65535:
        raise ConfigError(f"{context}: port {port} is outside 1-65535")
    return port


def _parse_host(text: str, context: str) -> str:
    if text.startswith("[") and text.endswith("]"):
        literal = text[1:-1]
        try:
            ipaddress.IPv6Address(literal)
        except ValueError:
            raise ConfigError(f"{context}: {text!r} is not an IPv6 address in brackets") from None
        return literal
    if not text:
        raise ConfigError(f"{context}: the host is empty")
    bad = sorted(_HOST_SEPARATORS.intersection(text))
    if bad:
        hint = (
            " (separate entries with ',', not ';')"
            if ";" in bad
            else (" (put an IPv6 address in brackets: [::1]:9091)" if bad == [":"] else "")
        )
        shown = ", ".join(repr(c) for c in bad)
        raise ConfigError(f"{context}: host {text!r} contains {shown}{hint}")
    return text


def parse_endpoint(text: str, context: str) -> Endpoint:
    """``host:port`` or ``[ipv6]:port``; the :class:`ConfigError` names ``context``."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        raise ConfigError(f"{context}: expected host:port, got {text!r}")
    return Endpoint(_parse_host(host, context), _parse_port(port_text, context))


def split_node_id(entry: str, context: str, expected: str) -> tuple[int, str]:
    """``"ID@REST"`` as ``(ID, REST)``, the id a non-negative integer; ``ConfigError`` naming
    ``context`` and the ``expected`` form otherwise (voters, initial controllers)."""
    id_text, sep, rest = entry.partition("@")
    if not sep:
        raise ConfigError(f"{context}: expected {expected}")
    id_text = id_text.strip()
    if not (id_text.isascii() and id_text.isdigit()):
        raise ConfigError(f"{context}: id {id_text!r} is not a non-negative integer")
    return int(id_text), rest


def parse_voters(text: str) -> dict[int, Endpoint]:
    """Parse ``"1@host:port,2@host:port"`` (Kafka's ``controller.quorum.voters``)."""
    voters: dict[int, Endpoint] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        context = f"voter {entry!r}"
        voter_id, address = split_node_id(entry, context, "id@host:port")
        if voter_id in voters:
            raise ConfigError(f"{context}: voter id {voter_id} is listed twice")
        voters[voter_id] = parse_endpoint(address, context)
    if not voters:
        raise ConfigError(f"voters {text!r}: no voter (expected id@host:port,id@host:port,...)")
    return voters


def parse_bootstrap_servers(text: str) -> list[Endpoint]:
    """Parse ``"host:port,host:port"`` (Kafka's ``controller.quorum.bootstrap.servers``)."""
    servers = [
        parse_endpoint(entry, f"bootstrap server {entry.strip()!r}")
        for entry in text.split(",")
        if entry.strip()
    ]
    if not servers:
        raise ConfigError(f"bootstrap servers {text!r}: no server (expected host:port,...)")
    return servers


def _check_types(voters: object, bootstrap_servers: object) -> None:
    """The types the annotations promise, checked at run time: a voters string where the
    mapping belongs (the TOML syntax passed to the dataclass) would otherwise fail later with a
    ``TypeError`` far from the mistake."""
    if not isinstance(voters, Mapping):
        hint = " (parse_voters() reads the id@host:port syntax)" if isinstance(voters, str) else ""
        raise ConfigError(f"voters must be a mapping of id to Endpoint, not {voters!r}{hint}")
    for voter_id, endpoint in voters.items():
        if isinstance(voter_id, bool) or not isinstance(voter_id, int) or voter_id < 0:
            raise ConfigError(f"voter id {voter_id!r} is not a non-negative integer")
        if not isinstance(endpoint, Endpoint):
            raise ConfigError(f"voter {voter_id}: {endpoint!r} is not an Endpoint")
    if not isinstance(bootstrap_servers, tuple | list) or not all(
        isinstance(server, Endpoint) for server in bootstrap_servers
    ):
        raise ConfigError(
            f"bootstrap_servers must be a tuple of Endpoints, not {bootstrap_servers!r}"
            " (parse_bootstrap_servers() reads the host:port syntax)"
        )


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    """The quorum's static voter set and timers, with the defaults of Kafka's ``QuorumConfig``.

    Checked when built: the voters and bootstrap servers for their types (a voters string is a
    :class:`ConfigError` pointing at :func:`parse_voters`, not a ``TypeError`` later) and every
    timer and size for its range.
    """

    #: Static voter set (kraft.version 0): id -> endpoint.
    voters: Mapping[int, Endpoint] = field(default_factory=dict)
    #: Where observers look for the leader when no voter set is configured.
    bootstrap_servers: tuple[Endpoint, ...] = ()
    #: ``controller.quorum.election.timeout.ms``: the timeout is drawn from [T, 2T).
    election_timeout_ms: int = 1000
    #: ``controller.quorum.election.backoff.max.ms``: cap of a failed candidate's backoff.
    election_backoff_max_ms: int = 1000
    #: ``controller.quorum.fetch.timeout.ms`` (F): a voter that hears nothing from the leader
    #: for F starts an election; the leader resigns if a majority is silent for 1.5 F.
    fetch_timeout_ms: int = 2000
    #: ``controller.quorum.append.linger.ms``.
    append_linger_ms: int = 25
    #: ``controller.quorum.request.timeout.ms``.
    request_timeout_ms: int = 2000
    #: ``controller.quorum.retry.backoff.ms``.
    retry_backoff_ms: int = 20
    #: How long the leader parks a Fetch that has nothing to return.
    fetch_max_wait_ms: int = 500
    #: kraft: how long past ``fetch_max_wait_ms`` a follower waits for its Fetch's answer
    #: before it sends the Fetch again (the round trip, the leader's own delays); capped by
    #: ``request_timeout_ms`` (docs/protocol.md §1.4.1).
    fetch_round_trip_margin_ms: int = 200
    #: kraft: how long the leader may hold a Fetch whose only news is a higher high watermark
    #: (KIP-1166), so that the high watermark rides on the next records instead of costing the
    #: follower a round trip of its own. 0 (Kafka): answer at once. A few ms lowers the commit
    #: latency of one-record-at-a-time writers (the follower's next Fetch is already parked
    #: when the next records come); followers then learn an idle leader's HW that much later.
    fetch_high_watermark_linger_ms: int = 0
    #: Largest batch the leader builds, and the Fetch MaxBytes a follower asks for.
    max_batch_size_bytes: int = 8 * 1024 * 1024
    #: Observers flush fetched data before the next fetch too (voters always do).
    followers_always_flush: bool = False
    #: The largest chunk of a snapshot one FetchSnapshot asks for (and the leader sends).
    fetch_snapshot_max_bytes: int = 8 * 1024 * 1024
    #: How often the client applies the log's snapshot retention (Kafka: every 60 s).
    log_clean_interval_ms: int = 60_000
    #: kraft: refuse Vote, BeginQuorumEpoch and EndQuorumEpoch from a replica outside
    #: ``voters`` (CLUSTER_AUTHORIZATION_FAILED, nothing changes). Off: Kafka's semantics, which
    #: follow any replica's request (KIP-853 needs that once voter sets change; kraft's is
    #: static). docs/operations.md "Security".
    reject_unknown_replicas: bool = False
    #: An observer of a kraft.version 1 quorum asks to be added as a voter (Kafka's
    #: ``controller.quorum.auto.join.enable``, off by default); kraft/raft/membership.py.
    auto_join: bool = False

    def __post_init__(self) -> None:
        positive = {
            "election_timeout_ms": self.election_timeout_ms,
            "election_backoff_max_ms": self.election_backoff_max_ms,
            "fetch_timeout_ms": self.fetch_timeout_ms,
            "request_timeout_ms": self.request_timeout_ms,
            "fetch_round_trip_margin_ms": self.fetch_round_trip_margin_ms,
            "max_batch_size_bytes": self.max_batch_size_bytes,
            "fetch_snapshot_max_bytes": self.fetch_snapshot_max_bytes,
            "log_clean_interval_ms": self.log_clean_interval_ms,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ConfigError(f"{name} must be positive, not {value}")
        non_negative = {
            "append_linger_ms": self.append_linger_ms,
            "retry_backoff_ms": self.retry_backoff_ms,
            "fetch_max_wait_ms": self.fetch_max_wait_ms,
            "fetch_high_watermark_linger_ms": self.fetch_high_watermark_linger_ms,
        }
        for name, value in non_negative.items():
            if value < 0:
                raise ConfigError(f"{name} must not be negative, not {value}")
        _check_types(self.voters, self.bootstrap_servers)
        if not self.voters and not self.bootstrap_servers:
            raise ConfigError("a quorum needs voters or bootstrap servers")

    @property
    def voter_ids(self) -> frozenset[int]:
        return frozenset(self.voters)
