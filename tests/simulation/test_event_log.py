"""The event log keeps the contract of docs/simulation.md ("The event log, schema version 1"):
the file format, every field, every kind and its ``details``, the run directory."""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path

import msgspec
import pytest

from kraft.log.quorum_state import ElectionState
from kraft.simulation import KINDS, SCHEMA_VERSION, Cluster, Event, read_events
from kraft.simulation.scenario import RunResult, ScenarioRun, read_run, run_scenario, scenario

DOC = (Path(__file__).resolve().parents[2] / "docs" / "simulation.md").read_text()

#: The ``details`` keys of each kind, as documented (None: the kind has no details).
DETAILS: dict[str, list[set[str]] | None] = {
    "run_started": [
        {"voters", "observers", "config"},
        {"voters", "observers", "kraft_version", "config"},
        {"voters", "observers", "brokers", "config"},
    ],
    "run_finished": [{"violations", "events", "faults"}],
    "node_started": [{"incarnation"}],
    "state_changed": [{"from_role", "from_epoch"}, {"from_role"}],
    "vote_granted": [{"pre_vote", "error_code"}],
    "vote_refused": [{"pre_vote", "error_code"}],
    "message_sent": None,
    "message_delivered": None,
    "message_dropped": [{"reason"}],
    "message_duplicated": None,
    "append_accepted": None,
    "append_refused": None,
    "batch_committed": None,
    "snapshot_created": [
        {"snapshot_epoch", "value", "log_start_offset"},
        {"snapshot_epoch", "log_start_offset"},  # a controller cluster's
    ],
    "snapshot_loaded": [
        {"snapshot_epoch", "value", "log_start_offset"},
        {"snapshot_epoch", "log_start_offset"},  # a controller cluster's
    ],
    "fault_injected": None,  # checked by FAULT_DETAILS
    "fault_healed": [{"fault", "targets"}],
    "fault_suppressed": None,  # checked by FAULT_DETAILS
    "invariant_violated": [{"invariant", "nodes", "message"}],
    "expectation_failed": [{"message"}],
    "invariants_checked": [{"checks", "violations"}],
    "run_error": [{"error"}],
    "voter_change_requested": [{"change"}],
    "voter_change_answered": [{"change", "error"}],
    "op_invoked": [
        {"client", "op", "key"},
        {"client", "op", "key", "written"},
        {"client", "op", "key", "written", "expected"},
    ],
    "op_completed": [
        {"client", "op", "key", "outcome"},
        {"client", "op", "key", "outcome", "read"},
        {"client", "op", "key", "outcome", "swapped"},
        {"client", "op", "key", "outcome", "error"},
    ],
    "controller_claimed": None,
    "controller_renounced": [{"reason"}],
    "broker_registered": [{"broker", "broker_epoch"}],
    "broker_fenced": [{"broker", "broker_epoch"}],
    "broker_unfenced": [{"broker", "broker_epoch"}],
    "partition_leader_changed": [
        {
            "topic",
            "partition",
            "leader",
            "previous_leader",
            "leader_epoch",
            "partition_epoch",
            "isr",
        }
    ],
    "controller_op_completed": [{"op", "outcome"}, {"op", "topic", "outcome"}],
}
FAULT_DETAILS = {
    "partition": {"groups"},
    "block": {"sources", "destinations"},
    "isolate": set(),
    "heal": set(),
    "kill": set(),
    "restart": set(),
    "wipe": set(),
    "pause": set(),
    "resume": set(),
    "resign": set(),
    "shutdown": set(),
    "corrupt": {"offset", "position", "mask"},
    "corrupt_snapshot": {"snapshot_offset", "snapshot_epoch", "position", "mask"},
    "lose_next_flush": set(),
    "misdirect_next_append": {"onto_offset"},
    "broker_crash": set(),
    "broker_restart": set(),
    "broker_shutdown": set(),
    "broker_isolate": set(),
    "broker_heal": set(),
}
DROP_REASONS = {
    "lost",
    "partitioned",
    "destination down",
    "connection reset",
    "unknown destination",
}
ROLES = {
    "Unattached",
    "Voted",
    "Prospective",
    "Candidate",
    "Leader",
    "Follower",
    "Resigned",
    "Down",
}


