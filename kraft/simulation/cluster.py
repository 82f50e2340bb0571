"""``Cluster``: every node's real Raft client in one thread, in virtual time, under faults.

The scheduler is a heap of ``(time_ms, sequence, kind, a, b)``. A node is polled when a message
reaches it or when the deadline its last ``poll()`` returned comes, never on a fixed tick, and
the clock jumps straight to the next event. One ``random.Random(seed)`` drives the network, the
workload and every client's timers, so a seed (and the same calls on the cluster) always gives
the same run, byte for byte: see :attr:`Cluster.digest`. Messages go through a
:class:`~kraft.simulation.routing.MessageRouter`; the fault operations (``kill``, ``partition``,
...) come from :class:`~kraft.simulation.faults.FaultInjection`.

Under ``kraft_version=1`` (KIP-853) the voters live in the logs: every initial voter's disk is
formatted with the bootstrap checkpoint, as ``kraft storage format --initial-controllers``
writes it, and :meth:`Cluster.add_voter` / :meth:`Cluster.remove_voter` change the set through
the leader, as an admin client would (:mod:`kraft.simulation.admin`).

After every event the :class:`~kraft.simulation.invariants.InvariantChecker` runs; a violation
is recorded in :attr:`Cluster.violations`, logged as an event and, with ``stop_on_violation``
(the default), raised as :class:`InvariantViolationError` carrying a report: seed, simulated time,
invariant, nodes, the last events and the command that replays the run.
"""

from __future__ import annotations

import heapq
import logging
import random
import traceback
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kraft.common.clock import ManualClock
from kraft.common.uuids import ZERO_UUID
from kraft.config import ConfigError, QuorumConfig
from kraft.errors import KraftError
from kraft.log.base import SnapshotRetention
from kraft.log.memory import MemoryLog
from kraft.log.quorum_state import MemoryQuorumStateStore
from kraft.protocol.api import SUPPORTED_KRAFT_VERSIONS
from kraft.protocol.envelope import OutboundResponse
from kraft.protocol.messages import AddRaftVoterRequest, RemoveRaftVoterRequest
from kraft.protocol.messages import Endpoint as Listener
from kraft.raft.channel import DequeMessageQueue
from kraft.raft.client import KafkaRaftClient
from kraft.raft.futures import RaftFuture
from kraft.raft.listeners import Batch
from kraft.raft.states import NO_DEADLINE, ReplicaKey
from kraft.raft.voter_history import write_bootstrap_checkpoint
from kraft.raft.voter_set import DEFAULT_LISTENER, VoterNode, VoterSet
from kraft.record.offsets import OffsetAndEpoch
from kraft.simulation.admin import AdminClient, VoterChange
from kraft.simulation.controller import ControllerOperations, controller_sim
from kraft.simulation.errors import SimulationError
from kraft.simulation.events import Event, EventLog
from kraft.simulation.faults import FaultInjection, FaultRecord
from kraft.simulation.invariants import InvariantChecker, Violation
from kraft.simulation.kv_workload import KvWorkload
from kraft.simulation.network import LinkConfig, SimNetwork
from kraft.simulation.node import (
    ReplicatedCounter,
    SimNode,
    SimSerde,
    sim_endpoint,
    top_leader,
)
from kraft.simulation.operations import ClientOperations
from kraft.simulation.routing import MessageRouter, Transit
from kraft.simulation.workload import CounterWorkload

__all__ = [
    "Cluster",
    "InvariantViolationError",
    "SimulationError",
    "replay_command",
    "sim_config",
]

logger = logging.getLogger(__name__)

#: Wall-clock milliseconds at simulated time 0 (record timestamps only): 2026-01-01T00:00Z.
SIM_WALL_START_MS = 1_767_225_600_000
#: Polls of one node at one instant before the simulator calls it a livelock.
MAX_SPINS = 10_000
#: Events at one instant before the simulator calls it a livelock.
MAX_EVENTS_AT_ONE_TIME = 200_000

