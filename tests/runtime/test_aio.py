"""``kraft.aio``: a lone voter opened from its TOML file in ``trio.run``, driven by awaits and
read through commit streams. No pytest-trio: each test runs its own ``trio.run``.

Each wait is an await with a ``trio.fail_after`` bound, never a sleep.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Sequence
from concurrent.futures import Future
from pathlib import Path

import pytest
import trio

from kraft.aio import AsyncNode, CommitsLaggedError, LoadedSnapshot, open_node
from kraft.errors import IllegalStateError, LeaderTransferError
from kraft.log.meta_properties import format_storage, random_uuid
from kraft.raft.listeners import Batch
from kraft.record.serde import StrSerde
from kraft.runtime.driver import RaftClientDriver
from kraft.runtime.processes import free_ports

TIMEOUT_S = 30.0


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    """A formatted lone voter: it elects itself."""
    format_storage(tmp_path / "node-1", random_uuid(), node_id=1)
    path = tmp_path / "node-1.toml"
    (port,) = free_ports(1)
    path.write_text(
        f'node_id = 1\ndata_dir = "node-1"\nvoters = "1@127.0.0.1:{port}"\n'
        "[quorum]\nappend_linger_ms = 0\n"
    )
    return path


async def records_through(
    stream: AsyncIterable[Batch[str] | LoadedSnapshot[str]], offset: int
) -> list[str]:
    """The records of the stream's batches up to the one that ends at or past ``offset``."""
    records: list[str] = []
    async for item in stream:
        assert isinstance(item, Batch)
        records.extend(item.records)
        if item.last_offset >= offset:
            return records
    raise AssertionError(f"the stream ended before offset {offset}")


def test_append_read_barrier_and_commits_on_a_lone_voter(config_file: Path) -> None:
    async def main() -> None:
        with trio.fail_after(TIMEOUT_S):
            async with open_node(config_file, StrSerde()) as node:
                assert isinstance(node, AsyncNode)
                async with node.commits() as stream:
                    first = await node.append(["a", "b"])
                    second = await node.append(["c"])
                    assert second == first + 1
                    assert await node.read_barrier() >= second
                    assert await records_through(stream, second) == ["a", "b", "c"]
                with pytest.raises(LeaderTransferError):  # no other voter to hand over to
                    await node.transfer_leadership()
                with pytest.raises(ValueError, match="timeout"):  # the core's, not raised
                    await node.append(["never"], timeout_ms=-1)

    trio.run(main)


def test_a_slow_reader_ends_its_stream_and_never_stalls_the_node(config_file: Path) -> None:
    """A stream holds two items; five more commit while its task reads nothing. The appends
    complete (the node does not wait for the task), and the task gets the two items it was
    holding, then CommitsLaggedError; a new stream starts again from the start of the log."""

    async def main() -> None:
        with trio.fail_after(TIMEOUT_S):
            async with open_node(config_file, StrSerde()) as node:
                stream = node.commits(buffer=2)
                last = -1
                for record in "vwxyz":
                    last = await node.append([record])
                held: list[Batch[str] | LoadedSnapshot[str]] = []
                with pytest.raises(CommitsLaggedError):
                    async for item in stream:
                        held.append(item)
                assert len(held) == 2 and stream.ended
                records = await records_through(node.commits(), last)
                assert records == list("vwxyz")

    trio.run(main)


def test_streams_end_when_the_node_closes_and_its_futures_fail_after(config_file: Path) -> None:
    async def main() -> None:
        with trio.fail_after(TIMEOUT_S):
            async with open_node(config_file, StrSerde()) as node:
                stream = node.commits()
                await node.append(["only"])
            items = [item async for item in stream]  # what it held, then the end
            assert [r for item in items if isinstance(item, Batch) for r in item.records] == [
                "only"
            ]
            with pytest.raises(IllegalStateError):
                await node.append(["late"])

    trio.run(main)


def test_a_cancelled_wait_withdraws_a_call_the_driver_has_not_taken(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver never takes the call (its call_soon drops it): the task's cancellation
    cancels the node's future, so the core never sees the append."""

    async def main() -> None:
        with trio.fail_after(TIMEOUT_S):
            async with open_node(config_file, StrSerde()) as node:
                asked: list[Future[int]] = []
                append = node.raft_node.append

                def spy(records: Sequence[str], *, timeout_ms: int | None = None) -> Future[int]:
                    asked.append(append(records, timeout_ms=timeout_ms))
                    return asked[-1]

                monkeypatch.setattr(node.raft_node, "append", spy)
                monkeypatch.setattr(RaftClientDriver, "call_soon", lambda self, fn: None)
                with trio.CancelScope() as scope:
                    scope.cancel()
                    await node.append(["withdrawn"])
                assert scope.cancelled_caught
                assert [future.cancelled() for future in asked] == [True]

    trio.run(main)
