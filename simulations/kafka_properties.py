"""Kafka's RaftEventSimulationTest properties (KRAFT-BEHAVIOUR §3), as kraft scenarios."""

from __future__ import annotations

from kraft.simulation.scenario import ScenarioRun, scenario


@scenario("initial_election")
def initial_election(run: ScenarioRun) -> None:
    """1-5 voters and 0-5 observers elect a leader; every node reaches high watermark 10."""
    voters = run.rng.randint(1, 5)
    observers = run.rng.randint(0, 5)
    cluster = run.cluster(voters=voters, observers=observers)
    cluster.start_workload(100)
    run.await_(
        lambda: all(n.high_watermark >= 10 for n in cluster.nodes.values()),
        30_000, "every node reaches high watermark 10",
    )
