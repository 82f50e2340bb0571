"""``kraft controller start``: run a controller node in the foreground (docs/controller.md).

The node is a ``kraft node start`` node whose log is Kafka's ``__cluster_metadata``: it runs
the :class:`~kraft.controller.quorum_controller.QuorumController` and answers the controller's
APIs (BrokerRegistration, BrokerHeartbeat, CreateTopics, ...) on its listener
(:class:`~kraft.runtime.controller_node.ControllerNode`). Same TOML file as ``kraft node
start``, plus an optional ``[controller]`` table (docs/operations.md). It logs to stderr and
shuts down gracefully on SIGTERM or SIGINT. Exit status: 0 after a graceful shutdown, 1 when
the node stopped on a fatal fault or could not start, 2 for a bad configuration file.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from kraft.config import ConfigError
from kraft.runtime.config import load_node_config
from kraft.runtime.controller_node import ControllerNode

__all__ = ["register"]

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft controller ...`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "controller",
        help="run a metadata controller node",
        description="Run one node of a controller quorum (see docs/controller.md).",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="controller commands", metavar="COMMAND")
    start = commands.add_parser(
        "start",
        help="start a controller node in the foreground",
        description=(
            "Start the controller node described by a TOML file (the file of `kraft node "
            "start`, plus an optional [controller] table; docs/operations.md). Its data "
            "directory must be formatted with `kraft storage format`. SIGTERM or SIGINT shuts "
            "it down gracefully."
        ),
    )
    start.add_argument("--config", "-c", required=True, type=Path, help="the node's TOML file")
    start.add_argument(
        "--log-level",
        default="INFO",
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        help="level of the log on stderr (default INFO)",
    )
    start.set_defaults(handler=_start)


def _start(args: argparse.Namespace) -> int:
    logging.getLogger().setLevel(args.log_level)
    try:
        config = load_node_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    node = ControllerNode(config, config.controller)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logger.info("signal %d: shutting down gracefully", signum)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        node.start()
        logger.info("controller %d is up on %s", config.node_id, node.listen_address)
        while not stop.is_set() and not node.wait(0.2):
            pass
    finally:
        node.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    failure = node.failure
    if failure is not None:
        print(
            f"error: controller {config.node_id} stopped on a fatal fault: {failure!r}",
            file=sys.stderr,
        )
        return 1
    return 0
