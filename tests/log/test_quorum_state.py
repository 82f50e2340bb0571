"""The quorum-state file and stores (docs/protocol.md §1.7, docs/storage.md)."""

from __future__ import annotations

import json
import logging
import os
import stat
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.common.limits import INT32_MAX
from kraft.common.uuids import ZERO_UUID, uuid_to_text
from kraft.errors import QuorumStateError, StorageError
from kraft.log.quorum_state import (
    QUORUM_STATE_FILE,
    ElectionState,
    FileQuorumStateStore,
    MemoryQuorumStateStore,
    QuorumStateStore,
    decode_quorum_state,
    encode_quorum_state,
)

DIR_ID = "J8aAPcfLQt2bqs1JT_rMgQ"

#: The text of the zero Uuid, which the quorum-state file holds for "no voted directory".
NO_DIRECTORY = uuid_to_text(ZERO_UUID)
uuids = (
    st.binary(min_size=16, max_size=16)
    .map(lambda raw: uuid.UUID(bytes=raw))
    .filter(lambda u: u != ZERO_UUID)
    .map(uuid_to_text)
)
ids = st.none() | st.integers(0, INT32_MAX)


@st.composite
def election_states(draw: st.DrawFn) -> ElectionState:
    epoch = draw(st.integers(0, INT32_MAX))
    leader_id = draw(ids)
    voted_id = draw(ids)
    directory_id = draw(st.none() | uuids) if voted_id is not None else None
    return ElectionState(epoch, leader_id, voted_id, directory_id)


def store_in(tmp_path: Path) -> FileQuorumStateStore:
    return FileQuorumStateStore(tmp_path / QUORUM_STATE_FILE)


# -- ElectionState -----------------------------------------------------------------------------


