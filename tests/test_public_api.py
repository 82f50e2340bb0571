"""The names ``import kraft`` offers: the core eagerly, the runtime lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

import kraft
from kraft.runtime.config import NodeConfig, load_node_config
from kraft.runtime.node import RaftNode


def test_import_kraft_does_not_load_the_runtime() -> None:
    """The core stays importable without trio: RaftNode's module loads on first use only."""
    code = (
        "import sys, kraft\n"
        "assert 'trio' not in sys.modules and 'kraft.runtime.node' not in sys.modules\n"
        "node = kraft.RaftNode\n"
        "assert 'trio' in sys.modules and node.__module__ == 'kraft.runtime.node'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_runtime_names_are_the_runtime_objects() -> None:
    assert (kraft.RaftNode, kraft.NodeConfig, kraft.load_node_config) == (
        RaftNode,
        NodeConfig,
        load_node_config,
    )
    assert {"RaftNode", "NodeConfig", "load_node_config"} <= set(kraft.__all__)


def test_every_name_in_all_resolves() -> None:
    for name in kraft.__all__:
        assert getattr(kraft, name) is not None


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'RaftNod'"):
        _ = kraft.RaftNod
