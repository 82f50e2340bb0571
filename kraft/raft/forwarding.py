"""``Forwarder``: writes and read barriers asked of a replica that does not lead.

A follower, observer or candidate sends kraft's ForwardAppend and ReadIndex requests
(docs/protocol-wire.md, "kraft's RPCs") to the leader it knows, over the quorum's own
connections. They do not go through the ``RequestManager``: that allows one request in flight
per destination, and a follower's Fetch is nearly always in flight to the leader. Each
forwarded call has its own correlation id and the caller's deadline.

- NOT_LEADER_OR_FOLLOWER means the batch did not and will not commit (the leader refused it,
  or a later epoch committed without it: kraft/raft/commits.py), so the call is sent again to
  the leader named next, until its deadline: a retry cannot write the batch twice.
- A batch that committed waits for this replica's listeners (``CommitTracker.wait_delivered``).
- BROKER_NOT_AVAILABLE means the request never left this node (the transport could not
  send it): it is sent again too.
- REQUEST_TIMED_OUT or NETWORK_EXCEPTION (the connection broke with the request in flight),
  or no answer by the deadline, fails a write with ``OperationTimeoutError``: its outcome is
  unknown. A read barrier is asked again instead.

The bytes of forwarded batches awaiting an answer are bounded (``MAX_FORWARDED_BYTES``): past
it a write fails at once with ``BufferAllocationError``, so a partitioned follower's callers
cannot make it grow without bound.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from kraft.common.ratelimit import LogLimiter
from kraft.errors import (
    BufferAllocationError,
    InvalidAppendError,
    KraftError,
    OperationTimeoutError,
    RecordBatchTooLargeError,
)
from kraft.protocol.envelope import InboundResponse, OutboundRequest
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    ForwardAppendRequest,
    ForwardAppendResponse,
    ReadIndexRequest,
    ReadIndexResponse,
)
from kraft.raft.channel import NetworkChannel
from kraft.raft.commits import CommitTracker
from kraft.raft.futures import RaftFuture
from kraft.raft.states import NO_DEADLINE

__all__ = ["MAX_FORWARDED_BYTES", "Forwarder"]

logger = logging.getLogger(__name__)

#: The encoded bytes of forwarded batches a replica keeps awaiting the leader's answer.
MAX_FORWARDED_BYTES = 8 * 1024 * 1024

#: How long a forwarded call waits before it is sent again when no leader is known.
RETRY_BACKOFF_MS = 50


@dataclass(slots=True)
class _Call:
    future: RaftFuture[int]
    deadline_ms: int
    #: The batch's records (encoded); None for a read barrier.
    records: tuple[bytes, ...] | None
    size: int
    destination: int | None = None
    correlation_id: int | None = None
    not_before_ms: int = 0


class Forwarder:
    """The forwarded calls of one replica, sent to the leader it knows."""

    def __init__(
        self,
        channel: NetworkChannel,
        tracker: CommitTracker,
        leader: Callable[[], tuple[int | None, int]],
        address_of: Callable[[int], tuple[str, int] | None],
        max_batch_size_bytes: int,
    ) -> None:
        self._channel = channel
        self._tracker = tracker
        #: The leader this replica knows (id or None, epoch).
        self._leader = leader
        self._address_of = address_of
        self._max_batch_size_bytes = max_batch_size_bytes
        self._calls: list[_Call] = []
        self._by_correlation: dict[int, _Call] = {}
        self._bytes = 0
        self._log_limiter = LogLimiter(10_000)

    def append(self, records: tuple[bytes, ...], deadline_ms: int) -> RaftFuture[int]:
        future: RaftFuture[int] = RaftFuture()
        size = sum(len(r) for r in records)
        if size > self._max_batch_size_bytes:
            future.set_exception(
                RecordBatchTooLargeError(
                    f"the batch's records take {size} bytes, above the maximum batch size "
                    f"{self._max_batch_size_bytes}"
                )
            )
        elif self._bytes + size > MAX_FORWARDED_BYTES:
            future.set_exception(
                BufferAllocationError(
                    f"{self._bytes} bytes of forwarded writes await the leader's answer "
                    f"(at most {MAX_FORWARDED_BYTES}): try again later"
                )
            )
        else:
            self._bytes += size
            self._calls.append(_Call(future, deadline_ms, records, size))
        return future

    @property
    def is_idle(self) -> bool:
        return not self._calls

    def read_barrier(self, deadline_ms: int) -> RaftFuture[int]:
        future: RaftFuture[int] = RaftFuture()
        self._calls.append(_Call(future, deadline_ms, None, 0))
        return future

    def poll(self, now_ms: int, local_id: int | None) -> int:
        """Send the calls not in flight to the leader, expire the due ones; return the
        milliseconds until the next deadline or retry."""
        if not self._calls:
            return NO_DEADLINE
        leader, _ = self._leader()
        timeout = NO_DEADLINE
        keep = []
        for call in self._calls:
            if call.future.done():
                self._forget(call)
                continue
            if now_ms >= call.deadline_ms:
                self._forget(call)
                call.future.set_exception(
                    OperationTimeoutError(
                        "no answer from the leader within the timeout"
                        + ("" if call.records is None else ": the write may still commit")
                    )
                )
                continue
            keep.append(call)
            if call.records is None and call.destination not in (None, leader):
                self._forget(call)  # a read is safe to ask again of the leader named since
                call.destination = None
            if call.correlation_id is None:
                if leader is None or leader == local_id or now_ms < call.not_before_ms:
                    timeout = min(timeout, RETRY_BACKOFF_MS)
                else:
                    self._send(call, leader, now_ms)
            timeout = min(timeout, call.deadline_ms - now_ms)
        self._calls = keep
        return max(0, timeout)

    def _send(self, call: _Call, leader: int, now_ms: int) -> None:
        correlation_id = self._channel.new_correlation_id()
        remaining = call.deadline_ms - now_ms
        body: ForwardAppendRequest | ReadIndexRequest
        if call.records is None:
            body = ReadIndexRequest(timeout_ms=remaining)
        else:
            body = ForwardAppendRequest(records=call.records, timeout_ms=remaining)
        call.destination = leader
        call.correlation_id = correlation_id
        self._by_correlation[correlation_id] = call
        self._channel.send(
            OutboundRequest(correlation_id, leader, body, now_ms, self._address_of(leader))
        )

    def handle_response(self, response: InboundResponse, now_ms: int) -> bool:
        """Take a ForwardAppend or ReadIndex response; False if it is not one of ours."""
        body = response.body
        if not isinstance(body, ForwardAppendResponse | ReadIndexResponse):
            return False
        call = self._by_correlation.pop(response.correlation_id, None)
        if call is None or call.destination != response.source or call.future.done():
            return True  # an answer to a call that timed out or was answered already
        call.correlation_id = None
        code = Errors.from_code(body.error_code)
        if code is Errors.NONE:
            # Answered: the tracker has the future now, and nothing may send the batch again
            # (neither this forwarder nor this replica's own leadership, take_unsent).
            self._forget(call)
            self._calls.remove(call)
            offset = body.read_offset if isinstance(body, ReadIndexResponse) else body.last_offset
            self._tracker.wait_delivered(call.future, offset, call.deadline_ms)
        elif code is Errors.NOT_LEADER_OR_FOLLOWER or code is Errors.BROKER_NOT_AVAILABLE:
            # It will never commit, or it never left this node (the transport answers
            # BROKER_NOT_AVAILABLE for a request it could not send): send it again.
            call.not_before_ms = now_ms + RETRY_BACKOFF_MS
        elif call.records is None and code in (Errors.NETWORK_EXCEPTION, Errors.REQUEST_TIMED_OUT):
            call.not_before_ms = now_ms + RETRY_BACKOFF_MS  # a read may always be asked again
        else:
            self._forget(call)
            call.future.set_exception(self._failure(code, body, now_ms))
        return True

    def _failure(
        self, code: Errors, body: ForwardAppendResponse | ReadIndexResponse, now_ms: int
    ) -> Exception:
        message = body.error_message or code.name
        if code is Errors.REQUEST_TIMED_OUT or code is Errors.NETWORK_EXCEPTION:
            # The request may have reached the leader: the write's outcome is unknown.
            return OperationTimeoutError(f"no answer from the leader ({message})")
        if code is Errors.RECORD_LIST_TOO_LARGE:
            return RecordBatchTooLargeError(message)
        if code is Errors.THROTTLING_QUOTA_EXCEEDED:
            return BufferAllocationError(message)
        if code is Errors.INVALID_RECORD:
            return InvalidAppendError(message)
        if self._log_limiter.allow(now_ms):
            logger.warning(
                "the leader refused a forwarded call: %s (%s); logged at most every 10 s",
                code.name,
                message,
            )
        return KraftError(f"the leader refused the call: {code.name}: {message}")

    def _forget(self, call: _Call) -> None:
        if call.correlation_id is not None:
            self._by_correlation.pop(call.correlation_id, None)
            call.correlation_id = None
        self._bytes -= call.size
        call.size = 0

    def take_unsent(self) -> list[tuple[RaftFuture[int], int, tuple[bytes, ...] | None]]:
        """Remove the calls not in flight (this replica now leads: it serves them itself)."""
        unsent = [c for c in self._calls if c.correlation_id is None and not c.future.done()]
        for call in unsent:
            self._forget(call)
        self._calls = [c for c in self._calls if c.correlation_id is not None]
        return [(c.future, c.deadline_ms, c.records) for c in unsent]

    def fail_all(self, exc: BaseException) -> None:
        for call in self._calls:
            self._forget(call)
            if not call.future.done():
                call.future.set_exception(exc)
        self._calls = []