def test_election_state_helpers() -> None:
    unknown = ElectionState.with_unknown_leader(3)
    assert not unknown.has_leader and not unknown.has_voted
    assert unknown.leader_id_or_sentinel == -1 and unknown.voted_id_or_sentinel == -1

    led = ElectionState.with_elected_leader(4, 2)
    assert led.has_leader and led.is_leader(2) and not led.is_leader(1)
    assert not led.has_voted

    voted = ElectionState.with_voted_candidate(5, 1, DIR_ID)
    assert voted.has_voted and not voted.has_leader
    assert voted.is_voted_candidate(1, DIR_ID)
    assert not voted.is_voted_candidate(1, "AAAAAAAAAAAAAAAAAAAAAQ")
    assert not voted.is_voted_candidate(2, DIR_ID)
    # kraft.version 0: a vote stored without a directory id matches any directory.
    assert ElectionState.with_voted_candidate(5, 1).is_voted_candidate(1, DIR_ID)
    # A follower keeps its vote for the rest of the epoch.
    assert ElectionState(5, leader_id=1, voted_id=1).has_voted


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epoch": -1},
        {"epoch": 1 << 31},
        {"epoch": 1, "leader_id": -1},
        {"epoch": 1, "voted_id": -1},
        {"epoch": 1, "voted_directory_id": DIR_ID},
        {"epoch": 1, "voted_id": 1, "voted_directory_id": "not-a-uuid"},
        {"epoch": 1, "voted_id": 1, "voted_directory_id": NO_DIRECTORY},
    ],
)
def test_election_state_rejects_invalid(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ElectionState(**kwargs)  # type: ignore[arg-type]


def test_election_state_is_frozen() -> None:
    state = ElectionState(1)
    with pytest.raises(AttributeError):
        state.epoch = 2  # type: ignore[misc]


# -- encoding ----------------------------------------------------------------------------------


def test_v1_golden_matches_kafka() -> None:
    # The example in Kafka's FileQuorumStateStore javadoc, as its Jackson writer emits it.
    state = ElectionState.with_voted_candidate(2, 1, DIR_ID)
    assert encode_quorum_state(state, kraft_version=1) == (
        b'{"leaderId":-1,"leaderEpoch":2,"votedId":1,'
        b'"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}'
    )
    no_vote = encode_quorum_state(ElectionState.with_elected_leader(7, 3), kraft_version=1)
    assert json.loads(no_vote) == {
        "leaderId": 3,
        "leaderEpoch": 7,
        "votedId": -1,
        "votedDirectoryId": NO_DIRECTORY,
        "data_version": 1,
    }


def test_v0_golden_matches_kafka() -> None:
    state = ElectionState.with_elected_leader(2, 1)
    assert encode_quorum_state(state, kraft_version=0) == (
        b'{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,'
        b'"appliedOffset":0,"currentVoters":[],"data_version":0}'
    )


def test_v0_drops_the_directory_id() -> None:
    state = ElectionState.with_voted_candidate(2, 1, DIR_ID)
    assert decode_quorum_state(encode_quorum_state(state, 0)) == ElectionState(2, voted_id=1)


def test_unknown_kraft_version_is_refused() -> None:
    with pytest.raises(ValueError, match=r"kraft\.version 2"):
        encode_quorum_state(ElectionState(1), kraft_version=2)


@given(election_states())
def test_round_trip_v1(state: ElectionState) -> None:
    assert decode_quorum_state(encode_quorum_state(state, 1)) == state


@given(election_states())
def test_round_trip_v0(state: ElectionState) -> None:
    expected = ElectionState(state.epoch, state.leader_id, state.voted_id)
    assert decode_quorum_state(encode_quorum_state(state, 0)) == expected


def test_reads_kafka_v0_file_with_voters_and_cluster_id() -> None:
    data = (
        b'{"clusterId":"abc","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,'
        b'"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )
    assert decode_quorum_state(data) == ElectionState(2, leader_id=1)


def test_reads_pretty_printed_json_and_ignores_unknown_keys() -> None:
    data = (
        b'{\n  "leaderId": -1,\n  "leaderEpoch": 5,\n  "votedId": 2,\n'
        b'  "votedDirectoryId": "AAAAAAAAAAAAAAAAAAAAAA",\n  "future": [1],\n'
        b'  "data_version": 1\n}\n'
    )
    assert decode_quorum_state(data) == ElectionState(5, voted_id=2)


# -- the file store ----------------------------------------------------------------------------


def test_missing_file_reads_as_none(tmp_path: Path) -> None:
    assert store_in(tmp_path).read_election_state() is None


@pytest.mark.parametrize("kraft_version", [0, 1])
def test_file_round_trip(tmp_path: Path, kraft_version: int) -> None:
    store = store_in(tmp_path)
    states = [
        ElectionState(1),
        ElectionState.with_voted_candidate(2, 3),
        ElectionState(2, leader_id=3, voted_id=3),
        ElectionState.with_elected_leader(9, 1),
    ]
    for state in states:
        store.write_election_state(state, kraft_version)
        assert store.read_election_state() == state
    # One line, no trailing newline, as Kafka writes it; no temporary file left behind.
    assert b"\n" not in store.path.read_bytes()
    assert os.listdir(tmp_path) == [QUORUM_STATE_FILE]


@given(state=election_states())
def test_file_round_trip_property(
    tmp_path_factory: pytest.TempPathFactory, state: ElectionState
) -> None:
    store = store_in(tmp_path_factory.mktemp("qs"))
    store.write_election_state(state, kraft_version=1)
    assert store.read_election_state() == state


def test_in_directory_and_describe(tmp_path: Path) -> None:
    store = FileQuorumStateStore.in_directory(tmp_path)
    assert store.path == tmp_path / "quorum-state"
    assert str(store.path) in store.describe()
    assert isinstance(store, QuorumStateStore)
    assert isinstance(MemoryQuorumStateStore(), QuorumStateStore)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty"),
        (b"\n", "empty"),
        (b"garbage", "malformed"),
        (b'{"leaderId":1,"leaderEp', "malformed"),  # torn
        (b"[1,2]", "malformed"),
        (b'{"leaderId":1,"leaderEpoch":2,"votedId":-1}', "data_version"),
        (
            b'{"leaderId":1,"leaderEpoch":2,"votedId":-1,"votedDirectoryId":"'
            + NO_DIRECTORY.encode()
            + b'","data_version":2}',
            "data_version 2",
        ),
        (b'{"leaderId":1,"leaderEpoch":2,"votedId":-1,"data_version":1}', "votedDirectoryId"),
        (
            b'{"leaderId":1,"leaderEpoch":-2,"votedId":-1,"votedDirectoryId":"'
            + NO_DIRECTORY.encode()
            + b'","data_version":1}',
            "leaderEpoch",
        ),
        (
            b'{"leaderId":1,"leaderEpoch":2,"votedId":3,"votedDirectoryId":"xyz","data_version":1}',
            "Uuid",
        ),
        (
            b'{"leaderId":"1","leaderEpoch":2,"votedId":-1,"appliedOffset":0,"data_version":0}',
            "leaderId",
        ),
        (b'\xff\xfe{"data_version":1}', "malformed"),
    ],
)
def test_bad_file_is_a_quorum_state_error_naming_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, reason: str
) -> None:
    store = store_in(tmp_path)
    store.path.write_bytes(content)
    with (
        caplog.at_level(logging.ERROR, logger="kraft.log.quorum_state"),
        pytest.raises(QuorumStateError) as info,
    ):
        store.read_election_state()
    assert str(store.path) in str(info.value)
    assert reason in str(info.value)
    assert isinstance(info.value, StorageError)
    assert any(str(store.path) in r.getMessage() for r in caplog.records)


