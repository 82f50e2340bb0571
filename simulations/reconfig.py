"""Dynamic voters (KIP-853): a ``kraft.version`` 1 quorum changes its membership under the
workload, crashes, partitions and leader failovers.

Every scenario bootstraps its voters into the log (``Cluster(kraft_version=1)``, as ``kraft
storage format --initial-controllers`` does), brings new nodes in with ``add_node`` (an empty
disk, a new directory id) and changes the voter set with ``add_voter`` / ``remove_voter``, as
an operator would with ``kafka-metadata-quorum add-controller`` / ``remove-controller``: asking
again after an error (no leader, a change still in flight, a new voter not caught up yet) until
the committed voter set shows the change. The invariants ``voters_differ_by_one``,
``voters_one_uncommitted``, ``voters_durable`` and ``removed_never_leads`` watch every event;
every scenario ends with the voter set it aimed at and every running node caught up.
"""

from __future__ import annotations

from functools import partial

from kraft.simulation.cluster import Cluster
from kraft.simulation.node import SimNode
from kraft.simulation.scenario import ScenarioRun, scenario
from kraft.simulation.waits import (
    ELECTION_MS,
    RATE_PER_S,
    await_caught_up,
    await_high_watermark,
    await_leader,
    top_high_watermark,
)

#: How long one voter change may take, retries included (simulated ms).
CHANGE_MS = 60_000
#: How long the operator waits before asking again after an error.
RETRY_MS = (200, 1_000)


def _cluster(run: ScenarioRun, voters: int) -> Cluster:
    cluster = run.cluster(voters=voters, kraft_version=1)
    cluster.start_workload(RATE_PER_S)
    return cluster


def _down(node: SimNode) -> bool:
    return not node.running


def _changed(cluster: Cluster, kind: str, node_id: int) -> bool:
    return (node_id in cluster.voter_ids) == (kind == "add")


def change_voters(run: ScenarioRun, cluster: Cluster, kind: str, node_id: int) -> bool:
    """Add (``kind`` ``"add"``) or remove voter ``node_id``, asking the leader again after
    every error, until the committed voter set shows the change; a failed expectation if it
    does not within ``CHANGE_MS``."""
    deadline = cluster.now_ms + CHANGE_MS
    ask = cluster.add_voter if kind == "add" else cluster.remove_voter

    def answered_since(answers: int) -> bool:
        return _changed(cluster, kind, node_id) or len(cluster.voter_changes) > answers

    while not _changed(cluster, kind, node_id) and cluster.now_ms < deadline:
        answers = len(cluster.voter_changes)
        if ask(node_id):
            cluster.run_until(partial(answered_since, answers), deadline - cluster.now_ms)
        if not _changed(cluster, kind, node_id):
            cluster.run_for(min(run.rng.randint(*RETRY_MS), max(0, deadline - cluster.now_ms)))
    return run.expect(
        _changed(cluster, kind, node_id),
        f"voter change {kind} {node_id} commits within {CHANGE_MS} ms "
        f"(answers: {[(c.error, c.time_ms) for c in cluster.voter_changes[-5:]]})",
    )


def _new_node(run: ScenarioRun, cluster: Cluster) -> int | None:
    """A new node that fetched the leader's log (or its latest snapshot) up to its high
    watermark; its id, or None (a failed expectation)."""
    node_id = cluster.add_node()
    target = top_high_watermark(cluster)
    if not await_high_watermark(
        run, cluster, [node_id], target, what=f"new node {node_id} catches up to {target}"
    ):
        return None
    return node_id


def _progress(run: ScenarioRun, cluster: Cluster, offsets: int = 20) -> bool:
    """A leader, and the committed voters ``offsets`` further than the quorum is now."""
    if await_leader(run, cluster) is None:
        return False
    return await_high_watermark(
        run, cluster, cluster.voter_ids, top_high_watermark(cluster) + offsets
    )


def _end(run: ScenarioRun, cluster: Cluster, voters: set[int]) -> None:
    """The voter set is ``voters`` and every running node catches up."""
    run.expect(
        set(cluster.voter_ids) == voters,
        f"the voters are {sorted(voters)} (they are {list(cluster.voter_ids)})",
    )
    await_caught_up(run, cluster, [i for i in cluster.nodes if cluster.node(i).running])
    run.expect(
        all(cluster.node(i).voter_ids == frozenset(voters) for i in cluster.running),
        "every running node's client uses the committed voter set: "
        + ", ".join(f"{i}: {sorted(cluster.node(i).voter_ids)}" for i in cluster.running),
    )


@scenario("rolling_replacement")
def rolling_replacement(run: ScenarioRun) -> None:
    """Every voter in turn is replaced by a new node under the workload and crashes.

    3-5 voters. For each: a new node joins (empty disk) and catches up, is added, the old voter
    is removed and shut down; between steps a voter of the new set is bounced or the leader
    killed and restarted, now and then. The new nodes end as the voters."""
    cluster = _cluster(run, run.rng.randint(3, 5))
    if not _progress(run, cluster, 10):
        return
    replacements: set[int] = set()
    for old in list(cluster.voter_ids):
        new = _new_node(run, cluster)
        if new is None or not change_voters(run, cluster, "add", new):
            return
        replacements.add(new)
        if run.rng.random() < 0.4:
            _crash_one(run, cluster)
        if not change_voters(run, cluster, "remove", old):
            return
        cluster.shutdown(old)
        if not run.await_(
            partial(_down, cluster.node(old)), 10_000, f"removed voter {old} shuts down"
        ):
            return
        if not _progress(run, cluster):
            return
    _end(run, cluster, replacements)


