"""DescribeQuorum: the leader's view of its replicas, as Kafka's ``handleDescribeQuorumRequest``
reports it (KIP-595, with the timestamps of KIP-836).

The leader tracks its replicas' progress on the monotonic clock (``ReplicaState``); the answer
gives wall-clock times, converted with the one wall-clock reading of the request.
"""

from __future__ import annotations

from typing import Any

from kraft.common.uuids import ZERO_UUID
from kraft.log.api import ReplicatedLog
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    DescribeQuorumNode,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    Endpoint,
)
from kraft.protocol.messages import ReplicaState as WireReplicaState
from kraft.raft.leader import LeaderState, ReplicaState
from kraft.raft.quorum import QuorumState
from kraft.raft.rpc import valid_topic_partition, wire_leader_id

__all__ = ["describe_quorum"]


def describe_quorum(
    body: DescribeQuorumRequest,
    quorum: QuorumState[Any],
    log: ReplicatedLog,
    now_ms: int,
    wall_ms: int,
) -> DescribeQuorumResponse:
    """The answer to ``body``: NOT_LEADER_OR_FOLLOWER unless this replica leads, else every
    voter's and every active observer's progress."""
    if not valid_topic_partition(body):
        return DescribeQuorumResponse(partition_error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION)
    state = quorum.state
    if not isinstance(state, LeaderState):
        leader = quorum.leader_id
        return DescribeQuorumResponse(
            partition_error_code=Errors.NOT_LEADER_OR_FOLLOWER,
            leader_id=wire_leader_id(quorum),
            leader_epoch=quorum.epoch,
            # kraft: the leader's listeners, so that `kraft quorum describe` asking a follower
            # can follow the hint (Kafka's admin client finds the leader otherwise).
            nodes=()
            if leader is None
            else (
                DescribeQuorumNode(
                    leader, tuple(Endpoint(*e) for e in quorum.leader_endpoints(leader))
                ),
            ),
        )

    def to_wall(timestamp_ms: int) -> int:
        return -1 if timestamp_ms < 0 else wall_ms - (now_ms - timestamp_ms)

    def describe(replica: ReplicaState, local: bool) -> WireReplicaState:
        end_offset = log.log_end_offset if local else replica.end_offset
        return WireReplicaState(
            replica_id=replica.key.id,
            replica_directory_id=replica.key.directory_id or ZERO_UUID,
            log_end_offset=-1 if end_offset is None else end_offset,
            last_fetch_timestamp=wall_ms if local else to_wall(replica.last_fetch_timestamp_ms),
            last_caught_up_timestamp=(
                wall_ms if local else to_wall(replica.last_caught_up_timestamp_ms)
            ),
        )

    voters = tuple(
        describe(state.voter_states[v], v == quorum.local_id) for v in sorted(state.voters)
    )
    observers = tuple(
        describe(o, False) for o in sorted(state.active_observers(now_ms), key=lambda o: o.key.id)
    )
    nodes = tuple(
        DescribeQuorumNode(v, tuple(Endpoint(*e) for e in quorum.leader_endpoints(v)))
        for v in sorted(state.voters)
    )
    return DescribeQuorumResponse(
        leader_id=state.local.id,
        leader_epoch=state.epoch,
        high_watermark=-1 if state.high_watermark is None else state.high_watermark,
        current_voters=voters,
        observers=observers,
        nodes=nodes,
    )
