"""Raft's safety properties, re-checked at scale from the event logs alone.

The simulator checks its invariants while it runs; these checks look again, across every node
of every run, at what the logs say happened — so a log from another build, or one edited by
hand, is judged on its own. Each check returns its violations with the columns of
:data:`VIOLATION_COLUMNS`; no violation, no row.

- ``committed_data``: every (run, offset) was committed as the same batch — first and last
  offset, epoch, CRC — on every node that delivered it (log matching);
- ``single_leader``: at most one node led each (run, epoch);
- ``monotonic_high_watermark``: a node's high watermark never decreases while it runs (a
  restart starts it again from 0: the high watermark is not persisted);
- ``monotonic_epoch``: a node's epoch never decreases, across restarts (the epoch is persisted)
  but not across a wiped disk.
"""

from __future__ import annotations

from functools import reduce
from operator import or_
from typing import Any

from kraft.analysis.events import STATE_KINDS

__all__ = [
    "CHECKS",
    "VIOLATION_COLUMNS",
    "committed_data",
    "monotonic_epoch",
    "monotonic_high_watermark",
    "single_leader",
    "violations",
]

DataFrame = Any

#: The columns of every check's result.
VIOLATION_COLUMNS = ("check", "run_id", "scenario", "time_ms", "node", "epoch", "offset", "detail")

#: The checks, with what each asserts (for the report).
CHECKS: dict[str, str] = {
    "committed_data": "every (run, offset) committed as the same batch on every node",
    "single_leader": "at most one leader per (run, epoch)",
    "monotonic_high_watermark": "a running node's high watermark never decreases",
    "monotonic_epoch": "a node's epoch never decreases (a wiped disk excepted)",
}


def _shape(frame: DataFrame, check: str) -> DataFrame:
    from pyspark.sql import functions as sf

    return frame.select(
        sf.lit(check).alias("check"),
        "run_id",
        "scenario",
        sf.col("time_ms").cast("bigint"),
        sf.col("node").cast("int"),
        sf.col("epoch").cast("int"),
        sf.col("offset").cast("bigint"),
        "detail",
    )


def committed_data(events: DataFrame) -> DataFrame:
    """Deliveries of an offset whose batch differs from the first delivery of that offset in
    the run."""
    from pyspark.sql import functions as sf

    # One row per offset of each committed batch, so batches cut at different boundaries on
    # two nodes are compared too. A checksum of -1: the node's log no longer holds the batch.
    deliveries = events.where(
        (sf.col("kind") == "batch_committed")
        & (sf.col("checksum") >= 0)
        & (sf.col("base_offset") >= 0)
    ).select(
        "run_id",
        "scenario",
        "seq",
        "time_ms",
        "node",
        "epoch",
        "base_offset",
        sf.col("offset").alias("last_offset"),
        "checksum",
        sf.explode(sf.sequence("base_offset", "offset")).alias("offset"),
    )
    # In a good log every offset was committed as one batch. The offsets committed as more
    # than one batch come out of a hash aggregate of numbers (no sort of every delivery);
    # their deliveries alone are compared with the first one (least seq), the reference.
    fields = ("epoch", "base_offset", "last_offset", "checksum")
    bounds = [(sf.min(c).alias(f"min_{c}"), sf.max(c).alias(f"max_{c}")) for c in fields]
    split = (
        deliveries.groupBy("run_id", "offset")
        .agg(*[bound for pair in bounds for bound in pair])
        .where(reduce(or_, [sf.col(f"min_{c}") != sf.col(f"max_{c}") for c in fields]))
        .select("run_id", "offset")
    )
    suspect = deliveries.join(split, ["run_id", "offset"])
    reference = (
        suspect.groupBy("run_id", "offset")
        .agg(sf.min(sf.struct("seq", "node", *fields)).alias("ref"))
        .select(
            "run_id",
            "offset",
            *[sf.col(f"ref.{c}").alias(f"ref_{c}") for c in ("node", *fields)],
        )
    )
    differs = (
        (sf.col("epoch") != sf.col("ref_epoch"))
        | (sf.col("base_offset") != sf.col("ref_base_offset"))
        | (sf.col("last_offset") != sf.col("ref_last_offset"))
        | (sf.col("checksum") != sf.col("ref_checksum"))
    )

    def batch(prefix: str) -> Any:
        return sf.format_string(
            "[%d..%d] epoch %d crc %d",
            sf.col(f"{prefix}base_offset"),
            sf.col(f"{prefix}last_offset"),
            sf.col(f"{prefix}epoch"),
            sf.col(f"{prefix}checksum"),
        )

    found = (
        suspect.join(reference, ["run_id", "offset"])
        .where(differs)
        .withColumn(
            "detail",
            sf.format_string(
                "offset %d: node %d committed %s, node %d committed %s",
                sf.col("offset"),
                sf.col("node"),
                batch(""),
                sf.col("ref_node"),
                batch("ref_"),
            ),
        )
    )
    return _shape(found, "committed_data")


