"""Storage faults, as TigerBeetle's simulator injects them: bit rot in a node's log and
snapshots, lost writes (a flush that claimed success and kept nothing), misdirected writes.

A damaged node finds the damage when it reads the bytes (serving a Fetch, handing batches to
its listener) or when it restarts (recovery checks every snapshot and batch), sets the bad
data aside and fetches it back from the leader (docs/storage.md, "When a disk lies"). The
scenarios keep a majority of the voters healthy: at most ``f`` voters (a minority) are
damaged at once, where a voter is damaged from the fault until it has restarted since (so
that nothing it holds goes unchecked) and its log is no longer under repair
(``log.repair_target`` is None). Nodes are restarted along the way so that recovery sees the
damage. Observers may be damaged freely: they hold no vote.

Every scenario ends quiet and whole: the damaged nodes restarted, none under repair, the quorum
committing again, and every node caught up. The invariants ``committed_intact`` (no committed
batch ever loses its last intact copy), ``listener_data`` (no listener is handed other bytes)
and ``availability`` (a healthy, connected majority keeps committing) watch every event.
"""

from __future__ import annotations

from collections.abc import Callable

from kraft.simulation.cluster import Cluster
from kraft.simulation.scenario import ScenarioRun, scenario
from kraft.simulation.waits import (
    CATCH_UP_MS,
    await_caught_up,
    await_high_watermark,
    majority,
    start_cluster,
    top_high_watermark,
)

#: Rounds of damage per run, and the quiet time between two rounds (simulated ms).
ROUNDS = (3, 6)
BETWEEN_MS = (100, 1_000)


class _Damage:
    """Which voters are damaged, so that a healthy majority always remains."""

    def __init__(self, run: ScenarioRun, cluster: Cluster) -> None:
        self.run = run
        self.cluster = cluster
        self.budget = len(cluster.voter_ids) - majority(cluster)
        #: Nodes hit by a fault since their last restart: recovery has not checked them.
        self.unchecked: set[int] = set()

    def damaged(self) -> set[int]:
        return {
            i
            for i in self.cluster.voter_ids
            if i in self.unchecked or self.cluster.node(i).log.repair_target is not None
        }

    def pick(self, candidates: list[int] | None = None) -> int | None:
        """A node that may be damaged now (drawn with the scenario's random source), or None
        once ``f`` voters are damaged and none of them is among ``candidates``."""
        damaged = self.damaged()
        allowed = [
            i
            for i in (candidates if candidates is not None else list(self.cluster.nodes))
            if i in damaged or len(damaged) < self.budget or i not in self.cluster.voter_ids
        ]
        return self.run.rng.choice(allowed) if allowed else None

    def hit(self, node_id: int) -> None:
        self.unchecked.add(node_id)

    def restart(self, node_id: int) -> None:
        """Restart ``node_id`` (a bounce if it runs): recovery checks its whole disk."""
        self.cluster.restart(node_id)
        self.unchecked.discard(node_id)

    def repair_one(self) -> bool:
        """Restart one damaged node (drawn) and wait until its log is repaired."""
        damaged = sorted(self.damaged() | self.unchecked)
        if not damaged:
            return True
        node_id = self.run.rng.choice(damaged)
        if node_id in self.unchecked or not self.cluster.node(node_id).running:
            self.restart(node_id)
        return await_repaired(self.run, self.cluster, [node_id])

    def repair_all(self) -> bool:
        """Restart every node hit since its last restart, start every node that is down, and
        wait until no log is under repair."""
        for node_id in sorted(self.unchecked):
            self.restart(node_id)
        for node_id, node in self.cluster.nodes.items():
            if not node.running:
                self.restart(node_id)
        return await_repaired(self.run, self.cluster, list(self.cluster.nodes))


def await_repaired(run: ScenarioRun, cluster: Cluster, node_ids: list[int]) -> bool:
    """Run until every node of ``node_ids`` runs with a log no longer under repair."""
    nodes = [cluster.node(i) for i in node_ids]
    return run.await_(
        lambda: all(n.running and n.log.repair_target is None for n in nodes),
        CATCH_UP_MS,
        f"nodes {node_ids} repair their logs from the quorum",
    )


