"""Run metrics: elections, fault recovery, unavailability, commit latency, throughput.

Every function takes the DataFrame of :func:`kraft.analysis.events.load_events` and returns a
DataFrame; nothing collects events to the driver. Within a run the order of events is ``seq``
(``time_ms`` ties at one instant), so every window is partitioned by run and ordered by ``seq``.

Definitions (docs/analysis.md has the why of each):

- an **election** is a node becoming ``Leader``; its latency is the winner's campaign: from the
  first ``Prospective`` or ``Candidate`` state of its uninterrupted run of them to ``Leader``;
- the **recovery** of a fault is the time from its ``fault_injected`` to the next
  ``batch_committed`` on a node that is ``Leader``: the quorum commits again. The repairs
  (:data:`REPAIRS`: ``heal``, ``resume``) are logged as ``fault_injected`` too, so that the
  shrinker can drop them, but they end faults: they are not counted as faults;
- an **unavailability window** is a gap of at least ``min_gap_ms`` between two commits on a
  leader (or from the last one to the end of the run) during which the workload kept trying to
  append;
- **commit latency** is ``latency_ms`` of data batches (``count > 0``) at their first delivery
  on each node, on the leader and on every voter.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DEFAULT_MIN_GAP_MS",
    "PERCENTILES",
    "REPAIRS",
    "by_cluster_size",
    "by_fault",
    "by_scenario",
    "commit_latency",
    "commit_latency_cdf",
    "committed_batches",
    "election_histogram",
    "elections",
    "fault_recovery",
    "run_info",
    "run_table",
    "scenario_parameters",
    "unavailability",
]

#: The simulator's calls that only end a fault: ``heal`` (a partition, an isolation, a block)
#: and ``resume`` (a pause). The event log has them as ``fault_injected`` (each has an index,
#: for the shrinker), but they are no faults. ``restart`` stays a fault: restarting a running
#: node crashes it first (a bounce), and the log does not tell the two apart at the fault.
REPAIRS = ("heal", "resume")

#: The percentiles every latency table reports.
PERCENTILES = (0.5, 0.9, 0.99)

#: A commit gap at least this long, while the workload appends, counts as unavailability.
#: Kafka's default fetch_max_wait_ms: a healthy leader commits the workload's appends every
#: append_linger_ms (25 ms), far more often.
DEFAULT_MIN_GAP_MS = 500

#: Percentiles (0.01 ... 1.0) of the commit-latency CDF.
_CDF_POINTS = tuple(round(i / 100, 2) for i in range(1, 101))

# Some Spark DataFrame; pyspark is optional, so no pyspark type appears in a signature.
DataFrame = Any


def _leader_commit() -> Any:
    from pyspark.sql import functions as sf

    return (sf.col("kind") == "batch_committed") & (sf.col("role") == "Leader")


def _is_fault() -> Any:
    """A ``fault_injected`` event that is a fault, not one of the :data:`REPAIRS`."""
    from pyspark.sql import functions as sf

    return (sf.col("kind") == "fault_injected") & ~sf.col("details.fault").isin(*REPAIRS)


def run_info(events: DataFrame) -> DataFrame:
    """One row per run: its scenario, seed, cluster shape and what the log says of its end."""
    from pyspark.sql import functions as sf

    kind = sf.col("kind")

    def count_of(condition: Any) -> Any:
        return sf.count(sf.when(condition, True))

    started = kind == "run_started"
    # A run has one scenario and seed: grouping by them too costs nothing, while first() of
    # a string would make Spark sort every event (no hash aggregate keeps a string).
    return events.groupBy("run_id", "scenario", "seed").agg(
        sf.max(sf.when(started, sf.col("details.voters"))).alias("voters"),
        sf.max(sf.when(started, sf.col("details.observers"))).alias("observers"),
        sf.max(sf.when(started, sf.col("details.config.election_timeout_ms"))).alias(
            "election_timeout_ms"
        ),
        sf.max("time_ms").alias("simulated_ms"),
        sf.count(sf.lit(1)).alias("events"),
        count_of(kind.startswith("message_")).alias("message_events"),
        count_of(_is_fault()).alias("faults"),
        count_of(kind == "invariant_violated").alias("logged_violations"),
        count_of(kind == "expectation_failed").alias("failed_expectations"),
        count_of(kind == "run_error").alias("errors"),
        sf.max(kind == "run_finished").alias("finished"),
    )


def elections(events: DataFrame) -> DataFrame:
    """One row per node becoming leader: ``run_id, scenario, leader, epoch, elected_ms,
    campaign_start_ms, election_ms, candidacies`` (Candidate rounds in the campaign)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    role = sf.col("role")
    states = events.where(sf.col("kind") == "state_changed").select(
        "run_id",
        "scenario",
        "seq",
        "time_ms",
        "node",
        "epoch",
        "role",
        sf.col("details.from_role").alias("from_role"),
    )
    campaigning = role.isin("Prospective", "Candidate")
    by_node = Window.partitionBy("run_id", "node").orderBy("seq")
    # A campaign is a node's run of Prospective/Candidate states plus the state that ends it:
    # number the states by how many non-campaign states came strictly before.
    campaign = sf.coalesce(
        sf.sum(sf.when(campaigning, 0).otherwise(1)).over(
            by_node.rowsBetween(Window.unboundedPreceding, -1)
        ),
        sf.lit(0),
    )
    in_campaign = Window.partitionBy("run_id", "node", "campaign")
    return (
        states.withColumn("campaign", campaign)
        .withColumn("campaign_start_ms", sf.min("time_ms").over(in_campaign))
        .withColumn("candidacies", sf.count(sf.when(role == "Candidate", True)).over(in_campaign))
        .where((role == "Leader") & (sf.coalesce(sf.col("from_role"), sf.lit("")) != "Leader"))
        .select(
            "run_id",
            "scenario",
            sf.col("node").alias("leader"),
            "epoch",
            sf.col("time_ms").alias("elected_ms"),
            "campaign_start_ms",
            (sf.col("time_ms") - sf.col("campaign_start_ms")).alias("election_ms"),
            "candidacies",
        )
    )


