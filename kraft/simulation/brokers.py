"""Simulated brokers: they register with the active controller and heartbeat, as Kafka's
``BrokerLifecycleManager`` does, driven by the cluster's scheduler (docs/simulation.md,
"The controller").

Broker ``k`` (1..N) has id ``BROKER_ID_BASE + k``. At each start it registers (BrokerRegistration:
a fresh incarnation id and log directory drawn from the cluster's random source, a PLAINTEXT
listener ``broker-<id>:9092``, rack ``r<k % 3>``, ``metadata.version`` 1..21), and then
heartbeats every :data:`HEARTBEAT_INTERVAL_MS` to the node it believes is the active
controller, reporting as its metadata offset the offset of that node's image (it "reads" the
log there). NOT_CONTROLLER sends the next request to the leader the answer names, or to the
next node; a request with no answer in :data:`REQUEST_TIMEOUT_MS` was lost, and the next goes
to the next node; STALE_BROKER_EPOCH (a stale epoch, or a registration the controller does not
know) makes it register again.

A crashed broker sends nothing (its session runs out and the controller fences it); a
restarted one registers with a new incarnation id; a broker in controlled shutdown heartbeats
with ``want_shut_down`` until the controller says it may stop, then stops; an isolated one
loses every request and answer.
"""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kraft.controller.errors import NotControllerError
from kraft.controller.result import ControllerApiError
from kraft.protocol.controller_messages import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    Listener,
    RegistrationFeature,
)
from kraft.protocol.errors import Errors
from kraft.simulation.errors import SimulationError

if TYPE_CHECKING:
    from kraft.controller.quorum_controller import QuorumController
    from kraft.simulation.controller import ControllerSim
    from kraft.simulation.node import SimNode

__all__ = [
    "BROKER_ID_BASE",
    "HEARTBEAT_INTERVAL_MS",
    "REQUEST_TIMEOUT_MS",
    "BrokerFleet",
    "SimBroker",
]

#: Broker ``k`` has id ``BROKER_ID_BASE + k``: never a node's id in a simulated cluster.
BROKER_ID_BASE = 100
#: Kafka's ``broker.heartbeat.interval.ms``.
HEARTBEAT_INTERVAL_MS = 2_000
#: How long a broker waits for an answer before it calls the request lost and tries the next
#: node (a heartbeat interval and a half: a session of 9 s survives one lost request).
REQUEST_TIMEOUT_MS = 3_000
#: The metadata.version levels a simulated broker supports (3.9-IV0 is 21).
METADATA_VERSION_RANGE = (1, 21)


class SimBroker:
    """One simulated broker's process state (see the module docstring)."""

    __slots__ = (
        "broker_id",
        "epoch",
        "fenced",
        "generation",
        "in_flight_at",
        "incarnation_id",
        "isolated",
        "log_dir",
        "rack",
        "request_seq",
        "running",
        "target",
        "want_shut_down",
    )

    def __init__(self, broker_id: int, rack: str, target: int) -> None:
        self.broker_id = broker_id
        self.rack = rack
        #: The node it believes is the active controller.
        self.target = target
        self.incarnation_id = uuid.UUID(int=0)
        self.log_dir = uuid.UUID(int=0)
        #: Its registration's epoch; -1 while it is not registered.
        self.epoch = -1
        #: Whether the controller last said it is fenced.
        self.fenced = True
        self.running = False
        self.isolated = False
        self.want_shut_down = False
        #: Bumped at each start and stop: ticks and answers of an older process are ignored.
        self.generation = 0
        #: When the request awaiting an answer was sent (-1: none awaits).
        self.in_flight_at = -1
        self.request_seq = 0

    def registration(self, cluster_id: str) -> BrokerRegistrationRequest:
        return BrokerRegistrationRequest(
            broker_id=self.broker_id,
            cluster_id=cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=(Listener(name="PLAINTEXT", host=f"broker-{self.broker_id}", port=9092),),
            features=(
                RegistrationFeature(
                    name="metadata.version",
                    min_supported_version=METADATA_VERSION_RANGE[0],
                    max_supported_version=METADATA_VERSION_RANGE[1],
                ),
            ),
            rack=self.rack,
            log_dirs=(self.log_dir,),
        )

    def __repr__(self) -> str:
        state = "running" if self.running else "down"
        return (
            f"SimBroker({self.broker_id}, {state}, epoch={self.epoch}, fenced={self.fenced}, "
            f"target={self.target})"
        )


