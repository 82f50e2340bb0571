"""``NodeConfig``: everything one real node needs, read from a TOML file.

A node's file names the node, where it keeps its data, where it listens, the quorum (the same
``voters`` string on every node, Kafka's ``controller.quorum.voters``), and optional sections
for the quorum's timers, TLS and metrics::

    node_id = 1
    data_dir = "data/1"                       # relative paths are relative to this file
    voters = "1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093"
    # listen = "0.0.0.0:9091"                 # default: this node's address in `voters`
    # cluster_id = "..."                      # default: the data directory's meta.properties
    # max_connections = 512                   # Kafka's names, translated (docs/operations.md)

    [quorum]                                  # any QuorumConfig field, e.g.
    election_timeout_ms = 1000
    append_linger_ms = 5

    [tls]                                     # optional: TLS on every connection
    certfile = "certs/node1.pem"
    keyfile = "certs/node1.key"
    cafile = "certs/ca.pem"
    peer_identity = "cn"                      # a peer is the replica its certificate names

    [metrics]                                 # optional: Prometheus on host:port
    prometheus = "127.0.0.1:9101"

    [controller]                              # optional: kraft controller start's
    session_timeout_ms = 9000                 # ControllerConfig fields, Kafka's defaults

A node of a dynamic quorum (KIP-853, ``kraft storage format --standalone |
--initial-controllers | --no-initial-controllers``) has no ``voters``: its voters are in its
log, it finds the leader through ``bootstrap_servers`` (Kafka's
``controller.quorum.bootstrap.servers``), and its ``listen`` address is the one it is known by
as a voter.

Every problem (a missing key, a wrong type, an unknown key, a file that is not TOML) is a
:class:`~kraft.config.ConfigError` naming the file and the key. ``kraft node start`` reads this
file; :class:`~kraft.runtime.node.RaftNode` can also be built from one with
:meth:`RaftNode.from_config`. docs/operations.md is the reference for every key.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraft.config import (
    ConfigError,
    Endpoint,
    QuorumConfig,
    parse_bootstrap_servers,
    parse_endpoint,
    parse_voters,
)
from kraft.controller.quorum_controller import ControllerConfig
from kraft.protocol.frame import DEFAULT_MAX_FRAME_SIZE, MAX_FRAME_SIZE_LIMIT
from kraft.runtime.limits import ConnectionLimits
from kraft.runtime.tls import DEFAULT_PEER_ID_FORMAT, TlsConfig

__all__ = ["NodeConfig", "is_wildcard", "load_node_config"]

_TOP_KEYS = frozenset(
    {
        "node_id",
        "data_dir",
        "voters",
        "bootstrap_servers",
        "listen",
        "cluster_id",
        "max_frame_size",
        "segment_bytes",
        "max_connections",
        "max_connections_per_ip",
        "connections_max_idle_ms",
        "queued_max_request_bytes",
        "quorum",
        "tls",
        "metrics",
        "controller",
    }
)
#: The top-level keys of :class:`~kraft.runtime.limits.ConnectionLimits`.
_LIMIT_KEYS = tuple(f.name for f in dataclasses.fields(ConnectionLimits))
_TLS_KEYS = frozenset(
    {
        "certfile",
        "keyfile",
        "cafile",
        "verify",
        "check_hostname",
        "require_client_cert",
        "peer_identity",
        "peer_id_format",
    }
)
_METRICS_KEYS = frozenset({"prometheus"})
#: QuorumConfig fields a [quorum] table may set (voters and bootstrap servers are top level),
#: with the TOML type each takes (the annotations are strings: ``from __future__``).
_QUORUM_TYPES: dict[str, type] = {
    f.name: bool if f.type == "bool" else int
    for f in dataclasses.fields(QuorumConfig)
    if f.name not in ("voters", "bootstrap_servers")
}
_QUORUM_KEYS = frozenset(_QUORUM_TYPES)
#: ControllerConfig fields a [controller] table may set (the cluster id is the node's).
_CONTROLLER_KEYS = tuple(
    f.name for f in dataclasses.fields(ControllerConfig) if f.name != "cluster_id"
)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """One node's configuration (see the module docstring for the file)."""

    node_id: int
    data_dir: Path
    quorum: QuorumConfig
    #: Where to listen; ``None``: this node's address in the voter set.
    listen: Endpoint | None = None
    #: Checked against ``meta.properties``; ``None``: take the directory's.
    cluster_id: str | None = None
    tls: TlsConfig | None = None
    #: Serve Prometheus metrics here (``None``: no exporter).
    prometheus: Endpoint | None = None
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    #: Log segment size in bytes (``None``: FileLog's default).
    segment_bytes: int | None = None
    #: What peers' connections may hold (the top-level keys ``max_connections``,
    #: ``max_connections_per_ip``, ``connections_max_idle_ms``, ``queued_max_request_bytes``).
    limits: ConnectionLimits = dataclasses.field(default_factory=ConnectionLimits)
    #: The ``[controller]`` table: read by ``kraft controller start`` only.
    controller: ControllerConfig = dataclasses.field(default_factory=ControllerConfig)

    def __post_init__(self) -> None:
        if self.node_id < 0:
            raise ConfigError(f"node_id must not be negative, not {self.node_id}")
        if not 1024 <= self.max_frame_size <= MAX_FRAME_SIZE_LIMIT:
            raise ConfigError(f"max_frame_size {self.max_frame_size} is out of range")
        if self.max_frame_size <= self.quorum.max_batch_size_bytes:
            raise ConfigError(
                f"max_frame_size ({self.max_frame_size}) must exceed the quorum's "
                f"max_batch_size_bytes ({self.quorum.max_batch_size_bytes})"
            )
        if self.segment_bytes is not None and self.segment_bytes < 1024:
            raise ConfigError(f"segment_bytes must be at least 1024, not {self.segment_bytes}")
        if self.listen is None and self.node_id not in self.quorum.voters:
            raise ConfigError(f"node {self.node_id} is not a voter: give it a `listen` address")

    @property
    def listen_address(self) -> Endpoint:
        """Where this node listens."""
        if self.listen is not None:
            return self.listen
        return self.quorum.voters[self.node_id]


