"""Faults beyond Kafka's properties: a lossy network, rolling restarts, a one-way partition, a
long-isolated follower (pre-vote), and a random nemesis.

As in ``kafka_properties.py``, the counter workload runs throughout and every scenario ends
with every node caught up: the leader's log committed on it, its counter at the leader's value.
"""

from __future__ import annotations

import random

from kraft.simulation.cluster import Cluster
from kraft.simulation.network import LinkConfig
from kraft.simulation.scenario import ScenarioRun, scenario
from kraft.simulation.waits import (
    await_caught_up,
    await_high_watermark,
    await_leader,
    start_cluster,
    top_high_watermark,
)


@scenario("lossy_network")
def lossy_network(run: ScenarioRun) -> None:
    """Links drop, duplicate and reorder messages for 10-20 s: progress; clean, all catch up.

    Drop 5-20 %, duplicate 5-10 %, reorder 5-20 % of the messages on every link."""
    cluster = start_cluster(run)
    if not await_high_watermark(run, cluster, cluster.nodes, 10):
        return
    drop = round(run.rng.uniform(0.05, 0.2), 3)
    duplicate = round(run.rng.uniform(0.05, 0.1), 3)
    reorder = round(run.rng.uniform(0.05, 0.2), 3)
    cluster.set_network(drop=drop, duplicate=duplicate, reorder=reorder)
    loss_ms = run.rng.randint(10_000, 20_000)
    before = top_high_watermark(cluster)
    # Slow progress is expected: a lost Fetch leaves its follower waiting request.timeout.ms,
    # which equals fetch.timeout.ms, so one lost message can cost an election (as in Kafka,
    # which assumes TCP). Progress there must be.
    cluster.run_for(loss_ms)
    after = top_high_watermark(cluster)
    run.expect(
        after > before,
        f"the quorum commits past offset {before} (it reached {after}) in {loss_ms} ms "
        f"while the network drops {drop}, duplicates {duplicate} and reorders {reorder}",
    )
    cluster.set_network(drop=0.0, duplicate=0.0, reorder=0.0)
    await_caught_up(run, cluster)


@scenario("rolling_restarts")
def rolling_restarts(run: ScenarioRun) -> None:
    """Every node restarts in turn (graceful or crash); no committed increment is lost.

    Each restart waits for a leader and for every node to catch up after the previous one."""
    cluster = start_cluster(run)
    if not await_high_watermark(run, cluster, cluster.nodes, 10):
        return
    order = list(cluster.nodes)
    run.rng.shuffle(order)
    for node_id in order:
        if not _restart_and_catch_up(run, cluster, node_id):
            return
    await_caught_up(run, cluster)


def _restart_and_catch_up(run: ScenarioRun, cluster: Cluster, node_id: int) -> bool:
    """Restart ``node_id`` (a graceful shutdown or a bounce); then every node goes past where
    the quorum was, with every increment committed before the restart."""
    counter = max(n.counter_value for n in cluster.nodes.values())
    node = cluster.node(node_id)
    if run.rng.random() < 0.5:
        cluster.shutdown(node_id)
        if not run.await_(
            lambda: not node.running, 10_000, f"node {node_id} completes its graceful shutdown"
        ):
            return False
        cluster.restart(node_id)
    else:
        cluster.restart(node_id)  # a bounce: a crash, then a start on the same disk
    if await_leader(run, cluster, what=f"a leader after node {node_id} restarts") is None:
        return False
    # A restarted node's counter starts at 0 and replays its log from offset 0.
    target = top_high_watermark(cluster) + 10
    return run.await_(
        lambda: all(
            n.running and n.high_watermark >= target and n.counter_value >= counter
            for n in cluster.nodes.values()
        ),
        60_000,
        f"after node {node_id} restarts every node reaches high watermark {target} and "
        f"counter value {counter}",
    )


@scenario("asymmetric_partition")
def asymmetric_partition(run: ScenarioRun) -> None:
    """The leader can send but not receive: check-quorum resigns it, another is elected.

    The others elect a leader among themselves and commit; once healed every node catches
    up."""
    cluster = start_cluster(run)
    if not await_high_watermark(run, cluster, cluster.nodes, 10):
        return
    old = cluster.leader()
    assert old is not None
    others = [i for i in cluster.nodes if i != old]
    cluster.block(others, [old])
    if await_leader(run, cluster, other_than=[old], what=f"a leader other than {old}") is None:
        return
    if not run.await_(
        lambda: cluster.node(old).role != "Leader",
        30_000,
        f"the deaf leader {old} resigns (check-quorum)",
    ):
        return
    if not await_high_watermark(run, cluster, others, top_high_watermark(cluster) + 20):
        return
    cluster.heal()
    await_caught_up(run, cluster)


