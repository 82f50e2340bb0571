"""The controller in the simulator: ``Cluster(controller=True, brokers=N)`` (docs/simulation.md,
"The controller").

Every node runs kraft's real :class:`~kraft.controller.quorum_controller.QuorumController` and
:class:`~kraft.metadata.loader.MetadataLoader` over the metadata serde, as a controller node
does, each controller on a :class:`~kraft.queue.DeterministicEventQueue` over the cluster's
clock. The cluster runs a queue right after the poll or call that may have queued something on
it (:meth:`ControllerSim.run`), and at its next deadline as a heap event; a queue that ran wakes
its node's poll, so that an append leaves at once.

:class:`ControllerSim` also turns what the nodes publish into the controller events (who
claimed, what the committed images show of brokers and partition leaders), carries the calls
of :meth:`ControllerOperations.create_topic` and of the brokers (:mod:`kraft.simulation.brokers`)
over the simulated network, and tells its observers (:class:`ControllerObserver`, the
controller invariants) of every image, claim and renounce.
"""

from __future__ import annotations

import concurrent.futures
import logging
import random
import uuid
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from kraft.common.clock import ManualClock
from kraft.config import ConfigError, QuorumConfig
from kraft.controller.errors import NotControllerError
from kraft.controller.quorum_controller import ControllerConfig, QuorumController
from kraft.controller.result import ControllerApiError
from kraft.errors import FatalFaultError
from kraft.metadata.delta import MetadataDelta
from kraft.metadata.image import MetadataImage
from kraft.metadata.loader import MetadataLoader
from kraft.metadata.records import ApiMessageAndVersion
from kraft.metadata.serde import MetadataRecordSerde
from kraft.protocol.controller_messages import (
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicState,
)
from kraft.protocol.errors import Errors
from kraft.queue import DeterministicEventQueue
from kraft.raft.client import KafkaRaftClient
from kraft.raft.listeners import Batch, BatchReader, LeaderAndEpoch, Listener, SnapshotReaderLike
from kraft.raft.state_machine import SnapshotPolicy
from kraft.record.offsets import OffsetAndEpoch
from kraft.simulation.admin import ADMIN_ID
from kraft.simulation.brokers import BrokerFleet
from kraft.simulation.controller_invariants import SimControllerInvariants
from kraft.simulation.errors import SimulationError
from kraft.simulation.events import Event
from kraft.simulation.invariants import InvariantChecker
from kraft.simulation.network import SimNetwork
from kraft.simulation.node import SimNode

__all__ = [
    "CONTROLLER_CALL_TIMEOUT_MS",
    "METADATA_SNAPSHOT_POLICY",
    "SIM_CLUSTER_ID",
    "ControllerObserver",
    "ControllerOperations",
    "ControllerSim",
    "controller_sim",
]

logger = logging.getLogger(__name__)

R = TypeVar("R")

#: The cluster id every simulated controller and broker agrees on.
SIM_CLUSTER_ID = "kraft-sim-cluster"
#: Each node's loader writes a snapshot once this many bytes of batches committed since the
#: last one (Kafka's 20 MiB would never be reached in a run): an idle controller's NoOpRecords
#: (one every 500 ms) make one every half minute, so runs see snapshots written, served and
#: loaded.
METADATA_SNAPSHOT_POLICY = SnapshotPolicy(max_bytes_between_snapshots=4 * 1024)
#: How long a topic operation waits for its answer (Kafka's admin ``request.timeout.ms``).
CONTROLLER_CALL_TIMEOUT_MS = 30_000

_NS_PER_MS = 1_000_000


class ControllerObserver(Protocol):
    """What the controller invariants hear (:meth:`ControllerSim.observe`). Each call comes
    right when it happens, inside the event that made it; a problem goes to
    ``cluster.checker.report(invariant, nodes, message)`` and becomes a violation at once."""

    def image_published(self, node_id: int, image: MetadataImage) -> None:
        """Node ``node_id``'s loader published a new committed image."""

    def claimed(self, node_id: int, epoch: int) -> None:
        """Node ``node_id``'s controller became active in ``epoch``."""

    def renounced(self, node_id: int, epoch: int, reason: str) -> None:
        """It stopped being active: ``reason`` is ``renounced`` (it is still running: its
        state was just reverted to the committed one), ``crashed`` or ``shutdown``."""

    def topic_op(self, op: str, topic: str, outcome: str | None) -> None:
        """A ``create_topic`` / ``delete_topic`` was sent (``outcome`` None) or completed
        (``ok`` or Kafka's error name)."""


