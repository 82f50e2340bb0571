"""The properties of Kafka's ``RaftEventSimulationTest``, as kraft scenarios.

Every scenario runs the replicated-counter workload (about 100 increments per simulated second)
so data flows through every fault, and ends with every node that should be whole caught up:
the leader's log committed on it and its counter at the leader's value. The invariants
(single leader, committed data, durability...) are checked after every event by the cluster.
"""

from __future__ import annotations

from kraft.simulation.scenario import ScenarioRun, scenario
from kraft.simulation.waits import (
    await_caught_up,
    await_high_watermark,
    await_leader,
    majority,
    start_cluster,
    top_high_watermark,
)


@scenario("initial_election")
def initial_election(run: ScenarioRun) -> None:
    """1-5 voters and 0-5 observers elect a leader; every node reaches high watermark 10."""
    cluster = start_cluster(run, voters=(1, 5), observers=(0, 5))
    run.await_(
        lambda: all(n.high_watermark >= 10 for n in cluster.nodes.values()),
        30_000,
        "every node reaches high watermark 10",
    )


@scenario("leader_failure")
def leader_failure(run: ScenarioRun) -> None:
    """The leader fails (graceful shutdown or kill); a new one is elected; the old one rejoins.

    3-5 voters; the others go 20 offsets further without the old leader, which then restarts
    and catches up."""
    cluster = start_cluster(run)
    if not await_high_watermark(run, cluster, cluster.nodes, 10):
        return
    old = cluster.leader()
    assert old is not None
    if run.rng.random() < 0.5:
        cluster.shutdown(old)
        if not run.await_(
            lambda: not cluster.node(old).running,
            10_000,
            f"leader {old} completes its graceful shutdown",
        ):
            return
    else:
        cluster.kill(old)
    if await_leader(run, cluster, other_than=[old], what=f"a leader other than {old}") is None:
        return
    others = [i for i in cluster.nodes if i != old]
    if not await_high_watermark(run, cluster, others, top_high_watermark(cluster) + 20):
        return
    cluster.restart(old)
    target = top_high_watermark(cluster)
    if await_high_watermark(
        run, cluster, [old], target, what=f"the old leader {old} catches up to {target}"
    ):
        await_caught_up(run, cluster)


@scenario("all_nodes_killed")
def all_nodes_killed(run: ScenarioRun) -> None:
    """Every node is killed and a majority of voters restarts: progress resumes.

    The restarted majority elects a leader and commits past the old high watermark, with a
    counter past its old value; then the rest rejoin and catch up."""
    cluster = start_cluster(run)
    if not await_high_watermark(run, cluster, cluster.nodes, 10):
        return
    cluster.run_for(run.rng.randint(0, 2_000))
    high_watermark = top_high_watermark(cluster)
    counter = max(n.counter_value for n in cluster.nodes.values())
    for node_id in cluster.nodes:
        cluster.kill(node_id)
    survivors = sorted(run.rng.sample(cluster.voter_ids, majority(cluster)))
    for node_id in survivors:
        cluster.restart(node_id)
    leader = await_leader(run, cluster)
    if leader is None:
        return
    if not run.await_(
        lambda: (
            cluster.node(leader).high_watermark > high_watermark + 10
            and cluster.node(leader).counter_value > counter
        ),
        30_000,
        f"the restarted majority {survivors} commits past offset {high_watermark} and "
        f"counter value {counter}",
    ):
        return
    for node_id in cluster.nodes:
        if not cluster.node(node_id).running:
            cluster.restart(node_id)
    await_caught_up(run, cluster)


@scenario("leader_partitioned_away")
def leader_partitioned_away(run: ScenarioRun) -> None:
    """The leader is isolated; the others elect a new one and go on; healed, it catches up.

    The others go 20 offsets further without it."""
    cluster = start_cluster(run)
    if not await_high_watermark(run, cluster, cluster.nodes, 10):
        return
    old = cluster.leader()
    assert old is not None
    cluster.isolate(old)
    if await_leader(run, cluster, other_than=[old], what=f"a leader other than {old}") is None:
        return
    others = [i for i in cluster.nodes if i != old]
    if not await_high_watermark(run, cluster, others, top_high_watermark(cluster) + 20):
        return
    cluster.heal()
    await_caught_up(run, cluster)


