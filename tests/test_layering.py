"""The packages of kraft depend on each other in one direction only.

Each package is imported, with every one of its modules, in a fresh interpreter, with an empty
stand-in for ``kraft/__init__.py``: the real one imports ``kraft.raft`` and so loads half the
library in a fixed order, which hides import cycles (``import kraft.snapshot`` once worked only
because ``kraft/__init__`` had imported ``kraft.log`` first). The test then reads which
``kraft.*`` packages got loaded and checks that each one is below the imported package in
:data:`LAYERS`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Bottom to top. A package may use the packages of the layers below its own, never one of its
#: own layer or above. The Raft core (record, protocol, snapshot, log, raft) stands on the
#: shared vocabulary (common, errors, config); the snapshot files are below the log, which
#: keeps its snapshots with them; the drivers of the core (the event queue, the metrics, the
#: trio runtime with its async API above it, the test harness, and the simulator above them
#: all) and the key-value state machine built on the core's StateMachine (kv) come above it;
#: Kafka's metadata records and image (metadata) sit beside the queue, and the controller,
#: which drives the queue and the client with them, above both; the analysis of the simulator's
#: event logs, the Spark engine of the sweep (it runs the simulator on executors and writes the
#: analysis's event schema, so it stands on both) and the command line over all of it are on top.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("common", "errors"),
    ("config",),
    ("record", "protocol"),
    ("snapshot",),
    ("log",),
    ("raft",),
    ("queue", "metrics", "kv", "metadata"),
    ("controller",),
    ("runtime", "testing"),
    ("aio",),
    ("simulation",),
    ("analysis",),
    ("spark_sweep",),
    ("cli",),
)

#: Packages held below what their layer allows. The analysis reads event-log files written by
#: the simulator (docs/analysis.md), so it imports nothing of the core, and ``kraft sim``
#: can be analysed on a machine that only has the files.
NARROWER: dict[str, frozenset[str]] = {"analysis": frozenset({"common", "errors"})}

PACKAGES = [package for layer in LAYERS for package in layer]
# Not ``kraft.__file__``: importing the real ``kraft`` here would stop the test at collection
# when a cycle breaks that import, instead of naming the package at fault.
ROOT = Path(__file__).resolve().parents[1] / "kraft"

# Run in the child interpreter: install the empty ``kraft`` stand-in, import the package and
# every module under it, print the kraft packages that got loaded (or the import error).
_PROBE = """
import importlib, json, pkgutil, sys, types
root, name = sys.argv[1], sys.argv[2]
stand_in = types.ModuleType("kraft")
stand_in.__path__ = [root]
sys.modules["kraft"] = stand_in
error = None
try:
    package = importlib.import_module(name)
    for info in pkgutil.walk_packages(getattr(package, "__path__", []), name + "."):
        importlib.import_module(info.name)
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
loaded = sorted({m.split(".")[1] for m in sys.modules if m.startswith("kraft.")})
print(json.dumps({"error": error, "loaded": loaded}))
"""


def allowed(package: str) -> frozenset[str]:
    """The packages ``package`` may load: itself and those of the layers below its own."""
    if package in NARROWER:
        return NARROWER[package] | {package}
    level = next(i for i, layer in enumerate(LAYERS) if package in layer)
    return frozenset(p for layer in LAYERS[:level] for p in layer) | {package}


@pytest.fixture(scope="module")
def loaded_by() -> Iterator[dict[str, dict[str, object]]]:
    """What importing each package loads, from one interpreter per package, run in parallel
    (one interpreter cannot import two packages in isolation: the first would load the
    second's dependencies)."""
    children = {
        package: subprocess.Popen(
            [sys.executable, "-c", _PROBE, str(ROOT), f"kraft.{package}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for package in PACKAGES
    }
    results: dict[str, dict[str, object]] = {}
    for package, child in children.items():
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, f"kraft.{package}: the probe failed\n{err}"
        results[package] = json.loads(out.strip().splitlines()[-1])
    yield results


def test_every_package_is_in_the_table() -> None:
    """A new package gets a place in LAYERS (else the test below would not look at it)."""
    on_disk = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    on_disk |= {p.stem for p in ROOT.glob("*.py") if p.stem != "__init__"}
    assert on_disk == set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_layers_below_it(
    package: str, loaded_by: dict[str, dict[str, object]]
) -> None:
    result = loaded_by[package]
    assert result["error"] is None, f"kraft.{package} cannot be imported alone: {result['error']}"
    loaded = result["loaded"]
    assert isinstance(loaded, list)
    upward = sorted(set(loaded) - allowed(package))
    assert not upward, f"kraft.{package} loads {upward}, not below it in LAYERS"
