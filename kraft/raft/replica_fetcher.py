"""``ReplicaFetcher``: a follower's replication from its leader, and its snapshot downloads.

What Kafka's ``KafkaRaftClient`` does as a follower (its ``maybeSendFetchToBestNode``,
``buildFetchRequest``, ``handleFetchResponse`` and ``handleFetchSnapshotResponse``); kraft gives
it one object, owning the one piece of state only a follower has: the snapshot it is
downloading (KIP-630).

- Sending: one Fetch in flight, to the leader, or -- when the leader is backing off or timed
  out, and for an observer past its fetch timeout -- to a random ready bootstrap server. While
  a snapshot downloads, the request is the FetchSnapshot of its next chunk instead.
- Receiving: the response prologue has already handled the leader and epoch the answer names
  (``kraft.raft.response_prologue.ResponsePrologue``); what is left is the data:
  a diverging epoch truncates the log, a snapshot id starts a download, records are appended
  and the high watermark follows the leader's. A downloaded snapshot is checked, frozen, and
  the log moves onto it; the listeners load it at the end of the poll.
"""

from __future__ import annotations

import logging
import uuid
from typing import Generic, TypeVar

from kraft.common.clock import Clock
from kraft.common.ratelimit import LogLimiter
from kraft.common.uuids import ZERO_UUID
from kraft.config import QuorumConfig
from kraft.errors import CorruptRecordError, InvalidAppendError, KraftError
from kraft.log.api import OffsetAndEpoch, ReplicatedLog
from kraft.protocol.envelope import InboundResponse
from kraft.protocol.errors import Errors, error_name
from kraft.protocol.messages import (
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    SnapshotId,
)
from kraft.raft.channel import MetricsRecorder, NetworkChannel
from kraft.raft.quorum import QuorumState
from kraft.raft.repair import REPAIR_LOG_INTERVAL_MS
from kraft.raft.requests import RequestManager
from kraft.raft.resources import ResourceFailures
from kraft.raft.states import NO_DEADLINE, FollowerState
from kraft.record.serde import RecordSerde
from kraft.snapshot.raw import RawSnapshotWriter
from kraft.snapshot.reader import SnapshotReader

