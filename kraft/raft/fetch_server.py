"""``FetchServer``: the leader's side of Fetch and FetchSnapshot, with the fetch purgatory.

Kafka's ``KafkaRaftClient.handleFetchRequest`` / ``tryCompleteFetchRequest`` and
``handleFetchSnapshotRequest``. A Fetch is validated (its fields, then Kafka's leader-only
validation), counts for check-quorum, and is answered at once -- with records, a diverging
epoch, a snapshot id, an error, or (KIP-1166) because the fetcher's high watermark is behind
ours -- or parked in the :class:`~kraft.raft.purgatory.FetchPurgatory` until its wait is over.

Answering a Fetch records the fetcher's progress (``LeaderState.update_replica_state``), which
may move the high watermark; :meth:`FetchServer.on_update_leader_high_watermark` passes it to
the log and nothing else. Parked fetches that the new high watermark (or new records) give
news to are answered by :meth:`FetchServer.complete_parked`, which the client calls once at
the end of the step that may have moved them -- never from inside the answering of a Fetch,
so no Fetch is answered from within another's answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from kraft.common.ratelimit import LogLimiter
from kraft.common.uuids import ZERO_UUID
from kraft.config import QuorumConfig
from kraft.errors import CorruptRecordError, KraftError
from kraft.log.api import (
    DEFAULT_MAX_READ_BYTES,
    Isolation,
    OffsetAndEpoch,
    ReplicatedLog,
    ValidationKind,
)
from kraft.protocol.api import METADATA_TOPIC_ID
from kraft.protocol.envelope import InboundRequest, OutboundResponse
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    SnapshotId,
)
from kraft.raft.channel import NetworkChannel
from kraft.raft.leader import LeaderState
from kraft.raft.purgatory import FetchPurgatory
from kraft.raft.quorum import QuorumState
from kraft.raft.repair import StorageRepair
from kraft.raft.rpc import (
    directory_or_none,
    leader_node_endpoints,
    valid_topic_partition,
    validate_leader_only,
    wire_leader_id,
)
from kraft.raft.snapshot_chunks import SnapshotChunks
from kraft.raft.states import NO_DEADLINE, ReplicaKey

__all__ = ["FetchServer"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_NONE = Errors.NONE.value

#: At most one ERROR line per this interval for Fetches below a log start no snapshot covers
#: (every follower that needs the missing offsets asks again after each retry backoff).
BELOW_LOG_START_LOG_INTERVAL_MS = 60_000


class FetchServer(Generic[T]):
    """Answers Fetch and FetchSnapshot as the leader; owns the parked (long-poll) fetches.

    ``shutting_down`` tells whether the client is shutting down (leader-only validation then
    answers BROKER_NOT_AVAILABLE); ``repair`` sets aside what a read finds corrupt.
    """

    def __init__(
        self,
        quorum: QuorumState[T],
        log: ReplicatedLog,
        config: QuorumConfig,
        channel: NetworkChannel,
        shutting_down: Callable[[], bool],
        repair: StorageRepair[T],
    ) -> None:
        self._quorum = quorum
        self._log = log
        self._config = config
        self._channel = channel
        self._shutting_down = shutting_down
        self._repair = repair
        self._purgatory = FetchPurgatory()
        self._below_log_start_log = LogLimiter(BELOW_LOG_START_LOG_INTERVAL_MS)
        self._snapshot_chunks = SnapshotChunks()

    def _respond(self, request: InboundRequest, body: FetchResponse) -> None:
        self._channel.respond(OutboundResponse(request.correlation_id, request.source, body))

    def _validate_leader_only(self, epoch: int) -> Errors | None:
        return validate_leader_only(self._quorum, epoch, self._shutting_down())

    def fetch_response(
        self,
        error: Errors,
        records: bytes = b"",
        diverging: OffsetAndEpoch | None = None,
        snapshot: OffsetAndEpoch | None = None,
    ) -> FetchResponse:
        """A Fetch answer carrying what this replica knows: its HW, leader, epoch."""
        quorum = self._quorum
        high_watermark = quorum.high_watermark
        return FetchResponse(
            partition_error_code=error,
            high_watermark=-1 if high_watermark is None else high_watermark,
            log_start_offset=self._log.log_start_offset,
            records=records,
            diverging_epoch=None if diverging is None else EpochEndOffset.of(diverging),
            current_leader=LeaderIdAndEpoch(wire_leader_id(quorum), quorum.epoch),
            snapshot_id=None if snapshot is None else SnapshotId.of(snapshot),
            node_endpoints=leader_node_endpoints(quorum),
        )

    # -- Fetch ------------------------------------------------------------------------------------
    def handle_fetch(self, request: InboundRequest, body: FetchRequest, now: int) -> None:
        """Answer ``request`` now, or park it until there is news or its wait is over."""
        error = self._invalid_fetch(body)
        if error is not None:
            self._respond(request, error)
            return
        state = self._quorum.state
        assert isinstance(state, LeaderState)
        state.record_fetch_for_check_quorum(body.replica_id, now)
        response = self._complete_valid_fetch(state, body, now)
        if (
            response.partition_error_code != _NONE
            or response.records
            or body.max_wait_ms == 0
            or response.diverging_epoch is not None
            or response.snapshot_id is not None
        ):
            self._respond(request, response)
            return
        deadline = now + body.max_wait_ms
        if self._fetcher_behind_high_watermark(body):
            linger = self._config.fetch_high_watermark_linger_ms
            if linger <= 0:
                self._respond(request, response)
                return
            # The high watermark waits (a little) for records to ride with.
            deadline = min(deadline, now + linger)
        self._purgatory.park(request, body.fetch_offset, body.high_watermark, deadline)

    def _invalid_fetch(self, body: FetchRequest) -> FetchResponse | None:
        """The error answer for a Fetch that fails validation, or None."""
        if not valid_topic_partition(body) or body.topic_id not in (METADATA_TOPIC_ID, ZERO_UUID):
            return FetchResponse(error_code=Errors.INVALID_REQUEST)
        if (
            body.max_wait_ms < 0
            or body.fetch_offset < 0
            or body.last_fetched_epoch < 0
            or body.last_fetched_epoch > body.current_leader_epoch
        ):
            return self.fetch_response(Errors.INVALID_REQUEST)
        error = self._validate_leader_only(body.current_leader_epoch)
        return None if error is None else self.fetch_response(error)

    def _fetcher_behind_high_watermark(self, body: FetchRequest) -> bool:
        """KIP-1166: answer at once when the fetcher's high watermark is behind ours."""
        high_watermark = self._quorum.high_watermark
        return high_watermark is not None and body.high_watermark < high_watermark

    def _complete_valid_fetch(
        self, state: LeaderState[T], body: FetchRequest, now: int
    ) -> FetchResponse:
        """Kafka's ``tryCompleteFetchRequest`` past validation: records, a diverging epoch or
        a snapshot id, and the fetcher's progress (which may move the high watermark)."""
        log = self._log
        try:
            answer = self._snapshot_answer(body, now)
            if answer is not None:
                return answer
            validation = log.validate_offset_and_epoch(body.fetch_offset, body.last_fetched_epoch)
            if validation.kind is ValidationKind.DIVERGING:
                return self.fetch_response(Errors.NONE, diverging=validation.offset_and_epoch)
            if validation.kind is ValidationKind.SNAPSHOT:
                return self.fetch_response(Errors.NONE, snapshot=validation.offset_and_epoch)
            info = log.read(
                body.fetch_offset,
                Isolation.UNCOMMITTED,
                max_bytes=max(1, min(body.max_bytes, DEFAULT_MAX_READ_BYTES)),
            )
        except CorruptRecordError as exc:
            # Never served: set aside, and resign (§1.14); the fetcher hears there is no leader.
            self._repair.on_corrupt_log(exc, body.fetch_offset, "serving a Fetch", now)
            return self.fetch_response(Errors.NOT_LEADER_OR_FOLLOWER)
        except (KraftError, ValueError) as exc:
            logger.error("fetch at offset %d failed: %s", body.fetch_offset, exc)
            return self.fetch_response(Errors.UNKNOWN_SERVER_ERROR)
        key = ReplicaKey(body.replica_id, directory_or_none(body.replica_directory_id))
        if state.update_replica_state(key, now, body.fetch_offset, log.log_end_offset):
            self.on_update_leader_high_watermark(state)
        return self.fetch_response(Errors.NONE, records=info.records)

    def _snapshot_answer(self, body: FetchRequest, now: int) -> FetchResponse | None:
        """The answer to a Fetch that the log cannot serve from its records: an empty fetcher
        starts from the latest snapshot, and one below the log start needs it."""
        latest = self._log.latest_snapshot_id
        if body.fetch_offset == 0 and latest is not None and latest.offset > 0:
            return self.fetch_response(Errors.NONE, snapshot=latest)
        if body.fetch_offset < self._log.log_start_offset:
            return self._below_log_start(body, latest, now)
        return None

    def _below_log_start(
        self, body: FetchRequest, latest: OffsetAndEpoch | None, now: int
    ) -> FetchResponse:
        """A Fetch below the log start: the fetcher needs the latest snapshot (KIP-630), if one
        reaches the log start; otherwise nothing here can serve it. kraft: never
        UNKNOWN_SERVER_ERROR (docs/protocol.md §1.4)."""
        start = self._log.log_start_offset
        if latest is not None and latest.offset >= start:
            return self.fetch_response(Errors.NONE, snapshot=latest)
        if self._below_log_start_log.allow(now):
            logger.error(
                "replica %d fetches offset %d, below the log start %d, and no snapshot reaches "
                "the log start (latest: %s): answered OFFSET_OUT_OF_RANGE until one is taken",
                body.replica_id,
                body.fetch_offset,
                start,
                latest,
            )
        return self.fetch_response(Errors.OFFSET_OUT_OF_RANGE)

    def on_update_leader_high_watermark(self, state: LeaderState[T]) -> None:
        """The leader's high watermark moved: the log learns it. The parked fetches it gives
        news to are answered by :meth:`complete_parked`, and the listeners hear of it at the
        end of the poll, after those answers (which carry the new HW) have been sent."""
        high_watermark = state.high_watermark
        assert high_watermark is not None
        if high_watermark > self._log.high_watermark:
            self._log.update_high_watermark(high_watermark)
        logger.debug("epoch %d: high watermark %d", state.epoch, high_watermark)

    # -- the purgatory ----------------------------------------------------------------------------
    def complete_parked(self, now: int) -> None:
        """Answer the parked fetches that have news: records past their offset or (KIP-1166)
        a high watermark past theirs. Answering one may move the high watermark again, which
        may give news to others: the loop goes on until none has any."""
        purgatory = self._purgatory
        linger = self._config.fetch_high_watermark_linger_ms
        while len(purgatory):
            high_watermark = self._quorum.high_watermark
            if linger > 0 and high_watermark is not None:
                purgatory.hasten(high_watermark, now + linger)
            # With a linger, a higher HW alone does not complete a fetch: its deadline does.
            ready = purgatory.ready(
                self._log.log_end_offset, None if linger > 0 else high_watermark
            )
            if not ready:
                return
            for parked in ready:
                body = parked.request.body
                assert isinstance(body, FetchRequest)
                self._respond(parked.request, self._try_complete_fetch(body, now))

    def _try_complete_fetch(self, body: FetchRequest, now: int) -> FetchResponse:
        """Answer a parked Fetch as things stand now, validating it again."""
        error = self._validate_leader_only(body.current_leader_epoch)
        if error is not None:
            return self.fetch_response(error)
        state = self._quorum.state
        assert isinstance(state, LeaderState)
        return self._complete_valid_fetch(state, body, now)

    def expire_parked(self, now: int) -> int:
        """Answer the parked fetches whose wait is over; return the ms to the next deadline."""
        purgatory = self._purgatory
        if not len(purgatory):
            return NO_DEADLINE
        deadline = purgatory.next_deadline_ms()
        if deadline > now:
            return deadline - now  # none is over: most polls of a leader
        for parked in purgatory.expired(now):
            # The wait is over with nothing new: the empty answer.
            self._respond(
                parked.request,
                self.fetch_response(self._validate_leader_only(self._quorum.epoch) or Errors.NONE),
            )
        return max(0, purgatory.next_deadline_ms() - now)

    def fail_parked(self) -> None:
        """Leadership ended: every parked fetch is answered NOT_LEADER_OR_FOLLOWER."""
        for parked in self._purgatory.drain():
            self._respond(parked.request, self.fetch_response(Errors.NOT_LEADER_OR_FOLLOWER))

    # -- FetchSnapshot ----------------------------------------------------------------------------
    def handle_fetch_snapshot(
        self, request: InboundRequest, body: FetchSnapshotRequest, now: int
    ) -> FetchSnapshotResponse:
        """Kafka's ``handleFetchSnapshotRequest``: one chunk of the snapshot asked for."""
        quorum = self._quorum
        if not valid_topic_partition(body):
            return FetchSnapshotResponse(partition_error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION)
        current = LeaderIdAndEpoch(wire_leader_id(quorum), quorum.epoch)
        endpoints = leader_node_endpoints(quorum)
        error = self._validate_leader_only(body.current_leader_epoch)
        if error is not None:
            return FetchSnapshotResponse(
                partition_error_code=error,
                current_leader=current,
                node_endpoints=endpoints,
            )
        state = quorum.state
        assert isinstance(state, LeaderState)
        # A follower busy downloading is alive: it counts for check-quorum.
        state.record_fetch_for_check_quorum(body.replica_id, now)
        wanted = OffsetAndEpoch(body.snapshot_id.end_offset, body.snapshot_id.epoch)
        snapshot = None if wanted.offset <= 0 else self._log.read_snapshot(wanted)
        if snapshot is None:
            # Unknown, deleted by the cleaner, or the bootstrap id (0, 0): never served.
            return FetchSnapshotResponse(
                partition_error_code=Errors.SNAPSHOT_NOT_FOUND,
                snapshot_id=body.snapshot_id,
                current_leader=current,
                node_endpoints=endpoints,
            )
        try:
            size = snapshot.size_in_bytes
            if not 0 <= body.position < size:
                return FetchSnapshotResponse(
                    partition_error_code=Errors.POSITION_OUT_OF_RANGE,
                    snapshot_id=body.snapshot_id,
                    current_leader=current,
                    size=size,
                    position=body.position,
                    node_endpoints=endpoints,
                )
            chunk = min(max(1, body.max_bytes), self._config.fetch_snapshot_max_bytes)
            data = self._snapshot_chunks.read(snapshot, body.position, chunk)
        except CorruptRecordError as exc:
            # Never served (§1.14): set aside; a leader that can no longer serve the followers
            # below its log start resigns, else the follower fetches for another snapshot.
            self._snapshot_chunks.forget()
            resigned = self._repair.on_corrupt_snapshot(wanted, exc, "serving FetchSnapshot", now)
            return FetchSnapshotResponse(
                partition_error_code=(
                    Errors.NOT_LEADER_OR_FOLLOWER if resigned else Errors.SNAPSHOT_NOT_FOUND
                ),
                snapshot_id=body.snapshot_id,
                current_leader=current,
                node_endpoints=endpoints,
            )
        finally:
            snapshot.close()  # each chunk is read through a reader of its own
        return FetchSnapshotResponse(
            snapshot_id=body.snapshot_id,
            current_leader=current,
            size=size,
            position=body.position,
            unaligned_records=data,
            node_endpoints=endpoints,
        )