class BrokerFleet:
    """The brokers of a controller-mode cluster (``cluster.controller_sim.brokers``)."""

    def __init__(self, sim: ControllerSim, count: int) -> None:
        self._sim = sim
        self.brokers: dict[int, SimBroker] = {
            BROKER_ID_BASE + k: SimBroker(BROKER_ID_BASE + k, f"r{k % 3}", 1)
            for k in range(1, count + 1)
        }

    def broker(self, broker_id: int) -> SimBroker:
        try:
            return self.brokers[broker_id]
        except KeyError:
            raise SimulationError(
                f"no broker {broker_id}: the cluster has brokers {sorted(self.brokers)}"
            ) from None

    def start_all(self) -> None:
        for broker in self.brokers.values():
            self.start(broker)

    # -- the broker's process -------------------------------------------------------------------
    def start(self, broker: SimBroker) -> None:
        rand = self._sim.cluster.rand
        broker.generation += 1
        broker.running = True
        broker.incarnation_id = uuid.UUID(int=rand.getrandbits(128), version=4)
        broker.log_dir = uuid.UUID(int=rand.getrandbits(128), version=4)
        broker.epoch = -1
        broker.fenced = True
        broker.want_shut_down = False
        broker.in_flight_at = -1
        generation = broker.generation
        cluster = self._sim.cluster

        def tick() -> None:
            if broker.generation != generation:
                return
            self._step(broker)
            cluster.call_at(cluster.clock.now_ms() + HEARTBEAT_INTERVAL_MS, tick)

        cluster.call_at(cluster.clock.now_ms(), tick)

    def crash(self, broker: SimBroker) -> None:
        broker.running = False
        broker.generation += 1

    def restart(self, broker: SimBroker) -> None:
        if broker.running:
            self.crash(broker)
        self.start(broker)

    def shutdown(self, broker: SimBroker) -> None:
        if not broker.running or broker.want_shut_down:
            return
        broker.want_shut_down = True
        if broker.in_flight_at == -1:
            self._step(broker)

    # -- requests -------------------------------------------------------------------------------
    def _step(self, broker: SimBroker) -> None:
        """Register or heartbeat, unless a request still awaits its answer."""
        cluster = self._sim.cluster
        now = cluster.clock.now_ms()
        if broker.in_flight_at != -1:
            if now - broker.in_flight_at < REQUEST_TIMEOUT_MS:
                return
            self._next_target(broker)  # lost: that node may be down or cut off
        broker.request_seq += 1
        broker.in_flight_at = now
        if broker.isolated:
            return  # the request is lost on the way
        if broker.epoch < 0:
            self._send(broker, "register_broker", self._register)
        else:
            self._send(broker, "heartbeat", self._heartbeat)

    def _next_target(self, broker: SimBroker) -> None:
        ids = sorted(self._sim.cluster.nodes)
        broker.target = (
            ids[(ids.index(broker.target) + 1) % len(ids)] if broker.target in ids else ids[0]
        )

    def _register(
        self, node: SimNode, controller: QuorumController, broker: SimBroker
    ) -> concurrent.futures.Future[Any]:
        request = broker.registration(self._sim.config.cluster_id)
        return controller.register_broker(request, timeout_ms=REQUEST_TIMEOUT_MS)

    def _heartbeat(
        self, node: SimNode, controller: QuorumController, broker: SimBroker
    ) -> concurrent.futures.Future[Any]:
        image = node.image
        request = BrokerHeartbeatRequest(
            broker_id=broker.broker_id,
            broker_epoch=broker.epoch,
            current_metadata_offset=-1 if image is None else image.provenance.offset,
            want_shut_down=broker.want_shut_down,
        )
        return controller.process_broker_heartbeat(request, timeout_ms=REQUEST_TIMEOUT_MS)

    def _send(
        self,
        broker: SimBroker,
        kind: str,
        make: Callable[[SimNode, QuorumController, SimBroker], concurrent.futures.Future[Any]],
    ) -> None:
        cluster = self._sim.cluster
        sent_at = cluster.clock.now_ms()
        generation, seq, node_id = broker.generation, broker.request_seq, broker.target

        def on_answer(done: concurrent.futures.Future[Any]) -> None:
            if broker.generation != generation or broker.request_seq != seq or broker.isolated:
                return  # an older process's or request's, or lost on the way in
            broker.in_flight_at = -1
            self._answered(broker, kind, node_id, sent_at, done)

        self._sim.send(
            broker.broker_id,
            node_id,
            lambda node, controller: make(node, controller, broker),
            on_answer,
        )

    def _answered(
        self,
        broker: SimBroker,
        kind: str,
        node_id: int,
        sent_at: int,
        done: concurrent.futures.Future[Any],
    ) -> None:
        cluster = self._sim.cluster
        node = cluster.nodes[node_id]
        error = done.exception()
        if kind == "register_broker":
            outcome = "ok" if error is None else _error_name(error)
            cluster._emit_node(
                node,
                "controller_op_completed",
                latency_ms=cluster.clock.now_ms() - sent_at,
                details={"op": "register_broker", "outcome": outcome},
            )
        if isinstance(error, NotControllerError):
            leader = error.leader_id
            if leader is not None and leader != node_id and leader in cluster.nodes:
                broker.target = leader
                self._step(broker)  # at once, to the leader it was told of
            else:
                self._next_target(broker)
            return
        if error is not None:
            # The controller answers an unknown broker's heartbeat so too.
            if (
                isinstance(error, ControllerApiError)
                and error.error_code == Errors.STALE_BROKER_EPOCH
            ):
                broker.epoch = -1
                broker.fenced = True
            return  # the next tick tries again
        reply = done.result()
        if kind == "register_broker":
            broker.epoch = reply.epoch
            broker.fenced = True
            cluster._emit_node(
                node,
                "broker_registered",
                details={"broker": broker.broker_id, "broker_epoch": broker.epoch},
            )
            self._step(broker)  # the first heartbeat goes at once, as Kafka's broker sends it
            return
        broker.fenced = reply.is_fenced
        if broker.want_shut_down and reply.should_shut_down:
            self.crash(broker)  # the controlled shutdown is over: the process exits


def _error_name(error: BaseException) -> str:
    if isinstance(error, ControllerApiError):
        return Errors.from_code(error.error_code).name
    return Errors.REQUEST_TIMED_OUT.name  # not run: the controller's queue timed it out
