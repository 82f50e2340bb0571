"""ConfigurationControlManager: incremental alters with Kafka's operations and codes, per
resource, applied through replay."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.controller.configs import (
    ConfigResource,
    ConfigResourceType,
    ConfigurationControlManager,
    OpType,
)
from kraft.controller.result import ApiError, ControllerApiError, ControllerResult
from kraft.metadata.delta import MetadataDelta
from kraft.metadata.image import MetadataImage, MetadataProvenance
from kraft.metadata.records import ConfigRecord
from kraft.metadata.timeline import SnapshotRegistry
from kraft.protocol.errors import Errors

TOPIC = ConfigResource(ConfigResourceType.TOPIC, "orders")
OTHER_TOPIC = ConfigResource(ConfigResourceType.TOPIC, "payments")
BROKER = ConfigResource(ConfigResourceType.BROKER, "1")
CLUSTER_DEFAULT = ConfigResource(ConfigResourceType.BROKER, "")

Changes = Mapping[ConfigResource, Mapping[str, tuple[OpType, str | None]]]


def existing(resource: ConfigResource) -> None:
    if resource.type == ConfigResourceType.TOPIC and resource.name != "orders":
        raise ControllerApiError(
            Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{resource.name}' does not exist."
        )


class Controller:
    def __init__(self) -> None:
        self.registry = SnapshotRegistry()
        self.configs = ConfigurationControlManager(self.registry, existence_checker=existing)
        self.offset = -1
        self.registry.get_or_create_snapshot(self.offset)

    def alter(
        self, changes: Changes, validate_only: bool = False, **kwargs: bool
    ) -> ControllerResult[dict[ConfigResource, ApiError]]:
        before = {r: self.configs.config(r) for r in self.configs.resources()}
        result = self.configs.incremental_alter_configs(changes, validate_only, **kwargs)
        assert {r: self.configs.config(r) for r in self.configs.resources()} == before
        for record in result.records:
            assert isinstance(record.message, ConfigRecord) and record.version == 0
            self.offset += 1
            self.configs.replay(record.message, self.offset)
            self.registry.get_or_create_snapshot(self.offset)
        return result


def test_set_and_delete() -> None:
    controller = Controller()
    result = controller.alter(
        {TOPIC: {"retention.ms": (OpType.SET, "1000"), "cleanup.policy": (OpType.SET, "compact")}}
    )
    assert result.response == {TOPIC: ApiError.NONE} and result.is_atomic
    assert [r.message for r in result.records] == [
        ConfigRecord(resource_type=2, resource_name="orders", name="retention.ms", value="1000"),
        ConfigRecord(
            resource_type=2, resource_name="orders", name="cleanup.policy", value="compact"
        ),
    ]
    assert controller.configs.config(TOPIC) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    controller.alter({TOPIC: {"retention.ms": (OpType.DELETE, None)}})
    assert controller.configs.config(TOPIC) == {"cleanup.policy": "compact"}
    controller.alter({TOPIC: {"cleanup.policy": (OpType.DELETE, None)}})
    assert controller.configs.config(TOPIC) == {} and controller.configs.resources() == []


def test_an_unchanged_topic_config_writes_nothing_but_a_broker_config_always_does() -> None:
    controller = Controller()
    controller.alter({TOPIC: {"retention.ms": (OpType.SET, "1")}, BROKER: {"x": (OpType.SET, "1")}})
    again = controller.alter(
        {TOPIC: {"retention.ms": (OpType.SET, "1")}, BROKER: {"x": (OpType.SET, "1")}}
    )
    # Brokers reload a config when its record arrives (KAFKA-14136).
    assert [r.message.resource_name for r in again.records] == ["1"]  # type: ignore[union-attr]


def test_append_and_subtract_on_list_configs() -> None:
    controller = Controller()
    controller.alter({TOPIC: {"cleanup.policy": (OpType.APPEND, "compact")}})
    # An unset list config starts from its default ("delete").
    assert controller.configs.config(TOPIC) == {"cleanup.policy": "delete,compact"}
    controller.alter({TOPIC: {"cleanup.policy": (OpType.APPEND, "compact,delete")}})
    assert controller.configs.config(TOPIC) == {"cleanup.policy": "delete,compact"}
    controller.alter({TOPIC: {"cleanup.policy": (OpType.SUBTRACT, "delete")}})
    assert controller.configs.config(TOPIC) == {"cleanup.policy": "compact"}
    controller.alter({TOPIC: {"leader.replication.throttled.replicas": (OpType.APPEND, "0:1,0:2")}})
    assert controller.configs.config(TOPIC)["leader.replication.throttled.replicas"] == "0:1,0:2"
    refused = controller.alter({TOPIC: {"retention.ms": (OpType.APPEND, "5")}})
    assert refused.response[TOPIC].error is Errors.INVALID_CONFIG
    assert "because its type is not LIST" in (refused.response[TOPIC].message or "")


def test_each_resource_fails_alone() -> None:
    controller = Controller()
    result = controller.alter(
        {
            TOPIC: {"retention.ms": (OpType.SET, "7")},
            OTHER_TOPIC: {"retention.ms": (OpType.SET, "7")},
            ConfigResource(ConfigResourceType.TOPIC, ""): {"a": (OpType.SET, "1")},
            ConfigResource(ConfigResourceType.BROKER, "one"): {"a": (OpType.SET, "1")},
            ConfigResource(ConfigResourceType.BROKER, "-1"): {"a": (OpType.SET, "1")},
            ConfigResource(ConfigResourceType.GROUP, "g"): {"a": (OpType.SET, "1")},
            CLUSTER_DEFAULT: {"log.retention.ms": (OpType.SET, "9")},
        }
    )
    errors = {resource: error.error for resource, error in result.response.items()}
    assert errors == {
        TOPIC: Errors.NONE,
        OTHER_TOPIC: Errors.UNKNOWN_TOPIC_OR_PARTITION,
        ConfigResource(ConfigResourceType.TOPIC, ""): Errors.INVALID_REQUEST,
        ConfigResource(ConfigResourceType.BROKER, "one"): Errors.INVALID_REQUEST,
        ConfigResource(ConfigResourceType.BROKER, "-1"): Errors.INVALID_REQUEST,
        ConfigResource(ConfigResourceType.GROUP, "g"): Errors.INVALID_REQUEST,
        CLUSTER_DEFAULT: Errors.NONE,
    }
    assert controller.configs.config(TOPIC) == {"retention.ms": "7"}
    assert controller.configs.config(CLUSTER_DEFAULT) == {"log.retention.ms": "9"}
    assert controller.configs.config(OTHER_TOPIC) == {}


def test_a_topic_config_cannot_be_set_to_null() -> None:
    controller = Controller()
    result = controller.alter({TOPIC: {"retention.ms": (OpType.SET, None)}})
    assert result.response[TOPIC].error is Errors.INVALID_CONFIG and result.records == []


def test_a_topic_being_created_need_not_exist_yet() -> None:
    controller = Controller()
    changes: Changes = {OTHER_TOPIC: {"retention.ms": (OpType.SET, "3")}}
    assert (
        controller.alter(changes).response[OTHER_TOPIC].error is Errors.UNKNOWN_TOPIC_OR_PARTITION
    )
    created = controller.alter(changes, newly_created_resource=True)
    assert created.response[OTHER_TOPIC] == ApiError.NONE
    assert controller.configs.config(OTHER_TOPIC) == {"retention.ms": "3"}


def test_validate_only_writes_nothing() -> None:
    controller = Controller()
    result = controller.alter({TOPIC: {"retention.ms": (OpType.SET, "1")}}, validate_only=True)
    assert result.response == {TOPIC: ApiError.NONE} and result.records == []
    assert controller.configs.config(TOPIC) == {}


def test_reads_at_an_offset_revert_and_topic_deletion() -> None:
    controller = Controller()
    controller.alter({TOPIC: {"retention.ms": (OpType.SET, "1")}})
    committed = controller.offset
    controller.alter({TOPIC: {"retention.ms": (OpType.SET, "2"), "segment.ms": (OpType.SET, "5")}})
    assert controller.configs.config(TOPIC, committed) == {"retention.ms": "1"}
    assert controller.configs.config(TOPIC, -1) == {}
    controller.configs.delete_topic_configs("orders")
    assert controller.configs.config(TOPIC) == {} and controller.configs.resources() == []
    controller.registry.revert_to_snapshot(committed)
    assert controller.configs.config(TOPIC) == {"retention.ms": "1"}


def test_unknown_operation_is_invalid_request() -> None:
    controller = Controller()
    result = controller.alter({TOPIC: {"a": (OpType(3), "x"), "b": (9, "y")}})  # type: ignore[dict-item]
    assert result.response[TOPIC].error is Errors.INVALID_CONFIG  # SUBTRACT on a non-list
    result = controller.alter({TOPIC: {"b": (9, "y")}})  # type: ignore[dict-item]
    assert result.response[TOPIC].error is Errors.INVALID_REQUEST


@pytest.mark.parametrize("name", ["+7", "007"])
def test_broker_names_parse_as_java_ints(name: str) -> None:
    controller = Controller()
    resource = ConfigResource(ConfigResourceType.BROKER, name)
    assert (
        controller.alter({resource: {"a": (OpType.SET, "1")}}).response[resource] == ApiError.NONE
    )


@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from([TOPIC, BROKER, CLUSTER_DEFAULT]),
            st.sampled_from(["cleanup.policy", "retention.ms", "log.cleanup.policy"]),
            st.sampled_from(list(OpType)),
            st.sampled_from(["compact", "delete", "1,2", "7"]),
        ),
        max_size=20,
    )
)
def test_configs_equal_the_image_of_the_same_records(
    ops: list[tuple[ConfigResource, str, OpType, str]],
) -> None:
    controller = Controller()
    delta = MetadataDelta(MetadataImage.EMPTY)
    for resource, name, op, value in ops:
        result = controller.alter({resource: {name: (op, value)}})
        for record in result.records:
            delta.replay(record.message)
    image = delta.apply(MetadataProvenance(controller.offset, 1, 0))
    assert {key: dict(config) for key, config in image.configs.items()} == {
        (r.type, r.name): controller.configs.config(r) for r in controller.configs.resources()
    }