@scenario("long_follower_isolation")
def long_follower_isolation(run: ScenarioRun) -> None:
    """A follower is isolated for 30-35 s: with pre-vote the leader and its epoch never change.

    The follower never disturbs the leader, through the isolation and after it rejoins and
    catches up."""
    cluster = start_cluster(run)
    if not await_high_watermark(run, cluster, cluster.nodes, 10):
        return
    leader = cluster.leader()
    assert leader is not None
    epoch = cluster.node(leader).epoch
    follower = run.rng.choice([i for i in cluster.voter_ids if i != leader])
    cluster.isolate(follower)
    isolation_ms = run.rng.randint(30_000, 35_000)
    before = top_high_watermark(cluster)

    def disturbed() -> bool:
        return cluster.leader() != leader or cluster.node(leader).epoch != epoch

    run.expect(
        not cluster.run_until(disturbed, isolation_ms),
        f"node {leader} leads epoch {epoch} throughout follower {follower}'s isolation",
    )
    run.expect(
        cluster.node(follower).epoch == epoch,
        f"the isolated follower {follower} stays in epoch {epoch} (a pre-vote it cannot win "
        f"does not bump it), not {cluster.node(follower).epoch}",
    )
    run.expect(
        top_high_watermark(cluster) > before + 20,
        f"the quorum commits past {before + 20} without follower {follower}",
    )
    cluster.heal()
    if await_caught_up(run, cluster):
        now_leader = cluster.leader()
        now_epoch = None if now_leader is None else cluster.node(now_leader).epoch
        run.expect(
            (now_leader, now_epoch) == (leader, epoch),
            f"node {leader} still leads epoch {epoch} once follower {follower} is back "
            f"(leader {now_leader}, epoch {now_epoch})",
        )


# =============================================================================================
# The nemesis
# =============================================================================================
#: Simulated time the nemesis runs for.
CHAOS_MS = 60_000
#: The shortest and longest stable window between two faults.
STABLE_MS = (2_000, 5_000)


#: The nemesis's faults that act on links rather than on processes ("lossy" toggles).
_NETWORK_FAULTS = frozenset({"isolate", "partition", "heal", "slow", "fast", "lossy"})


