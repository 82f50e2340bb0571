"""``Embedding``: the client's calls for services that embed it, each a ``RaftFuture``.

- ``append``: a batch whose future completes with its last offset once it committed and this
  node's listeners were handed it (kraft/raft/commits.py). On the leader it goes to the
  accumulator; anywhere else it is forwarded to the leader (kraft/raft/forwarding.py).
- ``read_barrier``: a read index (kraft/raft/read_index.py) on the leader, asked of the leader
  elsewhere; completes once this node's listeners were handed everything up to it.
- ``transfer_leadership``: the leader resigns naming one caught-up voter as the only preferred
  successor in its EndQuorumEpoch (that voter stands at once, the others wait the maximum
  backoff); completes when this node learns of the next leader, whoever won.

The leader's side of the forwarded calls (ForwardAppend, ReadIndex) is here too: it serves
them with the same local paths and answers when their futures complete. Everything runs on
the polling thread; the client calls :meth:`Embedding.poll` before it waits and again after
its listeners ran.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from kraft.common.ratelimit import LogLimiter
from kraft.config import QuorumConfig
from kraft.errors import (
    BufferAllocationError,
    IllegalStateError,
    LeaderTransferError,
    NotLeaderError,
    OperationTimeoutError,
    RecordBatchTooLargeError,
)
from kraft.log.api import ReplicatedLog
from kraft.protocol.envelope import InboundRequest, InboundResponse
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    ForwardAppendRequest,
    ForwardAppendResponse,
    ReadIndexRequest,
    ReadIndexResponse,
    Request,
    Response,
)
from kraft.raft.channel import NetworkChannel
from kraft.raft.commits import CommitTracker
from kraft.raft.forwarding import Forwarder
from kraft.raft.futures import RaftFuture
from kraft.raft.leader import LeaderState
from kraft.raft.listener_registry import ListenerRegistry
from kraft.raft.quorum import QuorumState
from kraft.raft.read_index import ReadIndex
from kraft.raft.requests import RequestManager
from kraft.raft.states import NO_DEADLINE
from kraft.record.serde import RecordSerde

__all__ = ["MAX_FORWARDED_TIMEOUT_MS", "Embedding"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

#: A forwarded call waits at most this long on the leader, whatever its sender asks.
MAX_FORWARDED_TIMEOUT_MS = 300_000


@dataclass(slots=True)
class _Transfer:
    future: RaftFuture[int]
    epoch: int
    deadline_ms: int


class Embedding(Generic[T]):
    """Commit futures, read barriers, leader transfer and forwarding for one client."""

    def __init__(
        self,
        *,
        quorum: QuorumState[T],
        log: ReplicatedLog,
        config: QuorumConfig,
        channel: NetworkChannel,
        requests: RequestManager,
        serde: RecordSerde[T],
        listeners: ListenerRegistry[T],
        build_begin_quorum_epoch: Callable[[int], Request],
        prepare_append: Callable[[int, Sequence[T]], int],
        schedule_prepared_append: Callable[[], None],
        respond: Callable[[InboundRequest, Response], None],
        wakeup: Callable[[], None],
    ) -> None:
        self._quorum = quorum
        self._log = log
        self._config = config
        self._serde = serde
        self._listeners = listeners
        self._prepare_append = prepare_append
        self._schedule_prepared_append = schedule_prepared_append
        self._respond = respond
        self._wakeup = wakeup
        self.tracker = CommitTracker(log, self._leader_hint)
        self.reads = ReadIndex(requests, channel, build_begin_quorum_epoch)
        self._forwarder = Forwarder(
            channel,
            self.tracker,
            self._leader_hint,
            requests.address_of,
            config.max_batch_size_bytes,
        )
        self._transfers: list[_Transfer] = []
        self._bad_forward_log = LogLimiter(10_000)

    def _leader_hint(self) -> tuple[int | None, int]:
        return self._quorum.leader_id, self._quorum.epoch

    def _deadline(self, now_ms: int, timeout_ms: int | None) -> int:
        if timeout_ms is None:
            return now_ms + self._config.request_timeout_ms
        if timeout_ms < 0:
            raise ValueError(f"negative timeout {timeout_ms}")
        return now_ms + timeout_ms

    def _leading(self) -> LeaderState[T] | None:
        state = self._quorum.state
        return state if isinstance(state, LeaderState) and not state.resign_requested else None

    # -- the calls -------------------------------------------------------------------------
    def append(self, records: Sequence[T], now_ms: int, timeout_ms: int | None) -> RaftFuture[int]:
        if not records:
            raise ValueError("append needs at least one record")
        deadline = self._deadline(now_ms, timeout_ms)
        state = self._leading()
        if state is not None:
            future: RaftFuture[int] = RaftFuture()
            self._append_local(state, records, deadline, future)
            return future
        future = self._forwarder.append(tuple(self._serde.encode(r) for r in records), deadline)
        self._wakeup()
        return future

    def _append_local(
        self, state: LeaderState[T], records: Sequence[T], deadline: int, future: RaftFuture[int]
    ) -> None:
        """Append on this leader; ``future`` completes when the batch's outcome is known."""
        try:
            offset = self._prepare_append(state.epoch, records)
            self._schedule_prepared_append()
        except (RecordBatchTooLargeError, BufferAllocationError, NotLeaderError) as exc:
            future.set_exception(exc)
            return
        self.tracker.track_batch(future, offset, state.epoch, deadline)

    def read_barrier(self, now_ms: int, timeout_ms: int | None) -> RaftFuture[int]:
        deadline = self._deadline(now_ms, timeout_ms)
        future: RaftFuture[int]
        state = self._leading()
        if state is not None:
            future = RaftFuture()
            self._read_local(state, deadline, future, deliver=True)
        else:
            future = self._forwarder.read_barrier(deadline)
        self._wakeup()
        return future

    def _read_local(
        self, state: LeaderState[T], deadline: int, future: RaftFuture[int], *, deliver: bool
    ) -> None:
        """A read index of this leader into ``future``; after local delivery if ``deliver``."""
        confirmed = self.reads.add(state, deadline)

        def chain(done: RaftFuture[int]) -> None:
            exc = done.exception()
            if exc is not None:
                future.set_exception(exc)
            elif deliver:
                self.tracker.wait_delivered(future, done.result(), deadline)
            else:
                future.set_result(done.result())

        confirmed.add_done_callback(chain)

    def transfer_leadership(
        self, node_id: int | None, now_ms: int, timeout_ms: int | None
    ) -> RaftFuture[int]:
        deadline = self._deadline(now_ms, timeout_ms)
        future: RaftFuture[int] = RaftFuture()
        state = self._leading()
        if state is None:
            leader, epoch = self._leader_hint()
            future.set_exception(
                NotLeaderError(
                    "only the leader can transfer leadership", leader_id=leader, epoch=epoch
                )
            )
            return future
        refusal = self._refuse_transfer(state, node_id)
        if isinstance(refusal, str):
            future.set_exception(LeaderTransferError(refusal))
            return future
        logger.info("epoch %d: transferring leadership to %d", state.epoch, refusal)
        state.transfer_to = refusal
        state.resign_requested = True
        self._transfers.append(_Transfer(future, state.epoch, deadline))
        self._wakeup()
        return future

    def _refuse_transfer(self, state: LeaderState[T], node_id: int | None) -> int | str:
        """The target of a transfer, or why there is none."""
        high_watermark = state.high_watermark
        if high_watermark is None:
            return "the leader has not committed in its epoch yet"

        def caught_up(voter: int) -> bool:
            end = state.voter_states[voter].end_offset
            return end is not None and end >= high_watermark

        if node_id is None:
            ready = [v for v in state.successors_by_fetch_offset() if caught_up(v)]
            return ready[0] if ready else "no other voter has caught up with the leader"
        if node_id == state.local.id:
            return f"node {node_id} is the leader already"
        if node_id not in state.voters:
            return f"node {node_id} is not a voter"
        if not caught_up(node_id):
            return f"voter {node_id} has not caught up with the high watermark {high_watermark}"
        return node_id

    # -- polling ---------------------------------------------------------------------------
    def poll(self, now_ms: int) -> int:
        """Send and resolve what is due; the milliseconds until more will be."""
        if (
            self.tracker.is_idle
            and self._forwarder.is_idle
            and self.reads.is_idle
            and not self._transfers
        ):
            return NO_DEADLINE  # the common case: a poll of a service that uses no futures
        leading = self._leading()
        if leading is not None:
            for future, deadline, records in self._forwarder.take_unsent():
                if records is None:
                    self._read_local(leading, deadline, future, deliver=True)
                else:
                    batch = [self._serde.decode(r) for r in records]
                    self._append_local(leading, batch, deadline, future)
        timeout = self._forwarder.poll(now_ms, self._quorum.local_id)
        state = self._quorum.state
        if isinstance(state, LeaderState):
            timeout = min(timeout, self.reads.poll(state, now_ms))
        high_watermark = self._quorum.high_watermark
        delivered = self._listeners.delivered_end(high_watermark or 0)
        timeout = min(timeout, self.tracker.poll(now_ms, high_watermark, delivered))
        if self._transfers:
            timeout = min(timeout, self._poll_transfers(now_ms))
        return timeout

    def _poll_transfers(self, now_ms: int) -> int:
        leader, epoch = self._leader_hint()
        timeout = NO_DEADLINE
        pending = []
        for transfer in self._transfers:
            if leader is not None and epoch > transfer.epoch:
                transfer.future.set_result(leader)
            elif now_ms >= transfer.deadline_ms:
                transfer.future.set_exception(
                    OperationTimeoutError("no new leader was elected within the timeout")
                )
            else:
                pending.append(transfer)
                timeout = min(timeout, transfer.deadline_ms - now_ms)
        self._transfers = pending
        return timeout

    def leadership_lost(self, epoch: int, log_end_offset: int) -> None:
        self.tracker.leadership_lost(epoch, log_end_offset)
        self.reads.leadership_lost(epoch)

    def handle_response(self, response: InboundResponse, now_ms: int) -> bool:
        return self._forwarder.handle_response(response, now_ms)

    def close(self) -> None:
        closed = IllegalStateError("the client closed before the call completed")
        self._forwarder.fail_all(closed)
        self.tracker.fail_all(closed)
        for transfer in self._transfers:
            transfer.future.set_exception(closed)
        self._transfers = []
        self.reads.fail_all(closed)

    # -- the leader's side of forwarded calls -----------------------------------------------
    def _refusal(
        self, response: type[ForwardAppendResponse] | type[ReadIndexResponse]
    ) -> ForwardAppendResponse | ReadIndexResponse:
        """Refuse a forwarded call, naming the leader this replica knows."""
        leader, epoch = self._leader_hint()
        return response(
            error_code=Errors.NOT_LEADER_OR_FOLLOWER,
            leader_id=-1 if leader is None else leader,
            leader_epoch=epoch,
        )

    def handle_forward_append(
        self, request: InboundRequest, body: ForwardAppendRequest, now_ms: int
    ) -> Response | None:
        state = self._leading()
        if state is None:
            return self._refusal(ForwardAppendResponse)
        try:
            records = [self._serde.decode(r) for r in body.records]
        except Exception as exc:  # the user's serde: any failure is the sender's bad bytes
            if self._bad_forward_log.allow(now_ms):
                logger.warning("refusing a forwarded batch from %d: %s", request.source, exc)
            return ForwardAppendResponse(
                error_code=Errors.INVALID_RECORD, error_message=f"cannot decode: {exc}"
            )
        if not records:
            return ForwardAppendResponse(
                error_code=Errors.INVALID_RECORD, error_message="an empty batch"
            )
        deadline = now_ms + max(0, min(body.timeout_ms, MAX_FORWARDED_TIMEOUT_MS))
        future: RaftFuture[int] = RaftFuture()
        self._append_local(state, records, deadline, future)
        batch_epoch = state.epoch
        future.add_done_callback(
            lambda done: self._respond(request, self._forward_answer(done, batch_epoch))
        )
        return None

    def _forward_answer(self, done: RaftFuture[int], batch_epoch: int) -> ForwardAppendResponse:
        leader, epoch = self._leader_hint()
        leader_id = -1 if leader is None else leader
        exc = done.exception()
        if exc is None:
            return ForwardAppendResponse(
                leader_id=leader_id,
                leader_epoch=epoch,
                last_offset=done.result(),
                batch_epoch=batch_epoch,
            )
        code = Errors.UNKNOWN_SERVER_ERROR
        if isinstance(exc, NotLeaderError):
            code = Errors.NOT_LEADER_OR_FOLLOWER
        elif isinstance(exc, OperationTimeoutError):
            code = Errors.REQUEST_TIMED_OUT
        elif isinstance(exc, RecordBatchTooLargeError):
            code = Errors.RECORD_LIST_TOO_LARGE
        elif isinstance(exc, BufferAllocationError):
            code = Errors.THROTTLING_QUOTA_EXCEEDED
        return ForwardAppendResponse(
            error_code=code, error_message=str(exc), leader_id=leader_id, leader_epoch=epoch
        )

    def handle_read_index(
        self, request: InboundRequest, body: ReadIndexRequest, now_ms: int
    ) -> Response | None:
        state = self._leading()
        if state is None:
            return self._refusal(ReadIndexResponse)
        deadline = now_ms + max(0, min(body.timeout_ms, MAX_FORWARDED_TIMEOUT_MS))
        future: RaftFuture[int] = RaftFuture()
        self._read_local(state, deadline, future, deliver=False)

        def answer(done: RaftFuture[int]) -> None:
            exc = done.exception()
            if exc is None:
                response = ReadIndexResponse(read_offset=done.result())
            else:
                code = (
                    Errors.REQUEST_TIMED_OUT
                    if isinstance(exc, OperationTimeoutError)
                    else Errors.NOT_LEADER_OR_FOLLOWER
                )
                response = ReadIndexResponse(error_code=code, error_message=str(exc))
            self._respond(request, response)

        future.add_done_callback(answer)
        return None
