"""``LocalQuorum``: a quorum of real ``kraft node`` processes on loopback.

For scripts, examples, tests and benchmarks that need the real thing: every node is its own
operating-system process (``python -m kraft node start --console``), with its own data
directory formatted like ``kraft storage format`` does, its own TOML file, and a port the OS
handed out on 127.0.0.1. With ``kraft_version=1`` the quorum is dynamic (KIP-853): each node's
directory is formatted by ``kraft storage format --initial-controllers`` itself, its file has
``listen`` and ``bootstrap_servers`` instead of ``voters``, and :meth:`LocalQuorum.add_node`
makes a node formatted with ``--no-initial-controllers``, which starts as an observer.

The console protocol (``kraft.cli.node``) drives each process over its stdin and reads its
JSON-line events from its stdout; each node's log goes to ``<root>/node-<id>.log``.

Every wait is bounded: a method that waits takes a timeout and raises ``TimeoutError`` with
what it was waiting for. :meth:`LocalQuorum.close` stops every process (SIGTERM, then SIGKILL
after a grace period), so nothing is left running.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from kraft.log.meta_properties import (
    format_storage,
    random_directory_id,
    random_uuid,
    read_meta_properties,
)

__all__ = ["LOOPBACK_TIMERS", "LocalQuorum", "NodeProcess", "free_ports"]

logger = logging.getLogger(__name__)

Event = dict[str, Any]

#: ``[quorum]`` timers for a quorum on loopback: elections and failover in well under a second
#: (Kafka's defaults are for real networks). The tests and benchmarks on real processes use them.
LOOPBACK_TIMERS: Mapping[str, int] = {
    "election_timeout_ms": 500,
    "fetch_timeout_ms": 1000,
    "append_linger_ms": 0,
    "request_timeout_ms": 1000,
}


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports the OS considers free right now (bound, then released)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


class NodeProcess:
    """One ``kraft node start --console`` process and the events it printed."""

    def __init__(
        self,
        node_id: int,
        config_path: Path,
        log_path: Path,
        command: Sequence[str] | None = None,
        changed: threading.Condition | None = None,
    ) -> None:
        self.node_id = node_id
        self.config_path = config_path
        self.log_path = log_path
        self._command = (
            list(command)
            if command is not None
            else [
                sys.executable,
                "-m",
                "kraft.cli",
                "node",
                "start",
                "--config",
                str(config_path),
                "--console",
            ]
        )
        self._process: subprocess.Popen[str] | None = None
        self._events: list[Event] = []
        #: Notified on every event (shared by the nodes of a LocalQuorum).
        self._changed = changed if changed is not None else threading.Condition()
        self._log_file: Any = None
        #: The running process closed its stdout (it has exited or is exiting).
        self._eof = False

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        """Start the process (again, after it stopped); its earlier events are kept."""
        if self.is_running():
            raise RuntimeError(f"node {self.node_id} is running")
        self._log_file = self.log_path.open("a")
        self._eof = False
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._process = subprocess.Popen(
            self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            text=True,
            bufsize=1,
            env=env,
        )
        threading.Thread(
            target=self._read,
            args=(self._process,),
            daemon=True,
            name=f"node-{self.node_id}-stdout",
        ).start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            event["pid"] = process.pid
            with self._changed:
                self._events.append(event)
                self._changed.notify_all()
        with self._changed:
            if process is self._process:
                self._eof = True
            self._changed.notify_all()

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def send(self, line: str) -> None:
        """Write one console command."""
        if self._process is None or self._process.stdin is None:
            raise RuntimeError(f"node {self.node_id} is not started")
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()

    def events(self, kind: str | None = None) -> list[Event]:
        with self._changed:
            return [e for e in self._events if kind is None or e.get("event") == kind]

    def wait_for(
        self,
        predicate: Callable[[Event], bool],
        timeout_s: float,
        what: str = "an event",
        since: int = 0,
    ) -> Event:
        """The first event from index ``since`` on that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for event in self._events[since:]:
                    if predicate(event):
                        return event
                if self._eof:
                    raise RuntimeError(
                        f"node {self.node_id} exited before {what}: {self._log_tail()}"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"node {self.node_id}: no {what} within {timeout_s} s (see {self.log_path})"
                    )
                self._changed.wait(remaining)

    def _log_tail(self, lines: int = 5) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"(see {self.log_path})"
        return " | ".join(tail) + f" (see {self.log_path})"

    def last_leader_event(self) -> Event | None:
        """The latest ``leader`` event of the running process (a restarted node's earlier
        life does not count)."""
        pid = self.pid
        with self._changed:
            for event in reversed(self._events):
                if event.get("event") == "leader" and event["pid"] == pid:
                    return event
        return None

    def mark(self) -> int:
        """The number of events so far (for ``wait_for(since=...)``)."""
        with self._changed:
            return len(self._events)

    def request(self, line: str, kinds: tuple[str, ...], timeout_s: float) -> Event:
        """Send a command and wait for its answer (the first event of ``kinds`` after it)."""
        since = self.mark()
        self.send(line)
        return self.wait_for(
            lambda e: e.get("event") in kinds, timeout_s, f"answer to {line!r}", since
        )

    def kill(self) -> None:
        """SIGKILL: no shutdown at all."""
        self._signal(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the process is frozen (its connections stay open, nothing is answered)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: a paused process carries on."""
        self._signal(signal.SIGCONT)

    def terminate(self, timeout_s: float = 15.0) -> int:
        """SIGTERM (a graceful shutdown) and wait for the exit status; SIGKILL if it hangs."""
        self._signal(signal.SIGTERM)
        return self.wait(timeout_s)

    def _signal(self, signum: int) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signum)

    def wait(self, timeout_s: float) -> int:
        """Wait for the process to exit; SIGKILL it at the deadline. Its exit status."""
        if self._process is None:
            raise RuntimeError(f"node {self.node_id} was never started")
        try:
            code = self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            logger.error("node %d did not exit within %.1f s: killing it", self.node_id, timeout_s)
            self._process.kill()
            code = self._process.wait()
        for stream in (self._process.stdin, self._process.stdout):
            if stream is not None:
                stream.close()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return code


class LocalQuorum:
    """``voters`` node processes on 127.0.0.1 under ``root`` (see the module docstring)."""

    def __init__(
        self,
        root: Path | str,
        voters: int = 3,
        *,
        quorum: Mapping[str, int | bool] | None = None,
        cluster_id: str | None = None,
        command: Callable[[int, Path], Sequence[str]] | None = None,
        kraft_version: int = 0,
    ) -> None:
        if kraft_version not in (0, 1):
            raise ValueError(f"kraft_version must be 0 or 1, not {kraft_version}")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.cluster_id = cluster_id or random_uuid()
        self.kraft_version = kraft_version
        self._quorum = dict(quorum or {})
        self._command = command
        ports = free_ports(voters)
        self.addresses = {i + 1: f"127.0.0.1:{port}" for i, port in enumerate(ports)}
        #: The initial voters' addresses: every node's ``bootstrap_servers`` (kraft.version 1).
        self._bootstrap_servers = ",".join(self.addresses.values())
        self.nodes: dict[int, NodeProcess] = {}
        self._changed = threading.Condition()
        if kraft_version == 0:
            voter_string = ",".join(f"{i}@{address}" for i, address in self.addresses.items())
            for node_id in self.addresses:
                data_dir = self.root / f"node-{node_id}"
                if not (data_dir / "meta.properties").exists():
                    format_storage(data_dir, self.cluster_id, node_id)
                self._add_process(node_id, f'voters = "{voter_string}"')
            return
        initial = ",".join(
            f"{i}@{address}:{random_directory_id()}" for i, address in self.addresses.items()
        )
        for node_id in self.addresses:
            self._add_process(node_id, *self._dynamic_lines(node_id))
            self._format(node_id, "--initial-controllers", initial)

    def _dynamic_lines(self, node_id: int) -> list[str]:
        return [
            f'listen = "{self.addresses[node_id]}"',
            f'bootstrap_servers = "{self._bootstrap_servers}"',
        ]

    def _add_process(self, node_id: int, *quorum_lines: str) -> NodeProcess:
        """Write node ``node_id``'s TOML file and make its (stopped) process."""
        data_dir = self.root / f"node-{node_id}"
        lines = [
            f"node_id = {node_id}",
            f'data_dir = "{data_dir.name}"',
            *quorum_lines,
            f'cluster_id = "{self.cluster_id}"',
            "[quorum]",
        ]
        lines += [f"{key} = {str(value).lower()}" for key, value in self._quorum.items()]
        config_path = self.root / f"node-{node_id}.toml"
        config_path.write_text("\n".join(lines) + "\n")
        node = NodeProcess(
            node_id,
            config_path,
            self.root / f"node-{node_id}.log",
            None if self._command is None else self._command(node_id, config_path),
            self._changed,
        )
        self.nodes[node_id] = node
        return node

    def _format(self, node_id: int, *flags: str) -> None:
        """``kraft storage format`` for a node of a dynamic quorum, as an operator runs it."""
        if (self.root / f"node-{node_id}" / "meta.properties").exists():
            return
        command = [
            sys.executable,
            "-m",
            "kraft.cli",
            "storage",
            "format",
            "--cluster-id",
            self.cluster_id,
            "--config",
            str(self.nodes[node_id].config_path),
            *flags,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"formatting node {node_id} failed: {done.stderr.strip()}")

    def add_node(self) -> int:
        """A new node of a dynamic quorum (``kraft_version=1``), formatted with
        ``--no-initial-controllers``, not started: started, it is an observer until
        ``kraft quorum add-controller`` makes it a voter. Its id (the next free one)."""
        if self.kraft_version != 1:
            raise RuntimeError("only a dynamic quorum (kraft_version=1) takes new nodes")
        node_id = max(self.nodes) + 1
        self.addresses[node_id] = f"127.0.0.1:{free_ports(1)[0]}"
        self._add_process(node_id, *self._dynamic_lines(node_id))
        self._format(node_id, "--no-initial-controllers")
        return node_id

    def directory_id(self, node_id: int) -> str | None:
        """Node ``node_id``'s directory id (its ``meta.properties``)."""
        return read_meta_properties(self.root / f"node-{node_id}").directory_id

    @property
    def bootstrap(self) -> str:
        """Every node's address, comma-separated (for ``kraft quorum describe -b``)."""
        return ",".join(self.addresses.values())

    def start(self, timeout_s: float = 30.0) -> None:
        """Start every node and wait until each has said it is up."""
        for node in self.nodes.values():
            node.start()
        for node in self.nodes.values():
            node.wait_for(lambda e: e.get("event") == "started", timeout_s, "start")

    def leader(self, timeout_s: float = 30.0, *, exclude: Sequence[int] = ()) -> int:
        """The id of a running node that reports itself leader (waits for one)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                best: tuple[int, int] | None = None
                for node_id, node in self.nodes.items():
                    if node_id in exclude or not node.is_running():
                        continue
                    change = node.last_leader_event()
                    if change is not None and change["leader"] == node_id:
                        epoch = change["epoch"]
                        if best is None or epoch > best[0]:
                            best = (epoch, node_id)
                if best is not None:
                    return best[1]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no leader within {timeout_s} s (logs in {self.root})")
                # A process that dies prints nothing more: look again at least every 0.1 s.
                self._changed.wait(min(remaining, 0.1))

    def append(self, *records: str, timeout_s: float = 30.0) -> tuple[int, int]:
        """Append ``records`` through the current leader; ``(offset, leader id)``."""
        deadline = time.monotonic() + timeout_s
        while True:
            leader = self.leader(max(0.1, deadline - time.monotonic()))
            answer = self.nodes[leader].request(
                "append " + " ".join(records),
                ("appended", "error"),
                max(0.1, deadline - time.monotonic()),
            )
            if answer["event"] == "appended":
                return int(answer["offset"]), leader
            if time.monotonic() >= deadline:
                raise TimeoutError(f"append failed: {answer}")

    def committed(self, node_id: int) -> dict[int, list[str]]:
        """What ``node_id`` reported committed: last offset of each batch -> its records."""
        return {e["offset"]: e["records"] for e in self.nodes[node_id].events("commit")}

    def wait_committed(self, node_id: int, offset: int, timeout_s: float = 30.0) -> Event:
        """Wait until ``node_id`` reports the batch ending at ``offset`` (or a later one)."""
        return self.nodes[node_id].wait_for(
            lambda e: e.get("event") == "commit" and e["offset"] >= offset,
            timeout_s,
            f"commit of offset {offset}",
        )

    def close(self, timeout_s: float = 15.0, *, kill: bool = False) -> None:
        """Stop every node still running: SIGTERM (SIGKILL after ``timeout_s``), or SIGKILL
        at once with ``kill``. A graceful stop of the last voter standing waits out its
        shutdown timeout (no other leader can appear), as in Kafka."""
        for node in self.nodes.values():
            if node.is_running():
                node._signal(signal.SIGKILL if kill else signal.SIGTERM)
        for node in self.nodes.values():
            if node.pid is not None:
                node.wait(timeout_s)

    def __enter__(self) -> LocalQuorum:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
