"""``kraft metadata shell``: browse a metadata image as a file tree (Kafka's
``kafka-metadata-shell``).

The image comes from a snapshot file (``--snapshot FILE``) or from a metadata log directory
(``--directory DIR``: its latest snapshot, if any, then every batch of its ``*.log`` segments
after that snapshot, read as they are on disk, uncommitted tail included, as Kafka's shell
does), with Kafka's metadata transactions (``MetadataBatchLoader``). Nothing is written. A
segment that ends in bytes that are not a batch stops the reading there, and a record that does
not fit the image is skipped, each with a warning on stderr.

The tree (Kafka's shell paths; directories end in ``/`` in ``ls -l`` terms, leaves hold text):

- ``/features/<name>``: the finalized level of each feature, ``metadata.version`` included;
- ``/brokers/<id>``: a broker's registration;
- ``/topics/<name>/id``, ``/topics/<name>/name``, ``/topics/<name>/<partition>``: a partition's
  replicas, ISR, leader and epochs;
- ``/configs/<TYPE>:<name>/<config>`` (``TOPIC:orders``, ``BROKER:1``; ``BROKER`` alone for the
  cluster default): a config's value;
- ``/producerIds/nextProducerId``; ``/provenance/{offset,epoch,lastContainedLogTimeMs}``;
- the areas kraft's controller does not write, when a Kafka log has them:
  ``/controllers/<id>``, ``/clientQuotas/<type>=<name>[,...]/<key>`` (an entity part without
  a name is ``<type>=<default>``), ``/acls/<id>``, ``/scram/<mechanism>/<user>``,
  ``/delegationTokens/<id>``.

Records are shown as JSON objects with kraft's field names; uuids in Kafka's text form.

Commands, one per line on stdin or one as arguments: ``ls [PATH...]``, ``cat PATH...``, ``tree
[PATH...]``, ``find [PATH...]``, ``cd [PATH]``, ``pwd``, ``help``, ``exit``. Paths are absolute
or relative to the current directory, may use ``..``, and each part may be a glob (``*``, ``?``,
``[...]``). A command that fails prints ``<command>: <why>`` on stderr; the exit code is then 1.
"""

from __future__ import annotations

import argparse
import fnmatch
import shlex
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import msgspec

from kraft.cli.log_dump import find_segments, is_snapshot_file
from kraft.common.uuids import uuid_to_text
from kraft.errors import CorruptRecordError, KraftError, StorageError
from kraft.metadata.image import METADATA_VERSION_FEATURE, MetadataImage, QuotaEntity
from kraft.metadata.loader import MetadataBatchLoader, load_snapshot
from kraft.metadata.serde import MetadataRecordSerde
from kraft.record.batch import iter_batches
from kraft.record.typed import decode_batch
from kraft.snapshot import read_snapshot_file

__all__ = ["Shell", "image_tree", "load_directory", "load_snapshot_file", "register"]

#: Kafka's ``ConfigResource.Type`` names by id.
CONFIG_TYPES = {
    0: "UNKNOWN",
    2: "TOPIC",
    4: "BROKER",
    8: "BROKER_LOGGER",
    16: "CLIENT_METRICS",
    32: "GROUP",
}


# -- loading -----------------------------------------------------------------------------------


def load_snapshot_file(path: Path, warn: Callable[[str], None]) -> MetadataImage:
    """The image in the snapshot file ``path``. ``StorageError`` (or ``CorruptSnapshotError``)
    for a file that is not a valid snapshot."""
    reader = read_snapshot_file(path, MetadataRecordSerde())
    return load_snapshot(reader, lambda where, why: warn(f"{path}: skipping {where}: {why}"))[1]


