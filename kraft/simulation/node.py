"""A simulated node: a real ``KafkaRaftClient`` over a ``MemoryLog``, an in-memory quorum-state
store, a :class:`~kraft.raft.memory_channel.MemoryChannel` (the cluster routes what it
holds after each poll), and its state machines: the replicated counter and, beside it, the
key-value map of the kv workload (:class:`~kraft.kv.KvStateMachine`), both in one listener so
that one snapshot holds both.
In a controller cluster the node runs a ``QuorumController`` and a ``MetadataLoader`` instead
(:mod:`kraft.simulation.controller`).

The log and the store are the node's *disk*: they outlive the client. A kill drops the client
and crashes the log (losing what was not flushed); a restart builds a new client over the same
disk; a wipe replaces the disk with an empty one.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from kraft.config import Endpoint
from kraft.errors import CorruptRecordError, NotLeaderError
from kraft.kv import KvCommand, KvSerde, KvStateMachine
from kraft.log.base import SnapshotRetention
from kraft.log.memory import MemoryLog
from kraft.log.quorum_state import MemoryQuorumStateStore
from kraft.raft.channel import DequeMessageQueue
from kraft.raft.client import KafkaRaftClient
from kraft.raft.listeners import Batch, BatchReader, LeaderAndEpoch, Listener, SnapshotReaderLike
from kraft.raft.memory_channel import MemoryChannel
from kraft.record.offsets import OffsetAndEpoch

if TYPE_CHECKING:
    from kraft.controller.quorum_controller import QuorumController
    from kraft.metadata.image import MetadataImage
    from kraft.metadata.loader import MetadataLoader
    from kraft.queue import DeterministicEventQueue

__all__ = [
    "SIM_PORT_BASE",
    "CounterIncrement",
    "ReplicatedCounter",
    "SimNode",
    "SimSerde",
    "sim_endpoint",
    "top_leader",
]

#: Where simulated node ``i`` "listens": port ``SIM_PORT_BASE + i`` (only the ids matter; ports
#: keep endpoints distinct, and a bootstrap server's port names its node).
SIM_PORT_BASE = 19_000


def sim_endpoint(node_id: int) -> Endpoint:
    """The address simulated node ``node_id`` listens at."""
    return Endpoint("sim", SIM_PORT_BASE + node_id)


class CounterIncrement(NamedTuple):
    """The replicated counter's record: "the counter is now ``value``"."""

    value: int


_INCREMENT = struct.Struct(">bq")
_TAG_VALUE = 0
_TAG_INCREMENT = 1
_TAG_KV = 2


class SimSerde:
    """Records of the simulation: a :class:`CounterIncrement`, a :class:`~kraft.kv.KvCommand`,
    or any msgpack-able value (what :meth:`Cluster.append` is given). One tag byte tells them
    apart."""

    __slots__ = ()
    _encoder = msgspec.msgpack.Encoder()
    _decoder = msgspec.msgpack.Decoder()
    _kv = KvSerde()

    def encode(self, value: Any) -> bytes:
        if type(value) is CounterIncrement:
            return _INCREMENT.pack(_TAG_INCREMENT, value.value)
        if type(value) is KvCommand:
            return b"\x02" + self._kv.encode(value)
        return b"\x00" + self._encoder.encode(value)

    def decode(self, data: bytes | memoryview) -> Any:
        if not data:
            raise CorruptRecordError("empty simulation record")
        tag = data[0]
        if tag == _TAG_INCREMENT and len(data) == _INCREMENT.size:
            return CounterIncrement(_INCREMENT.unpack(data)[1])
        if tag == _TAG_VALUE:
            try:
                return self._decoder.decode(data[1:])
            except msgspec.DecodeError as exc:
                raise CorruptRecordError(f"bad simulation record: {exc}") from exc
        if tag == _TAG_KV:
            return self._kv.decode(data[1:])
        raise CorruptRecordError(f"unknown simulation record tag {tag}")