__all__ = ["ReplicaFetcher"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ReplicaFetcher(Generic[T]):
    """Fetches the leader's log into this replica's, as a follower (voter or observer)."""

    def __init__(
        self,
        *,
        local_id: int | None,
        local_directory_id: uuid.UUID | None,
        quorum: QuorumState[T],
        log: ReplicatedLog,
        config: QuorumConfig,
        serde: RecordSerde[T],
        requests: RequestManager,
        channel: NetworkChannel,
        clock: Clock,
        metrics: MetricsRecorder,
    ) -> None:
        self._replica_id = -1 if local_id is None else local_id
        self._directory_id = local_directory_id or ZERO_UUID
        self._quorum = quorum
        self._log = log
        self._config = config
        self._serde = serde
        self._requests = requests
        self._channel = channel
        self._clock = clock
        #: Where fetched records are counted (the client's recorder; it may replace it).
        self.metrics = metrics
        #: The snapshot being downloaded, from ``_download_leader``: a FetchSnapshot that
        #: failed or timed out resumes where it stopped.
        self._download: RawSnapshotWriter | None = None
        self._download_leader = -1
        self._resource_failures = ResourceFailures()
        #: Fetches to the leader that timed out since the last answer that came within the
        #: first deadline, and when the request in flight was sent (see
        #: :attr:`fetch_request_timeout_ms`).
        self._timeouts_in_a_row = 0
        self._sent_ms = 0
        self._corrupt_download_log = LogLimiter(REPAIR_LOG_INTERVAL_MS)

    @property
    def downloading_snapshot(self) -> OffsetAndEpoch | None:
        return None if self._download is None else self._download.snapshot_id

    # =============================================================================================
    # Sending
    # =============================================================================================
    def maybe_send_fetch_to_best_node(self, state: FollowerState, now: int) -> int:
        """Fetch from the leader, or a bootstrap server if the leader is unavailable; return
        the ms until this needs to run again."""
        requests = self._requests
        leader = state.leader_id
        if requests.has_request_timed_out(leader, now):
            requests.reset(leader)
            self._timeouts_in_a_row += 1
            return self.maybe_send_fetch_to_any_bootstrap(now)
        if requests.is_backing_off(leader, now):
            return self.maybe_send_fetch_to_any_bootstrap(now)
        if not requests.has_any_inflight_request(now):
            return requests.maybe_send(
                self._channel, leader, self._build_request, now, self.fetch_request_timeout_ms
            )
        return self._remaining_inflight_ms(now)

    def maybe_send_fetch_to_any_bootstrap(self, now: int) -> int:
        requests = self._requests
        if requests.has_any_inflight_request(now):
            return self._remaining_inflight_ms(now)
        node = requests.find_ready_bootstrap_server(now)
        if node is None:
            wait = requests.backoff_before_any_bootstrap_server_ms(now)
            return wait if wait > 0 else NO_DEADLINE
        return requests.maybe_send(
            self._channel, node, self._build_request, now, self.fetch_request_timeout_ms
        )

    @property
    def _base_fetch_request_timeout_ms(self) -> int:
        config = self._config
        return min(
            config.request_timeout_ms, config.fetch_max_wait_ms + config.fetch_round_trip_margin_ms
        )

    @property
    def fetch_request_timeout_ms(self) -> int:
        """How long the next Fetch or FetchSnapshot may go unanswered before it is sent again.

        kraft (docs/protocol.md §1.4.1): the leader holds a Fetch at most ``fetch_max_wait_ms``,
        so an answer later than that plus ``fetch_round_trip_margin_ms`` was most likely lost;
        waiting the whole ``request_timeout_ms`` (as long as the fetch timeout by default)
        would let the fetch timer expire and cost a pre-vote, often an election. From the
        second timeout in a row on it doubles, up to ``request_timeout_ms``, and it stays that
        long while the answers come later than the first deadline: an answer that is slow
        rather than lost (a large batch on a slow link) still gets through, while a lost one
        costs a retry, twice before the default fetch timeout expires."""
        doublings = max(0, min(self._timeouts_in_a_row - 1, 16))
        return min(
            self._config.request_timeout_ms, self._base_fetch_request_timeout_ms << doublings
        )

    def _remaining_inflight_ms(self, now: int) -> int:
        # The request in flight is answered, or times out, by then.
        return max(1, self._requests.remaining_any_request_time_ms(now))

    def _build_request(self, destination: int) -> FetchRequest | FetchSnapshotRequest:
        """A Fetch, or while a snapshot downloads, the FetchSnapshot of its next chunk."""
        self._sent_ms = self._clock.now_ms()
        download = self._download
        leader = self._quorum.leader_id
        if download is not None and leader != self._download_leader:
            # Another leader's file for the same id may differ (its header's timestamps):
            # never splice two files. Fetch, and download what the new leader names.
            self.abandon_download(f"the leader is now {leader}")
            download = None
        if download is None:
            return self._build_fetch_request()
        return FetchSnapshotRequest(
            replica_id=self._replica_id,
            current_leader_epoch=self._quorum.epoch,
            snapshot_id=SnapshotId.of(download.snapshot_id),
            position=download.size_in_bytes,
            max_bytes=self._config.fetch_snapshot_max_bytes,
            replica_directory_id=self._directory_id,
        )

    def _build_fetch_request(self) -> FetchRequest:
        high_watermark = self._quorum.high_watermark
        log = self._log
        return FetchRequest(
            replica_id=self._replica_id,
            current_leader_epoch=self._quorum.epoch,
            fetch_offset=log.log_end_offset,
            last_fetched_epoch=log.last_fetched_epoch,
            max_wait_ms=self._config.fetch_max_wait_ms,
            max_bytes=self._config.max_batch_size_bytes,
            replica_directory_id=self._directory_id,
            high_watermark=-1 if high_watermark is None else high_watermark,
        )

    # =============================================================================================
    # Fetch responses
    # =============================================================================================
    def handle_fetch_response(
        self, response: InboundResponse, body: FetchResponse, leader: int | None, now: int
    ) -> bool:
        """A NONE answer from ``leader`` (past the prologue): use its data if we follow it."""
        state = self._quorum.state
        if not isinstance(state, FollowerState) or leader != state.leader_id:
            logger.debug("ignoring a fetch response from %d: not following it", response.source)
            return False
        diverging = body.diverging_epoch
        snapshot = body.snapshot_id
        if diverging is not None and diverging.epoch >= 0:
            ok = self._truncate_to_diverging(state, diverging)
        elif snapshot is not None and (snapshot.epoch >= 0 or snapshot.end_offset >= 0):
            ok = self._start_download(state, snapshot)
        else:
            ok = self._append_records(state, body)
        if ok:
            self._fetched(state, now)
        return ok

    def _fetched(self, state: FollowerState, now: int) -> None:
        """A successful answer from the leader: its fetch timer restarts, and (KIP-996) the
        follower refuses pre-votes from now on in this epoch."""
        state.fetch_deadline_ms = now + self._config.fetch_timeout_ms
        state.has_fetched = True
        if now - self._sent_ms <= self._base_fetch_request_timeout_ms:
            self._timeouts_in_a_row = 0

    def _truncate_to_diverging(self, state: FollowerState, diverging: EpochEndOffset) -> bool:
        end = OffsetAndEpoch(diverging.end_offset, diverging.epoch)
        floor = max(self._log.high_watermark, state.high_watermark or 0)
        if end.offset < floor:
            # Kafka: fatal. Committed data is never truncated; kraft refuses and logs it.
            logger.error(
                "the leader asks to truncate to %d, below the high watermark %d: refused",
                end.offset,
                floor,
            )
            return False
        try:
            offset = self._log.truncate_to_end_offset(end)
        except ValueError as exc:
            logger.error("truncation to %s refused: %s", end, exc)
            return False
        self._quorum.history.truncated(offset)  # a voter set truncated away is rolled back
        logger.info(
            "truncated the log to offset %d (diverging epoch %d ends at %d)",
            offset,
            end.epoch,
            end.offset,
        )
        return True

    def _append_records(self, state: FollowerState, body: FetchResponse) -> bool:
        if body.records and not self._append_as_follower(body.records):
            return False
        self._update_high_watermark(state, body.high_watermark)
        return True

    def _append_as_follower(self, records: bytes) -> bool:
        log = self._log
        before = log.log_end_offset
        try:
            log.append_as_follower(records)
        except (CorruptRecordError, InvalidAppendError) as exc:
            logger.error("refusing fetched records: %s", exc)
            return False
        except (KraftError, OSError) as exc:
            if not self._resource_failures.absorb(
                exc, "appending fetched records", self._clock.now_ms()
            ):
                raise
            log.flush()  # what did get in is durable before a Fetch reports it
            return False
        self.metrics.record_fetch_records(log.log_end_offset - before, self._clock.now_ms())
        # A VotersRecord applies once appended (KIP-853): it may make this replica a voter.
        self._quorum.history.appended(log, before, records)
        if self._quorum.is_voter or self._config.followers_always_flush:
            # The leader counts a voter's fetch offset towards the HW: it must be durable.
            log.flush()
        return True

    def _update_high_watermark(self, state: FollowerState, leader_hw: int) -> None:
        if leader_hw < 0:
            return
        new = min(self._log.log_end_offset, leader_hw)
        if new > self._log.high_watermark:
            # Below ours too while a log that set data aside fetches it again (§1.14).
            self._log.update_high_watermark(new)
        old = state.high_watermark
        if old is None or new > old:
            state.high_watermark = new
        elif leader_hw < old:
            # Kafka: fatal (non-monotonic). kraft keeps its high watermark and logs.
            logger.error("the leader's high watermark %d is below ours (%d)", leader_hw, old)
        # The listeners hear of it at the end of the poll, after the next Fetch is sent.

    # =============================================================================================
    # Snapshot downloads (KIP-630)
    # =============================================================================================
    def _start_download(self, state: FollowerState, snapshot: SnapshotId) -> bool:
        """The leader answered a Fetch with a snapshot id: download it (or go on with it)."""
        if snapshot.epoch < 0 or snapshot.end_offset < 0:
            logger.error("the leader sent an invalid snapshot id %s", snapshot)
            return False
        snapshot_id = OffsetAndEpoch(snapshot.end_offset, snapshot.epoch)
        download = self._download
        if download is not None:
            if download.snapshot_id == snapshot_id:
                return True  # resume where it stopped (a change of leader ended it already)
            self.abandon_download(f"the leader now sends snapshot {snapshot_id}")
        writer = self._log.create_new_snapshot_unchecked(snapshot_id)
        if writer is None:
            # We hold it already (a crash between freezing and truncating): use it.
            self._install_snapshot(state)
            return True
        logger.info(
            "epoch %d: downloading snapshot %s from leader %d",
            state.epoch,
            snapshot_id,
            state.leader_id,
        )
        self._download = writer
        self._download_leader = state.leader_id
        return True

    def abandon_download(self, why: str) -> None:
        download = self._download
        if download is not None:
            self._download = None
            logger.info(
                "abandoning the download of snapshot %s (%d bytes): %s",
                download.snapshot_id,
                download.size_in_bytes,
                why,
            )
            download.close()

    def handle_fetch_snapshot_response(
        self,
        response: InboundResponse,
        body: FetchSnapshotResponse,
        leader: int | None,
        now: int,
    ) -> bool:
        """An answer to a FetchSnapshot past the prologue: NONE, SNAPSHOT_NOT_FOUND or
        POSITION_OUT_OF_RANGE."""
        error = body.partition_error_code
        if error != Errors.NONE:
            # The leader cleaned that snapshot away (or our position is off): start over
            # from a Fetch, which names the snapshot to get now.
            self.abandon_download(f"the leader answered {error_name(error)}")
            return True
        state = self._quorum.state
        download = self._download
        if not isinstance(state, FollowerState) or leader != state.leader_id:
            logger.debug("ignoring a snapshot chunk from %d: not following it", response.source)
            return False
        wanted = None if download is None else SnapshotId.of(download.snapshot_id)
        if download is None or body.snapshot_id != wanted:
            logger.error(
                "ignoring a chunk of snapshot %s: downloading %s", body.snapshot_id, wanted
            )
            return False
        return self._append_chunk(state, download, body, now)

    def _append_chunk(
        self,
        state: FollowerState,
        download: RawSnapshotWriter,
        body: FetchSnapshotResponse,
        now: int,
    ) -> bool:
        position, size, data = body.position, body.size, body.unaligned_records
        if position != download.size_in_bytes or not data or position + len(data) > size:
            logger.error(
                "bad chunk of snapshot %s: %d bytes at %d of %d, expected position %d",
                download.snapshot_id,
                len(data),
                position,
                size,
                download.size_in_bytes,
            )
            self.abandon_download("a bad chunk")
            return False
        download.append(data)
        self._fetched(state, now)
        if download.size_in_bytes == size:
            return self._finish_download(state, download, now)
        return True

    def _finish_download(self, state: FollowerState, download: RawSnapshotWriter, now: int) -> bool:
        """The whole snapshot arrived: check it, freeze it, and move the log onto it. False
        if it is corrupt: set aside, and fetched again after a backoff."""
        self._download = None
        snapshot_id = download.snapshot_id
        frozen = download.freeze()
        try:
            SnapshotReader(frozen, self._serde).close()
        except CorruptRecordError as exc:
            # Each batch carries its CRC: the bytes were damaged on the way or at the leader.
            # Kept for inspection (§1.14); the next Fetch names the snapshot to download.
            self._log.quarantine_snapshot(snapshot_id, f"corrupt when downloaded: {exc}")
            self.metrics.record_corruption_found(now)
            if self._corrupt_download_log.allow(now):
                logger.error(
                    "downloaded snapshot %s is corrupt, set aside; fetching again after a "
                    "backoff (logged at most once a minute): %s",
                    snapshot_id,
                    exc,
                )
            return False
        logger.info(
            "epoch %d: snapshot %s downloaded (%d bytes)",
            state.epoch,
            snapshot_id,
            frozen.size_in_bytes,
        )
        self._install_snapshot(state)
        return True

    def _install_snapshot(self, state: FollowerState) -> None:
        log = self._log
        if not log.truncate_to_latest_snapshot():
            logger.info("the log is already past snapshot %s", log.latest_snapshot_id)
            return
        self._quorum.history.reload(log)  # the voters are the snapshot's now
        offset = log.log_start_offset
        if state.high_watermark is None or state.high_watermark < offset:
            state.high_watermark = offset
        # The listeners load it at the end of this poll.
