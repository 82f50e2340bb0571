"""``QuorumController``: Kafka's metadata controller on the Raft client (docs/controller.md).

Theory of operation
    Everything runs on one event queue (a :class:`~kraft.queue.KafkaEventQueue` thread in a
    process, a :class:`~kraft.queue.DeterministicEventQueue` in the simulator and the tests).
    The Raft client's callbacks arrive on its driver thread; the controller's listener copies
    what they carry (the committed batches, a snapshot's records) and enqueues an event, so the
    managers' state is only ever touched by the queue's thread.

    *Writes.* A write event asks a manager for a :class:`~kraft.controller.result.ControllerResult`
    (records and a response) computed from the latest in-memory state. The records are handed
    to the client with ``prepare_append`` at the epoch this controller claimed, which returns
    the offset of the last one; each record is then replayed at its exact offset, the batch is
    released with ``schedule_prepared_append``, and the event waits in the
    :class:`~kraft.controller.deferred.DeferredEventQueue` until that offset commits. A write
    that produced no record answers once everything replayed before it has committed, so no
    caller ever sees uncommitted state.

    *Reads* run at once against the state as of the last committed offset (the timeline keeps
    it: :mod:`kraft.metadata.timeline`).

    *Claim.* When the client says this node leads an epoch, having handed every record before
    the epoch's start to the listener, the controller claims the epoch and prepends an
    activation write: the bootstrap records (``metadata.version``) if the log holds none yet.
    It then schedules a ``NoOpRecord`` every ``max_idle_interval_ms`` (Kafka's
    ``metadata.max.idle.interval.ms``), which keeps the high watermark moving and lets standbys
    see that the active controller is alive, and the fencing of brokers whose heartbeats stop.

    *Renounce.* On news of another leader, or when the client refuses an append, the controller
    resigns its epoch, fails every waiting write with ``NOT_CONTROLLER``, and reverts every
    manager to the last committed offset: what it replayed but the log never committed is
    gone, as it is from the log.

    *Standby.* A standby replays each committed batch, and replaces its whole state with a
    snapshot's when the client hands it one.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from kraft.common.clock import Clock
from kraft.common.ratelimit import LogLimiter
from kraft.controller.cluster_control import BrokerRegistrationReply, ClusterControlManager
from kraft.controller.configs import (
    ConfigResource,
    ConfigResourceType,
    ConfigurationControlManager,
    OpType,
)
from kraft.controller.deferred import DeferredEventQueue
from kraft.controller.errors import NotControllerError
from kraft.controller.features import FeatureControlManager, UpgradeType
from kraft.controller.offsets import OffsetControl
from kraft.controller.producer_ids import ProducerIdControlManager, ProducerIdsBlock
from kraft.controller.replication import BrokerHeartbeatReply, ReplicationControlManager
from kraft.controller.result import ApiError, ControllerApiError, ControllerResult
from kraft.errors import FatalFaultError, KraftError, NotLeaderError
from kraft.metadata.records import (
    ApiMessageAndVersion,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    at_latest_version,
)
from kraft.metadata.timeline import SnapshotRegistry
from kraft.protocol.controller_messages import (
    AllocateProducerIdsRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
)
from kraft.protocol.errors import Errors
from kraft.queue import (
    Event,
    EventQueue,
    EventTimeoutError,
    RejectedExecutionError,
    earliest_deadline,
)
from kraft.raft.listeners import BatchReader, LeaderAndEpoch, Listener, SnapshotReaderLike
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.typed import Batch

__all__ = ["ControllerConfig", "QuorumController", "RaftClientLike"]

logger = logging.getLogger(__name__)

R = TypeVar("R")

_NS_PER_MS = 1_000_000
#: The deferred events' tags (one of each at a time).
_WRITE_NO_OP = "writeNoOpRecord"
_MAYBE_FENCE = "maybeFenceStaleBroker"
_MAYBE_BALANCE = "maybeBalancePartitionLeaders"
#: When a balancing round stopped at its limit, the next runs this soon (Kafka's 10 ms: the
#: queue runs due deferred events first, so "at once" would starve the appended ones).
_BALANCE_AGAIN_MS = 10


@dataclasses.dataclass(frozen=True, kw_only=True)
class ControllerConfig:
    """The controller's settings, with Kafka's names and defaults."""

    #: ``metadata.max.idle.interval.ms``: a NoOpRecord after this long (0: never).
    max_idle_interval_ms: int = 500
    #: ``broker.session.timeout.ms``: a broker that has not heartbeaten for this long is fenced.
    session_timeout_ms: int = 9_000
    #: The cluster id brokers must register with (``meta.properties``).
    cluster_id: str = ""
    #: ``leader.imbalance.check.interval.seconds`` (in ms): how often leadership goes back to
    #: preferred replicas while some partition is led by another (0: never).
    leader_imbalance_check_interval_ms: int = 300_000
    #: ``max_records_per_batch``: a non-atomic result is split into batches of at most this many.
    max_records_per_batch: int = 10_000
    #: ``num.partitions`` and ``default.replication.factor``: what a topic creation that does
    #: not say gets.
    default_num_partitions: int = 1
    default_replication_factor: int = 1

    def __post_init__(self) -> None:
        for name in ("max_idle_interval_ms", "leader_imbalance_check_interval_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in (
            "session_timeout_ms",
            "max_records_per_batch",
            "default_num_partitions",
            "default_replication_factor",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


class RaftClientLike(Protocol):
    """What the controller asks of the Raft client (:class:`~kraft.raft.client.KafkaRaftClient`;
    the runtime guards its appends with a lock, so these may be called from the queue's thread)."""

    @property
    def log_end_offset(self) -> int: ...

    def register(self, listener: Listener[ApiMessageAndVersion]) -> None: ...

    def prepare_append(self, epoch: int, records: Sequence[ApiMessageAndVersion]) -> int: ...

    def schedule_prepared_append(self) -> None: ...

    def resign(self, epoch: int) -> None: ...


class _ControlEvent(Event):
    """An internal event (a Raft callback, a claim): no caller waits for it."""

    __slots__ = ("_controller", "_handler", "name")

    def __init__(self, controller: QuorumController, name: str, handler: Callable[[], None]):
        self._controller = controller
        self.name = name
        self._handler = handler

    def run(self) -> None:
        self._handler()

    def handle_exception(self, exc: BaseException) -> None:
        self._controller._handle_event_exception(self.name, exc)


class _WriteEvent(Event, Generic[R]):
    """Kafka's ``ControllerWriteEvent``: generate records, replay, append, answer on commit."""

    __slots__ = ("_controller", "_on_batch_end", "_op", "_response", "future", "name")

    def __init__(
        self,
        controller: QuorumController,
        name: str,
        op: Callable[[], ControllerResult[R]],
        on_batch_end: Callable[[int], None] | None,
    ) -> None:
        self._controller = controller
        self.name = name
        self._op = op
        self._on_batch_end = on_batch_end
        self._response: R | None = None
        self.future: concurrent.futures.Future[R] = concurrent.futures.Future()

    def run(self) -> None:
        controller = self._controller
        epoch = controller._claim_epoch
        if epoch < 0:
            raise NotControllerError(controller._latest_leader_id)
        result = self._op()
        self._response = result.response
        deferred = controller._deferred
        if result.records:
            offset = controller._append(epoch, result)
        else:
            # A read after all, but of the latest state, which may hold uncommitted records:
            # answer once the last of them commits, at once if none waits.
            pending = deferred.highest_pending_offset()
            offset = controller._offsets.next_write_offset - 1 if pending is None else pending
        if self._on_batch_end is not None:
            self._on_batch_end(offset)
        controller._maybe_schedule_balance()
        if result.records or deferred.highest_pending_offset() is not None:
            deferred.add(offset, self)
        else:
            self.complete(None)

    def handle_exception(self, exc: BaseException) -> None:
        self.complete(self._controller._handle_event_exception(self.name, exc))

    def complete(self, exception: BaseException | None) -> None:
        if self.future.done():
            return
        if exception is None:
            self.future.set_result(self._response)  # type: ignore[arg-type]
        else:
            self.future.set_exception(exception)


class _ReadEvent(Event, Generic[R]):
    """Kafka's ``ControllerReadEvent``: read the state as of the last committed offset."""

    __slots__ = ("_controller", "_read", "future", "name")

    def __init__(self, controller: QuorumController, name: str, read: Callable[[int], R]):
        self._controller = controller
        self.name = name
        self._read = read
        self.future: concurrent.futures.Future[R] = concurrent.futures.Future()

    def run(self) -> None:
        self.future.set_result(self._read(self._controller._offsets.last_committed_offset))

    def handle_exception(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(self._controller._handle_event_exception(self.name, exc))


class _RaftListener(Listener[ApiMessageAndVersion]):
    """The controller's ear on the Raft client: copies what it hears and enqueues it.

    Callbacks run on the client's driver thread; the batches are read there (the log is not
    to be read from another thread) and the reader closed, and the controller replays them on
    its own thread, in the order they came.
    """

    def __init__(self, controller: QuorumController) -> None:
        self._controller = controller

    def handle_commit(self, reader: BatchReader[ApiMessageAndVersion]) -> None:
        with reader:
            batches = list(reader)
        self._controller._enqueue_control(
            f"handleCommit[baseOffset={reader.base_offset}]",
            lambda: self._controller._handle_commit(batches),
        )

    def handle_load_snapshot(self, reader: SnapshotReaderLike[ApiMessageAndVersion]) -> None:
        try:
            snapshot_id = reader.snapshot_id
            batches = list(reader)
        finally:
            reader.close()
        self._controller._enqueue_control(
            f"handleLoadSnapshot[{snapshot_id}]",
            lambda: self._controller._handle_load_snapshot(snapshot_id, batches),
        )

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self._controller._enqueue_control(
            f"handleLeaderChange[{leader.epoch}]",
            lambda: self._controller._handle_leader_change(leader),
        )

    def begin_shutdown(self) -> None:
        self._controller._queue.begin_shutdown("the Raft client is shutting down")


class QuorumController:
    """The metadata controller of one node of a controller quorum.

    ``raft_client`` is this node's client for the metadata log (its serde
    :class:`~kraft.metadata.serde.MetadataRecordSerde`); ``queue`` runs the controller, on
    ``clock`` (the controller closes nothing it was given); ``rng`` draws topic ids and replica
    placements (seed it for a deterministic run). A record that cannot be replayed is a fatal
    fault: the controller stops its queue, keeps the fault in :attr:`fault` and calls
    ``on_fault`` (the runtime stops the node). Public calls may come from any thread and
    return ``concurrent.futures.Future``s, completed on the queue's thread.
    """

    def __init__(
        self,
        node_id: int,
        raft_client: RaftClientLike,
        queue: EventQueue,
        clock: Clock,
        *,
        config: ControllerConfig | None = None,
        rng: random.Random | None = None,
        on_fault: Callable[[FatalFaultError], None] | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = config or ControllerConfig()
        self._raft = raft_client
        self._queue = queue
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self.snapshot_registry = SnapshotRegistry()
        self._offsets = OffsetControl(self.snapshot_registry)
        self._deferred = DeferredEventQueue()
        self._claim_epoch = -1
        self._latest_leader_id: int | None = None
        self._on_fault = on_fault
        #: The fatal fault that stopped the controller, if any.
        self.fault: FatalFaultError | None = None
        #: Refused requests are logged at most once a second: a client can repeat them.
        self._refusal_log = LogLimiter(1_000)
        self._balance_scheduled = False
        #: Whether any record was ever replayed (an empty log gets the bootstrap records).
        self._replayed_any = False
        registry = self.snapshot_registry
        # The two managers know each other: the lambda reads cluster control once it exists.
        self.features = FeatureControlManager(
            registry,
            broker_features=lambda: self.cluster_control.broker_supported_features(),  # noqa: PLW0108
        )
        self.cluster_control = ClusterControlManager(
            registry,
            cluster_id=self.config.cluster_id,
            feature_control=self.features,
            session_timeout_ms=self.config.session_timeout_ms,
        )
        self.producer_ids = ProducerIdControlManager(registry, self.cluster_control)
        self.configs = ConfigurationControlManager(
            registry, existence_checker=self._check_config_resource
        )
        self.replication = ReplicationControlManager(
            registry,
            self.cluster_control,
            self.configs,
            self._rng,
            default_num_partitions=self.config.default_num_partitions,
            default_replication_factor=self.config.default_replication_factor,
        )
        self._listener = _RaftListener(self)
        raft_client.register(self._listener)

    # -- state readers (on the queue's thread, or after it stopped) -------------------------
    @property
    def is_active(self) -> bool:
        """Whether this controller holds a claim on the current epoch."""
        return self._claim_epoch >= 0

    @property
    def claim_epoch(self) -> int:
        """The epoch this controller claimed; -1 on a standby."""
        return self._claim_epoch

    @property
    def last_committed_offset(self) -> int:
        return self._offsets.last_committed_offset

    # -- the machinery ----------------------------------------------------------------------
    def append_write_event(
        self,
        name: str,
        op: Callable[[], ControllerResult[R]],
        *,
        timeout_ms: int | None = None,
        on_batch_end: Callable[[int], None] | None = None,
    ) -> concurrent.futures.Future[R]:
        """Run ``op`` on the queue as a write; the future completes when its records commit.

        ``on_batch_end`` hears the offset of the write's last record, right after the append.
        """
        event = _WriteEvent(self, name, op, on_batch_end)
        if timeout_ms is None:
            self._queue.append(event)
        else:
            self._queue.append_with_deadline(self._deadline_ns(timeout_ms), event)
        return event.future

    def append_read_event(
        self, name: str, read: Callable[[int], R], *, timeout_ms: int | None = None
    ) -> concurrent.futures.Future[R]:
        """Run ``read(last_committed_offset)`` on the queue; its result completes the future."""
        event = _ReadEvent(self, name, read)
        if timeout_ms is None:
            self._queue.append(event)
        else:
            self._queue.append_with_deadline(self._deadline_ns(timeout_ms), event)
        return event.future

    def _deadline_ns(self, timeout_ms: int) -> int:
        if timeout_ms < 0:
            raise ValueError(f"negative timeout {timeout_ms}")
        return self._clock.now_ns() + timeout_ms * _NS_PER_MS

    def _enqueue_control(self, name: str, handler: Callable[[], None]) -> None:
        self._queue.append(_ControlEvent(self, name, handler))

    def _append(self, epoch: int, result: ControllerResult[Any]) -> int:
        """Append ``result``'s records at ``epoch``, replaying each at its offset; the offset
        of the last one. An atomic result goes in one batch, any other in batches of at most
        ``max_records_per_batch``."""
        records = result.records
        size = len(records) if result.is_atomic else self.config.max_records_per_batch
        last_offset = -1
        for start in range(0, len(records), size):
            chunk = records[start : start + size]
            last_offset = self._raft.prepare_append(epoch, chunk)
            base_offset = last_offset - len(chunk) + 1
            for index, record in enumerate(chunk):
                self._replay(record, base_offset + index)
            self._raft.schedule_prepared_append()
            self._offsets.handle_schedule_append(last_offset)
        return last_offset

    def _handle_event_exception(self, name: str, exc: BaseException) -> BaseException:
        """Log a failed event; what its caller is told. A refused append (this node no longer
        leads) and any unexpected failure while active make the controller renounce."""
        if isinstance(exc, FatalFaultError):
            self._fail(name, exc)
            return exc
        if isinstance(exc, ControllerApiError):
            if self._refusal_log.allow(self._clock.now_ms()):
                logger.info("%s: %s", name, exc)
            return exc
        if isinstance(exc, (RejectedExecutionError, EventTimeoutError)):
            # Not run: the queue is shutting down, or the deadline passed first.
            level = logging.DEBUG if isinstance(exc, RejectedExecutionError) else logging.INFO
            logger.log(level, "%s: not run: %s", name, exc)
            return exc
        if isinstance(exc, NotLeaderError):
            logger.info("%s: the Raft client refused the append: %s", name, exc)
            if self.is_active:
                self._renounce()
            return NotControllerError(self._latest_leader_id)
        if isinstance(exc, KraftError) and not self.is_active:
            logger.info("%s: %s", name, exc)
            return exc
        logger.error("%s: unexpected failure", name, exc_info=exc)
        if self.is_active:
            self._renounce()
        return exc

    def _fail(self, name: str, fault: FatalFaultError) -> None:
        """This node's state can no longer be trusted (Kafka's fatal fault handler): stop the
        queue, so that nothing more is replayed or answered, and tell the owner."""
        logger.critical("%s: %s; the controller stops", name, fault, exc_info=fault)
        self.fault = fault
        self._queue.begin_shutdown("a fatal fault in the controller")
        if self._on_fault is not None:
            self._on_fault(fault)

    # -- Raft events ------------------------------------------------------------------------
    def _handle_commit(self, batches: list[Batch[ApiMessageAndVersion]]) -> None:
        offsets = self._offsets
        for batch in batches:
            if not batch.records:
                continue  # a control batch: nothing for the controller
            if not self.is_active:
                for index, record in enumerate(batch.records):
                    self._replay(record, batch.base_offset + index)
            offsets.handle_commit_batch(batch)  # type: ignore[arg-type]
            if self.is_active:
                # The active controller replayed its records when it appended them.
                self._deferred.complete_up_to(offsets.last_committed_offset)

    def _handle_load_snapshot(
        self, snapshot_id: OffsetAndEpoch, batches: list[Batch[ApiMessageAndVersion]]
    ) -> None:
        logger.info("loading snapshot %s", snapshot_id)
        self._offsets.begin_load_snapshot(snapshot_id)  # empties every manager
        for batch in batches:
            for record in batch.records:
                self._replay(record, snapshot_id.offset - 1)
        last_time = batches[-1].append_timestamp_ms if batches else -1
        self._offsets.end_load_snapshot(last_time)

    def _handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self._latest_leader_id = leader.leader_id
        if self.is_active:
            if leader.is_leader(self.node_id):
                logger.warning(
                    "still the leader in the new epoch %d (claimed %d)",
                    leader.epoch,
                    self._claim_epoch,
                )
                self._claim_epoch = leader.epoch
            else:
                logger.warning(
                    "renouncing: the leader of epoch %d is %s; reverting to offset %d",
                    leader.epoch,
                    leader.leader_id,
                    self._offsets.last_committed_offset,
                )
                self._renounce()
        elif leader.is_leader(self.node_id):
            self._claim(leader.epoch, self._raft.log_end_offset)
        else:
            logger.info("the leader of epoch %d is %s", leader.epoch, leader.leader_id)

    def _claim(self, epoch: int, next_write_offset: int) -> None:
        logger.info(
            "becoming the active controller in epoch %d, next write offset %d",
            epoch,
            next_write_offset,
        )
        self._claim_epoch = epoch
        self._offsets.activate(next_write_offset)
        self.cluster_control.activate(self._clock.now_ms())
        # First in line: nothing the new active controller does may come before it.
        activation = _WriteEvent(
            self, f"completeActivation[{epoch}]", self._activation_records, self._activated
        )
        self._queue.prepend(activation)

    def _activation_records(self) -> ControllerResult[None]:
        records = [] if self._replayed_any else self.features.bootstrap_records()
        return ControllerResult(records=records, response=None, is_atomic=True)

    def _activated(self, _offset: int) -> None:
        self._schedule_no_op()
        self._reschedule_fence()

    def _renounce(self) -> None:
        epoch = self._claim_epoch
        self._claim_epoch = -1
        self._raft.resign(epoch)
        self._deferred.fail_all(NotControllerError(self._latest_leader_id))
        self._offsets.deactivate()
        self.cluster_control.deactivate()
        self._queue.cancel_deferred(_WRITE_NO_OP)
        self._queue.cancel_deferred(_MAYBE_FENCE)
        self._queue.cancel_deferred(_MAYBE_BALANCE)
        self._balance_scheduled = False

    def _check_config_resource(self, resource: ConfigResource) -> None:
        """A config change names a topic that exists or a registered broker (the empty
        broker name is the cluster-wide default); Kafka's
        ``ConfigResourceExistenceChecker``."""
        if resource.type == ConfigResourceType.TOPIC:
            if self.replication.topic(resource.name) is None:
                raise ControllerApiError(
                    Errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {resource.name!r} does not exist"
                )
        elif resource.type == ConfigResourceType.BROKER and resource.name:
            try:
                broker_id = int(resource.name)
            except ValueError:
                raise ControllerApiError(
                    Errors.INVALID_REQUEST, f"invalid broker name {resource.name!r}"
                ) from None
            if self.cluster_control.registration(broker_id) is None:
                raise ControllerApiError(
                    Errors.BROKER_ID_NOT_REGISTERED, f"no broker with id {broker_id} is registered"
                )

    def _replay(self, record: ApiMessageAndVersion, offset: int) -> None:
        """Apply ``record`` (at ``offset``) to the manager that owns its kind (Kafka's
        ``QuorumController.replay``). A record that cannot be applied means this node's state
        and the log disagree: :class:`~kraft.errors.FatalFaultError`."""
        self._replayed_any = True
        try:
            self._apply(record.message, offset)
        except Exception as exc:
            raise FatalFaultError(
                f"cannot replay the {type(record.message).__name__} at offset {offset}: {exc}"
            ) from exc

    def _apply(self, message: MetadataRecord, offset: int) -> None:
        match message:
            case (
                RegisterBrokerRecord()
                | UnregisterBrokerRecord()
                | FenceBrokerRecord()
                | UnfenceBrokerRecord()
                | BrokerRegistrationChangeRecord()
            ):
                self.cluster_control.replay(message, offset)
            case FeatureLevelRecord():
                self.features.replay(message, offset)
            case ProducerIdsRecord():
                self.producer_ids.replay(message, offset)
            case ConfigRecord():
                self.configs.replay(message, offset)
            case TopicRecord() | PartitionRecord() | PartitionChangeRecord() | RemoveTopicRecord():
                self.replication.replay(message, offset)
            case NoOpRecord():
                pass
            case _:
                logger.debug("ignoring a %s at offset %d", type(message).__name__, offset)

    # -- periodic writes --------------------------------------------------------------------
    def _schedule_no_op(self) -> None:
        interval = self.config.max_idle_interval_ms
        if interval == 0 or not self.is_active:
            return

        def write_no_op() -> ControllerResult[None]:
            self._schedule_no_op()
            return ControllerResult(records=[at_latest_version(NoOpRecord())], response=None)

        event = _WriteEvent(self, _WRITE_NO_OP, write_no_op, None)
        deadline = self._clock.now_ns() + interval * _NS_PER_MS
        self._queue.schedule_deferred(_WRITE_NO_OP, earliest_deadline(deadline), event)

    def _maybe_schedule_balance(self, delay_ms: int | None = None) -> None:
        """After a write: if some partition is not led by its preferred replica, give
        leaderships back in ``leader_imbalance_check_interval_ms`` (Kafka's
        ``maybeScheduleNextBalancePartitionLeaders``)."""
        interval = self.config.leader_imbalance_check_interval_ms
        if (
            self._balance_scheduled
            or interval == 0
            or not self.is_active
            or not self.replication.partition_leaders_imbalanced()
        ):
            return

        def balance() -> ControllerResult[None]:
            self._balance_scheduled = False
            result = self.replication.maybe_balance_partition_leaders()
            if result.response:  # stopped at its limit: more to do soon
                self._maybe_schedule_balance(_BALANCE_AGAIN_MS)
            return ControllerResult(result.records, None)

        event = _WriteEvent(self, _MAYBE_BALANCE, balance, None)
        deadline = self._clock.now_ns() + (interval if delay_ms is None else delay_ms) * _NS_PER_MS
        self._queue.schedule_deferred(_MAYBE_BALANCE, earliest_deadline(deadline), event)
        self._balance_scheduled = True

    def _reschedule_fence(self) -> None:
        """Fence the next broker whose session runs out, when it does (Kafka's
        ``rescheduleMaybeFenceStaleBrokers``)."""
        if not self.is_active:
            return
        due_ms = self.cluster_control.heartbeats.next_check_time_ms()
        if due_ms is None:
            self._queue.cancel_deferred(_MAYBE_FENCE)
            return

        def fence_one() -> ControllerResult[None]:
            result = self.replication.maybe_fence_stale_broker(self._clock.now_ms())
            self._reschedule_fence()
            return result

        event = _WriteEvent(self, _MAYBE_FENCE, fence_one, None)
        self._queue.schedule_deferred(_MAYBE_FENCE, earliest_deadline(due_ms * _NS_PER_MS), event)

    # -- operations -------------------------------------------------------------------------
    def register_broker(
        self, request: BrokerRegistrationRequest, *, timeout_ms: int | None = None
    ) -> concurrent.futures.Future[BrokerRegistrationReply]:
        """Register (or re-register) a broker; its epoch is the offset of its record."""

        def op() -> ControllerResult[BrokerRegistrationReply]:
            result = self.cluster_control.register_broker(
                request, self._offsets.next_write_offset, self._clock.now_ms()
            )
            self._reschedule_fence()
            return result

        return self.append_write_event("registerBroker", op, timeout_ms=timeout_ms)

    def allocate_producer_ids(
        self, request: AllocateProducerIdsRequest, *, timeout_ms: int | None = None
    ) -> concurrent.futures.Future[ProducerIdsBlock]:
        """The next block of producer ids for a registered broker."""
        return self.append_write_event(
            "allocateProducerIds",
            lambda: self.producer_ids.generate_next_producer_id(
                request.broker_id, request.broker_epoch
            ),
            timeout_ms=timeout_ms,
        )

    def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Mapping[str, tuple[OpType, str | None]]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> concurrent.futures.Future[dict[ConfigResource, ApiError]]:
        """Change the configs of topics and brokers; one result per resource."""

        return self.append_write_event(
            "incrementalAlterConfigs",
            lambda: self.configs.incremental_alter_configs(changes, validate_only),
            timeout_ms=timeout_ms,
        )

    def update_features(
        self,
        updates: Mapping[str, int],
        *,
        upgrade_types: Mapping[str, UpgradeType] | None = None,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> concurrent.futures.Future[ApiError]:
        """Finalize features at new levels, all or none."""
        return self.append_write_event(
            "updateFeatures",
            lambda: self.features.update_features(updates, upgrade_types or {}, validate_only),
            timeout_ms=timeout_ms,
        )

    def finalized_features(
        self, *, timeout_ms: int | None = None
    ) -> concurrent.futures.Future[dict[str, int]]:
        """The finalized feature levels, as of the last committed offset."""
        return self.append_read_event(
            "finalizedFeatures", self.features.finalized, timeout_ms=timeout_ms
        )

    def process_broker_heartbeat(
        self, request: BrokerHeartbeatRequest, *, timeout_ms: int | None = None
    ) -> concurrent.futures.Future[BrokerHeartbeatReply]:
        """A broker's heartbeat: renews its session, unfences it once caught up, moves its
        leaderships away in a controlled shutdown."""
        in_controlled_shutdown = False
        # The contact counts from now, before the heartbeat waits in the queue (KAFKA-17793):
        # a queue busy for longer than the session timeout must not fence healthy brokers.
        arrival_ms = self._clock.now_ms()
        self.cluster_control.track_broker_heartbeat(
            request.broker_id, request.broker_epoch, arrival_ms
        )

        def op() -> ControllerResult[BrokerHeartbeatReply]:
            nonlocal in_controlled_shutdown
            result = self.replication.process_broker_heartbeat(request, arrival_ms)
            in_controlled_shutdown = result.response.in_controlled_shutdown
            self._reschedule_fence()
            return result

        def batch_end(offset: int) -> None:
            # The broker may shut down once the log commits past its last leadership move.
            if in_controlled_shutdown:
                self.cluster_control.heartbeats.maybe_update_controlled_shutdown_offset(
                    request.broker_id, offset
                )

        return self.append_write_event(
            "processBrokerHeartbeat", op, timeout_ms=timeout_ms, on_batch_end=batch_end
        )

    def unregister_broker(
        self, broker_id: int, *, timeout_ms: int | None = None
    ) -> concurrent.futures.Future[None]:
        """Forget a broker: its leaderships move away and its registration goes."""
        return self.append_write_event(
            "unregisterBroker",
            lambda: self.replication.unregister_broker(broker_id),
            timeout_ms=timeout_ms,
        )

    def create_topics(
        self, request: CreateTopicsRequest, *, timeout_ms: int | None = None
    ) -> concurrent.futures.Future[CreateTopicsResponse]:
        """Create topics, each on its own: one result per topic."""
        names = {topic.name for topic in request.topics}
        return self.append_write_event(
            "createTopics",
            lambda: self.replication.create_topics(request, names),
            timeout_ms=timeout_ms,
        )

    def delete_topics(
        self, request: DeleteTopicsRequest, *, timeout_ms: int | None = None
    ) -> concurrent.futures.Future[DeleteTopicsResponse]:
        """Delete topics by name or id: one result per topic."""
        return self.append_write_event(
            "deleteTopics", lambda: self.replication.delete_topics(request), timeout_ms=timeout_ms
        )

    def create_partitions(
        self, request: CreatePartitionsRequest, *, timeout_ms: int | None = None
    ) -> concurrent.futures.Future[CreatePartitionsResponse]:
        """Add partitions to existing topics: one result per topic."""
        return self.append_write_event(
            "createPartitions",
            lambda: self.replication.create_partitions(request),
            timeout_ms=timeout_ms,
        )

    def describe_cluster(
        self, request: DescribeClusterRequest, *, timeout_ms: int | None = None
    ) -> concurrent.futures.Future[DescribeClusterResponse]:
        """The cluster id, the active controller and the brokers, as of the last committed
        offset (the fenced ones only when asked, KIP-1073)."""

        def read(offset: int) -> DescribeClusterResponse:
            brokers = []
            for registration in self.cluster_control.registrations(offset):
                if registration.fenced and not request.include_fenced_brokers:
                    continue
                listener = registration.listeners[0] if registration.listeners else None
                brokers.append(
                    DescribeClusterBroker(
                        broker_id=registration.id,
                        host="" if listener is None else listener.host,
                        port=-1 if listener is None else listener.port,
                        rack=registration.rack,
                        is_fenced=registration.fenced,
                    )
                )
            return DescribeClusterResponse(
                cluster_id=self.config.cluster_id,
                controller_id=-1 if self._latest_leader_id is None else self._latest_leader_id,
                brokers=tuple(brokers),
            )

        return self.append_read_event("describeCluster", read, timeout_ms=timeout_ms)
