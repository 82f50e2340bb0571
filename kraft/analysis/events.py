"""The event log (schema v1, docs/simulation.md) as a Spark DataFrame.

The schema is written out, never inferred: inference reads every file twice and guesses types
from whatever lines it sees (a ``details`` key that one run never writes would vanish). A field
at its default is not written in the file; :func:`load_events` puts the default (-1) back, so
every job can compare integers without null checks. ``details`` keeps the keys the kinds of
schema v1 define, each typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kraft.analysis.session import require_pyspark

__all__ = [
    "ANALYSED_KINDS",
    "EVENTS_FILE",
    "EVENT_SCHEMA_DDL",
    "NOT_FOUND_HINT",
    "STATE_KINDS",
    "SWEEP_EVENTS_DIR",
    "analysed",
    "find_event_logs",
    "load_events",
    "parquet_dataset",
    "project",
    "with_details",
]

#: The event log's name in a run directory (``kraft.simulation.scenario.EVENTS_FILE``).
EVENTS_FILE = "events.jsonl"

#: The Parquet dataset of events under the ``--out`` of ``kraft sim sweep --engine spark``
#: (partitioned by scenario: ``events/scenario=<name>/part-....parquet``).
SWEEP_EVENTS_DIR = "events"

#: Every ``details`` key of schema v1, by the kinds that write it.
_DETAILS_DDL = ", ".join(
    [
        # run_started
        "voters: INT",
        "observers: INT",
        "kraft_version: INT",
        "config: STRUCT<election_timeout_ms: BIGINT, fetch_timeout_ms: BIGINT, "
        "append_linger_ms: BIGINT, fetch_max_wait_ms: BIGINT, network: STRUCT<latency_ms: "
        "ARRAY<BIGINT>, `drop`: DOUBLE, duplicate: DOUBLE, reorder: DOUBLE>>",
        # node_started, state_changed
        "incarnation: INT",
        "from_role: STRING",
        "from_epoch: INT",
        # vote_granted, vote_refused
        "pre_vote: BOOLEAN",
        "error_code: INT",
        # message_dropped
        "reason: STRING",
        # fault_injected, fault_healed, fault_suppressed
        "fault: STRING",
        "index: INT",
        "targets: ARRAY<INT>",
        "groups: ARRAY<ARRAY<INT>>",
        "sources: ARRAY<INT>",
        "destinations: ARRAY<INT>",
        "`drop`: DOUBLE",
        "duplicate: DOUBLE",
        "reorder: DOUBLE",
        "latency_ms: ARRAY<BIGINT>",
        "offset: BIGINT",
        "position: BIGINT",
        "mask: INT",
        "snapshot_offset: BIGINT",
        "onto_offset: BIGINT",
        # invariant_violated, expectation_failed, invariants_checked, run_error, run_finished
        "invariant: STRING",
        "nodes: ARRAY<INT>",
        "message: STRING",
        "checks: BIGINT",
        "violations: INT",
        "error: STRING",
        "events: BIGINT",
        "faults: INT",
        # voter_change_requested, voter_change_answered (and `error`, above)
        "change: STRING",
        # op_invoked, op_completed (the kv workload; and `error`, above)
        "client: INT",
        "op: STRING",
        "`key`: STRING",
        "written: STRING",
        "expected: STRING",
        "outcome: STRING",
        "`read`: STRING",
        "swapped: BOOLEAN",
        # snapshot_created, snapshot_loaded
        "snapshot_epoch: INT",
        "value: BIGINT",
        "log_start_offset: BIGINT",
        # broker_registered, broker_fenced, broker_unfenced, partition_leader_changed,
        # controller_op_completed (and `op`, `outcome`, above)
        "broker: INT",
        "broker_epoch: BIGINT",
        "topic: STRING",
        "`partition`: INT",
        "leader: INT",
        "previous_leader: INT",
        "leader_epoch: INT",
        "partition_epoch: INT",
        "isr: ARRAY<INT>",
    ]
)

#: The top-level fields of schema v1 with their Spark types, in the field order of the file.
_FIELDS = (
    ("v", "INT"),
    ("run_id", "STRING"),
    ("seed", "BIGINT"),
    ("scenario", "STRING"),
    ("time_ms", "BIGINT"),
    ("seq", "BIGINT"),
    ("kind", "STRING"),
    ("node", "INT"),
    ("epoch", "INT"),
    ("leader", "INT"),
    ("role", "STRING"),
    ("log_end_offset", "BIGINT"),
    ("high_watermark", "BIGINT"),
    ("offset", "BIGINT"),
    ("base_offset", "BIGINT"),
    ("checksum", "BIGINT"),
    ("count", "INT"),
    ("latency_ms", "BIGINT"),
    ("peer", "INT"),
    ("message", "STRING"),
    ("details", f"STRUCT<{_DETAILS_DDL}>"),
)

#: The event-log schema v1 as a Spark DDL string (the field order of the file).
EVENT_SCHEMA_DDL = ", ".join(f"{name} {ddl}" for name, ddl in _FIELDS)

#: The top-level fields whose default is -1 (absent from a line when at the default).
_MINUS_ONE_DEFAULTS = (
    "node",
    "epoch",
    "leader",
    "log_end_offset",
    "high_watermark",
    "offset",
    "base_offset",
    "checksum",
    "count",
    "latency_ms",
    "peer",
)

#: The kinds that carry a node's state right after the event (docs/simulation.md, *state*).
STATE_KINDS = (
    "node_started",
    "state_changed",
    "vote_granted",
    "vote_refused",
    "append_accepted",
)

NOT_FOUND_HINT = (
    "expected a sweep directory (<scenario>/seed-<N>/events.jsonl, or events/ in Parquet "
    "from --engine spark), a run directory (events.jsonl), or a Parquet directory of events "
    "(kraft analyze --save-events)"
)


def parquet_dataset(path: Path) -> Path | None:
    """The Parquet dataset of events at ``path``: ``path/events`` (a Spark sweep's ``--out``,
    looked at first: its ``sweep.parquet`` summary is no event) or ``path`` itself (flat, as
    ``kraft analyze --save-events`` writes it, or partitioned Hive style as
    ``scenario=<name>/``); ``None`` if there is none."""
    for candidate in (path / SWEEP_EVENTS_DIR, path):
        if candidate.is_dir() and (
            any(candidate.glob("*.parquet")) or any(candidate.glob("*=*/*.parquet"))
        ):
            return candidate
    return None


def find_event_logs(source: Path) -> list[Path]:
    """Every ``events.jsonl`` under ``source``, sorted: the file itself, a run directory, a
    sweep directory (``<scenario>/seed-<N>/``) or any tree holding run directories."""
    if source.is_file():
        return [source]
    if (source / EVENTS_FILE).is_file():
        return [source / EVENTS_FILE]
    sweep_layout = sorted(source.glob(f"*/seed-*/{EVENTS_FILE}"))
    return sweep_layout or sorted(source.rglob(EVENTS_FILE))


def load_events(spark: Any, source: str | Path | Sequence[str], fmt: str = "auto") -> Any:
    """The events of ``source`` as a DataFrame with the columns of :data:`EVENT_SCHEMA_DDL`,
    defaults filled in, and lines that are not events (no ``run_id`` or ``kind``) left out.

    ``source`` is a local path (see :func:`find_event_logs`; a Parquet dataset, see
    :func:`parquet_dataset`, is read as Parquet), a URI or glob Spark can read
    (``hdfs://.../*/seed-*/events.jsonl``), or a list of paths. ``fmt``: ``auto``, ``json``
    or ``parquet``. Raises ``FileNotFoundError`` when a local ``source`` holds no event log.
    """
    require_pyspark()
    from pyspark.sql import functions as sf

    paths: list[str]
    if isinstance(source, (str, Path)) and "://" not in str(source):
        local = Path(source)
        dataset = parquet_dataset(local) if fmt in ("auto", "parquet") else None
        if fmt == "parquet" or dataset is not None:
            fmt, paths = "parquet", [str(dataset or local)]
        else:
            files = find_event_logs(local) if local.exists() else []
            if not files:
                raise FileNotFoundError(f"no event log in {local}: {NOT_FOUND_HINT}")
            fmt, paths = "json", [str(path) for path in files]
    else:
        paths = [str(source)] if isinstance(source, (str, Path)) else [str(s) for s in source]
        fmt = "json" if fmt == "auto" else fmt

    if fmt == "parquet":
        frame = spark.read.schema(EVENT_SCHEMA_DDL).parquet(*paths)
    else:
        # PERMISSIVE: a torn last line (a run killed mid-write) becomes a row of nulls, which
        # the filter below drops, instead of failing the whole job.
        frame = spark.read.schema(EVENT_SCHEMA_DDL).option("mode", "PERMISSIVE").json(paths)
    frame = frame.where(sf.col("run_id").isNotNull() & sf.col("kind").isNotNull())
    # In the schema's order: a partitioned dataset has its partition column (scenario) last.
    return frame.select(
        *[
            sf.coalesce(sf.col(name), sf.lit(-1)).cast(ddl).alias(name)
            if name in _MINUS_ONE_DEFAULTS
            else sf.col(name)
            for name, ddl in _FIELDS
        ]
    )


#: The ``details`` the analysis reads, as top-level columns (name, path in ``details``, type)
#: of atomic types, arrays and structs as JSON text: Spark reads a cache of atomic columns
#: column by column (its vectorized reader takes no struct, array or map), and
#: :func:`with_details` puts ``details`` back together from them.
_FLAT_DETAILS = (
    ("details_voters", "voters", "INT"),
    ("details_observers", "observers", "INT"),
    ("details_from_role", "from_role", "STRING"),
    ("details_fault", "fault", "STRING"),
    ("details_index", "index", "INT"),
    ("details_targets", "targets", "ARRAY<INT>"),
    ("details_drop", "drop", "DOUBLE"),
    ("details_duplicate", "duplicate", "DOUBLE"),
    ("details_reorder", "reorder", "DOUBLE"),
    ("details_latency_ms", "latency_ms", "ARRAY<BIGINT>"),
    ("details_election_timeout_ms", "config.election_timeout_ms", "BIGINT"),
    (
        "details_network",
        "config.network",
        "STRUCT<latency_ms: ARRAY<BIGINT>, `drop`: DOUBLE, duplicate: DOUBLE, reorder: DOUBLE>",
    ),
    ("details_broker", "broker", "INT"),
    ("details_topic", "topic", "STRING"),
    ("details_partition", "partition", "INT"),
    ("details_leader", "leader", "INT"),
    ("details_op", "op", "STRING"),
    ("details_outcome", "outcome", "STRING"),
)

#: The kinds whose ``details`` the analysis reads; :func:`project` leaves the others' null.
_DETAILS_KINDS = (
    "run_started",
    "state_changed",
    "fault_injected",
    "broker_fenced",
    "partition_leader_changed",
    "controller_op_completed",
)

#: The kinds the metrics and the safety checks read, beyond the per-run counts of
#: :func:`kraft.analysis.metrics.run_info` (which count every event): a quarter of a log
#: with message events, whose three quarters are ``message_*``.
ANALYSED_KINDS = (
    *STATE_KINDS,
    "run_started",
    "run_finished",
    "append_refused",
    "batch_committed",
    "fault_injected",
    # The controller's (kraft.analysis.controller): few, in controller clusters only.
    "controller_claimed",
    "controller_renounced",
    "broker_fenced",
    "partition_leader_changed",
    "controller_op_completed",
)

#: The top-level columns the analysis reads.
_READ = (
    "run_id",
    "seed",
    "scenario",
    "time_ms",
    "seq",
    "kind",
    "node",
    "epoch",
    "role",
    "high_watermark",
    "offset",
    "base_offset",
    "checksum",
    "count",
    "latency_ms",
)


def project(events: Any) -> Any:
    """The columns the analysis reads, all of atomic types: ``details`` becomes the columns
    of :data:`_FLAT_DETAILS`, null on the kinds where the analysis reads none. What is worth
    caching; :func:`with_details` gives back the events' shape."""
    require_pyspark()
    from pyspark.sql import functions as sf

    has_details = sf.col("kind").isin(*_DETAILS_KINDS)

    def flat(path: str, ddl: str) -> Any:
        value = sf.col(f"details.{path}")
        return value if "<" not in ddl else sf.to_json(value)

    return events.select(
        *_READ,
        *[sf.when(has_details, flat(path, ddl)).alias(name) for name, path, ddl in _FLAT_DETAILS],
    )


def with_details(flat: Any) -> Any:
    """The events of :func:`project` with ``details`` put back (the keys the analysis reads),
    in the shape :func:`load_events` gives: what the metrics and the safety checks take."""
    require_pyspark()
    from pyspark.sql import functions as sf

    def value(name: str, ddl: str) -> Any:
        return sf.col(name) if "<" not in ddl else sf.from_json(sf.col(name), ddl)

    fields = {
        path: value(name, ddl).alias(path.rsplit(".", 1)[-1]) for name, path, ddl in _FLAT_DETAILS
    }
    config = [fields.pop(path) for path in ("config.election_timeout_ms", "config.network")]
    details = sf.struct(*fields.values(), sf.struct(*config).alias("config"))
    return flat.select(
        *_READ, sf.when(sf.col("kind").isin(*_DETAILS_KINDS), details).alias("details")
    )


def analysed(events: Any) -> Any:
    """The events of :data:`ANALYSED_KINDS`: all that the metrics but the per-run counts and
    the safety checks read."""
    require_pyspark()
    from pyspark.sql import functions as sf

    return events.where(sf.col("kind").isin(*ANALYSED_KINDS))
