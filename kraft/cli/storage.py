"""``kraft storage``: format a data directory, mint a Uuid, show what a directory holds,
recover a lost quorum-state file.

The counterpart of Kafka's ``kafka-storage`` tool (``format``, ``random-uuid``, ``info``);
``recover-quorum-state`` is kraft's own (docs/storage.md, "The quorum-state file").
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import Any

from kraft.common.limits import INT32_MAX
from kraft.common.uuids import uuid_to_text
from kraft.config import ConfigError
from kraft.errors import AlreadyFormattedError, MetaPropertiesError, QuorumStateError
from kraft.log.meta_properties import (
    META_PROPERTIES_FILE,
    format_storage,
    is_formatted,
    random_directory_id,
    random_uuid,
    read_meta_properties,
)
from kraft.log.quorum_state import (
    NO_SUCH_VOTER,
    QUORUM_STATE_FILE,
    FileQuorumStateStore,
    recovered_election_state,
)
from kraft.raft.voter_set import VoterSet
from kraft.runtime.bootstrap import (
    format_dynamic_storage,
    parse_initial_controllers,
    voter_node,
    voters_text,
)
from kraft.runtime.config import NodeConfig, is_wildcard, load_node_config

__all__ = ["register"]


def _node_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative: node ids are >= 0")
    return value


def _epoch(text: str) -> int:
    value = _node_id(text)
    if value > INT32_MAX:
        raise argparse.ArgumentTypeError(f"{value} is not an int32 epoch")
    return value


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft storage ...`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "storage",
        help="format and inspect data directories",
        description="Format and inspect kraft data directories (like kafka-storage).",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="storage commands", metavar="COMMAND")

    fmt = commands.add_parser(
        "format",
        help="format a data directory for one node of a cluster",
        description=(
            "Create DIR and its __cluster_metadata-0 directory and write meta.properties "
            "with the cluster id, the node id and a directory id. Refuses a directory that is "
            "already formatted. The node and its directory come from -n and DIR, or from the "
            "node's TOML file (-c). Without --standalone, --initial-controllers or "
            "--no-initial-controllers the quorum is static (kraft.version 0: its voters are "
            "the `voters` of every node's file); with one of them it is dynamic (kraft.version "
            "1, KIP-853: the voters live in the log, and the bootstrap checkpoint "
            "00000000000000000000-0000000000.checkpoint holds the initial ones)."
        ),
    )
    fmt.add_argument(
        "--cluster-id",
        "-t",
        required=True,
        help="the cluster id, a Kafka Uuid (see `kraft storage random-uuid`)",
    )
    fmt.add_argument("--node-id", "-n", type=_node_id, help="this node's id")
    fmt.add_argument(
        "--config",
        "-c",
        type=Path,
        default=None,
        help="the node's TOML file: its node_id, data_dir and listen address",
    )
    fmt.add_argument(
        "--ignore-formatted",
        "-g",
        action="store_true",
        help="succeed without change if DIR is already formatted for the same cluster and node",
    )
    dynamic = fmt.add_mutually_exclusive_group()
    dynamic.add_argument(
        "--standalone",
        "-s",
        action="store_true",
        help="a dynamic quorum of this one node (needs -c: its voter is this node at its "
        "listen address); grow it with `kraft quorum add-controller`",
    )
    dynamic.add_argument(
        "--initial-controllers",
        "-I",
        metavar="ID@HOST:PORT:DIRECTORY_ID,...",
        help="a dynamic quorum of these voters; this node must be one of them, and its "
        "directory id is the one given for it (see `kraft storage random-uuid`)",
    )
    dynamic.add_argument(
        "--no-initial-controllers",
        "-N",
        action="store_true",
        help="a node of a dynamic quorum that will join it later (kraft.version 1, no voters: "
        "it starts as an observer)",
    )
    fmt.add_argument("directory", metavar="DIR", type=Path, nargs="?", help="the data directory")
    fmt.set_defaults(handler=_format)

    uuid = commands.add_parser(
        "random-uuid",
        help="print a new random Kafka Uuid (for --cluster-id)",
        description="Print a new random Kafka Uuid: 22 characters of URL-safe base64.",
    )
    uuid.set_defaults(handler=_random_uuid)

    info = commands.add_parser(
        "info",
        help="show a data directory's meta.properties and quorum state",
        description="Print DIR's meta.properties and, if present, its quorum-state.",
    )
    info.add_argument("directory", metavar="DIR", type=Path, help="the data directory")
    info.set_defaults(handler=_info)

    recover = commands.add_parser(
        "recover-quorum-state",
        help="write a quorum-state that cannot vote again in the current epoch",
        description=(
            "For a node that refuses to start because its quorum-state file is missing: "
            "write one that holds a vote in epoch N for no real replica, so that the node "
            "votes in no epoch up to N (it may have voted in N before the file was lost) and "
            "follows the leader of N, or votes in a later election. N must be the quorum's "
            "current epoch, as `kraft quorum describe` reports it for the live quorum (the "
            "highest any node reports). Refuses a directory that has a quorum-state file."
        ),
    )
    recover.add_argument("directory", metavar="DIR", type=Path, help="the data directory")
    recover.add_argument(
        "--epoch", required=True, type=_epoch, help="the live quorum's current epoch"
    )
    recover.set_defaults(handler=_recover_quorum_state)


def _format_target(args: argparse.Namespace) -> tuple[int, Path, NodeConfig | None]:
    """The node id and data directory to format, from ``-n``/DIR or the node's file."""
    config = None if args.config is None else load_node_config(args.config)
    if config is None:
        if args.node_id is None or args.directory is None:
            raise ConfigError("give the node id (-n) and DIR, or the node's file (-c)")
        return args.node_id, args.directory, None
    if args.node_id is not None and args.node_id != config.node_id:
        raise ConfigError(f"-n {args.node_id} is not the node id of {args.config}")
    if args.directory is not None and args.directory.resolve() != config.data_dir.resolve():
        raise ConfigError(f"{args.directory} is not the data_dir of {args.config}")
    if config.cluster_id is not None and config.cluster_id != args.cluster_id:
        raise ConfigError(f"{args.config} is for cluster {config.cluster_id}")
    if config.quorum.voters and _is_dynamic(args):
        # Kafka's StorageTool: the voters of a dynamic quorum live in the log, never in the file.
        raise ConfigError(
            f"{args.config} sets `voters` (a static quorum): remove it and set "
            "`bootstrap_servers` to format a node of a dynamic quorum"
        )
    return config.node_id, config.data_dir, config


