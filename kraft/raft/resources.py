"""Writes that fail because the process ran out of descriptors or memory, and are retried.

A peer holding every file descriptor (idle connections, docs/transport.md "Limits") once made
a segment roll fail with ``StorageError: Too many open files``, and the node stopped. Such a
failure says nothing about the disk: once a descriptor is free the same write succeeds. So
the writes that can be retried without losing or repeating data are, when they fail with
EMFILE, ENFILE or ENOMEM:

- the leader's append of drained batches: the batches not written stay with the leader
  (``LeaderState.unwritten``) and go first at its next append, at most
  :data:`RESOURCE_RETRY_MS` later (an append is all or nothing: ``Segment.append`` cuts a
  partial write, and a roll that fails leaves the log as it was);
- a follower's append of fetched batches: what was written is flushed, and the next Fetch
  asks for the rest from the new log end;
- a quorum-state write: the transition it belonged to did not happen
  (``QuorumState._durable`` restores the old state); the runtime's driver polls again
  (:class:`~kraft.runtime.driver.RaftClientDriver`).

An fsync that fails is never retried (its dirty pages may be gone): those errors are not in
the list. Every other storage error stays fatal, as in Kafka.
"""

from __future__ import annotations

import errno
import logging
from typing import Any, Final

from kraft.common.ratelimit import LogLimiter
from kraft.errors import KraftError, StorageError
from kraft.log.api import ReplicatedLog
from kraft.raft.accumulator import CompletedBatch

__all__ = [
    "RESOURCE_RETRY_MS",
    "ResourceFailures",
    "append_leader_batches",
    "is_resource_exhaustion",
]

logger = logging.getLogger(__name__)

#: The errors that mean "no descriptor or memory now", not "the disk failed".
_RESOURCE_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})
#: How soon the leader tries again to append batches that failed for lack of a resource.
RESOURCE_RETRY_MS: Final = 100
_LOG_INTERVAL_MS: Final = 60_000


def is_resource_exhaustion(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is an ``OSError`` for lack of
    descriptors or memory."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _RESOURCE_ERRNOS:
            return True
        seen = seen.__cause__
    return False


class ResourceFailures:
    """Counts the writes that failed for lack of a resource, with one log line a minute."""

    __slots__ = ("_limiter", "count")

    def __init__(self) -> None:
        self._limiter = LogLimiter(_LOG_INTERVAL_MS)
        #: Failed writes so far.
        self.count = 0

    def absorb(self, exc: Exception, what: str, now_ms: int) -> bool:
        """``True`` (counted, logged at most once a minute) if ``exc`` is a storage error for
        lack of a resource, to retry; ``False`` for any other error, which the caller
        raises."""
        if not isinstance(exc, StorageError | OSError) or not is_resource_exhaustion(exc):
            return False
        self.count += 1
        if self._limiter.allow(now_ms):
            logger.error(
                "%s failed for lack of a resource and will be retried (%d such failures so "
                "far; logged at most once a minute): %s",
                what,
                self.count,
                exc,
            )
        return True


def append_leader_batches(
    log: ReplicatedLog,
    batches: list[CompletedBatch[Any]],
    failures: ResourceFailures,
    now_ms: int,
) -> int:
    """Append the leader's ``batches`` in order; how many were written before a lack of a
    resource stopped it (the rest are for a retry). Any other error is raised."""
    for i, batch in enumerate(batches):
        try:
            log.append_encoded(batch.data)
        except (KraftError, OSError) as exc:
            if not failures.absorb(exc, "the leader's append", now_ms):
                raise
            return i
    return len(batches)
