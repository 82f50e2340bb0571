"""A leader's disk lies in the simulator: its committed batch goes bad, and the cluster repairs
it from the quorum without losing availability (docs/protocol.md §1.14). The storage-fault
scenarios and their sweep are docs/simulation.md's; this is one deterministic run of the
client's reaction."""

from __future__ import annotations

from kraft.simulation import Cluster

#: What the end-of-run checks may report here: the old leader's log high watermark falls to
#: its new log end when it sets batches aside (the repair contract, kraft/log/api.py), and
#: for a moment one voter alone holds the batch. Checks that know of storage faults are the
#: simulator's storage-fault work; everything else must hold.
SET_ASIDE_CHECKS = {"monotonic_high_watermark", "majority_high_watermark"}


def test_a_leader_with_a_corrupt_committed_batch_resigns_and_every_log_ends_equal() -> None:
    """A follower cut off while two batches commit comes back and fetches them; the leader
    meets its corrupt copy: it serves no byte of it, resigns, and fetches it back from the
    new leader. The cluster keeps committing, and every node ends with the same committed
    log and records."""
    cluster = Cluster(seed=17, voters=3, stop_on_violation=False)
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    old = cluster.leader()
    assert old is not None
    lagging = next(n for n in sorted(cluster.nodes) if n != old)
    cluster.isolate(lagging)
    first = cluster.append(["a", "b"])
    last = cluster.append(["c"])
    assert first is not None and last is not None
    assert cluster.run_until(lambda: cluster.node(old).high_watermark > last, 1_000)
    cluster.node(old).log.corrupt_batch(first, position=40)
    cluster.heal()
    assert cluster.run_until(lambda: cluster.leader() not in (None, old), 10_000)
    more = None
    while more is None:
        cluster.run_for(100)
        more = cluster.append(["d"])
    assert cluster.run_until(
        lambda: all(
            n.high_watermark > more and n.log.repair_target is None for n in cluster.nodes.values()
        ),
        20_000,
    )
    assert cluster.node(old).log.set_aside
    logs = {
        node_id: [bytes(b.buffer) for b in n.log.batches_between(0, n.high_watermark)]
        for node_id, n in cluster.nodes.items()
    }
    assert len({tuple(batches) for batches in logs.values()}) == 1, logs
    records = [n.committed for n in cluster.nodes.values()]
    assert all(r == ["a", "b", "c", "d"] for r in records), records
    violations = cluster.validate()
    assert all(v.invariant in SET_ASIDE_CHECKS for v in violations), violations
