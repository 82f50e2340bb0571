"""KIP-853 with real processes: a dynamic quorum of three ``kraft node`` processes (formatted
with ``kraft storage format --initial-controllers``) grows to four with ``kraft quorum
add-controller``, loses its leader to kill -9 while ``kraft quorum remove-controller`` removes a
voter (the change appended, not committed), and ends with the voter set every node agrees on,
the one ``kraft quorum describe`` reports, and every acknowledged record on every node.

Every wait is bounded (LocalQuorum raises TimeoutError naming the node's log file, the CLI runs
under a timeout); every process is stopped at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kraft.runtime.processes import LOOPBACK_TIMERS, LocalQuorum

pytestmark = pytest.mark.slow

TIMEOUT_S = 60.0
#: The VoterHistory line a replica logs when a VotersRecord reaches its log.
VOTER_SET_LINE = "voter set at offset"


def kraft(*args: str, timeout_s: float = TIMEOUT_S + 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kraft.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def voters_of(local: LocalQuorum, node_id: int) -> tuple[int, ...]:
    """The voter set node ``node_id`` uses now (its console's ``status``)."""
    return status_of(local, node_id)[0]


def status_of(local: LocalQuorum, node_id: int) -> tuple[tuple[int, ...], int]:
    """The voter set and kraft.version node ``node_id`` uses now (its console's ``status``)."""
    answer = local.nodes[node_id].request("status", ("status",), TIMEOUT_S)
    return tuple(answer["voters"]), answer["kraft_version"]


def wait_agreed_voters(local: LocalQuorum, expected: set[int], kraft_version: int = 1) -> None:
    """Wait until every running node uses the voter set ``expected`` under ``kraft_version``."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        running = [i for i, node in local.nodes.items() if node.is_running()]
        seen = {i: status_of(local, i) for i in running}
        if all(set(v) == expected and k == kraft_version for v, k in seen.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"(voters, kraft.version) {seen}, expected {sorted(expected)} everywhere"
            )
        time.sleep(0.2)


def voter_set_lines(log: Path) -> int:
    return log.read_text(errors="replace").count(VOTER_SET_LINE)


def describe(local: LocalQuorum) -> dict[str, object]:
    done = kraft("quorum", "describe", "--status", "--json", "-b", local.bootstrap)
    assert done.returncode == 0, done.stderr
    data: dict[str, object] = json.loads(done.stdout)
    return data


def test_grow_to_four_then_remove_a_voter_while_the_leader_is_killed(tmp_path: Path) -> None:
    with LocalQuorum(tmp_path / "quorum", 3, quorum=LOOPBACK_TIMERS, kraft_version=1) as local:
        local.start(TIMEOUT_S)
        acknowledged: list[tuple[int, str]] = []

        def write(record: str) -> None:
            offset, leader = local.append(record, timeout_s=TIMEOUT_S)
            local.wait_committed(leader, offset, TIMEOUT_S)
            acknowledged.append((offset, record))

        write("before-growth")
        wait_agreed_voters(local, {1, 2, 3})

        # A fourth node, formatted with --no-initial-controllers, starts as an observer and
        # catches up; add-controller makes it a voter.
        new = local.add_node()
        local.nodes[new].start()
        local.nodes[new].wait_for(lambda e: e.get("event") == "started", TIMEOUT_S, "start")
        write("observed")
        local.wait_committed(new, acknowledged[-1][0], TIMEOUT_S)
        assert voters_of(local, new) == (1, 2, 3)
        added = kraft(
            "quorum",
            "add-controller",
            "--config",
            str(local.nodes[new].config_path),
            "-b",
            local.bootstrap,
        )
        assert added.returncode == 0, added.stderr
        assert f"Added controller {new} with directory id {local.directory_id(new)}" in (
            added.stdout
        )
        wait_agreed_voters(local, {1, 2, 3, new})
        write("after-growth")

        # The second change: remove a follower while the two other followers are frozen, so
        # that the new voter set (the leader and those two) cannot commit it; the leader is
        # killed once it has appended it, the frozen followers carry on, and the killed
        # leader restarts at once. The command retries until a leader has made the change.
        leader = local.leader(TIMEOUT_S)
        victim = min(i for i in (1, 2, 3) if i != leader)
        victim_directory = local.directory_id(victim)
        assert victim_directory is not None
        frozen = [i for i in (1, 2, 3, new) if i not in (leader, victim)]
        leader_log = local.nodes[leader].log_path
        seen_changes = voter_set_lines(leader_log)
        bootstrap = ",".join(
            [local.addresses[leader]] + [a for i, a in local.addresses.items() if i != leader]
        )
        for node_id in frozen:
            local.nodes[node_id].pause()
        removing = subprocess.Popen(
            [
                sys.executable, "-m", "kraft.cli", "quorum", "remove-controller",
                "--controller-id", str(victim), "--controller-directory-id", victim_directory,
                "-b", bootstrap, "--timeout", str(TIMEOUT_S),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while voter_set_lines(leader_log) == seen_changes:
                assert time.monotonic() < deadline, f"leader {leader} never appended the change"
                time.sleep(0.01)
            local.nodes[leader].kill()
            for node_id in frozen:
                local.nodes[node_id].resume()
            local.nodes[leader].wait(TIMEOUT_S)
            restarted = local.nodes[leader].mark()
            local.nodes[leader].start()
            out, err = removing.communicate(timeout=TIMEOUT_S + 30)
        finally:
            for node_id in frozen:
                local.nodes[node_id].resume()
            if removing.poll() is None:
                removing.kill()
                removing.wait()
        assert removing.returncode == 0, err
        assert f"Removed KRaft controller {victim} with directory id {victim_directory}" in out
        local.nodes[leader].wait_for(
            lambda e: e.get("event") == "started", TIMEOUT_S, "restart", since=restarted
        )
        expected = {1, 2, 3, new} - {victim}
        wait_agreed_voters(local, expected)  # the removed node, now an observer, agrees
        write("after-removal")

        # describe reports the voter set every node agrees on, with the directory ids.
        status = describe(local)
        voters = status["voters"]
        assert isinstance(voters, list)
        assert {v["id"]: v["directory_id"] for v in voters} == {
            i: local.directory_id(i) for i in expected
        }
        # Nothing acknowledged is lost, and every node has the same committed records.
        last = acknowledged[-1][0]
        logs = {}
        for node_id in local.nodes:
            local.wait_committed(node_id, last, TIMEOUT_S)
            logs[node_id] = {
                offset: records for offset, records in local.committed(node_id).items()
            }
        for offset, record in acknowledged:
            for node_id, committed in logs.items():
                assert committed.get(offset) == [record], (node_id, offset, record)
        reference = logs[new]
        for committed in logs.values():
            shared = committed.keys() & reference.keys()
            assert {o: committed[o] for o in shared} == {o: reference[o] for o in shared}


def test_a_static_quorum_upgrades_to_kraft_version_1(quorum: LocalQuorum) -> None:
    """``kraft features upgrade --feature kraft.version=1``: the static voters, once each has
    reported its directory id and listeners to the leader, become the voter set in the log."""
    offset, leader = quorum.append("before-upgrade", timeout_s=TIMEOUT_S)
    quorum.wait_committed(leader, offset, TIMEOUT_S)
    wait_agreed_voters(quorum, {1, 2, 3}, kraft_version=0)
    upgrade = ["features", "upgrade", "--feature", "kraft.version=1", "-b", quorum.bootstrap]
    deadline = time.monotonic() + TIMEOUT_S
    while (done := kraft(*upgrade)).returncode != 0:
        # Until every voter has reported itself (after the election), the leader says which.
        assert "INVALID_UPDATE_VERSION" in done.stderr and "have not reported" in done.stderr, (
            done.stderr
        )
        assert time.monotonic() < deadline, done.stderr
        time.sleep(0.2)
    assert done.stdout == "kraft.version was upgraded to level 1.\n"
    wait_agreed_voters(quorum, {1, 2, 3}, kraft_version=1)
    voters = describe(quorum)["voters"]
    assert isinstance(voters, list)
    assert {v["id"]: v["directory_id"] for v in voters} == {
        i: quorum.directory_id(i) for i in (1, 2, 3)
    }
    assert kraft(*upgrade).returncode == 0  # at that level already
    downgrade = kraft("features", "upgrade", "--feature", "kraft.version=0", "-b", quorum.bootstrap)
    assert downgrade.returncode == 1 and "INVALID_UPDATE_VERSION" in downgrade.stderr
    offset, leader = quorum.append("after-upgrade", timeout_s=TIMEOUT_S)
    for node_id in quorum.nodes:
        quorum.wait_committed(node_id, offset, TIMEOUT_S)