def _storage_run(run: ScenarioRun, damage_round: Callable[[_Damage], bool]) -> None:
    """Start a cluster under the workload, run ``damage_round`` a few times with quiet time
    between, then repair everything and check that the quorum commits and all catch up."""
    cluster = start_cluster(run, observers=(0, 1))
    if not await_high_watermark(run, cluster, cluster.nodes, 20):
        return
    damage = _Damage(run, cluster)
    for _ in range(run.rng.randint(*ROUNDS)):
        cluster.run_for(run.rng.randint(*BETWEEN_MS))
        if not damage_round(damage):
            return
    if not damage.repair_all():
        return
    target = top_high_watermark(cluster) + 20
    if await_high_watermark(
        run, cluster, cluster.nodes, target, what=f"every node commits past {target} repaired"
    ):
        await_caught_up(run, cluster)


def _power_loss(damage: _Damage) -> None:
    """Every node loses power at once, then they come back one by one, in a random order: a
    voter that lost records it acknowledged may come back before the one that holds them."""
    run, cluster = damage.run, damage.cluster
    for node_id in cluster.nodes:
        cluster.kill(node_id)
    cluster.heal()
    order = list(cluster.nodes)
    run.rng.shuffle(order)
    for node_id in order:
        cluster.run_for(run.rng.randint(0, 1_000))
        damage.restart(node_id)


def _behind_the_leader(damage: _Damage, cut_ms: tuple[int, int]) -> tuple[int, int] | None:
    """Cut a node (drawn) off for ``cut_ms`` if the leader may be damaged: (the leader, the
    node), with the node still cut off; None otherwise."""
    run, cluster = damage.run, damage.cluster
    leader = cluster.leader()
    if leader is None or damage.pick([leader]) is None:
        return None
    lagging = run.rng.choice([i for i in cluster.nodes if i != leader])
    cluster.isolate(lagging)
    cluster.run_for(run.rng.randint(*cut_ms))
    return leader, lagging


def _bitrot_round(damage: _Damage) -> bool:
    run, cluster = damage.run, damage.cluster
    if run.rng.random() < 0.25:
        # The leader serves what the node cut off missed: flips in that range are found by the
        # leader's checked read, which must set them aside and resign, not serve them.
        behind = _behind_the_leader(damage, (300, 1_500))
        if behind is not None:
            leader, lagging = behind
            start = cluster.node(lagging).log_end_offset
            log = cluster.node(leader).log
            start = max(start, log.log_start_offset)
            for _ in range(run.rng.randint(1, 3)):
                if start < log.log_end_offset:
                    cluster.corrupt(leader, run.rng.randrange(start, log.log_end_offset))
            damage.hit(leader)
            cluster.heal()
            return True
    node_id = damage.pick()
    if node_id is None:
        return damage.repair_one()
    log = cluster.node(node_id).log
    for _ in range(run.rng.randint(1, 3)):
        start, end = log.log_start_offset, log.log_end_offset
        if start < end and run.rng.random() < 0.5:
            # The tail: batches a lagging voter has not fetched yet.
            cluster.corrupt(node_id, run.rng.randrange(max(start, end - 5), end))
        else:
            cluster.corrupt(node_id)
    damage.hit(node_id)
    roll = run.rng.random()
    if roll < 0.3:
        # Found at once by recovery (or sooner, by a read).
        cluster.run_for(run.rng.randint(0, 500))
        damage.restart(node_id)
    elif roll < 0.5:
        # A bounce elsewhere: lagging nodes make the leader read older batches.
        damage.restart(run.rng.choice([i for i in cluster.nodes if i != node_id]))
    elif roll < 0.65:
        _power_loss(damage)
    return True


@scenario("bitrot")
def bitrot(run: ScenarioRun) -> None:
    """Bit rot: 3-6 times, one to three random bits flip in random batches of one node's log (the
    leader's too; half of them in its last five batches; or in the leader's batches a node
    cut off for a while will fetch), at most a minority of the voters damaged at once; the
    node restarts at once, or another one does, or every node loses power and comes back in
    a random order, or it waits until the end: every copy it reads or recovers is checked,
    set aside and fetched back; the quorum stays available and loses nothing."""
    _storage_run(run, _bitrot_round)


