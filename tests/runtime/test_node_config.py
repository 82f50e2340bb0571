"""``NodeConfig`` from TOML: defaults, relative paths, and a clear error for every bad key."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft.config import ConfigError, Endpoint
from kraft.runtime.config import load_node_config

VOTERS = 'voters = "1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093"\n'


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


def test_a_minimal_file_takes_kafkas_defaults(tmp_path: Path) -> None:
    config = load_node_config(_write(tmp_path, 'node_id = 2\ndata_dir = "d/2"\n' + VOTERS))
    assert config.node_id == 2
    assert config.data_dir == tmp_path / "d" / "2"
    assert config.listen_address == Endpoint("127.0.0.1", 9092)
    assert config.quorum.election_timeout_ms == 1000
    assert config.quorum.append_linger_ms == 25
    assert config.tls is None and config.prometheus is None and config.cluster_id is None


def test_every_section(tmp_path: Path) -> None:
    config = load_node_config(
        _write(
            tmp_path,
            (
                'node_id = 1\ndata_dir = "/var/kraft"\n'
                + VOTERS
                + 'listen = "0.0.0.0:19091"\ncluster_id = "abc"\nmax_frame_size = 33554432\n'
                "[quorum]\nelection_timeout_ms = 300\nappend_linger_ms = 0\n"
                "followers_always_flush = true\n"
                '[tls]\ncertfile = "c.pem"\nkeyfile = "k.pem"\ncafile = "/ca.pem"\nverify = false\n'
                '[metrics]\nprometheus = "127.0.0.1:9101"\n'
            ),
        )
    )
    assert config.data_dir == Path("/var/kraft")
    assert config.listen_address == Endpoint("0.0.0.0", 19091)
    assert config.cluster_id == "abc" and config.max_frame_size == 32 * 1024 * 1024
    assert config.quorum.election_timeout_ms == 300 and config.quorum.append_linger_ms == 0
    assert config.quorum.followers_always_flush
    assert config.tls is not None
    assert config.tls.certfile == tmp_path / "c.pem" and config.tls.cafile == Path("/ca.pem")
    assert config.tls.verify is False and config.tls.check_hostname is True
    assert config.prometheus == Endpoint("127.0.0.1", 9101)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('data_dir = "d"\n' + VOTERS, "node_id is required"),
        ("node_id = 1\n" + VOTERS, "data_dir is required"),
        ('node_id = "one"\ndata_dir = "d"\n' + VOTERS, "node_id: expected int"),
        ('node_id = true\ndata_dir = "d"\n' + VOTERS, "node_id: expected an integer"),
        ('node_id = 1\ndata_dir = "d"\nvoterz = "x"\n' + VOTERS, "unknown key(s) voterz"),
        ('node_id = 1\ndata_dir = "d"\n', "voters or bootstrap servers"),
        ('node_id = 1\ndata_dir = "d"\nvoters = "1@nohost"\n', "expected host:port"),
        ('node_id = 4\ndata_dir = "d"\n' + VOTERS, "node 4 is not a voter"),
        (
            'node_id = 1\ndata_dir = "d"\n' + VOTERS + "[quorum]\nelection_timeout_ms = -1\n",
            "election_timeout_ms must be positive",
        ),
        (
            'node_id = 1\ndata_dir = "d"\n' + VOTERS + "[quorum]\nelection_timeout = 5\n",
            "[quorum]: unknown key(s) election_timeout",
        ),
        (
            'node_id = 1\ndata_dir = "d"\n' + VOTERS + '[tls]\ncertfile = "c"\n',
            "tls.keyfile is required",
        ),
        (
            'node_id = 1\ndata_dir = "d"\n' + VOTERS + "max_frame_size = 2048\n",
            "must exceed the quorum's max_batch_size_bytes",
        ),
        ('node_id = 1\ndata_dir = "d"\n' + VOTERS + "quorum = 5\n", "[quorum] must be a table"),
        ("node_id = = 1\n", "not valid TOML"),
    ],
)
def test_bad_files_name_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_node_config(path)
    assert str(path) in str(caught.value)
    assert message in str(caught.value)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_node_config(tmp_path / "absent.toml")


def test_the_latency_settings_of_the_operations_guide_load(tmp_path: Path) -> None:
    """docs/operations.md#latency: its [quorum] block is a valid table of a node's file."""
    guide = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    section = guide.split("## Latency", 1)[1]
    block = section.split("```toml\n", 1)[1].split("```", 1)[0]
    config = load_node_config(_write(tmp_path, 'node_id = 2\ndata_dir = "d"\n' + VOTERS + block))
    assert config.quorum.append_linger_ms == 0
    assert config.quorum.fetch_high_watermark_linger_ms == 1
