"""The controller's tools: the ``[controller]`` table, how a client recognises NOT_CONTROLLER,
a simulated broker's steps (a fake client, no sockets), and ``kraft topics``, ``kraft configs``,
``kraft cluster describe`` and ``kraft broker simulate`` against a one-node controller quorum
in this process (real sockets on 127.0.0.1)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraft.cli.broker import SimulatedBroker
from kraft.cli.configs import parse_add_config
from kraft.cli.controller_client import ControllerClient, is_not_controller
from kraft.cli.features import metadata_version_level
from kraft.cli.main import main
from kraft.cli.quorum import describe_quorum
from kraft.config import ConfigError, parse_bootstrap_servers
from kraft.controller.configs import ConfigResource
from kraft.errors import FatalFaultError
from kraft.log.meta_properties import format_storage, random_uuid
from kraft.protocol.controller_messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControllerRequest,
    ControllerResponse,
    CreatableTopicResult,
    CreateTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeTopicPartitionsResponse,
)
from kraft.protocol.errors import Errors
from kraft.runtime.config import node_config_from_mapping
from kraft.runtime.controller_node import ControllerNode
from kraft.runtime.processes import LOOPBACK_TIMERS, free_ports
from kraft.runtime.request_once import controller_request_once


def _config(tmp_path: Path, **controller: int) -> dict[str, object]:
    data: dict[str, object] = {
        "node_id": 1,
        "data_dir": "data",
        "voters": "1@127.0.0.1:9091",
    }
    if controller:
        data["controller"] = controller
    return data


def test_the_controller_table_sets_the_controller_config(tmp_path: Path) -> None:
    config = node_config_from_mapping(
        _config(tmp_path, session_timeout_ms=3000, default_replication_factor=3), tmp_path
    )
    assert config.controller.session_timeout_ms == 3000
    assert config.controller.default_replication_factor == 3
    assert config.controller.max_idle_interval_ms == 500  # Kafka's default stays
    assert node_config_from_mapping(_config(tmp_path), tmp_path).controller.session_timeout_ms == (
        9000
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"cluster_id": 5}, "unknown key"),
        ({"session_timeout_ms": "9s"}, "controller.session_timeout_ms"),
        ({"session_timeout_ms": 0}, "session_timeout_ms must be >= 1"),
    ],
)
def test_a_bad_controller_table_is_refused(
    tmp_path: Path, table: dict[str, object], message: str
) -> None:
    data = _config(tmp_path)
    data["controller"] = table
    with pytest.raises(ConfigError, match=message):
        node_config_from_mapping(data, tmp_path)


def test_not_controller_is_recognised_on_the_top_level_or_every_item() -> None:
    assert is_not_controller(BrokerRegistrationResponse(error_code=Errors.NOT_CONTROLLER))
    assert not is_not_controller(BrokerRegistrationResponse(error_code=Errors.STALE_BROKER_EPOCH))
    refused = CreatableTopicResult(name="a", error_code=Errors.NOT_CONTROLLER)
    assert is_not_controller(CreateTopicsResponse(topics=(refused, refused)))
    # One topic refused for its own reason: the controller answered.
    exists = CreatableTopicResult(name="b", error_code=Errors.TOPIC_ALREADY_EXISTS)
    assert not is_not_controller(CreateTopicsResponse(topics=(refused, exists)))
    assert not is_not_controller(DescribeTopicPartitionsResponse())


class _FakeClient(ControllerClient):
    """Answers from a script, records what was sent."""

    def __init__(self, answers: list[ControllerResponse]) -> None:
        super().__init__([])
        self.answers = answers
        self.sent: list[ControllerRequest] = []

    def send(self, body: ControllerRequest, timeout_s: float) -> ControllerResponse:
        self.sent.append(body)
        return self.answers.pop(0)


def test_a_simulated_broker_registers_heartbeats_and_registers_again_when_stale() -> None:
    broker = SimulatedBroker(4, "cluster")
    client = _FakeClient(
        [
            BrokerRegistrationResponse(broker_epoch=12),
            BrokerHeartbeatResponse(is_fenced=True),
            BrokerHeartbeatResponse(is_fenced=False, is_caught_up=True),
            BrokerHeartbeatResponse(error_code=Errors.STALE_BROKER_EPOCH),
            BrokerRegistrationResponse(broker_epoch=40),
        ]
    )
    events = [broker.step(client, 1.0) for _ in range(5)]
    assert events == [
        {"event": "registered", "broker": 4, "epoch": 12},
        None,
        {"event": "unfenced", "broker": 4},
        {"event": "error", "broker": 4, "error": "STALE_BROKER_EPOCH"},
        {"event": "registered", "broker": 4, "epoch": 40},
    ]
    registration, beat = client.sent[0], client.sent[1]
    assert isinstance(registration, BrokerRegistrationRequest)
    assert registration.cluster_id == "cluster" and registration.log_dirs
    assert registration.listeners[0].port == 9092 + 4
    # It reports its registration as read: what the controller waits for to unfence it.
    assert isinstance(beat, BrokerHeartbeatRequest)
    assert (beat.broker_epoch, beat.current_metadata_offset) == (12, 12)
    assert client.sent[4] == registration  # the same incarnation registers again


@pytest.fixture
def controller_node(tmp_path: Path) -> Iterator[ControllerNode]:
    """A one-node controller quorum in this process."""
    [port] = free_ports(1)
    format_storage(tmp_path / "data", random_uuid(), 1)
    data = _config(tmp_path, max_idle_interval_ms=100)
    data["voters"] = f"1@127.0.0.1:{port}"
    data["quorum"] = dict(LOOPBACK_TIMERS)
    config = node_config_from_mapping(data, tmp_path)
    node = ControllerNode(config, config.controller)
    node.start()
    try:
        yield node
    finally:
        node.close()


@pytest.fixture
def controller(controller_node: ControllerNode) -> str:
    """The one-node controller quorum's address."""
    return str(controller_node.listen_address)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_tools_against_a_controller_node(
    controller: str, capsys: pytest.CaptureFixture[str]
) -> None:
    b = ["-b", controller, "--timeout", "20"]
    code, out, _ = _run(
        capsys,
        *("broker", "simulate", "--count", "2", "--interval", "0.1", "--duration", "2", *b),
    )
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert {e["broker"] for e in events if e["event"] == "unfenced"} == {1, 2}

    code, out, _ = _run(capsys, "cluster", "describe", "--json", *b)
    cluster = json.loads(out)
    assert code == 0 and cluster["controller_id"] == 1
    assert [broker["id"] for broker in cluster["brokers"]] == [1, 2]

    code, out, err = _run(
        capsys,
        *("topics", "create", "--topic", "t", "--partitions", "2", "--replication-factor", "2"),
        *("--json", *b),
    )
    assert code == 0, err
    assert json.loads(out)["partitions"] == 2

    code, _, err = _run(capsys, "topics", "create", "--topic", "t", *b)
    assert code == 1 and "TOPIC_ALREADY_EXISTS" in err

    code, out, _ = _run(capsys, "topics", "describe", "--topic", "t", "--json", *b)
    [topic] = json.loads(out)["topics"]
    assert code == 0 and [p["partition"] for p in topic["partitions"]] == [0, 1]
    assert all(sorted(p["replicas"]) == [1, 2] for p in topic["partitions"])

    code, out, _ = _run(capsys, "topics", "describe", *b)
    assert code == 0 and "Partition: 1" in out

    code, out, _ = _run(capsys, "topics", "list", *b)
    assert (code, out) == (0, "t\n")

    code, _, _ = _run(capsys, "topics", "delete", "--topic", "t", *b)
    assert code == 0
    code, _, err = _run(capsys, "topics", "describe", "--topic", "t", *b)
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err

    code, _, err = _run(capsys, "topics", "create", "--topic", "u", "--topic-config", "x", *b)
    assert code == 2 and "NAME=VALUE" in err


