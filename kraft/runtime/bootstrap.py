"""Formatting a data directory for a KIP-853 quorum (``kraft storage format --standalone |
--initial-controllers | --no-initial-controllers``; Kafka's ``Formatter``).

A dynamic quorum (``kraft.version`` 1) keeps its voters in the log. Its first voter set comes
from the *bootstrap checkpoint*, snapshot ``00000000000000000000-0000000000.checkpoint`` of the
metadata partition, which formatting writes through the node's :class:`~kraft.log.file.FileLog`
(so that its name and layout are the log's own): a ``KRaftVersionRecord(1)`` and, for an
initial controller, the ``VotersRecord`` of every initial controller. A node that will join an
existing quorum (``--no-initial-controllers``) gets ``kraft.version`` 1 and no voters; it
learns them from the leader.

Initial controllers are written as Kafka's ``DynamicVoter`` text, ``id@host:port:DIRECTORY_ID``
(an IPv6 host in brackets), comma-separated. Every error is a :class:`~kraft.config.ConfigError`
that names the entry and what is wrong with it.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from kraft.common.uuids import uuid_from_text, uuid_to_text
from kraft.config import ConfigError, Endpoint, parse_endpoint, split_node_id
from kraft.errors import StorageError
from kraft.log.file import FileLog
from kraft.log.meta_properties import (
    CLUSTER_METADATA_DIR,
    MetaProperties,
    check_formattable,
    format_storage,
)
from kraft.protocol.api import SUPPORTED_KRAFT_VERSIONS
from kraft.raft.states import ReplicaKey
from kraft.raft.voter_history import write_bootstrap_checkpoint
from kraft.raft.voter_set import DEFAULT_LISTENER, VoterNode, VoterSet

__all__ = [
    "DYNAMIC_KRAFT_VERSION",
    "format_dynamic_storage",
    "parse_directory_id",
    "parse_initial_controllers",
    "voter_node",
    "voters_text",
]

#: The ``kraft.version`` a dynamic quorum is formatted with (Kafka's ``KRAFT_VERSION_1``).
DYNAMIC_KRAFT_VERSION = 1
#: Kafka's ``DirectoryId`` reserves the first 100 Uuids (UNASSIGNED, LOST, MIGRATING, ...).
_RESERVED_DIRECTORY_IDS = 100


def parse_directory_id(text: str, context: str) -> str:
    """``text`` if it is a directory id a replica may have, else a :class:`ConfigError`."""
    try:
        value = uuid_from_text(text.strip())
    except ValueError as exc:
        raise ConfigError(f"{context}: directory id {exc}") from None
    if value.int < _RESERVED_DIRECTORY_IDS:
        raise ConfigError(f"{context}: directory id {text.strip()!r} is a reserved Uuid")
    return text.strip()


def voter_node(node_id: int, directory_id: str, listener: Endpoint) -> VoterNode:
    """The voter a node formatted (or added) with this id, directory and listener is: its
    listener named ``CONTROLLER``, ``kraft.version`` 0 to 1 supported (Kafka's
    ``DynamicVoter.toVoterNode``)."""
    return VoterNode(
        ReplicaKey(node_id, uuid_from_text(directory_id)),
        ((DEFAULT_LISTENER, listener.host, listener.port),),
        (min(SUPPORTED_KRAFT_VERSIONS), max(SUPPORTED_KRAFT_VERSIONS)),
    )


def _parse_one(entry: str) -> tuple[int, Endpoint, str]:
    context = f"initial controller {entry!r}"
    expected = "id@host:port:DIRECTORY_ID"
    node_id, rest = split_node_id(entry, context, expected)
    address, sep, directory = rest.rpartition(":")
    if not sep or ":" not in address:
        raise ConfigError(f"{context}: expected {expected}")
    return node_id, parse_endpoint(address, context), parse_directory_id(directory, context)


def parse_initial_controllers(text: str) -> VoterSet:
    """The voter set of ``"1@host:port:DIRECTORY_ID,2@..."`` (Kafka's ``DynamicVoters``).

    :class:`ConfigError` for an entry that is not ``id@host:port:DIRECTORY_ID``, an id or a
    directory id given twice, a directory id that is not a Kafka Uuid, or an empty list.
    """
    voters: dict[int, VoterNode] = {}
    directories: dict[str, int] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        node_id, listener, directory_id = _parse_one(entry)
        if node_id in voters:
            raise ConfigError(f"initial controller {entry!r}: node id {node_id} is listed twice")
        if directory_id in directories:
            raise ConfigError(
                f"initial controller {entry!r}: directory id {directory_id} is also node "
                f"{directories[directory_id]}'s"
            )
        directories[directory_id] = node_id
        voters[node_id] = voter_node(node_id, directory_id, listener)
    if not voters:
        raise ConfigError(
            f"initial controllers {text!r}: none given (expected id@host:port:DIRECTORY_ID,...)"
        )
    return VoterSet(voters)


def voters_text(voters: VoterSet) -> str:
    """``voters`` in the ``--initial-controllers`` form, ``id@host:port:DIRECTORY_ID,...``."""
    entries = []
    for node in voters.nodes():
        directory = "" if node.key.directory_id is None else uuid_to_text(node.key.directory_id)
        address = ",".join(str(Endpoint(host, port)) for _, host, port in node.endpoints[:1])
        entries.append(f"{node.key.id}@{address}:{directory}")
    return ",".join(entries)


def format_dynamic_storage(
    data_dir: Path | str,
    cluster_id: str,
    node_id: int,
    voters: VoterSet | None,
    *,
    directory_id: str | None = None,
    comment: str | None = None,
) -> MetaProperties:
    """Format ``data_dir`` for ``node_id`` of a ``kraft.version`` 1 quorum.

    ``voters`` are the initial voters (``None``: a node that will join, no voters). The node's
    directory id is ``directory_id`` (default: a fresh one); when ``voters`` holds ``node_id``
    it must be the directory id they give it (the node is that voter). The bootstrap checkpoint
    goes into the log first and ``meta.properties`` last, as Kafka's ``Formatter`` does: a crash
    in between leaves a directory that is not formatted, whose ``__cluster_metadata-0`` must be
    removed before it is formatted again (the checkpoint goes only into an empty log).

    Raises :class:`ConfigError` for a node missing from ``voters`` or with another directory
    id, :class:`~kraft.errors.AlreadyFormattedError`, :class:`~kraft.errors.MetaPropertiesError`
    for a bad cluster id, :class:`~kraft.errors.StorageError` for an unusable directory.
    """
    if voters is not None:
        key = voters.key(node_id)
        if key is None:
            raise ConfigError(
                f"node {node_id} is not one of the initial controllers ({sorted(voters.ids)}): "
                "format a node that will join with --no-initial-controllers"
            )
        assert key.directory_id is not None  # every initial controller names its directory
        own = uuid_to_text(key.directory_id)
        if directory_id is not None and directory_id != own:
            raise ConfigError(
                f"node {node_id}'s directory id is {directory_id}, but the initial controllers "
                f"give it {own}"
            )
        directory_id = own
    directory = check_formattable(data_dir, cluster_id)
    partition = directory / CLUSTER_METADATA_DIR
    log = FileLog.open(partition)
    try:
        try:
            write_bootstrap_checkpoint(
                log, DYNAMIC_KRAFT_VERSION, voters, timestamp_ms=_wall_clock_ms()
            )
        except ValueError as exc:
            raise StorageError(
                f"{partition} holds a log already ({exc}): remove it, then format again"
            ) from exc
    finally:
        log.close()
    return format_storage(
        directory, cluster_id, node_id, comment=comment, directory_id=directory_id
    )


def _wall_clock_ms() -> int:
    # The checkpoint's header carries the wall-clock time of formatting, as in Kafka.
    return int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)
