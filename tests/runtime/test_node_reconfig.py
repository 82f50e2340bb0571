"""``RaftNode`` in a dynamic quorum (KIP-853), two nodes in-process on loopback: a standalone
voter takes an observer in as a voter (AddRaftVoter) and removes it again (RemoveRaftVoter);
each node follows the voter set of its log, the leader drops its connection to the removed
voter, and the removed node says so and keeps running as an observer."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kraft.common.uuids import uuid_from_text
from kraft.config import Endpoint, QuorumConfig
from kraft.log.meta_properties import random_directory_id, random_uuid, read_meta_properties
from kraft.protocol.messages import AddRaftVoterRequest, RemoveRaftVoterRequest
from kraft.protocol.messages import Endpoint as Listener
from kraft.raft.listeners import BatchReader, LeaderAndEpoch, SnapshotReaderLike
from kraft.raft.listeners import Listener as RaftListener
from kraft.raft.voter_set import VoterSet
from kraft.record.serde import StrSerde
from kraft.runtime.bootstrap import format_dynamic_storage, voter_node
from kraft.runtime.node import RaftNode
from kraft.runtime.processes import LOOPBACK_TIMERS, free_ports
from kraft.runtime.request_once import request_once

TIMEOUT_S = 30.0


class Records(RaftListener[str]):
    """The records a node commits, and its leaders; wakes a waiter on each."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.records: list[str] = []
        self.leader: LeaderAndEpoch | None = None

    def handle_commit(self, reader: BatchReader[str]) -> None:
        with reader, self.changed:
            for batch in reader:
                self.records.extend(batch.records)
            self.changed.notify_all()

    def handle_load_snapshot(self, reader: SnapshotReaderLike[str]) -> None:
        reader.close()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        with self.changed:
            self.leader = leader
            self.changed.notify_all()

    def wait(self, what: str, predicate: Callable[[], bool]) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, TIMEOUT_S), f"no {what} in {TIMEOUT_S} s"


class LogLines(logging.Handler):
    """The messages of ``kraft.runtime`` (the node, the transport), and a wait for one."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.changed = threading.Condition()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with self.changed:
            self.lines.append(record.getMessage())
            self.changed.notify_all()

    def wait_for(self, text: str) -> None:
        with self.changed:
            found = self.changed.wait_for(
                lambda: any(text in line for line in self.lines), TIMEOUT_S
            )
            assert found, f"no log line {text!r} in {TIMEOUT_S} s: {self.lines}"


@pytest.fixture
def node_log() -> Iterator[LogLines]:
    handler = LogLines()
    logger = logging.getLogger("kraft.runtime")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(previous)


def test_a_node_follows_the_voters_of_its_log_and_says_when_it_is_removed(
    tmp_path: Path, node_log: LogLines
) -> None:
    cluster = random_uuid()
    first, second = (Endpoint("127.0.0.1", port) for port in free_ports(2))
    standalone = VoterSet({1: voter_node(1, random_directory_id(), first)})
    format_dynamic_storage(tmp_path / "n1", cluster, 1, standalone)
    format_dynamic_storage(tmp_path / "n2", cluster, 2, None)
    directory = read_meta_properties(tmp_path / "n2").directory_id
    assert directory is not None
    config = QuorumConfig(
        bootstrap_servers=(first,),
        election_timeout_ms=LOOPBACK_TIMERS["election_timeout_ms"],
        fetch_timeout_ms=LOOPBACK_TIMERS["fetch_timeout_ms"],
        request_timeout_ms=LOOPBACK_TIMERS["request_timeout_ms"],
        append_linger_ms=0,
    )
    nodes = [
        RaftNode(
            node_id=i,
            data_dir=tmp_path / f"n{i}",
            config=config,
            serde=StrSerde(),
            listen=address,
            shutdown_timeout_ms=500,
        )
        for i, address in ((1, first), (2, second))
    ]
    seen = [Records(), Records()]
    for node, records in zip(nodes, seen, strict=True):
        node.register(records)
    with nodes[0], nodes[1]:
        seen[0].wait("leader", lambda: seen[0].leader is not None and seen[0].leader.leader_id == 1)
        node_log.wait_for("node 1 is a voter")
        leader = nodes[0].client
        leader.prepare_append(leader.leader_and_epoch().epoch, ["before"])
        leader.schedule_prepared_append()
        seen[1].wait("records on the observer", lambda: seen[1].records == ["before"])
        assert nodes[1].client.voter_ids == frozenset({1})

        added = request_once(
            first,
            AddRaftVoterRequest(
                voter_id=2,
                voter_directory_id=uuid_from_text(directory),
                listeners=(Listener("CONTROLLER", second.host, second.port),),
                timeout_ms=int(TIMEOUT_S * 1000),
                cluster_id=cluster,
            ),
            cluster_id=cluster,
            timeout_s=TIMEOUT_S + 5,
        )
        assert added.error_code == 0, added
        node_log.wait_for("node 2 is a voter")
        assert nodes[0].client.voter_ids == frozenset({1, 2})

        removed = request_once(
            first,
            RemoveRaftVoterRequest(
                voter_id=2, voter_directory_id=uuid_from_text(directory), cluster_id=cluster
            ),
            cluster_id=cluster,
            timeout_s=TIMEOUT_S,
        )
        assert removed.error_code == 0, removed
        node_log.wait_for("node 2 is no longer a voter; it continues as an observer")
        node_log.wait_for("kraft-1-net: 2 is no longer a voter: closing its connection")
        assert nodes[1].is_running
        leader.prepare_append(leader.leader_and_epoch().epoch, ["after"])
        leader.schedule_prepared_append()
        seen[1].wait("records after the removal", lambda: seen[1].records == ["before", "after"])


def test_an_observer_with_auto_join_becomes_a_voter_by_itself(
    tmp_path: Path, node_log: LogLines
) -> None:
    """`[quorum] auto_join = true` (Kafka's controller.quorum.auto.join.enable): the observer
    asks the leader to add it, and is a voter without an admin's request."""
    cluster = random_uuid()
    first, second = (Endpoint("127.0.0.1", port) for port in free_ports(2))
    format_dynamic_storage(
        tmp_path / "n1", cluster, 1, VoterSet({1: voter_node(1, random_directory_id(), first)})
    )
    format_dynamic_storage(tmp_path / "n2", cluster, 2, None)

    def config(auto_join: bool) -> QuorumConfig:
        return QuorumConfig(
            bootstrap_servers=(first,),
            election_timeout_ms=LOOPBACK_TIMERS["election_timeout_ms"],
            fetch_timeout_ms=LOOPBACK_TIMERS["fetch_timeout_ms"],
            request_timeout_ms=LOOPBACK_TIMERS["request_timeout_ms"],
            append_linger_ms=0,
            auto_join=auto_join,
        )

    nodes = [
        RaftNode(
            node_id=i,
            data_dir=tmp_path / f"n{i}",
            config=config(auto_join=i == 2),
            serde=StrSerde(),
            listen=address,
            shutdown_timeout_ms=500,
        )
        for i, address in ((1, first), (2, second))
    ]
    with nodes[0], nodes[1]:
        node_log.wait_for("node 2 is a voter")
        assert nodes[0].client.voter_ids == frozenset({1, 2})
