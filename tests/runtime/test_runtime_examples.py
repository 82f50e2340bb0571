"""The real-node examples and docs/operations.md work as written.

``examples/replicated_counter.py`` and ``examples/three_node_cluster/run.py`` run as
subprocesses (the latter on free ports) and say what they should. The quick start of
docs/operations.md runs block by block, as a user would type it: each shell block marked
``<!-- ops:NAME -->`` is run by bash with the doc's ports 19091-19093 moved to free ones and
``kraft`` on the PATH. Its Python blocks run too, its configuration reference names every key
``kraft.runtime.config`` accepts, and what it says of bad input holds.

The doc's nodes run in the background of a shell and log to ``node<N>.log``; here those files
are FIFOs the test reads without blocking (a ``selectors`` loop with a deadline), so that it
waits on what the nodes log, never on a sleep. Every shell runs in its own session, whose
process group is SIGKILLed at the end: no node outlives the test.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kraft.log.meta_properties import format_storage, random_uuid
from kraft.runtime import config as config_module

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
OPERATIONS = ROOT / "docs" / "operations.md"
TIMEOUT_S = 60.0
NODES = (1, 2, 3)
#: The doc's and the example's ports.
DOC_PORTS = {1: 19091, 2: 19092, 3: 19093}


def consecutive_free_ports(count: int = 3) -> int:
    """A base port such that ``base`` .. ``base + count - 1`` are all free on 127.0.0.1 now."""
    rng = random.Random()
    for _ in range(100):
        base = rng.randrange(20_000, 60_000)
        sockets: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports found")


def run(
    args: list[str], timeout_s: float = TIMEOUT_S, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout_s, check=False, cwd=cwd
    )


# -- the examples -------------------------------------------------------------------------------


def test_replicated_counter_prints_the_sum_of_its_increments() -> None:
    done = run([sys.executable, str(EXAMPLES / "replicated_counter.py")])
    assert done.returncode == 0, done.stderr[-3000:]
    # 1 + 2 + 3 + 4 in four batches after the LeaderChange record at offset 0.
    assert "counter = 10 after offset 4" in done.stdout, done.stdout


def test_three_node_cluster_script_fails_over_and_catches_up(tmp_path: Path) -> None:
    base = consecutive_free_ports()
    work = tmp_path / "work"
    done = run(
        [
            sys.executable,
            str(EXAMPLES / "three_node_cluster" / "run.py"),
            "--base-port",
            str(base),
            "--dir",
            str(work),
            "--timeout",
            "30",
        ],
        timeout_s=150,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    first = re.search(r"^leader: node (\d) \(epoch (\d+)\)$", out, re.M)
    killed = re.search(r"^node (\d) exited with status -9$", out, re.M)
    second = re.search(r"^new leader: node (\d) \(epoch (\d+)\)$", out, re.M)
    assert first and killed and second, out
    assert killed[1] == first[1] and second[1] != first[1]
    assert int(second[2]) > int(first[2])
    assert f"LeaderId:               {second[1]}" in out
    assert re.search(
        rf"^node {first[1]} caught up: committed through offset \d+, 8 records", out, re.M
    ), out
    assert f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}" in out
    assert [int(s) for s in re.findall(r"^node \d exited with status (\d+)$", out, re.M)] == [
        0,
        0,
        0,
    ]
    for node_id in NODES:  # the --dir is kept: each node logged its graceful stop
        assert "has stopped" in (work / f"node-{node_id}.log").read_text()


# -- docs/operations.md -------------------------------------------------------------------------


def doc_blocks(base_port: int) -> dict[str, str]:
    """The doc's ``<!-- ops:NAME -->`` shell blocks, its ports moved to ``base_port``..."""
    text = OPERATIONS.read_text()
    for node_id, port in DOC_PORTS.items():
        text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{base_port + node_id - 1}")
    return dict(re.findall(r"<!-- ops:([\w-]+) -->\n```sh\n(.*?)```", text, re.S))


