"""Test doubles and harnesses for code built on the Raft core (and for kraft's own tests).

- :class:`ManualClock`: virtual time that moves only when told to.
- :class:`MockNetworkChannel`: records what a client sends and answers.
- :class:`RaftClientBuilder` / :class:`RaftTestContext`: put one ``KafkaRaftClient`` in a given
  situation (local id, voters, stored election state, log contents with epochs), then drive
  it message by message: deliver any request as if from any replica, answer any request it
  sent, advance the clock, poll, and read what it did. A Kafka-style client test is a few
  lines (docs/testing.md).
- :class:`LocalCluster`: a few real clients wired together in memory, delivering every message
  at once and in a fixed order: elections and replication end to end, deterministically. The
  simulator (``kraft.simulation``) generalises it with latency, loss and faults.

Everything here is deterministic: the same calls give the same results, run after run.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from kraft.common.clock import ManualClock
from kraft.common.limits import INT64_MAX
from kraft.common.uuids import ZERO_UUID
from kraft.config import Endpoint as ConfigEndpoint
from kraft.config import QuorumConfig
from kraft.errors import IllegalStateError
from kraft.log.memory import MemoryLog
from kraft.log.quorum_state import ElectionState, MemoryQuorumStateStore
from kraft.protocol.envelope import (
    InboundRequest,
    InboundResponse,
    OutboundRequest,
    OutboundResponse,
)
from kraft.protocol.messages import (
    BeginQuorumEpochRequest,
    Endpoint,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
    PreferredCandidate,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.channel import DequeMessageQueue
from kraft.raft.client import KafkaRaftClient
from kraft.raft.listeners import Batch, BatchReader, LeaderAndEpoch, Listener
from kraft.record.batch import SimpleRecord
from kraft.record.serde import BytesSerde, RecordSerde

__all__ = [
    "VOTER_PORT_BASE",
    "LocalCluster",
    "begin_epoch_request",
    "fetch_request",
    "vote_request",
    "voter_endpoint",
    "ManualClock",
    "MockNetworkChannel",
    "RaftClientBuilder",
    "RaftTestContext",
    "RecordingListener",
]

T = TypeVar("T")
Q = TypeVar("Q", bound=Request)

E = TypeVar("E", OutboundRequest, OutboundResponse)


def _partition(sent: list[E], kind: type[Any] | None) -> tuple[list[E], list[E]]:
    """Split ``sent`` into the messages whose body is a ``kind`` (all, without one) and the rest."""
    taken: list[E] = []
    kept: list[E] = []
    for message in sent:
        (taken if kind is None or isinstance(message.body, kind) else kept).append(message)
    return taken, kept


class MockNetworkChannel:
    """A ``NetworkChannel`` that keeps what it is given: requests and responses, in order."""

    def __init__(self, first_correlation_id: int = 1) -> None:
        self._next_correlation_id = first_correlation_id
        self.requests: list[OutboundRequest] = []
        self.responses: list[OutboundResponse] = []

    def new_correlation_id(self) -> int:
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        return correlation_id

    def send(self, request: OutboundRequest) -> None:
        self.requests.append(request)

    def respond(self, response: OutboundResponse) -> None:
        self.responses.append(response)

    def drain_requests(self, kind: type[Any] | None = None) -> list[OutboundRequest]:
        """Remove and return the requests sent (only those of ``kind``, if given)."""
        taken, self.requests = _partition(self.requests, kind)
        return taken

    def drain_responses(self, kind: type[Any] | None = None) -> list[OutboundResponse]:
        """Remove and return the responses sent (only those of ``kind``, if given)."""
        taken, self.responses = _partition(self.responses, kind)
        return taken


class RecordingListener(Listener[T]):
    """A listener that keeps everything it is told, closing every reader after reading it.

    ``auto_close=False`` leaves readers open (to test the "open reader blocks delivery" rule);
    close them through :attr:`open_readers`.
    """

    def __init__(self, auto_close: bool = True) -> None:
        self.auto_close = auto_close
        self.batches: list[Batch[T]] = []
        self.leader_changes: list[LeaderAndEpoch] = []
        self.open_readers: list[BatchReader[T]] = []
        self.snapshots: list[Any] = []
        self.shutdown_begun = False

    def handle_commit(self, reader: BatchReader[T]) -> None:
        if self.auto_close:
            with reader:
                self.batches.extend(reader)
        else:
            self.open_readers.append(reader)

    def read_open_readers(self) -> None:
        """Iterate and close every reader left open."""
        readers, self.open_readers = self.open_readers, []
        for reader in readers:
            with reader:
                self.batches.extend(reader)

    def handle_load_snapshot(self, reader: Any) -> None:
        self.snapshots.append(reader.snapshot_id)
        reader.close()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader_changes.append(leader)

    def begin_shutdown(self) -> None:
        self.shutdown_begun = True

    @property
    def records(self) -> list[T]:
        """Every data record delivered, in offset order."""
        return [record for batch in self.batches for record in batch.records]

    @property
    def last_offset(self) -> int | None:
        return self.batches[-1].last_offset if self.batches else None


def fetch_request(
    epoch: int,
    replica_id: int,
    fetch_offset: int,
    last_fetched_epoch: int,
    *,
    max_wait_ms: int = 0,
    high_watermark: int = INT64_MAX,
) -> FetchRequest:
    """A Fetch from ``replica_id`` in ``epoch`` at ``fetch_offset`` (its log end), whose last
    record has ``last_fetched_epoch``; ``high_watermark`` is the fetcher's (KIP-1166)."""
    return FetchRequest(
        replica_id=replica_id, current_leader_epoch=epoch, fetch_offset=fetch_offset,
        last_fetched_epoch=last_fetched_epoch, max_wait_ms=max_wait_ms,
        high_watermark=high_watermark,
    )


