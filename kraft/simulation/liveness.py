"""Liveness under message loss: how often the leader changes and how much of the load commits.

One run: a cluster whose every link drops a share ``loss`` of the messages, duplicates
``loss / 2`` and reorders ``loss``, elects its first leader, then takes the replicated-counter
workload for a while. What it reports is what a user of the quorum would feel: the leader
changes during the load (each one is an election the loss caused) and the share of the offered
increments that committed by the end. ``tests/benchmarks/bench_loss.py`` sweeps loss rates and
seeds with it; docs/simulation.md shows the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraft.config import QuorumConfig
from kraft.simulation.cluster import Cluster
from kraft.simulation.network import LinkConfig

__all__ = ["LossRun", "run_under_loss"]

#: Simulated time the first leader may take to be elected under loss.
FIRST_ELECTION_MS = 30_000


@dataclass(frozen=True, slots=True)
class LossRun:
    """What one lossy run measured."""

    loss: float
    seed: int
    seconds: float
    #: Leaders elected after the first one, while the workload ran.
    leader_changes: int
    #: Increments the workload asked for, and how many of them committed.
    offered: int
    committed: int

    @property
    def leader_changes_per_minute(self) -> float:
        return self.leader_changes * 60 / self.seconds

    @property
    def committed_share(self) -> float:
        return self.committed / self.offered if self.offered else 1.0


def run_under_loss(
    loss: float,
    seed: int,
    *,
    voters: int = 3,
    rate_per_s: float = 50.0,
    seconds: float = 60.0,
    config: QuorumConfig | None = None,
) -> LossRun:
    """Run ``voters`` voters (``config``'s timers, Kafka's defaults when None) under ``loss``
    for ``seconds`` simulated seconds of ``rate_per_s`` increments a second, after the first
    election. Raises :class:`~kraft.simulation.cluster.InvariantViolationError` on a violation
    and ``AssertionError`` when no first leader is elected."""
    network = LinkConfig(drop=loss, duplicate=loss / 2, reorder=loss)
    with Cluster(
        seed=seed,
        voters=voters,
        config=config,
        scenario="loss",
        message_events=False,
        network=network,
    ) as cluster:
        if not cluster.run_until(lambda: cluster.leader() is not None, FIRST_ELECTION_MS):
            raise AssertionError(f"seed {seed}, loss {loss}: no leader within the first 30 s")
        epochs: set[int] = set()

        def observe_leader() -> bool:
            leader = cluster.leader()
            if leader is not None:
                epochs.add(cluster.node(leader).epoch)
            return False

        observe_leader()
        offered = 0

        def tick() -> bool:
            nonlocal offered
            offered += 1
            cluster.increment()
            return True

        period_ms = round(1000 / rate_per_s)
        # The workload of Cluster.start_workload, counted: each tick offers one increment.
        cluster.every((max(1, period_ms // 2), period_ms * 3 // 2), tick)
        cluster.run_until(observe_leader, round(seconds * 1000))
        committed = max(node.counter_value for node in cluster.nodes.values())
        return LossRun(
            loss=loss,
            seed=seed,
            seconds=seconds,
            leader_changes=len(epochs) - 1,
            offered=offered,
            committed=committed,
        )
