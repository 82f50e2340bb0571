"""The replicated log (the ``ReplicatedLog`` contract, ``MemoryLog``, ``FileLog``), the
quorum-state store and ``meta.properties``."""

from __future__ import annotations

from kraft.log.api import (
    DEFAULT_MAX_READ_BYTES,
    Isolation,
    LogAppendInfo,
    LogFetchInfo,
    OffsetAndEpoch,
    ReplicatedLog,
    ValidationKind,
    ValidOffsetAndEpoch,
)
from kraft.log.epoch_cache import EpochCache
from kraft.log.file import FileLog
from kraft.log.memory import MemoryLog
from kraft.log.meta_properties import (
    CLUSTER_METADATA_DIR,
    META_PROPERTIES_FILE,
    MetaProperties,
    format_storage,
    random_uuid,
    read_meta_properties,
    write_meta_properties,
)
from kraft.log.quorum_state import (
    QUORUM_STATE_FILE,
    ElectionState,
    FileQuorumStateStore,
    MemoryQuorumStateStore,
    QuorumStateStore,
)

__all__ = [
    "CLUSTER_METADATA_DIR",
    "DEFAULT_MAX_READ_BYTES",
    "ElectionState",
    "FileQuorumStateStore",
    "META_PROPERTIES_FILE",
    "MemoryQuorumStateStore",
    "MetaProperties",
    "QUORUM_STATE_FILE",
    "QuorumStateStore",
    "format_storage",
    "random_uuid",
    "read_meta_properties",
    "write_meta_properties",
    "EpochCache",
    "FileLog",
    "Isolation",
    "LogAppendInfo",
    "LogFetchInfo",
    "MemoryLog",
    "OffsetAndEpoch",
    "ReplicatedLog",
    "ValidOffsetAndEpoch",
    "ValidationKind",
]
