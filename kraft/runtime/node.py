"""``RaftNode``: one whole replica of a quorum, ready to embed (Kafka's ``KafkaRaftManager``).

Theory of operation
    A node is the sans-IO :class:`~kraft.raft.client.KafkaRaftClient` plus the I/O it needs:
    the data directory formatted by ``kraft storage format`` (``meta.properties`` names the
    cluster and the node), a :class:`~kraft.log.file.FileLog` in ``__cluster_metadata-0``, the
    ``quorum-state`` file, a :class:`~kraft.runtime.queue.BlockingMessageQueue`, the trio TCP
    transport (its own thread, ``kraft-<id>-net``), the driver thread that polls the client
    (``kraft-<id>-io``), :class:`~kraft.metrics.RaftMetrics`, and optionally a Prometheus
    exporter.

    :meth:`RaftNode.start` opens them in dependency order (the exporter first, so that a
    missing ``metrics`` extra stops the node before it joins the quorum) and, if any step
    fails, closes what it opened before raising. :meth:`RaftNode.close` stops them in Kafka's
    order: the driver (a graceful shutdown: a leader resigns and tells the voters with
    EndQuorumEpoch, then the client is closed and the log flushed), the transport, the log
    (which releases the directory lock), the exporter.

    Threads: the caller's threads may use :meth:`RaftNode.register` (before or after
    :meth:`RaftNode.start`) and :attr:`RaftNode.client`'s public methods
    (``prepare_append``, ``schedule_prepared_append``, ``register``, ``resign``,
    ``leader_and_epoch``...). The client's accumulator is guarded by a lock for appends from
    any thread. Listener callbacks run on the driver thread.

    :meth:`RaftNode.append`, :meth:`RaftNode.read_barrier` and
    :meth:`RaftNode.transfer_leadership` may be called from any thread: each hands the core's
    call of the same name to the driver thread (``RaftClientDriver.call_soon``) and returns a
    ``concurrent.futures.Future`` that the core's ``RaftFuture`` completes, on the driver
    thread (so a callback added to it runs there: it must not block). A future still pending
    when the node stops fails with ``IllegalStateError``; so does one asked of a node that is
    not running (docs/embedding.md).

    A fault on the driver thread (an exception from ``poll``) is fatal, as in Kafka: it is
    logged, the node stops serving (transport and log closed), :attr:`RaftNode.failure` holds
    the exception, and :meth:`RaftNode.wait` returns. The node never hangs silently.
"""

from __future__ import annotations

import ipaddress
import logging
import random
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Generic, TypeVar

from kraft.common.uuids import ZERO_UUID, uuid_from_text
from kraft.config import Endpoint, QuorumConfig
from kraft.errors import FatalFaultError, IllegalStateError, LogDirectoryError
from kraft.log.base import SnapshotRetention
from kraft.log.file import DEFAULT_SEGMENT_BYTES, FileLog
from kraft.log.meta_properties import CLUSTER_METADATA_DIR, read_meta_properties
from kraft.log.quorum_state import FileQuorumStateStore, require_election_state
from kraft.metrics import RaftMetrics, start_prometheus_server
from kraft.protocol.controller_messages import ControllerResponse
from kraft.protocol.frame import DEFAULT_MAX_FRAME_SIZE
from kraft.raft.client import KafkaRaftClient
from kraft.raft.listeners import Listener
from kraft.raft.requests import bootstrap_server_id
from kraft.raft.states import Endpoints, ReplicaKey
from kraft.raft.voter_set import DEFAULT_LISTENER, VoterSet
from kraft.record.serde import RecordSerde
from kraft.runtime.clock import SystemClock
from kraft.runtime.config import NodeConfig, is_wildcard
from kraft.runtime.driver import DEFAULT_SHUTDOWN_TIMEOUT_MS, RaftClientDriver
from kraft.runtime.inbound import ControllerRequestSink
from kraft.runtime.limits import ConnectionLimits
from kraft.runtime.queue import BlockingMessageQueue
from kraft.runtime.tls import TlsConfig
from kraft.runtime.transport import TrioNetworkChannel

if TYPE_CHECKING:
    from kraft.raft.futures import RaftFuture

