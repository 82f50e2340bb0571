"""QuorumConfig and Kafka's voter / bootstrap-server syntax."""

from __future__ import annotations

from typing import Any

import pytest

from kraft.config import ConfigError, Endpoint, QuorumConfig, parse_bootstrap_servers, parse_voters


def test_parse_voters_reads_kafkas_syntax() -> None:
    voters = parse_voters("1@127.0.0.1:9091, 2@localhost:9092,3@[::1]:9093")
    assert voters == {1: Endpoint("127.0.0.1", 9091), 2: Endpoint("localhost", 9092),
                      3: Endpoint("::1", 9093)}
    assert str(voters[3]) == "[::1]:9093"


@pytest.mark.parametrize("text", [
    "1@host", "x@host:1", "1host:9", "1@host:0", "1@host:70000", "1@:9", "-1@h:9",
    "1@h:9,1@h:10", "1@h:port",
])
def test_parse_voters_rejects_bad_entries(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_voters(text)


def test_parse_bootstrap_servers() -> None:
    assert parse_bootstrap_servers("a:1,b:2") == [Endpoint("a", 1), Endpoint("b", 2)]
    with pytest.raises(ConfigError):
        parse_bootstrap_servers("a")


def test_defaults_are_kafkas() -> None:
    config = QuorumConfig(voters={1: Endpoint("h", 1)})
    assert (config.election_timeout_ms, config.election_backoff_max_ms, config.fetch_timeout_ms,
            config.append_linger_ms, config.request_timeout_ms, config.retry_backoff_ms) == (
        1000, 1000, 2000, 25, 2000, 20)
    assert config.voter_ids == frozenset({1})


@pytest.mark.parametrize("field", ["election_timeout_ms", "fetch_timeout_ms",
                                   "request_timeout_ms", "max_batch_size_bytes"])
def test_non_positive_timers_are_rejected(field: str) -> None:
    zero: dict[str, Any] = {field: 0}
    with pytest.raises(ConfigError, match=field):
        QuorumConfig(voters={1: Endpoint("h", 1)}, **zero)


def test_a_quorum_needs_voters_or_bootstrap_servers() -> None:
    with pytest.raises(ConfigError):
        QuorumConfig()
