"""``kraft quorum``: describe a running quorum and change its voters (Kafka's
``kafka-metadata-quorum.sh``: ``describe``, ``add-controller``, ``remove-controller``).

Every command first finds the leader: it sends DescribeQuorum to the addresses given with
``--bootstrap``, one after the other, until the leader answers (only the leader knows every
replica's progress, and only the leader changes the voters); a replica that is not the leader
names the leader and its address, which is asked next.

``describe --status`` prints the summary Kafka prints (the voters and observers with their
directory ids and endpoints); ``--replication`` a row per replica, its directory id and whether
it leads, follows (a voter) or observes; ``--json`` the same data as one JSON object.

``add-controller --config NODE.toml`` asks the leader to make that node a voter (KIP-853
AddRaftVoter): its id from the file, its directory id from its data directory's
``meta.properties``, its ``listen`` address as its ``CONTROLLER`` listener. The node must be
running as an observer of the quorum and caught up. ``remove-controller --controller-id N
--controller-directory-id D`` asks the leader to remove voter ``(N, D)`` (RemoveRaftVoter).
The leader answers once the new voter set is committed. Until ``--timeout``, an answer that
says to try again (NOT_LEADER_OR_FOLLOWER, BROKER_NOT_AVAILABLE, REQUEST_TIMED_OUT: a leader
change, or another change still in progress) or a lost connection is retried with the leader
found afresh; a retry answered DUPLICATE_VOTER (add) or VOTER_NOT_FOUND (remove) counts as done
if the leader's voter set shows the change made (an earlier attempt made it).

``append --value TEXT [--value TEXT ...]`` writes the values' UTF-8 bytes as one batch
through the leader (kraft's ForwardAppend, docs/protocol-wire.md: an admin connection is no
replica that could forward, so it is sent to the leader found as above) and prints the offsets
the batch committed at. NOT_LEADER_OR_FOLLOWER means the batch was not appended: it is sent
again, to the leader found afresh, until ``--timeout``. A timeout or a
lost connection after sending leave the outcome unknown (the batch may still commit), so it
is not sent again: the command says so and exits 1.

Exit status 0; 1 with ``error: ...`` when no address gave an answer from the leader, or with
Kafka's error name when the change failed; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from kraft.common.uuids import ZERO_UUID, uuid_from_text, uuid_to_text
from kraft.config import ConfigError, Endpoint, parse_bootstrap_servers
from kraft.errors import KraftError, OperationTimeoutError, TransportError
from kraft.log.meta_properties import read_meta_properties
from kraft.protocol.errors import Errors, error_name
from kraft.protocol.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ForwardAppendRequest,
    ForwardAppendResponse,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    ReplicaState,
    Request,
    Response,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from kraft.protocol.messages import Endpoint as Listener
from kraft.raft.voter_set import DEFAULT_LISTENER
from kraft.runtime.bootstrap import parse_directory_id
from kraft.runtime.config import is_wildcard, load_node_config
from kraft.runtime.request_once import request_once
from kraft.runtime.tls import TlsConfig

__all__ = [
    "AppendResult",
    "LeaderRounds",
    "add_change_arguments",
    "add_connection_arguments",
    "append_values",
    "connection_settings",
    "describe_quorum",
    "find_leader",
    "register",
    "send_change",
]

#: Errors after which a voter change is tried again (with the leader found afresh): nothing
#: was changed, or the change may still be made (Kafka's admin client retries them too).
_RETRIABLE = frozenset(
    {Errors.NOT_LEADER_OR_FOLLOWER, Errors.BROKER_NOT_AVAILABLE, Errors.REQUEST_TIMED_OUT}
)
#: The pause between two attempts at a voter change.
_RETRY_BACKOFF_S = 0.5


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft quorum ...`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "quorum",
        help="describe a running quorum, add and remove voters",
        description="Describe a running quorum and change its voters (like "
        "kafka-metadata-quorum.sh).",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="quorum commands", metavar="COMMAND")
    describe = commands.add_parser(
        "describe",
        help="the leader's view of the quorum",
        description="Ask the leader for the quorum's state: its epoch, high watermark, and "
        "every voter's and observer's progress.",
    )
    add_connection_arguments(describe)
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true", help="the quorum's summary")
    what.add_argument("--replication", action="store_true", help="a row per replica")
    describe.add_argument("--json", action="store_true", help="print JSON")
    describe.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for each address (default 5)"
    )
    describe.set_defaults(handler=_describe)

    add = commands.add_parser(
        "add-controller",
        help="make a running observer a voter (KIP-853)",
        description="Ask the leader to add the node described by --config as a voter: its "
        "node_id, the directory id of its data directory (meta.properties) and its listen "
        "address. The node must run as an observer of a kraft.version 1 quorum (formatted "
        "with --no-initial-controllers) and have caught up with the leader.",
    )
    add_connection_arguments(
        add, config_help="the TOML file of the node to add (also for [tls] and cluster_id)"
    )
    add_change_arguments(add)
    add.set_defaults(handler=_add_controller)

    remove = commands.add_parser(
        "remove-controller",
        help="remove a voter (KIP-853)",
        description="Ask the leader to remove the voter with this id and directory id. A "
        "removed node keeps running as an observer; a leader that removes itself resigns "
        "once the change is committed.",
    )
    add_connection_arguments(remove)
    remove.add_argument(
        "--controller-id", "-i", required=True, type=int, help="the node id of the voter"
    )
    remove.add_argument(
        "--controller-directory-id",
        "-d",
        required=True,
        help="the directory id of the voter (see `kraft quorum describe --replication`)",
    )
    add_change_arguments(remove)
    remove.set_defaults(handler=_remove_controller)

    append = commands.add_parser(
        "append",
        help="write records through the leader (for demos and tests)",
        description="Append the --value texts (UTF-8) as one batch through the leader and "
        "print the offsets it committed at. The nodes' serde must decode those bytes: "
        "`kraft node start` stores them as they are. Read them back with `kraft log dump "
        "DATA_DIR --records`.",
    )
    add_connection_arguments(append)
    append.add_argument(
        "--value",
        action="append",
        required=True,
        help="a record's value; repeat for more records in the batch",
    )
    append.add_argument("--json", action="store_true", help="print JSON")
    append.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds until the batch must have committed, retries included (default 30)",
    )
    append.set_defaults(handler=_append)


def add_connection_arguments(
    parser: argparse.ArgumentParser, *, config_help: str | None = None
) -> None:
    """``--bootstrap``, ``--cluster-id`` and ``--config``: how a command reaches the quorum.
    With ``config_help`` the node file is required (it describes the node to act on)."""
    parser.add_argument(
        "--bootstrap",
        "-b",
        required=True,
        help="host:port[,host:port...] of nodes to ask, in turn (a node "
        "that is not the leader names it, and it is asked next)",
    )
    parser.add_argument("--cluster-id", default=None, help="the cluster id to send")
    parser.add_argument(
        "--config",
        "-c",
        type=Path,
        required=config_help is not None,
        default=None,
        help=config_help
        or "a node's TOML file: its [tls] settings and cluster_id are used "
        "(needed for a quorum that runs TLS)",
    )


def add_change_arguments(parser: argparse.ArgumentParser, dry_run_help: str | None = None) -> None:
    """``--dry-run`` and ``--timeout``: what a change of the quorum takes."""
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help=dry_run_help or "print what would be done, but do not do it",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds the change may take, retries included (default 60)",
    )


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
    return find_leader(bootstrap, cluster_id=cluster_id, timeout_s=timeout_s, tls=tls)[1]


def find_leader(
    bootstrap: list[Endpoint],
    *,
    cluster_id: str | None = None,
    timeout_s: float = 5.0,
    tls: TlsConfig | None = None,
) -> tuple[Endpoint, DescribeQuorumResponse]:
    """The leader's address and DescribeQuorum answer (see :func:`describe_quorum`)."""
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
            return address, response
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


