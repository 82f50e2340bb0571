"""The Python examples in the guides run as written (each block on its own, in a fresh
interpreter): docs/testing.md, docs/simulation.md and docs/snapshots.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
#: Each guide, and how many examples it has at least (so that the extraction did not find
#: zero by accident).
GUIDES = {"testing.md": 10, "simulation.md": 4, "snapshots.md": 2}
BLOCKS = {
    guide: re.findall(r"```python\n(.*?)```", (DOCS / guide).read_text(), re.S)
    for guide in GUIDES
}
EXAMPLES = [(guide, index) for guide, blocks in BLOCKS.items() for index in range(len(blocks))]


@pytest.mark.parametrize("guide", GUIDES)
def test_the_guide_has_examples(guide: str) -> None:
    assert len(BLOCKS[guide]) >= GUIDES[guide]


@pytest.mark.parametrize(("guide", "index"), EXAMPLES, ids=[f"{g}-{i}" for g, i in EXAMPLES])
def test_guide_example_runs(guide: str, index: int, tmp_path: Path) -> None:
    """Example ``index`` of ``guide`` exits 0 (its own asserts hold)."""
    script = tmp_path / f"example_{index}.py"
    script.write_text(BLOCKS[guide][index])
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120,
        cwd=tmp_path, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
