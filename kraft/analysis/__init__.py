"""Spark analysis of simulation event logs: ``kraft analyze`` (extra: ``kraft[spark]``).

Thousands of simulated runs say how kraft behaves: how long elections take under each fault, how
often a seed hits unavailability, where commit latency goes. This package reads the event logs
of ``kraft sim sweep`` (schema v1, docs/simulation.md) into Spark with an explicit schema and
computes everything as DataFrame code, so the same job runs on embedded local Spark or, through
``spark-submit``, on a cluster:

- :mod:`kraft.analysis.events` — the schema and the reader (JSON Lines or Parquet);
- :mod:`kraft.analysis.metrics` — elections, fault recovery, unavailability, commit latency,
  throughput, per run and by scenario, cluster size and fault kind;
- :mod:`kraft.analysis.controller` — a controller cluster's fencing, partition leader
  elections, write latency and failovers;
- :mod:`kraft.analysis.safety` — Raft's safety properties re-checked across nodes;
- :mod:`kraft.analysis.report` — Parquet tables, PNG plots and ``report.md``;
- :mod:`kraft.analysis.job` — the whole job: ``kraft analyze`` and the ``spark-submit`` entry.

Importing this package needs no Spark: pyspark and matplotlib are imported by the functions
that use them, and a missing one raises :class:`SparkUnavailableError` naming the extra.
"""

from __future__ import annotations

from kraft.analysis.events import EVENT_SCHEMA_DDL, find_event_logs, load_events
from kraft.analysis.session import SparkUnavailableError, require_pyspark, spark_session

__all__ = [
    "EVENT_SCHEMA_DDL",
    "SparkUnavailableError",
    "find_event_logs",
    "load_events",
    "require_pyspark",
    "spark_session",
]
