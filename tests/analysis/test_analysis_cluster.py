"""The same job on a Spark standalone cluster: a master and two workers started with pyspark's
own ``spark-class`` on 127.0.0.1 (tests/simulation/spark_cluster.py, shared with the sweep's
cluster test), the job submitted with ``spark-submit`` unchanged, the daemons killed at the
end. Every wait is bounded; a process that does not come up fails the test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kraft.simulation.scenario import run_scenario

pytestmark = pytest.mark.spark

pytest.importorskip("pyspark")
sys.path.insert(0, str(Path(__file__).parents[1] / "simulation"))

from spark_cluster import SPARK_HOME, standalone_cluster  # noqa: E402

JOB = Path(__file__).parents[2] / "kraft" / "analysis" / "job.py"

#: Seconds the job may take.
JOB_TIMEOUT_S = 300


def test_the_job_runs_unchanged_on_a_standalone_cluster(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for seed in (1, 2):
        run_scenario(
            "leader_failure", seed, sweep / "leader_failure" / f"seed-{seed}", message_events=False
        )
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "SPARK_NO_DAEMONIZE": "1",
        "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    out = tmp_path / "report"
    with standalone_cluster(tmp_path, env, workers=2) as url:
        submitted = subprocess.run(
            [
                str(SPARK_HOME / "bin" / "spark-submit"),
                "--master",
                url,
                "--conf",
                "spark.driver.host=127.0.0.1",
                "--conf",
                "spark.ui.enabled=false",
                "--conf",
                "spark.sql.shuffle.partitions=4",
                "--executor-memory",
                "1g",
                "--conf",
                "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1",
                "--conf",
                "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1",
                str(JOB),
                str(sweep),
                "--out",
                str(out),
                "--quiet",
            ],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT_S,
        )
    assert submitted.returncode == 0, submitted.stderr[-5000:]
    lines = submitted.stdout.splitlines()
    assert lines[1].split()[:2] == ["leader_failure", "2"]
    assert "0 safety violations" in submitted.stdout
    report = (out / "report.md").read_text()
    assert f"analysed on Spark `{url}`" in report
    assert any((out / "tables" / "runs").glob("*.parquet"))