class _Cluster(Protocol):
    """What :class:`ControllerSim` and :class:`ControllerOperations` use of the cluster."""

    nodes: dict[int, SimNode]
    clock: ManualClock
    network: SimNetwork
    rand: random.Random
    checker: InvariantChecker
    config: QuorumConfig
    controller_sim: ControllerSim | None

    def leader(self) -> int | None: ...
    def call_at(self, at_ms: int, action: Callable[[], None]) -> None: ...
    def _wake(self, node: SimNode, at: int | None = None) -> None: ...
    def _emit(self, kind: str, **fields: Any) -> Event: ...
    def _emit_node(self, node: SimNode, kind: str, **fields: Any) -> Event: ...
    def _on_commit(self, node: SimNode, batch: Batch[Any], value: int | None) -> None: ...
    def _fault(self, kind: str, targets: Any = (), **details: Any) -> bool: ...
    def _healed(self, kind: str, targets: Any = ()) -> None: ...


class CommitReporter(Listener[ApiMessageAndVersion]):
    """Hands every committed batch to the cluster (``committed_data``, ``listener_data``,
    ``batch_committed``), as the counter does in counter mode, and checks ``listener_order``.
    It also logs the snapshots the node's loader writes and those the node is handed.

    Registered after the loader, it is handed each batch after the loader was: a snapshot
    that ends within what it was handed, and that no load brought, is one the loader wrote."""

    def __init__(self, node: SimNode, cluster: _Cluster) -> None:
        self._node = node
        self._cluster = cluster
        self.last_offset = -1
        #: The latest snapshot logged (or on the disk at the start).
        self._snapshot_seen = node.log.latest_snapshot_id

    def handle_commit(self, reader: BatchReader[ApiMessageAndVersion]) -> None:
        node_id = self._node.node_id
        with reader:
            for batch in reader:
                if batch.base_offset <= self.last_offset:
                    self._cluster.checker.report(
                        "listener_order",
                        (node_id,),
                        f"node {node_id} was handed batch {batch.base_offset}.."
                        f"{batch.last_offset} after offset {self.last_offset}",
                    )
                self.last_offset = batch.last_offset
                self._cluster._on_commit(self._node, batch, None)
        latest = self._node.log.latest_snapshot_id
        if (
            latest is not None
            and latest != self._snapshot_seen
            and latest.offset - 1 <= self.last_offset
        ):
            self._snapshot_seen = latest
            self._snapshot("snapshot_created", latest)

    def handle_load_snapshot(self, reader: SnapshotReaderLike[ApiMessageAndVersion]) -> None:
        snapshot_id: OffsetAndEpoch = reader.snapshot_id
        reader.close()
        self.last_offset = snapshot_id.offset - 1
        self._snapshot_seen = snapshot_id
        self._snapshot("snapshot_loaded", snapshot_id)

    def _snapshot(self, kind: str, snapshot_id: OffsetAndEpoch) -> None:
        node = self._node
        self._cluster._emit_node(
            node,
            kind,
            offset=snapshot_id.offset,
            details={
                "snapshot_epoch": snapshot_id.epoch,
                "log_start_offset": node.log.log_start_offset,
            },
        )

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        pass


def controller_sim(cluster: _Cluster, controller: bool, brokers: int) -> ControllerSim | None:
    """The cluster's :class:`ControllerSim` (None in counter mode); its brokers start at once."""
    if brokers < 0 or (brokers and not controller):
        raise ConfigError(f"{brokers} brokers: brokers need Cluster(controller=True)")
    return ControllerSim(cluster, brokers) if controller else None