def fault_recovery(events: DataFrame) -> DataFrame:
    """One row per injected fault: ``run_id, scenario, seq, time_ms, fault, fault_index,
    targets, recovered_ms`` (time of the next commit on a leader, null if none came) and
    ``recovery_ms``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    kind = sf.col("kind")
    marks = events.where(_is_fault() | _leader_commit()).select(
        "run_id",
        "scenario",
        "seq",
        "time_ms",
        (kind == "fault_injected").alias("is_fault"),
        sf.col("details.fault").alias("fault"),
        sf.col("details.index").alias("fault_index"),
        sf.col("details.targets").alias("targets"),
        sf.when(kind == "batch_committed", sf.col("time_ms")).alias("commit_ms"),
    )
    after = Window.partitionBy("run_id").orderBy("seq").rowsBetween(1, Window.unboundedFollowing)
    return (
        marks.withColumn("recovered_ms", sf.first("commit_ms", ignorenulls=True).over(after))
        .where("is_fault")
        .select(
            "run_id",
            "scenario",
            "seq",
            "time_ms",
            "fault",
            "fault_index",
            "targets",
            "recovered_ms",
            (sf.col("recovered_ms") - sf.col("time_ms")).alias("recovery_ms"),
        )
    )


def unavailability(events: DataFrame, min_gap_ms: int = DEFAULT_MIN_GAP_MS) -> DataFrame:
    """One row per unavailability window: ``run_id, scenario, start_ms, end_ms, duration_ms,
    attempts`` (appends tried in it) and ``open`` (the run ended in it)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    kind = sf.col("kind")
    is_append = kind.isin("append_accepted", "append_refused")
    run = Window.partitionBy("run_id")
    ordered = run.orderBy("seq")
    marks = (
        events.where(_leader_commit() | is_append | (kind == "run_finished"))
        .select(
            "run_id",
            "scenario",
            "seq",
            "time_ms",
            _leader_commit().alias("is_commit"),
            sf.when(is_append, 1).otherwise(0).alias("is_append"),
        )
        .withColumn(
            "appends", sf.sum("is_append").over(ordered.rowsBetween(Window.unboundedPreceding, 0))
        )
        .withColumn("run_end_ms", sf.max("time_ms").over(run))
        .withColumn("total_appends", sf.sum("is_append").over(run))
        .where("is_commit")
    )
    gaps = (
        marks.withColumn("next_ms", sf.lead("time_ms").over(ordered))
        .withColumn("next_appends", sf.lead("appends").over(ordered))
        .select(
            "run_id",
            "scenario",
            sf.col("time_ms").alias("start_ms"),
            sf.coalesce("next_ms", "run_end_ms").alias("end_ms"),
            (sf.coalesce("next_appends", "total_appends") - sf.col("appends")).alias("attempts"),
            sf.col("next_ms").isNull().alias("open"),
        )
        .withColumn("duration_ms", sf.col("end_ms") - sf.col("start_ms"))
    )
    return gaps.where((sf.col("duration_ms") >= min_gap_ms) & (sf.col("attempts") > 0)).select(
        "run_id", "scenario", "start_ms", "end_ms", "duration_ms", "attempts", "open"
    )