def faulty_run(path: Path, message_events: bool = True) -> Cluster:
    """A run with most kinds of fault and a workload through all of them."""
    cluster = Cluster(seed=21, voters=3, observers=1, event_log=path, message_events=message_events)
    cluster.start_workload(100)
    cluster.run_for(2_000)
    cluster.set_network(drop=0.05, duplicate=0.05, reorder=0.05, latency_ms=(1, 10))
    cluster.isolate(cluster.leader() or 1)
    cluster.run_for(3_000)
    cluster.heal()
    cluster.run_for(2_000)
    leader = cluster.leader() or 1
    follower = next(i for i in cluster.voter_ids if i != leader)
    cluster.kill(follower)
    cluster.run_for(1_000)
    cluster.restart(follower)
    cluster.block([1], [2])
    cluster.partition({1, 2}, {3})
    cluster.run_for(2_000)
    cluster.heal()
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    assert cluster.resign() is not None
    cluster.wipe(4)
    cluster.run_for(2_000)
    cluster.set_network(drop=0.0, duplicate=0.0, reorder=0.0)
    cluster.stop_workload()
    cluster.run_for(3_000)
    assert cluster.validate() == []
    cluster.close()
    return cluster


@pytest.fixture(scope="module")
def run_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Cluster, Path, list[Event]]:
    path = tmp_path_factory.mktemp("events") / "events.jsonl"
    cluster = faulty_run(path)
    return cluster, path, read_events(path)


# ---------------------------------------------------------------------------------------------
# The file
# ---------------------------------------------------------------------------------------------
def test_every_line_decodes_as_an_event_of_this_schema(
    run_log: tuple[Cluster, Path, list[Event]],
) -> None:
    _, path, events = run_log
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # every line ends in a newline
    lines = lines[:-1]
    assert len(lines) == len(events) > 1000
    for line in lines:
        event = msgspec.json.decode(line, type=Event, strict=True)
        assert event.v == SCHEMA_VERSION == 1
        assert event.kind in KINDS
        assert event.run_id == "adhoc/21" and event.seed == 21 and event.scenario == "adhoc"
        assert event.role is None or event.role in ROLES


def test_seq_counts_the_lines_and_time_never_goes_back(
    run_log: tuple[Cluster, Path, list[Event]],
) -> None:
    cluster, _, events = run_log
    assert [e.seq for e in events] == list(range(len(events)))
    times = [e.time_ms for e in events]
    assert times == sorted(times)
    assert events[0].kind == "run_started" and events[0].time_ms == 0
    assert events[-1].kind == "run_finished"
    assert events[-1].details == {
        "violations": 0,
        "events": len(events),
        "faults": len(cluster.faults),
    }
    assert events[-1].time_ms == cluster.now_ms


def test_fields_at_their_default_are_not_written(
    run_log: tuple[Cluster, Path, list[Event]],
) -> None:
    _, path, _ = run_log
    defaults = {name: getattr(Event, name, None) for name in Event.__struct_fields__}
    for line in path.read_text().splitlines():
        raw = json.loads(line)
        assert list(raw) == [f for f in Event.__struct_fields__ if f in raw]  # field order
        for name, value in raw.items():
            if name in ("v", "run_id", "seed", "scenario", "time_ms", "seq", "kind"):
                continue
            assert value != defaults[name], (name, line)
    first_fault = next(json.loads(x) for x in path.read_text().splitlines() if "fault_" in x)
    assert "node" not in first_fault and "details" in first_fault


def test_the_digest_is_the_sha256_of_the_file(
    run_log: tuple[Cluster, Path, list[Event]],
) -> None:
    cluster, path, _ = run_log
    assert cluster.digest == hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_same_run_writes_the_same_bytes(tmp_path: Path) -> None:
    faulty_run(tmp_path / "a.jsonl", message_events=False)
    faulty_run(tmp_path / "b.jsonl", message_events=False)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


# ---------------------------------------------------------------------------------------------
# Kinds and their fields
# ---------------------------------------------------------------------------------------------
def test_each_kind_carries_its_documented_details(
    run_log: tuple[Cluster, Path, list[Event]],
) -> None:
    _, _, events = run_log
    _check_details(events)


