"""The same job on a Spark standalone cluster: a master and a worker started with pyspark's own
``spark-class`` on 127.0.0.1, the job submitted with ``spark-submit`` unchanged, both stopped
at the end. Every wait is bounded; a process that does not come up fails the test."""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from kraft.simulation.scenario import run_scenario

pytestmark = pytest.mark.spark

pyspark = pytest.importorskip("pyspark")
SPARK_HOME = Path(pyspark.__file__).parent
JOB = Path(__file__).parents[2] / "kraft" / "analysis" / "job.py"

#: Seconds a daemon may take to come up, and the job to run.
START_TIMEOUT_S = 90
JOB_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Daemon:
    """A Spark daemon whose output is read line by line on a thread, so that the test can
    wait for a line (with a deadline) rather than sleep."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log.open("w")
        self.lines: queue.Queue[str] = queue.Queue()
        self.process = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.log.write(line)
            self.log.flush()
            self.lines.put(line)

    def wait_for(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                if text in self.lines.get(timeout=left):
                    return
            except queue.Empty:
                break
        raise AssertionError(f"no {text!r} within {timeout_s} s; see {self.log.name}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self.log.close()


@contextmanager
def standalone_cluster(work: Path, env: dict[str, str]) -> Iterator[str]:
    """A master and one worker (2 cores, 1 GB) on 127.0.0.1; yields the master URL."""
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    with ExitStack() as stack:
        master = Daemon(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(free_port()),
            ],
            env,
            work / "master.log",
        )
        stack.callback(master.stop)
        master.wait_for("I have been elected leader", START_TIMEOUT_S)
        worker = Daemon(
            [
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--port",
                str(free_port()),
                "--webui-port",
                str(free_port()),
                "--cores",
                "2",
                "--memory",
                "1g",
                "--work-dir",
                str(work / "worker"),
            ],
            env,
            work / "worker.log",
        )
        stack.callback(worker.stop)
        worker.wait_for("Successfully registered with master", START_TIMEOUT_S)
        yield url


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
    with standalone_cluster(tmp_path, env) as url:
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
