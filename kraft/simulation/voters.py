"""What the invariants know of voter sets under ``kraft.version`` 1 (KIP-853): the voter sets
each node's log holds, read from the log itself -- never from the client under test.

A :class:`VoterTimeline` follows one node's log: the set the snapshot the log starts from holds
(filed at the snapshot's last offset, as Kafka's ``KRaftControlRecordStateMachine`` files it),
then every ``VotersRecord`` of the log, by offset. A log that was truncated, repaired, or
replaced by a snapshot is read again from that snapshot; what was read before stays only while
the log still holds it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import NamedTuple

from kraft.errors import CorruptRecordError
from kraft.log.memory import MemoryLog
from kraft.raft.states import ReplicaKey
from kraft.raft.voter_set import VoterSet
from kraft.record.batch import iter_batches
from kraft.record.control import ControlRecordType, VotersRecord, control_records
from kraft.record.offsets import OffsetAndEpoch
from kraft.simulation.node import SimNode

__all__ = ["NewVoters", "VoterChecks", "VoterTimeline", "snapshot_voters"]


class NewVoters(NamedTuple):
    """A ``VotersRecord`` a log holds at ``offset``, and the set in force before it (``None``
    when the log says nothing before it)."""

    offset: int
    before: VoterSet | None
    voters: VoterSet


class VoterTimeline:
    """The voter sets one log holds, by offset. :meth:`follow` after the log may have moved."""

    __slots__ = (
        "_first_record",
        "_next_offset",
        "_tail",
        "offsets",
        "sets",
        "snapshot_offset",
        "unread_snapshot",
    )

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.sets: list[VoterSet] = []
        #: The offset filed for the snapshot's set (its last offset), None without one.
        self.snapshot_offset: int | None = None
        #: The snapshot the log starts from when it holds no voter set (None: it does, or
        #: there is no snapshot, or its bytes are damaged).
        self.unread_snapshot: OffsetAndEpoch | None = None
        #: Index in ``offsets`` of the first entry read from a record of the log.
        self._first_record = 0
        self._next_offset = -1
        #: (base offset, CRC) of the last batch read: a log that no longer holds it moved
        #: under the timeline (truncated and appended again, repaired).
        self._tail: tuple[int, int] | None = None

    def last(self) -> tuple[int, VoterSet] | None:
        return (self.offsets[-1], self.sets[-1]) if self.offsets else None

    def set_at(self, offset: int) -> VoterSet | None:
        """The set in force at ``offset``, None when the log says nothing at or before it."""
        index = bisect.bisect_right(self.offsets, offset)
        return self.sets[index - 1] if index else None

    def records_from(self, offset: int) -> list[tuple[int, VoterSet]]:
        """The ``VotersRecord`` entries at or after ``offset`` (not the snapshot's)."""
        index = max(self._first_record, bisect.bisect_left(self.offsets, offset))
        return list(zip(self.offsets[index:], self.sets[index:], strict=True))

    def follow(self, log: MemoryLog) -> tuple[list[NewVoters], bool]:
        """Catch up with ``log``: the records read since the last call, and whether the
        timeline was read again from the snapshot (then the snapshot's set is new too)."""
        start, end = log.log_start_offset, log.log_end_offset
        reloaded = False
        if self._next_offset < 0 or start > self._next_offset or not self._tail_held(log, end):
            self._reload(log)
            reloaded = True
        found: list[NewVoters] = []
        if self._next_offset >= end:
            return found, reloaded
        for base, last, batch in log.held_batches(self._next_offset, end):
            if batch is None:
                continue  # bytes a storage fault damaged: the node finds and fetches them again
            if batch.is_control:
                offset = base
                for kind, message in control_records(batch):
                    if kind is ControlRecordType.KRAFT_VOTERS:
                        assert isinstance(message, VotersRecord)
                        voters = VoterSet.from_record(message)
                        before = self.sets[-1] if self.sets else None
                        self.offsets.append(offset)
                        self.sets.append(voters)
                        found.append(NewVoters(offset, before, voters))
                    offset += 1
            self._next_offset = last + 1
            self._tail = (base, batch.crc)
        return found, reloaded

    def _tail_held(self, log: MemoryLog, end: int) -> bool:
        tail = self._tail
        if tail is None:
            return end >= self._next_offset
        if end < self._next_offset:
            return False
        held = log.held_batches(self._next_offset - 1, self._next_offset)
        return bool(held) and held[-1][2] is not None and (held[-1][0], held[-1][2].crc) == tail

    def _reload(self, log: MemoryLog) -> None:
        self.offsets.clear()
        self.sets.clear()
        self.snapshot_offset = None
        self.unread_snapshot = None
        self._first_record = 0
        self._tail = None
        start = log.log_start_offset
        self._next_offset = start
        below = [s for s in log.snapshot_ids() if s.offset <= start]
        if below:
            snapshot_id = below[-1]
            try:
                voters = snapshot_voters(log, snapshot_id)
            except CorruptRecordError:
                return  # a storage fault: the node finds it and sets the snapshot aside
            if voters is None:
                self.unread_snapshot = snapshot_id
            else:
                self.snapshot_offset = snapshot_id.offset - 1
                self.offsets.append(self.snapshot_offset)
                self.sets.append(voters)
        self._first_record = len(self.offsets)


def snapshot_voters(log: MemoryLog, snapshot_id: OffsetAndEpoch) -> VoterSet | None:
    """The last voter set snapshot ``snapshot_id`` of ``log`` holds (None: it holds none, or
    the log has no such snapshot); :class:`CorruptRecordError` if its bytes are damaged."""
    raw = log.read_snapshot(snapshot_id)
    if raw is None:
        return None
    try:
        data = raw.read(0, raw.size_in_bytes)
    finally:
        raw.close()
    voters: VoterSet | None = None
    for batch in iter_batches(data):
        if not batch.is_control:
            break
        for kind, message in control_records(batch):
            if kind is ControlRecordType.KRAFT_VOTERS:
                assert isinstance(message, VotersRecord)
                voters = VoterSet.from_record(message)
    return voters


Problems = list[tuple[str, tuple[int, ...], str]]


class VoterChecks:
    """The KIP-853 invariants of a ``kraft.version`` 1 cluster (docs/simulation.md):
    ``voters_differ_by_one``, ``voters_one_uncommitted``, ``voters_durable`` and
    ``removed_never_leads``, and the voter sets the other invariants count majorities in.

    ``initial`` is the set the cluster was bootstrapped with (committed by definition, filed at
    offset -1 as the bootstrap checkpoint's). A ``VotersRecord`` is committed once some node's
    high watermark passes it in that node's log.
    """

    def __init__(self, nodes: Mapping[int, SimNode], initial: VoterSet) -> None:
        self.nodes = nodes
        self.timelines: dict[int, VoterTimeline] = {}
        #: Every committed voter set, by the offset of its record (-1: the bootstrap set).
        self.committed_offsets: list[int] = [-1]
        self.committed_sets: list[VoterSet] = [initial]
        #: Per node, the highest record offset of its log already counted as committed.
        self._marked: dict[int, int] = {}

    # -- what is committed -----------------------------------------------------------------
    @property
    def latest(self) -> VoterSet:
        """The latest committed voter set."""
        return self.committed_sets[-1]

    def committed_at(self, offset: int) -> VoterSet:
        index = bisect.bisect_right(self.committed_offsets, offset)
        return self.committed_sets[max(0, index - 1)]

    def leader_sets(self, leader: SimNode) -> list[VoterSet]:
        """The sets a leader's high watermark may have been counted in: its latest (committed
        or not) and the one in force below its high watermark (Kafka's
        ``MajorityReachedHighWatermark`` under KIP-853)."""
        timeline = self.timelines.get(leader.node_id)
        if timeline is None:
            return [self.latest]
        sets = []
        last = timeline.last()
        if last is not None:
            sets.append(last[1])
        below = timeline.set_at(leader.log.high_watermark - 1)
        if below is not None and below not in sets:
            sets.append(below)
        return sets or [self.latest]

    # -- checks ----------------------------------------------------------------------------
    def forget(self, node_id: int) -> None:
        """A node's disk was replaced: read its log from scratch."""
        self.timelines.pop(node_id, None)
        self._marked.pop(node_id, None)

    def check_node(self, node: SimNode, problems: Problems) -> None:
        node_id = node.node_id
        timeline = self.timelines.get(node_id)
        if timeline is None:
            timeline = self.timelines[node_id] = VoterTimeline()
        found, reloaded = timeline.follow(node.log)
        if reloaded:
            self._marked[node_id] = -1
            self._check_snapshot(node, timeline, problems)
        for new in found:
            if new.before is not None and not new.before.differs_by_one_voter(new.voters):
                problems.append(
                    (
                        "voters_differ_by_one",
                        (node_id,),
                        (
                            f"node {node_id}'s log holds {new.voters} at offset {new.offset} "
                            f"after {new.before}: more than one voter changed"
                        ),
                    )
                )
        hw = node.log.high_watermark
        for offset, voters in timeline.records_from(self._marked.get(node_id, -1) + 1):
            if offset >= hw:
                break
            self._marked[node_id] = offset
            self._commit(node_id, offset, voters, problems)
        latest_offset = self.committed_offsets[-1]
        if hw > latest_offset >= 0:
            held = timeline.set_at(latest_offset)
            if held is not None and held != self.latest:
                problems.append(
                    (
                        "voters_durable",
                        (node_id,),
                        (
                            f"node {node_id}'s high watermark is {hw}, but its log holds "
                            f"{held} at offset {latest_offset}, where {self.latest} was committed"
                        ),
                    )
                )

    def _commit(self, node_id: int, offset: int, voters: VoterSet, problems: Problems) -> None:
        index = bisect.bisect_left(self.committed_offsets, offset)
        if index < len(self.committed_offsets) and self.committed_offsets[index] == offset:
            known = self.committed_sets[index]
            if known != voters:
                problems.append(
                    (
                        "voters_durable",
                        (node_id,),
                        (
                            f"node {node_id} committed {voters} at offset {offset}, where "
                            f"{known} was committed"
                        ),
                    )
                )
            return
        self.committed_offsets.insert(index, offset)
        self.committed_sets.insert(index, voters)

    def _check_snapshot(self, node: SimNode, timeline: VoterTimeline, problems: Problems) -> None:
        """A log read again from its snapshot: that snapshot holds the set committed at its
        last offset (the bootstrap checkpoint, offset -1, holds the bootstrap set)."""
        at = timeline.snapshot_offset
        if at is None:
            if timeline.unread_snapshot is not None:
                problems.append(
                    (
                        "voters_durable",
                        (node.node_id,),
                        (
                            f"node {node.node_id}'s snapshot {timeline.unread_snapshot} holds "
                            "no voter set"
                        ),
                    )
                )
            return
        held, committed = timeline.sets[0], self.committed_at(at)
        if held != committed:
            problems.append(
                (
                    "voters_durable",
                    (node.node_id,),
                    (
                        f"node {node.node_id}'s snapshot ending at offset {at + 1} holds {held}, "
                        f"but {committed} was committed there"
                    ),
                )
            )

    def check_leader(self, leader: SimNode, problems: Problems) -> None:
        """At most one ``VotersRecord`` in the leader's log past the committed set."""
        timeline = self.timelines.get(leader.node_id)
        if timeline is None:
            return
        pending = timeline.records_from(self.committed_offsets[-1] + 1)
        if len(pending) > 1:
            problems.append(
                (
                    "voters_one_uncommitted",
                    (leader.node_id,),
                    (
                        f"leader {leader.node_id}'s log holds {len(pending)} voter sets past the "
                        f"committed one (offset {self.committed_offsets[-1]}): "
                        f"{[offset for offset, _ in pending]}"
                    ),
                )
            )

    def became_leader(self, node: SimNode, problems: Problems) -> None:
        """A node seen leading an epoch for the first time is a voter in its log's latest set,
        and not one whose removal committed (unless its log adds it again since)."""
        node_id = node.node_id
        timeline = self.timelines.get(node_id)
        last = None if timeline is None else timeline.last()
        key = ReplicaKey(node_id, node.directory_id)
        if last is None or not last[1].is_voter(key):
            problems.append(
                (
                    "removed_never_leads",
                    (node_id,),
                    (
                        f"node {node_id} ({key}) leads epoch {node.epoch} but its log's voter "
                        f"set is {None if last is None else last[1]}"
                    ),
                )
            )
        elif not self.latest.is_voter(key) and last[0] <= self.committed_offsets[-1]:
            problems.append(
                (
                    "removed_never_leads",
                    (node_id,),
                    (
                        f"node {node_id} leads epoch {node.epoch} after {self.latest} "
                        f"committed at offset {self.committed_offsets[-1]} without it"
                    ),
                )
            )
