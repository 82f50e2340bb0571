"""kraft: Apache Kafka's KRaft metadata quorum for Python.

The foundation is in place: Kafka RecordBatch v2 (:mod:`kraft.record`), the replicated log and
the quorum-state store (:mod:`kraft.log`). The Raft client, transport, simulator and analysis
build on them.
"""

from __future__ import annotations

import logging

from kraft.errors import (
    CorruptLogError,
    CorruptRecordError,
    InvalidAppendError,
    KraftError,
    RecordBatchTooLargeError,
    StorageError,
)

__version__ = "0.1.0"

# The library never configures logging; applications do.
logging.getLogger("kraft").addHandler(logging.NullHandler())

__all__ = [
    "CorruptLogError",
    "CorruptRecordError",
    "InvalidAppendError",
    "KraftError",
    "RecordBatchTooLargeError",
    "StorageError",
    "__version__",
]
