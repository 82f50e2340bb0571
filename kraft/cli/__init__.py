"""The ``kraft`` console script: storage formatting, running a node, describing a quorum, log
inspection, the simulator and the analysis of its event logs.

Each command group lives in its own module with a ``register(subparsers)`` function that adds
its parsers; :mod:`kraft.cli.main` assembles them and maps kraft's errors to exit codes.
"""

from __future__ import annotations

from kraft.cli.main import main

__all__ = ["main"]
