"""The controller under faults: ``Cluster(controller=True, brokers=N)`` (docs/simulation.md,
"The controller"), with the controller invariants checked throughout (``image_agreement``,
``fenced_never_leads``, ``acked_topic_durable``, ...).

Every scenario ends with the faults healed and the same liveness expectations: every broker
running again is registered and unfenced, every partition has a leader, every topic operation
got its answer, and every running node's image reaches the same offset.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from kraft.metadata.image import NO_LEADER, MetadataImage
from kraft.protocol.controller_messages import AllocateProducerIdsRequest
from kraft.simulation.cluster import Cluster
from kraft.simulation.scenario import ScenarioRun, scenario

#: A broker's session (Kafka's broker.session.timeout.ms, 9 s), and time for its fencing to
#: commit and for a new leader to be elected: what a liveness wait allows after a fault.
SETTLE_MS = 30_000
#: Time for a topic operation to be answered (its timeout is 30 s) after the faults end.
ANSWER_MS = 45_000

Futures = list[concurrent.futures.Future[Any]]


def start(run: ScenarioRun, brokers: tuple[int, int]) -> Cluster | None:
    """The run's controller cluster (3 or 5 voters, a number of brokers drawn from the
    inclusive range ``brokers``), once every broker is unfenced; None if they never are."""
    cluster = run.cluster(
        voters=run.rng.choice((3, 3, 5)), controller=True, brokers=run.rng.randint(*brokers)
    )
    if not run.await_(
        lambda: all_brokers_unfenced(cluster), SETTLE_MS, "every broker registers and is unfenced"
    ):
        return None
    return cluster


def leader_image(cluster: Cluster) -> MetadataImage | None:
    leader = cluster.leader()
    return None if leader is None else cluster.node(leader).image


def all_brokers_unfenced(cluster: Cluster) -> bool:
    """Every running broker is registered and unfenced in the leader's image."""
    image = leader_image(cluster)
    sim = cluster.controller_sim
    assert sim is not None
    running = [b for b in cluster.broker_ids if sim.brokers.broker(b).running]
    return image is not None and all(
        b in image.brokers and not image.brokers[b].fenced for b in running
    )


def leaderless(cluster: Cluster) -> list[str]:
    """The partitions without a leader in the leader's image (all of them when none)."""
    image = leader_image(cluster)
    if image is None:
        return ["(no leader)"]
    return [
        f"{topic.name}-{index}"
        for topic in image.topics.values()
        for index, partition in topic.partitions.items()
        if partition.leader == NO_LEADER
    ]


def images_agree(cluster: Cluster) -> bool:
    """Every running node's image is at the highest offset any of them reached."""
    offsets = {
        n.image.provenance.offset if n.image is not None else -1
        for n in cluster.nodes.values()
        if n.running
    }
    return len(offsets) == 1


def create_topics(
    run: ScenarioRun, cluster: Cluster, prefix: str, count: int, over_ms: int
) -> Futures:
    """Create ``count`` topics (1-3 partitions, RF 1-3) at random times within ``over_ms``;
    their futures (filled in as each is sent)."""
    futures: Futures = []
    now = cluster.now_ms
    for index in range(count):
        name = f"{prefix}{index}"
        partitions, replication = run.rng.randint(1, 3), run.rng.randint(1, 3)

        def send(name: str = name, partitions: int = partitions, rf: int = replication) -> None:
            futures.append(cluster.create_topic(name, partitions, rf))

        cluster.call_at(now + run.rng.randint(0, over_ms), send)
    return futures


def allocate_producer_ids(run: ScenarioRun, cluster: Cluster, count: int, over_ms: int) -> None:
    """``count`` AllocateProducerIds from random brokers to the Raft leader's controller at
    random times within ``over_ms``; each block handed out goes to the invariants
    (``producer_ids_disjoint``)."""
    sim = cluster.controller_sim
    assert sim is not None
    now = cluster.now_ms

    def send() -> None:
        leader = cluster.leader()
        image = None if leader is None else cluster.node(leader).image
        broker_id = run.rng.choice(cluster.broker_ids)
        if image is None or broker_id not in image.brokers:
            return
        request = AllocateProducerIdsRequest(
            broker_id=broker_id, broker_epoch=image.brokers[broker_id].epoch
        )

        def answered(done: concurrent.futures.Future[Any]) -> None:
            if done.exception() is None:
                block = done.result()
                sim.invariants.producer_ids_handed_out(
                    broker_id, block.first_producer_id, block.size
                )

        sim.send(
            broker_id,
            leader,  # type: ignore[arg-type]
            lambda _node, controller: controller.allocate_producer_ids(request),
            answered,
        )

    for _ in range(count):
        cluster.call_at(now + run.rng.randint(0, over_ms), send)


