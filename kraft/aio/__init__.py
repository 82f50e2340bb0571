"""``kraft.aio``: a :class:`~kraft.runtime.node.RaftNode` for trio programs.

Theory of operation
    ``async with open_node(config, serde) as node`` builds the node as ``kraft node start``
    does (a :class:`~kraft.runtime.config.NodeConfig`, or the path of its TOML file), starts it
    and closes it in a worker thread (``trio.to_thread.run_sync``): opening the log, binding
    the port, and the graceful shutdown's fsyncs and joins never run on the event loop. The node
    keeps its own threads (the transport and the driver that polls the core); nothing here
    replaces them.

    ``await node.append(...)``, ``await node.read_barrier()`` and
    ``await node.transfer_leadership()`` wait on the node's ``concurrent.futures.Future``
    without a thread: the future's done callback (on the driver thread) wakes the waiting task
    with ``TrioToken.run_sync_soon``. A task cancelled while it waits cancels the future only if
    the driver had not yet taken the call; otherwise the operation goes on and its outcome is
    unknown to the task (an append may still commit).

    ``async for batch in node.commits()`` registers a listener that hands every committed
    batch (and a snapshot, as a :class:`LoadedSnapshot`, when the node loads one) to the task,
    in offset order, from the start of the log. The listener runs on the driver thread and must
    never wait for the task, or the whole node would stall; so the stream holds at most
    ``buffer`` items that the task has not taken yet, and when the task falls that far behind,
    the stream ends with :class:`CommitsLaggedError` after the items it holds, and its listener
    is unregistered. Memory stays bounded whatever the task does; a task that needs every batch
    opens a new stream, which starts again from the latest snapshot.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Generic, TypeVar

import trio

from kraft.errors import KraftError
from kraft.raft.listeners import Batch, BatchReader, Listener, SnapshotReaderLike
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.serde import RecordSerde
from kraft.runtime.config import NodeConfig, load_node_config
from kraft.runtime.node import RaftNode

__all__ = [
    "DEFAULT_COMMITS_BUFFER",
    "AsyncNode",
    "CommitStream",
    "CommitsLaggedError",
    "LoadedSnapshot",
    "open_node",
]

T = TypeVar("T")

#: How many items a commit stream holds for a task that has not taken them.
DEFAULT_COMMITS_BUFFER = 1024


class CommitsLaggedError(KraftError):
    """The task reading a commit stream fell ``buffer`` items behind: the stream ended."""


@dataclass(frozen=True, slots=True)
class LoadedSnapshot(Generic[T]):
    """The node loaded a snapshot (KIP-630): the state at ``snapshot_id`` replaces everything
    before it; the batches that follow start at ``snapshot_id.offset``."""

    snapshot_id: OffsetAndEpoch
    records: list[T]


@dataclass(frozen=True, slots=True)
class _End:
    error: BaseException | None


class CommitStream(Generic[T]):
    """The committed batches of one node, for one task (see the module docstring).

    An async iterator, and an async context manager that unregisters it on exit.
    """

    def __init__(self, node: RaftNode[T], buffer: int) -> None:
        if buffer < 1:
            raise ValueError(f"a commit stream holds at least one item, not {buffer}")
        self._node = node
        self._buffer = buffer
        self._token = trio.lowlevel.current_trio_token()
        # One more slot than items: the end marker always fits.
        self._send, self._receive = trio.open_memory_channel[Batch[T] | LoadedSnapshot[T] | _End](
            buffer + 1
        )
        self._lock = threading.Lock()
        #: Items pushed by the driver thread and not yet taken by the task.
        self._queued = 0
        self._ended = False
        self._listener = _StreamListener(self)
        node.register(self._listener)

    @property
    def ended(self) -> bool:
        """Whether the stream takes no more batches (what it holds may still be read)."""
        with self._lock:
            return self._ended

    # -- the driver thread ----------------------------------------------------------------------
    def _push(self, item: Batch[T] | LoadedSnapshot[T]) -> None:
        with self._lock:
            if self._ended:
                return
            if self._queued >= self._buffer:
                self._ended = True
                end = _End(CommitsLaggedError(f"the task fell {self._buffer} items behind"))
                self._node.client.unregister(self._listener)
            else:
                self._queued += 1
                end = None
        self._to_task(item if end is None else end)

    def _finish(self) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        self._to_task(_End(None))

    def _to_task(self, item: Batch[T] | LoadedSnapshot[T] | _End) -> None:
        try:
            self._token.run_sync_soon(self._deliver, item)
        except trio.RunFinishedError:  # the task's event loop is gone: nobody reads any more
            with self._lock:
                self._ended = True
            self._node.client.unregister(self._listener)

    # -- the event loop -------------------------------------------------------------------------
    def _deliver(self, item: Batch[T] | LoadedSnapshot[T] | _End) -> None:
        # Never full: the count in _push bounds what is in it. Closed: the task closed it.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            self._send.send_nowait(item)

    def __aiter__(self) -> CommitStream[T]:
        return self

    async def __anext__(self) -> Batch[T] | LoadedSnapshot[T]:
        try:
            item = await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None
        if isinstance(item, _End):
            await self._receive.aclose()
            if item.error is not None:
                raise item.error
            raise StopAsyncIteration
        with self._lock:
            self._queued -= 1
        return item

    async def aclose(self) -> None:
        """Stop the stream: its listener is unregistered, what it holds is dropped."""
        with self._lock:
            was_ended, self._ended = self._ended, True
        if not was_ended and self._node.is_running:
            self._node.client.unregister(self._listener)
        await self._receive.aclose()

    async def __aenter__(self) -> CommitStream[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _StreamListener(Listener[T]):
    """Reads each batch on the driver thread and hands it to the stream."""

    def __init__(self, stream: CommitStream[T]) -> None:
        self._stream = stream

    def handle_commit(self, reader: BatchReader[T]) -> None:
        with reader:
            for batch in reader:  # also control batches: a read barrier may end on one
                self._stream._push(batch)

    def handle_load_snapshot(self, reader: SnapshotReaderLike[T]) -> None:
        try:
            records = [record for batch in reader for record in batch.records]
            self._stream._push(LoadedSnapshot(reader.snapshot_id, records))
        finally:
            reader.close()

    def begin_shutdown(self) -> None:
        self._stream._finish()


class AsyncNode(Generic[T]):
    """A running node, for trio tasks (built by :func:`open_node`)."""

    def __init__(self, node: RaftNode[T]) -> None:
        self.raft_node = node
        self._streams: list[CommitStream[T]] = []

    async def append(self, records: Sequence[T], *, timeout_ms: int | None = None) -> int:
        """:meth:`RaftNode.append <kraft.runtime.node.RaftNode.append>`, awaited."""
        return await _wait(self.raft_node.append(records, timeout_ms=timeout_ms))

    async def read_barrier(self, *, timeout_ms: int | None = None) -> int:
        """:meth:`RaftNode.read_barrier <kraft.runtime.node.RaftNode.read_barrier>`, awaited.

        The offset it returns has been handed to this node's listeners; a commit stream's task
        has read it once it has taken a batch whose ``last_offset`` is at or past it."""
        return await _wait(self.raft_node.read_barrier(timeout_ms=timeout_ms))

    async def transfer_leadership(
        self, node_id: int | None = None, *, timeout_ms: int | None = None
    ) -> int:
        """:meth:`RaftNode.transfer_leadership
        <kraft.runtime.node.RaftNode.transfer_leadership>`, awaited."""
        return await _wait(self.raft_node.transfer_leadership(node_id, timeout_ms=timeout_ms))

    def commits(self, *, buffer: int = DEFAULT_COMMITS_BUFFER) -> CommitStream[T]:
        """A new stream of every committed batch from the start of the log (or the latest
        snapshot), holding at most ``buffer`` items the task has not taken."""
        stream = CommitStream(self.raft_node, buffer)
        # The ended ones go: a program that opens streams over and over holds only live ones.
        self._streams = [s for s in self._streams if not s.ended]
        self._streams.append(stream)
        return stream

    def _end_streams(self) -> None:
        for stream in self._streams:
            stream._finish()


async def _wait(future: Future[int]) -> int:
    """The future's result, waited for without blocking the event loop."""
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()

    def wake(_: Future[int]) -> None:
        with contextlib.suppress(trio.RunFinishedError):  # the task's event loop is gone
            token.run_sync_soon(done.set)

    future.add_done_callback(wake)  # at once, on this thread, if it is done already
    try:
        await done.wait()
    finally:
        if not done.is_set():  # cancelled: withdraw the call if the driver has not taken it
            future.cancel()
    return future.result()


@asynccontextmanager
async def open_node(
    config: NodeConfig | Path | str, serde: RecordSerde[T]
) -> AsyncIterator[AsyncNode[T]]:
    """Start the node of ``config`` (a :class:`~kraft.runtime.config.NodeConfig` or a TOML
    file's path) and close it gracefully when the block ends, both off the event loop."""
    if not isinstance(config, NodeConfig):
        config = await trio.to_thread.run_sync(load_node_config, config)
    node = RaftNode.from_config(config, serde)
    await trio.to_thread.run_sync(node.start)
    async_node = AsyncNode(node)
    try:
        yield async_node
    finally:
        with trio.CancelScope(shield=True):  # a cancelled block still closes its node
            await trio.to_thread.run_sync(node.close)
        async_node._end_streams()
