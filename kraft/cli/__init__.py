"""The ``kraft`` console script: storage formatting, log inspection, and (later) nodes,
quorum queries, the simulator and analysis.

Each command group lives in its own module with a ``register(subparsers)`` function that adds
its parsers; :mod:`kraft.cli.main` assembles them and maps kraft's errors to exit codes.
"""

from __future__ import annotations

from kraft.cli.main import main

__all__ = ["main"]
