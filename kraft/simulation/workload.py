"""The replicated counter's workload of :class:`~kraft.simulation.cluster.Cluster` (a base class
of it): appends through whichever node leads, one increment at a time or at a steady rate, each
logged as ``append_accepted`` or ``append_refused``. A controller cluster refuses them: its log
holds metadata records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kraft.errors import NotLeaderError
from kraft.simulation.events import Event
from kraft.simulation.invariants import InvariantChecker
from kraft.simulation.node import SimNode

__all__ = ["CounterWorkload"]


class _Cluster(Protocol):
    """What the workload uses of its cluster (the methods below take it as ``self``)."""

    nodes: dict[int, SimNode]
    checker: InvariantChecker
    workload_rate: float
    _workload_generation: int

    def leader(self) -> int | None: ...
    def every(self, period_ms: tuple[int, int], action: Callable[[], bool]) -> None: ...
    def increment(self) -> int | None: ...
    def _wake(self, node: SimNode, at: int | None = None) -> None: ...
    def _emit(self, kind: str, **fields: Any) -> Event: ...
    def _emit_node(self, node: SimNode, kind: str, **fields: Any) -> Event: ...
    def _counter_only(self) -> None: ...
    def _accepted(self, node: SimNode, offset: int, count: int) -> int: ...


class CounterWorkload:
    """Appends and the counter's workload (docs/simulation.md, ``Cluster``)."""

    def append(self: _Cluster, records: Sequence[Any]) -> int | None:
        """Append ``records`` (any msgpack-able values) through the current leader, as one
        batch; the last record's offset, or None without a leader."""
        self._counter_only()
        leader_id = self.leader()
        if leader_id is None:
            self._emit("append_refused", count=len(records))
            return None
        node = self.nodes[leader_id]
        client = node.client
        assert client is not None
        try:
            offset = client.prepare_append(client.epoch, list(records))
            client.schedule_prepared_append()
        except NotLeaderError:
            self._emit("append_refused", count=len(records))
            return None
        return self._accepted(node, offset, len(records))

    def increment(self: _Cluster) -> int | None:
        """Append the replicated counter's next increment through the leader (Kafka's
        ``ReplicatedCounter.increment``); its offset, or None when no leader is writable."""
        self._counter_only()
        leader_id = self.leader()
        node = None if leader_id is None else self.nodes[leader_id]
        if node is None or node.client is None or node.counter is None:
            self._emit("append_refused", count=1)
            return None
        offset = node.counter.increment(node.client)
        if offset is None:
            self._emit("append_refused", count=1)
            return None
        return self._accepted(node, offset, 1)

    def _accepted(self: _Cluster, node: SimNode, offset: int, count: int) -> int:
        """Log an accepted append and poll its leader, which drains it."""
        self._emit_node(node, "append_accepted", offset=offset, count=count)
        if not node.paused:
            self._wake(node)
        return offset

    def start_workload(self: _Cluster, rate_per_s: float = 100.0, jitter: float = 0.5) -> None:
        """Increment the counter about ``rate_per_s`` times per simulated second, through
        whichever node leads (each tick is ``1000 / rate`` ms, give or take ``jitter``)."""
        self._counter_only()
        if rate_per_s <= 0:
            raise ValueError(f"the workload rate must be positive, got {rate_per_s}")
        period = 1000.0 / rate_per_s
        lo = max(1, round(period * (1 - jitter)))
        hi = max(lo, round(period * (1 + jitter)))
        self._workload_generation += 1
        generation = self._workload_generation
        self.workload_rate = rate_per_s
        self.checker.workload(True)

        def tick() -> bool:
            if generation != self._workload_generation:
                return False
            self.increment()
            return True

        self.every((lo, hi), tick)

    def stop_workload(self: _Cluster) -> None:
        self._workload_generation += 1
        self.workload_rate = 0.0
        self.checker.workload(False)
