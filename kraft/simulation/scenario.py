"""Scenarios: named, seeded simulation runs, and the code that runs one into a directory.

A scenario is a function of a :class:`ScenarioRun`: it builds its cluster with
:meth:`ScenarioRun.cluster`, injects faults through the cluster, and states what must happen
with :meth:`ScenarioRun.expect` / :meth:`ScenarioRun.await_`. The catalogue lives in the
repository's ``simulations/`` directory (installed with kraft as the package
``kraft_simulations``), one module per family, each registering its scenarios with the
:func:`scenario` decorator; :func:`load_scenarios` imports a directory of them.

A run directory holds ``events.jsonl`` (the event log) and ``run.json`` (what ran and how it
ended: seed, suppressed faults, violations, failed expectations, faults, the event-log digest).
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import os
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgspec

from kraft.config import QuorumConfig
from kraft.simulation.cluster import Cluster, InvariantViolationError, SimulationError
from kraft.simulation.events import SCHEMA_VERSION

__all__ = [
    "RunResult",
    "Scenario",
    "ScenarioRun",
    "all_scenarios",
    "default_scenario_dir",
    "get_scenario",
    "load_scenarios",
    "read_run",
    "run_scenario",
    "scenario",
]

logger = logging.getLogger(__name__)

EVENTS_FILE = "events.jsonl"
RUN_FILE = "run.json"


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    body: Callable[[ScenarioRun], None]


_REGISTRY: dict[str, Scenario] = {}


def scenario(
    name: str | None = None, description: str | None = None
) -> Callable[[Callable[[ScenarioRun], None]], Callable[[ScenarioRun], None]]:
    """Register a scenario function (its name defaults to the function's, its description to
    the first paragraph of its docstring, on one line)."""

    def register(body: Callable[[ScenarioRun], None]) -> Callable[[ScenarioRun], None]:
        the_name = name or body.__name__
        paragraph = inspect.cleandoc(body.__doc__ or "").split("\n\n", 1)[0]
        the_description = description or " ".join(paragraph.split()) or the_name
        _REGISTRY[the_name] = Scenario(the_name, the_description, body)
        return body

    return register


#: The package the catalogue is installed as (pyproject.toml maps ``simulations/`` to it); its
#: modules are loaded under this name whichever directory they come from.
CATALOGUE_PACKAGE = "kraft_simulations"


def default_scenario_dir() -> Path:
    """``$KRAFT_SCENARIOS``, else ``./simulations``, else the catalogue installed with kraft
    (the package ``kraft_simulations``, the repository's ``simulations/``)."""
    env = os.environ.get("KRAFT_SCENARIOS")
    if env:
        return Path(env)
    local = Path.cwd() / "simulations"
    if local.is_dir():
        return local
    spec = importlib.util.find_spec(CATALOGUE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SimulationError(
            f"no scenario catalogue: {CATALOGUE_PACKAGE} is not installed; give a directory of "
            "scenario modules (--scenarios or $KRAFT_SCENARIOS)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def load_scenarios(directory: Path | str | None = None) -> dict[str, Scenario]:
    """Import every ``*.py`` scenario module of ``directory`` (once); the whole registry."""
    root = Path(directory) if directory is not None else default_scenario_dir()
    if not root.is_dir():
        raise SimulationError(f"no scenario directory {root}")
    for path in sorted(root.glob("*.py")):
        if path.name.startswith("_"):
            continue
        module_name = f"{CATALOGUE_PACKAGE}.{path.stem}"
        if module_name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:  # pragma: no cover - a .py file always loads
            raise SimulationError(f"cannot load scenarios from {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
    return dict(_REGISTRY)


def all_scenarios() -> dict[str, Scenario]:
    return dict(_REGISTRY)


def get_scenario(name: str, directory: Path | str | None = None) -> Scenario:
    if name not in _REGISTRY:
        load_scenarios(directory)
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise SimulationError(f"no scenario {name!r} (known: {known})") from None


class ScenarioRun:
    """What a scenario function is given: the seed, a random source for its own choices, the
    cluster factory and the expectation helpers."""

    def __init__(
        self,
        name: str,
        seed: int,
        out_dir: Path | None = None,
        suppress: Iterable[int] = (),
        message_events: bool = True,
    ) -> None:
        self.name = name
        self.seed = seed
        #: For the scenario's own choices (sizes, which node, when): independent of the
        #: cluster's random source, so a choice does not shift the cluster's timers.
        self.rng = random.Random(f"{name}:{seed}")
        self.out_dir = out_dir
        self.suppress = frozenset(suppress)
        self.message_events = message_events
        self.expectations: list[str] = []
        self._cluster: Cluster | None = None

    @property
    def cluster_or_none(self) -> Cluster | None:
        return self._cluster

    def cluster(
        self,
        voters: int = 3,
        observers: int = 0,
        config: QuorumConfig | None = None,
        **kwargs: Any,
    ) -> Cluster:
        """The run's cluster (one per run), logging to the run directory."""
        if self._cluster is not None:
            raise SimulationError("a scenario run has one cluster")
        self._cluster = Cluster(
            self.seed,
            voters,
            observers,
            config,
            scenario=self.name,
            event_log=None if self.out_dir is None else self.out_dir / EVENTS_FILE,
            message_events=self.message_events,
            suppress_faults=self.suppress,
            **kwargs,
        )
        return self._cluster

    def expect(self, condition: bool, message: str) -> bool:
        """Record ``message`` as a failed expectation unless ``condition``."""
        if not condition:
            self.expectations.append(message)
            if self._cluster is not None:
                self._cluster.events.emit(
                    self._cluster.now_ms, "expectation_failed", details={"message": message}
                )
        return condition

    def await_(self, predicate: Callable[[], bool], timeout_ms: int, message: str) -> bool:
        """Run the cluster until ``predicate`` holds; a failed expectation if it never does."""
        if self._cluster is None:
            raise SimulationError("await_ needs the cluster: call run.cluster() first")
        return self.expect(self._cluster.run_until(predicate, timeout_ms), message)


class RunResult(msgspec.Struct, kw_only=True):
    """``run.json``: what ran and how it ended."""

    schema_version: int = SCHEMA_VERSION
    scenario: str
    seed: int
    suppressed: list[int] = msgspec.field(default_factory=list)
    message_events: bool = True
    ok: bool = True
    violations: list[dict[str, Any]] = msgspec.field(default_factory=list)
    expectations: list[str] = msgspec.field(default_factory=list)
    faults: list[dict[str, Any]] = msgspec.field(default_factory=list)
    events: int = 0
    digest: str = ""
    simulated_ms: int = 0
    wall_s: float = 0.0
    report: str | None = None
    #: The exception a run raised (a livelock, a scenario bug), with its traceback.
    error: str | None = None

    @property
    def failure_kinds(self) -> set[str]:
        """Invariants violated, plus ``expectation`` if an expectation failed."""
        kinds = {v["invariant"] for v in self.violations}
        if self.expectations:
            kinds.add("expectation")
        if self.error is not None:
            kinds.add("error")
        return kinds


def run_scenario(
    name: str,
    seed: int,
    out_dir: Path | str | None = None,
    *,
    suppress: Iterable[int] = (),
    message_events: bool = True,
    scenario_dir: Path | str | None = None,
) -> RunResult:
    """Run scenario ``name`` with ``seed``; write ``events.jsonl`` and ``run.json`` to
    ``out_dir`` when given. Never raises for a failed run: the result says how it failed."""
    the_scenario = get_scenario(name, scenario_dir)
    out = None if out_dir is None else Path(out_dir)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    run = ScenarioRun(name, seed, out, suppress, message_events)
    report: str | None = None
    error: str | None = None
    started = time.perf_counter()
    try:
        the_scenario.body(run)
        if run.cluster_or_none is not None:
            run.cluster_or_none.validate()
    except InvariantViolationError as failure:
        report = failure.report
    except Exception as exc:
        if run.cluster_or_none is None:
            raise
        # A livelock, or a bug in the scenario: the run failed; say how, keep the log.
        error = "".join(traceback.format_exception(exc)).rstrip()
        logger.error("scenario %s seed %d raised: %s", name, seed, error)
        now = run.cluster_or_none.now_ms
        run.cluster_or_none.events.emit(now, "run_error", details={"error": repr(exc)})
        report = f"scenario {name} seed {seed} raised at {now} ms:\n{error}"
    cluster = run.cluster_or_none
    if cluster is None:
        raise SimulationError(f"scenario {name!r} never built its cluster")
    cluster.close()
    wall = time.perf_counter() - started
    result = RunResult(
        scenario=name,
        seed=seed,
        suppressed=sorted(run.suppress),
        message_events=message_events,
        ok=not cluster.violations and not run.expectations and error is None,
        error=error,
        violations=[asdict(v) | {"nodes": list(v.nodes)} for v in cluster.violations],
        expectations=list(run.expectations),
        faults=[asdict(f) | {"targets": list(f.targets)} for f in cluster.faults],
        events=cluster.events.count,
        digest=cluster.digest,
        simulated_ms=cluster.now_ms,
        wall_s=round(wall, 3),
        report=report,
    )
    if out is not None:
        (out / RUN_FILE).write_bytes(msgspec.json.format(msgspec.json.encode(result)) + b"\n")
    return result


def read_run(run_dir: Path | str) -> RunResult:
    """The ``run.json`` of a run directory."""
    path = Path(run_dir) / RUN_FILE
    try:
        return msgspec.json.decode(path.read_bytes(), type=RunResult)
    except FileNotFoundError:
        raise SimulationError(f"{run_dir} is not a run directory (no {RUN_FILE})") from None
    except msgspec.DecodeError as exc:
        raise SimulationError(f"malformed {path}: {exc}") from exc
