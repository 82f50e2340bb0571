"""``kraft node start``: run one node of a quorum in the foreground.

The node logs to stderr (INFO by default), and shuts down gracefully on SIGTERM or SIGINT: a
leader resigns and tells the other voters with EndQuorumEpoch, so that one of them takes over
at once. Exit status: 0 after a graceful shutdown, 1 when the node stopped on a fatal fault or
could not start (a message on stderr says why), 2 for a bad configuration file.

With ``--console`` the node also takes commands on stdin and reports on stdout, one JSON object
a line, so that scripts and tests can drive a real process::

    append <text> [<text> ...]   ->  {"event": "appended", "offset": 12, "epoch": 3}
                                     or {"event": "error", "error": "NotLeaderError", ...}
    resign                       ->  the leader resigns its epoch
    status                       ->  {"event": "status", "leader": 1, "epoch": 3,
                                      "voters": [1, 2, 3], "kraft_version": 1, ...}
                                 <-  {"event": "commit", "offset": 12, "epoch": 3,
                                      "records": ["<text>", ...]}   (every committed batch)
                                 <-  {"event": "leader", "leader": 1, "epoch": 3}
                                 <-  {"event": "snapshot", "offset": ..., "epoch": ...}
                                 <-  {"event": "started", "listen": "127.0.0.1:9091", ...}
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TextIO, TypeVar

from kraft.config import ConfigError
from kraft.errors import KraftError, NotLeaderError
from kraft.raft.listeners import BatchReader, LeaderAndEpoch, Listener, SnapshotReaderLike
from kraft.record.serde import BytesSerde
from kraft.runtime.config import NodeConfig, load_node_config
from kraft.runtime.node import RaftNode

__all__ = ["ForegroundNode", "add_start_arguments", "register", "run_in_foreground"]

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft node ...`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "node",
        help="run a node of a quorum",
        description="Run one node of a KRaft quorum (see docs/operations.md).",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="node commands", metavar="COMMAND")
    start = commands.add_parser(
        "start",
        help="start a node in the foreground",
        description=(
            "Start the node described by a TOML file (docs/operations.md) in the foreground. "
            "Its data directory must be formatted with `kraft storage format`. SIGTERM or "
            "SIGINT shuts it down gracefully."
        ),
    )
    add_start_arguments(start)
    start.add_argument(
        "--console",
        action="store_true",
        help="take commands on stdin and report commits and leaders on stdout as JSON lines",
    )
    start.set_defaults(handler=_start)


def add_start_arguments(start: argparse.ArgumentParser) -> None:
    """The options every ``... start`` command of a node takes: its TOML file, its log level."""
    start.add_argument("--config", "-c", required=True, type=Path, help="the node's TOML file")
    start.add_argument(
        "--log-level",
        default="INFO",
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        help="level of the log on stderr (default INFO)",
    )


class ForegroundNode(Protocol):
    """What :func:`run_in_foreground` runs: a ``RaftNode`` or a ``ControllerNode``."""

    @property
    def failure(self) -> BaseException | None: ...

    def start(self) -> None: ...

    def wait(self, timeout_s: float | None = None) -> bool: ...

    def close(self) -> None: ...


N = TypeVar("N", bound=ForegroundNode)


def run_in_foreground(
    args: argparse.Namespace,
    what: str,
    make_node: Callable[[NodeConfig], N],
    on_started: Callable[[N], None] | None = None,
) -> int:
    """Load ``args.config``, start the node ``make_node`` builds from it, and run it until
    SIGTERM or SIGINT (a graceful shutdown) or until it stops on its own; the exit status of
    the module docstring. ``what`` names the node in messages ("node", "controller")."""
    logging.getLogger().setLevel(args.log_level)
    try:
        config = load_node_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    node = make_node(config)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logger.info("signal %d: shutting down gracefully", signum)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        node.start()
        if on_started is not None:
            on_started(node)
        while not stop.is_set() and not node.wait(0.2):
            pass
    finally:
        node.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if node.failure is not None:
        print(
            f"error: {what} {config.node_id} stopped on a fatal fault: {node.failure!r}",
            file=sys.stderr,
        )
        return 1
    return 0


class _Printer:
    """Writes one JSON object a line to ``out``, from any thread."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lock = threading.Lock()

    def __call__(self, **event: Any) -> None:
        line = json.dumps(event, separators=(",", ":"))
        with self._lock:
            try:
                self._out.write(line + "\n")
                self._out.flush()
            except (BrokenPipeError, ValueError):  # the reader is gone
                pass


class _ConsoleListener(Listener[bytes]):
    """Reports every committed batch, snapshot and leader change on stdout."""

    def __init__(self, emit: _Printer) -> None:
        self._emit = emit

    def handle_commit(self, reader: BatchReader[bytes]) -> None:
        try:
            for batch in reader:
                self._emit(
                    event="commit",
                    offset=batch.last_offset,
                    base_offset=batch.base_offset,
                    epoch=batch.epoch,
                    records=[r.decode("utf-8", "replace") for r in batch.records],
                )
        finally:
            reader.close()

    def handle_load_snapshot(self, reader: SnapshotReaderLike[bytes]) -> None:
        try:
            self._emit(
                event="snapshot", offset=reader.snapshot_id.offset, epoch=reader.snapshot_id.epoch
            )
        finally:
            reader.close()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self._emit(event="leader", leader=leader.leader_id, epoch=leader.epoch)


def _console(node: RaftNode[bytes], emit: _Printer, stdin: TextIO) -> None:
    """Serve the commands of the module docstring until stdin closes."""
    for line in stdin:
        words = line.split()
        if not words:
            continue
        command, args = words[0], words[1:]
        try:
            client = node.client
            if command == "append":
                leader = client.leader_and_epoch()
                offset = client.prepare_append(leader.epoch, [a.encode() for a in args])
                client.schedule_prepared_append()
                emit(event="appended", offset=offset, epoch=leader.epoch)
            elif command == "resign":
                client.resign(client.leader_and_epoch().epoch)
                emit(event="resigning", epoch=client.leader_and_epoch().epoch)
            elif command == "status":
                leader = client.leader_and_epoch()
                emit(
                    event="status",
                    node=node.node_id,
                    leader=leader.leader_id,
                    epoch=leader.epoch,
                    high_watermark=client.high_watermark,
                    log_end_offset=client.log_end_offset,
                    voters=sorted(client.voter_ids),
                    kraft_version=client.kraft_version,
                )
            else:
                emit(event="error", error="UnknownCommand", message=command)
        except NotLeaderError as exc:
            leader = node.client.leader_and_epoch()
            emit(
                event="error",
                error="NotLeaderError",
                message=str(exc),
                leader=leader.leader_id,
                epoch=leader.epoch,
            )
        except (KraftError, ValueError) as exc:
            emit(event="error", error=type(exc).__name__, message=str(exc))


def _start(args: argparse.Namespace) -> int:
    emit = _Printer(sys.stdout)

    def console(node: RaftNode[bytes]) -> None:
        node.client.register(_ConsoleListener(emit))
        emit(
            event="started",
            node=node.node_id,
            listen=str(node.listen_address),
            cluster_id=node.cluster_id,
        )
        threading.Thread(
            target=_console, args=(node, emit, sys.stdin), name="kraft-console", daemon=True
        ).start()

    def make_node(config: NodeConfig) -> RaftNode[bytes]:
        return RaftNode.from_config(config, BytesSerde())

    return run_in_foreground(args, "node", make_node, console if args.console else None)
