"""``RaftNode`` embedded: listeners registered before ``start()``, and a node configured with
metrics but without the ``metrics`` extra, which must stop before it joins the quorum."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraft.cli.main import main
from kraft.config import Endpoint, QuorumConfig
from kraft.errors import LogDirectoryError, QuorumStateError
from kraft.log.file import FileLog
from kraft.log.meta_properties import CLUSTER_METADATA_DIR, format_storage, random_uuid
from kraft.log.quorum_state import QUORUM_STATE_FILE
from kraft.metrics import MetricsExtraMissingError
from kraft.raft.listeners import BatchReader, LeaderAndEpoch, Listener, SnapshotReaderLike
from kraft.record.serde import StrSerde
from kraft.runtime.node import RaftNode
from kraft.runtime.processes import free_ports

TIMEOUT_S = 30.0


class Watcher(Listener[str]):
    """Keeps the leader changes and committed records it is told of, and wakes a waiter."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.leaders: list[LeaderAndEpoch] = []
        self.records: list[str] = []

    def handle_commit(self, reader: BatchReader[str]) -> None:
        with reader, self.changed:
            for batch in reader:
                self.records.extend(batch.records)
            self.changed.notify_all()

    def wait_for_records(self, records: list[str]) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.records == records, TIMEOUT_S)

    def handle_load_snapshot(self, reader: SnapshotReaderLike[str]) -> None:
        reader.close()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        with self.changed:
            self.leaders.append(leader)
            self.changed.notify_all()


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "node-1"
    format_storage(directory, random_uuid(), node_id=1)
    yield directory


def _lone_voter(data_dir: Path, prometheus: Endpoint | None = None) -> RaftNode[str]:
    config = QuorumConfig(voters={1: Endpoint("127.0.0.1", 0)}, append_linger_ms=0)
    return RaftNode(
        node_id=1,
        data_dir=data_dir,
        config=config,
        serde=StrSerde(),
        prometheus=prometheus,
        shutdown_timeout_ms=500,
    )


def test_a_listener_registered_before_start_hears_from_the_first_poll_on(
    data_dir: Path,
) -> None:
    node = _lone_voter(data_dir)
    early = Watcher()
    node.register(early)
    with node:
        with early.changed:
            assert early.changed.wait_for(
                lambda: any(leader.is_leader(1) for leader in early.leaders), TIMEOUT_S
            ), early.leaders
        late = Watcher()
        node.register(late)  # after start: registered at once
        epoch = early.leaders[-1].epoch
        node.client.prepare_append(epoch, ["a", "b"])
        node.client.schedule_prepared_append()
        for watcher in (early, late):
            assert watcher.wait_for_records(["a", "b"]), watcher.records


def test_metrics_without_the_extra_stop_the_node_before_it_joins_the_quorum(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # `import` raises ImportError
    node = _lone_voter(data_dir, prometheus=Endpoint("127.0.0.1", 0))
    with pytest.raises(MetricsExtraMissingError, match="metrics"):
        node.start()
    assert not node.is_running
    # Neither the quorum state nor the log was ever opened: no vote, no election, no lock.
    assert not (data_dir / QUORUM_STATE_FILE).exists()
    assert sorted(p.name for p in (data_dir / CLUSTER_METADATA_DIR).iterdir()) == []


def test_a_second_node_on_the_same_data_directory_is_named_as_such(data_dir: Path) -> None:
    """The same configuration started twice: the second finds the log directory locked."""
    with FileLog.open(data_dir / CLUSTER_METADATA_DIR):  # the first process's log
        node = _lone_voter(data_dir)
        with pytest.raises(LogDirectoryError, match="node 1 is running already"):
            node.start()
        assert not node.is_running


def test_a_node_that_lost_its_quorum_state_refuses_to_start_until_recovered(
    data_dir: Path,
) -> None:
    """Issue 17, hole 7: a deleted quorum-state let the node start and forget its vote. With
    a log it refuses, naming the recovery command; the recovered state lets it start again
    without voting in the epoch it may have voted in already."""
    node = _lone_voter(data_dir)
    watcher = Watcher()
    node.register(watcher)
    with node:
        with watcher.changed:
            assert watcher.changed.wait_for(
                lambda: any(leader.is_leader(1) for leader in watcher.leaders), TIMEOUT_S
            )
        epoch = watcher.leaders[-1].epoch
    (data_dir / QUORUM_STATE_FILE).unlink()
    with pytest.raises(QuorumStateError, match="kraft storage recover-quorum-state"):
        _lone_voter(data_dir).start()
    assert main(["storage", "recover-quorum-state", str(data_dir), "--epoch", str(epoch)]) == 0
    again = Watcher()
    node = _lone_voter(data_dir)
    node.register(again)
    with node:  # it has voted in `epoch`: it leads only from a later one
        with again.changed:
            assert again.changed.wait_for(
                lambda: any(leader.is_leader(1) for leader in again.leaders), TIMEOUT_S
            )
        assert again.leaders[-1].epoch > epoch


def test_a_node_that_listens_on_a_wildcard_announces_its_voters_address(data_dir: Path) -> None:
    """The leader's endpoints (BeginQuorumEpoch, DescribeQuorum) are where others dial it: its
    entry in `voters`, not the 0.0.0.0 it binds."""
    (port,) = free_ports(1)
    config = QuorumConfig(voters={1: Endpoint("127.0.0.1", port)}, append_linger_ms=0)
    node = RaftNode(
        node_id=1,
        data_dir=data_dir,
        config=config,
        serde=StrSerde(),
        listen=Endpoint("0.0.0.0", port),
        shutdown_timeout_ms=500,
    )
    with node:
        assert node.client.quorum.own_endpoints() == (("CONTROLLER", "127.0.0.1", port),)
