"""The one local SparkSession of the analysis tests (small shuffles, no UI)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kraft.analysis import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    session = spark_session(
        "local[2]",
        app_name="kraft-analysis-tests",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
            # The JVM's C1 compiler only: these small jobs end before C2 pays off, and
            # its compiling competes for the two cores (a cold job takes half the time).
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        },
    )
    yield session
    session.stop()
