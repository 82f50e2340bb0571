"""Three real KafkaRaftClients wired together in memory, in virtual time.

Elects a leader, replicates a few records to every node's listener, cuts the leader off, and
shows a new leader elected in a higher epoch that still holds every committed record.

    python examples/raft_in_memory.py
"""

from __future__ import annotations

from kraft.testing import LocalCluster


def main() -> None:
    cluster: LocalCluster[bytes] = LocalCluster(voters=3, seed=7)
    cluster.run_until(lambda: cluster.leader() is not None, timeout_ms=10_000)
    first = cluster.leader()
    assert first is not None
    print(f"t={cluster.clock.now_ms()} ms: node {first} leads epoch {cluster.nodes[first].epoch}")

    cluster.append([b"alpha", b"beta"])
    cluster.append([b"gamma"])
    cluster.run_until(
        lambda: all(len(r.records) == 3 for r in cluster.listeners.values()), timeout_ms=5_000
    )
    for node_id, listener in cluster.listeners.items():
        print(f"  node {node_id} committed {listener.records}")

    print(f"t={cluster.clock.now_ms()} ms: disconnecting node {first}")
    cluster.disconnected.add(first)
    cluster.run_until(lambda: cluster.leader() not in (None, first), timeout_ms=30_000)
    second = cluster.leader()
    assert second is not None
    print(f"t={cluster.clock.now_ms()} ms: node {second} leads epoch {cluster.nodes[second].epoch}")

    cluster.append([b"delta"])
    cluster.run_until(lambda: len(cluster.listeners[second].records) == 4, timeout_ms=5_000)
    print(f"  node {second} committed {cluster.listeners[second].records}")

    cluster.disconnected.clear()
    cluster.run_until(lambda: len(cluster.listeners[first].records) == 4, timeout_ms=30_000)
    print(
        f"t={cluster.clock.now_ms()} ms: node {first} rejoined as "
        f"{cluster.nodes[first].role} and committed {cluster.listeners[first].records}"
    )


if __name__ == "__main__":
    main()
