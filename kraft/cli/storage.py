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
from kraft.errors import AlreadyFormattedError, MetaPropertiesError, QuorumStateError
from kraft.log.meta_properties import (
    META_PROPERTIES_FILE,
    format_storage,
    is_formatted,
    random_uuid,
    read_meta_properties,
)
from kraft.log.quorum_state import (
    NO_SUCH_VOTER,
    QUORUM_STATE_FILE,
    FileQuorumStateStore,
    recovered_election_state,
)

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
            "with the cluster id, the node id and a fresh directory id. Refuses a directory "
            "that is already formatted."
        ),
    )
    fmt.add_argument(
        "--cluster-id",
        "-t",
        required=True,
        help="the cluster id, a Kafka Uuid (see `kraft storage random-uuid`)",
    )
    fmt.add_argument("--node-id", "-n", required=True, type=_node_id, help="this node's id")
    fmt.add_argument(
        "--ignore-formatted",
        "-g",
        action="store_true",
        help="succeed without change if DIR is already formatted for the same cluster and node",
    )
    fmt.add_argument("directory", metavar="DIR", type=Path, help="the data directory")
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


def _format(args: argparse.Namespace) -> int:
    directory: Path = args.directory
    if args.ignore_formatted and is_formatted(directory):
        meta = read_meta_properties(directory)
        meta.verify(cluster_id=args.cluster_id, node_id=args.node_id)
        print(f"{directory} is already formatted (directory id {meta.directory_id}); skipping")
        return 0
    # Java's Properties.store dates the file; the library reads no clock, the CLI may.
    stamp = datetime.datetime.now(datetime.UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
    try:
        meta = format_storage(directory, args.cluster_id, args.node_id, comment=stamp)
    except AlreadyFormattedError as exc:
        raise AlreadyFormattedError(
            f"{exc}; use --ignore-formatted to accept a directory formatted for the same "
            "cluster and node"
        ) from exc
    print(
        f"Formatted {directory}: cluster.id={meta.cluster_id} node.id={meta.node_id} "
        f"directory.id={meta.directory_id}"
    )
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