__all__ = ["RaftNode", "unauthenticated_listener"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class RaftNode(Generic[T]):
    """A replica of a KRaft quorum with its disk, network and driver thread.

    ``controller_requests``: where the listener hands the controller's requests (a controller
    node, :mod:`kraft.runtime.controller_node`; answered with :meth:`respond_controller`);
    ``None``, a Raft replica only, refuses them as malformed frames.
    """

    def __init__(
        self,
        *,
        node_id: int,
        data_dir: Path | str,
        config: QuorumConfig,
        serde: RecordSerde[T],
        cluster_id: str | None = None,
        listen: Endpoint | None = None,
        tls: TlsConfig | None = None,
        prometheus: Endpoint | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        segment_bytes: int | None = None,
        retention: SnapshotRetention | None = None,
        shutdown_timeout_ms: int = DEFAULT_SHUTDOWN_TIMEOUT_MS,
        fatal_fault_handler: Callable[[BaseException], None] | None = None,
        limits: ConnectionLimits | None = None,
        controller_requests: ControllerRequestSink | None = None,
    ) -> None:
        if listen is None and node_id not in config.voters:
            raise IllegalStateError(f"node {node_id} is not a voter: give it a listen address")
        self.node_id = node_id
        self.data_dir = Path(data_dir)
        self.config = config
        self._serde = serde
        self._cluster_id = cluster_id
        self._listen = listen if listen is not None else config.voters[node_id]
        self._tls = tls
        self._prometheus = prometheus
        self._max_frame_size = max_frame_size
        self._segment_bytes = DEFAULT_SEGMENT_BYTES if segment_bytes is None else segment_bytes
        self._retention = retention
        self._shutdown_timeout_ms = shutdown_timeout_ms
        self._limits = limits
        self._controller_requests = controller_requests
        self._user_fault_handler = fatal_fault_handler
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._started = False
        self._closed = False
        self._client: KafkaRaftClient[T] | None = None
        #: Listeners registered before :meth:`start`, handed to the client when it is built.
        self._early_listeners: list[Listener[T]] = []
        self._log: FileLog | None = None
        self._channel: TrioNetworkChannel | None = None
        self._driver: RaftClientDriver | None = None
        self._stop_exporter: Callable[[], None] | None = None
        self._bound: Endpoint | None = None
        self._local_key: ReplicaKey | None = None
        #: The voter set the transport was last told about (see :meth:`_follow_voters`).
        self._voters: VoterSet | None = None
        self._client_closed = False
        self.metrics = RaftMetrics(SystemClock())
        #: The exception that stopped the driver thread, or ``None``.
        self.failure: BaseException | None = None
        #: The futures of append, read_barrier and transfer_leadership not yet completed:
        #: failed at close, so that no caller waits on a node that has stopped.
        self._pending: set[Future[int]] = set()

    @classmethod
    def from_config(
        cls,
        config: NodeConfig,
        serde: RecordSerde[T],
        *,
        controller_requests: ControllerRequestSink | None = None,
    ) -> RaftNode[T]:
        """A node built from a :class:`~kraft.runtime.config.NodeConfig` (a TOML file);
        ``controller_requests`` as for the constructor."""
        return cls(
            node_id=config.node_id,
            data_dir=config.data_dir,
            config=config.quorum,
            serde=serde,
            cluster_id=config.cluster_id,
            listen=config.listen,
            tls=config.tls,
            prometheus=config.prometheus,
            max_frame_size=config.max_frame_size,
            segment_bytes=config.segment_bytes,
            limits=config.limits,
            controller_requests=controller_requests,
        )

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Open the data directory, bind the listener and start polling.

        Raises :class:`~kraft.errors.MetaPropertiesError` for a directory that is not
        formatted or belongs to another cluster or node, :class:`~kraft.errors.StorageError`
        for a log that cannot be opened (or is locked by another process),
        :class:`~kraft.errors.TransportError` for an address that cannot be bound.
        """
        with self._lock:
            if self._started:
                raise IllegalStateError("the node was started already")
            self._started = True
        try:
            self._open()
        except BaseException:
            with self._lock:
                self._closed = True  # a later close() has nothing left to do
            self._teardown()
            raise
        logger.info(
            "node %d of cluster %s is up, listening on %s",
            self.node_id,
            self._cluster_id,
            self.listen_address,
        )
        reason = unauthenticated_listener(self.listen_address, self._tls)
        if reason is not None:
            logger.warning(
                "node %d listens on %s with %s: any host that reaches this port can disrupt "
                "the quorum (start elections, depose the leader, pose as a voter). Configure "
                "[tls] with peer_identity, or keep the port on a network only the voters reach "
                "(docs/operations.md, Security)",
                self.node_id,
                self.listen_address,
                reason,
            )

    def _open(self) -> None:
        meta = read_meta_properties(self.data_dir)
        meta.verify(cluster_id=self._cluster_id, node_id=self.node_id)
        self._cluster_id = meta.cluster_id
        # The exporter first: a missing metrics extra or a busy port stops the node before it
        # opens its log, so that a voter never wins an election it would then walk away from.
        if self._prometheus is not None:
            self._stop_exporter = start_prometheus_server(
                self.metrics, self._prometheus.host, self._prometheus.port, node_id=self.node_id
            )
        directory_id = uuid_from_text(meta.directory_id) if meta.directory_id else None
        clock = SystemClock()
        try:
            self._log = FileLog.open(
                self.data_dir / CLUSTER_METADATA_DIR,
                segment_bytes=self._segment_bytes,
                retention=self._retention,
            )
        except LogDirectoryError as exc:
            if isinstance(exc.__cause__, BlockingIOError):  # the directory lock is taken
                raise LogDirectoryError(
                    f"node {self.node_id} is running already (another process has its data "
                    f"directory {self.data_dir}): {exc}"
                ) from exc
            raise
        store = FileQuorumStateStore.in_directory(self.data_dir)
        require_election_state(store, self._log)
        queue = BlockingMessageQueue()
        peers: dict[int, Endpoint] = {
            voter: address for voter, address in self.config.voters.items() if voter != self.node_id
        }
        for index, address in enumerate(self.config.bootstrap_servers):
            peers[bootstrap_server_id(index)] = address
        channel = TrioNetworkChannel(
            node_id=self.node_id,
            cluster_id=self._cluster_id,
            listen=self._listen,
            peers=peers,
            queue=queue,
            clock=clock,
            request_timeout_ms=self.config.request_timeout_ms,
            max_frame_size=self._max_frame_size,
            tls=self._tls,
            directory_id=directory_id or ZERO_UUID,
            limits=self._limits,
            controller_requests=self._controller_requests,
        )
        self._channel = channel
        # Bound before the client is built: its endpoint (KIP-853) is the real port when
        # configured with port 0. Requests wait in the queue until the driver polls.
        channel.start()
        self._bound = channel.listen_address
        self._local_key = ReplicaKey(self.node_id, directory_id)
        client: KafkaRaftClient[T] = KafkaRaftClient(
            local_id=self.node_id,
            config=self.config,
            log=self._log,
            store=store,
            channel=channel,
            queue=queue,
            clock=clock,
            rand=random.Random(),
            serde=self._serde,
            local_directory_id=directory_id,
            cluster_id=self._cluster_id,
            append_lock=threading.Lock(),
            metrics=self.metrics,
            local_endpoints=self._advertised_endpoints(),
        )
        with self._lock:
            self._client = client
            early, self._early_listeners = self._early_listeners, []
        for listener in early:
            client.register(listener)  # taken in by the driver's first poll
        client.initialize()
        self.metrics.bind(client)
        self.metrics.bind_transport(channel)
        self._follow_voters()
        self._driver = RaftClientDriver(
            client,
            fatal_fault_handler=self._on_fatal_fault,
            poll_idle=self.metrics,
            shutdown_timeout_ms=self._shutdown_timeout_ms,
            after_poll=self._follow_voters,
        )
        self._driver.start()

    def _advertised_endpoints(self) -> Endpoints:
        """The listener others reach this node on (KIP-853's endpoints): its entry in the static
        ``voters`` when it listens elsewhere (a wildcard, say), else where it listens (the real
        port when configured with port 0). None for a wildcard: the client falls back to the
        voter set's entry for this node."""
        configured = self.config.voters.get(self.node_id)
        if configured is not None and configured != self._listen:
            address = configured
        else:
            address = self.listen_address
            if is_wildcard(address.host):
                return ()
        return ((DEFAULT_LISTENER, address.host, address.port),)

    def _follow_voters(self) -> None:
        """Tell the transport about a new voter set (KIP-853: the latest ``VotersRecord`` in
        the log), and log this node's own addition or removal. Runs after every poll: the
        set is immutable, so an unchanged one costs an identity check."""
        client, channel = self._client, self._channel
        if client is None or channel is None:
            return
        voters = client.voter_set
        previous = self._voters
        if voters is previous:
            return
        self._voters = voters
        if voters == previous:
            return
        channel.set_voters(
            {
                node.key.id: address
                for node in voters.nodes()
                if node.key.id != self.node_id
                and (address := _voter_address(node.endpoints)) is not None
            }
        )
        key = self._local_key
        assert key is not None
        was_voter = previous is not None and previous.is_voter(key)
        if voters.is_voter(key) and not was_voter:
            logger.info("node %d is a voter (voters %s)", self.node_id, sorted(voters.ids))
        elif was_voter and not voters.is_voter(key):
            logger.warning(
                "node %d is no longer a voter; it continues as an observer (voters %s)",
                self.node_id,
                sorted(voters.ids),
            )

    def _on_fatal_fault(self, exc: BaseException) -> None:
        self.failure = exc
        logger.critical("node %d stops after a fatal fault: %r", self.node_id, exc)
        # The driver thread cannot join itself: stop the rest from another thread.
        threading.Thread(target=self.close, name=f"kraft-{self.node_id}-fault", daemon=True).start()
        if self._user_fault_handler is not None:
            self._user_fault_handler(exc)

    def close(self) -> None:
        """Shut down gracefully and release everything (idempotent)."""
        with self._lock:
            closing, self._closed = self._closed, True
        if closing:  # wait for the first close, without the lock its teardown takes
            self._stopped.wait()
            return
        logger.info("node %d is shutting down", self.node_id)
        self._teardown()

    def _teardown(self) -> None:
        """Stop what is running, in Kafka's order; each part at most once."""
        driver, self._driver = self._driver, None
        client = None if self._client_closed else self._client
        self._client_closed = True
        channel, self._channel = self._channel, None
        log, self._log = self._log, None
        stop_exporter, self._stop_exporter = self._stop_exporter, None
        try:
            if driver is not None:
                driver.shutdown()
            elif client is not None and client.is_initialized:
                client.close()
            if channel is not None:
                channel.close()
            if log is not None:
                log.close()
            if stop_exporter is not None:
                stop_exporter()
        finally:
            with self._lock:
                pending, self._pending = self._pending, set()
            for future in pending:
                _settle(future, exception=IllegalStateError(f"node {self.node_id} has stopped"))
            self._stopped.set()
            logger.info("node %d has stopped", self.node_id)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until the node has stopped (closed, or stopped by a fatal fault)."""
        return self._stopped.wait(timeout_s)

    def __enter__(self) -> RaftNode[T]:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def register(self, listener: Listener[T]) -> None:
        """Register ``listener`` (your state machine) with the client: at :meth:`start` when
        called before it, so that it sees every commit and leader change from the first poll
        on; at once otherwise. Its callbacks run on the driver thread."""
        with self._lock:
            client = self._client
            if client is None:
                self._early_listeners.append(listener)
                return
        client.register(listener)

    def respond_controller(self, channel_id: int, body: ControllerResponse) -> None:
        """Answer the controller request handed to ``controller_requests`` under
        ``channel_id`` (from any thread; dropped once the node has stopped)."""
        channel = self._channel
        if channel is not None:
            channel.respond_controller(channel_id, body)

    # -- writes, reads and leadership, from any thread -----------------------------------------
    def append(self, records: Sequence[T], *, timeout_ms: int | None = None) -> Future[int]:
        """Append ``records`` as one batch, through the leader wherever it is.

        The future's result is the offset of the batch's last record, once the batch has
        committed and this node's listeners have been handed it. It fails with
        ``NotLeaderError`` (the batch did not commit; ``leader_id`` hints where the leader
        is), ``OperationTimeoutError`` at the timeout (the outcome is unknown: the batch may
        still commit), ``RecordBatchTooLargeError`` or ``BufferAllocationError``.
        ``timeout_ms=None`` is the quorum's ``request_timeout_ms``.
        """
        batch = list(records)  # the caller may reuse its sequence once the call returns
        return self._submit(lambda client: client.append(batch, timeout_ms=timeout_ms))

    def read_barrier(self, *, timeout_ms: int | None = None) -> Future[int]:
        """A future of an offset R at or above every write acknowledged before this call,
        completed once this node's listeners have been handed everything up to R: state
        read from them afterwards is linearizable (read index; docs/embedding.md)."""
        return self._submit(lambda client: client.read_barrier(timeout_ms=timeout_ms))

    def transfer_leadership(
        self, node_id: int | None = None, *, timeout_ms: int | None = None
    ) -> Future[int]:
        """On the leader: resign in favour of voter ``node_id`` (``None``: the most caught-up
        other voter). The future's result is the id of the new leader once this node learns
        of it; it fails with ``LeaderTransferError`` for a target that is not a caught-up
        voter, ``NotLeaderError`` on a node that does not lead."""
        return self._submit(
            lambda client: client.transfer_leadership(node_id, timeout_ms=timeout_ms)
        )

    def _submit(self, call: Callable[[KafkaRaftClient[T]], RaftFuture[int]]) -> Future[int]:
        """Run ``call`` on the driver thread; its RaftFuture completes the returned future."""
        future: Future[int] = Future()
        with self._lock:
            driver, client = self._driver, self._client
            if driver is None or client is None or self._closed:
                future.set_exception(IllegalStateError(f"node {self.node_id} is not running"))
                return future
            self._pending.add(future)
        future.add_done_callback(self._forget)

        def start() -> None:
            # Cancelled before it started (or failed by a close that gave up waiting for this
            # thread): nothing is asked of the core.
            if future.done() or not future.set_running_or_notify_cancel():
                return
            try:
                raft_future = call(client)
            except Exception as exc:  # ValueError for a negative timeout
                _settle(future, exception=exc)
                return
            raft_future.add_done_callback(lambda done: _complete(future, done))

        try:
            driver.call_soon(start)
        except IllegalStateError as exc:  # the driver stopped since: close() fails the rest
            _settle(future, exception=exc)
        return future

    def _forget(self, future: Future[int]) -> None:
        with self._lock:
            self._pending.discard(future)

    # -- what users read ------------------------------------------------------------------------
    @property
    def client(self) -> KafkaRaftClient[T]:
        """The Raft client (after :meth:`start`)."""
        if self._client is None:
            raise IllegalStateError("the node is not started")
        if self.failure is not None:
            raise FatalFaultError(f"node {self.node_id} stopped on a fatal fault") from (
                self.failure
            )
        return self._client

    @property
    def cluster_id(self) -> str | None:
        return self._cluster_id

    @property
    def listen_address(self) -> Endpoint:
        """The address the node listens on (the real port when configured with port 0)."""
        return self._bound if self._bound is not None else self._listen

    @property
    def is_running(self) -> bool:
        driver = self._driver
        return driver is not None and driver.is_alive()


def _complete(future: Future[int], done: RaftFuture[int]) -> None:
    error = done.exception()
    if error is None:
        _settle(future, result=done.result())
    else:
        _settle(future, exception=error)


def _settle(
    future: Future[int], *, result: int | None = None, exception: BaseException | None = None
) -> None:
    """Complete ``future`` unless it is done already (a node that stopped may have failed it
    while the driver thread, which did not stop in time, completes it too)."""
    try:
        if exception is not None:
            future.set_exception(exception)
        else:
            assert result is not None
            future.set_result(result)
    except InvalidStateError:
        pass


def _voter_address(endpoints: Endpoints) -> Endpoint | None:
    """Where to reach a voter: its ``CONTROLLER`` listener, else its first one."""
    for name, host, port in endpoints:
        if name == DEFAULT_LISTENER:
            return Endpoint(host, port)
    return Endpoint(endpoints[0][1], endpoints[0][2]) if endpoints else None


def unauthenticated_listener(listen: Endpoint, tls: TlsConfig | None) -> str | None:
    """Why a node listening at ``listen`` lets any host that reaches it speak for a replica,
    or None: a loopback address, or TLS that verifies and requires client certificates."""
    if listen.host == "localhost":
        return None
    try:
        if ipaddress.ip_address(listen.host).is_loopback:
            return None
    except ValueError:
        pass  # a host name: others may reach it
    if tls is None:
        return "no TLS"
    if not tls.verify:
        return "TLS that does not verify certificates (tls.verify = false)"
    if not tls.require_client_cert:
        return "TLS that does not require client certificates (tls.require_client_cert = false)"
    return None
