"""The controller's offsets (Kafka's ``OffsetControlManager``, without transactions).

Offsets here are of records, inclusive: ``last_committed_offset`` is the last record the log
committed, ``next_write_offset`` the offset the active controller's next record will take.

The timeline (:class:`~kraft.metadata.timeline.SnapshotRegistry`) keeps an in-memory snapshot
at the last committed offset at all times, so that a renounce can revert everything the active
controller replayed but the log never committed:

- a standby takes one at each committed batch (it replays only committed records);
- the active controller takes one after each batch it schedules (at its last offset), and
  :meth:`OffsetControl.activate` one at the last committed offset when it claims;
- snapshots below the last committed offset are dropped as it advances: nothing can revert
  below a committed offset.

kraft writes no transactions (KIP-868), so the last stable offset is the last committed one.
"""

from __future__ import annotations

from kraft.errors import IllegalStateError
from kraft.metadata.timeline import SnapshotRegistry
from kraft.raft.listeners import Batch
from kraft.record.offsets import OffsetAndEpoch

__all__ = ["OffsetControl"]


class OffsetControl:
    """Where the controller's state stands against the log."""

    __slots__ = (
        "_loading",
        "_registry",
        "last_committed_epoch",
        "last_committed_offset",
        "last_committed_time_ms",
        "next_write_offset",
    )

    def __init__(self, registry: SnapshotRegistry) -> None:
        self._registry = registry
        self._loading: OffsetAndEpoch | None = None
        #: The last committed record's offset; -1 before any.
        self.last_committed_offset = -1
        #: The epoch of the batch holding it; -1 before any.
        self.last_committed_epoch = -1
        #: The append time of the last committed batch (what a snapshot records as its last
        #: contained log time); -1 before any.
        self.last_committed_time_ms = -1
        #: The offset of the active controller's next record; -1 on a standby.
        self.next_write_offset = -1
        registry.get_or_create_snapshot(-1)

    @property
    def active(self) -> bool:
        return self.next_write_offset >= 0

    def activate(self, next_write_offset: int) -> None:
        """Become the active controller, writing from ``next_write_offset`` (the log end)."""
        if self.active:
            raise IllegalStateError("the offset control is already active")
        if next_write_offset < 0:
            raise ValueError(f"negative next write offset {next_write_offset}")
        self._registry.get_or_create_snapshot(self.last_committed_offset)
        self.next_write_offset = next_write_offset

    def deactivate(self) -> None:
        """Stop being active: revert the state to the last committed offset."""
        if not self.active:
            raise IllegalStateError("the offset control is not active")
        self.next_write_offset = -1
        self._registry.revert_to_snapshot(self.last_committed_offset)

    def handle_schedule_append(self, last_offset: int) -> None:
        """The active controller replayed and scheduled records up to ``last_offset``."""
        self.next_write_offset = last_offset + 1
        self._registry.get_or_create_snapshot(last_offset)

    def handle_commit_batch(self, batch: Batch[object]) -> None:
        """The log committed ``batch``."""
        self.last_committed_offset = batch.last_offset
        self.last_committed_epoch = batch.epoch
        self.last_committed_time_ms = batch.append_timestamp_ms
        self._registry.delete_snapshots_up_to(batch.last_offset)
        if not self.active:
            self._registry.get_or_create_snapshot(batch.last_offset)

    def begin_load_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """A standby starts replacing its state with a snapshot's: forget everything."""
        if self.active:
            raise IllegalStateError(
                f"asked to load snapshot {snapshot_id} while the active controller"
            )
        if self._loading is not None:
            raise IllegalStateError(
                f"cannot load snapshot {snapshot_id}: already loading {self._loading}"
            )
        self._loading = snapshot_id
        self._registry.reset()
        self.last_committed_offset = -1
        self.last_committed_epoch = -1

    def end_load_snapshot(self, last_contained_time_ms: int) -> None:
        """The snapshot's records were replayed: its end is now the last committed offset."""
        if self._loading is None:
            raise IllegalStateError("no snapshot is being loaded")
        # A snapshot id's offset is exclusive: its last record is the one before.
        self.last_committed_offset = self._loading.offset - 1
        self.last_committed_epoch = self._loading.epoch
        self.last_committed_time_ms = last_contained_time_ms
        self._registry.get_or_create_snapshot(self.last_committed_offset)
        self._loading = None