def load_directory(path: Path, warn: Callable[[str], None]) -> MetadataImage:
    """The image of the metadata log in ``path`` (a partition directory, or a data directory
    holding ``__cluster_metadata-0``): see the module docstring. A transaction still open at
    the end of the log is left out, as the loader of a broker leaves it."""
    files = find_segments(path)
    snapshots = [f for f in files if is_snapshot_file(f)]
    image = MetadataImage.EMPTY
    if snapshots:
        image = load_snapshot_file(snapshots[-1], warn)
    start = image.provenance.offset + 1
    serde = MetadataRecordSerde()
    batches = MetadataBatchLoader(
        image, lambda delta, image: None, lambda where, why: warn(f"skipping {where}: {why}")
    )
    last = None
    for segment in (f for f in files if not is_snapshot_file(f)):
        try:
            data = segment.read_bytes()
        except OSError as exc:
            raise StorageError(f"{segment}: {exc.strerror}") from exc
        try:
            for view in iter_batches(data):
                if view.last_offset >= start:
                    last = decode_batch(view, serde)
                    batches.load_batch(last)
        except CorruptRecordError as exc:
            warn(f"{segment}: stopped reading: {exc}")
    if last is not None:
        batches.flush(last)
    return batches.image


# -- the tree ----------------------------------------------------------------------------------


class Node:
    """A directory (``children`` gives its entries, built when first asked) or a leaf
    (``text``)."""

    __slots__ = ("_children", "_make_children", "text")

    def __init__(
        self,
        *,
        text: str | None = None,
        children: Callable[[], Mapping[str, Node]] | None = None,
    ) -> None:
        self.text = text
        self._make_children = children
        self._children: Mapping[str, Node] | None = None

    @property
    def is_directory(self) -> bool:
        return self._make_children is not None

    def children(self) -> Mapping[str, Node]:
        if self._make_children is None:
            return {}
        if self._children is None:
            self._children = self._make_children()
        return self._children