def settle(run: ScenarioRun, cluster: Cluster, futures: Futures) -> None:
    """Heal everything, start every stopped node and broker, and expect the cluster to come
    back whole (see the module docstring)."""
    cluster.heal()
    for node_id, node in cluster.nodes.items():
        if not node.running:
            cluster.restart(node_id)
    sim = cluster.controller_sim
    assert sim is not None
    for broker_id in cluster.broker_ids:
        broker = sim.brokers.broker(broker_id)
        if broker.isolated:
            cluster.heal_broker(broker_id)
        if not broker.running or broker.want_shut_down:
            # A controlled shutdown under way would leave the broker down: start it again.
            cluster.restart_broker(broker_id)
    if not run.await_(lambda: cluster.leader() is not None, SETTLE_MS, "a leader is elected"):
        return
    run.await_(
        lambda: all(f.done() for f in futures),
        ANSWER_MS,
        f"every one of the {len(futures)} topic operations is answered",
    )
    run.await_(
        lambda: all_brokers_unfenced(cluster),
        SETTLE_MS,
        "every broker registers again and is unfenced",
    )
    if not run.await_(
        lambda: not leaderless(cluster), SETTLE_MS, "every partition has a leader again"
    ):
        run.expect(False, f"leaderless: {leaderless(cluster)[:5]}")
    run.await_(
        lambda: images_agree(cluster), SETTLE_MS, "every node's image reaches the same offset"
    )


@scenario("controller_broker_churn")
def broker_churn(run: ScenarioRun) -> None:
    """Brokers crash, restart, shut down in a controlled way and are cut off, every 2-8 s for
    40-60 s, while topics are created and deleted; then all come back.

    3-6 brokers; 10-20 topics created over the churn, a few of them deleted."""
    cluster = start(run, (3, 6))
    if cluster is None:
        return
    churn_ms = run.rng.randint(40_000, 60_000)
    futures = create_topics(run, cluster, "churn", run.rng.randint(10, 20), churn_ms)
    end = cluster.now_ms + churn_ms
    sim = cluster.controller_sim
    assert sim is not None
    while cluster.now_ms < end:
        cluster.run_for(run.rng.randint(2_000, 8_000))
        broker_id = run.rng.choice(cluster.broker_ids)
        broker = sim.brokers.broker(broker_id)
        action = run.rng.random()
        if not broker.running:
            cluster.restart_broker(broker_id)
        elif broker.isolated:
            cluster.heal_broker(broker_id)
        elif action < 0.4:
            cluster.crash_broker(broker_id)
        elif action < 0.6:
            cluster.shutdown_broker(broker_id)
        elif action < 0.8:
            cluster.isolate_broker(broker_id)
        else:
            topics = leader_topics(cluster)
            if topics:
                futures.append(cluster.delete_topic(run.rng.choice(topics)))
    settle(run, cluster, futures)


def leader_topics(cluster: Cluster) -> list[str]:
    image = leader_image(cluster)
    return [] if image is None else sorted(image.topics)


@scenario("controller_failover_storm")
def failover_storm(run: ScenarioRun) -> None:
    """A topic creation storm (and producer id allocations) while the active controller is
    killed, restarted, cut off or made to resign every 3-8 s for 30-45 s.

    3 brokers; 30-60 topics; 10-20 producer id blocks."""
    cluster = start(run, (3, 3))
    if cluster is None:
        return
    storm_ms = run.rng.randint(30_000, 45_000)
    futures = create_topics(run, cluster, "storm", run.rng.randint(30, 60), storm_ms)
    allocate_producer_ids(run, cluster, run.rng.randint(10, 20), storm_ms)
    end = cluster.now_ms + storm_ms
    while cluster.now_ms < end:
        cluster.run_for(run.rng.randint(3_000, 8_000))
        for node_id, node in cluster.nodes.items():
            if not node.running:
                cluster.restart(node_id)
        cluster.heal()
        leader = cluster.leader()
        if leader is None:
            continue
        action = run.rng.random()
        if action < 0.4:
            cluster.kill(leader)
        elif action < 0.7:
            cluster.isolate(leader)
        elif action < 0.85:
            cluster.resign()
        else:
            cluster.shutdown(leader)
    settle(run, cluster, futures)


@scenario("controller_fenced_partitions")
def fenced_partitions(run: ScenarioRun) -> None:
    """Brokers crash (one or two at a time, never all): each is fenced once its session runs
    out and its partitions get other leaders, or none; back, it is unfenced and leads again.
    Two to four rounds.

    4-5 brokers; 6-10 topics of RF 2-3 created first."""
    cluster = start(run, (4, 5))
    if cluster is None:
        return
    futures: Futures = []
    for index in range(run.rng.randint(6, 10)):
        futures.append(
            cluster.create_topic(f"p{index}", run.rng.randint(1, 4), run.rng.randint(2, 3))
        )
    if not run.await_(
        lambda: all(f.done() for f in futures), ANSWER_MS, "every topic creation is answered"
    ):
        return
    for _ in range(run.rng.randint(2, 4)):
        victims = run.rng.sample(cluster.broker_ids, run.rng.randint(1, 2))
        for broker_id in victims:
            cluster.crash_broker(broker_id)

        def fenced_and_moved(victims: list[int] = victims) -> bool:
            image = leader_image(cluster)
            return image is not None and all(
                image.brokers[b].fenced
                and all(p.leader != b for t in image.topics.values() for p in t.partitions.values())
                for b in victims
            )

        if not run.await_(
            fenced_and_moved,
            SETTLE_MS,
            f"brokers {victims} are fenced and lead nothing once their sessions run out",
        ):
            break
        for broker_id in victims:
            cluster.restart_broker(broker_id)
        if not run.await_(
            lambda: all_brokers_unfenced(cluster) and not leaderless(cluster),
            SETTLE_MS,
            f"brokers {victims} come back unfenced and every partition has a leader",
        ):
            break
    settle(run, cluster, futures)