def _summary(replica: dict[str, Any]) -> dict[str, Any]:
    """A replica as Kafka's ``--status`` prints it: its id, its directory id (when it has
    one) and its endpoints (when known)."""
    out: dict[str, Any] = {"id": replica["id"]}
    if replica["directory_id"] != uuid_to_text(ZERO_UUID):
        out["directoryId"] = replica["directory_id"]
    if replica["endpoints"]:
        out["endpoints"] = replica["endpoints"]
    return out


def _ago(timestamp: int, now: int) -> str:
    return "never" if timestamp < 0 else f"{max(0, now - timestamp)} ms ago"


def connection_settings(
    args: argparse.Namespace,
) -> tuple[list[Endpoint], TlsConfig | None, str | None]:
    """What :func:`add_connection_arguments` gave: the bootstrap servers, and the TLS settings
    and cluster id (``--cluster-id`` first, then the ``--config`` file's). ``ConfigError``."""
    try:
        bootstrap = parse_bootstrap_servers(args.bootstrap)
    except ConfigError as exc:
        raise ConfigError(f"--bootstrap: {exc}") from exc
    tls, cluster_id = None, args.cluster_id
    if args.config is not None:
        node = load_node_config(args.config)
        tls, cluster_id = node.tls, cluster_id or node.cluster_id
    return bootstrap, tls, cluster_id


def _describe(args: argparse.Namespace) -> int:
    try:
        bootstrap, tls, cluster_id = connection_settings(args)
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
            ("CurrentVoters", json.dumps([_summary(v) for v in data["voters"]])),
            ("CurrentObservers", json.dumps([_summary(o) for o in data["observers"]])),
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


