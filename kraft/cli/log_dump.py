"""``kraft log dump``: print the batches of log segments, like Kafka's ``kafka-dump-log``.

The scan (:func:`scan_segment`) walks a file batch by batch, reading each batch's 12-byte
prefix, then the bytes its length announces, and handing them to
:func:`kraft.record.read_batch` with ``verify_crc=False``: the CRC is computed and reported
for every batch, and a bad one does not stop the dump. What does stop the scan of a file is a
tail that cannot be a batch (a length past the end of the file, a bad magic byte): there is no
way to find the next batch after it, so the dump says where it stopped and how many bytes it
could not read. With ``--records`` every record is shown, control records decoded
(``kraft.record.control``); with ``--metadata`` (Kafka's ``--cluster-metadata-decoder``) every
record too, and each data record's value decoded as a metadata record
(``kraft.metadata.codec``) and shown as Kafka's decoder shows it: ``{"type":
"PARTITION_RECORD", "version": 1, "data": {...}}`` with Kafka's field names and uuids in Kafka's
text form. The scan reads the files itself; it does not use the log
implementation, so it can look at a directory that a running node would refuse.

Snapshot files (``<offset>-<epoch>.checkpoint``, KIP-630) hold batches too and are dumped the
same way; before their batches a :class:`SnapshotEvent` gives the snapshot id, the last
contained log timestamp from its header, and whether the file is a valid snapshot (header
first, footer last, offsets contiguous from 0, the snapshot's epoch throughout: the checks of
:class:`kraft.snapshot.SnapshotReader`). A directory's snapshots are dumped after its segments.

The scan yields plain events (:class:`FileEvent`, :class:`SnapshotEvent`, :class:`BatchEvent`,
:class:`RecordEvent`, :class:`TailEvent`); the text renderer and the JSON Lines renderer are
two views of them.
"""

from __future__ import annotations

import argparse
import base64
import os
import struct
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import msgspec

from kraft.common.uuids import uuid_to_text
from kraft.errors import CorruptRecordError, LogDirectoryError, StorageError
from kraft.log.meta_properties import CLUSTER_METADATA_DIR
from kraft.metadata.codec import decode_record
from kraft.metadata.records import ApiMessageAndVersion
from kraft.record import LOG_OVERHEAD, RecordBatch, read_batch
from kraft.record.control import ControlMessage, ControlRecordType, decode_control_value
from kraft.record.serde import BytesSerde
from kraft.snapshot import (
    SNAPSHOT_SUFFIX,
    parse_snapshot_file_name,
    read_snapshot_file,
)

__all__ = [
    "BatchEvent",
    "DumpEvent",
    "FileEvent",
    "RecordEvent",
    "SnapshotEvent",
    "TailEvent",
    "control_type_name",
    "find_segments",
    "is_snapshot_file",
    "metadata_payload",
    "register",
    "scan_file",
    "scan_segment",
    "scan_snapshot",
]

_CONTROL_KEY: Final = struct.Struct(">hh")  # version, type
_LENGTH: Final = struct.Struct(">i")
_COMPRESSION_NAMES: Final = ("none", "gzip", "snappy", "lz4", "zstd")
_SEGMENT_SUFFIX: Final = ".log"


def _control_type(key: bytes | None) -> ControlRecordType | int | None:
    # Leniently, as Kafka's ControlRecordType.parse: any key version, extra bytes ignored.
    # (decode_control_key is strict, right for the log, wrong for a tool showing damage.)
    if key is None or len(key) < _CONTROL_KEY.size:
        return None
    _version, type_id = _CONTROL_KEY.unpack_from(key)
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return int(type_id)


def control_type_name(key: bytes | None) -> str:
    """The name of the control record type in a control record's key (``int16 version,
    int16 type``), ``UNKNOWN(n)`` for a type kraft does not know, ``INVALID`` for a key too
    short to hold one."""
    kind = _control_type(key)
    if kind is None:
        return "INVALID"
    if isinstance(kind, ControlRecordType):
        return kind.name
    return f"UNKNOWN({kind})"