class ControllerSim:
    """The controllers, loaders and brokers of a controller cluster (``cluster.controller_sim``)."""

    def __init__(self, cluster: _Cluster, brokers: int) -> None:
        self._cluster = cluster
        self.serde = MetadataRecordSerde()
        self.config = ControllerConfig(cluster_id=SIM_CLUSTER_ID)
        self.observers: list[ControllerObserver] = []
        #: The epoch each node's controller holds a claim on (-1: none), as last seen.
        self._claims: dict[int, int] = {}
        #: When each node's queue is next run for its deadline (-1: not scheduled).
        self._queue_at: dict[int, int] = {}
        #: The latest committed image any node published: what the controller events diff.
        self._frontier = MetadataImage.EMPTY
        self.brokers = BrokerFleet(self, brokers)
        self.invariants = SimControllerInvariants(cluster)
        self.observe(self.invariants)
        cluster.call_at(cluster.clock.now_ms(), self.brokers.start_all)

    @property
    def cluster(self) -> _Cluster:
        return self._cluster

    def observe(self, observer: ControllerObserver) -> None:
        """Tell ``observer`` of every image, claim, renounce and topic operation from now on."""
        self.observers.append(observer)

    # -- a node's controller ------------------------------------------------------------------
    def attach(self, node: SimNode, client: KafkaRaftClient[Any]) -> None:
        """Give ``node``'s new client its loader, controller and queue (at each start)."""
        cluster = self._cluster
        loader = MetadataLoader(client, METADATA_SNAPSHOT_POLICY)
        client.register(loader)
        loader.add_publisher(lambda delta, image: self._published(node, delta, image))
        queue = DeterministicEventQueue(cluster.clock)
        node_id = node.node_id
        node.controller = QuorumController(
            node_id,
            client,
            queue,
            cluster.clock,
            config=self.config,
            rng=random.Random(cluster.rand.getrandbits(64)),
            on_fault=lambda fault: self._fault(node_id, fault),
        )
        node.loader = loader
        node.controller_queue = queue
        client.register(CommitReporter(node, cluster))
        self._claims[node_id] = -1
        self._queue_at[node_id] = -1

    def detach(self, node: SimNode, how: str) -> None:
        """``node`` went down (``how``: crashed or shutdown): its controller is gone."""
        epoch = self._claims.get(node.node_id, -1)
        if epoch >= 0:
            self._renounced(node, epoch, how)
        node.controller = None
        node.loader = None
        node.controller_queue = None
        self._claims[node.node_id] = -1
        self._queue_at[node.node_id] = -1

    def _fault(self, node_id: int, fault: FatalFaultError) -> None:
        self._cluster.checker.report(
            "no_exception", (node_id,), f"node {node_id}'s controller stopped: {fault}"
        )

    def run(self, node: SimNode) -> None:
        """Run ``node``'s controller queue until idle (after a poll or a call that may have
        queued events); wake the node's poll if it ran anything; schedule its next deadline."""
        queue = node.controller_queue
        if queue is None or node.paused:
            return
        if queue.run_until_idle():
            self._observe_claim(node)
            self._cluster._wake(node)
        deadline_ns = queue.next_deadline_ns()
        if deadline_ns is None:
            return
        at = -(-deadline_ns // _NS_PER_MS)
        node_id = node.node_id
        scheduled = self._queue_at[node_id]
        if scheduled != -1 and scheduled <= at:
            return
        self._queue_at[node_id] = at
        incarnation = node.incarnation

        def due() -> None:
            if node.incarnation == incarnation and self._queue_at[node_id] == at:
                self._queue_at[node_id] = -1
                self.run(node)

        self._cluster.call_at(at, due)

    def _observe_claim(self, node: SimNode) -> None:
        controller = node.controller
        assert controller is not None
        epoch = controller.claim_epoch
        last = self._claims[node.node_id]
        if epoch == last:
            return
        self._claims[node.node_id] = epoch
        if last >= 0:
            self._renounced(node, last, "renounced")
        if epoch >= 0:
            self._cluster._emit_node(node, "controller_claimed", epoch=epoch)
            for observer in self.observers:
                observer.claimed(node.node_id, epoch)

    def _renounced(self, node: SimNode, epoch: int, reason: str) -> None:
        self._cluster._emit_node(
            node, "controller_renounced", epoch=epoch, details={"reason": reason}
        )
        for observer in self.observers:
            observer.renounced(node.node_id, epoch, reason)

    # -- committed images ---------------------------------------------------------------------
    def _published(self, node: SimNode, delta: MetadataDelta, image: MetadataImage) -> None:
        for observer in self.observers:
            observer.image_published(node.node_id, image)
        old = self._frontier
        offset = image.provenance.offset
        if offset <= old.provenance.offset:
            return  # another node showed these changes first
        self._frontier = image
        cluster = self._cluster
        for broker_id, registration in image.brokers.items():
            previous = old.brokers.get(broker_id)
            if previous is registration:
                continue
            # A new registration comes fenced: only a change of the same one counts.
            was_fenced = previous is None or previous.epoch != registration.epoch or previous.fenced
            if registration.fenced != was_fenced:
                cluster._emit_node(
                    node,
                    "broker_fenced" if registration.fenced else "broker_unfenced",
                    offset=offset,
                    details={"broker": broker_id, "broker_epoch": registration.epoch},
                )
        for topic_id, topic in image.topics_by_id.items():
            old_topic = old.topics_by_id.get(topic_id)
            if old_topic is topic:
                continue
            for partition_id, partition in topic.partitions.items():
                before = None if old_topic is None else old_topic.partitions.get(partition_id)
                if before is partition or (
                    before is not None
                    and (before.leader, before.leader_epoch)
                    == (partition.leader, partition.leader_epoch)
                ):
                    continue
                cluster._emit_node(
                    node,
                    "partition_leader_changed",
                    offset=offset,
                    details={
                        "topic": topic.name,
                        "partition": partition_id,
                        "leader": partition.leader,
                        "previous_leader": -1 if before is None else before.leader,
                        "leader_epoch": partition.leader_epoch,
                        "partition_epoch": partition.partition_epoch,
                        "isr": list(partition.isr),
                    },
                )

    # -- calls over the network ---------------------------------------------------------------
    def send(
        self,
        source: int,
        node_id: int,
        invoke: Callable[[SimNode, QuorumController], concurrent.futures.Future[R]],
        on_answer: Callable[[concurrent.futures.Future[R]], None],
    ) -> None:
        """A request from ``source`` (a broker, or :data:`ADMIN_ID`) to node ``node_id``'s
        controller: it arrives after the link's latency, unless lost or the node is down or
        paused then; ``invoke`` makes the call there, and the answer comes back the same way
        to ``on_answer`` (nothing comes when either is lost)."""
        cluster = self._cluster
        times = cluster.network.delivery_times(source, node_id, cluster.clock.now_ms())
        if not times:
            return
        node = cluster.nodes[node_id]

        def arrive() -> None:
            controller = node.controller
            if controller is None or node.paused:
                return
            incarnation = node.incarnation
            future = invoke(node, controller)

            def answered(done: concurrent.futures.Future[R]) -> None:
                if node.incarnation != incarnation:
                    return  # the process that would answer is gone
                back = cluster.network.delivery_times(node_id, source, cluster.clock.now_ms())
                if back:
                    cluster.call_at(back[0], lambda: on_answer(done))

            future.add_done_callback(answered)
            self.run(node)

        cluster.call_at(times[0], arrive)

    def topic_call(
        self,
        op: str,
        topic: str,
        invoke: Callable[[QuorumController], concurrent.futures.Future[Any]],
        result: Callable[[Any], Any],
    ) -> concurrent.futures.Future[Any]:
        """Send a topic operation to the active controller (the Raft leader's node),
        following NOT_CONTROLLER once; the future the caller gets (``result`` turns the
        controller's response into its value, or raises its error)."""
        cluster = self._cluster
        outer: concurrent.futures.Future[Any] = concurrent.futures.Future()
        start = cluster.clock.now_ms()
        for observer in self.observers:
            observer.topic_op(op, topic, None)

        def complete(node_id: int, value: Any, error: ControllerApiError | None) -> None:
            if outer.done():
                return
            outcome = "ok" if error is None else Errors.from_code(error.error_code).name
            fields: dict[str, Any] = {
                "latency_ms": cluster.clock.now_ms() - start,
                "details": {"op": op, "topic": topic, "outcome": outcome},
            }
            if node_id == -1:
                cluster._emit("controller_op_completed", **fields)
            else:
                cluster._emit_node(cluster.nodes[node_id], "controller_op_completed", **fields)
            for observer in self.observers:
                observer.topic_op(op, topic, outcome)
            if error is None:
                outer.set_result(value)
            else:
                outer.set_exception(error)

        def attempt(node_id: int | None, follow: bool) -> None:
            if node_id is None:
                complete(-1, None, ControllerApiError(Errors.NOT_CONTROLLER, "no leader known"))
                return

            def on_answer(done: concurrent.futures.Future[Any]) -> None:
                error = done.exception()
                if error is None:
                    try:
                        complete(node_id, result(done.result()), None)
                    except ControllerApiError as refused:
                        complete(node_id, None, refused)
                elif (
                    follow
                    and isinstance(error, NotControllerError)
                    and error.leader_id not in (None, node_id)
                ):
                    attempt(error.leader_id, False)
                elif isinstance(error, ControllerApiError):
                    complete(node_id, None, error)
                else:
                    complete(
                        node_id, None, ControllerApiError(Errors.REQUEST_TIMED_OUT, str(error))
                    )

            asked[0] = node_id
            self.send(ADMIN_ID, node_id, lambda _node, controller: invoke(controller), on_answer)

        asked = [-1]  # the node the latest attempt went to
        cluster.call_at(
            start + CONTROLLER_CALL_TIMEOUT_MS,
            lambda: complete(
                asked[0], None, ControllerApiError(Errors.REQUEST_TIMED_OUT, "no answer")
            ),
        )
        attempt(cluster.leader(), True)
        return outer


def _created(response: CreateTopicsResponse) -> uuid.UUID:
    (topic,) = response.topics
    if topic.error_code != Errors.NONE:
        raise ControllerApiError(Errors.from_code(topic.error_code), topic.error_message)
    return topic.topic_id


def _deleted(response: DeleteTopicsResponse) -> None:
    (topic,) = response.responses
    if topic.error_code != Errors.NONE:
        raise ControllerApiError(Errors.from_code(topic.error_code), topic.error_message)


class ControllerOperations:
    """The controller calls and broker faults of :class:`~kraft.simulation.cluster.Cluster`
    (a base class of it); each needs ``controller=True``."""

    def _counter_only(self: _Cluster) -> None:
        """The counter's and the kv workload's appends have no place in a metadata log."""
        if self.controller_sim is not None:
            raise SimulationError("a controller cluster's log holds metadata records")

    def _controller_sim(self: _Cluster) -> ControllerSim:
        if self.controller_sim is None:
            raise SimulationError("this needs a controller cluster: Cluster(controller=True)")
        return self.controller_sim

    def create_topic(
        self: _Cluster, name: str, partitions: int, replication_factor: int
    ) -> concurrent.futures.Future[uuid.UUID]:
        """Create topic ``name`` through the active controller: a future of its id, or of
        :class:`~kraft.controller.result.ControllerApiError` with Kafka's error."""
        sim = ControllerOperations._controller_sim(self)
        request = CreateTopicsRequest(
            topics=(CreatableTopic(name, partitions, replication_factor),),
            timeout_ms=CONTROLLER_CALL_TIMEOUT_MS,
        )
        return sim.topic_call(
            "create_topic",
            name,
            lambda controller: controller.create_topics(
                request, timeout_ms=CONTROLLER_CALL_TIMEOUT_MS
            ),
            _created,
        )

    def delete_topic(self: _Cluster, name: str) -> concurrent.futures.Future[None]:
        """Delete topic ``name`` through the active controller: a future of None, or of
        :class:`~kraft.controller.result.ControllerApiError` with Kafka's error."""
        sim = ControllerOperations._controller_sim(self)
        request = DeleteTopicsRequest(
            topics=(DeleteTopicState(name=name),), timeout_ms=CONTROLLER_CALL_TIMEOUT_MS
        )
        return sim.topic_call(
            "delete_topic",
            name,
            lambda controller: controller.delete_topics(
                request, timeout_ms=CONTROLLER_CALL_TIMEOUT_MS
            ),
            _deleted,
        )

    @property
    def broker_ids(self: _Cluster) -> tuple[int, ...]:
        """The simulated brokers' ids (``BROKER_ID_BASE + 1`` on); none without a controller."""
        sim = self.controller_sim
        return () if sim is None else tuple(sim.brokers.brokers)

    def crash_broker(self: _Cluster, broker_id: int) -> None:
        """Broker ``broker_id`` stops: no more heartbeats (its session runs out)."""
        fleet = ControllerOperations._controller_sim(self).brokers
        broker = fleet.broker(broker_id)
        if self._fault("broker_crash", (broker_id,)):
            fleet.crash(broker)

    def restart_broker(self: _Cluster, broker_id: int) -> None:
        """Broker ``broker_id`` starts again (crashed first if running): a new incarnation
        id, and it registers again."""
        fleet = ControllerOperations._controller_sim(self).brokers
        broker = fleet.broker(broker_id)
        if self._fault("broker_restart", (broker_id,)):
            fleet.restart(broker)
            self._healed("broker_crash", (broker_id,))

    def shutdown_broker(self: _Cluster, broker_id: int) -> None:
        """Broker ``broker_id`` shuts down in a controlled way: it heartbeats with
        ``want_shut_down`` until the controller has moved its leaderships, then stops."""
        fleet = ControllerOperations._controller_sim(self).brokers
        broker = fleet.broker(broker_id)
        if self._fault("broker_shutdown", (broker_id,)):
            fleet.shutdown(broker)

    def isolate_broker(self: _Cluster, broker_id: int) -> None:
        """Cut broker ``broker_id`` off from every node (its requests and answers are lost)."""
        fleet = ControllerOperations._controller_sim(self).brokers
        broker = fleet.broker(broker_id)
        if self._fault("broker_isolate", (broker_id,)):
            broker.isolated = True

    def heal_broker(self: _Cluster, broker_id: int) -> None:
        """Connect broker ``broker_id`` again."""
        fleet = ControllerOperations._controller_sim(self).brokers
        broker = fleet.broker(broker_id)
        if self._fault("broker_heal", (broker_id,)):
            broker.isolated = False
            self._healed("broker_isolate", (broker_id,))