class ReplicatedCounter(Listener[Any]):
    """Kafka's ``ReplicatedCounter``: the leader appends ``uncommitted + 1``; every replica
    checks that committed increments are consecutive. It also keeps every committed record,
    and applies the kv commands to :attr:`kv` (its snapshots hold the map too).

    The leader may append only after ``handle_leader_change`` named it (so it has seen every
    earlier commit). Every ``snapshot_every`` committed offsets it writes a snapshot (its value)
    through ``client``; a snapshot it is handed replaces its value. ``on_commit(batch, value)``,
    ``on_snapshot(kind, snapshot_id, value)`` and ``on_problem(invariant, message)`` report to
    the cluster.
    """

    def __init__(
        self,
        node_id: int,
        on_commit: Callable[[Batch[Any], int], None],
        on_problem: Callable[[str, str], None],
        on_snapshot: Callable[[str, OffsetAndEpoch, int], None] | None = None,
        snapshot_every: int | None = None,
    ) -> None:
        self.node_id = node_id
        self.committed: list[Any] = []
        self.kv = KvStateMachine()
        self.value = 0
        self.uncommitted = 0
        self.writable_epoch = -1
        self.last_offset = -1
        self.snapshot_every = snapshot_every
        self.last_snapshot_offset = -1
        self.client: KafkaRaftClient[Any] | None = None
        self._on_commit = on_commit
        self._on_problem = on_problem
        self._on_snapshot = on_snapshot

    def handle_commit(self, reader: BatchReader[Any]) -> None:
        with reader:
            for batch in reader:
                if batch.base_offset <= self.last_offset:
                    self._on_problem(
                        "listener_order",
                        f"node {self.node_id} was handed batch {batch.base_offset}.."
                        f"{batch.last_offset} after offset {self.last_offset}",
                    )
                self.last_offset = batch.last_offset
                for offset, record in enumerate(batch.records, start=batch.base_offset):
                    if type(record) is KvCommand:
                        self.kv.apply(offset, record)
                    elif type(record) is CounterIncrement:
                        if record.value != self.value + 1:
                            self._on_problem(
                                "counter",
                                f"node {self.node_id}: counter increment {record.value} at "
                                f"offset <= {batch.last_offset} after value {self.value}",
                            )
                        self.value = record.value
                self.committed.extend(batch.records)
                self.uncommitted = max(self.uncommitted, self.value)
                self._on_commit(batch, self.value)
                self._maybe_snapshot(batch)

    def _maybe_snapshot(self, batch: Batch[Any]) -> None:
        """Kafka's counter: a snapshot once more than ``snapshot_every`` offsets committed
        since the last one, at the end of the batch just handed over."""
        client = self.client
        every = self.snapshot_every
        if client is None or every is None:
            return
        if batch.last_offset - self.last_snapshot_offset <= every:
            return
        snapshot_id = OffsetAndEpoch(batch.last_offset + 1, batch.epoch)
        self.last_snapshot_offset = batch.last_offset
        writer = client.create_snapshot(snapshot_id, batch.append_timestamp_ms)
        if writer is None:
            return  # the log starts past it already (a downloaded snapshot), or it exists
        with writer:
            writer.append([CounterIncrement(self.value)])
            kv = list(self.kv.snapshot_records())
            if kv:
                writer.append(kv)
            writer.freeze()
        if self._on_snapshot is not None:
            self._on_snapshot("created", snapshot_id, self.value)

    def handle_load_snapshot(self, reader: SnapshotReaderLike[Any]) -> None:
        snapshot_id = reader.snapshot_id
        value = 0
        kv: list[KvCommand] = []
        try:
            for batch in reader:
                for record in batch.records:
                    if type(record) is CounterIncrement:
                        value = record.value
                    elif type(record) is KvCommand:
                        kv.append(record)
        finally:
            reader.close()
        if self.writable_epoch != -1:
            self._on_problem(
                "leader_never_loads_snapshot",
                f"node {self.node_id} loaded snapshot {snapshot_id} while the writable leader "
                f"of epoch {self.writable_epoch}",
            )
        self.value = self.uncommitted = value
        self.last_offset = self.last_snapshot_offset = snapshot_id.offset - 1
        self.committed = []
        self.kv.reset()
        self.kv.load_snapshot(kv)
        if self._on_snapshot is not None:
            self._on_snapshot("loaded", snapshot_id, value)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.uncommitted = self.value
        self.writable_epoch = leader.epoch if leader.leader_id == self.node_id else -1

    def increment(self, client: KafkaRaftClient[Any]) -> int | None:
        """Append the next increment as the leader; its offset, or None when not writable."""
        if self.writable_epoch != client.epoch:  # -1 when not the leader
            return None
        try:
            offset = client.prepare_append(
                self.writable_epoch, [CounterIncrement(self.uncommitted + 1)]
            )
            client.schedule_prepared_append()
        except NotLeaderError:
            self.writable_epoch = -1
            return None
        self.uncommitted += 1
        return offset