def test_a_controller_node_still_answers_raft_requests(controller: str) -> None:
    bootstrap = parse_bootstrap_servers(controller)
    assert describe_quorum(bootstrap, timeout_s=10).leader_id == 1
    answer = ControllerClient(bootstrap).send(DescribeClusterRequest(), 10)
    assert isinstance(answer, DescribeClusterResponse) and answer.controller_id == 1


def test_a_fatal_fault_in_the_controller_stops_the_node(controller_node: ControllerNode) -> None:
    assert controller_node.controller is not None
    fault = FatalFaultError("a record that does not fit")
    controller_node.controller._fail("replay", fault)  # what a bad record leads to
    assert controller_node.wait(10)
    assert controller_node.failure is fault


def test_a_request_naming_another_cluster_is_refused(controller: str) -> None:
    [address] = parse_bootstrap_servers(controller)
    answer = controller_request_once(
        address, DescribeClusterRequest(), cluster_id="another-cluster", timeout_s=10
    )
    assert isinstance(answer, DescribeClusterResponse)
    assert answer.error_code == Errors.INCONSISTENT_CLUSTER_ID
    assert "another-cluster" in (answer.error_message or "")


@pytest.mark.parametrize(
    ("text", "configs"),
    [
        ("a=1", {"a": "1"}),
        (" a = 1 ,b=", {"a": "1", "b": ""}),
        ("cleanup.policy=[compact,delete],c=2", {"cleanup.policy": "compact,delete", "c": "2"}),
    ],
)
def test_add_config_is_parsed_as_kafkas_config_command(text: str, configs: dict[str, str]) -> None:
    assert parse_add_config(text) == configs


