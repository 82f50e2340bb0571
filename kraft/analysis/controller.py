"""Controller metrics: fencing, partition leader elections, controller writes and failovers.

From the controller events of a simulated controller cluster (docs/simulation.md, "The
controller"): ``controller_claimed`` / ``controller_renounced``, ``broker_fenced``,
``partition_leader_changed``, ``controller_op_completed`` and the broker faults
(``fault_injected`` with ``fault`` ``broker_crash``, ``broker_restart`` or
``broker_shutdown``, ``targets`` the broker ids). A log without them gives empty tables. Like
:mod:`kraft.analysis.metrics`, every function takes the events of
:func:`kraft.analysis.events.load_events` and returns a DataFrame; within a run the order is
``seq``.

Each measurement (docs/analysis.md has the why of each):

- **time to fence**: from a ``broker_crash`` of broker b to the first ``broker_fenced`` of b
  after it, unless another fault of b (it restarts) comes first: then it is not measured;
- **time to elect a partition leader**: for each ``broker_crash`` / ``broker_shutdown`` of b
  and each partition whose last leader before it was b, to the first
  ``partition_leader_changed`` of the partition naming a leader other than b (-1, no leader,
  is none). A partition whose topic's deletion was acknowledged before it got one is left out;
- **controller write latency**: ``latency_ms`` of each ``controller_op_completed`` whose
  ``outcome`` is ``ok``, by ``op``;
- **controller failover**: from each ``controller_renounced`` to the next
  ``controller_claimed`` on any node.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BROKER_FAULTS",
    "CONTROLLER_KINDS",
    "controller_summary",
    "failovers",
    "fencing",
    "leader_elections",
    "measurements",
    "write_latency",
]

DataFrame = Any

#: The event kinds a controller cluster adds to the log (docs/simulation.md).
CONTROLLER_KINDS = (
    "controller_claimed",
    "controller_renounced",
    "broker_registered",
    "broker_fenced",
    "broker_unfenced",
    "partition_leader_changed",
    "controller_op_completed",
)

#: The faults of a simulated broker (``fault_injected``'s ``fault``; ``targets``: broker ids).
BROKER_FAULTS = ("broker_crash", "broker_restart", "broker_shutdown")


def _broker_faults(events: DataFrame, faults: tuple[str, ...]) -> DataFrame:
    """One row per broker fault of ``faults`` and target: ``run_id, scenario, seq, time_ms,
    fault, broker``."""
    from pyspark.sql import functions as sf

    return events.where(
        (sf.col("kind") == "fault_injected") & sf.col("details.fault").isin(*faults)
    ).select(
        "run_id",
        "scenario",
        "seq",
        "time_ms",
        sf.col("details.fault").alias("fault"),
        sf.explode("details.targets").alias("broker"),
    )


def fencing(events: DataFrame) -> DataFrame:
    """One row per crashed broker: ``run_id, scenario, broker, time_ms, fenced_ms`` (null if
    it was not fenced before its next fault or the run's end) and ``fence_ms``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    faults = _broker_faults(events, BROKER_FAULTS).select(
        "run_id",
        "scenario",
        "broker",
        "seq",
        "time_ms",
        (sf.col("fault") == "broker_crash").alias("is_crash"),
        sf.lit(True).alias("is_fault"),
        sf.lit(None).cast("bigint").alias("fenced_at"),
    )
    fenced = events.where(sf.col("kind") == "broker_fenced").select(
        "run_id",
        "scenario",
        sf.col("details.broker").alias("broker"),
        "seq",
        "time_ms",
        sf.lit(False).alias("is_crash"),
        sf.lit(False).alias("is_fault"),
        sf.col("time_ms").alias("fenced_at"),
    )
    after = (
        Window.partitionBy("run_id", "broker")
        .orderBy("seq")
        .rowsBetween(1, Window.unboundedFollowing)
    )
    marks = faults.unionByName(fenced)
    # The fencing that counts comes before the broker's next fault: one after a restart
    # fences another incarnation.
    first_fenced = sf.first(sf.when(~sf.col("is_fault"), sf.col("seq")), ignorenulls=True)
    next_fault = sf.first(sf.when(sf.col("is_fault"), sf.col("seq")), ignorenulls=True)
    first_fenced_ms = sf.first("fenced_at", ignorenulls=True)
    return (
        marks.withColumn("fenced_seq", first_fenced.over(after))
        .withColumn("fault_seq", next_fault.over(after))
        .withColumn("fenced_ms_any", first_fenced_ms.over(after))
        .where("is_crash")
        .select(
            "run_id",
            "scenario",
            "broker",
            "time_ms",
            sf.when(
                sf.col("fault_seq").isNull() | (sf.col("fenced_seq") < sf.col("fault_seq")),
                sf.col("fenced_ms_any"),
            ).alias("fenced_ms"),
        )
        .withColumn("fence_ms", sf.col("fenced_ms") - sf.col("time_ms"))
    )


