"""The replicated key-value store under faults: 3-5 clients put, get and cas on three keys
through random nodes (``Cluster.start_kv_workload``) while partitions, crashes, leader
transfers and pauses come and go; the counter workload runs beside it.

Every run ends healed, with every node up: the clients must make progress again and each
finish its last operation, and ``Cluster.validate`` checks that the history they saw is
linearizable (the ``linearizable`` invariant).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from kraft.simulation.cluster import Cluster
from kraft.simulation.kv_workload import KvWorkload
from kraft.simulation.scenario import ScenarioRun, scenario
from kraft.simulation.waits import ELECTION_MS, await_leader

#: Counter increments per simulated second beside the kv clients (the availability
#: invariant watches the quorum while a workload runs).
COUNTER_RATE_PER_S = 50
#: Simulated time for the clients to make progress, and to finish, once healed.
SETTLE_MS = 30_000
#: Operations that must complete successfully once healed (progress).
PROGRESS_OPS = 10


def _start(
    run: ScenarioRun, reads: Literal["barrier", "local"] = "barrier"
) -> tuple[Cluster, KvWorkload] | None:
    """The cluster (3-5 voters, 0-1 observer), a leader, and the kv clients at work."""
    cluster = run.cluster(voters=run.rng.randint(3, 5), observers=run.rng.randint(0, 1))
    cluster.start_workload(COUNTER_RATE_PER_S)
    if await_leader(run, cluster) is None:
        return None
    kv = cluster.start_kv_workload(clients=run.rng.randint(3, 5), reads=reads)
    cluster.run_for(run.rng.randint(200, 1000))
    return cluster, kv


def _finish(run: ScenarioRun, cluster: Cluster, kv: KvWorkload) -> None:
    """Heal, restart and resume everything; the clients make progress, then finish."""
    if cluster.network.blocked:
        cluster.heal()
    for node_id, node in cluster.nodes.items():
        if node.paused:
            cluster.resume(node_id)
        elif not node.running:
            cluster.restart(node_id)
    if await_leader(run, cluster, what="a leader once healed") is None:
        return
    target = kv.outcomes["ok"] + PROGRESS_OPS
    if not run.await_(
        lambda: kv.outcomes["ok"] >= target,
        SETTLE_MS,
        f"the kv clients complete {PROGRESS_OPS} more operations once healed",
    ):
        return
    kv.stop()
    run.await_(lambda: kv.idle, SETTLE_MS, "every kv client finishes its last operation")


def _voters(cluster: Cluster) -> list[int]:
    return list(cluster.voter_ids)


@scenario("kv_partitions")
def kv_partitions(run: ScenarioRun, reads: Literal["barrier", "local"] = "barrier") -> None:
    """kv clients while the leader is isolated or a minority is cut off, 3 times.

    Each cut lasts 1-4 s, then heals for 0.5-2 s. Reads through the cut-off side must not
    answer with stale data: the history stays linearizable. (``reads="local"``, for the test
    that the check is not vacuous, serves gets without a read barrier.)"""
    started = _start(run, reads)
    if started is None:
        return
    cluster, kv = started
    for _ in range(3):
        voters = _voters(cluster)
        leader = cluster.leader()
        if leader is not None and run.rng.random() < 0.5:
            cluster.isolate(leader)
        else:
            minority = run.rng.sample(voters, (len(voters) - 1) // 2)
            cluster.partition(minority)
        cluster.run_for(run.rng.randint(1000, 4000))
        cluster.heal()
        cluster.run_for(run.rng.randint(500, 2000))
    _finish(run, cluster, kv)


@scenario("kv_crashes")
def kv_crashes(run: ScenarioRun) -> None:
    """kv clients while nodes crash (the leader half the time) or shut down, 3 times.

    Each node stays down 0.5-3 s, then restarts from its disk. Writes pending on a crashed
    node end with an unknown outcome; they may commit or not, never twice."""
    started = _start(run)
    if started is None:
        return
    cluster, kv = started
    for _ in range(3):
        leader = cluster.leader()
        victim = (
            leader
            if leader is not None and run.rng.random() < 0.5
            else run.rng.choice(sorted(cluster.nodes))
        )
        if run.rng.random() < 0.3:
            cluster.shutdown(victim)
        else:
            cluster.kill(victim)
        cluster.run_for(run.rng.randint(500, 3000))
        cluster.restart(victim)
        cluster.run_for(run.rng.randint(500, 2000))
    _finish(run, cluster, kv)


@scenario("kv_leader_transfers")
def kv_leader_transfers(run: ScenarioRun) -> None:
    """kv clients while the leader hands over to a chosen voter (or the most caught-up), 4
    times.

    Each transfer completes (the old leader learns of the next one) within the election
    time; reads and writes in flight across it stay linearizable."""
    started = _start(run)
    if started is None:
        return
    cluster, kv = started
    for _ in range(4):
        leader = cluster.leader()
        if leader is None:
            if await_leader(run, cluster) is None:
                return
            continue
        others = [i for i in _voters(cluster) if i != leader]
        target = run.rng.choice([None, *others])
        transfer = cluster.transfer_leadership(target)
        if not run.await_(
            transfer.done, ELECTION_MS, f"leader {leader}'s transfer to {target} completes"
        ):
            return
        cluster.run_for(run.rng.randint(300, 1500))
    _finish(run, cluster, kv)


@scenario("kv_nemesis")
def kv_nemesis(run: ScenarioRun) -> None:
    """kv clients under a random fault every 0.3-1.5 s for 8 s: isolate, partition, kill,
    restart, pause, resume, transfer leadership, heal.

    At most a minority of the voters is down or paused at once; then everything heals."""
    started = _start(run)
    if started is None:
        return
    cluster, kv = started
    voters = _voters(cluster)
    minority = (len(voters) - 1) // 2

    def impaired() -> list[int]:
        return [i for i in voters if not cluster.node(i).running or cluster.node(i).paused]

    def isolate() -> None:
        cluster.isolate(run.rng.choice(sorted(cluster.nodes)))

    def partition() -> None:
        cluster.partition(run.rng.sample(voters, run.rng.randint(1, minority or 1)))

    def crash() -> None:
        if len(impaired()) < minority:
            target = cluster.leader() if run.rng.random() < 0.5 else None
            cluster.kill(target or run.rng.choice(voters))

    def pause() -> None:
        if len(impaired()) < minority:
            cluster.pause(run.rng.choice(voters))

    def repair() -> None:
        for node_id in impaired():
            if cluster.node(node_id).paused:
                cluster.resume(node_id)
            else:
                cluster.restart(node_id)

    def transfer() -> None:
        if cluster.leader() is not None:
            cluster.transfer_leadership()

    actions: list[Callable[[], None]] = [
        isolate,
        partition,
        crash,
        pause,
        repair,
        transfer,
        cluster.heal,
    ]
    end = cluster.now_ms + 8_000
    while cluster.now_ms < end:
        run.rng.choice(actions)()
        cluster.run_for(run.rng.randint(300, 1500))
    _finish(run, cluster, kv)
