"""The invariants the simulator checks after every event: those of Kafka's
``RaftEventSimulationTest`` and more (docs/simulation.md#invariants).

Each check is incremental: it looks at what changed since the last event (new quorum-state
writes, a high watermark that moved, a node that became leader), so checking after every event
stays cheap. Names, as they appear in reports and in the event log:

``single_leader``           at most one leader per epoch, over every persisted state and every
                            node that is Leader in memory
``monotonic_epoch``         a node's persisted epoch never decreases, and a running node's
                            in-memory epoch equals its persisted one
``monotonic_high_watermark`` a running node's high watermark never decreases; nor does the
                            high watermark of the leader of the highest epoch
``majority_high_watermark`` a majority of voters hold the leader's high watermark in their log
``committed_data``          every batch below a node's high watermark is the same batch (offsets,
                            epoch, CRC) on every node, checked as the high watermark moves; a
                            listener is handed exactly those batches
``leader_completeness``     a new leader's log holds every batch committed before it
``durability``              at the end, every batch ever committed is in the last leader's log
``counter``                 committed counter increments are consecutive on every node
``listener_order``          a listener is handed batches in increasing offset order
``no_exception``            no client raises out of ``poll`` (that would stop a real node)
``snapshot_at_log_start``   a log starts at or below its earliest snapshot, exactly at it once
                            past 0, and that snapshot's id is valid in the log
``leader_never_loads_snapshot`` a writable leader's state machine is never handed a snapshot
``snapshot_value``          the counter value a snapshot holds is the value every node had
                            after the same committed offset (committed data, for snapshots)

Below a node's log start the log holds nothing: those batches are checked against the
snapshot's value instead, and leader completeness and durability only ask for the committed
batches at or past the log start.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kraft.log.api import ValidationKind
from kraft.raft.listeners import Batch
from kraft.record.offsets import OffsetAndEpoch
from kraft.simulation.node import SimNode, top_leader

__all__ = ["INVARIANTS", "InvariantChecker", "Violation"]

INVARIANTS = (
    "single_leader",
    "monotonic_epoch",
    "monotonic_high_watermark",
    "majority_high_watermark",
    "committed_data",
    "leader_completeness",
    "durability",
    "counter",
    "listener_order",
    "no_exception",
    "snapshot_at_log_start",
    "leader_never_loads_snapshot",
    "snapshot_value",
)


@dataclass(frozen=True, slots=True)
class Violation:
    """An invariant that failed: when, which, on which nodes, and why."""

    time_ms: int
    invariant: str
    nodes: tuple[int, ...]
    message: str

    def __str__(self) -> str:
        nodes = ",".join(map(str, self.nodes)) or "-"
        return f"[{self.time_ms} ms] {self.invariant} (nodes {nodes}): {self.message}"


class _Committed:
    """Every batch known committed: base offset -> (last offset, epoch, CRC)."""

    __slots__ = ("batches", "frontier")

    def __init__(self) -> None:
        self.batches: dict[int, tuple[int, int, int]] = {}
        #: The highest high watermark any node has reported.
        self.frontier = 0


class InvariantChecker:
    """Checks a cluster's nodes; ``check`` after every event, ``validate`` at the end."""

    def __init__(self, nodes: Mapping[int, SimNode], voter_ids: Iterable[int]) -> None:
        self.nodes = nodes
        self.voter_ids = tuple(voter_ids)
        self.majority = len(self.voter_ids) // 2 + 1
        self.committed = _Committed()
        self.leader_of_epoch: dict[int, int] = {}
        self._writes_seen = dict.fromkeys(nodes, 0)
        self._persisted_epoch = dict.fromkeys(nodes, 0)
        self._verified = dict.fromkeys(nodes, 0)
        self._hw = dict.fromkeys(nodes, -1)
        self._top_leader = (-1, -1)  # (epoch, high watermark) of the highest-epoch leader
        self._was_leader = dict.fromkeys(nodes, -1)
        self._leader: SimNode | None = None
        self.checks = 0
        self.pending: list[tuple[str, tuple[int, ...], str]] = []
        #: The counter's value after each committed offset: end offset -> (value, node).
        self.values: dict[int, tuple[int, int]] = {}
        #: (log start, earliest snapshot) last checked per node.
        self._log_starts: dict[int, tuple[int, OffsetAndEpoch | None]] = {}

    # -- lifecycle hooks --------------------------------------------------------------------
    def node_reset(self, node_id: int, wiped: bool) -> None:
        """A node was killed or restarted (its in-memory state is gone), or wiped (its disk)."""
        if self._leader is self.nodes[node_id]:
            # A leader stops leading only in its own poll or by going down: here.
            self._leader = top_leader(self.nodes.values())
        self._hw[node_id] = -1
        self._verified[node_id] = 0
        self._was_leader[node_id] = -1
        if wiped:
            self._writes_seen[node_id] = 0
            self._persisted_epoch[node_id] = 0

    def report(self, invariant: str, nodes: tuple[int, ...], message: str) -> None:
        """Record a problem found outside :meth:`check` (a listener's, the counter's)."""
        self.pending.append((invariant, nodes, message))

    def on_snapshot(self, node_id: int, snapshot_id: OffsetAndEpoch, value: int) -> None:
        """A node's counter wrote or loaded a snapshot holding ``value``."""
        self._note_value(node_id, snapshot_id.offset, value, f"snapshot {snapshot_id}")

    def _note_value(self, node_id: int, end_offset: int, value: int, what: str) -> None:
        known = self.values.setdefault(end_offset, (value, node_id))
        if known[0] != value:
            self.report(
                "snapshot_value",
                (node_id, known[1]),
                (
                    f"node {node_id}'s {what} says the counter was {value} below offset "
                    f"{end_offset}, node {known[1]} had {known[0]}"
                ),
            )

    def on_commit(self, node_id: int, batch: Batch[Any], value: int | None = None) -> None:
        if value is not None:
            self._note_value(node_id, batch.last_offset + 1, value, "counter")
        known = self.committed.batches.get(batch.base_offset)
        if known is not None and (known[0], known[1]) != (batch.last_offset, batch.epoch):
            self.report(
                "committed_data",
                (node_id,),
                (
                    f"node {node_id}'s listener got batch {batch.base_offset}..{batch.last_offset} "
                    f"epoch {batch.epoch}, but {batch.base_offset}..{known[0]} epoch {known[1]} "
                    "was committed"
                ),
            )

    # -- after every event --------------------------------------------------------------------
    def check(self, only: SimNode | None = None) -> list[tuple[str, tuple[int, ...], str]]:
        """Every problem since the last call, as (invariant, nodes, message).

        ``only``: the one node an event touched (a poll); the others are not looked at, except
        that the leader's high watermark is always checked against every voter's log.
        """
        self.checks += 1
        problems = self.pending
        self.pending = []
        if only is None:
            for node in self.nodes.values():
                self._check_node(node, problems)
            self._leader = top_leader(self.nodes.values())
        else:
            self._check_node(only, problems)
            leader = self._leader
            if only.client is not None and only.client.is_leader:
                if leader is None or only.epoch >= leader.epoch:
                    self._leader = only
            elif leader is only:
                self._leader = top_leader(self.nodes.values())
        if self._leader is not None:
            self._check_leader_hw(self._leader, problems)
        return problems

    def _check_node(self, node: SimNode, problems: list[tuple[str, tuple[int, ...], str]]) -> None:
        node_id = node.node_id
        self._check_persisted(node_id, node, problems)
        client = node.client
        if client is None:
            return
        epoch = client.epoch
        if epoch != self._persisted_epoch[node_id]:
            problems.append(
                (
                    "monotonic_epoch",
                    (node_id,),
                    (
                        f"node {node_id} is in epoch {epoch} but persisted "
                        f"{self._persisted_epoch[node_id]}"
                    ),
                )
            )
        if client.is_leader:
            self._claim(epoch, node_id, problems)
            if self._was_leader[node_id] != epoch:
                self._was_leader[node_id] = epoch
                self._check_completeness(node, problems)
        self._check_log_start(node, problems)
        hw = node.log.high_watermark
        if hw < self._hw[node_id]:
            problems.append(
                (
                    "monotonic_high_watermark",
                    (node_id,),
                    (f"node {node_id}'s high watermark went from {self._hw[node_id]} to {hw}"),
                )
            )
        self._hw[node_id] = hw
        if hw > self._verified[node_id]:
            self._verify(node, hw, problems)

    def _check_log_start(
        self, node: SimNode, problems: list[tuple[str, tuple[int, ...], str]]
    ) -> None:
        log = node.log
        start, earliest = log.log_start_offset, log.earliest_snapshot_id
        if self._log_starts.get(node.node_id) == (start, earliest):
            return
        self._log_starts[node.node_id] = (start, earliest)
        if earliest is None:
            if start > 0:
                problems.append(
                    (
                        "snapshot_at_log_start",
                        (node.node_id,),
                        (f"node {node.node_id}'s log starts at {start} without a snapshot"),
                    )
                )
            return
        if start > earliest.offset or (start > 0 and start != earliest.offset):
            problems.append(
                (
                    "snapshot_at_log_start",
                    (node.node_id,),
                    (
                        f"node {node.node_id}'s log starts at {start}, its earliest snapshot is "
                        f"{earliest}"
                    ),
                )
            )
        elif (answer := log.validate_offset_and_epoch(*earliest)).kind is not (
            ValidationKind.VALID
        ):
            problems.append(
                (
                    "snapshot_at_log_start",
                    (node.node_id,),
                    (
                        f"node {node.node_id}'s earliest snapshot {earliest} is not valid in "
                        f"its log ({answer})"
                    ),
                )
            )

    def _check_persisted(
        self, node_id: int, node: SimNode, problems: list[tuple[str, tuple[int, ...], str]]
    ) -> None:
        writes = node.store.writes
        seen = self._writes_seen[node_id]
        if seen == len(writes):
            return
        for state in writes[seen:]:
            if state.epoch < self._persisted_epoch[node_id]:
                problems.append(
                    (
                        "monotonic_epoch",
                        (node_id,),
                        (
                            f"node {node_id} persisted epoch {state.epoch} after "
                            f"{self._persisted_epoch[node_id]}"
                        ),
                    )
                )
            self._persisted_epoch[node_id] = state.epoch
            if state.leader_id is not None:
                self._claim(state.epoch, state.leader_id, problems, persisted_by=node_id)
        self._writes_seen[node_id] = len(writes)

    def _claim(
        self,
        epoch: int,
        leader_id: int,
        problems: list[tuple[str, tuple[int, ...], str]],
        persisted_by: int | None = None,
    ) -> None:
        known = self.leader_of_epoch.setdefault(epoch, leader_id)
        if known != leader_id:
            where = f" (persisted by node {persisted_by})" if persisted_by is not None else ""
            problems.append(
                (
                    "single_leader",
                    (known, leader_id),
                    (f"epoch {epoch} has two leaders, {known} and {leader_id}{where}"),
                )
            )

    def _verify(
        self, node: SimNode, hw: int, problems: list[tuple[str, tuple[int, ...], str]]
    ) -> None:
        committed = self.committed
        batches = committed.batches
        start = max(self._verified[node.node_id], node.log.log_start_offset)
        verified = start
        for batch in node.log.batches_between(start, hw):
            base, last = batch.base_offset, batch.last_offset
            if last >= hw:
                break
            identity = (last, batch.epoch, batch.crc)
            known = batches.get(base)
            if known is None:
                batches[base] = identity
            elif known != identity:
                problems.append(
                    (
                        "committed_data",
                        (node.node_id,),
                        (
                            f"below its high watermark {hw}, node {node.node_id} holds batch "
                            f"{base}..{last} epoch {identity[1]} crc {identity[2]:08x}, but "
                            f"{base}..{known[0]} epoch {known[1]} crc {known[2]:08x} was committed"
                        ),
                    )
                )
            verified = last + 1
        self._verified[node.node_id] = verified
        committed.frontier = max(committed.frontier, hw)

    def _check_completeness(
        self, leader: SimNode, problems: list[tuple[str, tuple[int, ...], str]]
    ) -> None:
        missing = self._missing_from(leader)
        if missing:
            problems.append(
                (
                    "leader_completeness",
                    (leader.node_id,),
                    (
                        f"node {leader.node_id} leads epoch {leader.epoch} without committed "
                        f"batches {missing[:5]}{'...' if len(missing) > 5 else ''}"
                    ),
                )
            )

    def _missing_from(self, node: SimNode) -> list[int]:
        """Base offsets of committed batches that ``node``'s log lacks or holds differently."""
        batches = self.committed.batches
        if not batches:
            return []
        start = node.log.log_start_offset  # below it, the snapshot stands for the batches
        have = {
            batch.base_offset: (batch.last_offset, batch.epoch, batch.crc)
            for batch in node.log.batches_between(start, self.committed.frontier)
        }
        return sorted(
            base
            for base, identity in batches.items()
            if base >= start and have.get(base) != identity
        )

    def _check_leader_hw(
        self, leader: SimNode, problems: list[tuple[str, tuple[int, ...], str]]
    ) -> None:
        epoch = leader.epoch
        hw = leader.log.high_watermark
        top_epoch, top_hw = self._top_leader
        if epoch > top_epoch:
            self._top_leader = (epoch, hw)
        elif epoch == top_epoch:
            if hw < top_hw:
                problems.append(
                    (
                        "monotonic_high_watermark",
                        (leader.node_id,),
                        (
                            f"the leader of epoch {epoch} moved its high watermark back from "
                            f"{top_hw} to {hw}"
                        ),
                    )
                )
            self._top_leader = (epoch, hw)
        holders = sum(1 for voter in self.voter_ids if self.nodes[voter].log.log_end_offset >= hw)
        if holders < self.majority:
            ends = {v: self.nodes[v].log.log_end_offset for v in self.voter_ids}
            problems.append(
                (
                    "majority_high_watermark",
                    (leader.node_id,),
                    (
                        f"leader {leader.node_id} (epoch {epoch}) has high watermark {hw}, but "
                        f"only {holders} of {len(self.voter_ids)} voters reach it (log ends {ends})"
                    ),
                )
            )

    # -- at the end -----------------------------------------------------------------------------
    def validate(self, leader: SimNode | None) -> list[tuple[str, tuple[int, ...], str]]:
        """End-of-run checks: the last leader holds every committed batch."""
        problems = self.check()
        if leader is not None:
            missing = self._missing_from(leader)
            if missing:
                problems.append(
                    (
                        "durability",
                        (leader.node_id,),
                        (
                            f"committed batches {missing[:5]} are missing from the last leader "
                            f"{leader.node_id}'s log"
                        ),
                    )
                )
        return problems
