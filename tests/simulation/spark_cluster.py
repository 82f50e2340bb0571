"""A Spark standalone cluster on 127.0.0.1 for tests and benchmarks: a master and workers
started with pyspark's own ``spark-class``, each in its own process group, killed at the end.
Every wait is bounded: a daemon that does not come up fails the caller."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
#: Seconds a daemon may take to come up (a loaded 2-core machine).
START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Daemon:
    """A Spark daemon in its own process group, its output read on a thread so that the test
    waits for a line (with a deadline) rather than sleeps."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
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
        with self.log.open("w") as log:
            for line in self.process.stdout:
                log.write(line)
                log.flush()
                self.lines.put(line)

    def wait_for(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                if text in self.lines.get(timeout=left):
                    return
            except queue.Empty:
                break
        raise AssertionError(f"no {text!r} within {timeout_s} s; see {self.log}")

    def kill(self) -> None:
        """Kill the daemon's whole process group (the JVM and what it started)."""
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


@contextmanager
def standalone_cluster(work: Path, env: dict[str, str], workers: int) -> Iterator[str]:
    """A master and ``workers`` workers (1 core, 1 GB each) on 127.0.0.1; the master URL."""
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    daemons: list[Daemon] = []
    try:
        master = Daemon(
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(port)),
                *("--webui-port", str(free_port())),
            ],
            env,
            work / "master.log",
        )
        daemons.append(master)
        master.wait_for("I have been elected leader", START_TIMEOUT_S)
        for number in range(workers):
            daemons.append(
                Daemon(
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        url,
                        *("--host", "127.0.0.1", "--port", str(free_port())),
                        *("--webui-port", str(free_port())),
                        *("--cores", "1", "--memory", "1g"),
                        *("--work-dir", str(work / f"worker-{number}")),
                    ],
                    env,
                    work / f"worker-{number}.log",
                )
            )
        for worker in daemons[1:]:
            worker.wait_for("Successfully registered with master", START_TIMEOUT_S)
        yield url
    finally:
        for daemon in reversed(daemons):
            daemon.kill()
