"""Entry point of the ``kraft`` console script.

``main`` builds one argparse parser from the command-group modules, runs the chosen command
and turns the outcome into an exit code:

- 0: success;
- 1: a :class:`~kraft.errors.KraftError` (printed as ``error: ...`` on stderr, no traceback),
  or a command that found problems (``kraft log dump`` on a corrupt segment);
- 2: bad command-line usage (argparse's convention).

A command group is a module with ``register(subparsers)``; each leaf parser sets
``handler=<function(args) -> int>`` with ``set_defaults``. Adding a group (node, quorum, sim,
analyze) means adding a module and one line to :data:`COMMAND_GROUPS`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from types import ModuleType

from kraft.cli import (
    analyze,
    broker,
    cluster,
    configs,
    controller,
    features,
    log_dump,
    metadata_shell,
    node,
    quorum,
    sim,
    storage,
    topics,
)
from kraft.errors import KraftError

__all__ = ["COMMAND_GROUPS", "build_parser", "main"]

#: The modules that contribute commands, in the order ``kraft --help`` lists them.
COMMAND_GROUPS: tuple[ModuleType, ...] = (
    storage,
    node,
    quorum,
    features,
    controller,
    topics,
    configs,
    cluster,
    broker,
    log_dump,
    metadata_shell,
    sim,
    analyze,
)

Handler = Callable[[argparse.Namespace], int]

_LOG_LEVELS = (logging.CRITICAL, logging.WARNING, logging.INFO, logging.DEBUG)


def _version() -> str:
    try:
        return metadata.version("kraft")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The full ``kraft`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="kraft",
        description="Apache Kafka's KRaft metadata quorum, in Python.",
    )
    parser.add_argument("--version", action="version", version=f"kraft {_version()}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log to stderr: -v warnings, -vv info, -vvv debug",
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for group in COMMAND_GROUPS:
        group.register(subparsers)
    return parser


def _configure_logging(verbosity: int) -> None:
    # Only the CLI's own process is configured; the library never configures logging.
    # Quiet by default: a failing command already says why on stderr as "error: ...".
    level = _LOG_LEVELS[min(verbosity, len(_LOG_LEVELS) - 1)]
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def _silence_broken_pipe() -> None:
    # `kraft log dump ... | head`: the reader went away. Point stdout at /dev/null so the
    # interpreter's final flush does not raise again.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``kraft`` command line with ``argv`` (default: ``sys.argv[1:]``); return the
    exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error
        return exc.code if isinstance(exc.code, int) else 2
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        # `kraft` or `kraft storage` alone: show what there is to run.
        usage_parser: argparse.ArgumentParser = getattr(args, "group_parser", parser)
        usage_parser.print_help(sys.stderr)
        return 2
    _configure_logging(args.verbose)
    try:
        return handler(args)
    except KraftError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        _silence_broken_pipe()
        return 1
    except KeyboardInterrupt:
        return 130
