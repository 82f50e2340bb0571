"""The example in docs/event-queue.md runs (it asserts its deterministic part itself)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "event-queue.md"


def test_the_documented_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "event_queue_example"})
    printed = capsys.readouterr().out.splitlines()
    assert sorted(ast.literal_eval(printed[0])) == ["first", "later", "second"]
