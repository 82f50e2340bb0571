"""A follower whose log was cleaned below its snapshot loses that snapshot, with three real
node processes that make snapshots (tests/runtime/snapshotting_node.py; docs/storage.md,
"When a disk lies").

The follower used to start with no warning and deliver a state machine missing every record
below its log start; as leader it answered Fetch(0) with UNKNOWN_SERVER_ERROR over and over.
Now it starts with an ERROR line saying what happened, sets its log aside, fetches the
leader's snapshot before it delivers anything, and ends with the whole state; nothing
acknowledged is lost and the quorum keeps committing. Once repaired it may lead, and a voter
that lost its whole data directory is pointed at its snapshot. Slow (seconds): loopback only,
every wait bounded.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraft.log.meta_properties import CLUSTER_METADATA_DIR, format_storage
from kraft.runtime.processes import LOOPBACK_TIMERS, LocalQuorum
from kraft.snapshot.files import SNAPSHOT_SUFFIX

pytestmark = pytest.mark.slow

TIMEOUT_S = 60.0
NODE = Path(__file__).with_name("snapshotting_node.py")
QUORUM = {**LOOPBACK_TIMERS, "log_clean_interval_ms": 100}
#: How many records the test appends at most before every log has started past 0.
MAX_RECORDS = 300


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[LocalQuorum]:
    local = LocalQuorum(
        tmp_path / "quorum",
        3,
        quorum=QUORUM,
        command=lambda node_id, config: [
            sys.executable,
            str(NODE),
            str(config),
            "--every",
            "10",
            "--segment-bytes",
            "1024",
        ],
    )
    try:
        local.start(TIMEOUT_S)
        yield local
    finally:
        local.close(kill=True)


def delivered(events: list[dict[str, Any]]) -> tuple[list[str], str]:
    """The state a process's deliveries build (a snapshot replaces it, a commit extends it),
    and the kind of its first delivery; AssertionError on a gap between deliveries."""
    state: list[str] = []
    end = 0  # the next offset the state machine expects
    first = ""
    for event in events:
        if event["event"] == "snapshot":
            state, end = list(event["records"]), event["offset"]
        elif event["event"] == "commit":
            assert event["base_offset"] == end, f"a gap: delivered up to {end}, then {event}"
            state.extend(event["records"])
            end = event["offset"] + 1
        else:
            continue
        first = first or event["event"]
    return state, first


def wait_delivered(quorum: LocalQuorum, node_id: int, offset: int) -> None:
    """Wait until ``node_id`` has delivered ``offset``: in a committed batch, or in a snapshot
    it loaded (a node that joins late may get the last records inside the leader's snapshot)."""
    quorum.nodes[node_id].wait_for(
        lambda e: (
            (e.get("event") == "commit" and e["offset"] >= offset)
            or (e.get("event") == "snapshot" and e["offset"] > offset)
        ),
        TIMEOUT_S,
        f"delivery of offset {offset}",
    )


def test_a_follower_that_lost_the_snapshot_under_its_cleaned_log_fetches_the_leaders(
    quorum: LocalQuorum,
) -> None:
    leader = quorum.leader(TIMEOUT_S)
    follower = next(n for n in quorum.nodes if n != leader)
    records: list[str] = []
    last = 0

    def cleaned(node_id: int) -> bool:
        """Its log starts past 0 and its segments below the log start are deleted."""
        commits = quorum.nodes[node_id].events("commit")
        segments = sorted((quorum.root / f"node-{node_id}" / CLUSTER_METADATA_DIR).glob("*.log"))
        return bool(commits) and commits[-1]["log_start"] > 0 and int(segments[0].stem) > 0

    while not all(cleaned(n) for n in quorum.nodes):
        assert len(records) < MAX_RECORDS, "the logs were never cleaned past offset 0"
        records.append(f"r{len(records)}")
        last, _ = quorum.append(records[-1], timeout_s=TIMEOUT_S)
        for node_id in quorum.nodes:
            quorum.wait_committed(node_id, last, TIMEOUT_S)
    node = quorum.nodes[follower]
    assert node.terminate(TIMEOUT_S) == 0
    log_dir = quorum.root / f"node-{follower}" / CLUSTER_METADATA_DIR
    segments = sorted(log_dir.glob("*.log"))
    assert int(segments[0].stem) > 0  # the records below the log start are gone from disk
    snapshots = list(log_dir.glob(f"*{SNAPSHOT_SUFFIX}"))
    assert snapshots
    for snapshot in snapshots:
        snapshot.unlink()
    # Nothing is appended while it is down: every node snapshotted at the same offsets, so
    # the leader's log still holds the follower's end and would serve it from there, past
    # the records the follower lost (had the leader cleaned past it, the leader's snapshot
    # would have hidden the loss).

    mark = node.mark()
    node.start()
    node.wait_for(lambda e: e.get("event") == "started", TIMEOUT_S, "restart", since=mark)
    for _ in range(15):  # the quorum keeps committing, across the next snapshot
        records.append(f"r{len(records)}")
        after, _ = quorum.append(records[-1], timeout_s=TIMEOUT_S)
    for node_id in quorum.nodes:
        wait_delivered(quorum, node_id, after)

    restarted = [e for e in node.events() if e["pid"] == node.pid]
    state, first = delivered(restarted)
    assert first == "snapshot"  # the leader's snapshot before anything else
    assert state == records  # nothing from 0 to the old log start missing, nothing lost
    for node_id in quorum.nodes:
        if node_id != follower:
            assert delivered(quorum.nodes[node_id].events())[0] == records, node_id
    log_text = node.log_path.read_text()
    said = [line for line in log_text.splitlines() if " ERROR " in line and "no snapshot" in line]
    assert said, "no ERROR line about the lost snapshot"
    assert not (log_dir / "repair-target").exists()  # repaired: it reached its old end again

    # Repaired, it may lead (the hole's node, leading, answered Fetch(0) with
    # UNKNOWN_SERVER_ERROR): a voter that lost its whole data directory joins from offset 0
    # and is pointed at the repaired leader's snapshot.
    lead(quorum, follower)
    wiped = next(n for n in quorum.nodes if n != follower)
    assert quorum.nodes[wiped].terminate(TIMEOUT_S) == 0
    data_dir = quorum.root / f"node-{wiped}"
    data_dir.rename(quorum.root / f"node-{wiped}.lost")
    format_storage(data_dir, quorum.cluster_id, wiped)
    quorum.nodes[wiped].start()
    for _ in range(5):
        records.append(f"r{len(records)}")
        after, _ = quorum.append(records[-1], timeout_s=TIMEOUT_S)
    for node_id in quorum.nodes:
        wait_delivered(quorum, node_id, after)
    joined = [e for e in quorum.nodes[wiped].events() if e["pid"] == quorum.nodes[wiped].pid]
    assert delivered(joined) == (records, "snapshot")
    assert quorum.leader(TIMEOUT_S) == follower
    for node_id in quorum.nodes:
        assert "UNKNOWN_SERVER_ERROR" not in quorum.nodes[node_id].log_path.read_text(), node_id


def lead(quorum: LocalQuorum, node_id: int, attempts: int = 20) -> None:
    """Have the leader resign until ``node_id`` is elected."""
    for _ in range(attempts):
        leader = quorum.leader(TIMEOUT_S)
        if leader == node_id:
            return
        event = quorum.nodes[leader].last_leader_event()
        assert event is not None
        epoch = event["epoch"]
        quorum.nodes[leader].request("resign", ("resigning", "error"), TIMEOUT_S)
        deadline = time.monotonic() + TIMEOUT_S
        while all(
            (e := n.last_leader_event()) is None or e["epoch"] <= epoch or e["leader"] != i
            for i, n in quorum.nodes.items()
        ):
            assert time.monotonic() < deadline, f"no leader after epoch {epoch}"
            time.sleep(0.05)
    raise AssertionError(f"node {node_id} was not elected in {attempts} elections")
