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
``committed_intact``        every committed batch is held intact (offsets, epoch, CRC, bytes)
                            by at least one voter, in its log or under an intact snapshot; at
                            the end, by a majority of the voters once no voter is under repair
``listener_data``           every listener handed a batch at an offset is handed the same
                            batch (offsets, epoch, records) the first listener was handed there
``voters_differ_by_one``    (kraft.version 1) in every log, each ``VotersRecord`` adds or
                            removes exactly one voter to the set before it (or changes one
                            voter's endpoints)
``voters_one_uncommitted``  (kraft.version 1) the leader's log holds at most one
                            ``VotersRecord`` past the latest committed one
``voters_durable``          (kraft.version 1) a committed ``VotersRecord`` is never lost: every
                            node whose high watermark passes it holds it, and every snapshot
                            holds the voter set committed at its offset
``removed_never_leads``     (kraft.version 1) a node that becomes leader is a voter of its
                            log's latest set, and not one whose removal committed
``linearizable``            (the kv workload) at the end, the history its clients saw admits
                            a linearization (``kraft.simulation.linearizability``)
``availability``            while the workload runs and a majority of the voters is healthy
                            (running, not paused, not under repair) and connected (no cut,
                            lossy or slow link between them), the quorum commits something new
                            at least every ``AVAILABILITY_MS``

Below a node's log start the log holds nothing: those batches are checked against the
snapshot's value instead, and leader completeness and durability only ask for the committed
batches at or past the log start.

Storage faults (docs/simulation.md, "Storage faults"): a log that set data aside as corrupt or
lost (``quarantine_from``, a lost write found at recovery) has a repair target, the end it had
before. While it is set the node may hold fewer committed records than its high watermark said:
its high watermark may fall, and it counts towards ``majority_high_watermark`` up to its target
(it refuses to vote for a log behind it). A batch whose bytes are known corrupt (it would fail
the log's checked read) is no copy for ``committed_intact`` and ``committed_data``, but counts as
held for ``leader_completeness`` and ``durability``: the leader finds it when it reads it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from kraft.common.clock import ManualClock
from kraft.errors import CorruptRecordError
from kraft.log.api import ValidationKind
from kraft.raft.listeners import Batch
from kraft.raft.states import ReplicaKey
from kraft.raft.voter_set import VoterSet
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.serde import RecordSerde
from kraft.simulation.controller_invariants import CONTROLLER_INVARIANTS
from kraft.simulation.network import LinkConfig, SimNetwork
from kraft.simulation.node import SimNode, SimSerde, top_leader
from kraft.simulation.voters import VoterChecks
from kraft.snapshot.reader import SnapshotReader

__all__ = ["AVAILABILITY_MS", "INVARIANTS", "InvariantChecker", "Violation"]

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
    "committed_intact",
    "listener_data",
    "availability",
    "voters_differ_by_one",
    "voters_one_uncommitted",
    "voters_durable",
    "removed_never_leads",
    "linearizable",
    *CONTROLLER_INVARIANTS,
)

#: How long a healthy, connected majority may go without committing anything new while the
#: workload runs: a fetch timeout (2 s) to notice a lost leader, and elections, generously.
AVAILABILITY_MS = 30_000
#: A link whose latency may exceed this does not count as connecting two voters.
CONNECTED_LATENCY_MS = 100

Problems = list[tuple[str, tuple[int, ...], str]]

_SERDE = SimSerde()


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

    __slots__ = ("batches", "ends", "frontier")

    def __init__(self) -> None:
        self.batches: dict[int, tuple[int, int, int]] = {}
        #: (last offset, base offset) of every batch in ``batches``, in order: a rescan after
        #: a storage fault or a log cleaning looks only at the batches past the snapshots,
        #: not at the whole run's.
        self.ends: list[tuple[int, int]] = []
        #: The highest high watermark any node has reported.
        self.frontier = 0

    def add(self, base: int, identity: tuple[int, int, int]) -> None:
        self.batches[base] = identity
        end = (identity[0], base)
        if self.ends and end < self.ends[-1]:
            bisect.insort(self.ends, end)
        else:
            self.ends.append(end)

    def ending_at_or_after(self, offset: int) -> list[int]:
        """Base offsets of the batches whose last offset is at or past ``offset``."""
        ends = self.ends
        return [base for _, base in ends[bisect.bisect_left(ends, (offset, -1)) :]]


class InvariantChecker:
    """Checks a cluster's nodes; ``check`` after every event, ``validate`` at the end.

    ``bootstrap``: the voter set a ``kraft.version`` 1 cluster was bootstrapped with; the
    voters are then those of the latest committed ``VotersRecord`` (``voter_ids`` is only the
    ``kraft.version`` 0 static set), and the KIP-853 invariants run.
    """

    def __init__(
        self,
        nodes: Mapping[int, SimNode],
        voter_ids: Iterable[int],
        clock: ManualClock | None = None,
        network: SimNetwork | None = None,
        bootstrap: VoterSet | None = None,
        serde: RecordSerde[Any] = _SERDE,
    ) -> None:
        self.nodes = nodes
        #: The records' serde (a snapshot is intact if its records decode).
        self.serde = serde
        self._static_voters = tuple(voter_ids)
        self.voter_checks = None if bootstrap is None else VoterChecks(nodes, bootstrap)
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
        self.pending: Problems = []
        #: The counter's value after each committed offset: end offset -> (value, node).
        self.values: dict[int, tuple[int, int]] = {}
        #: (log start, earliest snapshot) last checked per node.
        self._log_starts: dict[int, tuple[int, OffsetAndEpoch | None]] = {}
        #: (log start, log end, batches set aside) last seen per node: a log that shrank
        #: (truncated, set aside, cleaned, crashed, wiped) may have lost a committed copy.
        self._shapes: dict[int, tuple[int, int, int]] = {}
        #: Whether to look for committed batches without an intact copy at the next check.
        self._rescan = False
        #: Nodes whose next append is misdirected: their log end when it was armed.
        self._armed: dict[int, int] = {}
        #: Per node, per snapshot looked at by the last rescan: its bytes then and whether they
        #: were intact (a rescan follows every log cleaning; a fault replaces the bytes).
        self._snapshots_seen: dict[int, dict[OffsetAndEpoch, tuple[bytes, bool]]] = {}
        #: What the first listener handed a batch got: base offset -> (last, epoch, records).
        self.deliveries: dict[int, tuple[int, int, tuple[Any, ...]]] = {}
        self._handed_otherwise: Problems = []
        # Availability: since when (simulated ms) the workload runs and a healthy, connected
        # majority exists (None while not), and when the highest high watermark last grew.
        self._clock = clock
        self._network = network
        self._offering_since: int | None = None
        self._healthy_since: int | None = None
        self._progress_at = 0
        self._top_hw = 0
        #: The longest time a healthy, connected majority went without committing (measured).
        self.longest_stall_ms = 0

    @property
    def voter_ids(self) -> tuple[int, ...]:
        """The voters: the static set, or (kraft.version 1) the latest committed one."""
        if self.voter_checks is None:
            return self._static_voters
        return tuple(sorted(self.voter_checks.latest.ids))

    @property
    def majority(self) -> int:
        return len(self.voter_ids) // 2 + 1

    # -- lifecycle hooks --------------------------------------------------------------------
    def node_added(self, node_id: int) -> None:
        """A node with an empty disk joined the cluster (``Cluster.add_node``)."""
        self._writes_seen[node_id] = 0
        self._persisted_epoch[node_id] = 0
        self._verified[node_id] = 0
        self._hw[node_id] = -1
        self._was_leader[node_id] = -1

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
            if self.voter_checks is not None:
                self.voter_checks.forget(node_id)

    def storage_fault(self) -> None:
        """A storage fault changed a disk: look for committed batches left without a copy."""
        self._rescan = True

    def misdirect_armed(self, node_id: int) -> None:
        """``node_id``'s next append will overwrite an older batch: look again after it."""
        self._armed[node_id] = self.nodes[node_id].log.log_end_offset

    def workload(self, running: bool) -> None:
        """The workload started (appends are offered) or stopped."""
        if not running:
            self._offering_since = None
        elif self._offering_since is None and self._clock is not None:
            self._offering_since = self._clock.now_ms()

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
        handed = (batch.last_offset, batch.epoch, tuple(batch.records))
        first = self.deliveries.setdefault(batch.base_offset, handed)
        if first != handed:
            self._handed_otherwise.append(
                (
                    "listener_data",
                    (node_id,),
                    (
                        f"node {node_id}'s listener got batch {batch.base_offset}..{handed[0]} "
                        f"epoch {handed[1]} with records {list(handed[2])[:3]}, but the first "
                        f"listener handed it got {batch.base_offset}..{first[0]} epoch "
                        f"{first[1]} with {list(first[2])[:3]}"
                    ),
                )
            )
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
    def check(self, only: SimNode | None = None) -> Problems:
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
        if self._rescan:
            self._rescan = False
            self._check_intact(problems)
        if only is None:
            self._check_available(problems)
        # After the log's checks: a listener handed other records usually means its log holds
        # another batch, which committed_data names more precisely.
        if self._handed_otherwise:
            problems += self._handed_otherwise
            self._handed_otherwise = []
        return problems

    def _check_node(self, node: SimNode, problems: Problems) -> None:
        node_id = node.node_id
        self._check_persisted(node_id, node, problems)
        set_aside = self._check_shape(node)
        if self.voter_checks is not None:
            self.voter_checks.check_node(node, problems)
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
                if self.voter_checks is not None:
                    self.voter_checks.became_leader(node, problems)
        self._check_log_start(node, problems)
        hw = node.log.high_watermark
        if hw < self._hw[node_id] and not set_aside and node.log.repair_target is None:
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

    def _check_shape(self, node: SimNode) -> bool:
        """Notice a log that shrank or was overwritten (then look for committed batches left
        without an intact copy); whether it set data aside since the last look."""
        log = node.log
        node_id = node.node_id
        shape = (log.log_start_offset, log.log_end_offset, len(log.set_aside))
        seen = self._shapes.get(node_id)
        if seen == shape:
            return False
        self._shapes[node_id] = shape
        # Re-verify what the log holds again (fetched back, or other batches) past its end.
        self._verified[node_id] = min(self._verified[node_id], shape[1])
        if seen is None:
            return False
        if shape[1] < seen[1] or shape[0] > seen[0]:
            self._rescan = True
        if node_id in self._armed and shape[1] > seen[1]:
            del self._armed[node_id]
            self._rescan = True
        return shape[2] > seen[2]

    def _check_log_start(self, node: SimNode, problems: Problems) -> None:
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

    def _check_persisted(self, node_id: int, node: SimNode, problems: Problems) -> None:
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
        problems: Problems,
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

    def _verify(self, node: SimNode, hw: int, problems: Problems) -> None:
        committed = self.committed
        batches = committed.batches
        start = max(self._verified[node.node_id], node.log.log_start_offset)
        verified = start
        for base, last, batch in node.log.held_batches(start, hw):
            if last >= hw:
                break
            verified = last + 1
            if batch is None:
                continue  # known corrupt: the node cannot read it, let alone serve it
            identity = (last, batch.epoch, batch.crc)
            known = batches.get(base)
            if known is None:
                committed.add(base, identity)
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
        self._verified[node.node_id] = verified
        committed.frontier = max(committed.frontier, hw)

    def _check_completeness(self, leader: SimNode, problems: Problems) -> None:
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
        """Base offsets of committed batches that ``node``'s log lacks or holds differently
        (a batch it holds known corrupt is not missing: the node finds it when it reads it)."""
        batches = self.committed.batches
        if not batches:
            return []
        start = node.log.log_start_offset  # below it, the snapshot stands for the batches
        have: dict[int, tuple[int, int, int]] = {}
        damaged: set[int] = set()
        for base, last, batch in node.log.held_batches(start, self.committed.frontier):
            if batch is None:
                damaged.add(base)
            else:
                have[base] = (last, batch.epoch, batch.crc)
        return sorted(
            base
            for base, identity in batches.items()
            if base >= start and base not in damaged and have.get(base) != identity
        )

    def _intact_snapshot_end(self, node: SimNode) -> int:
        """The end offset of ``node``'s latest intact snapshot (0 without one)."""
        log = node.log
        seen = self._snapshots_seen.get(node.node_id, {})
        looked: dict[OffsetAndEpoch, tuple[bytes, bool]] = {}
        self._snapshots_seen[node.node_id] = looked
        for snapshot_id in reversed(log.snapshot_ids()):
            raw = log.read_snapshot(snapshot_id)
            if raw is None:
                continue
            data = raw.records()
            known = seen.get(snapshot_id)
            if known is not None and (known[0] is data or known[0] == data):
                raw.close()
                intact = known[1]
            else:
                try:
                    # What a listener loading it checks: every batch, offsets, epoch, header,
                    # footer.
                    SnapshotReader(raw, self.serde, owns_raw=True).close()
                    intact = True
                except CorruptRecordError:
                    intact = False
            looked[snapshot_id] = (data, intact)
            if intact:
                return snapshot_id.offset
        return 0

    def _copies(self, past_every_snapshot: bool) -> dict[int, int]:
        """Per committed batch: how many voters hold it intact (offsets, epoch, CRC, and bytes
        that pass the log's checks), in their log or under an intact snapshot. With
        ``past_every_snapshot``, only the batches past every voter's intact snapshots (the
        others have a copy there)."""
        voters = [self.nodes[v] for v in self.voter_ids]
        covers = [self._intact_snapshot_end(node) for node in voters]
        floor = max(covers) if past_every_snapshot else 0
        batches = self.committed.batches
        counts = dict.fromkeys(self.committed.ending_at_or_after(floor), 0)
        for node, covered in zip(voters, covers, strict=True):
            log = node.log
            held = {
                base: (last, batch.epoch, batch.crc)
                for base, last, batch in log.held_batches(floor, log.log_end_offset)
                if batch is not None
            }
            for base in counts:
                identity = batches[base]
                if identity[0] < covered or held.get(base) == identity:
                    counts[base] += 1
        return counts

    def _check_intact(self, problems: Problems) -> None:
        lost = sorted(base for base, count in self._copies(True).items() if count == 0)
        if lost:
            problems.append(
                (
                    "committed_intact",
                    (),
                    (
                        f"committed batches {lost[:5]}{'...' if len(lost) > 5 else ''} are "
                        "held intact by no voter, in its log or under an intact snapshot"
                    ),
                )
            )

    def _check_available(self, problems: Problems) -> None:
        """While the workload runs and a majority of the voters is healthy and connected, the
        highest high watermark grows at least every ``AVAILABILITY_MS``."""
        clock = self._clock
        if clock is None or self._network is None:
            return
        now = clock.now_ms()
        top = max(
            (n.log.high_watermark for n in self.nodes.values() if n.client is not None), default=0
        )
        if top > self._top_hw:
            self._top_hw = top
            self._progress_at = now
        if self._offering_since is None or not self._healthy_majority():
            self._healthy_since = None
            return
        if self._healthy_since is None:
            self._healthy_since = now
        stall = now - max(self._healthy_since, self._progress_at, self._offering_since)
        self.longest_stall_ms = max(self.longest_stall_ms, stall)
        if stall > AVAILABILITY_MS:
            problems.append(
                (
                    "availability",
                    (),
                    (
                        f"for {stall} ms a healthy, connected majority of the voters committed "
                        f"nothing past offset {self._top_hw} while the workload ran"
                    ),
                )
            )
            self._progress_at = now

    def _healthy_majority(self) -> bool:
        """Whether a majority of the voters is running, unpaused, not under repair, and
        connected to each other by clean links (under kraft.version 1: whether such a majority
        can elect a leader, see :meth:`_electable`)."""
        if self.voter_checks is not None:
            return self._electable()
        healthy = [v for v in self.voter_ids if self._healthy(self.nodes[v])]
        if len(healthy) < self.majority:
            return False
        network = self._network
        assert network is not None
        uniform = network.uniform()
        if uniform is not None and _clean(uniform):
            return True  # the common case, after every event: every pair is connected
        return any(
            all(self._connected(a, b) for a, b in combinations(group, 2))
            for group in combinations(healthy, self.majority)
        )

    @staticmethod
    def _healthy(node: SimNode) -> bool:
        return node.client is not None and not node.paused and node.log.repair_target is None

    def _electable(self) -> bool:
        """kraft.version 1: whether some healthy node is a voter of the latest set in its own
        log and a majority of that set is healthy, connected to it, and holds no longer log
        than it (so would vote for it). While a change is in flight the nodes may disagree on
        the set (a removed voter holding the newest log votes for none of the others, and
        stands for nothing): Raft then waits, and so does this invariant."""
        checks = self.voter_checks
        assert checks is not None
        healthy = {i for i, node in self.nodes.items() if self._healthy(node)}
        for candidate in sorted(healthy):
            node = self.nodes[candidate]
            timeline = checks.timelines.get(candidate)
            last = None if timeline is None else timeline.last()
            view = checks.latest if last is None else last[1]
            if not view.is_voter(ReplicaKey(candidate, node.directory_id)):
                continue
            log = (node.log.last_fetched_epoch, node.log.log_end_offset)
            supporters = sum(
                1
                for v in view.ids
                if v in healthy
                and (
                    v == candidate
                    or (
                        self._connected(candidate, v)
                        and (self.nodes[v].log.last_fetched_epoch, self.nodes[v].log.log_end_offset)
                        <= log
                    )
                )
            )
            if supporters > len(view) // 2:
                return True
        return False

    def _connected(self, a: int, b: int) -> bool:
        network = self._network
        assert network is not None
        for source, destination in ((a, b), (b, a)):
            if network.is_blocked(source, destination) or not _clean(
                network.link(source, destination)
            ):
                return False
        return True

    def _check_leader_hw(self, leader: SimNode, problems: Problems) -> None:
        epoch = leader.epoch
        hw = leader.log.high_watermark
        top_epoch, top_hw = self._top_leader
        if epoch > top_epoch:
            self._top_leader = (epoch, hw)
        elif epoch == top_epoch:
            # A leader that set committed data aside (under repair) must resign; until then
            # its high watermark falls with its log.
            if hw < top_hw and leader.log.repair_target is None:
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
        if self.voter_checks is None:
            if _majority_reaches(self.nodes, self._static_voters, hw):
                return
            voter_sets = [self._static_voters]
        else:
            # Kafka's MajorityReachedHighWatermark under KIP-853: the leader counts in its
            # latest set, but may not have counted again since it appended it.
            self.voter_checks.check_leader(leader, problems)
            voter_sets = [tuple(voters.ids) for voters in self.voter_checks.leader_sets(leader)]
            if any(_majority_reaches(self.nodes, ids, hw) for ids in voter_sets):
                return
        counts = [
            (sum(1 for v in ids if _reaches(self.nodes[v], hw)), len(ids)) for ids in voter_sets
        ]
        ends = {v: self.nodes[v].log.log_end_offset for v in sorted(set().union(*voter_sets))}
        reached = " (of the set before its latest change: ".join(
            f"{holders} of {size} voters" for holders, size in counts
        ) + ")" * (len(counts) - 1)
        problems.append(
            (
                "majority_high_watermark",
                (leader.node_id,),
                (
                    f"leader {leader.node_id} (epoch {epoch}) has high watermark {hw}, but "
                    f"only {reached} reach it (log ends {ends})"
                ),
            )
        )

    # -- at the end -----------------------------------------------------------------------------
    def validate(self, leader: SimNode | None) -> Problems:
        """End-of-run checks: the last leader holds every committed batch; once no voter is
        under repair, a majority of the voters holds each intact."""
        problems = self.check()
        repairing = [v for v in self.voter_ids if self.nodes[v].log.repair_target is not None]
        if not repairing:
            few = sorted(base for base, n in self._copies(False).items() if n < self.majority)
            if few:
                problems.append(
                    (
                        "committed_intact",
                        (),
                        (
                            f"committed batches {few[:5]}{'...' if len(few) > 5 else ''} are "
                            f"held intact by fewer than {self.majority} voters at the end, "
                            "with no voter under repair"
                        ),
                    )
                )
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


def _clean(link: LinkConfig) -> bool:
    """Whether ``link`` loses, duplicates and reorders nothing, and is fast enough to count as
    connected."""
    return not (
        link.drop or link.duplicate or link.reorder or link.latency_ms[1] > CONNECTED_LATENCY_MS
    )


def _majority_reaches(nodes: Mapping[int, SimNode], ids: tuple[int, ...], offset: int) -> bool:
    """Whether a majority of voters ``ids`` reaches ``offset`` (stops counting once one does:
    this runs after every event)."""
    needed = len(ids) // 2 + 1
    for v in ids:
        if _reaches(nodes[v], offset):
            needed -= 1
            if not needed:
                return True
    return False


def _reaches(node: SimNode, offset: int) -> bool:
    """Whether ``node``'s log reaches ``offset``, or did before it set data aside (then it
    votes for no log behind its repair target)."""
    target = node.log.repair_target
    return node.log.log_end_offset >= offset or (target is not None and target.offset >= offset)
