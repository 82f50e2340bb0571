"""The Spark engine of the sweep on a real standalone cluster: a master and two workers started
with pyspark's own ``spark-class`` on 127.0.0.1, the sweep run through ``spark://`` by
``kraft sim sweep`` in its own process, the digests compared with the local engine's, the
result analysed by ``kraft analyze``. Every wait is bounded; the daemons' process groups are
killed in a ``finally``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kraft.simulation.sweep import read_runs, sweep

pytestmark = [pytest.mark.slow, pytest.mark.spark]

pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

from spark_cluster import SPARK_HOME, standalone_cluster  # noqa: E402

KRAFT = Path(sys.executable).with_name("kraft")

#: Seconds a command may take (a loaded 2-core machine).
COMMAND_TIMEOUT_S = 400
SCENARIOS = ["leader_failure", "leader_partitioned_away"]
SEEDS = "1-20"


def test_a_sweep_through_a_standalone_cluster_gives_the_local_runs(tmp_path: Path) -> None:
    java_options = "-XX:TieredStopAtLevel=1"
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "SPARK_NO_DAEMONIZE": "1",
        "SPARK_DAEMON_JAVA_OPTS": java_options,
        "PYSPARK_PYTHON": sys.executable,
        # What `kraft sim sweep` hands to the JVM it starts (pyspark reads this variable).
        "PYSPARK_SUBMIT_ARGS": (
            f"--conf spark.driver.extraJavaOptions={java_options} "
            f"--conf spark.executor.extraJavaOptions={java_options} "
            "--conf spark.ui.enabled=false --executor-memory 512m pyspark-shell"
        ),
    }
    out = tmp_path / "sweep"
    with standalone_cluster(tmp_path, env, workers=2) as url:
        swept = subprocess.run(
            [
                str(KRAFT),
                *("sim", "sweep", "--engine", "spark", "--master", url),
                *("--scenario", *SCENARIOS, "--seeds", SEEDS, "--no-message-events"),
                *("--out", str(out)),
            ],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        assert swept.returncode == 0, swept.stderr[-5000:]
        assert "40 runs, 0 failed, in " in swept.stdout
        assert f"on Spark {url} (2 cores)" in swept.stdout
        analysed = subprocess.run(
            [
                str(KRAFT),
                *("analyze", str(out / "events"), "--out", str(tmp_path / "report")),
                *("--master", url),
            ],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
    assert analysed.returncode == 0, analysed.stderr[-5000:]
    assert "40 runs, " in analysed.stdout and "0 safety violations" in analysed.stdout
    # Determinism across engines: the same seeds run here give the same event logs.
    local = sweep(SCENARIOS, list(range(1, 21)), tmp_path / "local", message_events=False)
    assert local.total.runs == 40
    expected = {key: run.digest for key, run in read_runs(tmp_path / "local").items()}
    rows = pq.read_table(out / "sweep.parquet").to_pylist()
    assert {(r["scenario"], r["seed"]): r["digest"] for r in rows} == expected
