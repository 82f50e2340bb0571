"""What scenarios share: starting a cluster under the workload, and waiting for a leader, for
progress and for catch-up, each a failed expectation when it does not come in time.

Every scenario in ``simulations/`` is written with these; so can yours.
"""

from __future__ import annotations

from collections.abc import Iterable

from kraft.simulation.cluster import Cluster
from kraft.simulation.scenario import ScenarioRun

__all__ = [
    "CATCH_UP_MS",
    "ELECTION_MS",
    "RATE_PER_S",
    "await_caught_up",
    "await_high_watermark",
    "await_leader",
    "majority",
    "start_cluster",
    "top_high_watermark",
]

#: The workload's rate: counter increments per simulated second.
RATE_PER_S = 100
#: Simulated time to elect a leader after a fault: a fetch timeout (2 s) to notice, then a few
#: rounds of randomized election timeouts, generously.
ELECTION_MS = 30_000
#: Simulated time to make some progress or to catch up once the cluster is whole again.
CATCH_UP_MS = 60_000


def start_cluster(
    run: ScenarioRun, voters: tuple[int, int] = (3, 5), observers: tuple[int, int] = (0, 2)
) -> Cluster:
    """The run's cluster, with a number of voters and of observers drawn from the inclusive
    ranges ``voters`` and ``observers``, under the workload."""
    cluster = run.cluster(voters=run.rng.randint(*voters), observers=run.rng.randint(*observers))
    cluster.start_workload(RATE_PER_S)
    return cluster


def majority(cluster: Cluster) -> int:
    """How many voters make a majority."""
    return len(cluster.voter_ids) // 2 + 1


def top_high_watermark(cluster: Cluster) -> int:
    """The highest high watermark of any running node."""
    return max((n.high_watermark for n in cluster.nodes.values() if n.running), default=0)


def await_leader(
    run: ScenarioRun,
    cluster: Cluster,
    *,
    other_than: Iterable[int] = (),
    timeout_ms: int = ELECTION_MS,
    what: str = "a leader is elected",
) -> int | None:
    """Run until a node other than ``other_than`` leads; its id, or None (a failed
    expectation)."""
    excluded = frozenset(other_than)

    def elected() -> bool:
        leader = cluster.leader()
        return leader is not None and leader not in excluded

    if run.await_(elected, timeout_ms, what):
        return cluster.leader()
    return None


def await_high_watermark(
    run: ScenarioRun,
    cluster: Cluster,
    node_ids: Iterable[int],
    target: int,
    *,
    timeout_ms: int = CATCH_UP_MS,
    what: str = "",
) -> bool:
    """Run until every node of ``node_ids`` is running with a high watermark of ``target`` or
    more (the workload keeps running)."""
    nodes = [cluster.node(i) for i in node_ids]
    return run.await_(
        lambda: all(n.running and n.high_watermark >= target for n in nodes),
        timeout_ms,
        what or f"nodes {[n.node_id for n in nodes]} reach high watermark {target}",
    )


def await_caught_up(
    run: ScenarioRun,
    cluster: Cluster,
    node_ids: Iterable[int] | None = None,
    *,
    timeout_ms: int = CATCH_UP_MS,
) -> bool:
    """Stop the workload, then run until every node of ``node_ids`` (every node by default)
    holds the leader's whole log as committed: its high watermark is the leader's log end
    offset and its counter has the leader's value."""
    cluster.stop_workload()
    nodes = [cluster.node(i) for i in (cluster.nodes if node_ids is None else node_ids)]

    def caught_up() -> bool:
        leader_id = cluster.leader()
        if leader_id is None:
            return False
        leader = cluster.node(leader_id)
        end, value = leader.log_end_offset, leader.counter_value
        return leader.high_watermark == end and all(
            n.running and n.high_watermark == end and n.counter_value == value for n in nodes
        )

    if run.await_(caught_up, timeout_ms, f"nodes {[n.node_id for n in nodes]} catch up"):
        return True
    run.expect(
        False,
        "at the timeout: "
        + ", ".join(f"{n!r} counter={n.counter_value}" for n in cluster.nodes.values()),
    )
    return False
