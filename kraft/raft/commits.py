"""``CommitTracker``: completes commit futures and read waits from what the log says.

A batch appended by the leader of epoch ``E`` with its last record at offset ``O`` has a
definite outcome once the high watermark tells:

- it committed when the high watermark passes ``O`` and the record at ``O`` has epoch ``E``;
- it never will when a record of another epoch committed at ``O``, or when the last committed
  record has an epoch above ``E`` while ``O`` is not committed (a later leader's log is the
  quorum's now, and it holds no record of epoch ``E`` past its own epoch's start);
- it never reached any log when leadership of ``E`` ended before it left the accumulator.

So the tracker works the same on the leader that appended, after it lost leadership, and on a
follower told by the leader where a forwarded batch went. A success completes only once every
listener of this node was handed the record (``ListenerRegistry.delivered_end``): a caller that
reads its state machine after the future completes sees its own write. A read wait (a read
barrier at offset ``R``) needs delivery only. Until then a deadline bounds each wait; at the
deadline the outcome is unknown (``OperationTimeoutError``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from kraft.errors import NotLeaderError, OperationTimeoutError
from kraft.log.api import ReplicatedLog
from kraft.raft.futures import RaftFuture
from kraft.raft.states import NO_DEADLINE

__all__ = ["CommitTracker"]


@dataclass(order=True, slots=True)
class _Wait:
    offset: int
    seq: int
    #: The batch's epoch; None for a read wait (delivery only) or a batch known committed.
    epoch: int | None = field(compare=False)
    deadline_ms: int = field(compare=False)
    future: RaftFuture[int] = field(compare=False)


class CommitTracker:
    """The commit futures and read waits of one client, resolved on each poll."""

    def __init__(
        self,
        log: ReplicatedLog,
        leader_hint: Callable[[], tuple[int | None, int]],
    ) -> None:
        self._log = log
        #: (leader id, epoch) this replica knows: where a failed caller may retry.
        self._leader_hint = leader_hint
        self._seq = itertools.count()
        self._by_offset: list[_Wait] = []
        self._by_deadline: list[tuple[int, int, _Wait]] = []
        #: The epoch of the last committed record when the waits were last swept for batches
        #: a later epoch's commit doomed.
        self._swept_epoch = -1

    @property
    def is_idle(self) -> bool:
        """Nothing is waited for (completed waits may linger until the next poll)."""
        return not self._by_deadline

    def track_batch(
        self, future: RaftFuture[int], last_offset: int, epoch: int, deadline_ms: int
    ) -> None:
        """Complete ``future`` with ``last_offset`` when the batch of ``epoch`` commits."""
        self._add(_Wait(last_offset, next(self._seq), epoch, deadline_ms, future))

    def wait_delivered(self, future: RaftFuture[int], offset: int, deadline_ms: int) -> None:
        """Complete ``future`` with ``offset`` once this node's listeners were handed it (a
        committed offset: a forwarded batch the leader committed, or a read index)."""
        self._add(_Wait(offset, next(self._seq), None, deadline_ms, future))

    def _add(self, wait: _Wait) -> None:
        heapq.heappush(self._by_offset, wait)
        heapq.heappush(self._by_deadline, (wait.deadline_ms, wait.seq, wait))

    def leadership_lost(self, epoch: int, log_end_offset: int) -> None:
        """Leadership of ``epoch`` ended: its batches still in the accumulator (at or past
        ``log_end_offset``) were dropped and can never commit."""
        for wait in self._by_offset:
            if wait.epoch == epoch and wait.offset >= log_end_offset and not wait.future.done():
                self._fail_not_leader(wait, "leadership ended before the batch was written")

    def poll(self, now_ms: int, high_watermark: int | None, delivered_end: int) -> int:
        """Resolve what the high watermark and the listeners' progress decide, expire what
        is due; return the milliseconds until the next deadline."""
        if high_watermark is not None:
            self._resolve(high_watermark, delivered_end)
        deadlines = self._by_deadline
        while deadlines and (deadlines[0][2].future.done() or deadlines[0][0] <= now_ms):
            _, _, wait = heapq.heappop(deadlines)
            if not wait.future.done():
                wait.future.set_exception(
                    OperationTimeoutError(
                        f"no outcome for offset {wait.offset} within the timeout"
                        + ("" if wait.epoch is None else ": the batch may still commit")
                    )
                )
        if self._by_offset and len(self._by_offset) > 2 * len(deadlines):
            self._by_offset = [w for w in self._by_offset if not w.future.done()]
            heapq.heapify(self._by_offset)
        return max(0, deadlines[0][0] - now_ms) if deadlines else NO_DEADLINE

    def _resolve(self, high_watermark: int, delivered_end: int) -> None:
        waits, log = self._by_offset, self._log
        while waits and waits[0].offset < high_watermark:
            wait = waits[0]
            if wait.future.done():
                heapq.heappop(waits)
                continue
            if wait.epoch is not None:
                epoch = log.epoch_at(wait.offset)
                if epoch is None:
                    heapq.heappop(waits)
                    wait.future.set_exception(
                        OperationTimeoutError(
                            f"offset {wait.offset} committed, but the log was cleaned past it "
                            "before its epoch was checked: outcome unknown"
                        )
                    )
                    continue
                if epoch != wait.epoch:
                    heapq.heappop(waits)
                    self._fail_not_leader(
                        wait, f"a record of epoch {epoch} committed at offset {wait.offset}"
                    )
                    continue
                wait.epoch = None  # committed: only delivery remains
            if wait.offset >= delivered_end:
                break
            heapq.heappop(waits)
            wait.future.set_result(wait.offset)
        if high_watermark > 0 and waits:
            committed_epoch = log.epoch_at(high_watermark - 1)
            if committed_epoch is not None and committed_epoch > self._swept_epoch:
                self._swept_epoch = committed_epoch
                for wait in waits:
                    if (
                        wait.epoch is not None
                        and wait.epoch < committed_epoch
                        and not wait.future.done()
                    ):
                        self._fail_not_leader(
                            wait, f"epoch {committed_epoch} committed without the batch"
                        )

    def _fail_not_leader(self, wait: _Wait, why: str) -> None:
        leader_id, epoch = self._leader_hint()
        wait.future.set_exception(
            NotLeaderError(
                f"the batch ending at offset {wait.offset} did not commit: {why}",
                leader_id=leader_id,
                epoch=epoch,
            )
        )

    def fail_all(self, exc: BaseException) -> None:
        """The client closes: nothing pending will be completed."""
        for wait in self._by_offset:
            if not wait.future.done():
                wait.future.set_exception(exc)
        self._by_offset.clear()
        self._by_deadline.clear()
