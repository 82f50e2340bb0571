"""``fetch_high_watermark_linger_ms`` in the deterministic simulation: the high watermark
linger changes when followers hear of commits, never what is committed.

Each run drives real clients through faults with the invariants checked after every event
(a violation raises); the assertions are about progress and convergence.
"""

from __future__ import annotations

import pytest

from kraft.config import Endpoint, QuorumConfig
from kraft.simulation import Cluster


def linger_config() -> QuorumConfig:
    """Low-latency settings: no append linger, a 3 ms high watermark linger (the simulated
    voters' endpoints replace these)."""
    return QuorumConfig(
        voters={i: Endpoint("sim", 1) for i in (1, 2, 3)},
        fetch_high_watermark_linger_ms=3, append_linger_ms=0,
    )


def converged(cluster: Cluster) -> bool:
    leader = cluster.leader()
    if leader is None:
        return False
    top = cluster.node(leader)
    return all(
        n.high_watermark == top.high_watermark and n.counter_value == top.counter_value
        for n in cluster.nodes.values() if n.running
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_with_a_linger_the_quorum_survives_faults_and_converges(seed: int) -> None:
    config = linger_config()
    cluster = Cluster(seed, voters=3, observers=1, config=config)
    try:
        cluster.start_workload(200.0)
        assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
        first = cluster.leader()
        assert first is not None
        cluster.run_for(2_000)
        cluster.kill(first)
        assert cluster.run_until(
            lambda: cluster.leader() not in (None, first), 15_000
        ), "no new leader after the kill"
        cluster.set_network(drop=0.05, duplicate=0.05, reorder=0.1)
        cluster.run_for(5_000)
        cluster.set_network(drop=0.0, duplicate=0.0, reorder=0.0)
        cluster.restart(first)
        cluster.run_for(3_000)
        cluster.stop_workload()
        assert cluster.run_until(lambda: converged(cluster), 30_000), list(cluster.nodes.values())
        assert cluster.validate() == []
        leader = cluster.leader()
        assert leader is not None and cluster.node(leader).high_watermark > 100
    finally:
        cluster.close()


def test_with_a_linger_an_idle_followers_high_watermark_arrives_within_the_linger() -> None:
    """Once the workload stops, every follower holds the leader's HW within a few ms (the
    linger plus a link's latency), not after the leader's fetch max wait (500 ms)."""
    config = linger_config()
    cluster = Cluster(7, voters=3, config=config)
    try:
        cluster.start_workload(100.0)
        assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
        cluster.run_for(1_000)
        cluster.stop_workload()
        assert cluster.run_until(lambda: converged(cluster), 200), list(cluster.nodes.values())
    finally:
        cluster.close()
