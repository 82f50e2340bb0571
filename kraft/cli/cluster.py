"""``kraft cluster describe``: the cluster id, the active controller and every registered
broker, fenced or not (DescribeCluster v2, KIP-1073), from the active controller (reached as
``kraft topics`` reaches it). Exit status 0; 1 with ``error: ...``; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kraft.cli.controller_client import add_tool_arguments, client_from_args
from kraft.cli.topics import error_text
from kraft.protocol.controller_messages import DescribeClusterRequest, DescribeClusterResponse
from kraft.protocol.errors import Errors

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft cluster describe`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "cluster",
        help="describe the cluster's brokers",
        description="Describe the brokers registered with a controller quorum.",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="cluster commands", metavar="COMMAND")
    describe = commands.add_parser(
        "describe", help="the cluster id, the active controller and every broker, fenced or not"
    )
    add_tool_arguments(describe)
    describe.set_defaults(handler=_describe_cluster)


def _describe_cluster(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    if client is None:
        return 2
    response = client.send(DescribeClusterRequest(include_fenced_brokers=True), args.timeout)
    assert isinstance(response, DescribeClusterResponse)
    if response.error_code != Errors.NONE:
        print(f"error: {error_text(response.error_code, response.error_message)}", file=sys.stderr)
        return 1
    brokers = [
        {
            "id": b.broker_id,
            "host": b.host,
            "port": b.port,
            "rack": b.rack,
            "fenced": b.is_fenced,
        }
        for b in response.brokers
    ]
    if args.json:
        print(
            json.dumps(
                {
                    "cluster_id": response.cluster_id,
                    "controller_id": response.controller_id,
                    "brokers": brokers,
                }
            )
        )
        return 0
    print(f"ClusterId:       {response.cluster_id}")
    print(f"ControllerId:    {response.controller_id}")
    for b in brokers:
        state = "fenced" if b["fenced"] else "unfenced"
        rack = f" rack {b['rack']}" if b["rack"] is not None else ""
        print(f"Broker {b['id']}: {b['host']}:{b['port']}{rack} ({state})")
    return 0