def test_a_controller_run_carries_the_documented_details(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    cluster = Cluster(seed=3, voters=3, controller=True, brokers=3, event_log=path)
    cluster.run_for(5_000)
    cluster.create_topic("t", 3, 3)
    cluster.create_topic("t", 1, 1)  # TOPIC_ALREADY_EXISTS
    cluster.run_for(2_000)
    cluster.delete_topic("t")
    cluster.crash_broker(101)
    cluster.shutdown_broker(102)
    cluster.isolate_broker(103)
    cluster.run_for(30_000)
    cluster.restart_broker(101)
    cluster.heal_broker(103)
    cluster.restart(cluster.leader() or 1)
    cluster.run_for(10_000)
    assert cluster.validate() == []
    cluster.close()
    events = read_events(path)
    _check_details(events)
    kinds = {e.kind for e in events}
    assert {k for k in KINDS if k.startswith(("controller_", "broker_", "partition_"))} <= kinds
    assert {"snapshot_created", "snapshot_loaded"} <= kinds


def _check_details(events: list[Event]) -> None:
    for event in events:
        if event.kind in ("fault_injected", "fault_suppressed"):
            assert event.details is not None
            fault = event.details["fault"]
            extra = (
                {"drop", "duplicate", "reorder", "latency_ms"}
                if fault == "network"
                else FAULT_DETAILS[fault]
            )
            keys = set(event.details) - {"fault", "index", "targets"}
            assert keys <= extra and (fault == "network" or keys == extra), event
            continue
        allowed = DETAILS[event.kind]
        if allowed is None:
            assert event.details is None, event
        else:
            assert event.details is not None and set(event.details) in allowed, event
        if event.kind == "message_dropped":
            assert event.details is not None and event.details["reason"] in DROP_REASONS


def test_faults_are_logged_injected_and_healed(
    run_log: tuple[Cluster, Path, list[Event]],
) -> None:
    cluster, _, events = run_log
    injected = [e for e in events if e.kind == "fault_injected"]
    assert [(e.details or {})["index"] for e in injected] == list(range(len(cluster.faults)))
    assert [(e.details or {})["fault"] for e in injected] == [f.kind for f in cluster.faults]
    assert [e.time_ms for e in injected] == [f.time_ms for f in cluster.faults]
    assert {f.kind for f in cluster.faults} >= {
        "network",
        "isolate",
        "heal",
        "kill",
        "restart",
        "block",
        "partition",
        "resign",
        "wipe",
    }
    healed = [(e.details or {})["fault"] for e in events if e.kind == "fault_healed"]
    assert healed.count("partition") == 2 and healed.count("kill") == 1
    partition = next(e.details for e in injected if (e.details or {})["fault"] == "partition")
    assert partition is not None
    assert (partition["targets"], partition["groups"]) == ([1, 2, 3], [[1, 2], [3]])


def test_commits_are_logged_with_latency_and_one_checksum_per_batch(
    run_log: tuple[Cluster, Path, list[Event]],
) -> None:
    cluster, _, events = run_log
    commits = [e for e in events if e.kind == "batch_committed"]
    assert len(commits) > 300
    checksums: dict[int, set[int]] = defaultdict(set)
    nodes_of: dict[int, set[int]] = defaultdict(set)
    for e in commits:
        assert e.node in cluster.nodes and e.role in ROLES
        assert e.latency_ms >= 0
        assert 0 <= e.base_offset <= e.offset < e.high_watermark
        assert e.count >= 0 and e.epoch >= 1
        assert e.log_end_offset == -1 and e.checksum >= 0
        if e.count:
            assert e.offset - e.base_offset + 1 == e.count
        checksums[e.base_offset].add(e.checksum)
        nodes_of[e.base_offset].add(e.node)
    assert all(len(sums) == 1 for sums in checksums.values()), {
        b: s for b, s in checksums.items() if len(s) > 1
    }
    assert any(len(nodes) == len(cluster.nodes) for nodes in nodes_of.values())
    assert any(e.count == 0 for e in commits)  # LeaderChange control batches


def test_appends_are_logged_by_the_leader(run_log: tuple[Cluster, Path, list[Event]]) -> None:
    _, _, events = run_log
    accepted = [e for e in events if e.kind == "append_accepted"]
    assert accepted and all(e.role == "Leader" and e.count == 1 and e.offset >= 0 for e in accepted)
    refused = [e for e in events if e.kind == "append_refused"]
    assert all(e.node == -1 and e.count == 1 for e in refused)


def test_votes_are_logged_and_every_leader_won_a_majority(
    run_log: tuple[Cluster, Path, list[Event]],
) -> None:
    cluster, _, events = run_log
    votes = [e for e in events if e.kind in ("vote_granted", "vote_refused")]
    assert votes
    assert {(e.details or {})["pre_vote"] for e in votes} == {True, False}
    for e in votes:
        assert e.node in cluster.voter_ids and e.peer in cluster.voter_ids and e.node != e.peer
    granted = {
        (e.node, e.peer, e.epoch)
        for e in votes
        if e.kind == "vote_granted" and not (e.details or {})["pre_vote"]
    }
    leaders = {
        (e.node, e.epoch) for e in events if e.kind == "state_changed" and e.role == "Leader"
    }
    assert len(leaders) >= 2
    majority = len(cluster.voter_ids) // 2 + 1
    for leader, epoch in leaders:
        voters = {voter for voter, peer, e in granted if peer == leader and e == epoch}
        assert len(voters) + 1 >= majority, (leader, epoch)  # its own vote counts


def test_state_changes_and_node_starts_carry_the_node_state(
    run_log: tuple[Cluster, Path, list[Event]],
) -> None:
    cluster, _, events = run_log
    starts = [e for e in events if e.kind == "node_started"]
    assert [e.node for e in starts[:4]] == [1, 2, 3, 4]
    assert all(e.role in ROLES - {"Down"} and e.epoch >= 0 for e in starts)
    for e in events:
        if e.kind != "state_changed":
            continue
        assert e.node in cluster.nodes and e.log_end_offset >= 0 and e.high_watermark >= 0
        if e.role == "Down":
            assert e.epoch == -1 and e.details in (
                {"from_role": "crashed"},
                {"from_role": "shutdown"},
            )
        else:
            assert e.epoch >= 0 and e.details is not None and "from_epoch" in e.details


def test_message_events_name_both_ends(run_log: tuple[Cluster, Path, list[Event]]) -> None:
    cluster, _, events = run_log
    kinds = {"message_sent", "message_delivered", "message_dropped", "message_duplicated"}
    messages = [e for e in events if e.kind in kinds]
    assert {e.kind for e in messages} == kinds
    names = {e.message for e in messages}
    assert {"FetchRequest", "FetchResponse", "VoteRequest", "VoteResponse"} <= names
    for e in messages:
        assert e.node in cluster.nodes and e.peer in cluster.nodes and e.message


def test_without_message_events_only_drops_are_logged(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    faulty_run(path, message_events=False)
    kinds = {e.kind for e in read_events(path)}
    assert "message_dropped" in kinds
    assert kinds.isdisjoint({"message_sent", "message_delivered", "message_duplicated"})


def test_violations_are_logged_with_their_details(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    cluster = Cluster(seed=3, voters=3, event_log=path, stop_on_violation=False)
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    leader = cluster.leader()
    assert leader is not None
    follower = next(i for i in cluster.voter_ids if i != leader)
    cluster.node(follower).store.write_election_state(ElectionState(0))
    cluster.run_for(1_000)
    cluster.validate()
    cluster.close()
    events = read_events(path)
    violated = [e for e in events if e.kind == "invariant_violated"]
    assert violated and violated[0].details == {
        "invariant": "monotonic_epoch",
        "nodes": [follower],
        "message": cluster.violations[0].message,
    }
    checked = [e for e in events if e.kind == "invariants_checked"]
    assert len(checked) == 1 and checked[0].details is not None
    assert checked[0].details["violations"] == len(cluster.violations)
    assert checked[0].details["checks"] == cluster.checker.checks


# ---------------------------------------------------------------------------------------------
# The run directory
# ---------------------------------------------------------------------------------------------
@scenario("test_event_log_scenario")
def _logged_scenario(run: ScenarioRun) -> None:
    """Elect, kill a follower, and expect something that cannot happen."""
    cluster = run.cluster(voters=3)
    cluster.start_workload(100)
    run.await_(lambda: cluster.leader() is not None, 10_000, "a leader")
    cluster.kill(next(i for i in cluster.voter_ids if i != cluster.leader()))
    cluster.run_for(1_000)
    run.expect(False, "the impossible")


def test_a_run_directory_holds_the_events_and_run_json(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_scenario("test_event_log_scenario", 4, out, suppress=[7])
    assert sorted(p.name for p in out.iterdir()) == ["events.jsonl", "run.json"]
    raw = json.loads((out / "run.json").read_text())
    assert set(raw) == set(RunResult.__struct_fields__)
    assert read_run(out) == result
    events = read_events(out / "events.jsonl")
    assert result.schema_version == SCHEMA_VERSION
    assert (result.scenario, result.seed, result.suppressed) == ("test_event_log_scenario", 4, [7])
    assert result.events == len(events)
    assert result.digest == hashlib.sha256((out / "events.jsonl").read_bytes()).hexdigest()
    assert result.simulated_ms == events[-1].time_ms
    assert not result.ok and result.expectations == ["the impossible"]
    assert result.failure_kinds == {"expectation"}
    assert result.violations == [] and result.report is None
    assert result.faults == [
        {
            "index": 0,
            "time_ms": result.faults[0]["time_ms"],
            "kind": "kill",
            "targets": result.faults[0]["targets"],
            "suppressed": False,
        },
    ]
    failed = [e for e in events if e.kind == "expectation_failed"]
    assert [e.details for e in failed] == [{"message": "the impossible"}]
    assert all(e.run_id == "test_event_log_scenario/4" for e in events)


# ---------------------------------------------------------------------------------------------
# The documentation is complete
# ---------------------------------------------------------------------------------------------
def _doc_section(title: str) -> str:
    start = DOC.index(title)
    end = DOC.find("\n## ", start + 1)
    return DOC[start:] if end < 0 else DOC[start:end]


def test_the_schema_section_documents_every_field_and_kind() -> None:
    schema = _doc_section("## The event log, schema version 1")
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", schema, re.M))
    assert set(Event.__struct_fields__) <= rows
    assert set(KINDS) <= rows
    assert set(RunResult.__struct_fields__) <= rows
    assert set(DETAILS) == set(KINDS)


def test_every_kind_has_a_description() -> None:
    assert all(isinstance(text, str) and text for text in KINDS.values())