def committed_batches(events: DataFrame, runs: DataFrame) -> DataFrame:
    """Data batches at their first delivery on each node: ``run_id, scenario, voters, node,
    role, offset, count, latency_ms, on_voter``. A node handed its log again after a restart
    re-delivers batches with a latency that includes its downtime; those are left out."""
    from pyspark.sql import functions as sf

    shape = runs.select("run_id", "voters")
    # The first delivery is the one of least seq: an aggregate, not a sort of every delivery.
    first = sf.min(sf.struct("seq", "scenario", "role", "count", "latency_ms")).alias("first")
    return (
        events.where(
            (sf.col("kind") == "batch_committed")
            & (sf.col("count") > 0)
            & (sf.col("latency_ms") >= 0)
        )
        .groupBy("run_id", "node", "offset")
        .agg(first)
        .select(
            "run_id",
            "first.scenario",
            "node",
            "first.role",
            "offset",
            "first.count",
            "first.latency_ms",
        )
        .join(sf.broadcast(shape), "run_id")
        .withColumn("on_voter", sf.col("node") <= sf.col("voters"))
    )


def _scoped(batches: DataFrame) -> DataFrame:
    """Each delivery once per scope it counts in: ``leader`` (on the leader), ``voters`` (on
    any voter, the leader included)."""
    from pyspark.sql import functions as sf

    on_leader = batches.where(sf.col("role") == "Leader").withColumn("scope", sf.lit("leader"))
    on_voters = batches.where("on_voter").withColumn("scope", sf.lit("voters"))
    return on_leader.unionByName(on_voters)


def commit_latency(batches: DataFrame, keys: tuple[str, ...] = ("scenario", "voters")) -> DataFrame:
    """Commit latency by ``keys`` and scope: ``batches, p50_ms, p90_ms, p99_ms, max_ms``."""
    from pyspark.sql import functions as sf

    quantiles = sf.percentile_approx("latency_ms", list(PERCENTILES), 10_000)
    return (
        _scoped(batches)
        .groupBy(*keys, "scope")
        .agg(
            sf.count(sf.lit(1)).alias("batches"),
            quantiles.alias("q"),
            sf.max("latency_ms").alias("max_ms"),
        )
        .select(
            *keys,
            "scope",
            "batches",
            *[sf.col("q")[i].alias(_pname(p)) for i, p in enumerate(PERCENTILES)],
            "max_ms",
        )
    )


def commit_latency_cdf(batches: DataFrame, scope: str = "leader") -> DataFrame:
    """Per scenario, the commit latency at the percentiles 1 ... 100 (``scenario, quantiles``):
    the points of a CDF plot."""
    from pyspark.sql import functions as sf

    return (
        _scoped(batches)
        .where(sf.col("scope") == scope)
        .groupBy("scenario")
        .agg(sf.percentile_approx("latency_ms", list(_CDF_POINTS), 10_000).alias("quantiles"))
        .withColumn("fractions", sf.array(*[sf.lit(p) for p in _CDF_POINTS]))
    )


def election_histogram(elections_df: DataFrame, bucket_ms: int = 50) -> DataFrame:
    """Election latencies counted in buckets of ``bucket_ms``: ``bucket_ms, elections``."""
    from pyspark.sql import functions as sf

    bucket = (sf.floor(sf.col("election_ms") / bucket_ms) * bucket_ms).cast("bigint")
    return elections_df.groupBy(bucket.alias("bucket_ms")).agg(
        sf.count(sf.lit(1)).alias("elections")
    )


