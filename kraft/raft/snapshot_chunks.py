"""``SnapshotChunks``: the FetchSnapshot chunks a leader can vouch for (docs/protocol.md §1.14).

FetchSnapshot sends a snapshot in chunks cut at any byte (KIP-630), and the follower checks
the whole file only once it has all of it. A leader serving a file its disk damaged would
have every follower download, reject and download it again. So before a chunk goes out, the
leader checks every batch the chunk overlaps as the follower will check it: whole, magic 2,
a valid CRC, base offsets contiguous from 0, the snapshot's epoch. Bytes that fail are never
sent (:class:`~kraft.errors.CorruptSnapshotError`).

To know where the batches are, it keeps the layout of the snapshot it serves (the byte
position and base offset of each batch), built by one pass over the whole file that checks
every batch, the first and last ones control batches (the header and the footer): a corrupt
snapshot is found at the first chunk asked for, before any of it is sent. The per-chunk
checks then catch damage done after that pass. A layout that no longer matches the file
(another file under the same id) is built again before anything is called corrupt.
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass

from kraft.errors import CorruptRecordError, CorruptSnapshotError
from kraft.log.api import OffsetAndEpoch
from kraft.record.batch import LOG_OVERHEAD, RecordBatch, read_batch
from kraft.snapshot.raw import RawSnapshotReader

__all__ = ["SnapshotChunks"]

#: How much of a snapshot the layout pass reads at a time.
SCAN_WINDOW_BYTES = 8 * 1024 * 1024

#: How many downloads' cut batches are remembered (one entry per download in progress).
_CUTS_KEPT = 16

_LENGTH_END = 12  # base offset (int64) and length (int32): the bytes that size a batch


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where each batch of a snapshot starts (``positions``) and its base offset."""

    snapshot_id: OffsetAndEpoch
    size: int
    positions: array[int]
    base_offsets: array[int]


def _check(
    batch: RecordBatch, snapshot_id: OffsetAndEpoch, base_offset: int, position: int
) -> None:
    """Raise unless ``batch`` (read with its CRC checked) is the one expected there."""
    problem = None
    if batch.base_offset != base_offset:
        problem = f"base offset {batch.base_offset} where {base_offset} was expected"
    elif batch.epoch != snapshot_id.epoch:
        problem = f"batch epoch {batch.epoch} is not the snapshot's epoch {snapshot_id.epoch}"
    elif batch.records_count != batch.last_offset_delta + 1:
        problem = f"{batch.records_count} records for {batch.last_offset_delta + 1} offsets"
    if problem is not None:
        raise CorruptSnapshotError(
            f"snapshot {snapshot_id}: {problem}", offset=batch.base_offset, position=position
        )


def _length_at(data: bytes, at: int) -> int:
    """The size of the batch at ``at`` as its length field says (the field is not in the
    CRC: ``read_batch`` and the offset checks catch a damaged one)."""
    return LOG_OVERHEAD + int.from_bytes(data[at + 8 : at + _LENGTH_END], "big", signed=True)


def _scan(snapshot: RawSnapshotReader) -> _Layout:
    """Read the whole snapshot once, checking every batch; its layout."""
    snapshot_id = snapshot.snapshot_id
    size = snapshot.size_in_bytes
    layout = _Layout(snapshot_id, size, array("q"), array("q"))
    first_control: bool | None = None
    last_control = False
    next_offset = 0
    position = 0
    try:
        while position < size:
            window = snapshot.read(position, max(SCAN_WINDOW_BYTES, _LENGTH_END))
            whole = _length_at(window, 0) if len(window) >= _LENGTH_END else 0
            if len(window) < whole <= size - position:
                # The batch here is larger than the window: read it whole. (A length that runs
                # past the file is left to read_batch: "truncated", nothing more read.)
                window = snapshot.read(position, whole)
            at = 0
            while at < len(window) and (
                at == 0
                or (len(window) - at >= _LENGTH_END and at + _length_at(window, at) <= len(window))
            ):
                batch = read_batch(window, at, base_position=position)
                _check(batch, snapshot_id, next_offset, position + at)
                layout.positions.append(position + at)
                layout.base_offsets.append(batch.base_offset)
                if first_control is None:
                    first_control = batch.is_control
                last_control = batch.is_control
                next_offset = batch.next_offset
                at += batch.size_in_bytes
            position += at
    except CorruptSnapshotError:
        raise
    except CorruptRecordError as exc:
        raise CorruptSnapshotError(
            f"snapshot {snapshot_id}: {exc.args[0]}", offset=exc.offset, position=exc.position
        ) from exc
    if len(layout.positions) < 2 or not (first_control and last_control):
        raise CorruptSnapshotError(
            f"snapshot {snapshot_id}: not a header control batch first and a footer one last"
        )
    return layout


