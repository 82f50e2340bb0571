"""Directed scenarios: fault schedules built step by step to reach a state that random faults
reach rarely. Each one targets a single rule; on correct code it runs clean, and with that rule
broken it trips an invariant on every seed.
"""

from __future__ import annotations

from collections.abc import Iterable

from kraft.simulation.cluster import Cluster
from kraft.simulation.scenario import ScenarioRun, scenario
from kraft.simulation.waits import ELECTION_MS, await_caught_up, await_leader


def _leads_above(cluster: Cluster, candidates: Iterable[int], epoch: int) -> int | None:
    """The node among ``candidates`` that leads an epoch above ``epoch``, or None."""
    for node_id in candidates:
        node = cluster.node(node_id)
        if node.client is not None and node.client.is_leader and node.epoch > epoch:
            return node_id
    return None


@scenario("figure8")
def figure8(run: ScenarioRun) -> None:
    """Raft's "Figure 8" on 5 voters: a record of an old epoch on a majority is not committed
    until a record of the new leader's epoch is (KIP-595's high-watermark rule).

    1. Leader L and a follower V are cut off from C, D, E; L appends X, V fetches it (2 of 5:
       not committed). L and V are paused.
    2. C, D, E elect C, which is paused as soon as it leads: its log ends in that epoch.
    3. L and V resume; one of them, W, wins a later epoch. E is isolated and W->V is cut, so
       V's fetch at the end of X counts but W's LeaderChange never reaches V. W, D and V hold X:
       without the epoch rule W's high watermark would cover X.
    4. W and D are cut off; C resumes and wins with V and E; C lacks X. Had X been counted
       committed, leader completeness breaks here.
    Then the network heals and every node catches up."""
    cluster = run.cluster(voters=5)
    c = cluster
    if await_leader(run, c, what="a first leader") is None:
        return
    c.append(["warm-up"])
    c.run_for(1_000)
    leader = c.leader()
    if not run.expect(leader is not None, "a leader after the warm-up") or leader is None:
        return
    follower = next(i for i in c.voter_ids if i != leader)
    rest = [i for i in c.voter_ids if i not in (leader, follower)]
    # 1.
    c.partition([leader, follower], rest)
    end_before = c.node(leader).log_end_offset
    for k in range(3):
        c.append([f"X{k}"])
    if not run.await_(
        lambda: c.node(follower).log_end_offset == c.node(leader).log_end_offset >= end_before + 3,
        2_000,
        f"follower {follower} fetches X from leader {leader}",
    ):
        return
    c.run_for(300)  # what L sent C, D, E meanwhile is dropped at delivery, not after the heal
    x_end = c.node(leader).log_end_offset
    c.pause(leader)
    c.pause(follower)
    c.heal()
    # 2.
    old_epoch = c.node(leader).epoch
    if not run.await_(
        lambda: _leads_above(c, rest, old_epoch) is not None,
        ELECTION_MS,
        "C, D or E leads a new epoch",
    ):
        return
    second = _leads_above(c, rest, old_epoch)
    assert second is not None
    c.pause(second)
    d, e = [i for i in rest if i != second]
    second_epoch = c.node(second).epoch
    # 3.
    c.resume(leader)
    c.resume(follower)
    if not run.await_(
        lambda: _leads_above(c, (leader, follower), second_epoch) is not None,
        ELECTION_MS,
        "L or V leads an epoch above C's",
    ):
        return
    winner = _leads_above(c, (leader, follower), second_epoch)
    assert winner is not None
    other = follower if winner == leader else leader
    c.isolate(e)
    c.block([winner], [other])
    w = c.node(winner)
    # Without the epoch rule the winner's high watermark covers X within a fetch or two.
    c.run_until(lambda: w.high_watermark >= x_end, 3_000)
    # 4.
    winner_epoch = w.epoch
    c.heal()
    c.partition([winner, d], [second, other, e])
    c.resume(second)
    run.await_(
        lambda: _leads_above(c, (second, other, e), winner_epoch) is not None,
        ELECTION_MS,
        "C, V or E leads an epoch above W's",
    )
    c.run_for(5_000)
    c.heal()
    await_caught_up(run, c)
