"""``meta.properties``, Kafka Uuids, and formatting a data directory.

A formatted data directory (docs/storage.md) holds ``meta.properties``, a Java properties file that
ties the directory to one cluster and one node, as Kafka's ``MetaProperties`` (version 1)::

    #kraft meta.properties
    version=1
    cluster.id=MkU3OEVBNTcwNTJENDM2Qg
    node.id=1
    directory.id=J8aAPcfLQt2bqs1JT_rMgQ

Ids are Kafka ``Uuid`` strings (:mod:`kraft.common.uuids`): 16 bytes in URL-safe base64
without padding, 22 characters. Kafka reserves the all-zero Uuid (``ZERO_UUID``, "none") and
``ONE_UUID`` (the metadata topic id), and never generates a Uuid whose text starts with ``-``
(it would read as a command-line option). Directory ids additionally avoid the first 100 Uuids
(Kafka's ``DirectoryId``).

Every file here is written the same crash-safe way (:func:`write_atomically`): a temporary
file, fsync, an atomic rename over the target, an fsync of the directory. A crash leaves
either the old file or the new one, never a torn one; a leftover ``.tmp`` is ignored.
"""

from __future__ import annotations

import logging
import random
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import msgspec

from kraft.common.fsutil import fsync_directory, write_atomically
from kraft.common.limits import INT32_MAX
from kraft.common.uuids import ONE_UUID, ZERO_UUID, uuid_from_text, uuid_to_text
from kraft.errors import AlreadyFormattedError, MetaPropertiesError, StorageError

__all__ = [
    "CLUSTER_METADATA_DIR",
    "META_PROPERTIES_FILE",
    "MetaProperties",
    "check_formattable",
    "format_storage",
    "is_formatted",
    "parse_properties",
    "random_directory_id",
    "random_uuid",
    "read_meta_properties",
    "render_properties",
    "write_meta_properties",
]

logger = logging.getLogger(__name__)

META_PROPERTIES_FILE: Final = "meta.properties"
#: The partition directory of the metadata log inside a data directory.
CLUSTER_METADATA_DIR: Final = "__cluster_metadata-0"
#: The only meta.properties version kraft reads and writes (Kafka's ``MetaPropertiesVersion.V1``).
META_PROPERTIES_VERSION: Final = 1

_VERSION_KEY: Final = "version"
_CLUSTER_ID_KEY: Final = "cluster.id"
_NODE_ID_KEY: Final = "node.id"
_DIRECTORY_ID_KEY: Final = "directory.id"


# -- Kafka Uuids -------------------------------------------------------------------------------

#: Never generated: Kafka's ``Uuid.randomUuid`` skips the reserved Uuids.
_RESERVED: Final = frozenset({ZERO_UUID, ONE_UUID})
#: ``DirectoryId.random`` never returns one of the first 100 Uuids (UNASSIGNED, LOST, ...).
_RESERVED_DIRECTORY_IDS: Final = 100


def _draw_uuid(rng: random.Random | None) -> uuid.UUID:
    if rng is None:
        return uuid.uuid4()
    # Same shape as Kafka's (java.util.UUID.randomUUID): version 4, IETF variant.
    return uuid.UUID(int=rng.getrandbits(128), version=4)


def random_uuid(rng: random.Random | None = None) -> str:
    """A fresh Kafka Uuid in text form, as ``kafka-storage random-uuid`` prints it.

    A version-4 UUID from the OS's entropy, or from ``rng`` when given (the simulator passes
    its seeded one). Like Kafka's ``Uuid.randomUuid`` it is never a reserved Uuid and never
    starts with ``-``.
    """
    while True:
        value = _draw_uuid(rng)
        text = uuid_to_text(value)
        if value not in _RESERVED and not text.startswith("-"):
            return text


def random_directory_id(rng: random.Random | None = None) -> str:
    """A fresh directory id: :func:`random_uuid`, avoiding the first 100 Uuids as Kafka does."""
    while True:
        text = random_uuid(rng)
        if uuid_from_text(text).int >= _RESERVED_DIRECTORY_IDS:
            return text


# -- Java properties ---------------------------------------------------------------------------

_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATORS: Final = "=: \t\f"
_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")


def _logical_lines(text: str) -> list[str]:
    """Physical lines joined where a line ends in an odd number of backslashes."""
    out: list[str] = []
    pending: str | None = None
    # Java splits lines on \n, \r and \r\n only (str.splitlines would also split on \x85...).
    for raw in _LINE_BREAK.split(text):
        line = raw.lstrip(" \t\f") if pending is not None else raw
        if pending is None and line.lstrip(" \t\f")[:1] in ("#", "!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (pending or "") + line[:-1]
            continue
        out.append((pending or "") + line)
        pending = None
    if pending is not None:
        out.append(pending)
    return out


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"malformed \\uxxxx escape: {text[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    line = line.lstrip(" \t\f")
    i = 0
    while i < len(line) and line[i] not in _SEPARATORS:
        i += 2 if line[i] == "\\" else 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest)


