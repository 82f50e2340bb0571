"""The Raft core, sans-IO: quorum states and transitions, the leader's replica tracking,
the batch accumulator, request bookkeeping, and the protocols the core is driven through.

``KafkaRaftClient`` itself is being built on these (issue 3); until it lands this package
offers its parts, each tested on its own.
"""

from __future__ import annotations

from kraft.raft.accumulator import BatchAccumulator, CompletedBatch
from kraft.raft.channel import (
    Clock,
    DequeMessageQueue,
    InboundMessage,
    NetworkChannel,
    RaftMessageQueue,
)
from kraft.raft.leader import LeaderState, ReplicaState
from kraft.raft.quorum import QuorumState
from kraft.raft.requests import RequestManager
from kraft.raft.states import (
    CandidateState,
    EpochState,
    FollowerState,
    ProspectiveState,
    ReplicaKey,
    ResignedState,
    UnattachedState,
)

__all__ = [
    "BatchAccumulator",
    "CandidateState",
    "Clock",
    "CompletedBatch",
    "DequeMessageQueue",
    "EpochState",
    "FollowerState",
    "InboundMessage",
    "LeaderState",
    "NetworkChannel",
    "ProspectiveState",
    "QuorumState",
    "RaftMessageQueue",
    "ReplicaKey",
    "ReplicaState",
    "RequestManager",
    "ResignedState",
    "UnattachedState",
]
