"""The error of a simulation that cannot go on (a livelock, a misuse of the API)."""

from __future__ import annotations

from kraft.errors import KraftError

__all__ = ["SimulationError"]


class SimulationError(KraftError):
    """The simulation itself cannot go on (a livelock, a misuse of the API)."""