class SimNode:
    """One node's disk, process and counter. ``client`` is None while the node is down.

    ``voter_ids`` is the voter set the node was configured or bootstrapped with, until its
    client says otherwise; ``directory_id`` is its disk's (``kraft.version`` 1; None under 0).
    """

    __slots__ = (
        "_is_voter",
        "_voter_ids",
        "bootstrap_servers",
        "channel",
        "client",
        "controller",
        "controller_queue",
        "counter",
        "directory_id",
        "incarnation",
        "last_epoch",
        "last_role",
        "loader",
        "log",
        "node_id",
        "paused",
        "poll_at",
        "poll_generation",
        "queue",
        "request_aliases",
        "store",
        "vote_kinds",
    )

    def __init__(
        self,
        node_id: int,
        voter_ids: frozenset[int],
        retention: SnapshotRetention | None = None,
        directory_id: uuid.UUID | None = None,
    ) -> None:
        self.node_id = node_id
        self._voter_ids = voter_ids
        self._is_voter = node_id in voter_ids
        self.directory_id = directory_id
        #: The bootstrap servers its configuration names (kraft.version 1: the voters when it
        #: was started); a request to bootstrap server ``i`` reaches the node listening there.
        self.bootstrap_servers: tuple[Endpoint, ...] = ()
        self.log = MemoryLog(retention)
        self.store = MemoryQuorumStateStore(f"node-{node_id}")
        self.client: KafkaRaftClient[Any] | None = None
        self.counter: ReplicatedCounter | None = None
        #: In a controller cluster (kraft.simulation.controller), while the node runs: its
        #: controller, the queue that runs it, and its metadata loader.
        self.controller: QuorumController | None = None
        self.controller_queue: DeterministicEventQueue | None = None
        self.loader: MetadataLoader | None = None
        self.channel = MemoryChannel(node_id * 100_000_000)
        self.queue = DequeMessageQueue()
        self.incarnation = 0
        self.paused = False
        self.poll_at = -1
        self.poll_generation = 0
        self.last_role = "Down"
        self.last_epoch = -1
        #: (requester, correlation id) -> the id the requester addressed us by (bootstrap ids).
        self.request_aliases: dict[tuple[int, int], int] = {}
        #: (requester, correlation id) -> whether a Vote request was a pre-vote.
        self.vote_kinds: dict[tuple[int, int], bool] = {}

    @property
    def running(self) -> bool:
        return self.client is not None

    # What users read (Cluster.node(id).role and friends) ----------------------------------
    @property
    def voter_ids(self) -> frozenset[int]:
        """The voter set the node's client uses now (while down: when it last ran)."""
        if self.client is not None:
            self._voter_ids = self.client.voter_ids
        return self._voter_ids

    def remember_voters(self) -> None:
        """Keep what the client says of the voters, for while the node is down."""
        if self.client is not None:
            self._voter_ids = self.client.voter_ids
            self._is_voter = self.client.is_voter

    @property
    def is_voter(self) -> bool:
        """Whether the node is one of ``voter_ids`` (its id and, under kraft.version 1, its
        directory id), as its client says (while down: when it last ran)."""
        if self.client is not None:
            self._is_voter = self.client.is_voter
        return self._is_voter

    @property
    def role(self) -> str:
        return "Down" if self.client is None else self.client.role

    @property
    def epoch(self) -> int:
        if self.client is not None:
            return self.client.epoch
        state = self.store.read_election_state()
        return 0 if state is None else state.epoch

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def committed(self) -> list[Any]:
        """Records this node's listener received, in offset order, since it started or last
        loaded a snapshot."""
        return [] if self.counter is None else self.counter.committed

    @property
    def kv(self) -> KvStateMachine | None:
        """The node's key-value map (what its listener applied), or None while it is down."""
        return None if self.client is None or self.counter is None else self.counter.kv

    @property
    def image(self) -> MetadataImage | None:
        """The latest committed metadata image (a controller cluster's running node)."""
        return None if self.loader is None else self.loader.image

    @property
    def counter_value(self) -> int:
        return 0 if self.counter is None else self.counter.value

    def __repr__(self) -> str:
        return (
            f"SimNode({self.node_id}, {self.role}, epoch={self.epoch}, "
            f"hw={self.high_watermark}, leo={self.log_end_offset})"
        )


def top_leader(nodes: Iterable[SimNode]) -> SimNode | None:
    """The running node that is Leader in the highest epoch, if any."""
    best: SimNode | None = None
    for node in nodes:
        client = node.client
        if client is not None and client.is_leader and (best is None or client.epoch > best.epoch):
            best = node
    return best
