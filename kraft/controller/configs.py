"""Dynamic configs of topics and brokers (Kafka's ``ConfigurationControlManager``).

A config is a string value under a resource (``ConfigResource``: Kafka's type id and a name;
the broker named "" holds the cluster-wide defaults) and a key. kraft stores the values as
given: it has no brokers' ``LogConfig``/``KafkaConfig`` schemas to check them against, except
for knowing which configs are lists (APPEND and SUBTRACT work on those only).
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Callable, Mapping
from typing import Final, NamedTuple

from kraft.controller.result import ApiError, ControllerApiError, ControllerResult
from kraft.metadata.records import ApiMessageAndVersion, ConfigRecord, at_latest_version
from kraft.metadata.timeline import LATEST, SnapshotRegistry, TimelineHashMap
from kraft.protocol.errors import Errors

__all__ = [
    "LIST_CONFIG_DEFAULTS",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigurationControlManager",
    "OpType",
]

_log = logging.getLogger(__name__)

#: A broker resource's name: a base-10 int, as Java's ``Integer.valueOf`` reads one.
_BROKER_NAME: Final = re.compile(r"[+-]?[0-9]+")


class ConfigResourceType(enum.IntEnum):
    """Kafka's ``ConfigResource.Type`` ids."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class OpType(enum.IntEnum):
    """Kafka's ``AlterConfigOp.OpType`` ids."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigResource(NamedTuple):
    """A topic or broker whose configs change: Kafka's type id and the resource's name."""

    type: int
    name: str


#: The list-typed configs APPEND and SUBTRACT work on, with the default an APPEND to an unset
#: config starts from (Kafka's ``LogConfig`` and ``KafkaConfig`` definitions).
LIST_CONFIG_DEFAULTS: Final[Mapping[tuple[int, str], str]] = {
    (ConfigResourceType.TOPIC, "cleanup.policy"): "delete",
    (ConfigResourceType.TOPIC, "leader.replication.throttled.replicas"): "",
    (ConfigResourceType.TOPIC, "follower.replication.throttled.replicas"): "",
    (ConfigResourceType.BROKER, "log.cleanup.policy"): "delete",
}

#: Checks that a resource exists, raising ``ControllerApiError`` when not (Kafka's
#: ``ConfigResourceExistenceChecker``: UNKNOWN_TOPIC_OR_PARTITION, BROKER_ID_NOT_REGISTERED).
ExistenceChecker = Callable[[ConfigResource], None]


def _everything_exists(resource: ConfigResource) -> None:
    return None


class ConfigurationControlManager:
    """Each resource's configs, in one timeline map keyed by (resource, config name)."""

    def __init__(
        self,
        registry: SnapshotRegistry,
        *,
        existence_checker: ExistenceChecker = _everything_exists,
    ) -> None:
        self._check_exists = existence_checker
        self._configs: TimelineHashMap[tuple[ConfigResource, str], str] = TimelineHashMap(registry)
        # The names of each resource's configs: reading or deleting one resource's configs
        # then does not scan every config.
        self._names: TimelineHashMap[ConfigResource, frozenset[str]] = TimelineHashMap(registry)

    def config(self, resource: ConfigResource, offset: int = LATEST) -> dict[str, str]:
        """The configs of ``resource`` as of ``offset``."""
        names = self._names.get(resource, offset) or frozenset()
        found = {}
        for name in names:
            value = self._configs.get((resource, name), offset)
            if value is not None:
                found[name] = value
        return found

    def resources(self, offset: int = LATEST) -> list[ConfigResource]:
        """The resources that have configs."""
        return sorted(self._names.keys(offset))

    # -- operations ------------------------------------------------------------

    def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Mapping[str, tuple[OpType, str | None]]],
        validate_only: bool,
        *,
        newly_created_resource: bool = False,
    ) -> ControllerResult[dict[ConfigResource, ApiError]]:
        """The records of each resource's changes, with one result per resource (a resource
        fails or succeeds alone; the records of all go in one batch). ``newly_created_resource``:
        the resource is being created in the same batch (a new topic's configs), so it need not
        exist yet."""
        records: list[ApiMessageAndVersion] = []
        results: dict[ConfigResource, ApiError] = {}
        for resource, ops in changes.items():
            try:
                records.extend(self._alter(resource, ops, newly_created_resource))
                results[resource] = ApiError.NONE
            except ControllerApiError as exc:
                _log.debug("refused config change of %s: %s", resource, exc)
                results[resource] = exc.api_error
        return ControllerResult([] if validate_only else records, results, is_atomic=True)

    def _alter(
        self,
        resource: ConfigResource,
        ops: Mapping[str, tuple[OpType, str | None]],
        newly_created_resource: bool,
    ) -> list[ApiMessageAndVersion]:
        _validate_resource(resource)
        records = []
        for name, (op, value) in ops.items():
            current = self._configs.get((resource, name))
            match op:
                case OpType.SET:
                    new = value
                case OpType.DELETE:
                    new = None
                case OpType.APPEND | OpType.SUBTRACT:
                    new = self._list_op(resource, name, OpType(op), current, value)
                case _:
                    raise ControllerApiError(
                        Errors.INVALID_REQUEST, f"Unknown config operation {op} for {name}"
                    )
            # Kafka writes broker configs even when unchanged, so brokers reload them
            # (KAFKA-14136).
            if new != current or resource.type == ConfigResourceType.BROKER:
                record = ConfigRecord(
                    resource_type=resource.type, resource_name=resource.name, name=name, value=new
                )
                records.append(at_latest_version(record))
        if resource.type == ConfigResourceType.TOPIC:
            nulls = [
                name for name, (op, value) in ops.items() if op == OpType.SET and value is None
            ]
            if nulls:
                raise ControllerApiError(
                    Errors.INVALID_CONFIG,
                    f"Null value not supported for topic configs: {','.join(nulls)}",
                )
        if not newly_created_resource:
            self._check_exists(resource)
        return records

    @staticmethod
    def _list_op(
        resource: ConfigResource, name: str, op: OpType, current: str | None, value: str | None
    ) -> str:
        default = LIST_CONFIG_DEFAULTS.get((resource.type, name))
        if default is None:
            raise ControllerApiError(
                Errors.INVALID_CONFIG,
                f"Can't {op.name} to key {name} because its type is not LIST.",
            )
        base = current if current is not None else default
        parts = [part for part in base.split(",") if part]
        given = (value or "").split(",")
        if op is OpType.APPEND:
            parts.extend(part for part in dict.fromkeys(given) if part not in parts)
        else:
            parts = [part for part in parts if part not in given]
        return ",".join(parts)

    # -- replay ----------------------------------------------------------------

    def replay(self, record: ConfigRecord, offset: int) -> None:
        """Set a config, or delete it when ``record.value`` is ``None``."""
        resource = ConfigResource(record.resource_type, record.resource_name)
        names = self._names.get(resource) or frozenset()
        if record.value is None:
            self._configs.remove((resource, record.name))
            names -= {record.name}
        else:
            self._configs.put((resource, record.name), record.value)
            names |= {record.name}
        if names:
            self._names.put(resource, names)
        else:
            self._names.remove(resource)

    def delete_topic_configs(self, name: str) -> None:
        """Forget every config of topic ``name`` (replaying its ``RemoveTopicRecord``)."""
        resource = ConfigResource(ConfigResourceType.TOPIC, name)
        for config_name in self._names.get(resource) or frozenset():
            self._configs.remove((resource, config_name))
        self._names.remove(resource)


def _validate_resource(resource: ConfigResource) -> None:
    """Kafka's ``ControllerConfigurationValidator.validate``: kraft keeps topic and broker
    configs; a topic needs a name, a broker's name is "" (the cluster default) or its id."""
    if resource.type == ConfigResourceType.TOPIC:
        if not resource.name:
            raise ControllerApiError(
                Errors.INVALID_REQUEST, "Default topic resources are not allowed."
            )
    elif resource.type == ConfigResourceType.BROKER:
        if resource.name:
            if not _BROKER_NAME.fullmatch(resource.name):
                raise ControllerApiError(
                    Errors.INVALID_REQUEST, "Unable to parse broker name as a base 10 number."
                )
            if int(resource.name) < 0:
                raise ControllerApiError(Errors.INVALID_REQUEST, "Invalid negative broker ID.")
    else:
        raise ControllerApiError(Errors.INVALID_REQUEST, f"Unknown resource type {resource.type}")
