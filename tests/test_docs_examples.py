"""The Python examples in the guides run as written (each block on its own, in a fresh
interpreter): docs/testing.md, docs/simulation.md, docs/snapshots.md and docs/embedding.md
(whose examples start real nodes on loopback)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kraft.cli.main import build_parser

DOCS = Path(__file__).resolve().parent.parent / "docs"
#: Each guide, and how many examples it has at least (so that the extraction did not find
#: zero by accident).
GUIDES = {"testing.md": 10, "simulation.md": 4, "snapshots.md": 2, "embedding.md": 4}
BLOCKS = {
    guide: re.findall(r"```python\n(.*?)```", (DOCS / guide).read_text(), re.S) for guide in GUIDES
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
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_embedding_guide_shows_a_three_voter_quorum_and_the_order_of_calls() -> None:
    """docs/operations.md#embedding-a-node (its blocks run in tests/runtime/test_runtime_examples
    .py) embeds three voters, registers each listener before starting its node, and sets
    shutdown_timeout_ms."""
    guide = (DOCS / "operations.md").read_text()
    section = guide[guide.index("## Embedding a node") :]
    (quorum,) = [
        block
        for block in re.findall(r"```python\n(.*?)```", section, re.S)
        if "kraft.RaftNode(" in block and "free_ports(3)" in block
    ]
    assert (
        quorum.index("node.register(") < quorum.index("node.start()") < quorum.index("node.close()")
    )
    assert "shutdown_timeout_ms=" in quorum
    assert "`shutdown_timeout_ms`" in section


README = DOCS.parent / "README.md"


def test_the_readme_links_every_page_of_the_docs() -> None:
    text = README.read_text()
    pages = sorted(page.name for page in DOCS.glob("*.md"))
    assert [page for page in pages if f"](docs/{page})" not in text] == []


def test_the_readme_says_what_make_run_needs() -> None:
    """``make run`` creates a venv with python3 (3.11 or later), runs make, and ends with a
    Spark job that needs a JVM (Java 17 for PySpark 4)."""
    setup = README.read_text().split("## Set up and run", 1)[1].split("\n## ", 1)[0]
    for need in ("Python 3.11", "venv", "make", "Java 17"):
        assert need in setup, need
    assert "kraft analyze" in (DOCS.parent / "Makefile").read_text()


def test_the_readme_claims_of_dynamic_voters_are_backed() -> None:
    """KIP-853 is built: the README says so, the commands it names for it are the CLI's, and
    the pages it points to have the sections it names."""
    text = README.read_text()
    assert "KIP-853 dynamic voters" in text and "Not yet: dynamic voters" not in text
    parser = build_parser()
    for words in (
        ["quorum", "add-controller"],
        ["quorum", "remove-controller"],
        ["features", "upgrade"],
    ):
        assert f"kraft {words[0]}" in text and words[1] in text
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args([*words, "--help"])
        assert exit_info.value.code == 0, words
    assert "## §1.15 Dynamic voters (KIP-853)" in (DOCS / "protocol.md").read_text()
    assert "## Dynamic voters (KIP-853)" in (DOCS / "operations.md").read_text()