def _is_dynamic(args: argparse.Namespace) -> bool:
    return bool(args.standalone or args.initial_controllers or args.no_initial_controllers)


def _initial_voters(
    args: argparse.Namespace, node_id: int, config: NodeConfig | None
) -> VoterSet | None:
    """The bootstrap checkpoint's voters (``None``: a node that will join)."""
    if args.initial_controllers is not None:
        return parse_initial_controllers(args.initial_controllers)
    if not args.standalone:
        return None
    if config is None:
        raise ConfigError("--standalone needs the node's file (-c): its listen address")
    listener = config.listen_address
    if is_wildcard(listener.host):
        raise ConfigError(
            f"{args.config}: listen = {listener} is no address other nodes can reach: a "
            "standalone voter is known by its listen address"
        )
    return VoterSet({node_id: voter_node(node_id, random_directory_id(), listener)})


def _format(args: argparse.Namespace) -> int:
    node_id, directory, config = _format_target(args)
    voters = _initial_voters(args, node_id, config)
    if args.ignore_formatted and is_formatted(directory):
        meta = read_meta_properties(directory)
        meta.verify(cluster_id=args.cluster_id, node_id=node_id)
        key = None if voters is None else voters.key(node_id)
        if args.initial_controllers is not None and key is not None:
            given = uuid_to_text(key.directory_id) if key.directory_id else None
            if meta.directory_id != given:
                raise ConfigError(
                    f"{directory} is formatted with directory id {meta.directory_id}, not "
                    f"{given} as --initial-controllers says"
                )
        print(f"{directory} is already formatted (directory id {meta.directory_id}); skipping")
        return 0
    # Java's Properties.store dates the file; the library reads no clock, the CLI may.
    stamp = datetime.datetime.now(datetime.UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
    try:
        if _is_dynamic(args):
            meta = format_dynamic_storage(
                directory, args.cluster_id, node_id, voters, comment=stamp
            )
        else:
            meta = format_storage(directory, args.cluster_id, node_id, comment=stamp)
    except AlreadyFormattedError as exc:
        raise AlreadyFormattedError(
            f"{exc}; use --ignore-formatted to accept a directory formatted for the same "
            "cluster and node"
        ) from exc
    print(
        f"Formatted {directory}: cluster.id={meta.cluster_id} node.id={meta.node_id} "
        f"directory.id={meta.directory_id}"
    )
    if _is_dynamic(args):
        described = (
            "no voters (it joins later)" if voters is None else f"voters {voters_text(voters)}"
        )
        print(f"kraft.version=1, bootstrap checkpoint with {described}")
    return 0


def _random_uuid(args: argparse.Namespace) -> int:
    print(random_uuid())
    return 0


def _info(args: argparse.Namespace) -> int:
    directory: Path = args.directory
    if not directory.is_dir():
        raise MetaPropertiesError(f"{directory} is not a directory")
    meta = read_meta_properties(directory)
    print(f"{directory / META_PROPERTIES_FILE}:")
    for key, value in meta.to_properties().items():
        print(f"  {key}={value}")
    store = FileQuorumStateStore(directory / QUORUM_STATE_FILE)
    state = store.read_election_state()
    print(f"{store.path}:")
    if state is None:
        print("  (none: this node has not taken part in an election yet)")
    else:
        print(
            f"  epoch={state.epoch} leader_id={state.leader_id} voted_id={state.voted_id} "
            f"voted_directory_id={state.voted_directory_id}"
        )
    return 0


def _recover_quorum_state(args: argparse.Namespace) -> int:
    directory: Path = args.directory
    meta = read_meta_properties(directory)
    if meta.node_id == NO_SUCH_VOTER:
        raise QuorumStateError(
            f"node id {meta.node_id} is the id a recovered vote names: cannot recover it"
        )
    store = FileQuorumStateStore(directory / QUORUM_STATE_FILE)
    if store.path.exists():
        raise QuorumStateError(f"{store.path} exists: there is nothing to recover")
    state = recovered_election_state(args.epoch)
    store.write_election_state(state)
    print(
        f"Wrote {store.path}: epoch {state.epoch}, voted (for no real replica). Node "
        f"{meta.node_id} will not vote in epoch {state.epoch} or below; it follows the leader "
        "of that epoch or votes in a later election."
    )
    return 0
