"""kraft: Apache Kafka's KRaft metadata quorum for Python.

Kafka RecordBatch v2 (:mod:`kraft.record`), the replicated log and the quorum-state store
(:mod:`kraft.log`), and the sans-IO Raft core (:mod:`kraft.raft`): ``KafkaRaftClient`` with
KRaft's elections, pre-vote, fetch replication and listeners. :mod:`kraft.testing` drives it
in tests. The transport, simulator and analysis build on them.
"""

from __future__ import annotations

import logging

from kraft.config import Endpoint, QuorumConfig, parse_bootstrap_servers, parse_voters
from kraft.errors import (
    BufferAllocationError,
    CorruptLogError,
    CorruptRecordError,
    CorruptSnapshotError,
    IllegalStateError,
    InvalidAppendError,
    KraftError,
    NotLeaderError,
    RecordBatchTooLargeError,
    StorageError,
)
from kraft.log.api import OffsetAndEpoch
from kraft.raft.client import KafkaRaftClient
from kraft.raft.listeners import Batch, BatchReader, LeaderAndEpoch, Listener
from kraft.record.serde import BytesSerde, MsgspecSerde, RecordSerde, StrSerde

#: The client API (Kafka's ``RaftClient`` interface) is ``KafkaRaftClient``'s public methods.
RaftClient = KafkaRaftClient

__version__ = "0.1.0"

# The library never configures logging; applications do.
logging.getLogger("kraft").addHandler(logging.NullHandler())

__all__ = [
    "Batch",
    "BatchReader",
    "BufferAllocationError",
    "BytesSerde",
    "CorruptLogError",
    "CorruptRecordError",
    "CorruptSnapshotError",
    "Endpoint",
    "IllegalStateError",
    "InvalidAppendError",
    "KafkaRaftClient",
    "KraftError",
    "LeaderAndEpoch",
    "Listener",
    "MsgspecSerde",
    "NotLeaderError",
    "OffsetAndEpoch",
    "QuorumConfig",
    "RaftClient",
    "RecordBatchTooLargeError",
    "RecordSerde",
    "StorageError",
    "StrSerde",
    "__version__",
    "parse_bootstrap_servers",
    "parse_voters",
]