def is_wildcard(host: str) -> bool:
    """Whether ``host`` is an address to listen on, not one to reach (``0.0.0.0``, ``::``,
    empty): a KIP-853 voter's listener must be one others can connect to."""
    try:
        return not host or ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False  # a host name


def _expect(value: Any, kind: type | tuple[type, ...], key: str) -> Any:
    if isinstance(value, bool) and kind is int:
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{key}: expected {name}, got {type(value).__name__} {value!r}")
    return value


def _unknown(table: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(extra)}")


def _table(data: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigError(f"[{key}] must be a table")
    return value


def _quorum_config(data: Mapping[str, Any]) -> QuorumConfig:
    """``voters``, ``bootstrap_servers`` and the ``[quorum]`` table."""
    quorum_fields: dict[str, Any] = {}
    if "voters" in data:
        quorum_fields["voters"] = parse_voters(_expect(data["voters"], str, "voters"))
    if "bootstrap_servers" in data:
        quorum_fields["bootstrap_servers"] = tuple(
            parse_bootstrap_servers(_expect(data["bootstrap_servers"], str, "bootstrap_servers"))
        )
    quorum_table = _table(data, "quorum") or {}
    _unknown(quorum_table, _QUORUM_KEYS, "[quorum]")
    for key, value in quorum_table.items():
        quorum_fields[key] = _expect(value, _QUORUM_TYPES[key], f"quorum.{key}")
    return QuorumConfig(**quorum_fields)


def _tls_config(tls_table: Mapping[str, Any], base_dir: Path) -> TlsConfig:
    _unknown(tls_table, _TLS_KEYS, "[tls]")
    for required in ("certfile", "keyfile"):
        if required not in tls_table:
            raise ConfigError(f"tls.{required} is required when [tls] is present")
    cafile = tls_table.get("cafile")
    peer_identity = tls_table.get("peer_identity")
    return TlsConfig(
        certfile=base_dir / _expect(tls_table["certfile"], str, "tls.certfile"),
        keyfile=base_dir / _expect(tls_table["keyfile"], str, "tls.keyfile"),
        cafile=None if cafile is None else base_dir / _expect(cafile, str, "tls.cafile"),
        verify=_expect(tls_table.get("verify", True), bool, "tls.verify"),
        check_hostname=_expect(tls_table.get("check_hostname", True), bool, "tls.check_hostname"),
        require_client_cert=_expect(
            tls_table.get("require_client_cert", True), bool, "tls.require_client_cert"
        ),
        peer_identity=None
        if peer_identity is None
        else _expect(peer_identity, str, "tls.peer_identity"),
        peer_id_format=_expect(
            tls_table.get("peer_id_format", DEFAULT_PEER_ID_FORMAT), str, "tls.peer_id_format"
        ),
    )


def _prometheus_endpoint(metrics_table: Mapping[str, Any]) -> Endpoint | None:
    _unknown(metrics_table, _METRICS_KEYS, "[metrics]")
    if "prometheus" not in metrics_table:
        return None
    return parse_endpoint(
        _expect(metrics_table["prometheus"], str, "metrics.prometheus"), "metrics.prometheus"
    )


def _controller_config(table: Mapping[str, Any]) -> ControllerConfig:
    _unknown(table, frozenset(_CONTROLLER_KEYS), "[controller]")
    values = {key: _expect(table[key], int, f"controller.{key}") for key in table}
    try:
        return ControllerConfig(**values)
    except ValueError as exc:
        raise ConfigError(f"[controller]: {exc}") from exc


def node_config_from_mapping(data: Mapping[str, Any], base_dir: Path) -> NodeConfig:
    """Build a :class:`NodeConfig` from parsed TOML; relative paths are under ``base_dir``."""
    _unknown(data, _TOP_KEYS, "top level")
    for required in ("node_id", "data_dir"):
        if required not in data:
            raise ConfigError(f"{required} is required")
    node_id = _expect(data["node_id"], int, "node_id")
    data_dir = base_dir / _expect(data["data_dir"], str, "data_dir")
    quorum = _quorum_config(data)

    listen = None
    if "listen" in data:
        listen = parse_endpoint(_expect(data["listen"], str, "listen"), "listen")
    cluster_id = data.get("cluster_id")
    if cluster_id is not None:
        _expect(cluster_id, str, "cluster_id")
    tls_table = _table(data, "tls")
    tls = None if tls_table is None else _tls_config(tls_table, base_dir)
    metrics_table = _table(data, "metrics")
    prometheus = None if metrics_table is None else _prometheus_endpoint(metrics_table)

    extra: dict[str, Any] = {}
    if "max_frame_size" in data:
        extra["max_frame_size"] = _expect(data["max_frame_size"], int, "max_frame_size")
    if "segment_bytes" in data:
        extra["segment_bytes"] = _expect(data["segment_bytes"], int, "segment_bytes")
    limits = {key: _expect(data[key], int, key) for key in _LIMIT_KEYS if key in data}
    if limits:
        extra["limits"] = ConnectionLimits(**limits)
    controller_table = _table(data, "controller")
    if controller_table is not None:
        extra["controller"] = _controller_config(controller_table)
    return NodeConfig(
        node_id=node_id,
        data_dir=data_dir,
        quorum=quorum,
        listen=listen,
        cluster_id=cluster_id,
        tls=tls,
        prometheus=prometheus,
        **extra,
    )


def load_node_config(path: Path | str) -> NodeConfig:
    """Read a node's TOML file; :class:`~kraft.config.ConfigError` names the file and key."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    try:
        return node_config_from_mapping(data, path.parent)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