@scenario("majority_reachable")
def majority_reachable(run: ScenarioRun) -> None:
    """Five voters split {1, 2} / {3, 4, 5}: only the majority commits; healed, all catch up.

    The split is the same whoever leads; observers join either side."""
    cluster = start_cluster(run, voters=(5, 5))
    if not await_high_watermark(run, cluster, cluster.nodes, 10):
        return
    minority, majority_side = [1, 2], [3, 4, 5]
    for observer in cluster.observer_ids:
        run.rng.choice([minority, majority_side]).append(observer)
    cluster.partition(minority, majority_side)
    split_at = top_high_watermark(cluster)
    if (
        await_leader(
            run, cluster, other_than=minority, what=f"a leader in the majority {majority_side}"
        )
        is None
    ):
        return
    if not await_high_watermark(run, cluster, majority_side, split_at + 20):
        return
    minority_hw = max(cluster.node(i).high_watermark for i in minority)
    majority_hw = min(cluster.node(i).high_watermark for i in majority_side)
    run.expect(
        majority_hw > minority_hw,
        f"the majority's high watermark {majority_hw} exceeds the minority's {minority_hw}",
    )
    cluster.heal()
    await_caught_up(run, cluster)


@scenario("back_to_back_leader_failures")
def back_to_back_leader_failures(run: ScenarioRun) -> None:
    """Leader L1 is isolated, then (L1 back) the next leader L2: progress; all catch up.

    Once L2 leads, L1 is healed and L2 isolated; a third leadership goes 20 offsets further;
    once healed every node catches up."""
    cluster = start_cluster(run)
    if not await_high_watermark(run, cluster, cluster.nodes, 10):
        return
    first = cluster.leader()
    assert first is not None
    cluster.isolate(first)
    second = await_leader(run, cluster, other_than=[first], what=f"a leader other than {first}")
    if second is None:
        return
    cluster.heal()
    cluster.isolate(second)
    if (
        await_leader(run, cluster, other_than=[second], what=f"a leader other than {second}")
        is None
    ):
        return
    others = [i for i in cluster.nodes if i != second]
    if not await_high_watermark(run, cluster, others, top_high_watermark(cluster) + 20):
        return
    cluster.heal()
    await_caught_up(run, cluster)


@scenario("wiped_node_recovery")
def wiped_node_recovery(run: ScenarioRun) -> None:
    """A follower's disk is wiped; it fetches again and ends with the same counter.

    It loses its log and quorum state and restarts empty, then fetches from offset 0 (the
    leader sends its latest snapshot instead once it has one, then the log after it). Raft
    assumes a voter never loses what it acknowledged, so the wipe waits, with the workload
    running, for a moment when a majority of the other voters hold everything the follower
    holds: what the leader committed (or will commit on the follower's old acknowledgements)
    does not depend on it. Kafka's property drops the majority invariant instead."""
    cluster = start_cluster(run)
    if not await_high_watermark(run, cluster, cluster.nodes, run.rng.randint(10, 100)):
        return
    leader = cluster.leader()
    wiped = cluster.node(run.rng.choice([i for i in cluster.nodes if i != leader]))
    others = [cluster.node(v) for v in cluster.voter_ids if v != wiped.node_id]

    def replaceable() -> bool:
        end = wiped.log_end_offset
        return sum(1 for v in others if v.log_end_offset >= end) >= majority(cluster)

    if not run.await_(
        replaceable, 30_000, f"a majority of the voters other than {wiped.node_id} hold its log"
    ):
        return
    cluster.wipe(wiped.node_id)
    target = top_high_watermark(cluster)
    if await_high_watermark(
        run,
        cluster,
        [wiped.node_id],
        target,
        what=f"the wiped node {wiped.node_id} catches up to {target}",
    ):
        await_caught_up(run, cluster)
