"""kraft as a user installs it: a wheel built from this repository, in a virtual environment of
its own, outside the checkout, runs the scenario catalogue that ships with it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from kraft.simulation.scenario import load_scenarios

ROOT = Path(__file__).resolve().parent.parent
#: What a wheel is built from (pyproject.toml names the rest nowhere).
SOURCES = ("pyproject.toml", "README.md", "kraft", "simulations")


def _catalogue_names() -> set[str]:
    """The scenario names the repository's catalogue registers, read from this interpreter."""
    catalogue = ROOT / "simulations"
    modules = {f"kraft_simulations.{path.stem}" for path in catalogue.glob("*.py")}
    return {
        name
        for name, found in load_scenarios(catalogue).items()
        if found.body.__module__ in modules
    }


def test_every_package_of_kraft_ships_in_the_wheel() -> None:
    """pyproject.toml lists the packages by hand (to map simulations/ to kraft_simulations):
    a package added under kraft/ and not listed there would be missing from the wheel."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "kraft").rglob("__init__.py")
    }
    assert set(config["packages"]) == on_disk | {"kraft_simulations"}
    assert config["package-dir"] == {"kraft_simulations": "simulations"}


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, f"{command}: {result.stdout}\n{result.stderr}"
    return result


def test_an_installed_wheel_lists_and_runs_the_scenarios_outside_the_checkout(
    tmp_path: Path,
) -> None:
    # A copy of the sources: building in the checkout would leave build/ there, and a stale
    # build/lib would leak files deleted since into the wheel.
    source = tmp_path / "source"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "KRAFT_SCENARIOS", "VIRTUAL_ENV")
    }
    built = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--verbose",
            "--wheel-dir",
            str(tmp_path / "dist"),
            str(source),
        ],
        tmp_path,
        env,
    )
    # setuptools warns of a deprecated `project.license` table (a dated deprecation).
    assert "project.license" not in built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("kraft-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)], tmp_path, env
    )
    work = tmp_path / "elsewhere"  # no simulations/ here: the installed catalogue is used
    work.mkdir()
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import kraft; print(kraft.__file__)"], work, env
    ).stdout
    assert Path(where.strip()).is_relative_to(venv), where

    kraft = str(venv / "bin" / "kraft")
    listing = _run([kraft, "sim", "list"], work, env).stdout
    listed = {line.split()[0] for line in listing.splitlines() if not line.startswith(" ")}
    assert listed == _catalogue_names()

    ran = _run(
        [
            kraft,
            "sim",
            "run",
            "--scenario",
            "initial_election",
            "--seed",
            "1",
            "--no-message-events",
            "--out",
            str(work / "run"),
        ],
        work,
        env,
    ).stdout
    assert ran.startswith("ok initial_election seed 1:"), ran
    assert (work / "run" / "events.jsonl").is_file()