class NodeLogs:
    """Reads the FIFOs ``node<N>.log`` the doc's nodes log to, without blocking.

    A FIFO opened non-blocking for reading reports end-of-file once its writer (a node process)
    has exited; it is then reopened, ready for the node's next start.
    """

    def __init__(self, directory: Path) -> None:
        self.paths = {n: directory / f"node{n}.log" for n in NODES}
        self.text = dict.fromkeys(NODES, "")
        self.exits = dict.fromkeys(NODES, 0)
        self._selector = selectors.DefaultSelector()
        for node_id, path in self.paths.items():
            os.mkfifo(path)
            self._open(node_id)

    def _open(self, node_id: int) -> None:
        fd = os.open(self.paths[node_id], os.O_RDONLY | os.O_NONBLOCK)
        self._selector.register(fd, selectors.EVENT_READ, node_id)

    def wait(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Read until ``predicate()`` holds; ``TimeoutError`` (with the logs) at the deadline."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {what} within {timeout_s} s: {self.text}")
            for key, _ in self._selector.select(remaining):
                node_id = key.data
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if chunk:
                    self.text[node_id] += chunk.decode(errors="replace")
                    continue
                self._selector.unregister(key.fd)  # the node exited: wait for the next one
                os.close(key.fd)
                self.exits[node_id] += 1
                self._open(node_id)

    def marks(self) -> dict[int, int]:
        return {n: len(t) for n, t in self.text.items()}

    def close(self) -> None:
        for key in list(self._selector.get_map().values()):
            self._selector.unregister(key.fd)
            os.close(key.fd)
        self._selector.close()


