"""``KafkaRaftClient``: KRaft's replica state machine, sans-IO, driven by :meth:`poll`.

Theory of operation
-------------------
The client owns one replica of the metadata log. Everything from outside is injected
(DESIGN §2): a :class:`~kraft.raft.channel.Clock`, a ``random.Random``, a
:class:`~kraft.raft.channel.NetworkChannel` for what it sends, a
:class:`~kraft.raft.channel.RaftMessageQueue` for what it receives, a
:class:`~kraft.log.api.ReplicatedLog`, a :class:`~kraft.log.quorum_state.QuorumStateStore`
and the user's :class:`~kraft.record.serde.RecordSerde`. Nothing here reads a clock, opens a
socket, sleeps or starts a thread; the caller of :meth:`poll` decides when time passes.

One :meth:`poll`:

1. completes a requested shutdown when it may (telling every listener ``begin_shutdown`` the
   first time);
2. runs the current state's timers and sends what they call for (``_poll_leader``,
   ``_poll_follower``, ...: election timeout, fetch timeout, check-quorum, linger, heartbeats,
   EndQuorumEpoch retries, one request in flight per destination);
3. expires parked Fetch requests whose long-poll wait is over;
4. takes at most one inbound message from the queue (waiting at most until the next deadline)
   and handles it: a request is validated and answered (a Fetch may be parked), a response is
   dropped unless it answers the request in flight to its source;
5. delivers newly committed batches and leader changes to the listeners.

It returns the milliseconds until it next needs to run: 0 after it handled a message (state
may have changed), otherwise the time to the nearest deadline.

Every rule here is Kafka's ``KafkaRaftClient`` as KRAFT-BEHAVIOUR §1-2 describes it; the
places where kraft deliberately differs are listed in docs/protocol.md, and marked "kraft:"
in comments below.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

import msgspec

from kraft.common.clock import Clock
from kraft.common.uuids import ZERO_UUID as _ZERO_UUID
from kraft.config import QuorumConfig
from kraft.errors import (
    CorruptRecordError,
    IllegalStateError,
    InvalidAppendError,
    KraftError,
    NotLeaderError,
)
from kraft.log.api import (
    DEFAULT_MAX_READ_BYTES,
    Isolation,
    OffsetAndEpoch,
    ReplicatedLog,
    ValidationKind,
)
from kraft.log.quorum_state import QuorumStateStore
from kraft.protocol.api import METADATA_PARTITION_INDEX, METADATA_TOPIC_ID, METADATA_TOPIC_NAME
from kraft.protocol.envelope import (
    InboundRequest,
    InboundResponse,
    OutboundRequest,
    OutboundResponse,
)
from kraft.protocol.errors import Errors, error_name
from kraft.protocol.messages import (
    RESPONSE_TYPE_FOR,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumNode,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    Endpoint,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PreferredCandidate,
    Request,
    Response,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from kraft.protocol.messages import ReplicaState as WireReplicaState
from kraft.raft.accumulator import NOTHING_TO_DRAIN_MS, AppendLock, BatchAccumulator, CompletedBatch
from kraft.raft.channel import (
    NO_METRICS,
    InboundMessage,
    MetricsRecorder,
    NetworkChannel,
    RaftMessageQueue,
)
from kraft.raft.leader import LeaderState, ReplicaState
from kraft.raft.listeners import (
    Batch,
    BatchReader,
    LeaderAndEpoch,
    Listener,
    ListenerContext,
    LogBatchReader,
    MemoryBatchReader,
)
from kraft.raft.purgatory import FetchPurgatory, ParkedFetch
from kraft.raft.quorum import QuorumState
from kraft.raft.requests import RequestManager
from kraft.raft.states import (
    NO_DEADLINE,
    CandidateState,
    EpochState,
    FollowerState,
    ProspectiveState,
    ReplicaKey,
    ResignedState,
    UnattachedState,
)
from kraft.record.control import LeaderChangeMessage, LeaderChangeVoter
from kraft.record.serde import RecordSerde
from kraft.snapshot.raw import RawSnapshotWriter
from kraft.snapshot.reader import SnapshotReader
from kraft.snapshot.writer import SnapshotWriter

__all__ = ["KafkaRaftClient", "bootstrap_server_id"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Kafka's ``RETRY_BACKOFF_BASE_MS``: the unit of a lost candidate's randomized backoff.
RETRY_BACKOFF_BASE_MS = 100
#: How often a replica says at most that another one uses its node id.
DUPLICATE_NODE_ID_LOG_INTERVAL_MS = 60_000

_NONE = Errors.NONE.value
_LISTENER_NAME = "CONTROLLER"

Endpoints = tuple[tuple[str, str, int], ...]
_EpochResponseT = TypeVar(
    "_EpochResponseT", VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse
)


def bootstrap_server_id(index: int) -> int:
    """The destination id of ``QuorumConfig.bootstrap_servers[index]``: -2, -3, ...

    Requests to a bootstrap server go to these negative ids; -1 stays "no id".
    """
    return -2 - index


def _directory(value: uuid.UUID) -> uuid.UUID | None:
    return None if value == _ZERO_UUID else value


def _leader_or_none(leader_id: int) -> int | None:
    return None if leader_id < 0 else leader_id


@dataclass(slots=True)
class _Shutdown:
    """A graceful shutdown in progress (Kafka's ``GracefulShutdown``)."""

    deadline_ms: int
    future: Future[None]
    listeners_told: bool = False


class KafkaRaftClient(Generic[T]):
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
    ) -> None:
        self.local_id = local_id
        self.metrics = metrics
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
        self.quorum: QuorumState[T] = QuorumState(local_id, local_directory_id, config, store, rand)
        if config.bootstrap_servers:
            bootstrap = [bootstrap_server_id(i) for i in range(len(config.bootstrap_servers))]
        else:
            bootstrap = sorted(v for v in config.voter_ids if v != local_id)
        self._requests = RequestManager(
            bootstrap, config.retry_backoff_ms, config.request_timeout_ms, rand
        )
        self._fetch_purgatory = FetchPurgatory()
        #: Drained data batches of the current leader epoch waiting for the HW (Kafka's append
        #: purgatory): they go to listeners from memory when they commit.
        self._uncommitted: deque[CompletedBatch[T]] = deque()
        self._listeners: dict[int, ListenerContext[T]] = {}
        self._pending_registrations: deque[tuple[bool, Listener[T]]] = deque()
        self._shutdown: _Shutdown | None = None
        self._initialized = False
        #: The snapshot this follower is downloading (KIP-630), from ``_download_leader``:
        #: a FetchSnapshot that failed or timed out resumes where it stopped.
        self._download: RawSnapshotWriter | None = None
        self._download_leader = -1
        self._next_clean_ms = 0
        #: When the "another replica uses this node id" error was last logged (rate limit).
        self._duplicate_id_logged_ms: int | None = None

    # =============================================================================================
    # Lifecycle
    # =============================================================================================
    def initialize(self) -> None:
        """Restore the state from the quorum-state store and the log (§1.1 startup rules)."""
        if self._initialized:
            raise IllegalStateError("the client is initialized already")
        now = self.clock.now_ms()
        self.quorum.initialize(self.log.last_fetched_epoch, now)
        self._initialized = True
        state = self.quorum.state
        if self._is_only_voter() and not isinstance(state, CandidateState):
            # A single voter elects itself at once: Prospective, Candidate, Leader.
            self._transition_to_prospective(now)
        elif isinstance(state, CandidateState):
            self._on_become_candidate(now)
        self._fire_leader_change()

    @property
    def is_initialized(self) -> bool:
        return self._initialized

    def close(self) -> None:
        """Flush the log and drop the leader's unwritten appends. The log itself belongs to
        the caller, who closes it after this (the runtime does, in Kafka's order)."""
        state = self.quorum.state
        if isinstance(state, LeaderState):
            state.accumulator.close()
        self._abandon_download("the client closes")
        if self._initialized:
            self.log.flush(force=True)

    # =============================================================================================
    # What tests, tools and the runtime read
    # =============================================================================================
    @property
    def state(self) -> EpochState | LeaderState[T]:
        """The current epoch state object (``UnattachedState``, ``LeaderState``, ...)."""
        return self.quorum.state

    @property
    def role(self) -> str:
        """"Unattached", "Voted", "Prospective", "Candidate", "Leader", "Follower", "Resigned"."""
        return self.quorum.state.name

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def leader_id(self) -> int | None:
        return self.quorum.leader_id

    @property
    def voted_key(self) -> ReplicaKey | None:
        return self.quorum.voted_key

    @property
    def voted_id(self) -> int | None:
        key = self.quorum.voted_key
        return None if key is None else key.id

    @property
    def high_watermark(self) -> int | None:
        """The high watermark this replica knows in its state (``None``: unknown yet)."""
        return self.quorum.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        """The id of the newest snapshot in the log (made here or downloaded)."""
        return self.log.latest_snapshot_id

    @property
    def downloading_snapshot(self) -> OffsetAndEpoch | None:
        """The id of the snapshot this follower is downloading, if any."""
        return None if self._download is None else self._download.snapshot_id

    def create_snapshot(
        self, snapshot_id: OffsetAndEpoch, last_contained_log_time_ms: int
    ) -> SnapshotWriter[T] | None:
        """A writer for a snapshot of the state up to ``snapshot_id.offset`` (exclusive), whose
        last record has epoch ``snapshot_id.epoch``; None if the log already starts past it
        or the snapshot exists. Write the state machine's records, then ``freeze()``.

        ``ValueError`` if the snapshot is above the high watermark or does not end on a batch
        boundary of the log. Call it on the polling thread (in a listener callback, say).
        """
        if not self._initialized:
            raise IllegalStateError("the client must be initialized before a snapshot")
        raw = self.log.create_new_snapshot(snapshot_id)
        if raw is None:
            return None
        return SnapshotWriter(
            raw, self._serde,
            last_contained_log_timestamp_ms=last_contained_log_time_ms,
            timestamp_ms=self.clock.wall_ms(),
            max_batch_size_bytes=self.config.max_batch_size_bytes,
        )

    @property
    def is_leader(self) -> bool:
        return isinstance(self.quorum.state, LeaderState)

    @property
    def is_voter(self) -> bool:
        return self.quorum.is_voter

    @property
    def is_shutdown(self) -> bool:
        """True once a requested shutdown completed (or timed out): stop polling."""
        return self._shutdown is not None and self._shutdown.future.done()

    def _wire_leader_id(self) -> int:
        """The current leader's id as the wire says it: -1 when unknown."""
        leader = self.quorum.leader_id
        return -1 if leader is None else leader

    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.quorum.leader_id, self.quorum.epoch)

    def listeners(self) -> list[Listener[T]]:
        """The registered listeners (registrations take effect on the next poll)."""
        return [context.listener for context in self._listeners.values()]

    def listener_next_offset(self, listener: Listener[T]) -> int | None:
        """The offset ``listener`` expects next (-1: nothing delivered yet; ``None``: a reader
        it was given is still open and its end unknown). ``KeyError`` if not registered."""
        return self._listeners[id(listener)].next_expected_offset()

    # =============================================================================================
    # The public API (RaftClient)
    # =============================================================================================
    def register(self, listener: Listener[T]) -> None:
        """Register ``listener``; it takes effect on the next poll, which this wakes."""
        self._pending_registrations.append((True, listener))
        self.queue.wakeup()

    def unregister(self, listener: Listener[T]) -> None:
        """Unregister ``listener`` on the next poll (Kafka does not wake the client for it)."""
        self._pending_registrations.append((False, listener))

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

    def resign(self, epoch: int) -> None:
        """Give up leadership of ``epoch`` on the next poll (§2 ``resign``)."""
        if epoch < 0:
            raise ValueError(f"attempt to resign from an invalid negative epoch {epoch}")
        if not self._initialized:
            raise IllegalStateError("the replica must be initialized before resigning")
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
        future: Future[None] = Future()
        self._shutdown = _Shutdown(self.clock.now_ms() + timeout_ms, future)
        self.queue.wakeup()
        return future

    # =============================================================================================
    # poll
    # =============================================================================================
    def poll(self) -> int:
        """Do the work that is due; return the milliseconds until more will be (see above)."""
        if not self._initialized:
            raise IllegalStateError("the client must be initialized before it is polled")
        now = self.clock.now_ms()
        if self._maybe_complete_shutdown(now):
            return NO_DEADLINE
        timeout = self._poll_current_state(now)
        timeout = min(timeout, self._expire_parked_fetches(now))
        timeout = min(timeout, self._maybe_clean_log(now))
        message = self.queue.poll(max(0, timeout))
        if message is not None:
            self._handle_inbound(message, self.clock.now_ms())
            state = self.quorum.state
            if isinstance(message, InboundResponse) and isinstance(state, FollowerState):
                # A follower sends its next Fetch (made due by the response just handled)
                # before the listeners run: their work would delay the replication round
                # trip, and with it every commit.
                self._send_next_fetch(state, self.clock.now_ms())
        self._poll_listeners()
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

    def _poll_current_state(self, now: int) -> int:
        state = self.quorum.state
        if isinstance(state, LeaderState):
            return self._poll_leader(state, now)
        if isinstance(state, FollowerState):
            return self._poll_follower(state, now)
        if isinstance(state, CandidateState):
            return self._poll_candidate(state, now)
        if isinstance(state, ProspectiveState):
            return self._poll_prospective(state, now)
        if isinstance(state, UnattachedState):
            return self._poll_unattached(state, now)
        return self._poll_resigned(state, now)

    # -- per state ---------------------------------------------------------------------------------
    def _poll_leader(self, state: LeaderState[T], now: int) -> int:
        self._fire_leader_change()
        expired = state.check_quorum_expired(now)
        if self._shutdown is not None or state.resign_requested or expired:
            if expired:
                logger.info("epoch %d: check-quorum expired, no majority fetched in %d ms",
                            state.epoch, state.check_quorum_timeout_ms)
            self._transition_to_resigned(state.successors_by_fetch_offset(), now)
            return 0
        until_drain = self._maybe_append_batches(state, now)
        if state.begin_quorum_epoch_due(now):
            self._maybe_send_requests(
                now, state.other_voters(), self._build_begin_quorum_epoch
            )
            state.reset_begin_quorum_epoch_timer(now)
        until_heartbeat = state.begin_quorum_epoch_deadline_ms - now
        until_check_quorum = state.check_quorum_deadline_ms - now
        return max(0, min(until_drain, until_heartbeat, until_check_quorum))

    def _poll_follower(self, state: FollowerState, now: int) -> int:
        if self.quorum.is_voter:
            if self._shutdown is not None:
                # A follower may stop at once: it knows a remote leader.
                return 0
            if now >= state.fetch_deadline_ms:
                logger.info("epoch %d: no successful fetch from leader %d within the fetch "
                            "timeout", state.epoch, state.leader_id)
                self._transition_to_prospective(now)
                return 0
            backoff = self._maybe_send_fetch_to_best_node(state, now)
            return max(0, min(backoff, state.fetch_deadline_ms - now))
        if now >= state.fetch_deadline_ms:
            return self._maybe_send_fetch_to_any_bootstrap(now)
        backoff = self._maybe_send_fetch_to_best_node(state, now)
        return max(0, min(backoff, state.fetch_deadline_ms - now))

    def _send_next_fetch(self, state: FollowerState, now: int) -> None:
        """What ``_poll_follower`` does next if no timer has expired: send the next Fetch."""
        if self._shutdown is None and now < state.fetch_deadline_ms:
            self._maybe_send_fetch_to_best_node(state, now)

    def _poll_candidate(self, state: CandidateState, now: int) -> int:
        if self._shutdown is not None:
            return min(self._shutdown_remaining(now), self._maybe_send_vote_requests(state, now))
        if state.backoff_deadline_ms is not None:
            if now >= state.backoff_deadline_ms:
                self._transition_to_prospective(now)
                return 0
            return state.backoff_deadline_ms - now
        if now >= state.election_deadline_ms:
            logger.info("epoch %d: election timed out", state.epoch)
            self._transition_to_prospective(now)
            return 0
        return max(0, min(self._maybe_send_vote_requests(state, now),
                          state.election_deadline_ms - now))

    def _poll_prospective(self, state: ProspectiveState, now: int) -> int:
        if self._shutdown is not None:
            return min(self._shutdown_remaining(now), self._maybe_send_vote_requests(state, now))
        if now >= state.election_deadline_ms:
            logger.info("epoch %d: pre-vote timed out", state.epoch)
            self._prospective_lost(state, now)
            return 0
        return max(0, min(self._maybe_send_vote_requests(state, now),
                          state.election_deadline_ms - now))

    def _poll_unattached(self, state: UnattachedState, now: int) -> int:
        if self.quorum.is_voter:
            if self._shutdown is not None:
                return self._shutdown_remaining(now)
            if now >= state.election_deadline_ms:
                self._transition_to_prospective(now)
                return 0
            return state.election_deadline_ms - now
        backoff = self._maybe_send_fetch_to_any_bootstrap(now)
        return max(0, min(backoff, state.election_deadline_ms - now))

    def _poll_resigned(self, state: ResignedState, now: int) -> int:
        until_end = self._maybe_send_requests(
            now, sorted(state.unacknowledged), lambda dest: self._build_end_quorum_epoch(state)
        )
        if self._shutdown is not None:
            until_state = self._shutdown_remaining(now)
        elif state.epoch >= _INT32_MAX:
            until_state = NO_DEADLINE  # the last epoch: there is no next one to move to
        elif now >= state.election_deadline_ms:
            self._transition_to_unattached(state.epoch + 1, None, now)
            until_state = 0
        else:
            until_state = state.election_deadline_ms - now
        return max(0, min(until_state, until_end))

    # -- shutdown ----------------------------------------------------------------------------------
    def _maybe_complete_shutdown(self, now: int) -> bool:
        shutdown = self._shutdown
        if shutdown is None:
            return False
        if not shutdown.listeners_told:
            shutdown.listeners_told = True
            for context in list(self._listeners.values()):
                context.listener.begin_shutdown()
        if shutdown.future.done():
            return True
        if now >= shutdown.deadline_ms:
            logger.warning("graceful shutdown timed out")
            shutdown.future.set_exception(TimeoutError("graceful shutdown timed out"))
            return True
        leader = self.quorum.leader_id
        if (
            self.quorum.is_observer
            or self._is_only_voter()
            or (leader is not None and leader != self.local_id)
        ):
            logger.info("graceful shutdown completed")
            shutdown.future.set_result(None)
            return True
        return False

    def _shutdown_remaining(self, now: int) -> int:
        assert self._shutdown is not None
        return max(0, self._shutdown.deadline_ms - now)

    def _is_only_voter(self) -> bool:
        voters = self.quorum.voters
        return len(voters) == 1 and self.local_id in voters

    # =============================================================================================
    # Transitions (with their side effects on connections, purgatories and listeners)
    # =============================================================================================
    def _after_transition(self, previous: EpochState | LeaderState[T]) -> None:
        """Every transition drops requests in flight; leaving Leader fails parked fetches."""
        self._requests.reset_all()
        if isinstance(previous, LeaderState) and not isinstance(self.quorum.state, LeaderState):
            self._uncommitted.clear()
            for parked in self._fetch_purgatory.drain():
                self._respond(parked.request, self._fetch_response(
                    Errors.NOT_LEADER_OR_FOLLOWER
                ))
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
        if self.quorum.epoch >= _INT32_MAX:
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
        self._abandon_download("this replica leads now")
        granting = sorted(state.granting & state.voters)
        end_offset = self.log.log_end_offset
        accumulator: BatchAccumulator[T] = BatchAccumulator(
            state.epoch, end_offset, self.config.append_linger_ms,
            self.config.max_batch_size_bytes, self._serde, lock=self._append_lock,
        )
        leader = self.quorum.transition_to_leader(end_offset, accumulator, now)
        self.log.initialize_leader_epoch(leader.epoch)
        self._uncommitted.clear()
        # The HW can only move once a record of this epoch is replicated: write one now.
        accumulator.append_control_messages(
            [LeaderChangeMessage(
                version=0,
                leader_id=self.local_id,
                voters=tuple(LeaderChangeVoter(v) for v in sorted(leader.voters)),
                granting_voters=tuple(LeaderChangeVoter(v) for v in granting),
            )],
            self.clock.wall_ms(),
        )
        self._after_transition(state)
        self._end_election(now)
        logger.info("epoch %d: elected leader (votes from %s)", leader.epoch, granting)

    def _end_election(self, now: int) -> None:
        started = self._election_started_ms
        if started is not None:
            self._election_started_ms = None
            self.metrics.record_election_latency(now - started, now)

    def _transition_to_resigned(self, successors: list[int], now: int) -> None:
        previous = self.quorum.state
        self.quorum.transition_to_resigned(successors, now)
        self._after_transition(previous)

    def _prospective_lost(self, state: ProspectiveState, now: int) -> None:
        """Pre-vote lost or timed out: follow a known leader, else Unattached, same epoch."""
        leader = state.leader_id
        endpoints = self.quorum.leader_endpoints(leader) if leader is not None else ()
        if leader is not None and endpoints:
            self._transition_to_follower(state.epoch, leader, endpoints, now)
        else:
            self._transition_to_unattached(state.epoch, leader, now)

    def _log_duplicate_node_id(self, epoch: int, now: int) -> None:
        """A peer names this node leader of an epoch it never led: another replica has this
        node's id. Said once a minute: every answer of every peer would repeat it."""
        last = self._duplicate_id_logged_ms
        if last is not None and now - last < DUPLICATE_NODE_ID_LOG_INTERVAL_MS:
            return
        self._duplicate_id_logged_ms = now
        logger.error(
            "another replica uses node id %s: a peer names node %s leader of epoch %d, which "
            "this process never led. Is a second process running with node id %s (or was "
            "this node's data directory replaced)? Its messages are refused (logged at most "
            "once a minute)", self.local_id, self.local_id, epoch, self.local_id,
        )

    def _maybe_transition(
        self, leader_id: int | None, epoch: int, endpoints: Endpoints, now: int
    ) -> bool:
        """React to a leader and epoch named by a peer; False if they contradict ours.

        Kafka raises ``IllegalStateException`` (fatal) on a contradiction; kraft refuses the
        message and logs it, so one confused peer cannot stop a replica.
        """
        quorum = self.quorum
        if not self._has_consistent_leader(epoch, leader_id):
            logger.error(
                "a peer names leader %s for epoch %d, but this replica knows leader %s",
                leader_id, epoch, quorum.leader_id,
            )
            return False
        if leader_id is not None and leader_id == self.local_id and not (
            epoch == quorum.epoch and isinstance(quorum.state, LeaderState | ResignedState)
        ):
            self._log_duplicate_node_id(epoch, now)
            return False
        if epoch > quorum.epoch:
            if leader_id is not None and endpoints:
                self._transition_to_follower(epoch, leader_id, endpoints, now)
            else:
                self._transition_to_unattached(epoch, leader_id, now)
        elif self._learns_leader(leader_id, endpoints):
            assert leader_id is not None
            self._transition_to_follower(epoch, leader_id, endpoints, now)
        return True

    def _learns_leader(self, leader_id: int | None, endpoints: Endpoints) -> bool:
        """Whether a peer naming ``leader_id`` for the current epoch tells us something: a
        leader we did not know, or more endpoints for the one we follow."""
        return (
            leader_id is not None
            and leader_id != self.local_id
            and bool(endpoints)
            and (
                self.quorum.leader_id is None
                or set(endpoints) > set(self._current_endpoints())
            )
        )

    def _has_consistent_leader(self, epoch: int, leader_id: int | None) -> bool:
        if epoch != self.quorum.epoch or leader_id is None:
            return True
        known = self.quorum.leader_id
        return known is None or known == leader_id

    def _current_endpoints(self) -> Endpoints:
        """The endpoints this replica knows for its current leader (none without one)."""
        state = self.quorum.state
        if isinstance(state, FollowerState):
            return state.leader_endpoints
        leader = self.quorum.leader_id
        # Leader, Resigned, and a Prospective or Unattached replica that knows its leader:
        # the static voter set holds that leader's address (Kafka keeps the endpoints a
        # Follower had when it turns Prospective).
        return () if leader is None else self.quorum.leader_endpoints(leader)

    # =============================================================================================
    # The leader's append path
    # =============================================================================================
    def _maybe_append_batches(self, state: LeaderState[T], now: int) -> int:
        accumulator = state.accumulator
        if accumulator.time_until_drain(self.clock.wall_ms()) <= 0:
            batches = accumulator.drain()
            appended = 0
            for batch in batches:
                self.log.append_encoded(batch.data)
                appended += batch.num_records
                if not batch.is_control:
                    self._uncommitted.append(batch)
            if batches:
                self.metrics.record_append_records(appended, now)
                self._flush_leader_log(state, now)
        until = accumulator.time_until_drain(self.clock.wall_ms())
        return NO_DEADLINE if until >= NOTHING_TO_DRAIN_MS else until

    def _flush_leader_log(self, state: LeaderState[T], now: int) -> None:
        # As Kafka: the leader's own end offset counts before the flush, so that parked
        # fetches can return sooner; a single voter commits on its own append.
        end_offset = self.log.log_end_offset
        if state.update_local_state(end_offset, now):
            self._on_leader_high_watermark(state)
        self._complete_parked_fetches(self.clock.now_ms())
        self.log.flush()

    def _on_leader_high_watermark(self, state: LeaderState[T]) -> None:
        high_watermark = state.high_watermark
        assert high_watermark is not None
        if high_watermark > self.log.high_watermark:
            self.log.update_high_watermark(high_watermark)
        logger.debug("epoch %d: high watermark %d", state.epoch, high_watermark)
        # KIP-1166: parked fetches from replicas whose high watermark is now behind return.
        # The listeners hear of the commit at the end of this poll (``_poll_listeners``),
        # after the answers that carry the new high watermark have been sent.
        self._complete_parked_fetches(self.clock.now_ms())

    def _deliver_memory_commits(self, high_watermark: int) -> None:
        """Batches that committed go to the listeners waiting exactly for them, from memory
        (Kafka's append purgatory); lagging listeners read them from the log instead."""
        uncommitted = self._uncommitted
        if uncommitted and uncommitted[0].last_offset < high_watermark:
            wall = self.clock.wall_ms()
            now = self.clock.now_ms()
            metrics = self.metrics
            while uncommitted and uncommitted[0].last_offset < high_watermark:
                batch = uncommitted.popleft()
                metrics.record_commit_latency(max(0, wall - batch.append_timestamp_ms), now)
                self._fire_memory_commit(batch)

    # =============================================================================================
    # Sending
    # =============================================================================================
    def _maybe_send_request(
        self, now: int, destination: int, build: Callable[[int], Request]
    ) -> int:
        requests = self._requests
        if requests.is_backing_off(destination, now):
            return requests.remaining_backoff_ms(destination, now)
        if requests.is_ready(destination, now):
            body = build(destination)
            correlation_id = self.channel.new_correlation_id()
            requests.on_request_sent(destination, correlation_id, now, body.API_KEY.value)
            self.channel.send(OutboundRequest(correlation_id, destination, body, now))
            return self.config.request_timeout_ms
        return requests.remaining_request_time_ms(destination, now)

    def _maybe_send_requests(
        self, now: int, destinations: Iterable[int], build: Callable[[int], Request]
    ) -> int:
        timeout = NO_DEADLINE
        for destination in destinations:
            timeout = min(timeout, self._maybe_send_request(now, destination, build))
        return timeout

    def _maybe_send_vote_requests(self, state: ProspectiveState | CandidateState, now: int) -> int:
        if state.is_vote_rejected():
            return NO_DEADLINE
        pre_vote = isinstance(state, ProspectiveState)
        return self._maybe_send_requests(
            now, sorted(state.unrecorded_voters()),
            lambda dest: self._build_vote_request(dest, pre_vote),
        )

    def _maybe_send_fetch_to_best_node(self, state: FollowerState, now: int) -> int:
        requests = self._requests
        leader = state.leader_id
        if requests.has_request_timed_out(leader, now):
            requests.reset(leader)
            return self._maybe_send_fetch_to_any_bootstrap(now)
        if requests.is_backing_off(leader, now):
            return self._maybe_send_fetch_to_any_bootstrap(now)
        if not requests.has_any_inflight_request(now):
            return self._maybe_send_request(now, leader, self._build_follower_request)
        return self._remaining_inflight_ms(now)

    def _maybe_send_fetch_to_any_bootstrap(self, now: int) -> int:
        requests = self._requests
        if requests.has_any_inflight_request(now):
            return self._remaining_inflight_ms(now)
        node = requests.find_ready_bootstrap_server(now)
        if node is None:
            wait = requests.backoff_before_any_bootstrap_server_ms(now)
            return wait if wait > 0 else NO_DEADLINE
        return self._maybe_send_request(now, node, self._build_follower_request)

    def _remaining_inflight_ms(self, now: int) -> int:
        # The request in flight is answered, or times out, by then.
        return max(1, self._requests.remaining_any_request_time_ms(now))

    # -- request builders -------------------------------------------------------------------------
    def _build_vote_request(self, destination: int, pre_vote: bool) -> VoteRequest:
        assert self.local_id is not None
        return VoteRequest(
            replica_epoch=self.quorum.epoch,
            replica_id=self.local_id,
            last_offset_epoch=self.log.last_fetched_epoch,
            last_offset=self.log.log_end_offset,
            pre_vote=pre_vote,
            replica_directory_id=self.local_directory_id or _ZERO_UUID,
            voter_id=destination,
        )

    def _own_endpoints(self) -> tuple[Endpoint, ...]:
        if self.local_id is None:
            return ()
        return tuple(
            Endpoint(name, host, port)
            for name, host, port in self.quorum.leader_endpoints(self.local_id)
        )

    def _build_begin_quorum_epoch(self, destination: int) -> BeginQuorumEpochRequest:
        assert self.local_id is not None
        return BeginQuorumEpochRequest(
            leader_id=self.local_id,
            leader_epoch=self.quorum.epoch,
            voter_id=destination,
            leader_endpoints=self._own_endpoints(),
        )

    def _build_end_quorum_epoch(self, state: ResignedState) -> EndQuorumEpochRequest:
        return EndQuorumEpochRequest(
            leader_id=state.local_id,
            leader_epoch=state.epoch,
            preferred_candidates=tuple(
                PreferredCandidate(candidate) for candidate in state.preferred_successors
            ),
            leader_endpoints=self._own_endpoints(),
        )

    def _build_follower_request(self, destination: int) -> FetchRequest | FetchSnapshotRequest:
        """A Fetch, or while a snapshot downloads, the FetchSnapshot of its next chunk."""
        download = self._download
        if download is not None and self.quorum.leader_id != self._download_leader:
            # Another leader's file for the same id may differ (its header's timestamps):
            # never splice two files. Fetch, and download what the new leader names.
            self._abandon_download(f"the leader is now {self.quorum.leader_id}")
            download = None
        if download is None:
            return self._build_fetch_request()
        return FetchSnapshotRequest(
            replica_id=-1 if self.local_id is None else self.local_id,
            current_leader_epoch=self.quorum.epoch,
            snapshot_id=SnapshotId.of(download.snapshot_id),
            position=download.size_in_bytes,
            max_bytes=self.config.fetch_snapshot_max_bytes,
            replica_directory_id=self.local_directory_id or _ZERO_UUID,
        )

    def _build_fetch_request(self) -> FetchRequest:
        high_watermark = self.quorum.high_watermark
        return FetchRequest(
            replica_id=-1 if self.local_id is None else self.local_id,
            current_leader_epoch=self.quorum.epoch,
            fetch_offset=self.log.log_end_offset,
            last_fetched_epoch=self.log.last_fetched_epoch,
            max_wait_ms=self.config.fetch_max_wait_ms,
            max_bytes=self.config.max_batch_size_bytes,
            replica_directory_id=self.local_directory_id or _ZERO_UUID,
            high_watermark=-1 if high_watermark is None else high_watermark,
        )

    # =============================================================================================
    # Inbound
    # =============================================================================================
    def _handle_inbound(self, message: InboundMessage, now: int) -> None:
        if isinstance(message, InboundRequest):
            self._handle_request(message, now)
        else:
            self._handle_response(message, now)

    def _respond(self, request: InboundRequest, body: Response) -> None:
        self.channel.respond(OutboundResponse(request.correlation_id, request.source, body))

    def _handle_request(self, request: InboundRequest, now: int) -> None:
        body = request.body
        if not self._valid_cluster_id(request.cluster_id):
            logger.warning("refusing %s from %d: cluster id %r is not ours (%r)",
                           type(body).__name__, request.source, request.cluster_id,
                           self.cluster_id)
            self._respond(request, RESPONSE_TYPE_FOR[type(body)](
                error_code=Errors.INCONSISTENT_CLUSTER_ID
            ))
            return
        if not _int32_fields_in_range(body):
            logger.warning("refusing %s from %d: an epoch or id outside int32",
                           type(body).__name__, request.source)
            self._respond(request, RESPONSE_TYPE_FOR[type(body)](
                error_code=Errors.INVALID_REQUEST
            ))
            return
        response: Response | None
        if isinstance(body, FetchRequest):
            self._handle_fetch_request(request, body, now)
            return
        if isinstance(body, VoteRequest):
            response = self._handle_vote_request(body, now)
        elif isinstance(body, BeginQuorumEpochRequest):
            response = self._handle_begin_quorum_epoch_request(body, now)
        elif isinstance(body, EndQuorumEpochRequest):
            response = self._handle_end_quorum_epoch_request(body, now)
        elif isinstance(body, FetchSnapshotRequest):
            response = self._handle_fetch_snapshot_request(body, now)
        else:
            response = self._handle_describe_quorum_request(body, now)
        self._respond(request, response)

    def _valid_cluster_id(self, cluster_id: str | None) -> bool:
        # Kafka: a missing id is accepted; any other value must equal ours (an empty one never
        # does).
        if cluster_id is None:
            return True
        return cluster_id != "" and (self.cluster_id is None or cluster_id == self.cluster_id)

    @staticmethod
    def _valid_topic_partition(body: Request | Response) -> bool:
        return (
            body.topic_name == METADATA_TOPIC_NAME
            and body.partition_index == METADATA_PARTITION_INDEX
        )

    def _is_valid_voter_key(self, voter_id: int, voter_directory_id: uuid.UUID) -> bool:
        if voter_id < 0:
            return True  # not sent (v0): any replica
        if self.local_id is None or voter_id != self.local_id:
            return False
        directory = _directory(voter_directory_id)
        return (
            directory is None
            or self.local_directory_id is None
            or directory == self.local_directory_id
        )

    def _validate_voter_only(self, remote_id: int, epoch: int) -> Errors | None:
        if epoch < self.quorum.epoch:
            return Errors.FENCED_LEADER_EPOCH
        if remote_id < 0:
            return Errors.INVALID_REQUEST
        return None

    def _validate_leader_only(self, epoch: int) -> Errors | None:
        quorum = self.quorum
        if epoch < quorum.epoch:
            return Errors.FENCED_LEADER_EPOCH
        if epoch > quorum.epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
        if not isinstance(quorum.state, LeaderState):
            return Errors.NOT_LEADER_OR_FOLLOWER
        if self._shutdown is not None:
            return Errors.BROKER_NOT_AVAILABLE
        return None

    def _leader_node_endpoints(self) -> tuple[NodeEndpoint, ...]:
        leader = self.quorum.leader_id
        if leader is None:
            return ()
        return tuple(
            NodeEndpoint(leader, host, port) for _name, host, port in self._current_endpoints()
        )

    def _endpoints_from_response(
        self, nodes: tuple[NodeEndpoint, ...], leader_id: int | None
    ) -> Endpoints:
        if leader_id is None:
            return ()
        endpoints = tuple(
            (_LISTENER_NAME, node.host, node.port) for node in nodes if node.node_id == leader_id
        )
        # The static voter set knows every voter's address (Kafka's v0 behaviour).
        return endpoints or self.quorum.leader_endpoints(leader_id)

    # -- Vote -------------------------------------------------------------------------------------
    def _epoch_response(self, kind: type[_EpochResponseT], error: Errors) -> _EpochResponseT:
        """A Vote/BeginQuorumEpoch/EndQuorumEpoch answer: the error, and what this replica
        knows of the leader and epoch."""
        return kind(
            partition_error_code=error,
            leader_id=self._wire_leader_id(),
            leader_epoch=self.quorum.epoch,
            node_endpoints=self._leader_node_endpoints(),
        )

    def _vote_response(self, error: Errors, granted: bool) -> VoteResponse:
        response = self._epoch_response(VoteResponse, error)
        return msgspec.structs.replace(response, vote_granted=granted) if granted else response

    def _handle_vote_request(self, body: VoteRequest, now: int) -> VoteResponse:
        if not self._valid_topic_partition(body):
            return VoteResponse(error_code=Errors.INVALID_REQUEST)
        if body.last_offset < 0 or body.last_offset_epoch < 0:
            return self._vote_response(Errors.INVALID_REQUEST, False)
        if (not body.pre_vote and body.last_offset_epoch >= body.replica_epoch) or (
            body.pre_vote and body.last_offset_epoch > body.replica_epoch
        ):
            return self._vote_response(Errors.INVALID_REQUEST, False)
        error = self._validate_voter_only(body.replica_id, body.replica_epoch)
        if error is not None:
            return self._vote_response(error, False)
        if body.replica_epoch > self.quorum.epoch:
            self._transition_to_unattached(body.replica_epoch, None, now)
        if not self._is_valid_voter_key(body.voter_id, body.voter_directory_id):
            logger.info("vote request for voter %d, not this replica", body.voter_id)
            return self._vote_response(Errors.INVALID_VOTER_KEY, False)
        candidate = ReplicaKey(body.replica_id, _directory(body.replica_directory_id))
        up_to_date = OffsetAndEpoch(body.last_offset, body.last_offset_epoch) >= OffsetAndEpoch(
            self.log.log_end_offset, self.log.last_fetched_epoch
        )
        state = self.quorum.state
        granted = False
        if not isinstance(state, LeaderState):
            granted = state.can_grant_vote(candidate, up_to_date, body.pre_vote)
        if granted and not body.pre_vote:
            if self.local_id is None:
                granted = False  # kraft: an anonymous replica cannot persist a vote
            elif isinstance(state, UnattachedState | ProspectiveState) and state.voted_key is None:
                self._transition_to_voted(candidate, now)
        logger.debug("%s from %d in epoch %d: %s", "pre-vote" if body.pre_vote else "vote",
                     body.replica_id, body.replica_epoch, "granted" if granted else "rejected")
        return self._vote_response(Errors.NONE, granted)

    # -- BeginQuorumEpoch, EndQuorumEpoch ------------------------------------------------------
    def _adopt_announced_leader(
        self, body: BeginQuorumEpochRequest | EndQuorumEpochRequest, now: int
    ) -> Errors | None:
        """What Begin- and EndQuorumEpoch share: voter-only validation, then follow the leader
        they name (its endpoints from the request, else from the voter set, as Kafka does).
        Returns the error to answer with, or None."""
        error = self._validate_voter_only(body.leader_id, body.leader_epoch)
        if error is not None:
            return error
        endpoints = tuple((e.name, e.host, e.port) for e in body.leader_endpoints) or (
            self.quorum.leader_endpoints(body.leader_id)
        )
        if not self._maybe_transition(body.leader_id, body.leader_epoch, endpoints, now):
            return Errors.INVALID_REQUEST
        return None

    def _handle_begin_quorum_epoch_request(
        self, body: BeginQuorumEpochRequest, now: int
    ) -> BeginQuorumEpochResponse:
        if not self._valid_topic_partition(body):
            return BeginQuorumEpochResponse(error_code=Errors.INVALID_REQUEST)
        error = self._adopt_announced_leader(body, now)
        if error is None and not self._is_valid_voter_key(body.voter_id, body.voter_directory_id):
            logger.info("BeginQuorumEpoch for voter %d, not this replica", body.voter_id)
            error = Errors.INVALID_VOTER_KEY
        return self._epoch_response(BeginQuorumEpochResponse, error or Errors.NONE)

    def _handle_end_quorum_epoch_request(
        self, body: EndQuorumEpochRequest, now: int
    ) -> EndQuorumEpochResponse:
        if not self._valid_topic_partition(body):
            return EndQuorumEpochResponse(error_code=Errors.INVALID_REQUEST)
        error = self._adopt_announced_leader(body, now)
        if error is not None:
            return self._epoch_response(EndQuorumEpochResponse, error)
        state = self.quorum.state
        if isinstance(state, FollowerState) and state.leader_id == body.leader_id:
            backoff = self._end_epoch_election_backoff(body.preferred_candidates)
            logger.debug("leader %d resigned epoch %d: election in %d ms", body.leader_id,
                         body.leader_epoch, backoff)
            state.fetch_deadline_ms = now + backoff
        return self._epoch_response(EndQuorumEpochResponse, Errors.NONE)

    def _end_epoch_election_backoff(self, candidates: Sequence[PreferredCandidate]) -> int:
        """Kafka's ``endEpochElectionBackoff``: the best successor goes first, the others
        back off exponentially by position, and a replica not named waits the maximum."""
        backoff_max = self.config.election_backoff_max_ms
        position = len(candidates)
        for i, candidate in enumerate(candidates):
            directory = _directory(candidate.candidate_directory_id)
            if candidate.candidate_id == self.local_id and (
                directory is None or directory == self.local_directory_id
            ):
                position = i
                break
        if position == 0:
            return 0
        if position >= len(candidates):
            return backoff_max
        base = backoff_max >> (len(candidates) - 1)
        return min(backoff_max, base << (position - 1))

    # -- Fetch (leader side) -----------------------------------------------------------------------
    def _fetch_response(
        self,
        error: Errors,
        records: bytes = b"",
        diverging: OffsetAndEpoch | None = None,
        snapshot: OffsetAndEpoch | None = None,
    ) -> FetchResponse:
        quorum = self.quorum
        high_watermark = quorum.high_watermark
        return FetchResponse(
            partition_error_code=error,
            high_watermark=-1 if high_watermark is None else high_watermark,
            log_start_offset=self.log.log_start_offset,
            records=records,
            diverging_epoch=None if diverging is None else EpochEndOffset.of(diverging),
            current_leader=LeaderIdAndEpoch(self._wire_leader_id(), quorum.epoch),
            snapshot_id=None if snapshot is None else SnapshotId.of(snapshot),
            node_endpoints=self._leader_node_endpoints(),
        )

    def _handle_fetch_request(
        self, request: InboundRequest, body: FetchRequest, now: int
    ) -> None:
        if not self._valid_topic_partition(body) or body.topic_id not in (
            METADATA_TOPIC_ID, _ZERO_UUID
        ):
            self._respond(request, FetchResponse(error_code=Errors.INVALID_REQUEST))
            return
        if (
            body.max_wait_ms < 0
            or body.fetch_offset < 0
            or body.last_fetched_epoch < 0
            or body.last_fetched_epoch > body.current_leader_epoch
        ):
            self._respond(request, self._fetch_response(Errors.INVALID_REQUEST))
            return
        error = self._validate_leader_only(body.current_leader_epoch)
        if error is not None:
            self._respond(request, self._fetch_response(error))
            return
        state = self.quorum.state
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
            linger = self.config.fetch_high_watermark_linger_ms
            if linger <= 0:
                self._respond(request, response)
                return
            # The high watermark waits (a little) for records to ride with.
            deadline = min(deadline, now + linger)
        self._fetch_purgatory.park(request, body.fetch_offset, body.high_watermark, deadline)

    def _fetcher_behind_high_watermark(self, body: FetchRequest) -> bool:
        """KIP-1166: answer at once when the fetcher's high watermark is behind ours."""
        high_watermark = self.quorum.high_watermark
        return high_watermark is not None and body.high_watermark < high_watermark

    def _try_complete_fetch(self, body: FetchRequest, now: int) -> FetchResponse:
        """Answer a (parked) Fetch as things stand now, validating it again."""
        error = self._validate_leader_only(body.current_leader_epoch)
        if error is not None:
            return self._fetch_response(error)
        state = self.quorum.state
        assert isinstance(state, LeaderState)
        return self._complete_valid_fetch(state, body, now)

    def _complete_valid_fetch(
        self, state: LeaderState[T], body: FetchRequest, now: int
    ) -> FetchResponse:
        """Kafka's ``tryCompleteFetchRequest`` past validation: records, a diverging epoch or
        a snapshot id, and the fetcher's progress (which may move the high watermark)."""
        log = self.log
        try:
            latest = log.latest_snapshot_id
            if body.fetch_offset == 0 and latest is not None and latest.offset > 0:
                # An empty fetcher starts from the latest snapshot, not from the log.
                return self._fetch_response(Errors.NONE, snapshot=latest)
            validation = log.validate_offset_and_epoch(body.fetch_offset, body.last_fetched_epoch)
            if validation.kind is ValidationKind.DIVERGING:
                return self._fetch_response(Errors.NONE, diverging=validation.offset_and_epoch)
            if validation.kind is ValidationKind.SNAPSHOT:
                return self._fetch_response(Errors.NONE, snapshot=validation.offset_and_epoch)
            info = log.read(
                body.fetch_offset, Isolation.UNCOMMITTED,
                max_bytes=max(1, min(body.max_bytes, DEFAULT_MAX_READ_BYTES)),
            )
        except (KraftError, ValueError) as exc:
            logger.error("fetch at offset %d failed: %s", body.fetch_offset, exc)
            return self._fetch_response(Errors.UNKNOWN_SERVER_ERROR)
        key = ReplicaKey(body.replica_id, _directory(body.replica_directory_id))
        if state.update_replica_state(key, now, body.fetch_offset, log.log_end_offset):
            self._on_leader_high_watermark(state)
        return self._fetch_response(Errors.NONE, records=info.records)

    def _complete_parked_fetches(self, now: int) -> None:
        purgatory = self._fetch_purgatory
        if not len(purgatory):
            return
        high_watermark = self.quorum.high_watermark
        linger = self.config.fetch_high_watermark_linger_ms
        if linger > 0 and high_watermark is not None:
            purgatory.hasten(high_watermark, now + linger)
        # With a linger, a higher HW alone does not complete a fetch: its deadline does.
        for parked in purgatory.ready(self.log.log_end_offset,
                                      None if linger > 0 else high_watermark):
            self._answer_parked(parked, now)

    def _answer_parked(self, parked: ParkedFetch, now: int) -> None:
        body = parked.request.body
        assert isinstance(body, FetchRequest)
        self._respond(parked.request, self._try_complete_fetch(body, now))

    def _expire_parked_fetches(self, now: int) -> int:
        purgatory = self._fetch_purgatory
        if not len(purgatory):
            return NO_DEADLINE
        for parked in purgatory.expired(now):
            # The wait is over with nothing new: the empty answer.
            self._respond(parked.request, self._fetch_response(
                self._validate_leader_only(self.quorum.epoch) or Errors.NONE
            ))
        return max(0, purgatory.next_deadline_ms() - now)

    # -- FetchSnapshot, DescribeQuorum ------------------------------------------------------------
    def _handle_fetch_snapshot_request(
        self, body: FetchSnapshotRequest, now: int
    ) -> FetchSnapshotResponse:
        if not self._valid_topic_partition(body):
            return FetchSnapshotResponse(partition_error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION)
        current = LeaderIdAndEpoch(self._wire_leader_id(), self.quorum.epoch)
        error = self._validate_leader_only(body.current_leader_epoch)
        if error is not None:
            return FetchSnapshotResponse(
                partition_error_code=error, current_leader=current,
                node_endpoints=self._leader_node_endpoints(),
            )
        state = self.quorum.state
        assert isinstance(state, LeaderState)
        # A follower busy downloading is alive: it counts for check-quorum.
        state.record_fetch_for_check_quorum(body.replica_id, now)
        wanted = OffsetAndEpoch(body.snapshot_id.end_offset, body.snapshot_id.epoch)
        snapshot = None if wanted.offset <= 0 else self.log.read_snapshot(wanted)
        if snapshot is None:
            # Unknown, deleted by the cleaner, or the bootstrap id (0, 0): never served.
            return FetchSnapshotResponse(
                partition_error_code=Errors.SNAPSHOT_NOT_FOUND, snapshot_id=body.snapshot_id,
                current_leader=current, node_endpoints=self._leader_node_endpoints(),
            )
        size = snapshot.size_in_bytes
        if not 0 <= body.position < size:
            return FetchSnapshotResponse(
                partition_error_code=Errors.POSITION_OUT_OF_RANGE, snapshot_id=body.snapshot_id,
                current_leader=current, size=size, position=body.position,
                node_endpoints=self._leader_node_endpoints(),
            )
        chunk = min(max(1, body.max_bytes), self.config.fetch_snapshot_max_bytes)
        return FetchSnapshotResponse(
            snapshot_id=body.snapshot_id, current_leader=current, size=size,
            position=body.position, unaligned_records=snapshot.read(body.position, chunk),
            node_endpoints=self._leader_node_endpoints(),
        )

    def _handle_describe_quorum_request(
        self, body: DescribeQuorumRequest, now: int
    ) -> DescribeQuorumResponse:
        if not self._valid_topic_partition(body):
            return DescribeQuorumResponse(
                partition_error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION
            )
        state = self.quorum.state
        if not isinstance(state, LeaderState):
            leader = self.quorum.leader_id
            return DescribeQuorumResponse(
                partition_error_code=Errors.NOT_LEADER_OR_FOLLOWER,
                leader_id=self._wire_leader_id(),
                leader_epoch=self.quorum.epoch,
                # kraft: the leader's listeners, so that `kraft quorum describe` asking a
                # follower can follow the hint (Kafka's admin client finds the leader otherwise).
                nodes=() if leader is None else (DescribeQuorumNode(
                    leader, tuple(Endpoint(*e) for e in self.quorum.leader_endpoints(leader))
                ),),
            )
        wall = self.clock.wall_ms()

        def to_wall(timestamp_ms: int) -> int:
            return -1 if timestamp_ms < 0 else wall - (now - timestamp_ms)

        def describe(replica: ReplicaState, local: bool) -> WireReplicaState:
            end_offset = self.log.log_end_offset if local else replica.end_offset
            return WireReplicaState(
                replica_id=replica.key.id,
                replica_directory_id=replica.key.directory_id or _ZERO_UUID,
                log_end_offset=-1 if end_offset is None else end_offset,
                last_fetch_timestamp=wall if local else to_wall(replica.last_fetch_timestamp_ms),
                last_caught_up_timestamp=(
                    wall if local else to_wall(replica.last_caught_up_timestamp_ms)
                ),
            )

        voters = tuple(
            describe(state.voter_states[v], v == self.local_id) for v in sorted(state.voters)
        )
        observers = tuple(
            describe(o, False) for o in sorted(state.active_observers(now), key=lambda o: o.key.id)
        )
        nodes = tuple(
            DescribeQuorumNode(v, tuple(Endpoint(*e) for e in self.quorum.leader_endpoints(v)))
            for v in sorted(state.voters)
        )
        return DescribeQuorumResponse(
            leader_id=state.local.id,
            leader_epoch=state.epoch,
            high_watermark=-1 if state.high_watermark is None else state.high_watermark,
            current_voters=voters,
            observers=observers,
            nodes=nodes,
        )

    # =============================================================================================
    # Responses
    # =============================================================================================
    def _handle_response(self, response: InboundResponse, now: int) -> None:
        body = response.body
        requests = self._requests
        if not requests.is_response_expected(
            response.source, response.correlation_id, body.API_KEY.value
        ):
            logger.debug("dropping a stale or unexpected %s from %d", type(body).__name__,
                         response.source)
            return
        if not _int32_fields_in_range(body):
            logger.error("dropping %s from %d: an epoch or id outside int32",
                         type(body).__name__, response.source)
            ok = False
        elif isinstance(body, FetchResponse):
            ok = self._handle_fetch_response(response, body, now)
        elif isinstance(body, VoteResponse):
            ok = self._handle_vote_response(response, body, now)
        elif isinstance(body, BeginQuorumEpochResponse | EndQuorumEpochResponse):
            ok = self._handle_quorum_epoch_response(response, body, now)
        elif isinstance(body, FetchSnapshotResponse):
            ok = self._handle_fetch_snapshot_response(response, body, now)
        else:
            ok = False  # kraft sends no DescribeQuorum
        requests.on_response_result(response.source, response.correlation_id, ok, now)

    def _handle_top_level_error(self, error: int, response: InboundResponse) -> bool:
        if error == Errors.BROKER_NOT_AVAILABLE:
            return False
        # kraft: Kafka throws on CLUSTER_AUTHORIZATION_FAILED; kraft has no authorization, so
        # it is one more error to log and back off from.
        logger.error("error %s in %s from %d", error_name(error), type(response.body).__name__,
                     response.source)
        return False

    def _maybe_handle_common_response(
        self, error: int, leader_id: int | None, epoch: int, endpoints: Endpoints, now: int
    ) -> bool | None:
        """Kafka's ``maybeHandleCommonResponse``: None means "go on to the API's handler"."""
        quorum = self.quorum
        if epoch < quorum.epoch or error == Errors.UNKNOWN_LEADER_EPOCH:
            return True  # we are past it: no longer relevant
        if epoch > quorum.epoch or error in (
            Errors.FENCED_LEADER_EPOCH, Errors.NOT_LEADER_OR_FOLLOWER
        ):
            before = quorum.state
            if not self._maybe_transition(leader_id, epoch, endpoints, now):
                return False
            # kraft: when the answer taught us nothing (same leader, same epoch), back off
            # instead of asking again at once (Kafka treats it as a success).
            return quorum.state is not before
        if epoch == quorum.epoch and leader_id is not None and (
            not self._has_consistent_leader(epoch, leader_id)
        ):
            logger.error("response names leader %d for epoch %d; this replica knows %s",
                         leader_id, epoch, quorum.leader_id)
            return False
        if epoch == quorum.epoch and self._learns_leader(leader_id, endpoints):
            assert leader_id is not None
            self._transition_to_follower(epoch, leader_id, endpoints, now)
            return None if error == _NONE else True
        if error == Errors.BROKER_NOT_AVAILABLE:
            return False
        if error == Errors.INVALID_REQUEST:
            # kraft: Kafka treats this as fatal; a peer that rejects our request is logged.
            logger.error("a peer answered INVALID_REQUEST")
            return False
        if error == Errors.INVALID_VOTER_KEY:
            logger.info("a peer answered INVALID_VOTER_KEY")
            return False
        return None

    def _handle_unexpected_error(self, error: int, response: InboundResponse) -> bool:
        logger.error("unexpected error %s in %s from %d", error_name(error),
                     type(response.body).__name__, response.source)
        return False

    # -- Vote --------------------------------------------------------------------------------------
    def _handle_vote_response(
        self, response: InboundResponse, body: VoteResponse, now: int
    ) -> bool:
        if body.error_code != _NONE:
            state = self.quorum.state
            if body.error_code == Errors.UNSUPPORTED_VERSION and isinstance(
                state, ProspectiveState
            ):
                # A voter too old for pre-vote: stand for election at once.
                logger.info("voter %d does not support pre-vote", response.source)
                self._transition_to_candidate(now)
                return True
            return self._handle_top_level_error(body.error_code, response)
        if not self._valid_topic_partition(body):
            return False
        leader = _leader_or_none(body.leader_id)
        endpoints = self._endpoints_from_response(body.node_endpoints, leader)
        handled = self._maybe_handle_common_response(
            body.partition_error_code, leader, body.leader_epoch, endpoints, now
        )
        if handled is not None:
            return handled
        if body.partition_error_code != _NONE:
            return self._handle_unexpected_error(body.partition_error_code, response)
        state = self.quorum.state
        if isinstance(state, ProspectiveState | CandidateState):
            if body.vote_granted:
                state.granting.add(response.source)
                state.rejecting.discard(response.source)
                if state.is_vote_granted():
                    if isinstance(state, ProspectiveState):
                        self._transition_to_candidate(now)
                    else:
                        self._become_leader(now)
            else:
                state.rejecting.add(response.source)
                self._maybe_handle_election_loss(state, now)
        return True

    def _maybe_handle_election_loss(
        self, state: ProspectiveState | CandidateState, now: int
    ) -> None:
        if not state.is_vote_rejected():
            return
        if isinstance(state, CandidateState):
            if state.backoff_deadline_ms is None:
                backoff = self._binary_exponential_election_backoff_ms(state.retries)
                logger.info("epoch %d: election lost (rejected by %s); backing off %d ms",
                            state.epoch, sorted(state.rejecting), backoff)
                state.backoff_deadline_ms = now + backoff
        else:
            logger.info("epoch %d: pre-vote lost (rejected by %s)", state.epoch,
                        sorted(state.rejecting))
            self._prospective_lost(state, now)

    def _binary_exponential_election_backoff_ms(self, retries: int) -> int:
        if retries <= 0:
            raise ValueError(f"retries {retries} must be positive")
        return min(
            RETRY_BACKOFF_BASE_MS * self._rand.randrange(2 << min(20, retries - 1)),
            self.config.election_backoff_max_ms,
        )

    # -- BeginQuorumEpoch, EndQuorumEpoch --------------------------------------------------------
    def _handle_quorum_epoch_response(
        self,
        response: InboundResponse,
        body: BeginQuorumEpochResponse | EndQuorumEpochResponse,
        now: int,
    ) -> bool:
        """The answer to a BeginQuorumEpoch (heartbeat) or EndQuorumEpoch: NONE acknowledges.
        A Resigned replica stops resending EndQuorumEpoch to a voter that acknowledged."""
        if body.error_code != _NONE:
            return self._handle_top_level_error(body.error_code, response)
        if not self._valid_topic_partition(body):
            return False
        leader = _leader_or_none(body.leader_id)
        handled = self._maybe_handle_common_response(
            body.partition_error_code, leader, body.leader_epoch,
            self._endpoints_from_response(body.node_endpoints, leader), now,
        )
        if handled is not None:
            return handled
        if body.partition_error_code != _NONE:
            return self._handle_unexpected_error(body.partition_error_code, response)
        state = self.quorum.state
        if isinstance(body, EndQuorumEpochResponse) and isinstance(state, ResignedState):
            state.unacknowledged.discard(response.source)
        return True

    # -- Fetch (follower side) --------------------------------------------------------------------
    def _handle_fetch_response(
        self, response: InboundResponse, body: FetchResponse, now: int
    ) -> bool:
        if body.error_code != _NONE:
            return self._handle_top_level_error(body.error_code, response)
        if not self._valid_topic_partition(body):
            return False
        leader = _leader_or_none(body.current_leader.leader_id)
        epoch = body.current_leader.leader_epoch
        error = body.partition_error_code
        handled = self._maybe_handle_common_response(
            error, leader, epoch, self._endpoints_from_response(body.node_endpoints, leader), now
        )
        if handled is not None:
            return handled
        if error != _NONE:
            return self._handle_unexpected_error(error, response)
        state = self.quorum.state
        if not isinstance(state, FollowerState) or leader != state.leader_id:
            logger.debug("ignoring a fetch response from %d: not following it", response.source)
            return False
        diverging = body.diverging_epoch
        snapshot = body.snapshot_id
        if diverging is not None and diverging.epoch >= 0:
            if not self._truncate_to_diverging(state, diverging):
                return False
        elif snapshot is not None and (snapshot.epoch >= 0 or snapshot.end_offset >= 0):
            if snapshot.epoch < 0 or snapshot.end_offset < 0:
                logger.error("the leader sent an invalid snapshot id %s", snapshot)
                return False
            self._start_download(state, OffsetAndEpoch(snapshot.end_offset, snapshot.epoch))
        else:
            if body.records and not self._append_as_follower(body.records):
                return False
            self._update_follower_high_watermark(state, body.high_watermark)
        state.fetch_deadline_ms = now + self.config.fetch_timeout_ms
        state.has_fetched = True
        return True

    # -- FetchSnapshot (follower side) ------------------------------------------------------------
    def _start_download(self, state: FollowerState, snapshot_id: OffsetAndEpoch) -> None:
        """The leader answered a Fetch with a snapshot id: download it (or go on with it)."""
        download = self._download
        if download is not None:
            if download.snapshot_id == snapshot_id:
                return  # resume where it stopped (a change of leader ended it already)
            self._abandon_download(f"the leader now sends snapshot {snapshot_id}")
        writer = self.log.create_new_snapshot_unchecked(snapshot_id)
        if writer is None:
            # We hold it already (a crash between freezing and truncating): use it.
            self._install_snapshot(state)
            return
        logger.info("epoch %d: downloading snapshot %s from leader %d", state.epoch,
                    snapshot_id, state.leader_id)
        self._download = writer
        self._download_leader = state.leader_id

    def _abandon_download(self, why: str) -> None:
        download = self._download
        if download is not None:
            self._download = None
            logger.info("abandoning the download of snapshot %s (%d bytes): %s",
                        download.snapshot_id, download.size_in_bytes, why)
            download.close()

    def _handle_fetch_snapshot_response(
        self, response: InboundResponse, body: FetchSnapshotResponse, now: int
    ) -> bool:
        if body.error_code != _NONE:
            return self._handle_top_level_error(body.error_code, response)
        if not self._valid_topic_partition(body):
            return False
        leader = _leader_or_none(body.current_leader.leader_id)
        error = body.partition_error_code
        handled = self._maybe_handle_common_response(
            error, leader, body.current_leader.leader_epoch,
            self._endpoints_from_response(body.node_endpoints, leader), now,
        )
        if handled is not None:
            return handled
        if error in (Errors.SNAPSHOT_NOT_FOUND, Errors.POSITION_OUT_OF_RANGE):
            # The leader cleaned that snapshot away (or our position is off): start over
            # from a Fetch, which names the snapshot to get now.
            self._abandon_download(f"the leader answered {error_name(error)}")
            return True
        if error != _NONE:
            return self._handle_unexpected_error(error, response)
        state = self.quorum.state
        download = self._download
        if not isinstance(state, FollowerState) or leader != state.leader_id:
            logger.debug("ignoring a snapshot chunk from %d: not following it", response.source)
            return False
        wanted = None if download is None else SnapshotId.of(download.snapshot_id)
        if download is None or body.snapshot_id != wanted:
            logger.error("ignoring a chunk of snapshot %s: downloading %s", body.snapshot_id,
                         wanted)
            return False
        position, size, data = body.position, body.size, body.unaligned_records
        if position != download.size_in_bytes or not data or position + len(data) > size:
            logger.error("bad chunk of snapshot %s: %d bytes at %d of %d, expected position %d",
                         wanted, len(data), position, size, download.size_in_bytes)
            self._abandon_download("a bad chunk")
            return False
        download.append(data)
        state.fetch_deadline_ms = now + self.config.fetch_timeout_ms
        state.has_fetched = True
        if download.size_in_bytes == size:
            self._finish_download(state, download)
        return True

    def _finish_download(self, state: FollowerState, download: RawSnapshotWriter) -> None:
        """The whole snapshot arrived: check it, freeze it, and move the log onto it."""
        self._download = None
        snapshot_id = download.snapshot_id
        frozen = download.freeze()
        try:
            SnapshotReader(frozen, self._serde).close()
        except CorruptRecordError as exc:
            # Each batch carries its CRC: the bytes were damaged on the way or at the leader.
            # Drop it; the next Fetch names the snapshot to download again.
            logger.error("downloaded snapshot %s is corrupt, deleted: %s", snapshot_id, exc)
            self.log.delete_snapshot(snapshot_id)
            return
        logger.info("epoch %d: snapshot %s downloaded (%d bytes)", state.epoch, snapshot_id,
                    frozen.size_in_bytes)
        self._install_snapshot(state)

    def _install_snapshot(self, state: FollowerState) -> None:
        log = self.log
        if not log.truncate_to_latest_snapshot():
            logger.info("the log is already past snapshot %s", log.latest_snapshot_id)
            return
        offset = log.log_start_offset
        if state.high_watermark is None or state.high_watermark < offset:
            state.high_watermark = offset
        # The listeners load it at the end of this poll (``_poll_listeners``).

    def _truncate_to_diverging(self, state: FollowerState, diverging: EpochEndOffset) -> bool:
        end = OffsetAndEpoch(diverging.end_offset, diverging.epoch)
        floor = max(self.log.high_watermark, state.high_watermark or 0)
        if end.offset < floor:
            # Kafka: fatal. Committed data is never truncated; kraft refuses and logs it.
            logger.error("the leader asks to truncate to %d, below the high watermark %d: "
                         "refused", end.offset, floor)
            return False
        try:
            offset = self.log.truncate_to_end_offset(end)
        except ValueError as exc:
            logger.error("truncation to %s refused: %s", end, exc)
            return False
        logger.info("truncated the log to offset %d (diverging epoch %d ends at %d)", offset,
                    end.epoch, end.offset)
        return True

    def _append_as_follower(self, records: bytes) -> bool:
        before = self.log.log_end_offset
        try:
            self.log.append_as_follower(records)
        except (CorruptRecordError, InvalidAppendError) as exc:
            logger.error("refusing fetched records: %s", exc)
            return False
        self.metrics.record_fetch_records(self.log.log_end_offset - before, self.clock.now_ms())
        if self.quorum.is_voter or self.config.followers_always_flush:
            # The leader counts a voter's fetch offset towards the HW: it must be durable.
            self.log.flush()
        return True

    def _update_follower_high_watermark(self, state: FollowerState, leader_hw: int) -> None:
        if leader_hw < 0:
            return
        new = min(self.log.log_end_offset, leader_hw)
        old = state.high_watermark
        if old is not None and new <= old:
            if new < old:
                # Kafka: fatal (non-monotonic). kraft keeps its high watermark and logs.
                logger.error("the leader's high watermark %d is below ours (%d)", new, old)
            return
        state.high_watermark = new
        if new > self.log.high_watermark:
            self.log.update_high_watermark(new)
        # The listeners hear of it at the end of the poll, after the next Fetch is sent.

    # =============================================================================================
    # Listeners
    # =============================================================================================
    def _poll_listeners(self) -> None:
        while self._pending_registrations:
            add, listener = self._pending_registrations.popleft()
            key = id(listener)
            if add:
                if key in self._listeners:
                    logger.warning("listener %r is registered already", listener)
                else:
                    self._listeners[key] = ListenerContext(listener, self.queue.wakeup)
            elif self._listeners.pop(key, None) is None:
                logger.warning("listener %r is not registered", listener)
        high_watermark = self.quorum.high_watermark
        if high_watermark is not None:
            if isinstance(self.quorum.state, LeaderState):
                self._deliver_memory_commits(high_watermark)
            self._update_listeners_progress(high_watermark)
        self._fire_leader_change()

    def _update_listeners_progress(self, high_watermark: int) -> None:
        log = self.log
        for context in list(self._listeners.values()):
            next_offset = context.next_expected_offset()
            if next_offset is None:
                continue
            if next_offset == ListenerContext.STARTING_NEXT_OFFSET or (
                next_offset < log.log_start_offset
            ):
                snapshot = log.latest_snapshot()
                if snapshot is not None and snapshot.snapshot_id.offset <= high_watermark:
                    # §1.12: a new listener, or one the log has moved past, starts from the
                    # latest snapshot.
                    context.fire_handle_load_snapshot(SnapshotReader(snapshot, self._serde))
                    next_offset = snapshot.snapshot_id.offset
                elif next_offset == ListenerContext.STARTING_NEXT_OFFSET:
                    # A new listener and no snapshot: read the log from its start.
                    context.next_offset = next_offset = log.log_start_offset
                else:
                    raise IllegalStateError(
                        f"listener {context.listener!r} expects offset {next_offset}, below "
                        f"the log start {log.log_start_offset}, and there is no snapshot"
                    )
            if next_offset < min(high_watermark, log.high_watermark):
                info = log.read(next_offset, Isolation.COMMITTED)
                if info.records:
                    context.fire_handle_commit(LogBatchReader(
                        info.start_offset, info.records, self._serde, context.on_close
                    ))

    def _fire_memory_commit(self, batch: CompletedBatch[T]) -> None:
        for context in list(self._listeners.values()):
            if context.next_expected_offset() == batch.base_offset:
                reader: BatchReader[T] = MemoryBatchReader(
                    Batch(batch.base_offset, batch.last_offset, batch.epoch,
                          batch.append_timestamp_ms, batch.size_in_bytes, list(batch.records)),
                    context.on_close,
                )
                context.fire_handle_commit(reader)

    def _fire_leader_change(self) -> None:
        state = self.quorum.state
        if isinstance(state, ResignedState) or not self._initialized:
            return  # not fired in Resigned (§2)
        leader = self.leader_and_epoch()
        start = state.epoch_start_offset if isinstance(state, LeaderState) else None
        for context in list(self._listeners.values()):
            context.maybe_fire_leader_change(leader, start)

    def __repr__(self) -> str:
        return (
            f"KafkaRaftClient(id={self.local_id}, {self.role}, epoch={self.epoch}, "
            f"leader={self.leader_id}, leo={self.log.log_end_offset}, "
            f"hw={self.high_watermark})"
        )


