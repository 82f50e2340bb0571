"""Snapshot scenarios (KIP-630): a node that falls behind the leader's log start downloads the
latest snapshot by FetchSnapshot and catches up, whatever happens during the download.

Every counter snapshots each 100 committed offsets and every log keeps two snapshots, so a
follower cut off for a few seconds comes back below the leader's log start. Downloads here go
in 64-byte chunks (a counter snapshot is about 230 bytes), so a fault can land mid-download.
"""

from __future__ import annotations

from dataclasses import replace

from kraft.config import QuorumConfig
from kraft.simulation.cluster import Cluster, sim_config
from kraft.simulation.network import LinkConfig
from kraft.simulation.node import SimNode
from kraft.simulation.scenario import ScenarioRun, scenario
from kraft.simulation.waits import (
    RATE_PER_S,
    await_caught_up,
    await_high_watermark,
    await_leader,
)

#: Small chunks: a download takes several FetchSnapshot round trips.
CHUNK_BYTES = 64


def _cluster(run: ScenarioRun) -> Cluster:
    voters = run.rng.randint(3, 5)
    cluster = run.cluster(
        voters=voters,
        observers=run.rng.randint(0, 1),
        config=_snapshot_config(voters),
    )
    cluster.start_workload(RATE_PER_S)
    return cluster


def _snapshot_config(voters: int) -> QuorumConfig:
    return replace(sim_config(range(1, voters + 1)), fetch_snapshot_max_bytes=CHUNK_BYTES)


def _fall_behind(run: ScenarioRun, cluster: Cluster, node_id: int) -> bool:
    """Isolate ``node_id`` until the others' log start is past its log end."""
    cluster.isolate(node_id)
    node = cluster.node(node_id)

    def cleaned_past() -> bool:
        leader = cluster.leader()
        return (
            leader is not None
            and leader != node_id
            and (cluster.node(leader).log.log_start_offset > node.log_end_offset)
        )

    return run.await_(cleaned_past, 30_000, f"the leader cleans its log past node {node_id}'s end")


def _lagging_follower(run: ScenarioRun, cluster: Cluster) -> int | None:
    leader = await_leader(run, cluster)
    if leader is None or not await_high_watermark(run, cluster, cluster.nodes, 50):
        return None
    return run.rng.choice([i for i in cluster.nodes if i != leader])


def _behind_and_back(run: ScenarioRun) -> tuple[Cluster, SimNode] | None:
    """A cluster under the workload with one follower cut off until the leader cleaned its log
    past it, then reconnected; None (a failed expectation) if that did not come to pass."""
    cluster = _cluster(run)
    follower = _lagging_follower(run, cluster)
    if follower is None or not _fall_behind(run, cluster, follower):
        return None
    cluster.heal()
    return cluster, cluster.node(follower)


@scenario("snapshot_catch_up")
def snapshot_catch_up(run: ScenarioRun) -> None:
    """A follower cut off until the leader cleaned its log past it comes back, downloads the
    latest snapshot and catches up with the same counter value."""
    setup = _behind_and_back(run)
    if setup is None:
        return
    cluster, node = setup
    follower = node.node_id
    run.await_(
        lambda: node.log.log_start_offset > 0, 30_000, f"node {follower} installs a snapshot"
    )
    await_caught_up(run, cluster)


@scenario("snapshot_download_interrupted")
def snapshot_download_interrupted(run: ScenarioRun) -> None:
    """A download is cut short, in the middle, by a leader change (resign or kill), a restart
    of the downloading node, or the leader cleaning the snapshot away; it starts over and the
    node catches up."""
    setup = _behind_and_back(run)
    if setup is None:
        return
    cluster, node = setup
    follower = node.node_id

    def downloading() -> bool:
        client = node.client
        return client is not None and client.downloading_snapshot is not None

    if not run.await_(downloading, 30_000, f"node {follower} starts a download"):
        return
    fault = run.rng.choice(["resign", "kill_leader", "restart", "more_snapshots"])
    if fault == "resign":
        cluster.resign()
    elif fault == "kill_leader":
        leader = cluster.leader()
        if leader is not None and leader != follower:
            cluster.kill(leader)
            cluster.run_for(run.rng.randint(500, 3_000))
            cluster.restart(leader)
    elif fault == "restart":
        cluster.restart(follower)
    else:
        # Keep the follower slow while the leader snapshots and cleans: the snapshot it is
        # downloading disappears (SNAPSHOT_NOT_FOUND) and it must start over.
        cluster.set_network(latency_ms=(50, 200))
        cluster.run_for(5_000)
        cluster.set_network(latency_ms=LinkConfig().latency_ms)
    run.await_(
        lambda: node.running and node.log.log_start_offset > 0,
        60_000,
        f"node {follower} installs a snapshot after the {fault}",
    )
    await_caught_up(run, cluster)


@scenario("wiped_node_from_snapshot")
def wiped_node_from_snapshot(run: ScenarioRun) -> None:
    """A follower's disk is wiped once the leader's log starts past 0: it rejoins from the
    latest snapshot, never replaying the log from offset 0, with the others' counter value."""
    cluster = _cluster(run)
    follower = _lagging_follower(run, cluster)
    if follower is None:
        return
    node = cluster.node(follower)
    if not run.await_(
        lambda: all(n.log.log_start_offset > 0 for i, n in cluster.nodes.items() if i != follower),
        30_000,
        "every other node cleaned its log",
    ):
        return
    cluster.wipe(follower)
    run.await_(
        lambda: node.log.log_start_offset > 0, 30_000, f"wiped node {follower} installs a snapshot"
    )
    await_caught_up(run, cluster)
