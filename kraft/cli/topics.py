"""``kraft topics``: Kafka's ``kafka-topics.sh`` (create, delete, describe, list, alter)
against a controller quorum.

Every command reaches the active controller through
:class:`~kraft.cli.controller_client.ControllerClient` (``--bootstrap`` names controller
nodes; a node that is not the active controller answers NOT_CONTROLLER and the leader is
asked). ``describe`` and ``list`` read the active controller's metadata image
(DescribeTopicPartitions, every page of ``--partition-size-limit-per-response`` partitions);
``alter --partitions N`` adds partitions (CreatePartitions: N above the topic's count, else
INVALID_PARTITIONS).

Exit status 0; 1 with ``error: ...`` when no controller answered, or when the controller
refused (Kafka's error name and message, per topic); 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import msgspec

from kraft.cli.controller_client import add_tool_arguments, client_from_args
from kraft.errors import KraftError
from kraft.protocol.controller_messages import (
    CreatableTopic,
    CreatableTopicConfig,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    Cursor,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicState,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponseTopic,
    TopicRequest,
)
from kraft.protocol.errors import Errors, error_name

__all__ = ["error_text", "register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft topics ...`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "topics",
        help="create, delete, describe and list topics",
        description="Create, delete, describe and list the topics of a controller quorum.",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="topics commands", metavar="COMMAND")

    create = commands.add_parser("create", help="create a topic")
    add_tool_arguments(create)
    create.add_argument("--topic", required=True, help="the topic's name")
    create.add_argument(
        "--partitions", type=int, default=-1, help="number of partitions (default: num.partitions)"
    )
    create.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        help="replicas per partition (default: default.replication.factor)",
    )
    create.add_argument(
        "--topic-config",
        dest="configs",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a topic config (repeatable)",
    )
    create.set_defaults(handler=_create)

    delete = commands.add_parser("delete", help="delete a topic")
    add_tool_arguments(delete)
    delete.add_argument("--topic", required=True, help="the topic's name")
    delete.set_defaults(handler=_delete)

    describe = commands.add_parser("describe", help="describe topics and their partitions")
    add_tool_arguments(describe)
    describe.add_argument(
        "--topic", action="append", default=[], help="a topic (repeatable; default: all)"
    )
    _add_page_argument(describe)
    describe.set_defaults(handler=_describe)

    list_ = commands.add_parser("list", help="list the topics' names")
    add_tool_arguments(list_)
    _add_page_argument(list_)
    list_.set_defaults(handler=_list)

    alter = commands.add_parser("alter", help="add partitions to a topic")
    add_tool_arguments(alter)
    alter.add_argument("--topic", required=True, help="the topic's name")
    alter.add_argument(
        "--partitions",
        type=int,
        required=True,
        help="the number of partitions the topic is to have (more than it has)",
    )
    alter.set_defaults(handler=_alter)


def _add_page_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--partition-size-limit-per-response",
        type=int,
        default=2000,
        metavar="N",
        help="partitions per DescribeTopicPartitions answer; the tool asks for every page "
        "(default 2000)",
    )


def error_text(code: int, message: str | None) -> str:
    return error_name(code) + (f": {message}" if message else "")


def _create(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    if client is None:
        return 2
    configs = []
    for item in args.configs:
        name, sep, value = item.partition("=")
        if not sep or not name:
            print(f"error: --topic-config {item!r}: expected NAME=VALUE", file=sys.stderr)
            return 2
        configs.append(CreatableTopicConfig(name=name, value=value))
    body = CreateTopicsRequest(
        topics=(
            CreatableTopic(
                name=args.topic,
                num_partitions=args.partitions,
                replication_factor=args.replication_factor,
                configs=tuple(configs),
            ),
        ),
        timeout_ms=int(args.timeout * 1000),
    )
    response = client.send(body, args.timeout)  # KraftError: `kraft` prints it, exits 1
    assert isinstance(response, CreateTopicsResponse)
    [result] = response.topics
    if result.error_code != Errors.NONE:
        print(
            f"error: topic {result.name}: {error_text(result.error_code, result.error_message)}",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(
            json.dumps(
                {
                    "topic": result.name,
                    "topic_id": str(result.topic_id),
                    "partitions": result.num_partitions,
                    "replication_factor": result.replication_factor,
                }
            )
        )
    else:
        print(
            f"Created topic {result.name} ({result.topic_id}): {result.num_partitions} "
            f"partition(s), replication factor {result.replication_factor}"
        )
    return 0


def _delete(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    if client is None:
        return 2
    body = DeleteTopicsRequest(
        topics=(DeleteTopicState(name=args.topic),), timeout_ms=int(args.timeout * 1000)
    )
    response = client.send(body, args.timeout)
    assert isinstance(response, DeleteTopicsResponse)
    [result] = response.responses
    if result.error_code != Errors.NONE:
        print(
            f"error: topic {args.topic}: {error_text(result.error_code, result.error_message)}",
            file=sys.stderr,
        )
        return 1
    print(json.dumps({"deleted": args.topic}) if args.json else f"Deleted topic {args.topic}")
    return 0


def _alter(args: argparse.Namespace) -> int:
    """CreatePartitions (Kafka's ``kafka-topics.sh --alter --partitions``)."""
    client = client_from_args(args)
    if client is None:
        return 2
    if args.partitions < 1:
        print("error: --partitions must be at least 1", file=sys.stderr)
        return 2
    body = CreatePartitionsRequest(
        topics=(CreatePartitionsTopic(name=args.topic, count=args.partitions),),
        timeout_ms=int(args.timeout * 1000),
    )
    response = client.send(body, args.timeout)
    assert isinstance(response, CreatePartitionsResponse)
    [result] = response.results
    if result.error_code != Errors.NONE:
        print(
            f"error: topic {args.topic}: {error_text(result.error_code, result.error_message)}",
            file=sys.stderr,
        )
        return 1
    print(
        json.dumps({"topic": args.topic, "partitions": args.partitions})
        if args.json
        else f"Topic {args.topic} now has {args.partitions} partition(s)"
    )
    return 0


def _describe_topics(
    args: argparse.Namespace, names: list[str]
) -> list[DescribeTopicPartitionsResponseTopic] | None:
    """Every page of DescribeTopicPartitions (Kafka's admin client follows ``next_cursor``
    too), a topic split over pages joined again; ``None`` for bad arguments."""
    client = client_from_args(args)
    if client is None:
        return None
    if args.partition_size_limit_per_response < 1:
        print("error: --partition-size-limit-per-response must be at least 1", file=sys.stderr)
        return None
    topics: dict[str | None, DescribeTopicPartitionsResponseTopic] = {}
    cursor: Cursor | None = None
    while True:
        body = DescribeTopicPartitionsRequest(
            topics=tuple(TopicRequest(name) for name in names),
            response_partition_limit=args.partition_size_limit_per_response,
            cursor=cursor,
        )
        response = client.send(body, args.timeout)
        assert isinstance(response, DescribeTopicPartitionsResponse)
        for topic in response.topics:
            earlier = topics.get(topic.name)
            topics[topic.name] = (
                topic
                if earlier is None
                else msgspec.structs.replace(
                    earlier, partitions=earlier.partitions + topic.partitions
                )
            )
        if response.next_cursor is None:
            return list(topics.values())
        if response.next_cursor == cursor:  # a page that does not move on would never end
            raise KraftError(f"the controller answered the same cursor again: {cursor}")
        cursor = response.next_cursor


def _describe(args: argparse.Namespace) -> int:
    described = _describe_topics(args, args.topic)
    if described is None:
        return 2
    status = 0
    topics: list[dict[str, Any]] = []
    for topic in described:
        if topic.error_code != Errors.NONE:
            print(f"error: topic {topic.name}: {error_name(topic.error_code)}", file=sys.stderr)
            status = 1
            continue
        partitions = [
            {
                "partition": p.partition_index,
                "leader": p.leader_id,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replica_nodes),
                "isr": list(p.isr_nodes),
            }
            for p in topic.partitions
        ]
        topics.append(
            {"topic": topic.name, "topic_id": str(topic.topic_id), "partitions": partitions}
        )
    if args.json:
        print(json.dumps({"topics": topics}))
        return status
    for entry in topics:
        print(
            f"Topic: {entry['topic']}\tTopicId: {entry['topic_id']}\t"
            f"PartitionCount: {len(entry['partitions'])}"
        )
        for p in entry["partitions"]:
            print(
                f"\tTopic: {entry['topic']}\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
                f"Replicas: {','.join(map(str, p['replicas']))}\t"
                f"Isr: {','.join(map(str, p['isr']))}"
            )
    return status


def _list(args: argparse.Namespace) -> int:
    described = _describe_topics(args, [])
    if described is None:
        return 2
    names = [topic.name for topic in described]
    print(json.dumps({"topics": names}) if args.json else "\n".join(str(n) for n in names))
    return 0
