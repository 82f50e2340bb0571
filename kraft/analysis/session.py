"""The SparkSession the analysis runs in, and the lazy import of the ``spark`` extra."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from kraft.errors import KraftError

__all__ = [
    "DEFAULT_MASTER",
    "LOCAL_DRIVER_JAVA_OPTIONS",
    "SparkUnavailableError",
    "require_pyspark",
    "spark_session",
]

#: The master when none is given and the job was not launched by ``spark-submit``.
DEFAULT_MASTER = "local[*]"

#: The driver JVM's options for a local master, whose JVM mostly schedules small jobs: the C1
#: compiler only (C2's compiling would compete for the cores before it pays off; a cold job
#: takes half the time), with the code cache tiered compilation would have had (240 MB): C1
#: alone defaults to 48 MB, which a long session of small jobs fills ("Out of space in
#: CodeCache"), and the JVM then fails jobs.
LOCAL_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"

_EXTRA_HINT = "install the extra: pip install 'kraft[spark]'"


class SparkUnavailableError(KraftError):
    """pyspark (or matplotlib) is not installed, or Spark cannot start (no Java)."""


def require_pyspark() -> None:
    """Check that pyspark can be imported, else raise :class:`SparkUnavailableError` naming
    the extra."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise SparkUnavailableError(
            f"kraft analyze needs pyspark, which is not installed: {_EXTRA_HINT}"
        ) from exc


def require_matplotlib() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (plots go to PNG files)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SparkUnavailableError(
            f"the analysis report needs matplotlib, which is not installed: {_EXTRA_HINT}"
        ) from exc
    return plt


def launched_by_spark_submit() -> bool:
    """Whether this process is a driver started by ``spark-submit`` (which then owns the
    master and the configuration)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(
    master: str | None = None,
    app_name: str = "kraft-analyze",
    conf: Mapping[str, str] | None = None,
    progress: bool = False,
) -> Any:
    """A SparkSession for the analysis.

    ``master`` ``None`` keeps what ``spark-submit`` set, else runs :data:`DEFAULT_MASTER`. A
    local master gets small shuffles (these jobs aggregate small tables) and no UI; ``conf``
    overrides anything. ``progress`` shows Spark's console progress bar on stderr.
    """
    require_pyspark()
    from pyspark.sql import SparkSession

    if master is None and not launched_by_spark_submit():
        master = DEFAULT_MASTER
    builder = SparkSession.builder.appName(app_name)
    settings: dict[str, str] = {
        "spark.ui.showConsoleProgress": "true" if progress else "false",
        # Timestamps are simulated milliseconds; nothing here depends on the machine's zone.
        "spark.sql.session.timeZone": "UTC",
    }
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            settings.update(
                {
                    "spark.ui.enabled": "false",
                    "spark.sql.shuffle.partitions": "8",
                    "spark.driver.host": "127.0.0.1",
                    "spark.driver.bindAddress": "127.0.0.1",
                    "spark.driver.memory": os.environ.get("KRAFT_SPARK_DRIVER_MEMORY", "2g"),
                }
            )
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # py4j / Java startup: no java on PATH, a bad master URL
        raise SparkUnavailableError(f"cannot start Spark (master {master}): {exc}") from exc
    session.sparkContext.setLogLevel("ERROR")
    return session