# -- voter changes (KIP-853) -------------------------------------------------------------------


def _add_controller(args: argparse.Namespace) -> int:
    try:
        node = load_node_config(args.config)
        bootstrap = parse_bootstrap_servers(args.bootstrap)
        listen = node.listen_address
        if is_wildcard(listen.host):
            raise ConfigError(
                f"{args.config}: listen = {listen} is no address the voters can reach; a "
                "voter is known by its listen address"
            )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    meta = read_meta_properties(node.data_dir)
    meta.verify(cluster_id=node.cluster_id, node_id=node.node_id)
    if meta.directory_id is None:
        raise ConfigError(f"{node.data_dir}: meta.properties has no directory.id")
    endpoints = f"{DEFAULT_LISTENER}://{listen}"
    what = (
        f"controller {node.node_id} with directory id {meta.directory_id} and endpoints: "
        f"{endpoints}"
    )
    if args.dry_run:
        print(f"DRY RUN of adding {what}")
        return 0

    def request(remaining_ms: int) -> AddRaftVoterRequest:
        return AddRaftVoterRequest(
            voter_id=node.node_id,
            voter_directory_id=uuid_from_text(meta.directory_id or ""),
            listeners=(Listener(DEFAULT_LISTENER, listen.host, listen.port),),
            timeout_ms=remaining_ms,
            cluster_id=meta.cluster_id,
        )

    def made(response: DescribeQuorumResponse) -> bool:
        return _is_voter(response, node.node_id, meta.directory_id or "")

    error = send_change(
        bootstrap, request, made, Errors.DUPLICATE_VOTER, args.timeout, meta.cluster_id, node.tls
    )
    if error is not None:
        print(f"error: adding {what} failed: {error}", file=sys.stderr)
        return 1
    print(f"Added {what}")
    return 0


