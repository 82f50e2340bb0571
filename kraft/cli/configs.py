"""``kraft configs``: Kafka's ``kafka-configs.sh --alter`` and ``--describe`` against a
controller quorum.

``kraft configs alter --entity-type topics|brokers --entity-name X --add-config k=v[,k=v]
--delete-config k`` sends IncrementalAlterConfigs to the active controller (found as
:class:`~kraft.cli.controller_client.ControllerClient` finds it): each ``--add-config`` pair is
a SET, each ``--delete-config`` name a DELETE, in one request for the one resource.
``--entity-default`` with ``--entity-type brokers`` names the cluster-wide broker defaults (the
broker resource ""). ``--add-config`` is parsed as Kafka's ``ConfigCommand`` parses it: pairs
split on commas outside square brackets (``k=[a,b]`` is the value ``a,b``), spaces around
``=`` dropped, an empty value kept, and a key only of ``[a-zA-Z0-9._-]``.

Before deleting, the tool describes the resource and refuses (``Invalid config(s): k``, exit
1) to delete a config it does not have, as Kafka's ``ConfigCommand`` does.

``kraft configs describe --entity-type topics|brokers --entity-name X | --entity-default``
prints the dynamic configs the active controller's metadata image holds for the resource
(DescribeConfigs), in Kafka's words: ``Dynamic configs for topic t are:`` then ``  k=v
sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:k=v}`` per config. kraft has no static or
default config values to show.

Exit status 0 once the change is committed (or the configs are printed); 1 with Kafka's error
name when the controller refused (UNKNOWN_TOPIC_OR_PARTITION, BROKER_ID_NOT_REGISTERED,
INVALID_REQUEST, ...) or no controller answered; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, Final

from kraft.cli.controller_client import ControllerClient, add_tool_arguments, client_from_args
from kraft.cli.topics import error_text
from kraft.config import ConfigError
from kraft.controller.configs import ConfigResourceType, OpType
from kraft.protocol.controller_messages import (
    AlterableConfig,
    AlterConfigsResource,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kraft.protocol.errors import Errors

__all__ = ["parse_add_config", "register"]

#: kafka-configs.sh's entity types and the ``ConfigResource.Type`` each names.
ENTITY_TYPES: Final = {"topics": ConfigResourceType.TOPIC, "brokers": ConfigResourceType.BROKER}
#: A comma or an equals sign that is not inside square brackets (Kafka's lookahead).
_OUTSIDE_BRACKETS: Final = r"(?=[^\]]*(?:\[|$))"
_PAIRS: Final = re.compile("," + _OUTSIDE_BRACKETS)
_KEY_VALUE: Final = re.compile(r"\s*=\s*" + _OUTSIDE_BRACKETS)
_KEY: Final = re.compile(r"[a-zA-Z0-9._-]*")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft configs ...`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "configs",
        help="change and describe topic and broker configs",
        description="Change and describe the dynamic configs of topics and brokers (like "
        "kafka-configs.sh).",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="configs commands", metavar="COMMAND")
    alter = commands.add_parser(
        "alter",
        help="set and delete configs of a topic or a broker (IncrementalAlterConfigs)",
        description="Set and delete dynamic configs of one topic or broker.",
    )
    add_tool_arguments(alter)
    _add_entity_arguments(alter)
    alter.add_argument(
        "--add-config",
        metavar="K=V[,K=V]",
        help="configs to set; a value with commas goes in square brackets: k=[a,b]",
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="K",
        help="a config to delete (repeatable)",
    )
    alter.set_defaults(handler=_alter)
    describe = commands.add_parser(
        "describe",
        help="the dynamic configs of a topic or a broker (DescribeConfigs)",
        description="Print the dynamic configs of one topic or broker.",
    )
    add_tool_arguments(describe)
    _add_entity_arguments(describe)
    describe.set_defaults(handler=_describe)


def _add_entity_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--entity-type", required=True, choices=sorted(ENTITY_TYPES), help="topics or brokers"
    )
    entity = parser.add_mutually_exclusive_group(required=True)
    entity.add_argument("--entity-name", help="the topic's name or the broker's id")
    entity.add_argument(
        "--entity-default",
        action="store_true",
        help="the cluster-wide broker defaults (with --entity-type brokers)",
    )


def parse_add_config(text: str) -> dict[str, str]:
    """``--add-config``'s pairs, as Kafka's ``ConfigCommand.parseConfigsToBeAdded`` reads them.
    Raises :class:`~kraft.config.ConfigError` for a pair without ``=`` or a bad key."""
    configs: dict[str, str] = {}
    for pair in _PAIRS.split(text):
        parts = _KEY_VALUE.split(pair)
        if len(parts) != 2:
            raise ConfigError(
                f"--add-config {pair!r}: all configs to be added must be in the format key=val"
            )
        key = parts[0].strip()
        if not _KEY.fullmatch(key):
            raise ConfigError(f"--add-config: invalid character found for config key: {key!r}")
        configs[key] = parts[1].replace("[", "").replace("]", "").strip()
    return configs


def _entity(args: argparse.Namespace) -> tuple[int, str]:
    """The resource type id and name ``args`` name; :class:`ConfigError` for bad ones."""
    if args.entity_default and args.entity_type != "brokers":
        raise ConfigError("--entity-default names the brokers' defaults: use --entity-type brokers")
    if args.entity_type == "brokers" and not args.entity_default and not args.entity_name.isdigit():
        raise ConfigError(
            f"the entity name for brokers must be a valid integer broker id, "
            f"found: {args.entity_name!r}"
        )
    return int(ENTITY_TYPES[args.entity_type]), "" if args.entity_default else args.entity_name


def _resource(args: argparse.Namespace) -> AlterConfigsResource:
    """The one resource ``args`` change; :class:`ConfigError` for bad arguments."""
    resource_type, resource_name = _entity(args)
    added = parse_add_config(args.add_config) if args.add_config is not None else {}
    deleted = [name.strip() for name in args.delete_config]
    if not added and not deleted:
        raise ConfigError("nothing to change: give --add-config or --delete-config")
    both = sorted(set(added) & set(deleted))
    if both:
        raise ConfigError(f"{', '.join(both)}: both added and deleted")
    configs = [AlterableConfig(k, int(OpType.SET), v) for k, v in added.items()]
    configs += [AlterableConfig(k, int(OpType.DELETE)) for k in deleted]
    return AlterConfigsResource(
        resource_type=resource_type, resource_name=resource_name, configs=tuple(configs)
    )


def _alter(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    if client is None:
        return 2
    try:
        resource = _resource(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    entity = f"{args.entity_type} {resource.resource_name or '<default>'}"
    deleted = [c.name for c in resource.configs if c.config_operation == OpType.DELETE]
    if deleted:
        described = _describe_one(client, resource.resource_type, resource.resource_name, args)
        if described.error_code != Errors.NONE:
            print(f"error: {entity}: {_result_error(described)}", file=sys.stderr)
            return 1
        missing = sorted(set(deleted) - {c.name for c in described.configs})
        if missing:
            print(f"error: {entity}: Invalid config(s): {','.join(missing)}", file=sys.stderr)
            return 1
    body = IncrementalAlterConfigsRequest(resources=(resource,))
    response = client.send(body, args.timeout)  # KraftError: `kraft` prints it, exits 1
    assert isinstance(response, IncrementalAlterConfigsResponse)
    [result] = response.responses
    if result.error_code != Errors.NONE:
        print(
            f"error: {entity}: {error_text(result.error_code, result.error_message)}",
            file=sys.stderr,
        )
        return 1
    changed = {c.name: c.value for c in resource.configs}
    if args.json:
        print(
            json.dumps(
                {
                    "entity_type": args.entity_type,
                    "entity_name": resource.resource_name,
                    "changed": changed,
                }
            )
        )
    else:
        print(f"Completed updating config for {entity}.")
    return 0


#: Kafka's admin ``ConfigEntry.ConfigSource`` names of the wire's source ids.
_SOURCE_NAMES: Final = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
}


def _describe_one(
    client: ControllerClient, resource_type: int, resource_name: str, args: argparse.Namespace
) -> DescribeConfigsResult:
    body = DescribeConfigsRequest(
        resources=(DescribeConfigsResource(resource_type, resource_name),),
        include_synonyms=True,
    )
    response = client.send(body, args.timeout)  # KraftError: `kraft` prints it, exits 1
    assert isinstance(response, DescribeConfigsResponse)
    [result] = response.results
    return result


def _result_error(result: DescribeConfigsResult) -> str:
    return error_text(result.error_code, result.error_message)


def _describe(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    if client is None:
        return 2
    try:
        resource_type, resource_name = _entity(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = _describe_one(client, resource_type, resource_name, args)
    if result.error_code != Errors.NONE:
        entity = f"{args.entity_type} {resource_name or '<default>'}"
        print(f"error: {entity}: {_result_error(result)}", file=sys.stderr)
        return 1
    if args.json:
        configs = {c.name: c.value for c in result.configs}
        print(
            json.dumps(
                {"entity_type": args.entity_type, "entity_name": resource_name, "configs": configs}
            )
        )
        return 0
    if resource_name:
        print(f"Dynamic configs for {args.entity_type[:-1]} {resource_name} are:")
    else:
        print(f"Default configs for {args.entity_type} in the cluster are:")
    for config in result.configs:
        synonyms = ", ".join(
            f"{_SOURCE_NAMES.get(s.source, 'UNKNOWN')}:{s.name}={s.value}" for s in config.synonyms
        )
        print(
            f"  {config.name}={config.value} sensitive={str(config.is_sensitive).lower()} "
            f"synonyms={{{synonyms}}}"
        )
    return 0
