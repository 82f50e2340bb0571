"""The core never imports trio, socket, threading, time, asyncio or the global
random, so the simulator can run it exactly (same seed, same bytes)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kraft

# kraft.common is in: the core imports it (its Clock protocol, Uuids, limits, fsync helpers).
CORE = ("common", "raft", "log", "record", "protocol", "snapshot", "metadata")
FORBIDDEN = {"trio", "socket", "threading", "time", "asyncio", "selectors"}
ROOT = Path(kraft.__file__).resolve().parent


def core_modules() -> list[Path]:
    return sorted(p for package in CORE for p in (ROOT / package).glob("*.py"))


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_core_module_does_no_io_of_its_own(path: Path) -> None:
    """No forbidden import; ``random`` only for the ``random.Random`` type a caller injects,
    never a call of the module-level functions (which share one global generator)."""
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
            if node.module == "random":
                names = {alias.name for alias in node.names}
                assert names <= {"Random"}, f"{path}: from random import {names}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "random"
        ):
            assert node.func.attr == "Random", f"{path}:{node.lineno}: random.{node.func.attr}()"
    assert not imported & FORBIDDEN, f"{path} imports {sorted(imported & FORBIDDEN)}"


def test_the_core_packages_exist() -> None:
    """The list above is not empty by accident."""
    assert len(core_modules()) > 20
