"""``SnapshotReader[T]``: a frozen snapshot checked whole, then read batch by batch.

The whole snapshot is validated when the reader is built, before a single batch is handed out,
so that a state machine never loads half a snapshot (KIP-630; Kafka's ``RecordsSnapshotReader``
checks the header, kraft checks everything it can without decoding records):

- every batch whole, magic 2, with a valid CRC, and no bytes after the last one;
- the first batch a control batch whose first record is a ``SnapshotHeader``;
- the last batch a control batch whose last record is a ``SnapshotFooter``;
- base offsets contiguous from 0, and every batch's epoch the snapshot's epoch.

Any failure is a :class:`~kraft.errors.CorruptSnapshotError` naming the snapshot. Iteration
then yields every batch as a :class:`~kraft.record.typed.Batch`, the header and footer control
batches included (with ``control_records``), decoded lazily one batch per step.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Generic, TypeVar

from kraft.errors import CorruptRecordError, CorruptSnapshotError, StorageError
from kraft.record.batch import LOG_OVERHEAD, RecordBatch, iter_batches, read_batch
from kraft.record.control import (
    ControlMessage,
    ControlRecordType,
    SnapshotHeaderRecord,
    control_records,
)
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.serde import RecordSerde
from kraft.record.typed import Batch, decode_batch
from kraft.snapshot.files import SNAPSHOT_SUFFIX, parse_snapshot_file_name
from kraft.snapshot.raw import FileRawSnapshotReader, RawSnapshotReader

__all__ = ["SnapshotReader", "read_snapshot_file", "read_snapshot_header"]

T = TypeVar("T")


class SnapshotReader(Generic[T]):
    """A validated snapshot; iterate its :class:`Batch` objects, then :meth:`close` it.

    The reader holds the snapshot's bytes (``raw.records()``) until closed. It closes ``raw``
    only when it owns it (``owns_raw``): a log's raw readers belong to the log.
    """

    __slots__ = (
        "_batches",
        "_closed",
        "_data",
        "_last_contained_log_timestamp_ms",
        "_owns_raw",
        "_raw",
        "_serde",
        "_snapshot_id",
    )

    def __init__(
        self, raw: RawSnapshotReader, serde: RecordSerde[T], *, owns_raw: bool = False
    ) -> None:
        self._raw = raw
        self._serde = serde
        self._owns_raw = owns_raw
        self._snapshot_id = raw.snapshot_id
        self._closed = False
        try:
            data = raw.records()
            self._last_contained_log_timestamp_ms = self._validate(data)
        except BaseException:
            if owns_raw:
                raw.close()
            raise
        self._data: bytes | None = data
        self._batches: Iterator[RecordBatch] = iter_batches(data, verify_crc=False)

    def _describe(self) -> str:
        path = getattr(self._raw, "path", None)
        where = f" ({path})" if path is not None else ""
        return f"snapshot {self._snapshot_id.offset}-{self._snapshot_id.epoch}{where}"

    def _corrupt(self, message: str, batch: RecordBatch | None = None) -> CorruptSnapshotError:
        if batch is None:
            return CorruptSnapshotError(f"{self._describe()}: {message}")
        return CorruptSnapshotError(
            f"{self._describe()}: {message}", offset=batch.base_offset, position=batch.position
        )

    def _validate(self, data: bytes) -> int:
        """Check the whole snapshot (see the module docstring); the header's timestamp."""
        epoch = self._snapshot_id.epoch
        next_offset = 0
        first: RecordBatch | None = None
        last: RecordBatch | None = None
        try:
            for batch in iter_batches(data, verify_crc=True):
                if first is None:
                    first = batch
                if batch.base_offset != next_offset:
                    raise self._corrupt(
                        f"base offset {batch.base_offset} where {next_offset} was expected", batch
                    )
                if batch.epoch != epoch:
                    raise self._corrupt(
                        f"batch epoch {batch.epoch} is not the snapshot's epoch {epoch}", batch
                    )
                if batch.records_count != batch.last_offset_delta + 1:
                    raise self._corrupt(
                        f"{batch.records_count} records for {batch.last_offset_delta + 1} offsets",
                        batch,
                    )
                next_offset = batch.next_offset
                last = batch
        except CorruptSnapshotError:
            raise
        except CorruptRecordError as exc:
            raise CorruptSnapshotError(
                f"{self._describe()}: {exc.args[0]}", offset=exc.offset, position=exc.position
            ) from exc
        if first is None or last is None:
            raise self._corrupt("no batches: a snapshot holds at least a header and a footer")
        if first is last:
            raise self._corrupt("a single batch: no footer after the header", first)
        header = self._control(first, "first")
        if header[0][0] != ControlRecordType.SNAPSHOT_HEADER:
            raise self._corrupt(f"the first record is {header[0][0].name}, not a header", first)
        footer = self._control(last, "last")
        if footer[-1][0] != ControlRecordType.SNAPSHOT_FOOTER:
            raise self._corrupt(f"the last record is {footer[-1][0].name}, not a footer", last)
        message = header[0][1]
        if not isinstance(message, SnapshotHeaderRecord):  # decode_control_value's contract
            raise self._corrupt(f"the header decodes as {message!r}", first)
        return message.last_contained_log_timestamp

    def _control(
        self, batch: RecordBatch, which: str
    ) -> list[tuple[ControlRecordType, ControlMessage]]:
        if not batch.is_control:
            raise self._corrupt(f"the {which} batch is not a control batch", batch)
        try:
            records = control_records(batch)
        except CorruptRecordError as exc:
            raise self._corrupt(f"the {which} batch: {exc.args[0]}", batch) from exc
        if not records:
            raise self._corrupt(f"the {which} batch holds no record", batch)
        return records

    # -- properties --------------------------------------------------------------------------
    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        """The snapshot's end offset (exclusive) and epoch."""
        return self._snapshot_id

    @property
    def last_contained_log_offset(self) -> int:
        """The last log offset the snapshot covers (its end offset - 1)."""
        return self._snapshot_id.offset - 1

    @property
    def last_contained_log_epoch(self) -> int:
        return self._snapshot_id.epoch

    @property
    def last_contained_log_timestamp_ms(self) -> int:
        """The append time of the last record the snapshot covers (from its header)."""
        return self._last_contained_log_timestamp_ms

    @property
    def size_in_bytes(self) -> int:
        return self._raw.size_in_bytes

    @property
    def is_closed(self) -> bool:
        return self._closed

    # -- reading -----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Batch[T]]:
        return self

    def __next__(self) -> Batch[T]:
        if self._closed:
            raise StopIteration
        view = next(self._batches)
        try:
            return decode_batch(view, self._serde)
        except CorruptRecordError as exc:
            # CRCs held, so these bytes were written this way: a writer's bug, or a serde
            # that cannot read what another wrote.
            raise self._corrupt(f"cannot decode a batch: {exc.args[0]}", view) from exc

    def close(self) -> None:
        """Done with the snapshot: iteration stops, the bytes are released. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._data = None
        self._batches = iter(())
        if self._owns_raw:
            self._raw.close()

    def __enter__(self) -> SnapshotReader[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SnapshotReader({self._describe()}, closed={self._closed})"


def read_snapshot_file(
    path: Path, serde: RecordSerde[T], *, snapshot_id: OffsetAndEpoch | None = None
) -> SnapshotReader[T]:
    """Open and validate the snapshot file ``path`` (for tools); the reader owns the file.

    The id comes from the file name (``<offset>-<epoch>.checkpoint``) unless given;
    ``StorageError`` when neither names it.
    """
    if snapshot_id is None:
        parsed = parse_snapshot_file_name(path.name)
        if parsed is None or parsed[1] != SNAPSHOT_SUFFIX:
            raise StorageError(
                f"{path}: not a snapshot file name (<20-digit offset>-<10-digit epoch>"
                f"{SNAPSHOT_SUFFIX}); pass the snapshot id"
            )
        snapshot_id = parsed[0]
    raw = FileRawSnapshotReader.open_path(path, snapshot_id)
    return SnapshotReader(raw, serde, owns_raw=True)


def read_snapshot_header(raw: RawSnapshotReader) -> SnapshotHeaderRecord:
    """The header of a frozen snapshot, from its first batch alone (no full validation: for
    the cleaner's age check). ``CorruptSnapshotError`` if that batch is not a header."""
    try:
        head = raw.read(0, LOG_OVERHEAD)
        length = LOG_OVERHEAD + int.from_bytes(head[8:12], "big", signed=True)
        first = read_batch(raw.read(0, length))
        records = control_records(first) if first.is_control else []
    except (CorruptRecordError, ValueError) as exc:
        raise CorruptSnapshotError(
            f"snapshot {raw.snapshot_id}: no readable header: {exc}"
        ) from exc
    if records and isinstance(records[0][1], SnapshotHeaderRecord):
        return records[0][1]
    raise CorruptSnapshotError(f"snapshot {raw.snapshot_id}: the first batch is not a header")
