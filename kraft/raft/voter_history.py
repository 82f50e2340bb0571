"""``VoterHistory``: the voter set and ``kraft.version`` in force, as the log says (KIP-853).

Kafka's ``KRaftControlRecordStateMachine``. Under ``kraft.version`` 1 the voters live in the
log: every ``KRaftVersionRecord`` and ``VotersRecord`` control record, in offset order, in the
latest snapshot (right after its header) and in the log after it. The set in force is the
*latest* one in the log, committed or not: it applies from the moment it is appended, and a
truncation below it rolls it back. Without any ``VotersRecord`` (``kraft.version`` 0) the
static set from the configuration applies.

The history keeps each change at the offset of its record (a snapshot's at the snapshot's last
contained offset, as Kafka does), so that :meth:`VoterHistory.voter_set_at` answers "which set
was in force at offset N" -- what a snapshot at N must hold. It follows the log three ways:

- :meth:`VoterHistory.appended`: the hot path. The client hands it the bytes it just appended
  (the leader's drained batches, a follower's fetched ones); only control batches are decoded,
  so data batches cost one header read each.
- :meth:`VoterHistory.truncated`: the log was truncated to an end offset.
- :meth:`VoterHistory.sync`: the safety net, called once per poll. It notices a log that moved
  without the two calls above (a snapshot installed, a repair that set records aside, a log
  opened at startup) and catches up by reading the log (and the latest snapshot when the log
  now starts past what the history has read). It is cheap when nothing moved.

Old entries are dropped once the log start passes them (keeping the one in force there), so the
history is bounded by the changes still in the log.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from typing import Generic, TypeVar

from kraft.errors import CorruptRecordError
from kraft.log.api import OffsetAndEpoch, ReplicatedLog
from kraft.raft.voter_set import VoterSet
from kraft.record.batch import LOG_OVERHEAD, RecordBatch, iter_batches, read_batch
from kraft.record.control import (
    ControlMessage,
    ControlRecordType,
    KRaftVersionRecord,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    VotersRecord,
    control_batch,
    control_records,
)
from kraft.snapshot.raw import RawSnapshotReader

__all__ = ["BOOTSTRAP_SNAPSHOT_ID", "VoterHistory", "write_bootstrap_checkpoint"]

logger = logging.getLogger(__name__)

#: Kafka's bootstrap checkpoint, ``00000000000000000000-0000000000.checkpoint``: written by
#: ``kraft storage format`` with the initial ``kraft.version`` and voters; never fetched.
BOOTSTRAP_SNAPSHOT_ID = OffsetAndEpoch(0, 0)

#: Bytes read at a time while looking for a snapshot's control records.
_SNAPSHOT_READ_BYTES = 64 * 1024


V = TypeVar("V")


class _Timeline(Generic[V]):
    """Values by offset: the value in force at an offset is the last one at or below it."""

    __slots__ = ("_offsets", "_values")

    def __init__(self) -> None:
        self._offsets: list[int] = []
        self._values: list[V] = []

    def add(self, offset: int, value: V) -> None:
        if self._offsets and offset <= self._offsets[-1]:
            raise ValueError(f"history entry at {offset} is not after {self._offsets[-1]}")
        self._offsets.append(offset)
        self._values.append(value)

    def last(self) -> tuple[int, V] | None:
        return (self._offsets[-1], self._values[-1]) if self._offsets else None

    def at(self, offset: int) -> V | None:
        index = bisect.bisect_right(self._offsets, offset)
        return self._values[index - 1] if index else None

    def truncate_new(self, end_offset: int) -> bool:
        """Drop entries at or above ``end_offset``; True if any was dropped."""
        index = bisect.bisect_left(self._offsets, end_offset)
        dropped = index < len(self._offsets)
        del self._offsets[index:], self._values[index:]
        return dropped

    def truncate_old(self, start_offset: int) -> None:
        """Drop entries below ``start_offset`` except the one in force just below it: an
        entry at ``start_offset`` itself may be uncommitted, and a truncation that removes it
        must find the set before it."""
        index = bisect.bisect_right(self._offsets, start_offset - 1) - 1
        if index > 0:
            del self._offsets[:index], self._values[:index]

    def clear(self) -> None:
        self._offsets.clear()
        self._values.clear()


class VoterHistory:
    """The voter set and ``kraft.version`` by offset, read from one replica's log.

    ``static_voters`` is the ``kraft.version`` 0 set (from the configuration; may be empty for a
    replica that only learns its voters from the log).
    """

    def __init__(self, static_voters: VoterSet) -> None:
        self.static_voters = static_voters
        self._voters: _Timeline[VoterSet] = _Timeline()
        self._versions: _Timeline[int] = _Timeline()
        #: The next log offset to read; -1 until the first sync.
        self._next_offset = -1
        #: How many times the voter set or kraft.version changed (for whoever must react).
        self.changes = 0

    # -- what is in force ------------------------------------------------------------------
    @property
    def last_voter_set(self) -> VoterSet:
        """The latest voter set in the log (committed or not), else the static one."""
        last = self._voters.last()
        return self.static_voters if last is None else last[1]

    @property
    def last_voter_set_offset(self) -> int | None:
        """The offset of the latest ``VotersRecord`` (``None``: none, the static set)."""
        last = self._voters.last()
        return None if last is None else last[0]

    @property
    def kraft_version(self) -> int:
        """The latest ``kraft.version`` in the log (0 without a ``KRaftVersionRecord``)."""
        last = self._versions.last()
        return 0 if last is None else last[1]

    @property
    def next_offset(self) -> int:
        return self._next_offset

    def voter_set_at(self, offset: int) -> VoterSet:
        """The voter set in force at log offset ``offset`` (its record at or below it)."""
        value = self._voters.at(offset)
        return self.static_voters if value is None else value

    def kraft_version_at(self, offset: int) -> int:
        value = self._versions.at(offset)
        return 0 if value is None else value

    def snapshot_control_messages(self, snapshot_id: OffsetAndEpoch) -> list[ControlMessage]:
        """What a snapshot at ``snapshot_id`` writes after its header: under ``kraft.version``
        1, the ``KRaftVersionRecord`` and the ``VotersRecord`` in force at its last offset."""
        last = snapshot_id.offset - 1
        version = self.kraft_version_at(last)
        if version == 0:
            return []
        return [KRaftVersionRecord(0, version), self.voter_set_at(last).to_record()]

    # -- following the log -----------------------------------------------------------------
    def appended(self, log: ReplicatedLog, base_offset: int, data: bytes | memoryview) -> bool:
        """Batches ``data`` (whole, already validated) were appended at ``base_offset``; True
        if the voter set or ``kraft.version`` changed."""
        if self._next_offset < 0:
            return self.sync(log)  # first use: the sync reads these batches too
        changed = self._catch_up_to(log, base_offset)
        for batch in iter_batches(data, verify_crc=False):
            if batch.is_control:
                changed |= self._read_control_batch(batch)
            self._next_offset = batch.next_offset
        return changed

    def advanced(self, log: ReplicatedLog, base_offset: int, next_offset: int) -> bool:
        """Batches known to hold no control record were appended from ``base_offset`` up to
        ``next_offset`` (the leader's data batches: nothing to decode)."""
        if self._next_offset < 0:
            return self.sync(log)
        changed = self._catch_up_to(log, base_offset)
        self._next_offset = next_offset
        return changed

    def _catch_up_to(self, log: ReplicatedLog, base_offset: int) -> bool:
        if base_offset < self._next_offset:
            return self.truncated(base_offset)  # an append there means a truncation
        if base_offset > self._next_offset:
            before = self.changes
            self._read_log(log, base_offset)  # appends this history did not see
            return self.changes != before
        return False

    def truncated(self, end_offset: int) -> bool:
        """The log was truncated to ``end_offset``: forget what came after. True if the voter
        set or ``kraft.version`` changed (rolled back)."""
        if self._next_offset <= end_offset:
            return False
        self._next_offset = end_offset
        dropped = self._voters.truncate_new(end_offset)
        dropped |= self._versions.truncate_new(end_offset)
        if dropped:
            self.changes += 1
            logger.info(
                "truncation to %d rolled back the voter set to %s", end_offset, self.last_voter_set
            )
        return dropped

    def sync(self, log: ReplicatedLog) -> bool:
        """Catch up with ``log`` however it moved; True if the voter set or version changed."""
        start, end = log.log_start_offset, log.log_end_offset
        if start <= self._next_offset == end:
            return False  # nothing moved: the common case, once a poll
        before = (self.last_voter_set, self.kraft_version)
        if self._next_offset < 0 or self._next_offset < start:
            self._load_snapshot(log)
        elif end < self._next_offset:
            self.truncated(end)
        if self._next_offset < end:
            self._read_log(log, end)
        self._voters.truncate_old(start)
        self._versions.truncate_old(start)
        if (self.last_voter_set, self.kraft_version) != before:
            self.changes += 1
            return True
        return False

    def reload(self, log: ReplicatedLog) -> bool:
        """Forget everything and read the latest snapshot and the log again (after a snapshot
        was installed over the log). True if the voter set or version changed."""
        self._next_offset = -1
        return self.sync(log)

    # -- reading ---------------------------------------------------------------------------
    def _load_snapshot(self, log: ReplicatedLog) -> None:
        self._voters.clear()
        self._versions.clear()
        self._next_offset = log.log_start_offset
        reader = log.latest_snapshot()
        if reader is None:
            return
        try:
            snapshot_id = reader.snapshot_id
            last = snapshot_id.offset - 1
            for kind, message in _snapshot_control_messages(reader):
                if kind is ControlRecordType.KRAFT_VERSION:
                    assert isinstance(message, KRaftVersionRecord)
                    self._set(self._versions, last, message.kraft_version)
                elif kind is ControlRecordType.KRAFT_VOTERS:
                    assert isinstance(message, VotersRecord)
                    self._set(self._voters, last, VoterSet.from_record(message))
        finally:
            reader.close()
        # Kafka reads the log from the snapshot's end: what is below it, the snapshot holds.
        self._next_offset = max(log.log_start_offset, snapshot_id.offset)

    def _read_log(self, log: ReplicatedLog, end: int) -> None:
        offset = self._next_offset
        while offset < end:
            info = log.read(offset)
            records = info.records
            if not records:
                break
            for batch in iter_batches(records, verify_crc=False):
                if batch.last_offset < offset:
                    continue  # the batch holding ``offset`` started before it
                if batch.is_control:
                    self._read_control_batch(batch)
                offset = batch.next_offset
        self._next_offset = offset

    def _read_control_batch(self, batch: RecordBatch) -> bool:
        """Apply the control records of ``batch``; True (and counted) if anything changed."""
        changed = False
        offset = batch.base_offset
        for kind, message in control_records(batch):
            if kind is ControlRecordType.KRAFT_VERSION:
                assert isinstance(message, KRaftVersionRecord)
                changed |= self._set(self._versions, offset, message.kraft_version)
            elif kind is ControlRecordType.KRAFT_VOTERS:
                assert isinstance(message, VotersRecord)
                voters = VoterSet.from_record(message)
                changed |= self._set(self._voters, offset, voters)
                logger.info("voter set at offset %d: %s", offset, voters)
            offset += 1
        if changed:
            self.changes += 1
        return changed

    @staticmethod
    def _set(timeline: _Timeline[V], offset: int, value: V) -> bool:
        last = timeline.last()
        if last is not None and last[0] >= offset:
            timeline.truncate_new(offset)  # a re-read of the same offsets replaces them
            last = timeline.last()
        timeline.add(offset, value)
        return last is None or last[1] != value


def _snapshot_control_messages(
    reader: RawSnapshotReader,
) -> list[tuple[ControlRecordType, ControlMessage]]:
    """The control records at the start of a snapshot (up to its first data batch)."""
    out: list[tuple[ControlRecordType, ControlMessage]] = []
    position, size = 0, reader.size_in_bytes
    while position < size:
        head = reader.read(position, LOG_OVERHEAD)
        if len(head) < LOG_OVERHEAD:
            break
        length = int.from_bytes(head[8:12], "big", signed=True)
        data = reader.read(position, LOG_OVERHEAD + max(0, length))
        try:
            batch = read_batch(data, base_position=position)
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"snapshot {reader.snapshot_id}: {exc.args[0]}", offset=exc.offset
            ) from exc
        if not batch.is_control:
            break
        out.extend(control_records(batch))
        position += batch.size_in_bytes
    return out