def parse_properties(text: str) -> dict[str, str]:
    """Parse the Java ``.properties`` format (``Properties.load``), later keys winning.

    Handles comments (``#``, ``!``), the ``=``, ``:`` and whitespace separators, backslash
    escapes including ``\\uXXXX``, and line continuations. ``ValueError`` on a bad escape.
    """
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        if not line.strip(" \t\f"):
            continue
        key, value = _split_key_value(line)
        props[key] = value
    return props


def _escape(text: str, *, is_key: bool) -> str:
    out: list[str] = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[ch])
        elif ch in "=:#!" or (ch == " " and (is_key or i == 0)):
            out.append("\\" + ch)
        elif not 0x20 <= ord(ch) <= 0x7E:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else ch)
        else:
            out.append(ch)
    return "".join(out)


def render_properties(props: Mapping[str, str], comment: str | None = None) -> str:
    """Render ``props`` in the Java ``.properties`` format, one ``key=value`` a line."""
    lines = [f"#{line}" for line in (comment or "").splitlines()] if comment else []
    lines += [f"{_escape(k, is_key=True)}={_escape(v, is_key=False)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


# -- meta.properties ---------------------------------------------------------------------------


class MetaProperties(msgspec.Struct, frozen=True):
    """The identity of a data directory: which cluster, which node, which directory.

    ``directory_id`` is optional as in Kafka (a directory formatted by an old tool has none);
    ``kraft storage format`` always writes one. Construction validates every field and raises
    :class:`~kraft.errors.MetaPropertiesError` naming the bad one.
    """

    cluster_id: str
    node_id: int
    directory_id: str | None = None
    version: int = META_PROPERTIES_VERSION

    def __post_init__(self) -> None:
        if self.version != META_PROPERTIES_VERSION:
            raise MetaPropertiesError(
                f"unsupported meta.properties version {self.version} "
                f"(kraft reads version {META_PROPERTIES_VERSION}; version 0 is ZooKeeper mode)"
            )
        if not self.cluster_id:
            raise MetaPropertiesError("cluster.id is empty")
        if not 0 <= self.node_id <= INT32_MAX:
            raise MetaPropertiesError(f"node.id {self.node_id} is not a non-negative int32")
        if self.directory_id is not None:
            try:
                uuid_from_text(self.directory_id)
            except ValueError as exc:
                raise MetaPropertiesError(f"directory.id: {exc}") from exc

    def to_properties(self) -> dict[str, str]:
        """The key/value pairs of the file, in the order kraft writes them."""
        props = {
            _VERSION_KEY: str(self.version),
            _CLUSTER_ID_KEY: self.cluster_id,
            _NODE_ID_KEY: str(self.node_id),
        }
        if self.directory_id is not None:
            props[_DIRECTORY_ID_KEY] = self.directory_id
        return props

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], source: str = META_PROPERTIES_FILE
    ) -> MetaProperties:
        """Build from parsed properties; :class:`~kraft.errors.MetaPropertiesError` names
        ``source`` and the missing or bad key. Unknown keys are ignored, as Kafka does."""
        try:
            version = _required_int(props, _VERSION_KEY)
            cluster_id = props.get(_CLUSTER_ID_KEY)
            if cluster_id is None:
                raise MetaPropertiesError(f"{_CLUSTER_ID_KEY} is missing")
            node_id = _required_int(props, _NODE_ID_KEY)
            return cls(cluster_id, node_id, props.get(_DIRECTORY_ID_KEY), version)
        except MetaPropertiesError as exc:
            raise MetaPropertiesError(f"{source}: {exc}") from exc

    def verify(self, *, cluster_id: str | None = None, node_id: int | None = None) -> None:
        """Raise :class:`~kraft.errors.MetaPropertiesError` if the directory belongs to
        another cluster or node than the configuration says."""
        if cluster_id is not None and cluster_id != self.cluster_id:
            raise MetaPropertiesError(
                f"the directory belongs to cluster {self.cluster_id!r}, not {cluster_id!r}"
            )
        if node_id is not None and node_id != self.node_id:
            raise MetaPropertiesError(
                f"the directory belongs to node {self.node_id}, not node {node_id}"
            )