_POLL, _DELIVER, _CALL = 0, 1, 2


class InvariantViolationError(KraftError):
    """An invariant failed; ``report`` says where, when, and how to replay it."""

    def __init__(self, violation: Violation, report: str) -> None:
        super().__init__(report)
        self.violation = violation
        self.report = report


def replay_command(
    scenario: str, seed: int, *, suppress: Sequence[int] = (), message_events: bool = True
) -> str:
    """The ``kraft sim run`` command line that runs a scenario and seed again, byte for byte."""
    command = f"kraft sim run --scenario {scenario} --seed {seed}"
    if suppress:
        command += " --suppress " + ",".join(map(str, suppress))
    if not message_events:
        command += " --no-message-events"
    return command


#: The counter's snapshot interval, in committed offsets (Kafka's simulation: "more than 10").
SNAPSHOT_EVERY = 100
#: What each simulated log keeps: the two latest snapshots and the log from the older one;
#: no byte or time limit (the count alone keeps logs short, so lagging nodes need snapshots).
SIM_RETENTION = SnapshotRetention(retained_snapshots=2, retention_bytes=None, retention_ms=None)
#: How often simulated clients apply the retention (Kafka's default is 60 s).
SIM_CLEAN_INTERVAL_MS = 1_000
#: AddRaftVoter's ``timeout_ms``, and how long the admin waits for any change's answer (plus
#: a request timeout). Kafka's admin client waits 30 s.
VOTER_CHANGE_TIMEOUT_MS = 30_000


def sim_config(voter_ids: Iterable[int], base: QuorumConfig | None = None) -> QuorumConfig:
    """``base`` (Kafka's defaults when None) with the simulated voters' endpoints."""
    voters = {i: sim_endpoint(i) for i in voter_ids}
    if base is None:
        return QuorumConfig(voters=voters, log_clean_interval_ms=SIM_CLEAN_INTERVAL_MS)
    if base.voters and set(base.voters) != set(voters):
        raise ConfigError(
            f"the config names voters {sorted(base.voters)}, but the cluster's voters are "
            f"{sorted(voters)}"
        )
    return replace(base, voters=voters)