def test_unreadable_file_is_a_quorum_state_error(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    store.path.mkdir()  # reading a directory fails with an OSError
    with pytest.raises(QuorumStateError, match="cannot read") as info:
        store.read_election_state()
    assert isinstance(info.value.__cause__, OSError)


def test_write_failure_is_a_quorum_state_error(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path / "missing-dir" / QUORUM_STATE_FILE)
    with pytest.raises(QuorumStateError, match="missing-dir") as info:
        store.write_election_state(ElectionState(1))
    assert isinstance(info.value.__cause__, OSError)


def test_crash_before_rename_keeps_the_old_state(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    old = ElectionState.with_elected_leader(3, 1)
    store.write_election_state(old)
    tmp = tmp_path / "quorum-state.tmp"

    # Crash after the temporary file was written and synced, before the rename.
    tmp.write_bytes(encode_quorum_state(ElectionState.with_voted_candidate(4, 2)))
    assert store.read_election_state() == old

    # Crash in the middle of writing the temporary file.
    tmp.write_bytes(b'{"leaderId":-1,"leaderEp')
    assert store.read_election_state() == old

    # The next write cleans the leftover up.
    new = ElectionState.with_voted_candidate(5, 1)
    store.write_election_state(new)
    assert store.read_election_state() == new
    assert not tmp.exists()


def test_failed_rename_keeps_the_old_state_and_removes_the_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_in(tmp_path)
    store.write_election_state(ElectionState(1))

    def failing_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(QuorumStateError, match="No space left"):
        store.write_election_state(ElectionState(2))
    monkeypatch.undo()
    assert store.read_election_state() == ElectionState(1)
    assert not (tmp_path / "quorum-state.tmp").exists()


def test_write_fsyncs_the_file_then_renames_then_fsyncs_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def recording_fsync(fd: int) -> None:
        events.append("fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync-file")
        real_fsync(fd)

    def recording_replace(src: str, dst: str) -> None:
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    store_in(tmp_path).write_election_state(ElectionState(1))
    assert events == ["fsync-file", "replace", "fsync-dir"]


def test_clear_removes_the_file_and_the_tmp(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    store.write_election_state(ElectionState(1))
    (tmp_path / "quorum-state.tmp").write_bytes(b"x")
    store.clear()
    assert store.read_election_state() is None
    assert os.listdir(tmp_path) == []
    store.clear()  # idempotent


# -- the memory store --------------------------------------------------------------------------


def test_memory_store_has_the_file_contract() -> None:
    assert MemoryQuorumStateStore().data is None
    store = MemoryQuorumStateStore("node-1")
    assert store.read_election_state() is None
    voted = ElectionState.with_voted_candidate(2, 1, DIR_ID)
    store.write_election_state(voted, kraft_version=1)
    assert store.read_election_state() == voted
    assert store.data == encode_quorum_state(voted, 1)
    # kraft.version 0 drops the directory id here too.
    store.write_election_state(voted, kraft_version=0)
    assert store.read_election_state() == ElectionState(2, voted_id=1)
    assert store.writes == [voted, ElectionState(2, voted_id=1)]
    assert "node-1" in store.describe()
    store.clear()
    assert store.read_election_state() is None
    with pytest.raises(ValueError):
        store.write_election_state(voted, kraft_version=7)


@given(st.lists(election_states(), max_size=5))
def test_memory_store_reads_the_last_write(states: list[ElectionState]) -> None:
    store = MemoryQuorumStateStore()
    for state in states:
        store.write_election_state(state, kraft_version=1)
    assert store.read_election_state() == (states[-1] if states else None)
    assert store.writes == states