def single_leader(events: DataFrame) -> DataFrame:
    """(run, epoch) pairs led by more than one node, each at the first time a second leader
    showed up."""
    from pyspark.sql import functions as sf

    leaders = events.where(
        sf.col("kind").isin(*STATE_KINDS) & (sf.col("role") == "Leader") & (sf.col("epoch") >= 0)
    )
    per_node = leaders.groupBy("run_id", "scenario", "epoch", "node").agg(
        sf.min("time_ms").alias("since_ms")
    )
    found = (
        per_node.groupBy("run_id", "scenario", "epoch")
        .agg(sf.sort_array(sf.collect_list(sf.struct("since_ms", "node"))).alias("leaders"))
        .where(sf.size("leaders") > 1)
        .select(
            "run_id",
            "scenario",
            "epoch",
            sf.col("leaders")[1]["since_ms"].alias("time_ms"),
            sf.col("leaders")[1]["node"].alias("node"),
            sf.lit(-1).alias("offset"),
            sf.format_string(
                "epoch %d has %d leaders: nodes %s",
                sf.col("epoch"),
                sf.size("leaders"),
                sf.array_join(sf.col("leaders.node").cast("array<string>"), ", "),
            ).alias("detail"),
        )
    )
    return _shape(found, "single_leader")


def monotonic_high_watermark(events: DataFrame) -> DataFrame:
    """States of a node whose high watermark is below the one before, within one start of
    the node (``node_started`` begins a new one)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    kind = sf.col("kind")
    states = events.where(
        (kind.isin(*STATE_KINDS) | (kind == "batch_committed"))
        & (sf.col("node") >= 0)
        & (sf.col("high_watermark") >= 0)
        # A node going down logs its role as Down; its client, and high watermark, are gone.
        & (sf.coalesce(sf.col("role"), sf.lit("")) != "Down")
    ).select(
        "run_id",
        "scenario",
        "seq",
        "time_ms",
        "node",
        "epoch",
        "kind",
        "high_watermark",
        sf.when(kind == "node_started", 1).otherwise(0).alias("start"),
    )
    # A node_started row begins a life: it has no previous state in it.
    by_node = Window.partitionBy("run_id", "node").orderBy("seq")
    found = (
        states.withColumn(
            "previous", sf.when(sf.col("start") == 0, sf.lag("high_watermark").over(by_node))
        )
        .where(sf.col("high_watermark") < sf.col("previous"))
        .withColumn("offset", sf.lit(-1))
        .withColumn(
            "detail",
            sf.format_string(
                "node %d: high watermark %d after %d (%s)",
                sf.col("node"),
                sf.col("high_watermark"),
                sf.col("previous"),
                sf.col("kind"),
            ),
        )
    )
    return _shape(found, "monotonic_high_watermark")


def monotonic_epoch(events: DataFrame) -> DataFrame:
    """States of a node whose epoch is below the one before; a wipe of the node (its
    ``fault_injected`` names it as a target) begins anew."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    states = events.where(
        sf.col("kind").isin(*STATE_KINDS)
        & (sf.col("node") >= 0)
        & (sf.col("epoch") >= 0)
        & (sf.coalesce(sf.col("role"), sf.lit("")) != "Down")
    ).select(
        "run_id", "scenario", "seq", "time_ms", "node", "epoch", "kind", sf.lit(0).alias("wipe")
    )
    wipes = events.where(
        (sf.col("kind") == "fault_injected") & (sf.col("details.fault") == "wipe")
    ).select(
        "run_id",
        "scenario",
        "seq",
        "time_ms",
        sf.explode("details.targets").alias("node"),
        sf.lit(-1).alias("epoch"),
        "kind",
        sf.lit(1).alias("wipe"),
    )
    # The state right after a wipe has no previous state on its disk.
    by_node = Window.partitionBy("run_id", "node").orderBy("seq")
    after_state = sf.lag("wipe").over(by_node) == 0
    found = (
        states.unionByName(wipes)
        .withColumn("previous", sf.when(after_state, sf.lag("epoch").over(by_node)))
        .where((sf.col("wipe") == 0) & (sf.col("epoch") < sf.col("previous")))
        .withColumn("offset", sf.lit(-1))
        .withColumn(
            "detail",
            sf.format_string(
                "node %d: epoch %d after %d (%s)",
                sf.col("node"),
                sf.col("epoch"),
                sf.col("previous"),
                sf.col("kind"),
            ),
        )
    )
    return _shape(found, "monotonic_epoch")


def violations(events: DataFrame) -> DataFrame:
    """Every check's violations, in one DataFrame."""
    found = committed_data(events)
    for check in (single_leader, monotonic_high_watermark, monotonic_epoch):
        found = found.unionByName(check(events))
    return found