def _crash_one(run: ScenarioRun, cluster: Cluster) -> None:
    """Bounce a voter (a crash and a restart from its disk), or kill the leader and restart it
    once another leads: never more than one voter down."""
    leader = cluster.leader()
    if leader is not None and run.rng.random() < 0.5:
        cluster.kill(leader)
        await_leader(run, cluster, other_than=[leader])
        cluster.restart(leader)
    else:
        cluster.restart(run.rng.choice(cluster.voter_ids))


@scenario("remove_leader")
def remove_leader(run: ScenarioRun) -> None:
    """The leader is removed from the voters: it resigns once the removal commits, another
    voter leads, and the old leader carries on as an observer that never leads again.

    3-5 voters; the removed leader keeps running and catches up as an observer."""
    cluster = _cluster(run, run.rng.randint(3, 5))
    if not _progress(run, cluster, 10):
        return
    old = cluster.leader()
    assert old is not None
    expected = set(cluster.voter_ids) - {old}
    if not change_voters(run, cluster, "remove", old):
        return
    node = cluster.node(old)
    if await_leader(run, cluster, other_than=[old], what=f"a voter other than {old} leads"):
        run.await_(
            lambda: node.running and not node.is_voter and node.role != "Leader",
            30_000,
            f"removed leader {old} carries on as an observer",
        )
    if _progress(run, cluster):
        _end(run, cluster, expected)


@scenario("add_voter_during_partition")
def add_voter_during_partition(run: ScenarioRun) -> None:
    """A voter is added while the network is partitioned: a minority of the voters cut off
    (the change commits on the majority side), or the new node cut off from the leader (the
    leader refuses it until it fetches again).

    3-5 voters and a new node; healed, it is a voter and everyone catches up."""
    cluster = _cluster(run, run.rng.randint(3, 5))
    if not _progress(run, cluster, 10):
        return
    new = _new_node(run, cluster)
    if new is None:
        return
    expected = {*cluster.voter_ids, new}
    leader = cluster.leader()
    if leader is None:
        await_leader(run, cluster)
        leader = cluster.leader()
        if leader is None:
            return
    if run.rng.random() < 0.5:
        others = [v for v in cluster.voter_ids if v != leader]
        minority = run.rng.sample(others, (len(cluster.voter_ids) - 1) // 2)
        cluster.partition(set(minority))
        change_voters(run, cluster, "add", new)
    else:
        cluster.isolate(new)
        answers = len(cluster.voter_changes)
        if cluster.add_voter(new):
            run.await_(
                lambda: len(cluster.voter_changes) > answers,
                CHANGE_MS,
                f"the leader answers the addition of cut-off node {new}",
            )
            run.expect(
                new not in cluster.voter_ids,
                f"node {new}, cut off from the leader, is not added "
                f"(answer {cluster.voter_changes[-1:]})",
            )
        cluster.heal()
        change_voters(run, cluster, "add", new)
    cluster.heal()
    if _progress(run, cluster):
        _end(run, cluster, expected)


@scenario("grow_standalone_to_five")
def grow_standalone_to_five(run: ScenarioRun) -> None:
    """A standalone node (``--standalone``: a quorum of one) grows to five voters, one node at
    a time, under the workload; once three vote, a voter is bounced now and then."""
    cluster = _cluster(run, 1)
    if not _progress(run, cluster, 10):
        return
    while len(cluster.voter_ids) < 5:
        new = _new_node(run, cluster)
        if new is None or not change_voters(run, cluster, "add", new):
            return
        if len(cluster.voter_ids) >= 3 and run.rng.random() < 0.5:
            cluster.restart(run.rng.choice(cluster.voter_ids))
        if not _progress(run, cluster):
            return
    _end(run, cluster, set(range(1, 6)))


@scenario("change_during_failover")
def change_during_failover(run: ScenarioRun) -> None:
    """A voter change races a leader failover: right after the admin sends it (0-10 ms), the
    leader is killed, isolated or resigns. The change commits or not, never half; asked
    again, it commits.

    3-5 voters; the change adds a new node, or (from 4-5 voters) removes a follower."""
    cluster = _cluster(run, run.rng.randint(3, 5))
    if not _progress(run, cluster, 10):
        return
    leader = cluster.leader()
    if leader is None:
        return
    # A removal from three voters would leave two: then no leader could be elected without
    # the one that fails over.
    if len(cluster.voter_ids) > 3 and run.rng.random() < 0.5:
        kind, node_id = "remove", run.rng.choice([v for v in cluster.voter_ids if v != leader])
    else:
        new = _new_node(run, cluster)
        if new is None:
            return
        kind, node_id = "add", new
    expected = set(cluster.voter_ids) ^ {node_id}
    leader = cluster.leader()
    if leader is None:
        return
    (cluster.add_voter if kind == "add" else cluster.remove_voter)(node_id)
    cluster.run_for(run.rng.randint(0, 10))
    failover = run.rng.choice(["kill", "isolate", "resign"])
    if failover == "kill":
        cluster.kill(leader)
    elif failover == "isolate":
        cluster.isolate(leader)
    else:
        cluster.resign()
    # Not an expectation: a removal that reached only the old leader and the removed voter
    # leaves the others unable to win a vote until the old leader is back (the removed voter
    # holds the newest log and stands for nothing). The availability invariant asks for a
    # leader whenever one can be elected.
    cluster.run_until(lambda: cluster.leader() not in (None, leader), ELECTION_MS)
    if failover == "kill":
        cluster.restart(leader)
    else:
        cluster.heal()
    if change_voters(run, cluster, kind, node_id) and _progress(run, cluster):
        _end(run, cluster, expected)