_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1


_SCALARS = (int, str, bytes, bool, float, type(None))
#: Per message type: its epoch fields, its id fields and the fields that may nest structs.
_INT32_PLANS: dict[type, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {}


def _int32_plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    names: tuple[str, ...] = getattr(cls, "__struct_fields__", ())
    epochs = tuple(n for n in names if n.endswith("epoch"))
    ids = tuple(n for n in names if n.endswith("_id") and not n.endswith("epoch"))
    others = tuple(n for n in names if n not in epochs and n not in ids)
    plan = _INT32_PLANS[cls] = (epochs, ids, others)
    return plan


def _int32_fields_in_range(message: object) -> bool:
    """Kafka's epochs and replica ids are int32 on the wire: refuse a message (or a nested
    struct) that carries one outside that range, before it can reach the persisted state.
    An epoch must also leave room for one more election (below ``INT32_MAX``)."""
    cls = type(message)
    epochs, ids, others = _INT32_PLANS.get(cls) or _int32_plan(cls)
    for name in epochs:
        value = getattr(message, name)
        if type(value) is int and not _INT32_MIN <= value < _INT32_MAX:
            return False
    for name in ids:
        value = getattr(message, name)
        if type(value) is int and not _INT32_MIN <= value <= _INT32_MAX:
            return False
    for name in others:
        value = getattr(message, name)
        if type(value) in _SCALARS:
            continue
        if type(value) is tuple:
            if not all(_int32_fields_in_range(item) for item in value):
                return False
        elif hasattr(value, "__struct_fields__") and not _int32_fields_in_range(value):
            return False
    return True