@pytest.mark.parametrize("text", ["a", "a=1,b", "a=b=c", "bad key=1"])
def test_a_bad_add_config_is_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_add_config(text)


@pytest.mark.slow  # a broker simulation of 2 s, then some 20 commands
def test_topics_alter_paging_and_configs_alter_against_a_controller_node(
    controller_node: ControllerNode, capsys: pytest.CaptureFixture[str]
) -> None:
    b = ["-b", str(controller_node.listen_address), "--timeout", "20"]
    simulate = ("broker", "simulate", "--count", "2", "--interval", "0.1", "--duration", "2")
    assert _run(capsys, *simulate, *b)[0] == 0
    create = ("topics", "create", "--topic", "t", "--partitions", "1", "--replication-factor", "2")
    assert _run(capsys, *create, *b)[0] == 0

    assert _run(capsys, "topics", "alter", "--topic", "t", "--partitions", "3", *b)[0] == 0
    code, _, err = _run(capsys, "topics", "alter", "--topic", "t", "--partitions", "2", *b)
    assert code == 1 and "INVALID_PARTITIONS" in err
    code, _, err = _run(capsys, "topics", "alter", "--topic", "u", "--partitions", "2", *b)
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, _, err = _run(capsys, "topics", "alter", "--topic", "t", "--partitions", "0", *b)
    assert code == 2 and "at least 1" in err

    # One partition per answer: the tool follows next_cursor through every page.
    page = ("--partition-size-limit-per-response", "1")
    code, out, _ = _run(capsys, "topics", "describe", "--topic", "t", "--json", *page, *b)
    [topic] = json.loads(out)["topics"]
    assert code == 0 and [p["partition"] for p in topic["partitions"]] == [0, 1, 2]
    assert _run(capsys, "topics", "list", *page, *b)[:2] == (0, "t\n")

    alter = ("configs", "alter", "--entity-type")
    add = ("--add-config", "retention.ms=1000, cleanup.policy=[compact,delete]")
    assert _run(capsys, *alter, "topics", "--entity-name", "t", *add, *b)[0] == 0
    code, _, _ = _run(
        capsys, *alter, "topics", "--entity-name", "t", "--delete-config", "retention.ms", *b
    )
    assert code == 0
    controller = controller_node.controller
    assert controller is not None
    topic_configs = controller.append_read_event(
        "test", lambda _: controller.configs.config(ConfigResource(2, "t"))
    )
    assert topic_configs.result(10) == {"cleanup.policy": "compact,delete"}
    code, out, _ = _run(
        capsys, "configs", "describe", "--entity-type", "topics", "--entity-name", "t", *b
    )
    assert (code, out) == (
        0,
        "Dynamic configs for topic t are:\n"
        "  cleanup.policy=compact,delete sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete}\n",
    )
    code, _, err = _run(
        capsys, *alter, "topics", "--entity-name", "t", "--delete-config", "retention.ms", *b
    )
    assert code == 1 and "Invalid config(s): retention.ms" in err

    assert _run(capsys, *alter, "brokers", "--entity-name", "1", *add, *b)[0] == 0
    assert _run(capsys, *alter, "brokers", "--entity-default", *add, *b)[0] == 0
    code, out, _ = _run(
        capsys, "configs", "describe", "--entity-type", "brokers", "--entity-default", "--json", *b
    )
    assert code == 0
    assert json.loads(out)["configs"] == {
        "cleanup.policy": "compact,delete",
        "retention.ms": "1000",
    }
    code, _, err = _run(
        capsys, "configs", "describe", "--entity-type", "topics", "--entity-name", "u", *b
    )
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, _, err = _run(capsys, *alter, "topics", "--entity-name", "u", *add, *b)
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, _, err = _run(capsys, *alter, "brokers", "--entity-name", "9", *add, *b)
    assert code == 1 and "BROKER_ID_NOT_REGISTERED" in err
    for bad, why in [
        (("brokers", "--entity-name", "x", *add), "valid integer broker id"),
        (("topics", "--entity-default", *add), "--entity-type brokers"),
        (("topics", "--entity-name", "t"), "nothing to change"),
        (("topics", "--entity-name", "t", "--add-config", "a"), "format key=val"),
        (("topics", "--entity-name", "t", "--add-config", "a=1", "--delete-config", "a"), "both"),
    ]:
        code, _, err = _run(capsys, *alter, *bad, *b)
        assert code == 2 and why in err, (bad, err)