def run_table(
    runs: DataFrame,
    elections_df: DataFrame,
    windows: DataFrame,
    batches: DataFrame,
    recoveries: DataFrame,
) -> DataFrame:
    """One row per run with its metrics: ``run_info`` plus ``first_leader_ms, elections,
    candidacies, unavailable_windows, unavailable_ms, records, records_per_s,
    commit_p99_ms`` (on the leader) and ``unrecovered_faults``."""
    from pyspark.sql import functions as sf

    per_election = elections_df.groupBy("run_id").agg(
        sf.min("elected_ms").alias("first_leader_ms"),
        sf.count(sf.lit(1)).alias("elections"),
        sf.sum("candidacies").alias("candidacies"),
    )
    per_window = windows.groupBy("run_id").agg(
        sf.count(sf.lit(1)).alias("unavailable_windows"),
        sf.sum("duration_ms").alias("unavailable_ms"),
    )
    per_batch = (
        batches.select("run_id", "offset", "count")
        .distinct()
        .groupBy("run_id")
        .agg(sf.sum("count").alias("records"))
    )
    on_leader = (
        batches.where(sf.col("role") == "Leader")
        .groupBy("run_id")
        .agg(sf.percentile_approx("latency_ms", 0.99, 10_000).alias("commit_p99_ms"))
    )
    per_fault = recoveries.groupBy("run_id").agg(
        sf.count(sf.when(sf.col("recovery_ms").isNull(), True)).alias("unrecovered_faults")
    )
    table = runs
    for part in (per_election, per_window, per_batch, on_leader, per_fault):
        table = table.join(part, "run_id", "left")
    zero = (
        "elections",
        "candidacies",
        "unavailable_windows",
        "unavailable_ms",
        "records",
        "unrecovered_faults",
    )
    return table.fillna(0, subset=list(zero)).withColumn(
        "records_per_s",
        sf.when(
            sf.col("simulated_ms") > 0,
            sf.round(sf.col("records") * 1000.0 / sf.col("simulated_ms"), 2),
        ),
    )


def by_scenario(table: DataFrame, latency: DataFrame, violations: DataFrame) -> DataFrame:
    """The summary per scenario, from :func:`run_table`, :func:`commit_latency` by scenario
    and the safety violations."""
    from pyspark.sql import functions as sf

    summary = table.groupBy("scenario").agg(
        sf.count(sf.lit(1)).alias("runs"),
        sf.sum("events").alias("events"),
        sf.concat_ws("-", sf.min("voters"), sf.max("voters")).alias("voters"),
        sf.percentile_approx("first_leader_ms", 0.5, 10_000).alias("first_leader_p50_ms"),
        sf.max("first_leader_ms").alias("first_leader_max_ms"),
        sf.round(sf.avg("elections"), 2).alias("elections_per_run"),
        sf.count(sf.when(sf.col("unavailable_windows") > 0, True)).alias("runs_unavailable"),
        sf.sum("unavailable_windows").alias("unavailable_windows"),
        sf.max("unavailable_ms").alias("unavailable_max_ms"),
        sf.round(sf.avg("records_per_s"), 1).alias("records_per_s"),
        sf.sum("unrecovered_faults").alias("unrecovered_faults"),
        sf.sum("logged_violations").alias("logged_violations"),
    )
    latency_cols = []
    for scope in ("leader", "voters"):
        latency_cols.append(
            latency.where(sf.col("scope") == scope).select(
                "scenario",
                *[sf.col(_pname(p)).alias(f"{scope}_{_pname(p)}") for p in PERCENTILES],
            )
        )
    found = violations.groupBy("scenario").agg(sf.count(sf.lit(1)).alias("violations"))
    for part in (*latency_cols, found):
        summary = summary.join(part, "scenario", "left")
    return summary.fillna(0, subset=["violations"])


