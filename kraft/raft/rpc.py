"""What the client's RPC handlers share: the wire's view of the leader, and the common checks.

The requests are served by ``KafkaRaftClient`` (Vote, BeginQuorumEpoch, EndQuorumEpoch,
DescribeQuorum) and by ``FetchServer`` (Fetch, FetchSnapshot); both answer with the leader
and epoch this replica knows, validate the topic-partition, and (for the leader-only RPCs)
apply Kafka's leader-only validation. Those rules live here, once.
"""

from __future__ import annotations

import uuid
from typing import Any

from kraft.common.uuids import ZERO_UUID
from kraft.protocol.api import METADATA_PARTITION_INDEX, METADATA_TOPIC_NAME
from kraft.protocol.errors import Errors
from kraft.protocol.messages import NodeEndpoint, Request, Response
from kraft.raft.leader import LeaderState
from kraft.raft.quorum import QuorumState

__all__ = [
    "LISTENER_NAME",
    "directory_or_none",
    "error_name",
    "leader_node_endpoints",
    "leader_or_none",
    "valid_topic_partition",
    "validate_leader_only",
    "wire_leader_id",
]

#: The listener name kraft gives the endpoints it learns from a response's NodeEndpoints.
LISTENER_NAME = "CONTROLLER"


def directory_or_none(value: uuid.UUID) -> uuid.UUID | None:
    """A directory id from the wire: Kafka's ``ZERO_UUID`` means "not sent"."""
    return None if value == ZERO_UUID else value


def leader_or_none(leader_id: int) -> int | None:
    """A leader id from the wire: negative means "unknown"."""
    return None if leader_id < 0 else leader_id


def error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return f"error code {code}"


def valid_topic_partition(body: Request | Response) -> bool:
    """Whether a message names KRaft's metadata topic-partition."""
    return (
        body.topic_name == METADATA_TOPIC_NAME
        and body.partition_index == METADATA_PARTITION_INDEX
    )


def wire_leader_id(quorum: QuorumState[Any]) -> int:
    """The current leader's id as the wire says it: -1 when unknown."""
    leader = quorum.leader_id
    return -1 if leader is None else leader


def leader_node_endpoints(quorum: QuorumState[Any]) -> tuple[NodeEndpoint, ...]:
    """The current leader's endpoints as a response's NodeEndpoints (KIP-853)."""
    leader = quorum.leader_id
    if leader is None:
        return ()
    return tuple(
        NodeEndpoint(leader, host, port)
        for _name, host, port in quorum.current_leader_endpoints()
    )


def validate_leader_only(
    quorum: QuorumState[Any], epoch: int, shutting_down: bool
) -> Errors | None:
    """Kafka's ``validateLeaderOnlyRequest``: the error to answer with, or None."""
    if epoch < quorum.epoch:
        return Errors.FENCED_LEADER_EPOCH
    if epoch > quorum.epoch:
        return Errors.UNKNOWN_LEADER_EPOCH
    if not isinstance(quorum.state, LeaderState):
        return Errors.NOT_LEADER_OR_FOLLOWER
    if shutting_down:
        return Errors.BROKER_NOT_AVAILABLE
    return None
