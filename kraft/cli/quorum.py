"""``kraft quorum describe``: the quorum as its leader sees it (``kafka-metadata-quorum.sh``).

The command sends DescribeQuorum to the addresses given with ``--bootstrap``, one after the
other, until the leader answers (only the leader knows every replica's progress); a replica that
is not the leader names the leader and its address, which is asked next. ``--status``
prints the summary Kafka prints; ``--replication`` a row per voter and observer; ``--json`` the
same data as one JSON object. Exit status 0, or 1 with ``error: ...`` when no address gave an
answer from the leader.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from pathlib import Path
from typing import Any

from kraft.common.uuids import uuid_to_text
from kraft.config import ConfigError, Endpoint, parse_bootstrap_servers
from kraft.errors import KraftError, TransportError
from kraft.protocol.errors import Errors, error_name
from kraft.protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse, ReplicaState
from kraft.runtime.config import load_node_config
from kraft.runtime.request_once import request_once
from kraft.runtime.tls import TlsConfig

__all__ = ["describe_quorum", "register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft quorum ...`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "quorum",
        help="describe a running quorum",
        description="Describe a running quorum (like kafka-metadata-quorum.sh).",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="quorum commands", metavar="COMMAND")
    describe = commands.add_parser(
        "describe",
        help="the leader's view of the quorum",
        description="Ask the leader for the quorum's state: its epoch, high watermark, and "
        "every voter's and observer's progress.",
    )
    describe.add_argument(
        "--bootstrap",
        "-b",
        required=True,
        help="host:port[,host:port...] of nodes to ask, in turn (a node "
        "that is not the leader names it, and it is asked next)",
    )
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true", help="the quorum's summary")
    what.add_argument("--replication", action="store_true", help="a row per replica")
    describe.add_argument("--json", action="store_true", help="print JSON")
    describe.add_argument("--cluster-id", default=None, help="the cluster id to send")
    describe.add_argument(
        "--config",
        "-c",
        type=Path,
        default=None,
        help="a node's TOML file: its [tls] settings and cluster_id are used "
        "(needed for a quorum that runs TLS)",
    )
    describe.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for each address (default 5)"
    )
    describe.set_defaults(handler=_describe)


def describe_quorum(
    bootstrap: list[Endpoint],
    *,
    cluster_id: str | None = None,
    timeout_s: float = 5.0,
    tls: TlsConfig | None = None,
) -> DescribeQuorumResponse:
    """The leader's DescribeQuorum answer, asking each address in turn; a replica that is not
    the leader names it and its address, which is asked next.

    Raises :class:`~kraft.errors.TransportError` when none of them is the leader, with what
    each said (unreachable, not the leader and who is, ...).
    """
    problems: list[str] = []
    to_ask = deque(bootstrap)
    asked: set[Endpoint] = set()
    while to_ask:
        address = to_ask.popleft()
        if address in asked:
            continue
        asked.add(address)
        try:
            response = request_once(
                address,
                DescribeQuorumRequest(),
                cluster_id=cluster_id,
                timeout_s=timeout_s,
                tls=tls,
            )
        except TransportError as exc:
            problems.append(str(exc))  # it names the address
            continue
        if not isinstance(response, DescribeQuorumResponse):
            problems.append(f"{address}: answered with {type(response).__name__}")
            continue
        error = response.error_code or response.partition_error_code
        if error == 0:
            return response
        if error == Errors.NOT_LEADER_OR_FOLLOWER:
            leader = "unknown" if response.leader_id < 0 else str(response.leader_id)
            problems.append(
                f"{address}: not the leader (leader {leader}, epoch {response.leader_epoch})"
            )
            to_ask.extendleft(_leader_addresses(response))
        else:
            problems.append(f"{address}: error {error_name(error)}")
    raise TransportError("no leader answered: " + "; ".join(problems))


def _leader_addresses(response: DescribeQuorumResponse) -> list[Endpoint]:
    """The addresses a replica that is not the leader gave for the leader it knows."""
    return [
        Endpoint(listener.host, listener.port)
        for node in response.nodes
        if node.node_id == response.leader_id >= 0
        for listener in node.listeners
    ]


def _directory(replica: ReplicaState) -> str:
    return uuid_to_text(replica.replica_directory_id)


def _as_dict(response: DescribeQuorumResponse, cluster_id: str | None) -> dict[str, Any]:
    leader_state = next(
        (r for r in response.current_voters if r.replica_id == response.leader_id), None
    )
    leader_end = -1 if leader_state is None else leader_state.log_end_offset
    leader_time = -1 if leader_state is None else leader_state.last_caught_up_timestamp
    endpoints = {
        n.node_id: [f"{e.name}://{e.host}:{e.port}" for e in n.listeners] for n in response.nodes
    }

    def replica(r: ReplicaState, status: str) -> dict[str, Any]:
        return {
            "id": r.replica_id,
            "directory_id": _directory(r),
            "log_end_offset": r.log_end_offset,
            "lag": max(0, leader_end - r.log_end_offset) if r.log_end_offset >= 0 else None,
            "last_fetch_timestamp": r.last_fetch_timestamp,
            "last_caught_up_timestamp": r.last_caught_up_timestamp,
            "status": status,
            "endpoints": endpoints.get(r.replica_id, []),
        }

    voters = [
        replica(r, "Leader" if r.replica_id == response.leader_id else "Follower")
        for r in response.current_voters
    ]
    observers = [replica(r, "Observer") for r in response.observers]
    followers = [v for v in voters if v["status"] != "Leader"] + observers
    lags = [f["lag"] for f in followers if f["lag"] is not None]
    caught_up = [
        f["last_caught_up_timestamp"] for f in followers if f["last_caught_up_timestamp"] >= 0
    ]
    return {
        "cluster_id": cluster_id,
        "leader_id": response.leader_id,
        "leader_epoch": response.leader_epoch,
        "high_watermark": response.high_watermark,
        "max_follower_lag": max(lags, default=0),
        "max_follower_lag_time_ms": (
            max(0, leader_time - min(caught_up)) if caught_up and leader_time >= 0 else 0
        ),
        "voters": voters,
        "observers": observers,
    }


def _ago(timestamp: int, now: int) -> str:
    return "never" if timestamp < 0 else f"{max(0, now - timestamp)} ms ago"


def _describe(args: argparse.Namespace) -> int:
    try:
        bootstrap = parse_bootstrap_servers(args.bootstrap)
    except ConfigError as exc:
        print(f"error: --bootstrap: {exc}", file=sys.stderr)
        return 2
    tls, cluster_id = None, args.cluster_id
    try:
        if args.config is not None:
            node_config = load_node_config(args.config)
            tls = node_config.tls
            cluster_id = cluster_id or node_config.cluster_id
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        response = describe_quorum(
            bootstrap, cluster_id=cluster_id, timeout_s=args.timeout, tls=tls
        )
    except KraftError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    data = _as_dict(response, cluster_id)
    if args.json:
        print(
            json.dumps(
                data if args.status else {"replicas": data["voters"] + data["observers"]}, indent=2
            )
        )
        return 0
    if args.status:
        rows = [
            ("ClusterId", data["cluster_id"] or "(not given)"),
            ("LeaderId", data["leader_id"]),
            ("LeaderEpoch", data["leader_epoch"]),
            ("HighWatermark", data["high_watermark"]),
            ("MaxFollowerLag", data["max_follower_lag"]),
            ("MaxFollowerLagTimeMs", data["max_follower_lag_time_ms"]),
            (
                "CurrentVoters",
                json.dumps([{"id": v["id"], "endpoints": v["endpoints"]} for v in data["voters"]]),
            ),
            ("CurrentObservers", json.dumps([{"id": o["id"]} for o in data["observers"]])),
        ]
        for name, value in rows:
            print(f"{name + ':':<24}{value}")
        return 0
    now = max((r["last_fetch_timestamp"] for r in data["voters"]), default=0)
    header = (
        "NodeId",
        "DirectoryId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    )
    table = [header] + [
        (
            str(r["id"]),
            r["directory_id"],
            str(r["log_end_offset"]),
            "-" if r["lag"] is None else str(r["lag"]),
            _ago(r["last_fetch_timestamp"], now),
            _ago(r["last_caught_up_timestamp"], now),
            r["status"],
        )
        for r in data["voters"] + data["observers"]
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0
