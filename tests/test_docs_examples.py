"""The Python examples in docs/testing.md run as written (each block on its own)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCKS = re.findall(r"```python\n(.*?)```", (DOCS / "testing.md").read_text(), re.S)


def test_the_testing_guide_has_examples() -> None:
    """The extraction below found the guide's examples (not zero by accident)."""
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_testing_guide_example_runs(index: int, tmp_path: Path) -> None:
    """Example ``index`` of docs/testing.md exits 0 (its own asserts hold)."""
    script = tmp_path / f"example_{index}.py"
    script.write_text(BLOCKS[index])
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120,
        cwd=tmp_path, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
