"""A write that fails for lack of descriptors or memory is retried, not fatal
(kraft/raft/resources.py): the leader keeps the batches it could not append, a follower
fetches again what it could not write, and nothing is lost or written twice.

Three real clients on a :class:`LocalCluster` (virtual time); a node's log is made to fail as
``FileLog`` does when a segment roll cannot open its files: a ``StorageError`` raised from an
``OSError`` with errno EMFILE.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from kraft.errors import StorageError
from kraft.log.memory import MemoryLog
from kraft.testing import LocalCluster

TIMEOUT_MS = 30_000


def storage_error(code: int) -> StorageError:
    try:
        raise OSError(code, "Too many open files" if code == errno.EMFILE else "I/O error")
    except OSError as exc:
        try:
            raise StorageError(f"cannot open segment 00000000000000000042.log: {exc}") from exc
        except StorageError as wrapped:
            return wrapped


@contextmanager
def failing(
    monkeypatch: pytest.MonkeyPatch, log: MemoryLog, method: str, code: int = errno.EMFILE
) -> Iterator[list[int]]:
    """``log.<method>`` raises like a segment roll out of descriptors, until the block ends;
    yields the list of failed calls (one entry each)."""
    calls: list[int] = []

    def fail(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        raise storage_error(code)

    with monkeypatch.context() as patch:
        patch.setattr(log, method, fail)
        yield calls


def elect(cluster: LocalCluster[bytes]) -> int:
    assert cluster.run_until(lambda: cluster.leader() is not None, TIMEOUT_MS)
    leader = cluster.leader()
    assert leader is not None
    # The LeaderChange record is committed: the epoch's appends commit from here on.
    client = cluster.nodes[leader]
    assert cluster.run_until(lambda: (client.high_watermark or 0) > 0, TIMEOUT_MS)
    return leader


def committed_everywhere(cluster: LocalCluster[bytes], records: list[bytes]) -> Callable[[], bool]:
    return lambda: all(listener.records == records for listener in cluster.listeners.values())


def test_the_leader_keeps_batches_it_cannot_append_and_appends_them_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster: LocalCluster[bytes] = LocalCluster(3, append_linger_ms=0)
    leader = elect(cluster)
    log = cluster.logs[leader]
    assert isinstance(log, MemoryLog)
    before = [b"before"]
    cluster.append(before)
    assert cluster.run_until(committed_everywhere(cluster, before), TIMEOUT_MS)
    end_before = log.log_end_offset
    with failing(monkeypatch, log, "append_encoded") as calls:
        cluster.append([b"a1", b"a2"])
        cluster.run_for(250)
        cluster.append([b"b1"])  # drained behind the batch that waits
        cluster.run_for(250)
        assert len(calls) >= 3  # retried (every 100 ms), never given up
    assert log.log_end_offset == end_before  # nothing written meanwhile
    assert cluster.leader() == leader
    expected = [*before, b"a1", b"a2", b"b1"]
    assert cluster.run_until(committed_everywhere(cluster, expected), TIMEOUT_MS)
    assert cluster.nodes[leader].high_watermark == log.log_end_offset


def test_a_follower_that_cannot_append_fetches_the_records_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster: LocalCluster[bytes] = LocalCluster(3, append_linger_ms=0)
    leader = elect(cluster)
    follower = next(node for node in cluster.nodes if node != leader)
    log = cluster.logs[follower]
    assert isinstance(log, MemoryLog)
    with failing(monkeypatch, log, "append_as_follower") as calls:
        cluster.append([b"x", b"y"])
        # The other follower makes a majority: the records commit without this one.
        others = [n for n in cluster.nodes if n != follower]
        assert cluster.run_until(
            lambda: all(cluster.listeners[n].records == [b"x", b"y"] for n in others),
            TIMEOUT_MS,
        )
        cluster.run_for(100)
        assert calls
    assert cluster.listeners[follower].records == []
    assert cluster.run_until(committed_everywhere(cluster, [b"x", b"y"]), TIMEOUT_MS)
    assert cluster.leader() == leader


def test_any_other_storage_error_is_still_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster: LocalCluster[bytes] = LocalCluster(3, append_linger_ms=0)
    leader = elect(cluster)
    log = cluster.logs[leader]
    assert isinstance(log, MemoryLog)
    with failing(monkeypatch, log, "append_encoded", errno.EIO):
        cluster.append([b"z"])
        with pytest.raises(StorageError, match="I/O error"):
            cluster.run_for(100)
