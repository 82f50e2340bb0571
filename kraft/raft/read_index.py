"""``ReadIndex``: the leader's read barriers (etcd's ReadIndex, Raft thesis §6.4).

A read barrier asked of the leader of epoch ``E`` at time ``T`` takes the read index
``R = max(high watermark, epoch start + 1) - 1``: every write acknowledged before ``T``
committed, so it lies at or below the high watermark, and a new leader's log holds every
committed record, so it lies below its epoch's LeaderChange once that commits. ``R`` is
returned once

1. the leader has committed in its epoch (the high watermark passed the LeaderChange), and
2. a majority of the voters answered NONE to a BeginQuorumEpoch of epoch ``E`` sent after
   ``T``. A voter answers NONE only while it is in epoch ``E``, so at some moment after ``T``
   a majority was in ``E``: no leader of a later epoch had been elected by then (its voters
   would have answered FENCED_LEADER_EPOCH), so no write the leader does not know of had
   been acknowledged at ``T``.

Barriers taken while a round is under way share the next round: each BeginQuorumEpoch carries
(in this module's bookkeeping, not on the wire) the round that was current when it was sent,
and the requests are the heartbeats the leader sends anyway, sent early for a round. One
round trip to the fastest majority answers a barrier. kraft offers no lease-based read:
docs/embedding.md says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kraft.errors import NotLeaderError, OperationTimeoutError
from kraft.protocol.messages import Request
from kraft.raft.channel import NetworkChannel
from kraft.raft.futures import RaftFuture
from kraft.raft.leader import LeaderState
from kraft.raft.requests import RequestManager
from kraft.raft.states import NO_DEADLINE

__all__ = ["ReadIndex"]


@dataclass(slots=True)
class _Barrier:
    round: int
    read_offset: int
    deadline_ms: int
    future: RaftFuture[int]


class ReadIndex:
    """The read barriers of the current leader and the heartbeat rounds that confirm them."""

    def __init__(
        self,
        requests: RequestManager,
        channel: NetworkChannel,
        build_begin_quorum_epoch: Callable[[int], Request],
    ) -> None:
        self._requests = requests
        self._channel = channel
        self._build = build_begin_quorum_epoch
        self._round = 0
        #: voter -> the round current when its last BeginQuorumEpoch was sent.
        self._sent_round: dict[int, int] = {}
        #: voter -> the highest round it acknowledged.
        self._acked_round: dict[int, int] = {}
        self._barriers: list[_Barrier] = []

    @property
    def is_idle(self) -> bool:
        return not self._barriers

    def build_heartbeat(self, destination: int) -> Request:
        """The leader's BeginQuorumEpoch to ``destination``, tagged with the current round."""
        self._sent_round[destination] = self._round
        return self._build(destination)

    def on_acknowledged(self, voter: int) -> None:
        """``voter`` answered NONE to the BeginQuorumEpoch in flight to it."""
        sent = self._sent_round.get(voter)
        if sent is not None and sent > self._acked_round.get(voter, 0):
            self._acked_round[voter] = sent

    def add(self, state: LeaderState[Any], deadline_ms: int) -> RaftFuture[int]:
        """A read barrier on ``state``'s leader: the future of its read index, completed
        once confirmed (it fails with ``NotLeaderError`` if leadership ends first)."""
        high_watermark = state.high_watermark or 0
        read_offset = max(high_watermark, state.epoch_start_offset + 1) - 1
        self._round += 1
        future: RaftFuture[int] = RaftFuture()
        self._barriers.append(_Barrier(self._round, read_offset, deadline_ms, future))
        return future

    def poll(self, state: LeaderState[Any], now_ms: int) -> int:
        """Send this round's heartbeats, answer the confirmed barriers, fail the expired
        ones; return the milliseconds until this needs attention again."""
        if not self._barriers:
            return NO_DEADLINE
        confirmed = self._confirmed_round(state)
        committed = (state.high_watermark or 0) > state.epoch_start_offset
        timeout = NO_DEADLINE
        pending = []
        for barrier in self._barriers:
            if committed and barrier.round <= confirmed:
                barrier.future.set_result(barrier.read_offset)
            elif now_ms >= barrier.deadline_ms:
                barrier.future.set_exception(
                    OperationTimeoutError("a majority did not confirm the leader in time")
                )
            else:
                pending.append(barrier)
                timeout = min(timeout, barrier.deadline_ms - now_ms)
        self._barriers = pending
        if pending:
            for voter in state.other_voters():
                if self._sent_round.get(voter, 0) < self._round:
                    timeout = min(
                        timeout,
                        self._requests.maybe_send(
                            self._channel, voter, self.build_heartbeat, now_ms
                        ),
                    )
        return max(0, timeout)

    def _confirmed_round(self, state: LeaderState[Any]) -> int:
        """The highest round a majority of the voters (the leader counts itself) confirmed."""
        voters = state.voters
        rounds = sorted(
            (self._round if v == state.local.id else self._acked_round.get(v, 0) for v in voters),
            reverse=True,
        )
        majority = len(voters) // 2 + 1
        return rounds[majority - 1] if len(rounds) >= majority else 0

    def leadership_lost(self, epoch: int) -> None:
        """Every barrier fails; the next leadership starts afresh."""
        self.fail_all(
            NotLeaderError(f"leadership of epoch {epoch} ended before the read was confirmed")
        )

    def fail_all(self, exc: BaseException) -> None:
        barriers, self._barriers = self._barriers, []
        self._sent_round.clear()
        self._acked_round.clear()
        for barrier in barriers:
            barrier.future.set_exception(exc)
