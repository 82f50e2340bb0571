"""``LocalCluster``: a few real clients wired together in memory, elections and replication end
to end in virtual time; with ``kraft_version=1``, voters that change (KIP-853)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from kraft.common.clock import ManualClock
from kraft.common.uuids import ZERO_UUID
from kraft.config import QuorumConfig
from kraft.errors import IllegalStateError
from kraft.log.memory import MemoryLog
from kraft.log.quorum_state import MemoryQuorumStateStore
from kraft.protocol.envelope import InboundRequest, InboundResponse
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    AddRaftVoterResponse,
    RemoveRaftVoterResponse,
    Request,
)
from kraft.raft.channel import DequeMessageQueue
from kraft.raft.client import KafkaRaftClient
from kraft.raft.voter_history import write_bootstrap_checkpoint
from kraft.record.serde import BytesSerde, RecordSerde
from kraft.testing.channel import MockNetworkChannel
from kraft.testing.listener import RecordingListener
from kraft.testing.messages import (
    add_voter_request,
    remove_voter_request,
    replica_key,
    voter_endpoints,
    voter_node,
    voter_set,
)

__all__ = ["LocalCluster"]

T = TypeVar("T")

#: The source of the admin's requests (:meth:`LocalCluster.add_voter`): not a node.
_ADMIN = -1


class LocalCluster(Generic[T]):
    """Real clients of a few voters (and observers), wired together in memory.

    Messages are delivered instantly, in the order sent, by :meth:`step`; time moves only in
    :meth:`run_for` / :meth:`run_until`, straight to the next deadline. Nodes can be
    disconnected (messages to and from them are dropped) and reconnected.
    """

    def __init__(
        self,
        voters: int = 3,
        observers: int = 0,
        *,
        seed: int = 0,
        serde: RecordSerde[T] | None = None,
        kraft_version: int = 0,
        **config_overrides: Any,
    ) -> None:
        self.clock = ManualClock()
        voter_ids = range(1, voters + 1)
        fields: dict[str, Any] = {"voters": voter_endpoints(voter_ids)}
        fields.update(config_overrides)
        self.config = QuorumConfig(**fields)
        self.kraft_version = kraft_version
        self.disconnected: set[int] = set()
        self.nodes: dict[int, KafkaRaftClient[T]] = {}
        self.channels: dict[int, MockNetworkChannel] = {}
        self.queues: dict[int, DequeMessageQueue] = {}
        self.logs: dict[int, MemoryLog] = {}
        self.listeners: dict[int, RecordingListener[T]] = {}
        #: The answers to the admin's requests, by correlation id.
        self.admin_responses: dict[int, Any] = {}
        self._next_admin_correlation_id = 1
        self._seed = seed
        self._serde: RecordSerde[Any] = BytesSerde() if serde is None else serde
        self._deadlines: dict[int, int] = {}
        for node_id in range(1, voters + observers + 1):
            self._start_node(node_id, voters if node_id <= voters else 0)

    def _start_node(self, node_id: int, initial_voters: int) -> None:
        """A node with an empty disk. Under kraft.version 1 it is formatted with the initial
        voters 1..``initial_voters`` (``--initial-controllers``), or with none
        (``--no-initial-controllers``)."""
        channel = MockNetworkChannel(first_correlation_id=node_id * 1_000_000)
        queue = DequeMessageQueue()
        log = MemoryLog()
        if self.kraft_version > 0:
            initial = voter_set(*range(1, initial_voters + 1)) if initial_voters else None
            write_bootstrap_checkpoint(log, self.kraft_version, initial, timestamp_ms=0)
        client: KafkaRaftClient[T] = KafkaRaftClient(
            local_id=node_id,
            local_directory_id=replica_key(node_id).directory_id,
            local_endpoints=voter_node(node_id).endpoints,
            config=self.config,
            log=log,
            store=MemoryQuorumStateStore(),
            channel=channel,
            queue=queue,
            clock=self.clock,
            rand=random.Random(self._seed * 1000 + node_id),
            serde=self._serde,
        )
        client.initialize()
        listener: RecordingListener[T] = RecordingListener()
        client.register(listener)
        self.nodes[node_id] = client
        self.channels[node_id] = channel
        self.queues[node_id] = queue
        self.logs[node_id] = log
        self.listeners[node_id] = listener
        self._deadlines[node_id] = self.clock.now_ms()

    def add_node(self) -> int:
        """Start a new node with an empty disk under the next free id (an observer: under
        kraft.version 1 formatted with no voters); return its id."""
        node_id = max(self.nodes) + 1
        self._start_node(node_id, 0)
        return node_id

    def leader(self) -> int | None:
        """The node that is leader in the highest epoch, if any."""
        leaders = [c for c in self.nodes.values() if c.is_leader]
        if not leaders:
            return None
        return max(leaders, key=lambda c: c.epoch).local_id

    def step(self) -> bool:
        """Poll every node that is due or has mail, then deliver what they sent.

        Returns whether anything happened.
        """
        now = self.clock.now_ms()
        busy = False
        for node_id, client in self.nodes.items():
            if self._deadlines[node_id] <= now or not self.queues[node_id].is_empty():
                self._deadlines[node_id] = now + client.poll()
                busy = True
        for node_id, channel in self.channels.items():
            for request in channel.drain_requests():
                busy = True
                destination = request.destination
                if self._connected(node_id, destination):
                    self.queues[destination].add(
                        InboundRequest(
                            request.correlation_id,
                            node_id,
                            replica_key(node_id).directory_id or ZERO_UUID,
                            None,
                            request.body,
                            now,
                        )
                    )
            for response in channel.drain_responses():
                busy = True
                destination = response.destination
                if destination == _ADMIN:
                    self.admin_responses[response.correlation_id] = response.body
                elif self._connected(node_id, destination):
                    self.queues[destination].add(
                        InboundResponse(
                            response.correlation_id,
                            node_id,
                            response.body,
                            now,
                        )
                    )
        return busy

    def _connected(self, a: int, b: int) -> bool:
        return b in self.nodes and a not in self.disconnected and b not in self.disconnected

    def _settle(self, max_steps: int = 10_000) -> None:
        for _ in range(max_steps):
            if not self.step():
                return
        raise IllegalStateError(f"the cluster did not settle in {max_steps} steps")

    def next_deadline_ms(self) -> int:
        """When the next node is due to poll (a driver of more than the clients, such as the
        controller tests' harness, moves the clock to the earliest of its own deadlines)."""
        return min(self._deadlines.values())

    def run_for(self, ms: int) -> None:
        """Run ``ms`` of virtual time."""
        self.run_until(lambda: False, ms)

    def run_until(self, predicate: Callable[[], bool], timeout_ms: int) -> bool:
        """Run until ``predicate()`` holds (checked whenever things settle) or the time is up."""
        end = self.clock.now_ms() + timeout_ms
        while True:
            self._settle()
            if predicate():
                return True
            now = self.clock.now_ms()
            if now >= end:
                return False
            next_deadline = self.next_deadline_ms()
            self.clock.advance(max(1, min(next_deadline, end) - now))

    def append(self, records: Sequence[T]) -> int | None:
        """Append through the current leader; the last offset, or None without a leader."""
        leader = self.leader()
        if leader is None:
            return None
        client = self.nodes[leader]
        offset = client.prepare_append(client.epoch, records)
        client.schedule_prepared_append()
        self._deadlines[leader] = self.clock.now_ms()
        return offset

    # -- voter changes (KIP-853) -------------------------------------------------------------
    def add_voter(self, node_id: int, timeout_ms: int = 30_000) -> str | None:
        """As an admin, ask the leader to add node ``node_id`` (its directory id and listener)
        and run until it answers; the error name (``"NONE"``: committed), or None when there
        is no leader or no answer within ``timeout_ms``."""
        response = self._admin_call(add_voter_request(node_id), timeout_ms)
        assert response is None or isinstance(response, AddRaftVoterResponse)
        return None if response is None else Errors(response.error_code).name

    def remove_voter(self, node_id: int, timeout_ms: int = 30_000) -> str | None:
        """As :meth:`add_voter`, removing node ``node_id``."""
        response = self._admin_call(remove_voter_request(node_id), timeout_ms)
        assert response is None or isinstance(response, RemoveRaftVoterResponse)
        return None if response is None else Errors(response.error_code).name

    def _admin_call(self, body: Request, timeout_ms: int) -> Any:
        leader = self.leader()
        if leader is None:
            return None
        correlation_id = self._next_admin_correlation_id
        self._next_admin_correlation_id += 1
        self.queues[leader].add(
            InboundRequest(correlation_id, _ADMIN, ZERO_UUID, None, body, self.clock.now_ms())
        )
        self._deadlines[leader] = self.clock.now_ms()
        self.run_until(lambda: correlation_id in self.admin_responses, timeout_ms)
        return self.admin_responses.pop(correlation_id, None)