class Shell:
    """Runs the doc's blocks in bash, each in a session of its own that ``close`` kills."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        bin_dir = cwd / "bin"  # `kraft` = this interpreter's kraft, whatever the PATH holds
        bin_dir.mkdir()
        shim = bin_dir / "kraft"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kraft.cli "$@"\n')
        shim.chmod(0o755)
        self.env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        self._sessions: list[int] = []

    def run(self, script: str, **env: str) -> str:
        """Run ``script`` until the shell exits; its stdout (it must exit 0).

        Output goes to files, not pipes: the nodes a block starts in the background inherit
        the shell's stdout, and a pipe would stay open as long as they run.
        """
        out_path, err_path = self.cwd / "shell.out", self.cwd / "shell.err"
        with out_path.open("w") as out, err_path.open("w") as err:
            process = subprocess.Popen(
                ["bash", "-eu", "-c", script],
                cwd=self.cwd,
                env={**self.env, **env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self._sessions.append(process.pid)
        try:
            code = process.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        assert code == 0, f"{script}\nexited {code}: {err_path.read_text()}"
        return out_path.read_text()

    def close(self) -> None:
        for group in self._sessions:
            with contextlib.suppress(ProcessLookupError):  # everything in it has exited
                os.killpg(group, signal.SIGKILL)


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Shell]:
    shell = Shell(tmp_path)
    try:
        yield shell
    finally:
        shell.close()


def _leader_id(status: str) -> int:
    found = re.search(r"^LeaderId:\s+(\d+)$", status, re.M)
    assert found, status
    return int(found[1])


def _elected(logs: NodeLogs, since: dict[int, int], exclude: int | None = None) -> int | None:
    for node_id, text in logs.text.items():
        if node_id != exclude and "elected leader" in text[since[node_id] :]:
            return node_id
    return None


def test_operations_quick_start_runs_as_written(shell: Shell) -> None:
    base = consecutive_free_ports()
    blocks = doc_blocks(base)
    assert set(blocks) >= {
        "format",
        "configs",
        "start",
        "describe",
        "kill",
        "restart",
        "replication",
        "stop",
    }, sorted(blocks)
    logs = NodeLogs(shell.cwd)
    try:
        formatted = shell.run(blocks["format"] + blocks["configs"])
        assert formatted.count("Formatted data/") == 3, formatted
        assert f'"1@127.0.0.1:{base},' in (shell.cwd / "node1.toml").read_text()

        start = logs.marks()
        shell.run(blocks["start"])
        logs.wait(lambda: _elected(logs, start) is not None, TIMEOUT_S, "leader")
        status = shell.run(blocks["describe"])
        assert _leader_id(status) in NODES
        assert all(f'"id": {n}' in status for n in NODES), status
        assert "HighWatermark:" in status

        before_kill = logs.marks()
        killing = shell.run(blocks["kill"])
        killed = int(re.findall(r"killing node (\d)", killing)[0])
        logs.wait(lambda: logs.exits[killed] == 1, TIMEOUT_S, f"exit of node {killed}")
        logs.wait(
            lambda: _elected(logs, before_kill, exclude=killed) is not None, TIMEOUT_S, "new leader"
        )
        new_leader = _elected(logs, before_kill, exclude=killed)
        status = shell.run(blocks["describe"])
        assert _leader_id(status) == new_leader != killed

        before_restart = logs.marks()
        shell.run(blocks["restart"], LEADER=str(killed))
        logs.wait(
            lambda: "-> Follower" in logs.text[killed][before_restart[killed] :],
            TIMEOUT_S,
            f"node {killed} following",
        )
        table = shell.run(blocks["replication"]).splitlines()
        assert table[0].split()[:4] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag"]
        assert sorted(int(row.split()[0]) for row in table[1:]) == list(NODES)

        exits = dict(logs.exits)
        shell.run(blocks["stop"])
        logs.wait(
            lambda: all(logs.exits[n] > exits[n] for n in NODES),
            TIMEOUT_S,
            "graceful stop of every node",
        )
        for node_id in NODES:
            assert "has stopped" in logs.text[node_id], logs.text[node_id]
            assert "Traceback" not in logs.text[node_id], logs.text[node_id]
    finally:
        shell.close()
        logs.close()


def test_operations_python_examples_run(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", OPERATIONS.read_text(), re.S)
    assert blocks
    for index, block in enumerate(blocks):
        script = tmp_path / f"example_{index}.py"
        script.write_text(block)
        done = run([sys.executable, str(script)], cwd=tmp_path)
        assert done.returncode == 0, f"block {index}: {done.stderr[-3000:]}"


def test_operations_reference_lists_every_config_key() -> None:
    text = OPERATIONS.read_text()
    keys = set(config_module._TOP_KEYS) - {"quorum", "tls", "metrics", "controller"}
    keys |= config_module._QUORUM_KEYS | config_module._TLS_KEYS | config_module._METRICS_KEYS
    keys |= set(config_module._CONTROLLER_KEYS)
    missing = sorted(key for key in keys if f"| `{key}` |" not in text)
    assert not missing, f"docs/operations.md does not describe {missing}"


# -- what the doc says about bad input -----------------------------------------------------------


def _node_start(config: Path) -> subprocess.CompletedProcess[str]:
    return run(
        [sys.executable, "-m", "kraft.cli", "node", "start", "--config", str(config)],
        cwd=config.parent,
    )


def test_a_bad_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "node1.toml"
    config.write_text(
        'node_id = 1\ndata_dir = "data/1"\nvoters = "1@127.0.0.1:19091"\n'
        "[quorum]\nelection_timeout = 500\n"
    )
    done = _node_start(config)
    assert done.returncode == 2
    assert "node1.toml: [quorum]: unknown key(s) election_timeout" in done.stderr


def test_a_segment_size_out_of_range_is_a_config_error(tmp_path: Path) -> None:
    format_storage(tmp_path / "data" / "1", random_uuid(), 1)
    config = tmp_path / "node1.toml"
    config.write_text(
        'node_id = 1\ndata_dir = "data/1"\nvoters = "1@127.0.0.1:19091"\nsegment_bytes = 100\n'
    )
    done = _node_start(config)
    assert (done.returncode, "Traceback" in done.stderr) == (2, False), done.stderr
    assert "segment_bytes" in done.stderr


def test_a_port_in_use_is_reported_as_such(tmp_path: Path) -> None:
    format_storage(tmp_path / "data" / "1", random_uuid(), 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = tmp_path / "node1.toml"
        config.write_text(f'node_id = 1\ndata_dir = "data/1"\nvoters = "1@127.0.0.1:{port}"\n')
        done = _node_start(config)
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr, done.stderr[-2000:]
