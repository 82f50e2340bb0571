"""Typed batches: a v2 batch as a state machine sees it, its records decoded with a serde.

Listeners (``handle_commit``) and snapshot readers both hand out :class:`Batch` objects; both
build them with :func:`decode_batch`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from kraft.record.batch import RecordBatch
from kraft.record.control import ControlMessage, ControlRecordType, control_records
from kraft.record.serde import RecordSerde

__all__ = ["Batch", "ControlRecord", "decode_batch"]

T = TypeVar("T")


class ControlRecord(NamedTuple):
    """One record of a control batch: its type and decoded message."""

    type: ControlRecordType
    message: ControlMessage


@dataclass(slots=True)
class Batch(Generic[T]):
    """One committed batch: its offsets and epoch, and its records (empty for a control batch,
    whose records are in ``control_records``)."""

    base_offset: int
    last_offset: int
    epoch: int
    append_timestamp_ms: int
    size_in_bytes: int
    records: list[T]
    control_records: list[ControlRecord] = field(default_factory=list)

    def __repr__(self) -> str:
        kind = (
            f"control={[c.type.name for c in self.control_records]}"
            if (self.control_records)
            else f"records={len(self.records)}"
        )
        return (
            f"Batch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"epoch={self.epoch}, {kind})"
        )


def decode_batch(view: RecordBatch, serde: RecordSerde[T]) -> Batch[T]:
    """``view`` as a :class:`Batch`: control records decoded, or every value through ``serde``
    (a null value decodes as empty bytes)."""
    if view.is_control:
        controls = [ControlRecord(kind, message) for kind, message in control_records(view)]
        return Batch(
            view.base_offset,
            view.last_offset,
            view.epoch,
            view.max_timestamp,
            view.size_in_bytes,
            [],
            controls,
        )
    decode = serde.decode
    records = [decode(b"" if value is None else value) for value in view.values()]
    return Batch(
        view.base_offset,
        view.last_offset,
        view.epoch,
        view.max_timestamp,
        view.size_in_bytes,
        records,
    )
