"""Fixtures shared across the test folders: the one local SparkSession of the analysis tests
(small shuffles, no UI), and a quorum of real node processes for the runtime tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraft.analysis import spark_session
from kraft.analysis.session import LOCAL_DRIVER_JAVA_OPTIONS
from kraft.runtime.processes import LOOPBACK_TIMERS, LocalQuorum

#: How long a quorum of real processes may take to start (a loaded 2-core CI machine).
START_TIMEOUT_S = 60.0


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    # Python workers (the Spark engine of the sweep) run this interpreter, not `python3`.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = spark_session(
        "local[2]",
        app_name="kraft-analysis-tests",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
            "spark.driver.extraJavaOptions": LOCAL_DRIVER_JAVA_OPTIONS,
        },
    )
    yield session
    session.stop()


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[LocalQuorum]:
    """Three ``kraft node`` processes on loopback with the loopback timers, started; killed
    at the end (graceful stops are tested on their own)."""
    local = LocalQuorum(tmp_path / "quorum", 3, quorum=LOOPBACK_TIMERS)
    try:
        local.start(START_TIMEOUT_S)
        yield local
    finally:
        local.close(kill=True)