class SnapshotChunks:
    """Reads FetchSnapshot chunks, checked; keeps the layout of the last snapshot served.

    A batch cut by a chunk's end is read and checked whole with that chunk; the next chunk of
    the same download, which starts where that one ended, does not read and check it again
    (``_cut_checked``): every batch is checked when its first byte is sent, and a download
    reads each batch about once more than an unchecked one would.
    """

    __slots__ = ("_cut_checked", "_layout")

    def __init__(self) -> None:
        self._layout: _Layout | None = None
        #: Chunk end position -> the index of the batch cut there, checked whole when that
        #: chunk was served (the latest few downloads).
        self._cut_checked: dict[int, int] = {}

    def forget(self) -> None:
        """Drop the layout (its snapshot was set aside)."""
        self._layout = None
        self._cut_checked.clear()

    def read(self, snapshot: RawSnapshotReader, position: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of ``snapshot`` from ``position`` (inside it), every batch
        they overlap checked; :class:`~kraft.errors.CorruptSnapshotError` if one fails."""
        layout = self._layout
        fresh = layout is None or (
            layout.snapshot_id != snapshot.snapshot_id or layout.size != snapshot.size_in_bytes
        )
        if layout is None or fresh:
            self.forget()
            layout = self._layout = _scan(snapshot)
        try:
            return self._read_checked(snapshot, layout, position, max_bytes)
        except CorruptRecordError:
            if fresh:
                raise
        # The layout may be another file's: corrupt only if a fresh pass says so too.
        self.forget()
        layout = self._layout = _scan(snapshot)
        return self._read_checked(snapshot, layout, position, max_bytes)

    def _read_checked(
        self, snapshot: RawSnapshotReader, layout: _Layout, position: int, max_bytes: int
    ) -> bytes:
        positions = layout.positions
        end = min(position + max_bytes, layout.size)
        data = snapshot.read(position, end - position)  # what is sent: read once
        if len(data) != end - position:
            raise CorruptSnapshotError(
                f"snapshot {layout.snapshot_id}: {len(data)} bytes at {position}, "
                f"{end - position} expected",
                position=position,
            )
        view = memoryview(data)
        first = bisect.bisect_right(positions, position) - 1
        after = bisect.bisect_left(positions, end)  # the first batch starting at or past end
        if self._cut_checked.pop(position, None) == first:
            first += 1  # checked whole with the chunk that ended here
        try:
            for k in range(first, after):
                start = positions[k]
                stop = positions[k + 1] if k + 1 < len(positions) else layout.size
                if position <= start and stop <= end:
                    whole: bytes | memoryview = view[start - position : stop - position]
                else:
                    whole = snapshot.read(start, stop - start)  # cut by the chunk's edge
                batch = read_batch(whole, base_position=start)
                if batch.size_in_bytes != stop - start:
                    raise CorruptSnapshotError(
                        f"snapshot {layout.snapshot_id}: the batch at {start} changed size",
                        offset=batch.base_offset,
                        position=start,
                    )
                _check(batch, layout.snapshot_id, layout.base_offsets[k], start)
        except CorruptSnapshotError:
            raise
        except CorruptRecordError as exc:
            raise CorruptSnapshotError(
                f"snapshot {layout.snapshot_id}: {exc.args[0]}",
                offset=exc.offset,
                position=exc.position,
            ) from exc
        last_stop = positions[after] if after < len(positions) else layout.size
        if after > first and last_stop > end:
            self._remember_cut(end, after - 1)  # the last batch, cut by the end, is checked
        return data

    def _remember_cut(self, end: int, index: int) -> None:
        cut = self._cut_checked
        cut[end] = index
        if len(cut) > _CUTS_KEPT:
            del cut[next(iter(cut))]  # the oldest