def write_bootstrap_checkpoint(
    log: ReplicatedLog,
    kraft_version: int,
    voters: VoterSet | None,
    *,
    timestamp_ms: int,
) -> None:
    """Write Kafka's bootstrap checkpoint (snapshot ``0-0``) into an empty ``log``: a header,
    the ``KRaftVersionRecord``, the initial ``VotersRecord`` (if any) and a footer, as
    ``kafka-storage format --standalone | --initial-controllers`` writes it.

    ``ValueError`` if the log is not empty or holds a snapshot already.
    """
    if log.log_end_offset != 0 or log.latest_snapshot_id is not None:
        raise ValueError("the bootstrap checkpoint goes into an empty log")
    raw = log.create_new_snapshot_unchecked(BOOTSTRAP_SNAPSHOT_ID)
    if raw is None:
        raise ValueError("the log refused the bootstrap checkpoint")
    messages: Sequence[ControlMessage] = [KRaftVersionRecord(0, kraft_version)]
    if voters is not None:
        messages = [*messages, voters.to_record()]
    header = SnapshotHeaderRecord(0, timestamp_ms)
    raw.append(control_batch(0, 0, [header], timestamp_ms=timestamp_ms))
    raw.append(control_batch(1, 0, messages, timestamp_ms=timestamp_ms))
    raw.append(
        control_batch(1 + len(messages), 0, [SnapshotFooterRecord(0)], timestamp_ms=timestamp_ms)
    )
    raw.freeze()