def leader_elections(events: DataFrame) -> DataFrame:
    """One row per partition led by a broker when it crashed or shut down: ``run_id,
    scenario, broker, fault, time_ms, topic, partition, elected_ms`` (the first change to
    another leader, null if none came) and ``election_ms``."""
    from pyspark.sql import functions as sf

    changes = events.where(sf.col("kind") == "partition_leader_changed").select(
        "run_id",
        sf.col("seq").alias("change_seq"),
        sf.col("time_ms").alias("change_ms"),
        sf.col("details.topic").alias("topic"),
        sf.col("details.partition").alias("partition"),
        sf.col("details.leader").alias("new_leader"),
    )
    failures = _broker_faults(events, ("broker_crash", "broker_shutdown"))
    key = ("run_id", "scenario", "broker", "fault", "seq", "time_ms", "topic", "partition")
    # Each partition's leader at the failure: its last change before it.
    led = (
        failures.join(changes, "run_id")
        .where(sf.col("change_seq") < sf.col("seq"))
        .groupBy(*key)
        .agg(sf.max(sf.struct("change_seq", "new_leader")).alias("last"))
        .where(sf.col("last.new_leader") == sf.col("broker"))
        .select(*key, sf.col("last.change_seq").alias("led_seq"))
    )
    # Conditional, not a filter: a partition that never got another leader stays, with null.
    moved = (
        (sf.col("change_seq") > sf.col("seq"))
        & (sf.col("new_leader") >= 0)
        & (sf.col("new_leader") != sf.col("broker"))
    )
    elected = (
        led.join(changes, ["run_id", "topic", "partition"])
        .groupBy(*key, "led_seq")
        .agg(sf.min(sf.when(moved, sf.struct("change_seq", "change_ms"))).alias("next"))
        .select(
            *key,
            "led_seq",
            sf.col("next.change_seq").alias("elected_seq"),
            sf.col("next.change_ms").alias("elected_ms"),
        )
    )
    deletions = events.where(
        (sf.col("kind") == "controller_op_completed")
        & (sf.col("details.op") == "delete_topic")
        & (sf.col("details.outcome") == "ok")
    ).select("run_id", sf.col("details.topic").alias("topic"), sf.col("seq").alias("deleted_seq"))
    # A topic deleted while its partition waited has no leader to elect any more.
    deleted = (sf.col("deleted_seq") > sf.col("led_seq")) & (
        sf.col("elected_seq").isNull() | (sf.col("deleted_seq") < sf.col("elected_seq"))
    )
    return (
        elected.join(deletions, ["run_id", "topic"], "left")
        .groupBy(*key, "elected_ms")
        .agg(sf.count(sf.when(deleted, True)).alias("deleted"))
        .where(sf.col("deleted") == 0)
        .select(
            "run_id",
            "scenario",
            "broker",
            "fault",
            "time_ms",
            "topic",
            "partition",
            "elected_ms",
            (sf.col("elected_ms") - sf.col("time_ms")).alias("election_ms"),
        )
    )


