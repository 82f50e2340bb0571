"""kraft's one exception tree.

Every error kraft raises on purpose derives from :class:`KraftError`. Errors caused by bad
bytes (from a peer or from a file) name where the bad bytes are: offset, byte position, path.
Foreign exceptions (``OSError``, ``msgspec`` errors) are translated at the boundary with
``raise ... from exc`` and never cross the public API.

Where a Kafka error code exists for a condition, the class carries it as ``error_code`` so that
the protocol layer can map an exception to a wire error and back.
"""

from __future__ import annotations

__all__ = [
    "AlreadyFormattedError",
    "BufferAllocationError",
    "CorruptLogError",
    "CorruptRecordError",
    "CorruptSnapshotError",
    "IllegalStateError",
    "InvalidAppendError",
    "KraftError",
    "LeaderTransferError",
    "LogDirectoryError",
    "MetadataRecordError",
    "MetaPropertiesError",
    "NotLeaderError",
    "OperationTimeoutError",
    "QuorumStateError",
    "RecordBatchTooLargeError",
    "StorageError",
    "TransportError",
    "FatalFaultError",
]


class KraftError(Exception):
    """Root of every error kraft raises on purpose."""

    #: Kafka's error code for this condition (``Errors`` in Kafka), -1 when none applies.
    error_code: int = -1


class CorruptRecordError(KraftError):
    """Bytes that should hold a Kafka v2 record batch do not.

    ``offset`` is the base offset of the batch when it could be read (else ``None``);
    ``position`` is the byte position of the batch (or of the bad field) in the buffer or file.
    """

    error_code = 2  # CORRUPT_MESSAGE

    def __init__(self, message: str, *, offset: int | None = None, position: int | None = None):
        where = []
        if offset is not None:
            where.append(f"offset {offset}")
        if position is not None:
            where.append(f"byte position {position}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.offset = offset
        self.position = position


class CorruptSnapshotError(CorruptRecordError):
    """A snapshot's bytes are not a valid snapshot: a bad or partial batch, no header first or
    footer last, base offsets not contiguous from 0, an epoch other than the snapshot's.

    The message names the snapshot id (and the file, for a file); ``offset`` and ``position``
    locate the bad batch when there is one.
    """


class MetadataRecordError(CorruptRecordError):
    """A metadata record value (``kraft.metadata.codec``) cannot be decoded: an unknown frame
    version, api key or record version, or a field that is truncated or invalid. The message
    names the record and the field; ``position`` is the byte position in the record value.
    """


class RecordBatchTooLargeError(KraftError):
    """A batch would exceed the configured maximum batch size; nothing was appended."""

    error_code = 18  # RECORD_LIST_TOO_LARGE


class IllegalStateError(KraftError, RuntimeError):
    """A transition or call that the protocol forbids in the current state (a bug, or a peer
    breaking the protocol in a way that cannot be answered with an error code)."""


class NotLeaderError(KraftError):
    """The call needs the leader of the given epoch, and this replica is not (or no longer) it.

    ``leader_id`` and ``epoch`` are the leader this replica knows of, when it knows one: where
    to retry. A commit future fails with this error only when its batch did not commit.
    """

    error_code = 6  # NOT_LEADER_OR_FOLLOWER

    def __init__(self, message: str, *, leader_id: int | None = None, epoch: int = -1) -> None:
        super().__init__(message)
        self.leader_id = leader_id
        self.epoch = epoch


class OperationTimeoutError(KraftError, TimeoutError):
    """A commit, read barrier or leader transfer had no outcome within its timeout. For a
    write the outcome is unknown: the batch may still commit."""

    error_code = 7  # REQUEST_TIMED_OUT


class LeaderTransferError(KraftError):
    """``transfer_leadership`` refused: the target is not another voter that has caught up."""


class BufferAllocationError(KraftError):
    """The append accumulator holds as many unwritten batches as it may; try again later."""


class StorageError(KraftError):
    """A problem with the data directory or a file in it."""


class LogDirectoryError(StorageError):
    """The log directory cannot be used (missing, unreadable, or holding unexpected files)."""


class CorruptLogError(StorageError):
    """A log segment holds a corrupt batch below its recovery point.

    Data below the recovery point was flushed and checkpointed; corruption there is not a torn
    write from a crash and is never silently truncated.
    """

    def __init__(self, message: str, *, path: str, offset: int | None, position: int | None):
        super().__init__(f"{message}: {path} (offset {offset}, byte position {position})")
        self.path = path
        self.offset = offset
        self.position = position


class InvalidAppendError(KraftError):
    """An append that breaks the log's contract (offsets not contiguous, epoch going back)."""


class QuorumStateError(StorageError):
    """The quorum-state file cannot be read: unreadable, malformed or of an unknown version."""


class MetaPropertiesError(StorageError):
    """``meta.properties`` is missing, malformed, or disagrees with the configuration."""


class AlreadyFormattedError(StorageError):
    """``kraft storage format`` refuses to re-format a directory that holds meta.properties."""


class TransportError(KraftError):
    """The runtime's network transport cannot do what it was asked: a listen address that
    cannot be bound, a TLS file that cannot be read, a channel used after ``close``. Errors of
    one connection (a peer gone, bad bytes) are not raised: they close that connection."""


class FatalFaultError(KraftError):
    """A driver stopped on an unexpected exception (the cause): the Raft driver thread, or a
    controller that could not replay a record. The node is stopping and refuses further work."""
