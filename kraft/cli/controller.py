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
from typing import Any

from kraft.cli.node import add_start_arguments, run_in_foreground
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
    add_start_arguments(start)
    start.set_defaults(handler=_start)


def _start(args: argparse.Namespace) -> int:
    def started(node: ControllerNode) -> None:
        logger.info("controller %d is up on %s", node.config.node_id, node.listen_address)

    return run_in_foreground(
        args, "controller", lambda config: ControllerNode(config, config.controller), started
    )
