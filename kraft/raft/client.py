"""``KafkaRaftClient``: KRaft's replica state machine, sans-IO, driven by :meth:`poll`.

The client owns one replica of the metadata log. Everything from outside is injected (a
``Clock``, a ``random.Random``, a ``NetworkChannel`` for what it sends, a ``RaftMessageQueue``
for what it receives, a ``ReplicatedLog``, a ``QuorumStateStore``, the user's ``RecordSerde``):
nothing here reads a clock, opens a socket, sleeps or starts a thread.

This module keeps polling, the state transitions with their side effects, elections, and the
dispatch of messages (one table per message type). The other parts own their state in their
own modules: ``FetchServer`` (the leader's Fetch and FetchSnapshot, and the purgatory),
``ReplicaFetcher`` (a follower's replication and snapshot downloads), ``ListenerRegistry``,
``QuorumState`` (the states and the transition table), ``VoteRpcs``, ``QuorumEpochRpcs``,
``ResponsePrologue`` and ``GracefulShutdown``. docs/protocol.md describes a poll step by
step, follows a Fetch through these modules, and maps every rule (Kafka's
``KafkaRaftClient``: KIP-595, KIP-996, KIP-630, KIP-1166) to its code; the places where kraft
deliberately differs are listed there and marked "kraft:" in comments.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from kraft.common.clock import Clock
from kraft.common.limits import INT32_MAX
from kraft.common.ratelimit import LogLimiter
from kraft.config import QuorumConfig
from kraft.errors import IllegalStateError, KraftError, NotLeaderError
from kraft.log.api import OffsetAndEpoch, ReplicatedLog
from kraft.log.quorum_state import QuorumStateStore
from kraft.protocol.envelope import InboundRequest, InboundResponse, OutboundResponse
from kraft.protocol.errors import Errors
from kraft.protocol.int32 import int32_fields_in_range
from kraft.protocol.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    BeginQuorumEpochRequest,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    ForwardAppendRequest,
    ReadIndexRequest,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    Request,
    Response,
    UpdateFeaturesRequest,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoteRequest,
)
from kraft.raft.accumulator import AppendLock, BatchAccumulator
from kraft.raft.channel import (
    NO_METRICS,
    MetricsRecorder,
    NetworkChannel,
    RaftMessageQueue,
)
from kraft.raft.client_view import ClientView
from kraft.raft.describe import describe_quorum
from kraft.raft.embedding import Embedding
from kraft.raft.fetch_server import FetchServer
from kraft.raft.futures import RaftFuture
from kraft.raft.leader import LeaderState
from kraft.raft.leader_appender import LeaderAppender
from kraft.raft.listener_registry import ListenerRegistry
from kraft.raft.listeners import Listener
from kraft.raft.membership import Membership
from kraft.raft.quorum import QuorumState
from kraft.raft.quorum_epoch import QuorumEpochRpcs
from kraft.raft.reconfig import Reconfiguration, api_versions_response
from kraft.raft.repair import StorageRepair
from kraft.raft.replica_fetcher import ReplicaFetcher
from kraft.raft.requests import RequestManager, bootstrap_server_id
from kraft.raft.response_prologue import ResponsePrologue, response_kinds
from kraft.raft.rpc import PeerCheck, refusal
from kraft.raft.shutdown import GracefulShutdown
from kraft.raft.states import (
    NO_DEADLINE,
    CandidateState,
    Endpoints,
    EpochState,
    FollowerState,
    ProspectiveState,
    ReplicaKey,
    ResignedState,
    UnattachedState,
)
from kraft.raft.vote import VoteRpcs
from kraft.record.serde import RecordSerde
from kraft.snapshot.writer import SnapshotWriter

__all__ = ["KafkaRaftClient"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How often a replica says at most that another one uses its node id.
DUPLICATE_NODE_ID_LOG_INTERVAL_MS = 60_000

_NONE = Errors.NONE.value


class KafkaRaftClient(ClientView[T]):
    """One replica of a KRaft quorum. See the module docstring for how it is driven.

    Construct, :meth:`initialize` (restores the election state from the store and the log),
    then call :meth:`poll` again and again. ``local_id`` is ``None`` for an anonymous observer.
    ``append_lock`` guards the batch accumulator when :meth:`prepare_append` is called from
    other threads than the one that polls (the runtime passes a ``threading.Lock()``).
    """

    def __init__(
        self,
        *,
        local_id: int | None,
        config: QuorumConfig,
        log: ReplicatedLog,
        store: QuorumStateStore,
        channel: NetworkChannel,
        queue: RaftMessageQueue,
        clock: Clock,
        rand: random.Random,
        serde: RecordSerde[T],
        local_directory_id: uuid.UUID | None = None,
        cluster_id: str | None = None,
        append_lock: AppendLock | None = None,
        metrics: MetricsRecorder = NO_METRICS,
        local_endpoints: Endpoints = (),
    ) -> None:
        self.local_id = local_id
        self._metrics = metrics
        #: When the election this replica is in started (``None``: none in progress).
        self._election_started_ms: int | None = None
        self.local_directory_id = local_directory_id
        self.config = config
        self.log = log
        self.channel = channel
        self.queue = queue
        self.clock = clock
        self.cluster_id = cluster_id
        self._rand = rand
        self._serde = serde
        self._append_lock = append_lock
        self.quorum: QuorumState[T] = QuorumState(
            local_id, local_directory_id, config, store, rand, local_endpoints
        )
        bootstrap = [bootstrap_server_id(i) for i in range(len(config.bootstrap_servers))]
        self._requests = RequestManager(
            bootstrap, config.retry_backoff_ms, config.request_timeout_ms, rand
        )
        self._repair: StorageRepair[T] = StorageRepair(
            self.quorum, log, self._requests, self._transition_to_resigned, self._prospective_lost
        )
        self._repair.metrics = metrics
        self._fetch_server: FetchServer[T] = FetchServer(
            self.quorum, log, config, channel, lambda: self._shutdown is not None, self._repair
        )
        self._fetcher: ReplicaFetcher[T] = ReplicaFetcher(
            local_id=local_id,
            local_directory_id=local_directory_id,
            quorum=self.quorum,
            log=log,
            config=config,
            serde=serde,
            requests=self._requests,
            channel=channel,
            clock=clock,
            metrics=metrics,
        )
        self._listeners: ListenerRegistry[T] = ListenerRegistry(
            log, serde, queue.wakeup, clock, metrics, self._repair
        )
        self._appender: LeaderAppender[T] = LeaderAppender(
            log,
            clock,
            self.quorum.history,
            self._listeners,
            self._fetch_server,
            metrics,
            self._follow_voter_changes,
        )
        self._epoch_rpcs = epoch_rpcs = QuorumEpochRpcs(self.quorum, config, self._maybe_transition)
        self._vote_rpcs: VoteRpcs[T] = VoteRpcs(
            self.quorum,
            log,
            rand,
            config.election_backoff_max_ms,
            to_unattached=self._transition_to_unattached,
            to_voted=self._transition_to_voted,
            to_candidate=self._transition_to_candidate,
            to_leader=self._become_leader,
            prospective_lost=self._prospective_lost,
        )
        self._shutdown: GracefulShutdown | None = None
        self._initialized = False
        self._next_clean_ms = 0
        self._duplicate_id_log = LogLimiter(DUPLICATE_NODE_ID_LOG_INTERVAL_MS)
        self._peer_check = PeerCheck(self.quorum, config.reject_unknown_replicas)
        self._reconfig: Reconfiguration[T] = Reconfiguration(
            self.quorum,
            config,
            self._requests,
            channel,
            clock,
            lambda: self._shutdown is not None,
            self._respond,
            cluster_id,
        )
        self._membership = Membership(self.quorum, config, self._requests, channel, self._reconfig)
        self._embedding: Embedding[T] = Embedding(
            quorum=self.quorum,
            log=log,
            config=config,
            channel=channel,
            requests=self._requests,
            serde=serde,
            listeners=self._listeners,
            build_begin_quorum_epoch=epoch_rpcs.build_begin_quorum_epoch,
            prepare_append=self.prepare_append,
            schedule_prepared_append=self.schedule_prepared_append,
            respond=self._respond,
            wakeup=queue.wakeup,
        )
        epoch_rpcs.on_acknowledged = self._embedding.reads.on_acknowledged
        # Dispatch tables, built once: per epoch state, per request and per response type.
        self._state_pollers: dict[type, Callable[[Any, int], int]] = {
            LeaderState: self._poll_leader,
            FollowerState: self._poll_follower,
            CandidateState: self._poll_candidate,
            ProspectiveState: self._poll_prospective,
            UnattachedState: self._poll_unattached,
            ResignedState: self._poll_resigned,
        }
        self._request_handlers: dict[type, Callable[[InboundRequest, Any, int], Response | None]]
        self._request_handlers = {
            FetchRequest: self._fetch_server.handle_fetch,
            VoteRequest: self._vote_rpcs.handle_vote_request,
            BeginQuorumEpochRequest: epoch_rpcs.handle_begin_quorum_epoch_request,
            EndQuorumEpochRequest: epoch_rpcs.handle_end_quorum_epoch_request,
            FetchSnapshotRequest: self._fetch_server.handle_fetch_snapshot,
            DescribeQuorumRequest: lambda request, body, now: describe_quorum(
                body, self.quorum, log, now, clock.wall_ms()
            ),
            ApiVersionsRequest: lambda request, body, now: api_versions_response(),
            AddRaftVoterRequest: self._reconfig.handle_add_voter,
            RemoveRaftVoterRequest: self._reconfig.handle_remove_voter,
            UpdateRaftVoterRequest: self._reconfig.handle_update_voter,
            UpdateFeaturesRequest: self._reconfig.handle_update_features,
            ForwardAppendRequest: self._embedding.handle_forward_append,
            ReadIndexRequest: self._embedding.handle_read_index,
        }
        self._prologue = ResponsePrologue(
            self.quorum, self._maybe_transition, self._transition_to_follower
        )
        self._response_kinds = response_kinds(self._fetcher, self._vote_rpcs, epoch_rpcs)

    # -- Lifecycle --------------------------------------------------------------------------------
    def initialize(self) -> None:
        """Restore the state from the quorum-state store and the log (Kafka's startup rules,
        listed in docs/protocol.md)."""
        if self._initialized:
            raise IllegalStateError("the client is initialized already")
        now = self.clock.now_ms()
        self.quorum.history.sync(self.log)
        self._follow_voter_changes(now)
        self.quorum.initialize(self.log.last_fetched_epoch, now)
        self._initialized = True
        state = self.quorum.state
        standing = not self._repair.poll(now)  # under repair: no election (kraft/raft/repair.py)
        if standing and self.quorum.is_only_voter and not isinstance(state, CandidateState):
            # A single voter elects itself at once: Prospective, Candidate, Leader.
            self._transition_to_prospective(now)
        elif standing and isinstance(state, CandidateState):
            self._on_become_candidate(now)
        self._fire_leader_change()

    @property
    def is_initialized(self) -> bool:
        return self._initialized

    @property
    def metrics(self) -> MetricsRecorder:
        """Where the client reports what it measures; may be replaced after construction."""
        return self._metrics

    @metrics.setter
    def metrics(self, recorder: MetricsRecorder) -> None:
        self._metrics = self._fetcher.metrics = self._listeners.metrics = recorder
        self._appender.metrics = recorder
        self._repair.metrics = recorder

    def close(self) -> None:
        """Flush the log and drop the leader's unwritten appends. The log itself belongs to
        the caller, who closes it after this (the runtime does, in Kafka's order)."""
        self.quorum.close()
        self._embedding.close()
        self._fetcher.abandon_download("the client closes")
        if self._initialized:
            self.log.flush(force=True)

    # -- What tests, tools and the runtime read (and kraft.raft.client_view) ---------------------
    @property
    def downloading_snapshot(self) -> OffsetAndEpoch | None:
        """The id of the snapshot this follower is downloading, if any."""
        return self._fetcher.downloading_snapshot

    def create_snapshot(
        self, snapshot_id: OffsetAndEpoch, last_contained_log_time_ms: int
    ) -> SnapshotWriter[T] | None:
        """A writer for a snapshot of the state up to ``snapshot_id.offset`` (exclusive), whose
        last record has epoch ``snapshot_id.epoch``; None if the log already starts past it
        or the snapshot exists. Write the state machine's records, then ``freeze()``.

        ``ValueError`` if the snapshot is above the high watermark or does not end on a batch
        boundary of the log. Call it on the polling thread (in a listener callback, say).
        """
        self._require_initialized()
        raw = self.log.create_new_snapshot(snapshot_id)
        if raw is None:
            return None
        return SnapshotWriter(
            raw,
            self._serde,
            last_contained_log_timestamp_ms=last_contained_log_time_ms,
            timestamp_ms=self.clock.wall_ms(),
            max_batch_size_bytes=self.config.max_batch_size_bytes,
            control_messages=self.quorum.history.snapshot_control_messages(snapshot_id),
        )

    def listeners(self) -> list[Listener[T]]:
        """The registered listeners (registrations take effect on the next poll)."""
        return self._listeners.listeners()

    def listener_next_offset(self, listener: Listener[T]) -> int | None:
        """The offset ``listener`` expects next (-1: nothing delivered yet; ``None``: a reader
        it was given is still open and its end unknown). ``KeyError`` if not registered."""
        return self._listeners.next_offset(listener)

    # -- The public API (RaftClient) --------------------------------------------------------------
    def register(self, listener: Listener[T]) -> None:
        """Register ``listener``; it takes effect on the next poll, which this wakes."""
        self._listeners.register(listener)
        self.queue.wakeup()

    def unregister(self, listener: Listener[T]) -> None:
        """Unregister ``listener`` on the next poll (Kafka does not wake the client for it)."""
        self._listeners.unregister(listener)

    def prepare_append(self, epoch: int, records: Sequence[T]) -> int:
        """Buffer ``records`` for ``epoch``, all in one batch; return the last one's offset.

        Nothing from these records on is written until :meth:`schedule_prepared_append`.
        Raises :class:`~kraft.errors.NotLeaderError` when this replica does not lead ``epoch``
        (or is not initialized), ``ValueError`` for an epoch above the current one,
        :class:`~kraft.errors.RecordBatchTooLargeError` and
        :class:`~kraft.errors.BufferAllocationError` as the accumulator does (nothing appended).
        """
        state = self.quorum.state if self._initialized else None
        if not isinstance(state, LeaderState):
            raise NotLeaderError("append failed: this replica is not the current leader")
        accumulator = state.accumulator
        first_append = accumulator.is_empty
        offset = accumulator.append(epoch, records, self.clock.wall_ms(), delay_drain=True)
        # Wake the poller on the first append (so it sees the linger timer) or when a batch
        # is ready to drain now.
        if first_append or accumulator.needs_drain(self.clock.wall_ms()):
            self.queue.wakeup()
        return offset

    def schedule_prepared_append(self) -> None:
        """Let the prepared records drain to the log. NotLeaderError when not the leader."""
        state = self.quorum.state if self._initialized else None
        if not isinstance(state, LeaderState):
            raise NotLeaderError("this replica is not the current leader")
        state.accumulator.allow_drain()
        self.queue.wakeup()

    def append(self, records: Sequence[T], *, timeout_ms: int | None = None) -> RaftFuture[int]:
        """Append ``records`` as one batch from any replica: the future of its last offset,
        once committed and delivered here (kraft/raft/embedding.py, docs/embedding.md)."""
        self._require_initialized()
        return self._embedding.append(records, self.clock.now_ms(), timeout_ms)

    def read_barrier(self, *, timeout_ms: int | None = None) -> RaftFuture[int]:
        """The future of an offset at or above every write acknowledged before the call,
        once this node's listeners were handed everything up to it."""
        self._require_initialized()
        return self._embedding.read_barrier(self.clock.now_ms(), timeout_ms)

    def transfer_leadership(
        self, node_id: int | None = None, *, timeout_ms: int | None = None
    ) -> RaftFuture[int]:
        """Resign in favour of voter ``node_id`` (the most caught-up one if None); the future
        completes with the next leader's id (``LeaderTransferError`` if refused)."""
        self._require_initialized()
        return self._embedding.transfer_leadership(node_id, self.clock.now_ms(), timeout_ms)

    def _require_initialized(self) -> None:
        if not self._initialized:
            raise IllegalStateError("the client must be initialized first")

    def resign(self, epoch: int) -> None:
        """Give up leadership of ``epoch`` on the next poll (Kafka's ``RaftClient.resign``)."""
        if epoch < 0:
            raise ValueError(f"attempt to resign from an invalid negative epoch {epoch}")
        self._require_initialized()
        if self.local_id is None:
            raise IllegalStateError("an observer without an id cannot resign")
        current = self.leader_and_epoch()
        if epoch > current.epoch:
            raise ValueError(
                f"attempt to resign from epoch {epoch}, above the current epoch {current.epoch}"
            )
        if epoch < current.epoch:
            logger.debug("ignoring resign(%d): the current epoch is %d", epoch, current.epoch)
            return
        if not current.is_leader(self.local_id):
            raise ValueError(f"cannot resign from epoch {epoch}: this replica is not the leader")
        state = self.quorum.state
        if not isinstance(state, LeaderState) or state.epoch != epoch:
            logger.debug("ignoring resign(%d): no longer the leader of that epoch", epoch)
            return
        logger.info("resigning from epoch %d on request", epoch)
        state.resign_requested = True
        self.queue.wakeup()

    def shutdown(self, timeout_ms: int) -> Future[None]:
        """Begin a graceful shutdown; the future completes when it is done.

        A leader resigns and tells the voters; the shutdown completes once this replica is an
        observer, the only voter, or knows of another leader, and fails with ``TimeoutError``
        at the deadline otherwise. Listeners get ``begin_shutdown`` on the next poll.
        """
        if timeout_ms < 0:
            raise ValueError(f"negative shutdown timeout {timeout_ms}")
        if self._shutdown is not None:
            return self._shutdown.future
        logger.info("beginning graceful shutdown (timeout %d ms)", timeout_ms)
        self._shutdown = GracefulShutdown(self.clock.now_ms() + timeout_ms)
        self.queue.wakeup()
        return self._shutdown.future

    # -- poll -------------------------------------------------------------------------------------
    def poll(self) -> int:
        """Do what is due, in order: a requested shutdown; the current state's timers; expired
        long polls; at most one inbound message (then the parked fetches it gave news to, or a
        follower's next Fetch); the listeners. Return the milliseconds until more will be."""
        self._require_initialized()
        now = self.clock.now_ms()
        if self._maybe_complete_shutdown(now):
            return NO_DEADLINE
        self._repair.poll(now)
        self._follow_voter_changes(now)
        state = self.quorum.state
        timeout = self._state_pollers[type(state)](state, now)
        timeout = min(timeout, self._fetch_server.expire_parked(now))
        timeout = min(timeout, self._maybe_clean_log(now), self._embedding.poll(now))
        message = self.queue.poll(max(0, timeout))
        if message is not None:
            now_after = self.clock.now_ms()
            high_watermark = self.quorum.high_watermark
            if isinstance(message, InboundRequest):
                self._handle_request(message, now_after)
            else:
                self._handle_response(message, now_after)
            self._follow_voter_changes(now_after)
            state = self.quorum.state
            if isinstance(state, LeaderState):
                if state.high_watermark != high_watermark:
                    # The parked fetches the new high watermark gives news to are answered
                    # now, before the listeners hear of the commit.
                    self._fetch_server.complete_parked(self.clock.now_ms())
            elif isinstance(message, InboundResponse) and isinstance(state, FollowerState):
                # A follower sends its next Fetch (made due by the response just handled)
                # before the listeners run: their work would delay the replication round
                # trip, and with it every commit.
                self._send_next_fetch(state, self.clock.now_ms())
        self._poll_listeners()
        timeout = min(timeout, self._embedding.poll(self.clock.now_ms()))
        if message is not None or not self.queue.is_empty():
            return 0
        state = self.quorum.state
        if isinstance(state, LeaderState):
            # A listener may have appended during delivery: honour its linger.
            until = state.accumulator.time_until_drain(self.clock.wall_ms())
            timeout = min(timeout, until)
        elapsed = self.clock.now_ms() - now
        return max(0, timeout - elapsed)

    def _maybe_clean_log(self, now: int) -> int:
        """Kafka's periodic ``maybeClean``: the log's snapshot retention, every interval."""
        if now >= self._next_clean_ms:
            self._next_clean_ms = now + self.config.log_clean_interval_ms
            try:
                self.log.maybe_clean(self.clock.wall_ms())
            except (KraftError, ValueError) as exc:
                logger.error("cleaning the log failed: %s", exc)
        return max(0, self._next_clean_ms - now)

    # -- per state --------------------------------------------------------------------------------
    def _poll_leader(self, state: LeaderState[T], now: int) -> int:
        self._fire_leader_change()
        expired = state.check_quorum_expired(now)
        until_change = self._reconfig.poll(state, now)  # answers a committed change first
        if self._reconfig.removed_self_committed(state):
            logger.info("epoch %d: this leader's removal committed; resigning", state.epoch)
            state.resign_requested = True
        if self._shutdown is not None or state.resign_requested or expired:
            if expired:
                logger.info(
                    "epoch %d: check-quorum expired, no majority fetched in %d ms",
                    state.epoch,
                    state.check_quorum_timeout_ms,
                )
            self._transition_to_resigned(state.preferred_successors(), now)
            return 0
        until_drain = self._appender.maybe_append(state, now)
        # A change its own append committed (a voter set whose majority is the leader alone).
        until_change = min(until_change, self._reconfig.poll(state, now))
        if state.begin_quorum_epoch_due(now):
            self._maybe_send_requests(
                now, state.other_voters(), self._embedding.reads.build_heartbeat
            )
            state.reset_begin_quorum_epoch_timer(now)
        until_heartbeat = state.begin_quorum_epoch_deadline_ms - now
        until_check_quorum = state.check_quorum_deadline_ms - now
        return max(0, min(until_drain, until_heartbeat, until_check_quorum, until_change))

    def _poll_follower(self, state: FollowerState, now: int) -> int:
        fetcher = self._fetcher
        if self.quorum.is_voter:
            if self._shutdown is not None:
                # A follower may stop at once: it knows a remote leader.
                return 0
            if now >= state.fetch_deadline_ms:
                logger.info(
                    "epoch %d: no successful fetch from leader %d within the fetch timeout",
                    state.epoch,
                    state.leader_id,
                )
                self._transition_to_prospective(now)
                return 0
        elif now >= state.fetch_deadline_ms:
            # An observer whose leader went silent grants pre-votes again (KIP-996 protects a
            # live leader; candidates may count this replica as a voter their log adds).
            state.has_fetched = False
            return fetcher.maybe_send_fetch_to_any_bootstrap(now)
        backoff = self._membership.maybe_send_to_leader(state, now)
        if backoff is None:
            backoff = fetcher.maybe_send_fetch_to_best_node(state, now)
        return max(0, min(backoff, state.fetch_deadline_ms - now))

    def _send_next_fetch(self, state: FollowerState, now: int) -> None:
        """What ``_poll_follower`` does next if no timer has expired: send the next Fetch."""
        if (
            self._shutdown is None
            and now < state.fetch_deadline_ms
            and self._membership.maybe_send_to_leader(state, now) is None
        ):
            self._fetcher.maybe_send_fetch_to_best_node(state, now)

    def _poll_candidate(self, state: CandidateState, now: int) -> int:
        if self._shutdown is not None:
            return min(self._shutdown.remaining_ms(now), self._maybe_send_vote_requests(state, now))
        if state.backoff_deadline_ms is not None:
            if now >= state.backoff_deadline_ms:
                self._transition_to_prospective(now)
                return 0
            return state.backoff_deadline_ms - now
        if now >= state.election_deadline_ms:
            logger.info("epoch %d: election timed out", state.epoch)
            self._transition_to_prospective(now)
            return 0
        return max(
            0, min(self._maybe_send_vote_requests(state, now), state.election_deadline_ms - now)
        )

    def _poll_prospective(self, state: ProspectiveState, now: int) -> int:
        if self._shutdown is not None:
            return min(self._shutdown.remaining_ms(now), self._maybe_send_vote_requests(state, now))
        if now >= state.election_deadline_ms:
            logger.info("epoch %d: pre-vote timed out", state.epoch)
            self._prospective_lost(state, now)
            return 0
        return max(
            0, min(self._maybe_send_vote_requests(state, now), state.election_deadline_ms - now)
        )

    def _poll_unattached(self, state: UnattachedState, now: int) -> int:
        if self.quorum.is_voter:
            if state.election_deadline_ms == NO_DEADLINE:  # an observer that became a voter
                state.election_deadline_ms = now + self.quorum.random_election_timeout_ms()
            if self._shutdown is not None:
                return self._shutdown.remaining_ms(now)
            if now >= state.election_deadline_ms:
                self._transition_to_prospective(now)
                return 0
            return state.election_deadline_ms - now
        # An observer has no election timer (a voter removed meanwhile drops its own).
        state.election_deadline_ms = NO_DEADLINE
        return max(0, self._fetcher.maybe_send_fetch_to_any_bootstrap(now))

    def _poll_resigned(self, state: ResignedState, now: int) -> int:
        build = self._epoch_rpcs.build_end_quorum_epoch
        until_end = self._maybe_send_requests(
            now, sorted(state.unacknowledged), lambda dest: build(state)
        )
        if self._shutdown is not None:
            until_state = self._shutdown.remaining_ms(now)
        elif state.epoch >= INT32_MAX:
            until_state = NO_DEADLINE  # the last epoch: there is no next one to move to
        elif now >= state.election_deadline_ms:
            self._transition_to_unattached(state.epoch + 1, None, now)
            until_state = 0
        else:
            until_state = state.election_deadline_ms - now
        return max(0, min(until_state, until_end))

    # -- shutdown ---------------------------------------------------------------------------------
    def _maybe_complete_shutdown(self, now: int) -> bool:
        shutdown = self._shutdown
        if shutdown is None:
            return False
        if not shutdown.listeners_told:
            shutdown.listeners_told = True
            self._listeners.begin_shutdown()
        leader = self.quorum.leader_id
        return shutdown.maybe_complete(
            now,
            (
                self.quorum.is_observer
                or self.quorum.is_only_voter
                or (leader is not None and leader != self.local_id)
            ),
        )

    # -- Transitions (with their side effects on connections, purgatories and listeners) ----------
    def _after_transition(self, previous: EpochState | LeaderState[T]) -> None:
        """Every transition drops requests in flight; leaving Leader fails parked fetches."""
        self._requests.reset_all()
        if isinstance(previous, LeaderState) and not isinstance(self.quorum.state, LeaderState):
            self._listeners.drop_uncommitted()
            self._fetch_server.fail_parked()
            self._reconfig.leadership_lost()
            self._embedding.leadership_lost(previous.epoch, self.log.log_end_offset)
        self._fire_leader_change()

    def _transition_to_unattached(self, epoch: int, leader_id: int | None, now: int) -> None:
        previous = self.quorum.state
        self.quorum.transition_to_unattached(epoch, now, leader_id)
        self._after_transition(previous)

    def _transition_to_voted(self, candidate: ReplicaKey, now: int) -> None:
        previous = self.quorum.state
        self.quorum.transition_to_voted(candidate, now)
        self._after_transition(previous)

    def _transition_to_follower(
        self, epoch: int, leader_id: int, endpoints: Endpoints, now: int
    ) -> None:
        previous = self.quorum.state
        self.quorum.transition_to_follower(epoch, leader_id, endpoints, now)
        self._after_transition(previous)
        self._end_election(now)

    def _transition_to_prospective(self, now: int) -> None:
        if self._election_started_ms is None:
            self._election_started_ms = now
        previous = self.quorum.state
        self.quorum.transition_to_prospective(now)
        self._after_transition(previous)
        state = self.quorum.state
        assert isinstance(state, ProspectiveState)
        if state.is_vote_granted():  # the only voter
            self._transition_to_candidate(now)

    def _transition_to_candidate(self, now: int) -> None:
        if self.quorum.epoch >= INT32_MAX:
            logger.error("epoch %d is the last one: no election is possible", self.quorum.epoch)
            return
        if self._election_started_ms is None:
            self._election_started_ms = now
        previous = self.quorum.state
        self.quorum.transition_to_candidate(now)
        self._after_transition(previous)
        self._on_become_candidate(now)

    def _on_become_candidate(self, now: int) -> None:
        state = self.quorum.state
        assert isinstance(state, CandidateState)
        if state.is_vote_granted():
            self._become_leader(now)

    def _become_leader(self, now: int) -> None:
        state = self.quorum.state
        assert isinstance(state, CandidateState) and self.local_id is not None
        self._fetcher.abandon_download("this replica leads now")
        granting = sorted(state.granting & state.voters)
        end_offset = self.log.log_end_offset
        # Handed to the quorum state, which owns it from now on (and closes it).
        accumulator: BatchAccumulator[T] = BatchAccumulator(
            state.epoch,
            end_offset,
            self.config.append_linger_ms,
            self.config.max_batch_size_bytes,
            self._serde,
            lock=self._append_lock,
        )
        leader = self.quorum.transition_to_leader(end_offset, accumulator, now)
        self.log.initialize_leader_epoch(leader.epoch)
        self._listeners.drop_uncommitted()
        # The HW can only move once a record of this epoch is replicated: write one now.
        message = leader.voter_set.leader_change(self.local_id, granting, self.kraft_version)
        voters = self._reconfig.start_of_epoch_messages()
        accumulator.append_control_messages([message, *voters], self.clock.wall_ms())
        self._after_transition(state)
        self._end_election(now)
        logger.info("epoch %d: elected leader (votes from %s)", leader.epoch, granting)

    def _end_election(self, now: int) -> None:
        started = self._election_started_ms
        if started is not None:
            self._election_started_ms = None
            self._metrics.record_election_latency(now - started, now)

    def _transition_to_resigned(self, successors: list[int], now: int) -> None:
        previous = self.quorum.state
        self.quorum.transition_to_resigned(successors, now)
        self._after_transition(previous)

    def _prospective_lost(self, state: ProspectiveState, now: int) -> None:
        """Pre-vote lost or timed out: follow a known leader, else Unattached, same epoch."""
        leader = state.leader_id
        endpoints = self.quorum.current_leader_endpoints() if leader is not None else ()
        if leader is not None and endpoints:
            self._transition_to_follower(state.epoch, leader, endpoints, now)
        else:
            self._transition_to_unattached(state.epoch, leader, now)

    def _maybe_transition(
        self, leader_id: int | None, epoch: int, endpoints: Endpoints, now: int
    ) -> bool:
        """React to a leader and epoch named by a peer; False if they contradict ours.

        Kafka raises ``IllegalStateException`` (fatal) on a contradiction; kraft refuses the
        message and logs it, so one confused peer cannot stop a replica.
        """
        quorum = self.quorum
        if not quorum.has_consistent_leader(epoch, leader_id):
            logger.error(
                "a peer names leader %s for epoch %d, but this replica knows leader %s",
                leader_id,
                epoch,
                quorum.leader_id,
            )
            return False
        if (
            leader_id is not None
            and leader_id == self.local_id
            and not (
                epoch == quorum.epoch and isinstance(quorum.state, LeaderState | ResignedState)
            )
        ):
            if self._duplicate_id_log.allow(now):  # every peer's every answer repeats it
                logger.error(
                    "another replica uses node id %s: a peer names it leader of epoch "
                    "%d, which this process never led. Is a second process running with "
                    "node id %s (or was its data directory replaced)? Its messages are "
                    "refused (logged at most once a minute)",
                    self.local_id,
                    epoch,
                    self.local_id,
                )
            return False
        if epoch > quorum.epoch:
            if leader_id is not None and endpoints:
                self._transition_to_follower(epoch, leader_id, endpoints, now)
            else:
                self._transition_to_unattached(epoch, leader_id, now)
        elif quorum.learns_leader(leader_id, endpoints):
            assert leader_id is not None
            self._transition_to_follower(epoch, leader_id, endpoints, now)
        return True

    # -- The leader's append path -----------------------------------------------------------------
    def _follow_voter_changes(self, now: int) -> None:
        """A new voter set (KIP-853) makes the leader re-count its voters."""
        state = self.quorum.state
        if (
            self._membership.follow_changes(self.log)
            and isinstance(state, LeaderState)
            and state.update_voter_set(self.quorum.voter_set, now)
        ):
            self._fetch_server.on_update_leader_high_watermark(state)

    # -- Sending ----------------------------------------------------------------------------------
    def _maybe_send_requests(
        self, now: int, destinations: Iterable[int], build: Callable[[int], Request]
    ) -> int:
        requests, channel = self._requests, self.channel
        timeout = NO_DEADLINE
        for destination in destinations:
            timeout = min(timeout, requests.maybe_send(channel, destination, build, now))
        return timeout

    def _maybe_send_vote_requests(self, state: ProspectiveState | CandidateState, now: int) -> int:
        if state.is_vote_rejected():
            return NO_DEADLINE
        pre_vote = isinstance(state, ProspectiveState)
        return self._maybe_send_requests(
            now,
            sorted(state.unrecorded_voters()),
            lambda dest: self._vote_rpcs.build_vote_request(dest, pre_vote),
        )

    # -- Requests ---------------------------------------------------------------------------------
    def _respond(self, request: InboundRequest, body: Response) -> None:
        self.channel.respond(OutboundResponse(request.correlation_id, request.source, body))

    def _handle_request(self, request: InboundRequest, now: int) -> None:
        body = request.body
        response = refusal(request, self.cluster_id) or self._peer_check.refusal(request, now)
        if response is None:
            # A Fetch is answered (or parked) by the fetch server: its handler returns None.
            response = self._request_handlers[type(body)](request, body, now)
        if response is not None:
            self._respond(request, response)

    # -- Responses --------------------------------------------------------------------------------
    def _handle_response(self, response: InboundResponse, now: int) -> None:
        body = response.body
        requests = self._requests
        if self._embedding.handle_response(response, now):
            return
        if not requests.is_response_expected(
            response.source, response.correlation_id, body.API_KEY.value
        ):
            logger.debug(
                "dropping a stale or unexpected %s from %d", type(body).__name__, response.source
            )
            return
        kind = self._response_kinds.get(type(body))
        if isinstance(body, ApiVersionsResponse):
            ok = self._reconfig.handle_api_versions_response(response, body, now)
        elif isinstance(
            body, UpdateRaftVoterResponse | AddRaftVoterResponse | RemoveRaftVoterResponse
        ):
            ok = self._membership.handle_response(body)
        elif kind is None:
            ok = False  # kraft sends no DescribeQuorum
        elif not int32_fields_in_range(body):
            logger.error(
                "dropping %s from %d: an epoch or id outside int32",
                type(body).__name__,
                response.source,
            )
            ok = False
        else:
            ok = self._prologue.step(kind, response, body, now)
        requests.on_response_result(response.source, response.correlation_id, ok, now)

    # -- Listeners --------------------------------------------------------------------------------
    def _poll_listeners(self) -> None:
        self._listeners.deliver(
            self.quorum.high_watermark, isinstance(self.quorum.state, LeaderState)
        )
        self._fire_leader_change()

    def _fire_leader_change(self) -> None:
        state = self.quorum.state
        if state is self._listeners.told_of or isinstance(state, ResignedState):
            return  # not fired in Resigned (Kafka's ResignedState)
        if self._initialized:
            start = state.epoch_start_offset if isinstance(state, LeaderState) else None
            self._listeners.fire_leader_change(state, self.leader_and_epoch(), start)

    def __repr__(self) -> str:
        return (
            f"KafkaRaftClient(id={self.local_id}, {self.role}, epoch={self.epoch}, "
            f"leader={self.leader_id}, leo={self.log.log_end_offset}, "
            f"hw={self.high_watermark})"
        )