def _lost_write_round(damage: _Damage) -> bool:
    run, cluster = damage.run, damage.cluster
    node_id = damage.pick([i for i in cluster.nodes if cluster.node(i).running])
    if node_id is None:
        return damage.repair_one()
    power_loss = run.rng.random() < 0.4
    behind = [i for i in cluster.voter_ids if i not in (node_id, cluster.leader())]
    cluster.lose_next_flush(node_id)
    damage.hit(node_id)
    if power_loss and behind:
        # A third voter stops fetching as the liar loses its writes: the records it loses may
        # be on no other voter but the leader, which may come back last. That voter's log is
        # then as long as the liar's, but behind what the liar had acknowledged.
        cluster.isolate(run.rng.choice(behind))
    # Crash before the next flush makes the write durable after all (a leader flushes every
    # append, a voter every fetch): the tail it had "flushed" is gone, and recovery knows.
    cluster.run_for(run.rng.randint(0, 30))
    if power_loss:
        _power_loss(damage)
        return True
    cluster.kill(node_id)
    cluster.run_for(run.rng.randint(0, 1_000))
    damage.restart(node_id)
    return True


@scenario("lost_writes")
def lost_writes(run: ScenarioRun) -> None:
    """Lost writes: 3-6 times, a node's flush reports success and keeps nothing, and the node
    crashes within 30 ms (the leader too), alone or with every node while a third voter lags
    (a power loss, then the nodes come back in a random order), at most a minority of the
    voters damaged at once: its recovery finds its log below what it had flushed, it votes
    for no log behind it, and fetches it back; the quorum stays available and loses nothing."""
    _storage_run(run, _lost_write_round)


def _misdirected_round(damage: _Damage) -> bool:
    run, cluster = damage.run, damage.cluster
    node_id = damage.pick(
        [i for i in cluster.nodes if cluster.node(i).running and cluster.node(i).log_end_offset]
    )
    if node_id is None:
        return damage.repair_one()
    log = cluster.node(node_id).log
    if log.log_end_offset <= log.log_start_offset:
        return True
    onto = run.rng.randrange(log.log_start_offset, log.log_end_offset)
    cluster.misdirect_next_append(node_id, onto)
    damage.hit(node_id)
    if run.rng.random() < 0.5:
        cluster.run_for(run.rng.randint(10, 1_000))
        damage.restart(node_id)
    return True


@scenario("misdirected_writes")
def misdirected_writes(run: ScenarioRun) -> None:
    """Misdirected writes: 3-6 times, a node's next appended batch lands on an older batch of its
    log (the leader's too), leaving blank bytes where it belonged, at most a minority of the
    voters damaged at once; reads and recovery find both, and the node fetches them back;
    the quorum stays available and loses nothing."""
    _storage_run(run, _misdirected_round)


def _snapshot_round(damage: _Damage) -> bool:
    run, cluster = damage.run, damage.cluster
    if run.rng.random() < 0.3:
        # A node cut off until it needs the leader's latest snapshot, which rots meanwhile: the
        # leader's checked read of it must set it aside, not serve it.
        behind = _behind_the_leader(damage, (1_500, 4_000))
        if behind is not None:
            leader = behind[0]
            latest = cluster.node(leader).log.latest_snapshot_id
            if latest is not None:
                cluster.corrupt_snapshot(leader, latest)
                damage.hit(leader)
            cluster.heal()
            return True
    with_snapshots = [i for i in cluster.nodes if cluster.node(i).log.snapshot_ids()]
    node_id = damage.pick(with_snapshots)
    if node_id is None:
        return damage.repair_one() if damage.damaged() else True
    cluster.corrupt_snapshot(node_id)
    if run.rng.random() < 0.3:
        cluster.corrupt(node_id)
    damage.hit(node_id)
    roll = run.rng.random()
    if roll < 0.4:
        cluster.run_for(run.rng.randint(0, 500))
        damage.restart(node_id)
    elif roll < 0.7:
        # Another node falls behind the damaged one's log start: if the damaged node leads, it
        # serves the corrupt snapshot, and must see it.
        others = [i for i in cluster.nodes if i != node_id and i not in damage.damaged()]
        if others:
            lagging = run.rng.choice(others)
            cluster.isolate(lagging)
            cluster.run_for(run.rng.randint(1_500, 4_000))
            cluster.heal()
    return True


@scenario("corrupt_snapshots")
def corrupt_snapshots(run: ScenarioRun) -> None:
    """Corrupt snapshots: 3-6 times, a bit flips in one of a node's snapshots (and sometimes in a
    batch), at most a minority of the voters damaged at once, while logs are cleaned up to
    their snapshots (one every 100 offsets, two kept); the node restarts, or another node is
    cut off until it must fetch a snapshot (sometimes the leader's latest, corrupt): the
    corrupt one is set aside, never served nor loaded, and fetched again; the quorum stays
    available and loses nothing."""
    _storage_run(run, _snapshot_round)