def write_latency(events: DataFrame) -> DataFrame:
    """One row per completed controller call: ``run_id, scenario, node, time_ms, op, topic,
    outcome, latency_ms``."""
    from pyspark.sql import functions as sf

    return events.where(sf.col("kind") == "controller_op_completed").select(
        "run_id",
        "scenario",
        "node",
        "time_ms",
        sf.col("details.op").alias("op"),
        sf.col("details.topic").alias("topic"),
        sf.col("details.outcome").alias("outcome"),
        "latency_ms",
    )


def failovers(events: DataFrame) -> DataFrame:
    """One row per ``controller_renounced``: ``run_id, scenario, node, epoch, time_ms,
    claimed_ms`` (the next claim on any node, null if none came), ``next_node`` and
    ``failover_ms``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    kind = sf.col("kind")
    marks = events.where(kind.isin("controller_claimed", "controller_renounced")).select(
        "run_id",
        "scenario",
        "seq",
        "time_ms",
        "node",
        "epoch",
        (kind == "controller_renounced").alias("renounced"),
        sf.when(kind == "controller_claimed", sf.struct("time_ms", "node")).alias("claim"),
    )
    after = Window.partitionBy("run_id").orderBy("seq").rowsBetween(1, Window.unboundedFollowing)
    return (
        marks.withColumn("next", sf.first("claim", ignorenulls=True).over(after))
        .where("renounced")
        .select(
            "run_id",
            "scenario",
            "node",
            "epoch",
            "time_ms",
            sf.col("next.time_ms").alias("claimed_ms"),
            sf.col("next.node").alias("next_node"),
            (sf.col("next.time_ms") - sf.col("time_ms")).alias("failover_ms"),
        )
    )


def measurements(events: DataFrame) -> DataFrame:
    """Every controller measurement as one row: ``scenario``, ``metric``
    (``time_to_fence``, ``leader_election``, ``write_latency`` or ``failover``), ``op`` (the
    call, for ``write_latency``) and ``value_ms`` (null when the awaited event never came, or
    the call failed)."""
    from pyspark.sql import functions as sf

    def rows(frame: DataFrame, metric: str, value: str, op: Any = None) -> DataFrame:
        return frame.select(
            "scenario",
            sf.lit(metric).alias("metric"),
            (sf.lit(None).cast("string") if op is None else op).alias("op"),
            sf.col(value).cast("bigint").alias("value_ms"),
        )

    calls = write_latency(events).withColumn(
        "ok_ms", sf.when(sf.col("outcome") == "ok", sf.col("latency_ms"))
    )
    parts = (
        rows(fencing(events), "time_to_fence", "fence_ms"),
        rows(leader_elections(events), "leader_election", "election_ms"),
        rows(calls, "write_latency", "ok_ms", sf.col("op")),
        rows(failovers(events), "failover", "failover_ms"),
    )
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    return union


def controller_summary(events: DataFrame) -> DataFrame:
    """By scenario, metric and op: ``events`` (crashes, partitions, calls or renounces),
    ``measured`` (those with a value), ``p50_ms, p99_ms, max_ms``. Empty for a log without
    controller events."""
    from pyspark.sql import functions as sf

    quantiles = sf.percentile_approx("value_ms", [0.5, 0.99], 10_000)
    return (
        measurements(events)
        .groupBy("scenario", "metric", "op")
        .agg(
            sf.count(sf.lit(1)).alias("events"),
            sf.count("value_ms").alias("measured"),
            quantiles.alias("q"),
            sf.max("value_ms").alias("max_ms"),
        )
        .select(
            "scenario",
            "metric",
            "op",
            "events",
            "measured",
            sf.col("q")[0].alias("p50_ms"),
            sf.col("q")[1].alias("p99_ms"),
            "max_ms",
        )
    )