class Cluster(FaultInjection, ClientOperations, ControllerOperations, CounterWorkload):
    """A simulated quorum: ``voters`` voters (ids 1..voters) and ``observers`` observers
    (the ids after), all started. See docs/simulation.md for the whole API.

    ``event_log`` is a path for the JSON Lines event log (nothing is written without it; the
    events are still counted and hashed). ``message_events=False`` leaves message events out
    (faster, smaller logs). ``suppress_faults`` skips the faults with those indices (for
    ``kraft sim shrink``).

    Snapshots: every node's counter writes one each ``snapshot_every`` committed offsets (None:
    never), and each log keeps ``retention`` (default: the two latest snapshots, the log from
    the older one on); the clients clean their logs every ``log_clean_interval_ms`` of the
    config (1 s unless a config is given).

    ``kraft_version``: 0, a static quorum (the voters come from the configuration); 1, the
    voters live in the log (KIP-853): each voter gets a directory id (drawn from the seed) and
    its disk the bootstrap checkpoint naming voters 1..voters, and every node's configuration
    names no voters, only bootstrap servers (the voters when it starts).

    ``controller=True``: each node runs a controller instead of the counter, with ``brokers``
    simulated brokers (:mod:`kraft.simulation.controller`).
    """

    def __init__(
        self,
        seed: int = 0,
        voters: int = 3,
        observers: int = 0,
        config: QuorumConfig | None = None,
        *,
        scenario: str = "adhoc",
        event_log: Path | str | None = None,
        message_events: bool = True,
        stop_on_violation: bool = True,
        suppress_faults: Iterable[int] = (),
        network: LinkConfig | None = None,
        snapshot_every: int | None = SNAPSHOT_EVERY,
        retention: SnapshotRetention | None = None,
        kraft_version: int = 0,
        controller: bool = False,
        brokers: int = 0,
    ) -> None:
        if voters < 1:
            raise ConfigError(f"a cluster needs at least one voter, got {voters}")
        if observers < 0:
            raise ConfigError(f"negative number of observers {observers}")
        if kraft_version not in SUPPORTED_KRAFT_VERSIONS:
            raise ConfigError(
                f"kraft_version must be one of {SUPPORTED_KRAFT_VERSIONS}, not {kraft_version}"
            )
        self.seed = seed
        self.scenario = scenario
        self.kraft_version = kraft_version
        self.rand = random.Random(seed)
        self.clock = ManualClock(0, SIM_WALL_START_MS)
        initial_voters = tuple(range(1, voters + 1))
        self.config = sim_config(initial_voters, config)
        self.network = SimNetwork(self.rand, network)
        self.snapshot_every = snapshot_every
        self.retention = retention or SIM_RETENTION
        #: How many times each node's disk was formatted (a wipe formats it again).
        self._formats: dict[int, int] = {}
        self.nodes: dict[int, SimNode] = {
            i: SimNode(i, frozenset(initial_voters), self.retention)
            for i in range(1, voters + observers + 1)
        }
        bootstrap: VoterSet | None = None
        if kraft_version == 1:
            for node in self.nodes.values():
                node.directory_id = self._new_directory_id(node.node_id)
            bootstrap = VoterSet({i: self._voter_node(self.nodes[i]) for i in initial_voters})
            for i in initial_voters:
                write_bootstrap_checkpoint(self.nodes[i].log, 1, bootstrap, timestamp_ms=0)
        self.events = EventLog(
            f"{scenario}/{seed}",
            seed,
            scenario,
            None if event_log is None else Path(event_log),
        )
        self.message_events = message_events
        self._router = MessageRouter(
            self.nodes,
            self.network,
            self.events,
            self.clock,
            message_events=message_events,
            deliver_at=self._deliver_at,
            wake=self._wake,
            emit_node=self._emit_node,
            to_admin=self._to_admin,
        )
        self._admin = AdminClient(
            self.network,
            self.clock,
            self.config.request_timeout_ms,
            call_at=self.call_at,
            wake=self._wake,
            emit=self._emit,
        )
        self.stop_on_violation = stop_on_violation
        self.violations: list[Violation] = []
        self.faults: list[FaultRecord] = []
        self._suppress = frozenset(suppress_faults)
        self._heap: list[tuple[int, int, int, Any, Any]] = []
        self._seq = 0
        self.controller_sim = controller_sim(self, controller, brokers)
        self._serde = SimSerde() if self.controller_sim is None else self.controller_sim.serde
        self.checker = InvariantChecker(
            self.nodes, initial_voters, self.clock, self.network, bootstrap, self._serde
        )
        self._shutdowns: dict[int, Any] = {}
        #: Futures of client calls pending on each node (failed if it goes down).
        self._pending: dict[int, dict[int, RaftFuture[Any]]] = {}
        self._pending_seq = 0
        self._workload_generation = 0
        self.workload_rate = 0.0
        #: The kv workload, once started; :meth:`validate` checks its history.
        self.kv_workload: KvWorkload | None = None
        self._closed = False
        # kraft.version 0 logs stay byte for byte what they were before KIP-853.
        shape = {"voters": voters, "observers": observers}
        if kraft_version:
            shape["kraft_version"] = kraft_version
        shape.update({"brokers": brokers} if controller else {})
        self._emit(
            "run_started",
            details={
                **shape,
                "config": {
                    "election_timeout_ms": self.config.election_timeout_ms,
                    "fetch_timeout_ms": self.config.fetch_timeout_ms,
                    "append_linger_ms": self.config.append_linger_ms,
                    "fetch_max_wait_ms": self.config.fetch_max_wait_ms,
                    # The links every run starts with (a `network` fault changes them later).
                    "network": {
                        "latency_ms": list(self.network.default.latency_ms),
                        "drop": self.network.default.drop,
                        "duplicate": self.network.default.duplicate,
                        "reorder": self.network.default.reorder,
                    },
                },
            },
        )
        for node in self.nodes.values():
            self._start(node)
        self._check()

    # =========================================================================================
    # Reading the cluster
    # =========================================================================================
    @property
    def now_ms(self) -> int:
        """Simulated milliseconds since the start."""
        return self.clock.now_ms()

    @property
    def voter_ids(self) -> tuple[int, ...]:
        """The voters' ids: the static set under kraft.version 0; under 1, the latest voter
        set committed (as the invariants saw it commit)."""
        return self.checker.voter_ids

    @property
    def observer_ids(self) -> tuple[int, ...]:
        """Every other node's id."""
        voters = set(self.voter_ids)
        return tuple(i for i in self.nodes if i not in voters)

    @property
    def voter_changes(self) -> list[VoterChange]:
        """Every answer to :meth:`add_voter` and :meth:`remove_voter`, in the order they came."""
        return self._admin.changes

    def node(self, node_id: int) -> SimNode:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise SimulationError(
                f"no node {node_id}: the cluster has nodes {sorted(self.nodes)}"
            ) from None

    def leader(self) -> int | None:
        """The running node that is Leader in the highest epoch, if any."""
        best = top_leader(self.nodes.values())
        return None if best is None else best.node_id

    @property
    def running(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.client is not None]

    @property
    def digest(self) -> str:
        """SHA-256 of the event log so far: equal for equal runs."""
        return self.events.digest

    # =========================================================================================
    # Running
    # =========================================================================================
    def run_for(self, ms: int) -> None:
        """Run ``ms`` simulated milliseconds."""
        self.run_until(_never, ms)

    def run_until(self, predicate: Callable[[], bool], timeout_ms: int) -> bool:
        """Run until ``predicate()`` holds (checked after every event) or ``timeout_ms`` pass.

        Returns whether the predicate held. Raises :class:`InvariantViolationError` on a violation
        when ``stop_on_violation``.
        """
        if timeout_ms < 0:
            raise ValueError(f"negative timeout {timeout_ms}")
        clock = self.clock
        end = clock.now_ms() + timeout_ms
        heap = self._heap
        same_time = 0
        while True:
            if predicate():
                return True
            if not heap or heap[0][0] > end:
                clock.advance(max(0, end - clock.now_ms()))
                return bool(predicate())
            at, _, kind, a, b = heapq.heappop(heap)
            now = clock.now_ms()
            if at > now:
                clock.advance(at - now)
                same_time = 0
            else:
                same_time += 1
                if same_time > MAX_EVENTS_AT_ONE_TIME:
                    raise SimulationError(
                        f"livelock: {same_time} events at {at} ms without time passing"
                    )
            if kind == _POLL:
                node = self.nodes[a]
                if b != node.poll_generation:
                    continue
                node.poll_at = -1
                if node.client is None or node.paused:
                    continue
                self._activate(node)
                self._check(node)
            elif kind == _DELIVER:
                # A delivery only queues the message: the poll it wakes is checked.
                self._router.deliver(a)
            else:
                a()
                self._check()

    def _push(self, at: int, kind: int, a: Any, b: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, kind, a, b))

    def _wake(self, node: SimNode, at: int | None = None) -> None:
        """Make sure ``node`` is polled at ``at`` (now by default) or earlier."""
        when = self.clock.now_ms() if at is None else at
        if node.poll_at != -1 and node.poll_at <= when:
            return
        node.poll_generation += 1
        node.poll_at = when
        self._push(when, _POLL, node.node_id, node.poll_generation)

    def _deliver_at(self, at: int, transit: Transit) -> None:
        self._push(at, _DELIVER, transit)

    def call_at(self, at_ms: int, action: Callable[[], None]) -> None:
        """Run ``action()`` at simulated time ``at_ms`` (an event like any other)."""
        self._push(max(at_ms, self.clock.now_ms()), _CALL, action)

    def every(self, period_ms: tuple[int, int], action: Callable[[], bool]) -> None:
        """Run ``action()`` every ``period_ms`` (a random span in [lo, hi]) while it returns
        True."""
        lo, hi = period_ms

        def tick() -> None:
            if action():
                self.call_at(self.clock.now_ms() + self.rand.randint(lo, hi), tick)

        self.call_at(self.clock.now_ms() + self.rand.randint(lo, hi), tick)

    # =========================================================================================
    # Nodes: start, poll, stop, report
    # =========================================================================================
    def _start(self, node: SimNode) -> None:
        node.incarnation += 1
        node.queue = DequeMessageQueue()
        node.channel.outbox.clear()
        node.request_aliases.clear()
        node.vote_kinds.clear()
        node_id = node.node_id
        config = self.config
        if self.kraft_version == 1:
            # The operator keeps the bootstrap servers current: the voters at each start.
            node.bootstrap_servers = tuple(sim_endpoint(i) for i in self.voter_ids)
            config = replace(config, voters={}, bootstrap_servers=node.bootstrap_servers)
        else:
            node.bootstrap_servers = config.bootstrap_servers
        endpoint = sim_endpoint(node_id)
        client: KafkaRaftClient[Any] = KafkaRaftClient(
            local_id=node_id,
            config=config,
            log=node.log,
            store=node.store,
            channel=node.channel,
            queue=node.queue,
            clock=self.clock,
            rand=self.rand,
            serde=self._serde,
            local_directory_id=node.directory_id,
            local_endpoints=((DEFAULT_LISTENER, endpoint.host, endpoint.port),),
        )
        node.client = client
        self._attach(node, client)
        try:
            client.initialize()
        except Exception as exc:
            node.client = None
            self._fatal(node, exc)
            return
        self._emit_node(node, "node_started", details={"incarnation": node.incarnation})
        self._observe(node)
        self._router.route(node)
        self._wake(node)

    def _attach(self, node: SimNode, client: KafkaRaftClient[Any]) -> None:
        """Register the node's state machines: the counter, or the controller and loader."""
        if self.controller_sim is not None:
            self.controller_sim.attach(node, client)
            return
        node.counter = ReplicatedCounter(
            node.node_id,
            on_commit=lambda batch, value: self._on_commit(node, batch, value),
            on_problem=lambda invariant, message: self.checker.report(
                invariant, (node.node_id,), message
            ),
            on_snapshot=lambda kind, snapshot_id, value: self._on_snapshot(
                node, kind, snapshot_id, value
            ),
            snapshot_every=self.snapshot_every,
        )
        node.counter.client = client
        client.register(node.counter)

    def _activate(self, node: SimNode) -> None:
        client = node.client
        assert client is not None
        spins = 0
        try:
            while True:
                delay = client.poll()
                if node.channel.outbox:
                    self._router.route(node)
                if delay > 0 or node.client is None:
                    break
                spins += 1
                if spins > MAX_SPINS:
                    raise SimulationError(
                        f"livelock: node {node.node_id} polled {spins} times at "
                        f"{self.clock.now_ms()} ms without time passing"
                    )
        except SimulationError:
            raise
        except Exception as exc:
            self._fatal(node, exc)
            return
        if self.controller_sim is not None:
            self.controller_sim.run(node)
        self._observe(node)
        shutdown = self._shutdowns.get(node.node_id)
        if shutdown is not None and shutdown.done():
            self._finish_shutdown(node)
            return
        if delay < NO_DEADLINE:
            self._wake(node, self.clock.now_ms() + delay)

    def _fatal(self, node: SimNode, exc: BaseException) -> None:
        """A client raised: that is a bug in the client, reported as a violation."""
        where = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        logger.error("node %d raised %s", node.node_id, where, exc_info=exc)
        self.checker.report("no_exception", (node.node_id,), f"node {node.node_id} raised {where}")
        self._crash(node)

    def _observe(self, node: SimNode) -> None:
        client = node.client
        if client is None:
            return
        role = client.role
        epoch = client.epoch
        if role != node.last_role or epoch != node.last_epoch:
            self._emit_node(
                node,
                "state_changed",
                details={
                    "from_role": node.last_role,
                    "from_epoch": node.last_epoch,
                },
            )
            node.last_role = role
            node.last_epoch = epoch

    def _crash(self, node: SimNode) -> None:
        """The node's process is gone: the client, its mail, its connections, unflushed data."""
        node.remember_voters()
        node.log.crash()
        self._stop(node, "crashed")

    def _stop(self, node: SimNode, how: str) -> None:
        """The node is down (``how``: crashed or shutdown): no client, no pending poll, its
        connections reset (in-flight messages to and from it are dropped)."""
        node.client = None
        node.paused = False
        node.poll_generation += 1
        node.poll_at = -1
        node.incarnation += 1
        node.last_role, node.last_epoch = "Down", -1
        self._shutdowns.pop(node.node_id, None)
        self.checker.node_reset(node.node_id, wiped=False)
        self._emit_node(node, "state_changed", details={"from_role": how})
        if self.controller_sim is not None:
            self.controller_sim.detach(node, how)
        self._fail_pending(node)

    def _finish_shutdown(self, node: SimNode) -> None:
        client = node.client
        assert client is not None
        node.remember_voters()
        self._fail_pending(node)  # before close() fails them its own way: one error for both
        client.close()  # flushes the log
        self._stop(node, "shutdown")

    def _on_snapshot(
        self, node: SimNode, kind: str, snapshot_id: OffsetAndEpoch, value: int
    ) -> None:
        self.checker.on_snapshot(node.node_id, snapshot_id, value)
        self._emit_node(
            node,
            f"snapshot_{kind}",
            offset=snapshot_id.offset,
            details={
                "snapshot_epoch": snapshot_id.epoch,
                "value": value,
                "log_start_offset": node.log.log_start_offset,
            },
        )

    def _on_commit(self, node: SimNode, batch: Batch[Any], value: int | None) -> None:
        self.checker.on_commit(node.node_id, batch, value)
        held = node.log.held_batches(batch.base_offset, batch.base_offset + 1)
        checksum = held[0][2].crc if held and held[0][2] is not None else -1
        client = node.client
        self.events.emit(
            self.clock.now_ms(),
            "batch_committed",
            node=node.node_id,
            epoch=batch.epoch,
            leader=-1 if client is None or client.leader_id is None else client.leader_id,
            role=node.last_role if client is None else client.role,
            offset=batch.last_offset,
            base_offset=batch.base_offset,
            checksum=checksum,
            count=len(batch.records),
            latency_ms=max(0, self.clock.wall_ms() - batch.append_timestamp_ms),
            high_watermark=node.log.high_watermark,
        )

    # =========================================================================================
    # Invariants and events
    # =========================================================================================
    def _check(self, only: SimNode | None = None) -> None:
        problems = self.checker.check(only)
        if problems:
            self._violations(problems)

    def _violations(self, problems: list[tuple[str, tuple[int, ...], str]]) -> None:
        first: Violation | None = None
        for invariant, nodes, message in problems:
            violation = Violation(self.clock.now_ms(), invariant, nodes, message)
            self.violations.append(violation)
            logger.error("invariant violated: %s", violation)
            self._emit(
                "invariant_violated",
                details={
                    "invariant": invariant,
                    "nodes": list(nodes),
                    "message": message,
                },
            )
            first = first or violation
        if first is not None and self.stop_on_violation:
            raise InvariantViolationError(first, self.report(first))

    def report(self, violation: Violation) -> str:
        """What a failed run prints: the violation, the cluster, the last events, the replay."""
        lines = [
            f"invariant {violation.invariant} violated at {violation.time_ms} ms "
            f"(seed {self.seed}, scenario {self.scenario})",
            f"  {violation.message}",
            f"  nodes involved: {', '.join(map(str, violation.nodes)) or '-'}",
            "  cluster:",
        ]
        lines += [f"    {node!r}" for node in self.nodes.values()]
        lines.append(f"  the last {len(self.events.recent)} events:")
        lines += [f"    {_describe(event)}" for event in self.events.recent]
        lines.append(f"  replay: {self.replay_command()}")
        return "\n".join(lines)

    def replay_command(self) -> str:
        if self.scenario == "adhoc":
            return f"Cluster(seed={self.seed}, ...) with the same calls"
        return replay_command(
            self.scenario,
            self.seed,
            suppress=sorted(self._suppress),
            message_events=self.message_events,
        )

    def _emit(self, kind: str, **fields: Any) -> Event:
        return self.events.emit(self.clock.now_ms(), kind, **fields)

    def _emit_node(self, node: SimNode, kind: str, **fields: Any) -> Event:
        client = node.client
        if client is not None:
            leader = client.leader_id
            fields.setdefault("epoch", client.epoch)
            fields.setdefault("leader", -1 if leader is None else leader)
            fields.setdefault("role", client.role)
        else:
            fields.setdefault("role", "Down")
        return self.events.emit(
            self.clock.now_ms(),
            kind,
            node=node.node_id,
            log_end_offset=node.log.log_end_offset,
            high_watermark=node.log.high_watermark,
            **fields,
        )

    # =========================================================================================
    # Disks and membership (KIP-853)
    # =========================================================================================
    def _new_directory_id(self, node_id: int) -> uuid.UUID:
        """A new directory id for ``node_id``'s disk: drawn from the seed, the node and how
        many times its disk was formatted, never from the run's random source (which would
        shift every timer after it)."""
        formats = self._formats.get(node_id, 0) + 1
        self._formats[node_id] = formats
        draw = random.Random(f"kraft-sim-directory:{self.seed}:{node_id}:{formats}")
        return uuid.UUID(int=draw.getrandbits(128), version=4)

    def _voter_node(self, node: SimNode) -> VoterNode:
        """``node`` as a voter: its replica key, its listener, kraft.version 0 to 1."""
        endpoint = sim_endpoint(node.node_id)
        return VoterNode(
            ReplicaKey(node.node_id, node.directory_id),
            ((DEFAULT_LISTENER, endpoint.host, endpoint.port),),
            (min(SUPPORTED_KRAFT_VERSIONS), max(SUPPORTED_KRAFT_VERSIONS)),
        )

    def _format(self, node: SimNode) -> None:
        """Give ``node`` an empty disk (log and quorum state), with a new directory id under
        kraft.version 1 (``kraft storage format --no-initial-controllers``)."""
        node.log = MemoryLog(self.retention)
        node.store = MemoryQuorumStateStore(f"node-{node.node_id}")
        if self.kraft_version == 1:
            node.directory_id = self._new_directory_id(node.node_id)

    def add_node(self) -> int:
        """Start a brand-new observer with an empty disk under the next free id; it finds the
        leader through its bootstrap servers (the voters) and fetches the log, or the latest
        snapshot when the leader's log starts past 0. Its id."""
        node_id = max(self.nodes) + 1
        node = SimNode(node_id, frozenset(self.voter_ids), self.retention)
        self._format(node)
        self.nodes[node_id] = node
        self.checker.node_added(node_id)
        self._start(node)
        return node_id

    def add_voter(self, node_id: int) -> bool:
        """Ask the leader to make ``node_id`` a voter (AddRaftVoter with its id, directory id
        and listener, as ``kafka-metadata-quorum add-controller`` does). False when there is
        no leader to ask; the answer lands in :attr:`voter_changes`."""
        node = self.node(node_id)
        endpoint = sim_endpoint(node_id)
        return self._change_voters(
            "add",
            node_id,
            AddRaftVoterRequest(
                voter_id=node_id,
                voter_directory_id=node.directory_id or ZERO_UUID,
                listeners=(Listener(DEFAULT_LISTENER, endpoint.host, endpoint.port),),
                timeout_ms=VOTER_CHANGE_TIMEOUT_MS,
            ),
        )

    def remove_voter(self, node_id: int) -> bool:
        """Ask the leader to remove voter ``node_id`` (RemoveRaftVoter with its id and the
        directory id the committed voter set names for it, as an operator reads it from
        ``describe``; the node's own when the set does not name it). False when there is no
        leader to ask; the answer lands in :attr:`voter_changes`."""
        node = self.node(node_id)
        voters = self.checker.voter_checks
        key = None if voters is None else voters.latest.key(node_id)
        directory_id = node.directory_id if key is None else key.directory_id
        return self._change_voters(
            "remove",
            node_id,
            RemoveRaftVoterRequest(voter_id=node_id, voter_directory_id=directory_id or ZERO_UUID),
        )

    def _change_voters(
        self, kind: str, node_id: int, body: AddRaftVoterRequest | RemoveRaftVoterRequest
    ) -> bool:
        leader_id = self.leader()
        if leader_id is None:
            return False
        self._admin.send(kind, node_id, self.nodes[leader_id], body, VOTER_CHANGE_TIMEOUT_MS)
        return True

    def _to_admin(self, node: SimNode, response: OutboundResponse) -> None:
        self._admin.response_sent(node, response)

    # =========================================================================================
    # The kv workload (the counter's is CounterWorkload's)
    # =========================================================================================
    def start_kv_workload(self, **options: Any) -> KvWorkload:
        """Start the kv workload's clients (``options``: :class:`KvWorkload`'s); at the end
        :meth:`validate` checks that what they saw is linearizable."""
        self._counter_only()
        if self.kv_workload is not None:
            raise SimulationError("a cluster runs one kv workload")
        self.kv_workload = KvWorkload(self, **options)
        self.kv_workload.start()
        return self.kv_workload

    # =========================================================================================
    # The end
    # =========================================================================================
    def validate(self) -> list[Violation]:
        """The end-of-run checks; every violation of the whole run."""
        leader_id = self.leader()
        problems = self.checker.validate(None if leader_id is None else self.nodes[leader_id])
        if self.kv_workload is not None:
            problems += self.kv_workload.problems()
        self._emit(
            "invariants_checked",
            details={
                "checks": self.checker.checks,
                "violations": len(self.violations) + len(problems),
            },
        )
        if problems:
            self._violations(problems)
        return list(self.violations)

    def close(self) -> None:
        """Write the last event and close the event log (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._emit(
            "run_finished",
            details={
                "violations": len(self.violations),
                "events": self.events.count + 1,
                "faults": len(self.faults),
            },
        )
        self.events.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Cluster(seed={self.seed}, voters={len(self.voter_ids)}, "
            f"observers={len(self.observer_ids)}, now_ms={self.now_ms}, leader={self.leader()})"
        )


def _never() -> bool:
    return False


def _describe(event: Event) -> str:
    parts = [f"{event.time_ms:>8} ms", event.kind]
    if event.node != -1:
        parts.append(f"node={event.node}")
    if event.peer != -1:
        parts.append(f"peer={event.peer}")
    if event.message:
        parts.append(event.message)
    if event.role:
        parts.append(f"{event.role}@{event.epoch}")
    if event.offset != -1:
        parts.append(f"offset={event.offset}")
    if event.details:
        parts.append(str(event.details))
    return " ".join(parts)