def _required_int(props: Mapping[str, str], key: str) -> int:
    text = props.get(key)
    if text is None:
        raise MetaPropertiesError(f"{key} is missing")
    try:
        # Java's Integer.parseInt: an optional sign and ASCII digits, nothing else.
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise ValueError(text)
        return int(text)
    except ValueError as exc:
        raise MetaPropertiesError(f"{key} {text!r} is not a base-10 integer") from exc


def _meta_path(data_dir: Path | str) -> Path:
    return Path(data_dir) / META_PROPERTIES_FILE


def is_formatted(data_dir: Path | str) -> bool:
    """Whether ``data_dir`` holds a ``meta.properties`` (a leftover ``.tmp`` does not count)."""
    return _meta_path(data_dir).exists()


def read_meta_properties(data_dir: Path | str) -> MetaProperties:
    """Read ``<data_dir>/meta.properties``.

    A missing file, an unreadable one, or a malformed one is a
    :class:`~kraft.errors.MetaPropertiesError` naming the file.
    """
    path = _meta_path(data_dir)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError as exc:
        raise MetaPropertiesError(
            f"{path} not found: the directory is not formatted (run `kraft storage format`)"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        logger.error("cannot read %s: %s", path, exc)
        raise MetaPropertiesError(f"cannot read {path}: {exc}") from exc
    try:
        props = parse_properties(text)
    except ValueError as exc:
        logger.error("malformed %s: %s", path, exc)
        raise MetaPropertiesError(f"{path}: {exc}") from exc
    try:
        return MetaProperties.from_properties(props, source=str(path))
    except MetaPropertiesError as exc:
        logger.error("%s", exc)
        raise


def write_meta_properties(
    data_dir: Path | str, meta: MetaProperties, *, comment: str | None = None
) -> Path:
    """Write ``<data_dir>/meta.properties`` crash-safely (:func:`write_atomically`).

    ``comment`` becomes ``#`` lines at the top (the CLI puts the date there, as Java's
    ``Properties.store`` does; the library reads no clock). Returns the file's path.
    """
    path = _meta_path(data_dir)
    text = render_properties(meta.to_properties(), comment or "kraft meta.properties")
    try:
        write_atomically(path, text.encode("utf-8"))
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc}") from exc
    return path


def check_formattable(data_dir: str | Path, cluster_id: str) -> Path:
    """``data_dir`` as a path, once it is clear that it may be formatted for ``cluster_id``:
    :class:`~kraft.errors.MetaPropertiesError` for a cluster id that is not a Kafka Uuid,
    :class:`~kraft.errors.AlreadyFormattedError` if ``meta.properties`` exists."""
    try:
        uuid_from_text(cluster_id)
    except ValueError as exc:
        raise MetaPropertiesError(f"cluster id: {exc}") from exc
    directory = Path(data_dir)
    if is_formatted(directory):
        raise AlreadyFormattedError(f"log directory {directory} is already formatted")
    return directory


def format_storage(
    data_dir: Path | str,
    cluster_id: str,
    node_id: int,
    *,
    rng: random.Random | None = None,
    comment: str | None = None,
    directory_id: str | None = None,
) -> MetaProperties:
    """Format ``data_dir`` for ``node_id`` of ``cluster_id`` (``kafka-storage format``).

    Creates the directory (and parents) and its ``__cluster_metadata-0`` partition directory,
    then writes ``meta.properties`` with ``directory_id`` (default: a fresh one; a KIP-853
    initial controller's is the one ``--initial-controllers`` names), last, so that a crash
    part way leaves a directory that is not formatted.

    Raises :class:`~kraft.errors.AlreadyFormattedError` if ``meta.properties`` exists (the
    directory is left untouched), :class:`~kraft.errors.MetaPropertiesError` for a cluster id
    that is not a Kafka Uuid (Kafka's rule) or a negative node id, and
    :class:`~kraft.errors.StorageError` for I/O failures.
    """
    directory = check_formattable(data_dir, cluster_id)
    meta = MetaProperties(cluster_id, node_id, directory_id or random_directory_id(rng))
    try:
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        if created:
            fsync_directory(directory.resolve().parent)
        partition_dir = directory / CLUSTER_METADATA_DIR
        if not partition_dir.is_dir():
            partition_dir.mkdir()
            fsync_directory(directory)
    except OSError as exc:
        raise StorageError(f"cannot create the data directory {directory}: {exc}") from exc
    write_meta_properties(directory, meta, comment=comment)
    logger.info(
        "formatted %s: cluster %s, node %d, directory %s",
        directory,
        cluster_id,
        node_id,
        meta.directory_id,
    )
    return meta
