"""QuorumConfig and Kafka's voter / bootstrap-server syntax."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kraft.config import ConfigError, Endpoint, QuorumConfig, parse_bootstrap_servers, parse_voters


def test_parse_voters_reads_kafkas_syntax() -> None:
    voters = parse_voters("1@127.0.0.1:9091, 2@localhost:9092,3@[::1]:9093")
    assert voters == {
        1: Endpoint("127.0.0.1", 9091),
        2: Endpoint("localhost", 9092),
        3: Endpoint("::1", 9093),
    }
    assert str(voters[3]) == "[::1]:9093"


@pytest.mark.parametrize(
    "text",
    [
        "1@host",
        "x@host:1",
        "1host:9",
        "1@host:0",
        "1@host:70000",
        "1@:9",
        "-1@h:9",
        "1@h:9,1@h:10",
        "1@h:port",
    ],
)
def test_parse_voters_rejects_bad_entries(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_voters(text)


def test_parse_bootstrap_servers() -> None:
    assert parse_bootstrap_servers("a:1,b:2") == [Endpoint("a", 1), Endpoint("b", 2)]
    with pytest.raises(ConfigError):
        parse_bootstrap_servers("a")


def test_defaults_are_kafkas() -> None:
    config = QuorumConfig(voters={1: Endpoint("h", 1)})
    assert (
        config.election_timeout_ms,
        config.election_backoff_max_ms,
        config.fetch_timeout_ms,
        config.append_linger_ms,
        config.request_timeout_ms,
        config.retry_backoff_ms,
    ) == (1000, 1000, 2000, 25, 2000, 20)
    assert config.voter_ids == frozenset({1})


@pytest.mark.parametrize(
    "field",
    [
        "election_timeout_ms",
        "fetch_timeout_ms",
        "request_timeout_ms",
        "max_batch_size_bytes",
        "fetch_round_trip_margin_ms",
    ],
)
def test_non_positive_timers_are_rejected(field: str) -> None:
    zero: dict[str, Any] = {field: 0}
    with pytest.raises(ConfigError, match=field):
        QuorumConfig(voters={1: Endpoint("h", 1)}, **zero)


def test_a_quorum_needs_voters_or_bootstrap_servers() -> None:
    with pytest.raises(ConfigError):
        QuorumConfig()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("1@h:1;2@h:2", "separate entries with ','"),
        ("1@a@b:9", "host 'a@b' contains '@'"),
        ("1@h;x:9", "host 'h;x' contains ';'"),
        ("1@::1:9", "put an IPv6 address in brackets"),
        ("1@[not-ipv6]:9", "'[not-ipv6]' is not an IPv6 address"),
        ("1@h:0", "port 0 is outside 1-65535"),
        ("1@h:65536", "port 65536 is outside 1-65535"),
        ("1@h:+9", "port '+9' is not a number"),
        ("", "no voter"),
        (" , ", "no voter"),
        ("1@h:1,2@h:2,1@h:3", "voter id 1 is listed twice"),
        ("1_0@h:9", "id '1_0' is not a non-negative integer"),
    ],
)
def test_parse_voters_names_the_bad_part(text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        parse_voters(text)


def test_parse_voters_takes_ipv6_literals_in_brackets_and_the_whole_port_range() -> None:
    assert parse_voters("1@[fe80::1]:1,2@h:65535") == {
        1: Endpoint("fe80::1", 1),
        2: Endpoint("h", 65535),
    }


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("", "no server"),
        ("a:1;b:2", "separate entries with ','"),
        ("a@b:1", "contains '@'"),
        ("a:0", "outside 1-65535"),
    ],
)
def test_parse_bootstrap_servers_names_the_bad_part(text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        parse_bootstrap_servers(text)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"voters": "1@h:1"}, "parse_voters()"),
        ({"voters": {1: "h:1"}}, "voter 1: 'h:1' is not an Endpoint"),
        ({"voters": {"1": Endpoint("h", 1)}}, "voter id '1'"),
        ({"voters": {-1: Endpoint("h", 1)}}, "voter id -1"),
        ({"bootstrap_servers": "h:1"}, "parse_bootstrap_servers()"),
    ],
)
def test_quorum_config_rejects_the_wrong_types_with_a_config_error(
    kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        QuorumConfig(**kwargs)