def vote_request(
    epoch: int,
    candidate_id: int,
    last_epoch: int,
    last_offset: int,
    *,
    pre_vote: bool = False,
    **fields: Any,
) -> VoteRequest:
    """A (pre-)vote request from ``candidate_id`` whose log ends at ``last_offset`` in
    ``last_epoch``; ``fields`` sets any other ``VoteRequest`` field (``voter_id=...``)."""
    return VoteRequest(
        replica_epoch=epoch, replica_id=candidate_id, last_offset_epoch=last_epoch,
        last_offset=last_offset, pre_vote=pre_vote, **fields,
    )


def begin_epoch_request(epoch: int, leader_id: int, voter_id: int = -1) -> BeginQuorumEpochRequest:
    """A BeginQuorumEpoch from ``leader_id`` to ``voter_id``, with the endpoints the builders
    give every voter (``voter_endpoint``)."""
    endpoint = voter_endpoint(leader_id)
    return BeginQuorumEpochRequest(
        leader_id=leader_id, leader_epoch=epoch, voter_id=voter_id,
        leader_endpoints=(Endpoint("CONTROLLER", endpoint.host, endpoint.port),),
    )


#: Test configs give voter ``n`` the address localhost:(VOTER_PORT_BASE + n).
VOTER_PORT_BASE = 9990


def voter_endpoint(voter_id: int) -> ConfigEndpoint:
    """The address the builders and ``LocalCluster`` give a voter."""
    return ConfigEndpoint("localhost", VOTER_PORT_BASE + voter_id)


def _voter_endpoints(voters: Iterable[int]) -> dict[int, ConfigEndpoint]:
    return {v: voter_endpoint(v) for v in voters}


