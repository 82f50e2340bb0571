"""A voter of three real ``kraft node`` processes loses its quorum-state file
(docs/storage.md, "The quorum-state file").

Without the file the node used to start in epoch 0 with only an INFO line, having forgotten
a vote it may have cast in the current epoch (a second vote there can elect two leaders).
It now refuses to start, naming ``kraft storage recover-quorum-state``, and writes nothing;
recovered with the epoch ``kraft quorum describe`` reports, it rejoins, catches up, and
nothing acknowledged is lost. Slow (seconds): real processes on loopback, every wait bounded.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kraft.log.quorum_state import NO_SUCH_VOTER, QUORUM_STATE_FILE, FileQuorumStateStore
from kraft.runtime.processes import LocalQuorum

pytestmark = pytest.mark.slow

TIMEOUT_S = 60.0


def kraft(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraft.cli", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def digests(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` -> the SHA-256 of its bytes."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def records_of(local: LocalQuorum, node_id: int, pid: int | None = None) -> list[str]:
    """What ``node_id`` delivered, in offset order (only by process ``pid`` if given)."""
    events = [e for e in local.nodes[node_id].events("commit") if pid is None or e["pid"] == pid]
    return [r for e in sorted(events, key=lambda e: e["offset"]) for r in e["records"]]


def test_a_voter_that_lost_its_quorum_state_refuses_then_recovers_and_rejoins(
    quorum: LocalQuorum,
) -> None:
    before = [f"a{i}" for i in range(10)]
    last = 0
    for record in before:
        last, _ = quorum.append(record, timeout_s=TIMEOUT_S)
    leader = quorum.leader(TIMEOUT_S)
    lost = next(n for n in quorum.nodes if n != leader)
    quorum.wait_committed(lost, last, TIMEOUT_S)
    node = quorum.nodes[lost]
    assert node.terminate(TIMEOUT_S) == 0
    data_dir = quorum.root / f"node-{lost}"
    (data_dir / QUORUM_STATE_FILE).unlink()
    # The quorum goes on without it: these it must fetch once it is back.
    missed = [f"b{i}" for i in range(5)]
    for record in missed:
        last, _ = quorum.append(record, timeout_s=TIMEOUT_S)
    quorum.wait_committed(leader, last, TIMEOUT_S)  # acknowledged

    untouched = digests(data_dir)
    mark = node.mark()
    node.start()
    with pytest.raises(RuntimeError, match="exited before start"):
        node.wait_for(lambda e: e.get("event") == "started", TIMEOUT_S, "start", since=mark)
    assert node.wait(TIMEOUT_S) == 1  # it refused to start (docs/operations.md, Exit codes)
    assert node.mark() == mark  # it printed nothing: never started, never delivered
    log_text = node.log_path.read_text()
    assert "kraft storage recover-quorum-state" in log_text
    assert " ERROR " in log_text
    assert digests(data_dir) == untouched  # nothing written: no quorum-state, no log change
    assert not (data_dir / QUORUM_STATE_FILE).exists()

    described = kraft("quorum", "describe", "--bootstrap", quorum.bootstrap, "--status", "--json")
    assert described.returncode == 0, described.stderr
    epoch = json.loads(described.stdout)["leader_epoch"]
    recovered = kraft("storage", "recover-quorum-state", str(data_dir), "--epoch", str(epoch))
    assert recovered.returncode == 0, recovered.stderr
    state = FileQuorumStateStore.in_directory(data_dir).read_election_state()
    assert state is not None and state.epoch == epoch and state.voted_id == NO_SUCH_VOTER

    mark = node.mark()
    node.start()
    node.wait_for(lambda e: e.get("event") == "started", TIMEOUT_S, "restart", since=mark)
    after, _ = quorum.append("after", timeout_s=TIMEOUT_S)
    for node_id in quorum.nodes:
        quorum.wait_committed(node_id, after, TIMEOUT_S)
    expected = [*before, *missed, "after"]
    for node_id in quorum.nodes:
        if node_id != lost:
            assert records_of(quorum, node_id) == expected, node_id
    # The restarted process delivered the whole log again, from offset 0.
    assert records_of(quorum, lost, node.pid) == expected
    # It followed the leader of the recovered epoch (or a later one), never led or voted
    # its way into an epoch at or below it.
    follows = [e for e in node.events("leader") if e["pid"] == node.pid]
    assert follows and all(e["epoch"] >= epoch for e in follows)