def test_metadata_versions_are_read_as_kafkas_feature_command() -> None:
    assert [metadata_version_level(v) for v in ("3.9-IV0", "3.9", "3.7", "3.0-IV1")] == [
        21,
        21,
        19,
        1,
    ]
    with pytest.raises(ConfigError, match=r"Supported metadata\.version are 3\.0-IV1, "):
        metadata_version_level("2.8")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ((), "give --feature NAME=LEVEL or --metadata VERSION"),
        (("--metadata", "9.9"), "unknown metadata.version 9.9"),
        (("--feature", "a=1", "--feature", "a=2"), "a was specified more than once"),
        (("--metadata", "3.9", "--feature", "metadata.version=21"), "more than once"),
    ],
)
def test_features_upgrade_bad_arguments_exit_2(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], says: str
) -> None:
    code, _, err = _run(capsys, "features", "upgrade", *argv, "-b", "127.0.0.1:1")
    assert code == 2 and says in err


@pytest.mark.slow  # a kraft.version upgrade commits, then a handful of commands
def test_features_describe_and_upgrade_against_a_controller_node(
    controller: str, capsys: pytest.CaptureFixture[str]
) -> None:
    b = ["-b", controller, "--timeout", "20"]
    code, out, _ = _run(capsys, "features", "describe", *b)
    assert code == 0
    kraft_line, metadata_line = out.splitlines()
    assert kraft_line.startswith(
        "Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
        "FinalizedVersionLevel: 0\tEpoch: "
    )
    assert metadata_line.startswith(
        "Feature: metadata.version\tSupportedMinVersion: 3.9-IV0\t"
        "SupportedMaxVersion: 3.9-IV0\tFinalizedVersionLevel: 3.9-IV0\tEpoch: "
    )

    upgrade = ("features", "upgrade")
    code, out, _ = _run(capsys, *upgrade, "--metadata", "3.9-IV0", *b)
    assert (code, out) == (0, "metadata.version was upgraded to level 21.\n")
    code, out, _ = _run(capsys, *upgrade, "--feature", "metadata.version=21", "--dry-run", *b)
    assert (code, out) == (0, "metadata.version was validated for level 21.\n")
    code, _, err = _run(capsys, *upgrade, "--feature", "metadata.version=22", *b)
    assert code == 1 and "INVALID_UPDATE_VERSION: The update failed for all features" in err
    code, _, err = _run(capsys, *upgrade, "--metadata", "3.9", "--feature", "kraft.version=1", *b)
    assert code == 1 and "It is upgraded alone" in err

    # kraft.version alone still goes to the Raft client, which makes the quorum dynamic.
    code, out, err = _run(capsys, *upgrade, "--feature", "kraft.version=1", *b)
    assert (code, out) == (0, "kraft.version was upgraded to level 1.\n"), err
    code, out, _ = _run(capsys, "features", "describe", "--json", *b)
    levels = {f["feature"]: f["finalized"] for f in json.loads(out)["features"]}
    assert code == 0 and levels == {"kraft.version": 1, "metadata.version": 21}
