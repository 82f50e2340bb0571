"""The faults a scenario injects into a :class:`~kraft.simulation.cluster.Cluster`: cuts and
settings of the network, crashes, restarts, wiped disks, pauses, resignations, graceful
shutdowns, and storage faults (bit flips in a log or a snapshot, a lost write, a misdirected
write), as TigerBeetle's simulator injects them (docs/simulation.md lists them).

Every call is a fault, registered as a :class:`FaultRecord` (its index counts the calls) and
logged as ``fault_injected``; ``kraft sim shrink`` suppresses faults by index, and a suppressed
fault is logged as ``fault_suppressed`` and does nothing. The repairs (``heal``, ``restart``,
``resume``) also log ``fault_healed``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kraft.common.clock import ManualClock
from kraft.log.base import SnapshotRetention
from kraft.record.batch import RECORD_BATCH_OVERHEAD
from kraft.record.offsets import OffsetAndEpoch
from kraft.simulation.events import Event
from kraft.simulation.invariants import InvariantChecker
from kraft.simulation.network import SimNetwork
from kraft.simulation.node import SimNode

__all__ = ["FaultInjection", "FaultRecord"]


@dataclass(frozen=True, slots=True)
class FaultRecord:
    """One fault the scenario asked for: its index (in call order), time, kind and targets."""

    index: int
    time_ms: int
    kind: str
    targets: tuple[int, ...]
    suppressed: bool = False


class _Cluster(Protocol):
    """What the faults use of the cluster they are part of: the methods of
    :class:`FaultInjection` take it as ``self``, so mypy checks that ``Cluster`` has it all."""

    nodes: dict[int, SimNode]
    network: SimNetwork
    checker: InvariantChecker
    clock: ManualClock
    rand: random.Random
    retention: SnapshotRetention
    faults: list[FaultRecord]
    _suppress: frozenset[int]
    _shutdowns: dict[int, Any]

    def node(self, node_id: int) -> SimNode: ...
    def leader(self) -> int | None: ...
    def _start(self, node: SimNode) -> None: ...
    def _format(self, node: SimNode) -> None: ...
    def _crash(self, node: SimNode) -> None: ...
    def _wake(self, node: SimNode, at: int | None = None) -> None: ...
    def _emit(self, kind: str, **fields: Any) -> Event: ...
    def _fault(self, kind: str, targets: Iterable[int] = (), **details: Any) -> bool: ...
    def _healed(self, kind: str, targets: Iterable[int] = ()) -> None: ...


class FaultInjection:
    """The fault operations of :class:`~kraft.simulation.cluster.Cluster` (a base class of it).

    Each one checks its arguments, registers the fault, and does nothing more when the fault is
    suppressed.
    """

    def _fault(self: _Cluster, kind: str, targets: Iterable[int] = (), **details: Any) -> bool:
        """Register a fault; False if it is suppressed (shrinking).

        Every fault call is registered, even one that will change nothing (killing a node that
        is down), so suppressing one fault never renumbers the later ones.
        """
        index = len(self.faults)
        targets = tuple(targets)
        suppressed = index in self._suppress
        self.faults.append(FaultRecord(index, self.clock.now_ms(), kind, targets, suppressed))
        self._emit(
            "fault_suppressed" if suppressed else "fault_injected",
            details={"fault": kind, "index": index, "targets": list(targets), **details},
        )
        return not suppressed

    def _healed(self: _Cluster, kind: str, targets: Iterable[int] = ()) -> None:
        self._emit("fault_healed", details={"fault": kind, "targets": list(targets)})

    def partition(self: _Cluster, *groups: Iterable[int]) -> None:
        """Cut the network between ``groups`` (nodes in no group form one more group)."""
        sets = [set(group) for group in groups]
        for group in sets:
            for node_id in group:
                self.node(node_id)
        if self._fault(
            "partition",
            sorted(set().union(*sets)) if sets else (),
            groups=[sorted(g) for g in sets],
        ):
            self.network.partition(sets, self.nodes)

    def isolate(self: _Cluster, node_id: int) -> None:
        """Cut every link to and from ``node_id``."""
        self.node(node_id)
        if self._fault("isolate", (node_id,)):
            others = [i for i in self.nodes if i != node_id]
            self.network.block([node_id], others)
            self.network.block(others, [node_id])

    def block(self: _Cluster, sources: Iterable[int], destinations: Iterable[int]) -> None:
        """Cut the one-way links from every source to every destination."""
        src, dst = list(sources), list(destinations)
        for node_id in src + dst:
            self.node(node_id)
        if self._fault("block", sorted(set(src + dst)), sources=src, destinations=dst):
            self.network.block(src, dst)

    def heal(self: _Cluster) -> None:
        """Restore every link."""
        if self._fault("heal"):
            self.network.heal()
            self._healed("partition")

    def set_network(
        self: _Cluster,
        drop: float | None = None,
        duplicate: float | None = None,
        reorder: float | None = None,
        latency_ms: tuple[int, int] | None = None,
    ) -> None:
        """Change loss, duplication, reordering and latency on every link."""
        changes: dict[str, Any] = {
            k: v
            for k, v in (
                ("drop", drop),
                ("duplicate", duplicate),
                ("reorder", reorder),
                ("latency_ms", latency_ms),
            )
            if v is not None
        }
        replace(self.network.default, **changes)  # a bad value raises before the fault counts
        if self._fault("network", (), **changes):
            self.network.configure(**changes)

    def kill(self: _Cluster, node_id: int) -> None:
        """Crash ``node_id``: its process is gone, unflushed log data is lost."""
        node = self.node(node_id)
        if not self._fault("kill", (node_id,)) or node.client is None:
            return
        self._crash(node)

    def restart(self: _Cluster, node_id: int) -> None:
        """Start ``node_id`` again from its disk (a running node is killed first: a bounce)."""
        node = self.node(node_id)
        if not self._fault("restart", (node_id,)):
            return
        if node.client is not None:
            self._crash(node)
        self._start(node)
        self._healed("kill", (node_id,))

    def wipe(self: _Cluster, node_id: int) -> None:
        """Replace ``node_id``'s disk with an empty one (log and quorum state; under
        kraft.version 1 a new directory id and no bootstrap checkpoint: the replica the voter
        set names is gone). A running node is killed and restarted on the new disk; a stopped
        one stays stopped."""
        node = self.node(node_id)
        if not self._fault("wipe", (node_id,)):
            return
        was_running = node.client is not None
        if was_running:
            self._crash(node)
        self._format(node)
        self.checker.node_reset(node_id, wiped=True)
        if was_running:
            self._start(node)

    def pause(self: _Cluster, node_id: int) -> None:
        """Freeze ``node_id`` (a long GC pause): it is not polled; its mail waits."""
        node = self.node(node_id)
        if not self._fault("pause", (node_id,)) or node.client is None or node.paused:
            return
        node.paused = True

    def resume(self: _Cluster, node_id: int) -> None:
        node = self.node(node_id)
        if not self._fault("resume", (node_id,)) or not node.paused:
            return
        node.paused = False
        self._healed("pause", (node_id,))
        self._wake(node)

    def resign(self: _Cluster) -> int | None:
        """The leader resigns its epoch (Kafka's ``resign``); the leader's id, or None."""
        leader_id = self.leader()
        if not self._fault("resign", () if leader_id is None else (leader_id,)) or (
            leader_id is None
        ):
            return None
        node = self.nodes[leader_id]
        assert node.client is not None
        node.client.resign(node.client.epoch)
        self._wake(node)
        return leader_id

    def shutdown(self: _Cluster, node_id: int, timeout_ms: int = 5000) -> None:
        """Shut ``node_id`` down gracefully (a leader hands over with EndQuorumEpoch); the
        node stops when its shutdown completes."""
        node = self.node(node_id)
        if not self._fault("shutdown", (node_id,)) or node.client is None:
            return
        self._shutdowns[node_id] = node.client.shutdown(timeout_ms)
        self._wake(node)

    # -- storage faults (docs/simulation.md, "Storage faults") --------------------------------
    def corrupt(
        self: _Cluster,
        node_id: int,
        offset: int | None = None,
        position: int | None = None,
        mask: int | None = None,
    ) -> int | None:
        """Flip bits of one byte of a batch in ``node_id``'s log: bit rot that nothing notices
        until the batch is read, or until the node restarts (recovery checks every batch).

        ``offset``: an offset of the batch, ``position``: the byte in the batch, ``mask``: the
        bits to flip; by default a random offset of the log, byte of that batch and single bit,
        drawn with the cluster's random source. Returns the offset, or None when the log holds
        no batch (the fault changes nothing)."""
        log = self.node(node_id).log
        start, end = log.log_start_offset, log.log_end_offset
        if offset is not None and not start <= offset < end:
            raise ValueError(f"node {node_id}'s log holds offsets [{start}, {end}), not {offset}")
        if offset is None and start < end:
            offset = self.rand.randrange(start, end)
        if offset is not None and position is None:
            held = log.held_batches(offset, offset + 1)[0][2]
            size = RECORD_BATCH_OVERHEAD if held is None else held.size_in_bytes
            position = self.rand.randrange(size)
        if offset is not None and mask is None:
            mask = 1 << self.rand.randrange(8)
        if self._fault("corrupt", (node_id,), offset=offset, position=position, mask=mask) and (
            offset is not None
        ):
            assert position is not None and mask is not None
            log.corrupt_batch(offset, position, mask)
            self.checker.storage_fault()
        return offset

    def corrupt_snapshot(
        self: _Cluster,
        node_id: int,
        snapshot_id: OffsetAndEpoch | None = None,
        position: int | None = None,
        mask: int | None = None,
    ) -> OffsetAndEpoch | None:
        """Flip bits of one byte of a frozen snapshot of ``node_id`` (default: one of its
        snapshots, a byte and a bit drawn with the cluster's random source). Found when the
        snapshot is read: served, loaded, or checked by recovery at a restart. Returns the
        snapshot's id, or None when the node has no snapshot (the fault changes nothing)."""
        log = self.node(node_id).log
        ids = log.snapshot_ids()
        if snapshot_id is not None and snapshot_id not in ids:
            raise ValueError(f"node {node_id} has no snapshot {snapshot_id} (it has {ids})")
        if snapshot_id is None and ids:
            snapshot_id = self.rand.choice(ids)
        if snapshot_id is not None and position is None:
            reader = log.read_snapshot(snapshot_id)
            assert reader is not None
            size = reader.size_in_bytes
            reader.close()
            position = self.rand.randrange(max(1, size))
        if snapshot_id is not None and mask is None:
            mask = 1 << self.rand.randrange(8)
        if self._fault(
            "corrupt_snapshot",
            (node_id,),
            snapshot_offset=None if snapshot_id is None else snapshot_id.offset,
            snapshot_epoch=None if snapshot_id is None else snapshot_id.epoch,
            position=position,
            mask=mask,
        ) and (snapshot_id is not None):
            assert position is not None and mask is not None
            log.corrupt_snapshot(snapshot_id, position, mask)
            self.checker.storage_fault()
        return snapshot_id

    def lose_next_flush(self: _Cluster, node_id: int) -> None:
        """``node_id``'s next flush reports success and makes nothing durable: a lost write,
        which a crash before the following flush turns into lost data (its recovery sees the
        log end below the end it had flushed, and marks the log for repair)."""
        log = self.node(node_id).log
        if self._fault("lose_next_flush", (node_id,)):
            log.lose_next_flush()

    def misdirect_next_append(self: _Cluster, node_id: int, onto_offset: int) -> None:
        """``node_id``'s next appended batch is written over the batch holding
        ``onto_offset`` (a misdirected write): that batch is lost and blank bytes stand where
        the new one belonged. Reads and recovery find both."""
        log = self.node(node_id).log
        start, end = log.log_start_offset, log.log_end_offset
        if not start <= onto_offset < end:
            raise ValueError(
                f"node {node_id}'s log holds offsets [{start}, {end}), not {onto_offset}"
            )
        if self._fault("misdirect_next_append", (node_id,), onto_offset=onto_offset):
            log.misdirect_next_append(onto_offset)
            self.checker.misdirect_armed(node_id)