class RaftTestContext(Generic[T]):
    """One client in a controlled world. Build it with :class:`RaftClientBuilder`."""

    def __init__(
        self,
        client: KafkaRaftClient[T],
        log: MemoryLog,
        store: MemoryQuorumStateStore,
        channel: MockNetworkChannel,
        queue: DequeMessageQueue,
        clock: ManualClock,
        config: QuorumConfig,
    ) -> None:
        self.client = client
        self.log = log
        self.store = store
        self.channel = channel
        self.queue = queue
        self.clock = clock
        self.config = config
        self._next_inbound_correlation_id = 10_000

    # -- time and polling ------------------------------------------------------------------
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    def poll(self) -> int:
        """One ``client.poll()``; returns what it returned."""
        return self.client.poll()

    def poll_until_idle(self, max_polls: int = 100) -> int:
        """Poll until the client has nothing to do now (it returns > 0); return that."""
        for _ in range(max_polls):
            timeout = self.client.poll()
            if timeout > 0 and self.queue.is_empty():
                return timeout
        raise AssertionError(f"the client was still busy after {max_polls} polls")

    def poll_until_request(self, kind: type[Q], max_polls: int = 10) -> list[OutboundRequest]:
        """Poll until the client sends requests of ``kind``; remove and return them (Kafka's
        ``pollUntilRequest``). Fails if none is sent within ``max_polls`` polls."""
        for _ in range(max_polls):
            self.client.poll()
            sent = self.sent_requests(kind)
            if sent:
                return sent
        raise AssertionError(f"no {kind.__name__} sent within {max_polls} polls")

    def expire_election_timeout(self) -> None:
        """Advance past any randomized election timeout (2 x election timeout)."""
        self.clock.advance(2 * self.config.election_timeout_ms)

    def expire_fetch_timeout(self) -> None:
        self.clock.advance(self.config.fetch_timeout_ms)

    # -- what the client sent ----------------------------------------------------------------
    def sent_requests(self, kind: type[Any] | None = None) -> list[OutboundRequest]:
        """Remove and return the requests the client sent (of ``kind``, if given)."""
        return self.channel.drain_requests(kind)

    def sent_responses(self, kind: type[Any] | None = None) -> list[OutboundResponse]:
        """Remove and return the responses the client sent (of ``kind``, if given)."""
        return self.channel.drain_responses(kind)

    def single_sent_request(self, kind: type[Q]) -> tuple[OutboundRequest, Q]:
        """The one request of ``kind`` sent since the last drain (asserts there is one)."""
        sent = self.sent_requests(kind)
        assert len(sent) == 1, f"expected one {kind.__name__}, got {sent}"
        body = sent[0].body
        assert isinstance(body, kind)
        return sent[0], body

    def single_sent_response(self, kind: type[Response]) -> OutboundResponse:
        sent = self.sent_responses(kind)
        assert len(sent) == 1, f"expected one {kind.__name__}, got {sent}"
        return sent[0]

    # -- delivering messages -------------------------------------------------------------------
    def deliver_request(
        self,
        body: Request,
        source: int,
        *,
        source_directory_id: uuid.UUID = ZERO_UUID,
        cluster_id: str | None = None,
        api_version: int | None = None,
        correlation_id: int | None = None,
    ) -> int:
        """Queue ``body`` as a request from replica ``source``; return its correlation id.

        The next :meth:`poll` handles it (one message per poll).
        """
        if correlation_id is None:
            correlation_id = self._next_inbound_correlation_id
            self._next_inbound_correlation_id += 1
        self.queue.add(InboundRequest(
            correlation_id=correlation_id,
            source=source,
            source_directory_id=source_directory_id,
            cluster_id=cluster_id,
            body=body,
            received_ms=self.clock.now_ms(),
            api_version=api_version,
        ))
        return correlation_id

    def deliver_response(
        self, request: OutboundRequest | int, body: Response, source: int | None = None
    ) -> None:
        """Queue ``body`` as the answer to ``request`` (a sent request, or a correlation id
        with ``source``). The next :meth:`poll` handles it."""
        if isinstance(request, OutboundRequest):
            correlation_id = request.correlation_id
            source = request.destination if source is None else source
        else:
            correlation_id = request
            if source is None:
                raise ValueError("give the source of a response delivered by correlation id")
        self.queue.add(InboundResponse(
            correlation_id=correlation_id, source=source, body=body,
            received_ms=self.clock.now_ms(),
        ))

    # -- state ------------------------------------------------------------------------------------
    @property
    def role(self) -> str:
        return self.client.role

    @property
    def epoch(self) -> int:
        return self.client.epoch

    @property
    def leader_id(self) -> int | None:
        return self.client.leader_id

    @property
    def voted_id(self) -> int | None:
        return self.client.voted_id

    @property
    def high_watermark(self) -> int | None:
        return self.client.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def stored_state(self) -> ElectionState | None:
        """What the quorum-state store holds now."""
        return self.store.read_election_state()

    # -- request builders (what a peer would send) ----------------------------------------------
    def endpoints_of(self, replica_id: int) -> tuple[Endpoint, ...]:
        """The listener endpoints of a voter, as the config knows them."""
        endpoint = self.config.voters.get(replica_id)
        return () if endpoint is None else (Endpoint("CONTROLLER", endpoint.host, endpoint.port),)

    def vote_request(
        self,
        epoch: int,
        candidate_id: int,
        last_epoch: int,
        last_offset: int,
        *,
        pre_vote: bool = False,
    ) -> VoteRequest:
        """A (pre-)vote request from ``candidate_id`` addressed to this replica."""
        return vote_request(
            epoch, candidate_id, last_epoch, last_offset, pre_vote=pre_vote,
            voter_id=-1 if self.client.local_id is None else self.client.local_id,
        )

    def begin_epoch_request(self, epoch: int, leader_id: int) -> BeginQuorumEpochRequest:
        """A BeginQuorumEpoch from ``leader_id``, with its endpoints from the config."""
        return BeginQuorumEpochRequest(
            leader_id=leader_id, leader_epoch=epoch,
            voter_id=-1 if self.client.local_id is None else self.client.local_id,
            leader_endpoints=self.endpoints_of(leader_id),
        )

    def end_epoch_request(
        self, epoch: int, leader_id: int, preferred_candidates: Sequence[int] = ()
    ) -> EndQuorumEpochRequest:
        """An EndQuorumEpoch from a resigning ``leader_id``."""
        return EndQuorumEpochRequest(
            leader_id=leader_id, leader_epoch=epoch,
            preferred_candidates=tuple(PreferredCandidate(c) for c in preferred_candidates),
            leader_endpoints=self.endpoints_of(leader_id),
        )

    def fetch_request(
        self,
        epoch: int,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        *,
        max_wait_ms: int = 0,
        high_watermark: int = INT64_MAX,
    ) -> FetchRequest:
        """A Fetch from ``replica_id`` as a follower of this replica would send it."""
        return fetch_request(
            epoch, replica_id, fetch_offset, last_fetched_epoch,
            max_wait_ms=max_wait_ms, high_watermark=high_watermark,
        )

    def fetch_response(
        self,
        epoch: int,
        leader_id: int,
        records: bytes = b"",
        high_watermark: int = -1,
        error: int = 0,
    ) -> FetchResponse:
        """A leader's answer to a Fetch."""
        return FetchResponse(
            partition_error_code=error, high_watermark=high_watermark, records=records,
            current_leader=LeaderIdAndEpoch(leader_id, epoch),
        )

    # -- round trips ----------------------------------------------------------------------------
    def append_and_drain(self, records: Sequence[T]) -> int:
        """As the leader: append ``records`` (prepare and schedule), wait out the linger and
        poll, so the batch is in the log. Returns its last offset."""
        client = self.client
        offset = client.prepare_append(client.epoch, records)
        client.schedule_prepared_append()
        self.advance(self.config.append_linger_ms)
        self.poll()
        return offset

    def answer_fetch(
        self, records: bytes = b"", high_watermark: int = -1, *, poll: bool = True
    ) -> OutboundRequest:
        """Answer the one Fetch the client sent, as its leader, then poll (unless told not).

        Returns the Fetch that was answered.
        """
        request, _body = self.single_sent_request(FetchRequest)
        leader = self.client.leader_id
        self.deliver_response(request, self.fetch_response(
            self.client.epoch, -1 if leader is None else leader, records, high_watermark,
        ))
        if poll:
            self.poll()
        return request

    def advance_leader_high_watermark_to_log_end(self) -> int:
        """As the local leader, have a majority of the other voters fetch at its log end, so
        the high watermark reaches it; return the high watermark."""
        client = self.client
        if not client.is_leader:
            raise AssertionError(f"not the leader: {client!r}")
        self.poll_until_idle()  # drain what the accumulator holds
        others = [v for v in sorted(self.config.voter_ids) if v != client.local_id]
        needed = len(self.config.voter_ids) // 2
        for voter in others[:needed]:
            self.deliver_request(self.fetch_request(
                client.epoch, voter, self.log.log_end_offset, self.log.last_fetched_epoch,
            ), voter)
            self.poll()
        self.sent_responses(FetchResponse)
        high_watermark = client.high_watermark
        assert high_watermark == self.log.log_end_offset, (high_watermark, client)
        return high_watermark

    # -- scripted situations ----------------------------------------------------------------
    def become_leader(self) -> int:
        """From a voter's fresh state, win an election with every vote granted; return the
        new epoch. The LeaderChange batch is appended (the HW needs a majority to fetch)."""
        client = self.client

        def leading() -> bool:
            return client.is_leader

        if leading():
            return client.epoch
        self.expire_election_timeout()
        self.poll()
        for _ in range(3):
            for request in self.sent_requests(VoteRequest):
                assert isinstance(request.body, VoteRequest)
                self.deliver_response(request, VoteResponse(
                    leader_epoch=request.body.replica_epoch, vote_granted=True,
                ))
            self.poll_until_idle()
            if leading():
                break
        if not leading():
            raise AssertionError(f"could not become leader: {client!r}")
        self.poll_until_idle()
        return client.epoch