class _Nemesis:
    """Random faults, one per step. Process faults (kill, pause, graceful shutdown) never
    leave more than a minority of the voters down; network faults come on top."""

    def __init__(self, run: ScenarioRun, cluster: Cluster, *, storm: bool = False) -> None:
        self.run = run
        #: Storm: bounces, resignations and slow links much more often, so that elections
        #: overlap and their messages are still in flight when a voter restarts.
        self.storm = storm
        self.rng: random.Random = run.rng
        self.cluster = cluster
        self.tolerated = (len(cluster.voter_ids) - 1) // 2
        #: Nodes asked to shut down gracefully (they stop when the shutdown completes).
        self.shutting_down: set[int] = set()
        self.lossy = False

    def down_voters(self) -> set[int]:
        cluster = self.cluster
        return {
            v
            for v in cluster.voter_ids
            if not cluster.node(v).running or cluster.node(v).paused or v in self.shutting_down
        }

    def may_take_down(self, node_id: int) -> bool:
        cluster = self.cluster
        node = cluster.node(node_id)
        if not node.running or node.paused or node_id in self.shutting_down:
            return False
        return not node.is_voter or len(self.down_voters()) < self.tolerated

    def step(self) -> None:
        """Inject one fault, drawn among those that apply now."""
        cluster = self.cluster
        nodes = list(cluster.nodes)
        up = [i for i in nodes if self.may_take_down(i)]
        down = [i for i in nodes if not cluster.node(i).running]
        paused = [i for i in nodes if cluster.node(i).paused]
        choices: list[str] = ["isolate", "partition", "heal", "lossy", "resign", "bounce"]
        if self.storm:
            choices += ["bounce"] * 5 + ["resign"] * 2 + ["slow", "slow", "fast"]
        if up:
            choices += ["kill", "pause", "shutdown"]
        if down:
            choices += ["restart", "restart"]
        if paused:
            choices += ["resume", "resume"]
        action = self.rng.choice(choices)
        if action in _NETWORK_FAULTS:
            self._network_fault(action, nodes)
        else:
            self._process_fault(action, nodes, up, down, paused)

    def _process_fault(
        self, action: str, nodes: list[int], up: list[int], down: list[int], paused: list[int]
    ) -> None:
        cluster, rng = self.cluster, self.rng
        if action == "kill":
            cluster.kill(rng.choice(up))
        elif action == "pause":
            cluster.pause(rng.choice(up))
        elif action == "shutdown":
            node_id = rng.choice(up)
            self.shutting_down.add(node_id)
            cluster.shutdown(node_id, timeout_ms=rng.randint(1_000, 5_000))
        elif action == "restart":
            node_id = rng.choice(down)
            self.shutting_down.discard(node_id)
            cluster.restart(node_id)
        elif action == "bounce":
            node_id = rng.choice(nodes)
            self.shutting_down.discard(node_id)
            cluster.restart(node_id)
        elif action == "resume":
            cluster.resume(rng.choice(paused))
        else:
            cluster.resign()

    def _network_fault(self, action: str, nodes: list[int]) -> None:
        cluster, rng = self.cluster, self.rng
        if action == "isolate":
            cluster.heal()
            cluster.isolate(rng.choice(nodes))
        elif action == "partition":
            cluster.heal()
            shuffled = rng.sample(nodes, len(nodes))
            cut = rng.randint(1, len(nodes) - 1)
            cluster.partition(shuffled[:cut], shuffled[cut:])
        elif action == "heal":
            cluster.heal()
        elif action == "slow":
            cluster.set_network(latency_ms=(rng.randint(1, 20), rng.randint(50, 400)))
        elif action == "fast":
            cluster.set_network(latency_ms=LinkConfig().latency_ms)
        elif self.lossy:
            cluster.set_network(drop=0.0, duplicate=0.0, reorder=0.0)
            self.lossy = False
        else:
            cluster.set_network(
                drop=round(rng.uniform(0.05, 0.2), 3),
                duplicate=round(rng.uniform(0.0, 0.1), 3),
                reorder=round(rng.uniform(0.0, 0.2), 3),
            )
            self.lossy = True

    def stop(self) -> None:
        """Undo every fault: a clean network, every node running and unpaused."""
        cluster = self.cluster
        cluster.heal()
        if self.storm:
            cluster.set_network(latency_ms=LinkConfig().latency_ms)
        if self.lossy:
            cluster.set_network(drop=0.0, duplicate=0.0, reorder=0.0)
            self.lossy = False
        for node_id, node in cluster.nodes.items():
            if node.paused:
                cluster.resume(node_id)
            if not node.running or node_id in self.shutting_down:
                cluster.restart(node_id)
        self.shutting_down.clear()


@scenario("chaos")
def chaos(run: ScenarioRun) -> None:
    """A random fault every 2-5 s for 60 s, then all healed: a leader, progress, all caught up.

    3-5 voters and 0-2 observers; the faults: kill, restart, bounce, isolate, partition in
    two, pause, lossy network, resign, graceful shutdown; and the repairs heal and resume."""
    _run_nemesis(run, storm=False, stable_ms=STABLE_MS)


@scenario("storm")
def storm(run: ScenarioRun) -> None:
    """The chaos nemesis, harsher: a fault every 0.3-1 s for 60 s, bounces and resignations far
    more often, links slowed to up to 400 ms; then all healed, a leader, all caught up.

    Elections overlap and a voter restarts while its vote is still in flight: the state that
    shows a vote which was granted but not persisted."""
    _run_nemesis(run, storm=True, stable_ms=STORM_STABLE_MS)


#: The storm's stable windows between two faults.
STORM_STABLE_MS = (300, 1_000)


def _run_nemesis(run: ScenarioRun, *, storm: bool, stable_ms: tuple[int, int]) -> None:
    cluster = start_cluster(run)
    if not await_high_watermark(run, cluster, cluster.nodes, 10):
        return
    nemesis = _Nemesis(run, cluster, storm=storm)
    end = cluster.now_ms + CHAOS_MS
    while cluster.now_ms < end:
        cluster.run_for(run.rng.randint(*stable_ms))
        nemesis.step()
    cluster.run_for(run.rng.randint(*STABLE_MS))
    nemesis.stop()
    if await_leader(run, cluster, timeout_ms=60_000, what="a leader once healed") is None:
        return
    target = top_high_watermark(cluster) + 20
    if await_high_watermark(
        run, cluster, cluster.nodes, target, what=f"every node commits past {target} once healed"
    ):
        await_caught_up(run, cluster)
