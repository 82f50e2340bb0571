"""The Raft core, sans-IO: ``KafkaRaftClient`` and its parts -- quorum states and
transitions, the leader's replica tracking, the batch accumulator, request bookkeeping, the
leader's fetch serving and its purgatory, a follower's replication, the Vote and
Begin/EndQuorumEpoch RPCs, the response prologue, the listener registry, and the protocols
the core is driven through. docs/protocol.md maps each module.
"""

from __future__ import annotations

from kraft.raft.accumulator import BatchAccumulator, CompletedBatch
from kraft.raft.channel import (
    DequeMessageQueue,
    InboundMessage,
    NetworkChannel,
    RaftMessageQueue,
)
from kraft.raft.client import KafkaRaftClient
from kraft.raft.leader import LeaderState, ReplicaState
from kraft.raft.listeners import (
    Batch,
    BatchReader,
    ControlRecord,
    LeaderAndEpoch,
    Listener,
    LogBatchReader,
    MemoryBatchReader,
)
from kraft.raft.quorum import QuorumState
from kraft.raft.requests import RequestManager, bootstrap_server_id
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
    "Batch",
    "BatchAccumulator",
    "BatchReader",
    "ControlRecord",
    "KafkaRaftClient",
    "LeaderAndEpoch",
    "Listener",
    "LogBatchReader",
    "MemoryBatchReader",
    "bootstrap_server_id",
    "CandidateState",
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
