"""``RaftClientBuilder`` and ``RaftTestContext``: one ``KafkaRaftClient`` in a given situation
(local id, voters, stored election state, log contents with epochs), driven message by message:
deliver any request as if from any replica, answer any request it sent, fix its next random
draws, advance the clock, poll, and read what it did (docs/testing.md)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar

from kraft.common.clock import ManualClock
from kraft.common.limits import INT64_MAX
from kraft.common.uuids import ZERO_UUID
from kraft.config import Endpoint as ConfigEndpoint
from kraft.config import QuorumConfig
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
    PreferredCandidate,
    Request,
    Response,
    VoteRequest,
)
from kraft.raft.channel import DequeMessageQueue
from kraft.raft.client import KafkaRaftClient
from kraft.raft.states import Endpoints
from kraft.raft.voter_history import write_bootstrap_checkpoint
from kraft.raft.voter_set import DEFAULT_LISTENER, VoterSet
from kraft.record.batch import SimpleRecord
from kraft.record.serde import BytesSerde, RecordSerde
from kraft.testing.channel import MockNetworkChannel
from kraft.testing.messages import (
    fetch_request,
    fetch_response,
    replica_key,
    vote_request,
    vote_response,
    voter_endpoints,
)
from kraft.testing.randomness import MockableRandom

__all__ = ["ADMIN_ID", "RaftClientBuilder", "RaftTestContext"]

#: The source of the requests an admin client sends (not a replica).
ADMIN_ID = -1

T = TypeVar("T")
Q = TypeVar("Q", bound=Request)
R = TypeVar("R", bound=Response)


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
        random: MockableRandom,
    ) -> None:
        self.client = client
        self.log = log
        self.store = store
        self.channel = channel
        self.queue = queue
        self.clock = clock
        self.config = config
        #: The client's random source: ``random.queue_draws(...)`` fixes its next draws.
        self.random = random
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

    def single_sent_response(self, kind: type[R]) -> R:
        """The body of the one response of ``kind`` sent since the last drain (asserts there
        is one). Use :meth:`sent_responses` for the envelope (its destination)."""
        sent = self.sent_responses(kind)
        assert len(sent) == 1, f"expected one {kind.__name__}, got {sent}"
        body = sent[0].body
        assert isinstance(body, kind)
        return body

    def response_to(self, correlation_id: int, kind: type[R]) -> R | None:
        """The body of the response of ``kind`` sent to request ``correlation_id``, removed
        from what was sent; ``None`` if it has not been sent (yet)."""
        for message in self.channel.responses:
            if message.correlation_id == correlation_id and isinstance(message.body, kind):
                self.channel.outbox.remove(message)
                return message.body
        return None

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
        peer_id: int | None = None,
    ) -> int:
        """Queue ``body`` as a request from replica ``source``; return its correlation id.

        ``peer_id`` is the replica the transport authenticated (``InboundRequest.peer_id``).
        The next :meth:`poll` handles it (one message per poll).
        """
        if correlation_id is None:
            correlation_id = self._next_inbound_correlation_id
            self._next_inbound_correlation_id += 1
        self.queue.add(
            InboundRequest(
                correlation_id=correlation_id,
                source=source,
                source_directory_id=source_directory_id,
                cluster_id=cluster_id,
                body=body,
                received_ms=self.clock.now_ms(),
                api_version=api_version,
                peer_id=peer_id,
            )
        )
        return correlation_id

    def admin_call(self, body: Request, kind: type[R], *, source: int = ADMIN_ID) -> R | None:
        """Deliver ``body`` as an admin's request (from ``source``), poll until the client is
        idle, and return its answer of ``kind`` (removed from what was sent); ``None`` if it is
        not answered yet (a voter change answers once its VotersRecord commits)."""
        correlation_id = self.deliver_request(body, source)
        self.poll_until_idle()
        return self.response_to(correlation_id, kind)

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
        self.queue.add(
            InboundResponse(
                correlation_id=correlation_id,
                source=source,
                body=body,
                received_ms=self.clock.now_ms(),
            )
        )

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

    @property
    def voter_set(self) -> VoterSet:
        """The voter set the client uses now: the latest in its log, committed or not
        (KIP-853), or the static one."""
        return self.client.voter_set

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
            epoch,
            candidate_id,
            last_epoch,
            last_offset,
            pre_vote=pre_vote,
            voter_id=-1 if self.client.local_id is None else self.client.local_id,
        )

    def begin_epoch_request(self, epoch: int, leader_id: int) -> BeginQuorumEpochRequest:
        """A BeginQuorumEpoch from ``leader_id``, with its endpoints from the config."""
        return BeginQuorumEpochRequest(
            leader_id=leader_id,
            leader_epoch=epoch,
            voter_id=-1 if self.client.local_id is None else self.client.local_id,
            leader_endpoints=self.endpoints_of(leader_id),
        )

    def end_epoch_request(
        self, epoch: int, leader_id: int, preferred_candidates: Sequence[int] = ()
    ) -> EndQuorumEpochRequest:
        """An EndQuorumEpoch from a resigning ``leader_id``."""
        return EndQuorumEpochRequest(
            leader_id=leader_id,
            leader_epoch=epoch,
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
        replica_directory_id: uuid.UUID | None = None,
    ) -> FetchRequest:
        """A Fetch from ``replica_id`` as a follower of this replica would send it."""
        return fetch_request(
            epoch,
            replica_id,
            fetch_offset,
            last_fetched_epoch,
            max_wait_ms=max_wait_ms,
            high_watermark=high_watermark,
            replica_directory_id=replica_directory_id,
        )

    def fetch_at_log_end(self, replica_id: int, *, directory: bool = True) -> FetchResponse:
        """As replica ``replica_id`` (with :func:`replica_key`'s directory id unless
        ``directory=False``), fetch from this leader at its log end -- the replica is caught
        up and acknowledges every record -- and return the answer."""
        key = replica_key(replica_id, directory=directory)
        self.deliver_request(
            self.fetch_request(
                self.client.epoch,
                replica_id,
                self.log.log_end_offset,
                self.log.last_fetched_epoch,
                replica_directory_id=key.directory_id,
            ),
            replica_id,
            source_directory_id=key.directory_id or ZERO_UUID,
        )
        self.poll()
        return self.single_sent_response(FetchResponse)

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
        self.deliver_response(
            request,
            fetch_response(
                self.client.epoch,
                -1 if leader is None else leader,
                records,
                high_watermark,
            ),
        )
        if poll:
            self.poll()
        return request

    def advance_leader_high_watermark_to_log_end(self) -> int:
        """As the local leader, have a majority of the other voters (of the voter set in
        force) fetch at its log end, so the high watermark reaches it; return the high
        watermark."""
        client = self.client
        if not client.is_leader:
            raise AssertionError(f"not the leader: {client!r}")
        self.poll_until_idle()  # drain what the accumulator holds
        voters = self.client.voter_set
        others = [v for v in sorted(voters.ids) if v != client.local_id]
        for voter in others[: len(voters) // 2]:
            key = voters.key(voter)
            directory = None if key is None else key.directory_id
            self.deliver_request(
                self.fetch_request(
                    client.epoch,
                    voter,
                    self.log.log_end_offset,
                    self.log.last_fetched_epoch,
                    replica_directory_id=directory,
                ),
                voter,
                source_directory_id=directory or ZERO_UUID,
            )
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
                self.deliver_response(
                    request, vote_response(request.body.replica_epoch, granted=True)
                )
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
        self.random_draws: list[tuple[tuple[int, ...], int | None]] = []
        self.kraft_version = 0
        self.bootstrap_voters: VoterSet | None = None
        self.local_endpoints: Endpoints | None = None

    # -- the situation ------------------------------------------------------------------------
    def with_config(self, **overrides: Any) -> RaftClientBuilder[T]:
        """Override ``QuorumConfig`` fields (``election_timeout_ms=...``)."""
        self.config_overrides.update(overrides)
        return self

    def with_local_directory_id(self, directory_id: uuid.UUID) -> RaftClientBuilder[T]:
        self.local_directory_id = directory_id
        return self

    def with_kraft_version(self, kraft_version: int) -> RaftClientBuilder[T]:
        """Format the log with the bootstrap checkpoint of ``kraft_version`` (1: KIP-853) and
        no voters (``--no-initial-controllers``), unless :meth:`with_bootstrap_voters` gives
        them. 0 (the default) writes no checkpoint: the static voters apply."""
        self.kraft_version = kraft_version
        return self

    def with_bootstrap_voters(self, voters: VoterSet) -> RaftClientBuilder[T]:
        """Format the log as ``--initial-controllers`` does: the bootstrap checkpoint (snapshot
        0-0) holds kraft.version 1 and ``voters``. Without static voters (``voters=()`` in the
        constructor) the config's ``bootstrap_servers`` are these voters' default listeners
        (as Kafka's test context does); the local directory id and endpoints default to the
        local replica's in ``voters``."""
        self.kraft_version = 1
        self.bootstrap_voters = voters
        return self

    def with_local_endpoints(self, endpoints: Endpoints) -> RaftClientBuilder[T]:
        """This replica's listeners, ``(("CONTROLLER", host, port), ...)`` (KIP-853)."""
        self.local_endpoints = endpoints
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

    def with_random_draws(self, *values: int, bound: int | None = None) -> RaftClientBuilder[T]:
        """Queue the client's next random draws (:meth:`MockableRandom.queue_draws`), before
        it draws its first election timeout at ``initialize``."""
        self.random_draws.append((values, bound))
        return self

    # -- building -------------------------------------------------------------------------------
    def config(self) -> QuorumConfig:
        fields: dict[str, Any] = {"voters": voter_endpoints(self.voters)}
        if self.bootstrap_voters is not None and not self.voters:
            fields["bootstrap_servers"] = tuple(
                ConfigEndpoint(host, port)
                for voter_id in sorted(self.bootstrap_voters.ids)
                for name, host, port in self.bootstrap_voters.endpoints(voter_id)
                if name == DEFAULT_LISTENER
            )
        fields.update(self.config_overrides)
        return QuorumConfig(**fields)

    def _local_identity(self) -> tuple[uuid.UUID | None, Endpoints | None]:
        """The local directory id and endpoints: as given, else the bootstrap voter set's."""
        directory, endpoints = self.local_directory_id, self.local_endpoints
        voters = self.bootstrap_voters
        if voters is not None and self.local_id is not None:
            key = voters.key(self.local_id)
            if directory is None and key is not None:
                directory = key.directory_id
            if endpoints is None and key is not None:
                endpoints = voters.endpoints(self.local_id)
        return directory, endpoints

    def build(self, *, initialize: bool = True) -> RaftTestContext[T]:
        """The context; the client is initialized unless ``initialize=False``."""
        config = self.config()
        clock = ManualClock(self.start_ms)
        log = MemoryLog()
        if self.kraft_version > 0:
            write_bootstrap_checkpoint(
                log, self.kraft_version, self.bootstrap_voters, timestamp_ms=clock.wall_ms()
            )
        for epoch, records, control in self.batches:
            log.append_as_leader(records, epoch, timestamp_ms=clock.wall_ms(), control=control)
        log.flush()
        store = MemoryQuorumStateStore()
        if self.election_state is not None:
            store.write_election_state(self.election_state)
        channel = MockNetworkChannel()
        queue = DequeMessageQueue()
        rand = MockableRandom(self.seed)
        for values, bound in self.random_draws:
            rand.queue_draws(*values, bound=bound)
        directory, endpoints = self._local_identity()
        client: KafkaRaftClient[T] = KafkaRaftClient(
            local_id=self.local_id,
            local_directory_id=directory,
            config=config,
            log=log,
            store=store,
            channel=channel,
            queue=queue,
            clock=clock,
            rand=rand,
            serde=self.serde,
            cluster_id=self.cluster_id,
            local_endpoints=() if endpoints is None else endpoints,
        )
        if initialize:
            client.initialize()
        return RaftTestContext(client, log, store, channel, queue, clock, config, rand)
