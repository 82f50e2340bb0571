"""kraft: Apache Kafka's KRaft metadata quorum for Python.

Kafka RecordBatch v2 (:mod:`kraft.record`), the replicated log and the quorum-state store
(:mod:`kraft.log`), and the sans-IO Raft core (:mod:`kraft.raft`): ``KafkaRaftClient`` with
KRaft's elections, pre-vote, fetch replication and listeners. :mod:`kraft.testing` drives it
in tests. The transport, simulator and analysis build on them.

``kraft.RaftNode`` (with ``kraft.NodeConfig`` and ``kraft.load_node_config``), the embeddable
node of :mod:`kraft.runtime`, is imported on first use, so that ``import kraft`` does not load
trio.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from kraft.config import Endpoint, QuorumConfig, parse_bootstrap_servers, parse_voters
from kraft.errors import (
    BufferAllocationError,
    CorruptLogError,
    CorruptRecordError,
    CorruptSnapshotError,
    IllegalStateError,
    InvalidAppendError,
    KraftError,
    LeaderTransferError,
    NotLeaderError,
    OperationTimeoutError,
    RecordBatchTooLargeError,
    StorageError,
)
from kraft.log.api import OffsetAndEpoch
from kraft.raft.client import KafkaRaftClient
from kraft.raft.futures import RaftFuture
from kraft.raft.listeners import Batch, BatchReader, LeaderAndEpoch, Listener
from kraft.record.serde import BytesSerde, MsgspecSerde, RecordSerde, StrSerde

if TYPE_CHECKING:
    from kraft.runtime.config import NodeConfig, load_node_config
    from kraft.runtime.node import RaftNode

#: The client API (Kafka's ``RaftClient`` interface) is ``KafkaRaftClient``'s public methods.
RaftClient = KafkaRaftClient

__version__ = "0.1.0"

# The library never configures logging; applications do.
logging.getLogger("kraft").addHandler(logging.NullHandler())

#: Public names that live in kraft.runtime (trio), imported when first asked for.
_LAZY = {
    "RaftNode": "kraft.runtime.node",
    "NodeConfig": "kraft.runtime.config",
    "load_node_config": "kraft.runtime.config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kraft' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
    "LeaderTransferError",
    "Listener",
    "MsgspecSerde",
    "NodeConfig",
    "NotLeaderError",
    "OffsetAndEpoch",
    "OperationTimeoutError",
    "QuorumConfig",
    "RaftClient",
    "RaftFuture",
    "RaftNode",
    "RecordBatchTooLargeError",
    "RecordSerde",
    "StorageError",
    "StrSerde",
    "__version__",
    "load_node_config",
    "parse_bootstrap_servers",
    "parse_voters",
]