def scenario_parameters(events: DataFrame) -> DataFrame:
    """What each scenario's runs were given, to read its numbers by: one row per scenario with
    ``runs``, the ``min_``/``max_`` of ``voters``, ``observers`` and ``election_timeout_ms``;
    the links every run started with (``link_latency_lo_ms``, ``link_latency_hi_ms``, the
    largest ``link_drop``, ``link_duplicate``, ``link_reorder``); the range of what ``network``
    faults set (``min_drop`` (above 0) / ``max_drop``, the same for ``duplicate`` and
    ``reorder``, ``latency_lo_ms`` / ``latency_hi_ms``); and ``injected``, the faults and
    repairs by kind (``fault``, ``count``, ``repair``)."""
    from pyspark.sql import functions as sf

    kind, details = sf.col("kind"), sf.col("details")
    link = details["config"]["network"]
    shape = (
        events.where(kind == "run_started")
        .groupBy("scenario")
        .agg(
            sf.countDistinct("run_id").alias("runs"),
            *[
                aggregate(details[key]).alias(f"{name}_{key}")
                for key in ("voters", "observers")
                for name, aggregate in (("min", sf.min), ("max", sf.max))
            ],
            sf.min(details["config"]["election_timeout_ms"]).alias("min_election_timeout_ms"),
            sf.max(details["config"]["election_timeout_ms"]).alias("max_election_timeout_ms"),
            sf.min(link["latency_ms"][0]).alias("link_latency_lo_ms"),
            sf.max(link["latency_ms"][1]).alias("link_latency_hi_ms"),
            *[
                sf.max(link[rate]).alias(f"link_{rate}")
                for rate in ("drop", "duplicate", "reorder")
            ],
        )
    )
    network = events.where((kind == "fault_injected") & (details["fault"] == "network"))
    # The smallest rate above 0: a fault that sets a rate back to 0 ends the loss, and a
    # range from 0 would hide how much loss there was.
    changes = network.groupBy("scenario").agg(
        *[
            column
            for rate in ("drop", "duplicate", "reorder")
            for column in (
                sf.min(sf.when(details[rate] > 0, details[rate])).alias(f"min_{rate}"),
                sf.max(details[rate]).alias(f"max_{rate}"),
            )
        ],
        sf.min(details["latency_ms"][0]).alias("latency_lo_ms"),
        sf.max(details["latency_ms"][1]).alias("latency_hi_ms"),
    )
    injected = (
        events.where(kind == "fault_injected")
        .groupBy("scenario", details["fault"].alias("fault"))
        .count()
        .groupBy("scenario")
        .agg(
            sf.sort_array(
                sf.collect_list(
                    sf.struct(
                        sf.col("fault").isin(*REPAIRS).alias("repair"),
                        "fault",
                        "count",
                    )
                )
            ).alias("injected")
        )
    )
    return shape.join(changes, "scenario", "left").join(injected, "scenario", "left")


def by_fault(recoveries: DataFrame, keys: tuple[str, ...] = ("fault",)) -> DataFrame:
    """Recovery time by fault kind (and ``keys``): ``faults, recovered, p50_ms, p90_ms,
    p99_ms, max_ms``."""
    from pyspark.sql import functions as sf

    quantiles = sf.percentile_approx("recovery_ms", list(PERCENTILES), 10_000)
    return (
        recoveries.groupBy(*keys)
        .agg(
            sf.count(sf.lit(1)).alias("faults"),
            sf.count("recovery_ms").alias("recovered"),
            quantiles.alias("q"),
            sf.max("recovery_ms").alias("max_ms"),
        )
        .select(
            *keys,
            "faults",
            "recovered",
            *[sf.col("q")[i].alias(_pname(p)) for i, p in enumerate(PERCENTILES)],
            "max_ms",
        )
    )


def by_cluster_size(table: DataFrame) -> DataFrame:
    """Elections and latency by the number of voters."""
    from pyspark.sql import functions as sf

    return table.groupBy("voters").agg(
        sf.count(sf.lit(1)).alias("runs"),
        sf.percentile_approx("first_leader_ms", 0.5, 10_000).alias("first_leader_p50_ms"),
        sf.round(sf.avg("elections"), 2).alias("elections_per_run"),
        sf.percentile_approx("commit_p99_ms", 0.5, 10_000).alias("commit_p99_median_ms"),
        sf.round(sf.avg("records_per_s"), 1).alias("records_per_s"),
    )


def _pname(p: float) -> str:
    return f"p{round(p * 100):d}_ms"