class RaftClientBuilder(Generic[T]):
    """Builds a :class:`RaftTestContext` in a given situation, Kafka-test style::

        context = (RaftClientBuilder(local_id=1, voters=(1, 2, 3))
                   .with_elected_leader(epoch=5, leader_id=2)
                   .append_to_log(epoch=3, records=[b"a", b"b"])
                   .build())
    """

    def __init__(
        self,
        local_id: int | None,
        voters: Iterable[int],
        serde: RecordSerde[T] | None = None,
        seed: int = 0,
    ) -> None:
        self.local_id = local_id
        self.voters = tuple(sorted(voters))
        self.serde: RecordSerde[Any] = BytesSerde() if serde is None else serde
        self.seed = seed
        self.local_directory_id: uuid.UUID | None = None
        self.cluster_id: str | None = None
        self.election_state: ElectionState | None = None
        self.config_overrides: dict[str, Any] = {}
        self.batches: list[tuple[int, list[bytes | SimpleRecord], bool]] = []
        self.start_ms = 0

    # -- the situation ------------------------------------------------------------------------
    def with_config(self, **overrides: Any) -> RaftClientBuilder[T]:
        """Override ``QuorumConfig`` fields (``election_timeout_ms=...``)."""
        self.config_overrides.update(overrides)
        return self

    def with_local_directory_id(self, directory_id: uuid.UUID) -> RaftClientBuilder[T]:
        self.local_directory_id = directory_id
        return self

    def with_cluster_id(self, cluster_id: str) -> RaftClientBuilder[T]:
        self.cluster_id = cluster_id
        return self

    def with_election_state(self, state: ElectionState) -> RaftClientBuilder[T]:
        """Start from this stored election state."""
        self.election_state = state
        return self

    def with_unknown_leader(self, epoch: int) -> RaftClientBuilder[T]:
        return self.with_election_state(ElectionState(epoch))

    def with_elected_leader(self, epoch: int, leader_id: int) -> RaftClientBuilder[T]:
        return self.with_election_state(ElectionState(epoch, leader_id=leader_id))

    def with_voted_candidate(
        self, epoch: int, candidate_id: int, directory_id: str | None = None
    ) -> RaftClientBuilder[T]:
        return self.with_election_state(
            ElectionState(epoch, voted_id=candidate_id, voted_directory_id=directory_id)
        )

    def append_to_log(
        self,
        epoch: int,
        records: Sequence[bytes | SimpleRecord],
        *,
        control: bool = False,
    ) -> RaftClientBuilder[T]:
        """Add one batch of ``records`` in ``epoch`` to the initial log."""
        self.batches.append((epoch, list(records), control))
        return self

    def starting_at(self, now_ms: int) -> RaftClientBuilder[T]:
        self.start_ms = now_ms
        return self

    # -- building -------------------------------------------------------------------------------
    def config(self) -> QuorumConfig:
        fields: dict[str, Any] = {"voters": _voter_endpoints(self.voters)}
        fields.update(self.config_overrides)
        return QuorumConfig(**fields)

    def build(self, *, initialize: bool = True) -> RaftTestContext[T]:
        """The context; the client is initialized unless ``initialize=False``."""
        config = self.config()
        clock = ManualClock(self.start_ms)
        log = MemoryLog()
        for epoch, records, control in self.batches:
            log.append_as_leader(records, epoch, timestamp_ms=clock.wall_ms(), control=control)
        log.flush()
        store = MemoryQuorumStateStore()
        if self.election_state is not None:
            store.write_election_state(self.election_state)
        channel = MockNetworkChannel()
        queue = DequeMessageQueue()
        client: KafkaRaftClient[T] = KafkaRaftClient(
            local_id=self.local_id,
            local_directory_id=self.local_directory_id,
            config=config,
            log=log,
            store=store,
            channel=channel,
            queue=queue,
            clock=clock,
            rand=random.Random(self.seed),
            serde=self.serde,
            cluster_id=self.cluster_id,
        )
        if initialize:
            client.initialize()
        return RaftTestContext(client, log, store, channel, queue, clock, config)


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
        **config_overrides: Any,
    ) -> None:
        self.clock = ManualClock()
        voter_ids = range(1, voters + 1)
        fields: dict[str, Any] = {"voters": _voter_endpoints(voter_ids)}
        fields.update(config_overrides)
        self.config = QuorumConfig(**fields)
        self.disconnected: set[int] = set()
        self.nodes: dict[int, KafkaRaftClient[T]] = {}
        self.channels: dict[int, MockNetworkChannel] = {}
        self.queues: dict[int, DequeMessageQueue] = {}
        self.logs: dict[int, MemoryLog] = {}
        self.listeners: dict[int, RecordingListener[T]] = {}
        the_serde: RecordSerde[Any] = BytesSerde() if serde is None else serde
        for node_id in range(1, voters + observers + 1):
            channel = MockNetworkChannel(first_correlation_id=node_id * 1_000_000)
            queue = DequeMessageQueue()
            log = MemoryLog()
            client: KafkaRaftClient[T] = KafkaRaftClient(
                local_id=node_id, config=self.config, log=log,
                store=MemoryQuorumStateStore(), channel=channel, queue=queue,
                clock=self.clock, rand=random.Random(seed * 1000 + node_id), serde=the_serde,
            )
            client.initialize()
            listener: RecordingListener[T] = RecordingListener()
            client.register(listener)
            self.nodes[node_id] = client
            self.channels[node_id] = channel
            self.queues[node_id] = queue
            self.logs[node_id] = log
            self.listeners[node_id] = listener
        self._deadlines = dict.fromkeys(self.nodes, 0)

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
                    self.queues[destination].add(InboundRequest(
                        request.correlation_id, node_id, ZERO_UUID, None, request.body, now,
                    ))
            for response in channel.drain_responses():
                busy = True
                destination = response.destination
                if self._connected(node_id, destination):
                    self.queues[destination].add(InboundResponse(
                        response.correlation_id, node_id, response.body, now,
                    ))
        return busy

    def _connected(self, a: int, b: int) -> bool:
        return b in self.nodes and a not in self.disconnected and b not in self.disconnected

    def _settle(self, max_steps: int = 10_000) -> None:
        for _ in range(max_steps):
            if not self.step():
                return
        raise IllegalStateError(f"the cluster did not settle in {max_steps} steps")

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
            next_deadline = min(self._deadlines.values())
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