def _remove_controller(args: argparse.Namespace) -> int:
    try:
        if args.controller_id < 0:
            raise ConfigError(f"--controller-id {args.controller_id} is negative")
        directory_id = parse_directory_id(args.controller_directory_id, "--controller-directory-id")
        bootstrap, tls, cluster_id = connection_settings(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    what = f"KRaft controller {args.controller_id} with directory id {directory_id}"
    if args.dry_run:
        print(f"DRY RUN of removing {what}")
        return 0

    def request(remaining_ms: int) -> RemoveRaftVoterRequest:
        return RemoveRaftVoterRequest(
            voter_id=args.controller_id,
            voter_directory_id=uuid_from_text(directory_id),
            cluster_id=cluster_id,
        )

    def made(response: DescribeQuorumResponse) -> bool:
        return not _is_voter(response, args.controller_id, directory_id)

    error = send_change(
        bootstrap, request, made, Errors.VOTER_NOT_FOUND, args.timeout, cluster_id, tls
    )
    if error is not None:
        print(f"error: removing {what} failed: {error}", file=sys.stderr)
        return 1
    print(f"Removed {what}")
    return 0


def _is_voter(response: DescribeQuorumResponse, node_id: int, directory_id: str) -> bool:
    return any(
        v.replica_id == node_id and _directory(v) == directory_id for v in response.current_voters
    )


def send_change(
    bootstrap: list[Endpoint],
    request: Callable[[int], AddRaftVoterRequest | RemoveRaftVoterRequest | UpdateFeaturesRequest],
    made: Callable[[DescribeQuorumResponse], bool],
    done_already: Errors | None,
    timeout_s: float,
    cluster_id: str | None,
    tls: TlsConfig | None,
) -> str | None:
    """Send a change of the quorum (``request(remaining_ms)``) to the leader until it is
    answered for good or ``timeout_s`` passes (the module docstring says which answers are
    tried again, and when ``done_already`` is checked with ``made``); ``None`` once the change
    is made, else the error (Kafka's name and message, or what went wrong)."""
    rounds = LeaderRounds(bootstrap, timeout_s, cluster_id, tls)
    #: An earlier attempt may have made the change (its answer was lost, or timed out).
    maybe_made = False
    for leader, remaining_s in rounds:
        body = request(max(1, int(remaining_s * 1000)))
        try:
            response = rounds.ask(leader, body, remaining_s)
        except TransportError as exc:
            rounds.problem = str(exc)
            maybe_made = True
            continue
        assert isinstance(
            response, AddRaftVoterResponse | RemoveRaftVoterResponse | UpdateFeaturesResponse
        )
        code = response.error_code
        if code == Errors.NONE:
            return None
        problem = rounds.problem = error_name(code) + (
            f": {response.error_message}" if response.error_message else ""
        )
        if done_already is not None and code == done_already and maybe_made:
            # The leader checks this after "no change in progress": the voter set it
            # describes now is committed, and says whether an earlier attempt made the change.
            try:
                _, described = find_leader(bootstrap, cluster_id=cluster_id, tls=tls)
            except TransportError:
                return problem
            return None if made(described) else problem
        if code not in _RETRIABLE:
            return problem
        maybe_made |= code == Errors.REQUEST_TIMED_OUT
    return rounds.gave_up()


class LeaderRounds:
    """The retry loop of the commands that need the leader: each round finds it afresh
    (after a pause, once a round went wrong) and yields it with the seconds left, until
    ``timeout_s`` passes. ``problem`` says what went wrong last."""

    def __init__(
        self,
        bootstrap: list[Endpoint],
        timeout_s: float,
        cluster_id: str | None,
        tls: TlsConfig | None,
    ) -> None:
        self._bootstrap = bootstrap
        self._timeout_s = timeout_s
        self._deadline = time.monotonic() + timeout_s
        self._cluster_id = cluster_id
        self._tls = tls
        self.problem = ""

    def __iter__(self) -> Iterator[tuple[Endpoint, float]]:
        while True:
            remaining_s = self._deadline - time.monotonic()
            if remaining_s <= 0:
                return
            if self.problem:
                time.sleep(min(_RETRY_BACKOFF_S, remaining_s))
            try:
                leader, _ = find_leader(
                    self._bootstrap,
                    cluster_id=self._cluster_id,
                    timeout_s=min(5.0, remaining_s),
                    tls=self._tls,
                )
            except TransportError as exc:
                self.problem = str(exc)
                continue
            yield leader, self._deadline - time.monotonic()

    def ask(self, leader: Endpoint, body: Request, remaining_s: float) -> Response:
        """Send ``body`` to ``leader``. It answers at the latest at the request's own
        timeout (``remaining_s``): wait a little more."""
        return request_once(
            leader, body, cluster_id=self._cluster_id, timeout_s=remaining_s + 2.0, tls=self._tls
        )

    def gave_up(self) -> str:
        return f"{self.problem} (gave up after {self._timeout_s:g} s)"


# -- writes (kraft's ForwardAppend) ------------------------------------------------------------


class AppendResult(NamedTuple):
    """Where a batch sent by :func:`append_values` committed."""

    base_offset: int
    last_offset: int
    #: The epoch of the leader that appended the batch.
    epoch: int
    leader_id: int


def append_values(
    bootstrap: list[Endpoint],
    values: list[bytes],
    *,
    timeout_s: float,
    cluster_id: str | None = None,
    tls: TlsConfig | None = None,
) -> AppendResult:
    """Append ``values`` as one batch through the leader (see the module docstring).

    Raises :class:`~kraft.errors.TransportError` when no leader took the batch before
    ``timeout_s``, :class:`~kraft.errors.OperationTimeoutError` when the outcome is unknown,
    :class:`~kraft.errors.KraftError` with Kafka's error name when the leader refused it.
    """
    if not values:
        raise ValueError("no values to append")
    rounds = LeaderRounds(bootstrap, timeout_s, cluster_id, tls)
    for leader, left_s in rounds:
        remaining_s = max(0.001, left_s)
        body = ForwardAppendRequest(records=tuple(values), timeout_ms=int(remaining_s * 1000))
        try:
            response = rounds.ask(leader, body, remaining_s)
        except TransportError as exc:
            raise OperationTimeoutError(f"{exc}: the batch may or may not have committed") from exc
        assert isinstance(response, ForwardAppendResponse)
        code = response.error_code
        if code == Errors.NONE:
            return AppendResult(
                response.last_offset - len(values) + 1,
                response.last_offset,
                response.batch_epoch,
                response.leader_id,
            )
        problem = rounds.problem = (
            f"{leader}: "
            + error_name(code)
            + (f": {response.error_message}" if response.error_message else "")
        )
        if code == Errors.REQUEST_TIMED_OUT:
            raise OperationTimeoutError(f"{problem}: the batch may or may not have committed")
        if code != Errors.NOT_LEADER_OR_FOLLOWER:  # else nothing was appended: send it again
            raise KraftError(problem)
    raise TransportError(rounds.gave_up())


def _append(args: argparse.Namespace) -> int:
    try:
        bootstrap, tls, cluster_id = connection_settings(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    values = [value.encode("utf-8") for value in args.value]
    result = append_values(
        bootstrap, values, timeout_s=args.timeout, cluster_id=cluster_id, tls=tls
    )  # KraftError: `kraft` prints it and exits 1
    if args.json:
        print(json.dumps(result._asdict()))
    else:
        print(
            f"Appended {len(values)} record(s) at offsets {result.base_offset}.."
            f"{result.last_offset} (leader {result.leader_id}, epoch {result.epoch})"
        )
    return 0
