"""What an embedding application asks of a node, on a simulated one: ``submit`` (the client's
``append``: a commit future, forwarded to the leader from any node), ``read_barrier`` and
``transfer_leadership`` (docs/simulation.md, "Client operations").

Each returns a :class:`~kraft.raft.futures.RaftFuture` that the node's ``poll()`` completes, as
a real node's would. A simulated node can crash, and a crashed process completes nothing: the
cluster fails every future still pending on it with :class:`NodeCrashedError` (its outcome is
unknown: a batch may still commit), so that a workload waiting on one never hangs. A call to
a node that is down fails at once with :class:`NodeDownError` (nothing was done).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from kraft.errors import IllegalStateError, KraftError, NotLeaderError
from kraft.raft.client import KafkaRaftClient
from kraft.raft.futures import RaftFuture
from kraft.simulation.node import SimNode

__all__ = ["ClientOperations", "NodeCrashedError", "NodeDownError"]

R = TypeVar("R")


class NodeDownError(IllegalStateError):
    """The node asked is down: the call did nothing."""


class NodeCrashedError(KraftError):
    """The node went down while the call was pending: its outcome is unknown (a batch it was
    committing may still commit)."""


class _Cluster(Protocol):
    """What the operations use of the cluster they are part of (``self`` of the methods)."""

    nodes: dict[int, SimNode]
    _pending: dict[int, dict[int, RaftFuture[Any]]]
    _pending_seq: int

    def node(self, node_id: int) -> SimNode: ...
    def leader(self) -> int | None: ...
    def _wake(self, node: SimNode, at: int | None = None) -> None: ...
    def _via(self, via: int | None) -> SimNode | None: ...
    def _track(
        self, node: SimNode, call: Callable[[KafkaRaftClient[Any]], RaftFuture[R]]
    ) -> RaftFuture[R]: ...


class ClientOperations:
    """The client calls of :class:`~kraft.simulation.cluster.Cluster` (a base class of it)."""

    def submit(
        self: _Cluster,
        records: Sequence[Any],
        *,
        via: int | None = None,
        timeout_ms: int | None = None,
    ) -> RaftFuture[int]:
        """Append ``records`` as one batch through node ``via`` (the leader by default; a
        follower or an observer forwards it): a future of the last record's offset once it is
        committed and delivered to ``via``'s state machines (``KafkaRaftClient.append``)."""
        node = self._via(via)
        if node is None:
            return _failed(NotLeaderError("no leader to submit to", leader_id=None))
        return self._track(node, lambda client: client.append(records, timeout_ms=timeout_ms))

    def read_barrier(
        self: _Cluster, node_id: int, *, timeout_ms: int | None = None
    ) -> RaftFuture[int]:
        """A future of an offset ``R``: every write acknowledged before the call is at or below
        ``R``, and node ``node_id``'s state machines were handed everything up to ``R``
        (``KafkaRaftClient.read_barrier``)."""
        return self._track(
            self.node(node_id), lambda client: client.read_barrier(timeout_ms=timeout_ms)
        )

    def transfer_leadership(
        self: _Cluster,
        node_id: int | None = None,
        *,
        via: int | None = None,
        timeout_ms: int | None = None,
    ) -> RaftFuture[int]:
        """Ask leader ``via`` (the current leader by default) to hand over to ``node_id`` (the
        most caught-up other voter when None): a future of the new leader's id, once ``via``
        learns of it (``KafkaRaftClient.transfer_leadership``)."""
        node = self._via(via)
        if node is None:
            return _failed(NotLeaderError("no leader to transfer from", leader_id=None))
        return self._track(
            node, lambda client: client.transfer_leadership(node_id, timeout_ms=timeout_ms)
        )

    def _via(self: _Cluster, via: int | None) -> SimNode | None:
        """Node ``via``, or the leader when None (None without one)."""
        if via is not None:
            return self.node(via)
        leader_id = self.leader()
        return None if leader_id is None else self.nodes[leader_id]

    def _track(
        self: _Cluster, node: SimNode, call: Callable[[KafkaRaftClient[Any]], RaftFuture[R]]
    ) -> RaftFuture[R]:
        """Make the call on ``node``'s client and hand back a future the cluster can fail if
        the node goes down first (the client's own future dies with its process)."""
        client = node.client
        if client is None:
            return _failed(NodeDownError(f"node {node.node_id} is down"))
        inner = call(client)
        outer: RaftFuture[R] = RaftFuture()
        self._pending_seq += 1
        key = self._pending_seq
        pending = self._pending.setdefault(node.node_id, {})
        pending[key] = outer

        def relay(inner: RaftFuture[R]) -> None:
            pending.pop(key, None)
            if outer.done():
                return  # the node went down first
            error = inner.exception()
            if error is None:
                outer.set_result(inner.result())
            else:
                outer.set_exception(error)

        inner.add_done_callback(relay)
        if not node.paused:
            self._wake(node)
        return outer

    def _fail_pending(self: _Cluster, node: SimNode) -> None:
        """``node`` went down: every future pending on it fails, outcome unknown."""
        pending = self._pending.pop(node.node_id, {})
        for future in pending.values():
            if not future.done():
                future.set_exception(
                    NodeCrashedError(f"node {node.node_id} went down with the call pending")
                )


def _failed(error: BaseException) -> RaftFuture[Any]:
    future: RaftFuture[Any] = RaftFuture()
    future.set_exception(error)
    return future