def _plain(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return uuid_to_text(value)
    if isinstance(value, msgspec.Struct):
        return {name: _plain(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


def _json(value: Any) -> str:
    return msgspec.json.encode(_plain(value)).decode()


def _leaf(value: Any) -> Node:
    return Node(text=value if isinstance(value, str) else _json(value))


def _directory(make: Callable[[], Mapping[str, Node]]) -> Node:
    return Node(children=make)


def _config_name(resource_type: int, resource_name: str) -> str:
    type_name = CONFIG_TYPES.get(resource_type, str(resource_type))
    return f"{type_name}:{resource_name}" if resource_name else type_name


def image_tree(image: MetadataImage) -> Node:
    """The root of ``image``'s tree (see the module docstring)."""

    def features() -> dict[str, Node]:
        levels = {}
        if image.features.metadata_version:
            levels[METADATA_VERSION_FEATURE] = _leaf(str(image.features.metadata_version))
        for name, level in image.features.finalized.items():
            levels[name] = _leaf(str(level))
        return levels

    def topic(name: str) -> Node:
        found = image.topics[name]

        def entries() -> dict[str, Node]:
            nodes = {"name": _leaf(found.name), "id": _leaf(uuid_to_text(found.id))}
            for index, partition in found.partitions.items():
                nodes[str(index)] = _leaf(partition)
            return nodes

        return _directory(entries)

    def config(values: Mapping[str, str]) -> Node:
        return _directory(lambda: {name: _leaf(value) for name, value in values.items()})

    def configs() -> dict[str, Node]:
        return {_config_name(*key): config(values) for key, values in image.configs.items()}

    provenance = image.provenance
    return _directory(
        lambda: {
            "features": _directory(features),
            "brokers": _directory(
                lambda: {str(i): _leaf(broker) for i, broker in image.brokers.items()}
            ),
            "topics": _directory(lambda: {name: topic(name) for name in image.topics}),
            "configs": _directory(configs),
            "producerIds": _directory(
                lambda: {"nextProducerId": _leaf(str(image.producer_ids.next_producer_id))}
            ),
            "provenance": _directory(
                lambda: {
                    "offset": _leaf(str(provenance.offset)),
                    "epoch": _leaf(str(provenance.epoch)),
                    "lastContainedLogTimeMs": _leaf(str(provenance.last_contained_log_time_ms)),
                }
            ),
            **_other_areas(image),
        }
    )


#: Kafka's ``ScramMechanism`` names by id.
SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


def _entity_name(entity: QuotaEntity) -> str:
    return ",".join(
        f"{part.entity_type}={'<default>' if part.entity_name is None else part.entity_name}"
        for part in entity
    )


def _other_areas(image: MetadataImage) -> dict[str, Node]:
    """The areas kraft's controller does not write (see the module docstring)."""

    def quotas(values: Mapping[str, float]) -> Node:
        return _directory(lambda: {key: _leaf(str(value)) for key, value in values.items()})

    def users(credentials: dict[str, Node]) -> Node:
        return _directory(lambda: credentials)

    def scram() -> dict[str, Node]:
        by_mechanism: dict[str, dict[str, Node]] = {}
        for (user, mechanism), credential in image.scram_credentials.items():
            name = SCRAM_MECHANISMS.get(mechanism, str(mechanism))
            by_mechanism.setdefault(name, {})[user] = _leaf(credential)
        return {name: users(credentials) for name, credentials in by_mechanism.items()}

    return {
        "controllers": _directory(
            lambda: {str(i): _leaf(record) for i, record in image.controllers.items()}
        ),
        "clientQuotas": _directory(
            lambda: {_entity_name(e): quotas(q) for e, q in image.client_quotas.items()}
        ),
        "acls": _directory(lambda: {uuid_to_text(i): _leaf(acl) for i, acl in image.acls.items()}),
        "scram": _directory(scram),
        "delegationTokens": _directory(
            lambda: {i: _leaf(token) for i, token in image.delegation_tokens.items()}
        ),
    }


def _sort_key(name: str) -> tuple[int, int, str]:
    # Partitions and broker ids in number order, the rest by name.
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


# -- the shell ---------------------------------------------------------------------------------


class ShellError(KraftError):
    """A command that cannot run: an unknown path, a leaf where a directory is needed..."""


_HELP = """\
ls [PATH...]     list a directory's entries (a leaf: its name)
cat PATH...      print the text of leaves
tree [PATH...]   print a directory and everything under it, leaves with their text
find [PATH...]   print the path of every node under a directory
cd [PATH]        change the current directory (no PATH: /)
pwd              print the current directory
help             this text
exit             stop reading commands"""


class Shell:
    """Runs the shell's commands over one image's tree (see the module docstring)."""

    def __init__(self, image: MetadataImage, out: TextIO, err: TextIO) -> None:
        self.root = image_tree(image)
        self.cwd: tuple[str, ...] = ()
        self.out = out
        self.err = err
        self.failed = False
        self.exited = False
        self._commands: dict[str, Callable[[list[str]], None]] = {
            "ls": self._ls,
            "cat": self._cat,
            "tree": self._tree,
            "find": self._find,
            "cd": self._cd,
            "pwd": lambda args: self._print(_text_path(self.cwd)),
            "help": lambda args: self._print(_HELP),
            "exit": self._exit,
        }

    def run_line(self, line: str) -> None:
        """Run one command line; a failure prints on ``err`` and sets :attr:`failed`."""
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            self._fail("shell", str(exc))
            return
        if words:
            self.run(words)

    def run(self, words: list[str]) -> None:
        command, args = words[0], words[1:]
        handler = self._commands.get(command)
        if handler is None:
            self._fail(command, "unknown command (try help)")
            return
        try:
            handler(args)
        except ShellError as exc:
            self._fail(command, str(exc))

    def _fail(self, command: str, why: str) -> None:
        self.failed = True
        print(f"{command}: {why}", file=self.err)

    def _print(self, text: str) -> None:
        print(text, file=self.out)

    def _resolve(self, path: str) -> list[tuple[tuple[str, ...], Node]]:
        """The nodes ``path`` names (several with globs), with their absolute paths."""
        start = () if path.startswith("/") else self.cwd
        matches = [(start, self._node(start))]
        for part in path.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                matches = [(at[:-1], self._node(at[:-1])) for at in {at for at, _ in matches}]
                continue
            step: list[tuple[tuple[str, ...], Node]] = []
            for at, node in matches:
                children = node.children()
                if part in children:
                    step.append(((*at, part), children[part]))
                elif any(glob in part for glob in "*?["):
                    names = sorted(fnmatch.filter(children, part), key=_sort_key)
                    step.extend(((*at, name), children[name]) for name in names)
            matches = step
        if not matches:
            raise ShellError(f"{path}: no such node")
        return matches

    def _node(self, at: tuple[str, ...]) -> Node:
        node = self.root
        for part in at:
            node = node.children()[part]
        return node

    def _ls(self, args: list[str]) -> None:
        targets = [match for arg in args or ["."] for match in self._resolve(arg)]
        for at, node in targets:
            if len(targets) > 1 and node.is_directory:
                self._print(f"{_text_path(at)}:")
            if node.is_directory:
                for name in sorted(node.children(), key=_sort_key):
                    self._print(name)
            else:
                self._print(at[-1] if at else "/")

    def _cat(self, args: list[str]) -> None:
        if not args:
            raise ShellError("a path is needed")
        for arg in args:
            for at, node in self._resolve(arg):
                if node.is_directory:
                    raise ShellError(f"{_text_path(at)}: is a directory")
                self._print(node.text or "")

    def _tree(self, args: list[str]) -> None:
        for arg in args or ["."]:
            for at, node in self._resolve(arg):
                for depth, name, child in _walk(at[-1] if at else "/", node, 0):
                    indent = "  " * depth
                    if child.is_directory:
                        self._print(f"{indent}{name}:")
                    else:
                        self._print(f"{indent}{name}: {child.text}")

    def _find(self, args: list[str]) -> None:
        for arg in args or ["."]:
            for at, node in self._resolve(arg):
                for path in _paths(at, node):
                    self._print(_text_path(path))

    def _cd(self, args: list[str]) -> None:
        if len(args) > 1:
            raise ShellError("one path at most")
        matches = self._resolve(args[0] if args else "/")
        if len(matches) != 1:
            raise ShellError(f"{args[0]}: names {len(matches)} nodes")
        at, node = matches[0]
        if not node.is_directory:
            raise ShellError(f"{_text_path(at)}: not a directory")
        self.cwd = at

    def _exit(self, args: list[str]) -> None:
        self.exited = True


def _text_path(at: tuple[str, ...]) -> str:
    return "/" + "/".join(at)


def _walk(name: str, node: Node, depth: int) -> Iterator[tuple[int, str, Node]]:
    yield depth, name, node
    children = node.children()
    for child in sorted(children, key=_sort_key):
        yield from _walk(child, children[child], depth + 1)


def _paths(at: tuple[str, ...], node: Node) -> Iterator[tuple[str, ...]]:
    yield at
    children = node.children()
    for child in sorted(children, key=_sort_key):
        yield from _paths((*at, child), children[child])


# -- the command line --------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft metadata shell`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "metadata",
        help="inspect the cluster metadata (Kafka's metadata records and image)",
        description="Inspect Kafka's cluster metadata kept in a metadata log or snapshot.",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="metadata commands", metavar="COMMAND")
    shell = commands.add_parser(
        "shell",
        help="browse the metadata image as a file tree (like kafka-metadata-shell)",
        description=(
            "Load the metadata image from a snapshot file or a metadata log directory and run "
            "ls, cat, tree, find, cd, pwd over it: the command given as arguments, else one "
            "command per line from stdin. Paths: /features, /brokers/<id>, "
            "/topics/<name>/<partition>, /configs/<TYPE>:<name>, /producerIds, /provenance."
        ),
    )
    source = shell.add_mutually_exclusive_group(required=True)
    source.add_argument("--snapshot", type=Path, metavar="FILE", help="a *.checkpoint file")
    source.add_argument(
        "--directory",
        type=Path,
        metavar="DIR",
        help="a metadata log directory, or a data directory holding __cluster_metadata-0",
    )
    shell.add_argument("command", nargs=argparse.REMAINDER, help="one command and its paths")
    shell.set_defaults(handler=_shell)


def _shell(args: argparse.Namespace) -> int:
    err = sys.stderr

    def warn(line: str) -> None:
        print(f"warning: {line}", file=err)

    if args.snapshot is not None:
        image = load_snapshot_file(args.snapshot, warn)
    else:
        image = load_directory(args.directory, warn)
    shell = Shell(image, sys.stdout, err)
    if args.command:
        shell.run(list(args.command))
        return 1 if shell.failed else 0
    prompt = sys.stdin.isatty()
    while not shell.exited:
        if prompt:
            print(">> ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            break
        shell.run_line(line)
    return 1 if shell.failed else 0