def _decode_control(key: bytes | None, value: bytes | None) -> ControlMessage | str:
    """The decoded control message, or why it cannot be decoded."""
    kind = _control_type(key)
    if kind is None or value is None:
        return "a control record with a null or short key, or a null value"
    try:
        return decode_control_value(kind, value)
    except CorruptRecordError as exc:
        return str(exc)


def _json_value(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        return {
            _camel_case(name): _json_value(getattr(value, name)) for name in value.__struct_fields__
        }
    if isinstance(value, tuple):
        return [_json_value(item) for item in value]
    if isinstance(value, uuid.UUID):
        return uuid_to_text(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def _camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def metadata_payload(record: ApiMessageAndVersion) -> dict[str, Any]:
    """``record`` as Kafka's ``MetadataRecordSerde`` decoder prints it: the record type's name
    (``PARTITION_RECORD``), its version, and its fields under Kafka's JSON names (camelCase),
    uuids in Kafka's text form, bytes in base64."""
    return {
        "type": f"{record.message.api_key.name}_RECORD",
        "version": record.version,
        "data": _json_value(record.message),
    }


def _decode_metadata(value: bytes | None) -> dict[str, Any] | str:
    """The metadata record in a data record's value, or why it cannot be decoded."""
    if value is None:
        return "a metadata record with a null value"
    try:
        return metadata_payload(decode_record(value))
    except CorruptRecordError as exc:
        return str(exc)


# -- events ------------------------------------------------------------------------------------


class FileEvent(msgspec.Struct, tag="file", tag_field="type"):
    """The scan of one file begins."""

    path: str
    size_in_bytes: int


class SnapshotEvent(msgspec.Struct, tag="snapshot", tag_field="type"):
    """A snapshot file: its id (from its name), its header's last contained log timestamp,
    and why it is not a valid snapshot, if it is not."""

    path: str
    end_offset: int | None
    epoch: int | None
    last_contained_log_timestamp_ms: int | None
    valid: bool
    problem: str | None = None


class BatchEvent(msgspec.Struct, tag="batch", tag_field="type"):
    """One batch: its header fields, whether its CRC holds, its control record types."""

    path: str
    position: int
    base_offset: int
    last_offset: int
    epoch: int
    count: int
    size_in_bytes: int
    magic: int
    crc: int
    crc_valid: bool
    is_control: bool
    is_transactional: bool
    compression: str
    base_timestamp_ms: int
    max_timestamp_ms: int
    #: For a control batch, the type of each record; ``None`` for a data batch or when the
    #: records cannot be decoded (see ``records_error``).
    control_types: list[str] | None = None
    #: Why the records of this batch cannot be decoded, if they cannot.
    records_error: str | None = None


class RecordEvent(msgspec.Struct, tag="record", tag_field="type"):
    """One record of the batch before it (``--records``). Bytes are base64 in JSON.

    A control record carries its type name and its decoded message (``control``), or why the
    message cannot be decoded (``control_error``); with ``--metadata`` a data record carries
    its metadata record (``metadata``) or why it cannot be decoded (``metadata_error``).
    """

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    control_type: str | None = None
    control: ControlMessage | None = None
    control_error: str | None = None
    #: With ``--metadata``, a data record's value decoded (:func:`metadata_payload`), or why
    #: it cannot be decoded (``metadata_error``).
    metadata: dict[str, Any] | None = None
    metadata_error: str | None = None


class TailEvent(msgspec.Struct, tag="error", tag_field="type"):
    """The scan of a file stopped: the bytes from ``position`` to the end are not a batch."""

    path: str
    position: int
    unread_bytes: int
    message: str


DumpEvent = FileEvent | SnapshotEvent | BatchEvent | RecordEvent | TailEvent

_JSON: Final = msgspec.json.Encoder()


# -- the scan ----------------------------------------------------------------------------------


def is_snapshot_file(path: Path) -> bool:
    """Whether ``path`` is named as a frozen snapshot (``*.checkpoint``)."""
    return path.name.endswith(SNAPSHOT_SUFFIX)


def find_segments(path: Path) -> list[Path]:
    """The files ``path`` names: the file itself, or the ``*.log`` segments then the
    ``*.checkpoint`` snapshots of a partition directory, or those of ``__cluster_metadata-0``
    inside a data directory.

    Any file given by name is read (a snapshot ``.checkpoint`` holds batches too).
    """
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise LogDirectoryError(f"{path}: no such file or directory")
    for directory in (path, path / CLUSTER_METADATA_DIR):
        if directory.is_dir():
            files = [p for p in directory.iterdir() if p.is_file()]
            # Segment names are 20-digit zero-padded base offsets: text order is offset order;
            # snapshot names start with a 20-digit end offset, then the epoch: the same holds.
            segments = sorted(p for p in files if p.suffix == _SEGMENT_SUFFIX)
            snapshots = sorted(p for p in files if is_snapshot_file(p))
            if segments or snapshots:
                return segments + snapshots
    raise LogDirectoryError(
        f"no log segments (*{_SEGMENT_SUFFIX}) nor snapshots (*{SNAPSHOT_SUFFIX}) in {path} "
        f"nor in {path / CLUSTER_METADATA_DIR}"
    )


def _batch_event(
    path: str, batch: RecordBatch, with_records: bool, metadata: bool
) -> list[DumpEvent]:
    compression = batch.compression
    event = BatchEvent(
        path=path,
        position=batch.position,
        base_offset=batch.base_offset,
        last_offset=batch.last_offset,
        epoch=batch.epoch,
        count=batch.records_count,
        size_in_bytes=batch.size_in_bytes,
        magic=batch.buffer[16],
        crc=batch.crc,
        crc_valid=batch.is_valid(),
        is_control=batch.is_control,
        is_transactional=batch.is_transactional,
        compression=(
            _COMPRESSION_NAMES[compression]
            if compression < len(_COMPRESSION_NAMES)
            else f"unknown({compression})"
        ),
        base_timestamp_ms=batch.base_timestamp,
        max_timestamp_ms=batch.max_timestamp,
    )
    with_records = with_records or metadata
    if not (with_records or batch.is_control):
        return [event]
    try:
        records = batch.records()
    except CorruptRecordError as exc:
        event.records_error = str(exc)
        return [event]
    if batch.is_control:
        event.control_types = [control_type_name(r.key) for r in records]
    events: list[DumpEvent] = [event]
    if with_records:
        for r in records:
            record = RecordEvent(r.offset, r.timestamp_ms, r.key, r.value, list(r.headers))
            if batch.is_control:
                record.control_type = control_type_name(r.key)
                decoded = _decode_control(r.key, r.value)
                if isinstance(decoded, str):
                    record.control_error = decoded
                else:
                    record.control = decoded
            elif metadata:
                payload = _decode_metadata(r.value)
                if isinstance(payload, str):
                    record.metadata_error = payload
                else:
                    record.metadata = payload
            events.append(record)
    return events


def scan_segment(
    path: Path, *, with_records: bool = False, metadata: bool = False
) -> Iterator[DumpEvent]:
    """The events of one segment file, batch by batch, ending at its end or at a bad tail.
    ``with_records`` adds every record; ``metadata`` too, with data record values decoded as
    metadata records.

    ``StorageError`` if the file cannot be opened or read.
    """
    name = str(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            yield FileEvent(name, size)
            position = 0
            while position < size:
                prefix = f.read(LOG_OVERHEAD)
                body_size = 0
                if len(prefix) == LOG_OVERHEAD:
                    # Never read past the end of the file, whatever the length field says.
                    length = _LENGTH.unpack_from(prefix, 8)[0]
                    body_size = max(0, min(length, size - position - LOG_OVERHEAD))
                data = prefix + f.read(body_size)
                try:
                    batch = read_batch(data, base_position=position, verify_crc=False)
                except CorruptRecordError as exc:
                    yield TailEvent(name, position, size - position, str(exc))
                    return
                yield from _batch_event(name, batch, with_records, metadata)
                position += batch.size_in_bytes
                f.seek(position)
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc


def _snapshot_event(path: Path) -> SnapshotEvent:
    parsed = parse_snapshot_file_name(path.name)
    end_offset, epoch = parsed[0] if parsed is not None else (None, None)
    try:
        reader = read_snapshot_file(path, BytesSerde())
    except (CorruptRecordError, StorageError) as exc:
        return SnapshotEvent(str(path), end_offset, epoch, None, valid=False, problem=str(exc))
    with reader:
        return SnapshotEvent(
            str(path), end_offset, epoch, reader.last_contained_log_timestamp_ms, valid=True
        )


def scan_snapshot(
    path: Path, *, with_records: bool = False, metadata: bool = False
) -> Iterator[DumpEvent]:
    """The events of one snapshot file: the file, the snapshot (id, header timestamp,
    validity), then its batches as :func:`scan_segment` shows them."""
    events = scan_segment(path, with_records=with_records, metadata=metadata)
    yield next(events)  # the FileEvent: the file exists and is readable
    yield _snapshot_event(path)
    yield from events


def scan_file(
    path: Path, *, with_records: bool = False, metadata: bool = False
) -> Iterator[DumpEvent]:
    """:func:`scan_snapshot` for a ``*.checkpoint`` file, else :func:`scan_segment`."""
    if is_snapshot_file(path):
        return scan_snapshot(path, with_records=with_records, metadata=metadata)
    return scan_segment(path, with_records=with_records, metadata=metadata)


# -- rendering ---------------------------------------------------------------------------------


def _starting_offset(path: str) -> int | None:
    stem = Path(path).stem
    return int(stem) if stem.isdigit() else None


def _render_file(event: FileEvent) -> str:
    lines = [f"Dumping {event.path}"]
    start = _starting_offset(event.path)
    if start is not None:
        lines.append(f"Log starting offset: {start}")
    return "\n".join(lines)


def _render_snapshot(event: SnapshotEvent) -> str:
    if event.end_offset is None:
        text = "Snapshot id: unknown (the file name is not <offset>-<epoch>.checkpoint)"
    else:
        text = f"Snapshot end offset: {event.end_offset} epoch: {event.epoch}"
    if event.last_contained_log_timestamp_ms is not None:
        text += f" lastContainedLogTimestamp: {event.last_contained_log_timestamp_ms}"
    text += f" valid: {str(event.valid).lower()}"
    if event.problem is not None:
        text += f"\n| snapshot invalid: {event.problem}"
    return text


def _render_batch(event: BatchEvent) -> str:
    text = (
        f"baseOffset: {event.base_offset} lastOffset: {event.last_offset} "
        f"count: {event.count} partitionLeaderEpoch: {event.epoch} "
        f"isTransactional: {str(event.is_transactional).lower()} "
        f"isControl: {str(event.is_control).lower()} position: {event.position} "
        f"CreateTime: {event.max_timestamp_ms} size: {event.size_in_bytes} "
        f"magic: {event.magic} compresscodec: {event.compression} crc: {event.crc} "
        f"isvalid: {str(event.crc_valid).lower()}"
    )
    if event.control_types is not None:
        text += f" controlTypes: [{', '.join(event.control_types)}]"
    if event.records_error is not None:
        text += f"\n| records unreadable: {event.records_error}"
    return text


def _render_record(event: RecordEvent) -> str:
    key_size = -1 if event.key is None else len(event.key)
    value_size = -1 if event.value is None else len(event.value)
    header_keys = ", ".join(k for k, _ in event.headers)
    text = (
        f"| offset: {event.offset} CreateTime: {event.timestamp_ms} keySize: {key_size} "
        f"valueSize: {value_size} headerKeys: [{header_keys}]"
    )
    if event.control_type is not None:
        text += f" controlType: {event.control_type}"
    if event.metadata is not None:
        text += f" payload: {_JSON.encode(event.metadata).decode('utf-8')}"
    else:
        text += f" key: {event.key!r} value: {event.value!r}"
    if event.metadata_error is not None:
        text += f" payload: undecodable ({event.metadata_error})"
    if event.control is not None:
        text += f" control: {event.control!r}"
    if event.control_error is not None:
        text += f" control: undecodable ({event.control_error})"
    return text


def _render_tail(event: TailEvent) -> str:
    return (
        f"Found {event.unread_bytes} invalid bytes at the end of {event.path}, from byte "
        f"position {event.position}: {event.message}"
    )


def _render_text(event: DumpEvent) -> str:
    if isinstance(event, FileEvent):
        return _render_file(event)
    if isinstance(event, SnapshotEvent):
        return _render_snapshot(event)
    if isinstance(event, BatchEvent):
        return _render_batch(event)
    if isinstance(event, RecordEvent):
        return _render_record(event)
    return _render_tail(event)


def _render_json(event: DumpEvent) -> str:
    return _JSON.encode(event).decode("utf-8")


# -- the command -------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft log ...`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "log",
        help="inspect log segments and snapshots",
        description="Inspect kraft log segments and snapshot files.",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="log commands", metavar="COMMAND")
    dump = commands.add_parser(
        "dump",
        help="print the batches of log segments and snapshots (like kafka-dump-log)",
        description=(
            "Print every batch of the segment or snapshot file PATH, or of every *.log "
            "segment and *.checkpoint snapshot in the directory PATH (a partition directory, "
            "or a data directory holding __cluster_metadata-0): offsets, epoch, count, size, "
            "byte position, whether the CRC holds, control record types; for a snapshot, its "
            "id, last contained log timestamp and validity. The exit code is 1 if a batch has "
            "a bad CRC, its records cannot be decoded, a file ends in bytes that are not a "
            "batch, a snapshot is not valid, or (--metadata) a record is not a metadata record."
        ),
    )
    dump.add_argument(
        "path",
        metavar="PATH",
        type=Path,
        help="a segment or snapshot file, a partition directory or a data directory",
    )
    dump.add_argument(
        "--records",
        action="store_true",
        help="print every record too (key and value as Python bytes, or base64 in JSON)",
    )
    dump.add_argument(
        "--metadata",
        action="store_true",
        help=(
            "print every record, each data record decoded as a metadata record of "
            "__cluster_metadata (Kafka's --cluster-metadata-decoder)"
        ),
    )
    dump.add_argument("--json", action="store_true", help="print JSON Lines, one event a line")
    dump.set_defaults(handler=_dump)


def _dump(args: argparse.Namespace) -> int:
    render = _render_json if args.json else _render_text
    problems: list[str] = []
    out = sys.stdout
    for segment in find_segments(args.path):
        for event in scan_file(segment, with_records=args.records, metadata=args.metadata):
            out.write(render(event) + "\n")
            if isinstance(event, BatchEvent):
                if not event.crc_valid:
                    problems.append(
                        f"{event.path}: bad CRC in the batch at offset {event.base_offset}, "
                        f"byte position {event.position}"
                    )
                if event.records_error is not None:
                    problems.append(f"{event.path}: {event.records_error}")
            elif isinstance(event, RecordEvent) and event.metadata_error is not None:
                problems.append(
                    f"the record at offset {event.offset} is not a metadata record: "
                    f"{event.metadata_error}"
                )
            elif isinstance(event, SnapshotEvent) and event.problem is not None:
                problems.append(f"{event.path}: not a valid snapshot: {event.problem}")
            elif isinstance(event, TailEvent):
                problems.append(
                    f"{event.path}: {event.unread_bytes} unreadable bytes from byte position "
                    f"{event.position}"
                )
    out.flush()
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems else 0
