"""The ``kraft`` command line, run in-process with ``main([...])``."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.cli.main import main
from kraft.common.uuids import uuid_from_text
from kraft.log.meta_properties import read_meta_properties
from kraft.log.quorum_state import ElectionState, FileQuorumStateStore
from kraft.record import SimpleRecord, encode_batch
from kraft.record.control import (
    KRaftVersionRecord,
    LeaderChangeMessage,
    LeaderChangeVoter,
    control_batch,
    encode_control_value,
)

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
KRAFT_VERSION_KEY = b"\x00\x00\x00\x05"
T0 = 1_700_000_000_000


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


# -- usage -------------------------------------------------------------------------------------


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys)
    assert code == 2 and "storage" in err and "log" in err
    code, _, err = run(capsys, "storage")
    assert code == 2 and "random-uuid" in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "nonsense")[0] == 2
    assert run(capsys, "storage", "format", "dir")[0] == 2  # --cluster-id, --node-id missing
    code, _, err = run(
        capsys, "storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "-3", "dir"
    )
    assert code == 2 and "negative" in err


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "usage: kraft" in out
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("kraft ")


# -- storage -----------------------------------------------------------------------------------


def test_random_uuid(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "storage", "random-uuid")
    uuid = out.strip()
    assert code == 0 and len(uuid) == 22 and uuid_from_text(uuid) and not uuid.startswith("-")


def test_format_then_refuse_to_reformat(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = tmp_path / "node1"
    code, out, _ = run(
        capsys, "storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "1", str(data_dir)
    )
    assert code == 0 and "Formatted" in out
    meta = read_meta_properties(data_dir)
    assert (meta.cluster_id, meta.node_id) == (CLUSTER_ID, 1)
    assert (data_dir / "__cluster_metadata-0").is_dir()
    before = (data_dir / "meta.properties").read_bytes()

    code, out, err = run(
        capsys, "storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "1", str(data_dir)
    )
    assert code == 1 and out == ""
    assert err.startswith("error: ") and "already formatted" in err and str(data_dir) in err
    assert (data_dir / "meta.properties").read_bytes() == before

    # --ignore-formatted: fine for the same cluster and node, an error for another node.
    code, out, _ = run(
        capsys,
        "storage",
        "format",
        "-g",
        "--cluster-id",
        CLUSTER_ID,
        "--node-id",
        "1",
        str(data_dir),
    )
    assert code == 0 and "already formatted" in out
    code, _, err = run(
        capsys,
        "storage",
        "format",
        "-g",
        "--cluster-id",
        CLUSTER_ID,
        "--node-id",
        "2",
        str(data_dir),
    )
    assert code == 1 and "node 1, not node 2" in err


def test_format_rejects_a_cluster_id_that_is_not_a_uuid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys,
        "storage",
        "format",
        "--cluster-id",
        "my-cluster",
        "--node-id",
        "1",
        str(tmp_path / "d"),
    )
    assert code == 1 and err.startswith("error: cluster id") and "Uuid" in err
    assert not (tmp_path / "d").exists()


def test_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "storage", "format", "-t", CLUSTER_ID, "-n", "4", str(tmp_path))
    code, out, _ = run(capsys, "storage", "info", str(tmp_path))
    assert code == 0 and f"cluster.id={CLUSTER_ID}" in out and "node.id=4" in out
    assert "(none" in out

    FileQuorumStateStore.in_directory(tmp_path).write_election_state(
        ElectionState.with_elected_leader(7, 2)
    )
    code, out, _ = run(capsys, "storage", "info", str(tmp_path))
    assert code == 0 and "epoch=7 leader_id=2" in out

    (tmp_path / "quorum-state").write_text('{"data_version": 9}')
    code, _, err = run(capsys, "storage", "info", str(tmp_path))
    assert code == 1 and "error: malformed quorum state file" in err and "data_version 9" in err


def test_info_on_an_unformatted_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "storage", "info", str(tmp_path))
    assert code == 1 and "not formatted" in err
    code, _, err = run(capsys, "storage", "info", str(tmp_path / "nope"))
    assert code == 1 and "not a directory" in err


def test_recover_quorum_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 17, hole 7: a node that lost its quorum-state gets one that cannot vote again in
    the quorum's current epoch (nor below it)."""
    run(capsys, "storage", "format", "-t", CLUSTER_ID, "-n", "4", str(tmp_path))
    code, out, _ = run(capsys, "storage", "recover-quorum-state", str(tmp_path), "--epoch", "9")
    assert code == 0 and "epoch 9" in out
    state = FileQuorumStateStore.in_directory(tmp_path).read_election_state()
    assert state is not None
    assert (state.epoch, state.leader_id) == (9, None)
    assert state.has_voted and not state.is_voted_candidate(4, None)
    code, _, err = run(capsys, "storage", "recover-quorum-state", str(tmp_path), "--epoch", "9")
    assert code == 1 and "nothing to recover" in err  # never over a state that exists
    assert run(capsys, "storage", "recover-quorum-state", str(tmp_path))[0] == 2  # no --epoch


# -- log dump ----------------------------------------------------------------------------------


def leader_change(offset: int, epoch: int) -> bytes:
    voters = (LeaderChangeVoter(1), LeaderChangeVoter(2), LeaderChangeVoter(3))
    message = LeaderChangeMessage(leader_id=1, voters=voters, granting_voters=voters[:2])
    return control_batch(offset, epoch, [message], timestamp_ms=T0)


def data_batch(offset: int, epoch: int, values: list[bytes]) -> bytes:
    return encode_batch(offset, epoch, list(values), timestamp_ms=T0 + offset)


def corrupt_crc(batch: bytes) -> bytes:
    """Flip the last byte of the last value (records without headers end in a value byte and
    a zero header count): the records still decode, the CRC no longer holds."""
    damaged = bytearray(batch)
    damaged[-2] ^= 0xFF
    return bytes(damaged)


def write_segment(directory: Path, base_offset: int, *batches: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{base_offset:020d}.log"
    path.write_bytes(b"".join(batches))
    return path


def test_dump_a_clean_segment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b0 = leader_change(0, 1)
    b1 = data_batch(1, 1, [b"a", b"bb", b"ccc"])
    path = write_segment(tmp_path, 0, b0, b1)
    code, out, err = run(capsys, "log", "dump", str(path))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"Dumping {path}"
    assert lines[1] == "Log starting offset: 0"
    assert lines[2].startswith("baseOffset: 0 lastOffset: 0 count: 1 partitionLeaderEpoch: 1 ")
    assert "isControl: true" in lines[2] and "position: 0 " in lines[2]
    assert f"size: {len(b0)} " in lines[2] and "isvalid: true" in lines[2]
    assert lines[2].endswith("controlTypes: [LEADER_CHANGE]")
    assert lines[3].startswith("baseOffset: 1 lastOffset: 3 count: 3 partitionLeaderEpoch: 1 ")
    assert f"position: {len(b0)} " in lines[3] and "isControl: false" in lines[3]
    assert "controlTypes" not in lines[3]
    assert len(lines) == 4


def test_dump_reports_a_bad_crc_and_stops_at_a_truncated_tail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b0 = leader_change(0, 1)
    b1 = corrupt_crc(data_batch(1, 1, [b"x", b"y"]))
    b2 = data_batch(3, 1, [b"z"])
    torn = data_batch(4, 1, [b"lost"])[:30]
    path = write_segment(tmp_path, 0, b0, b1, b2, torn)
    tail_position = len(b0) + len(b1) + len(b2)

    code, out, err = run(capsys, "log", "dump", str(path))
    assert code == 1
    batches = [line for line in out.splitlines() if line.startswith("baseOffset")]
    assert [re.search(r"isvalid: (\w+)", b).group(1) for b in batches] == [  # type: ignore[union-attr]
        "true",
        "false",
        "true",
    ]
    assert batches[2].startswith("baseOffset: 3 ")  # the dump went on past the bad CRC
    tail = out.splitlines()[-1]
    assert tail.startswith(
        f"Found 30 invalid bytes at the end of {path}, "
        f"from byte position {tail_position}: truncated batch"
    )
    assert f"byte position {len(b0)}" in err and "bad CRC" in err
    assert f"30 unreadable bytes from byte position {tail_position}" in err


def test_dump_stops_at_a_bad_magic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b0 = data_batch(0, 2, [b"ok"])
    garbage = bytearray(data_batch(1, 2, [b"no"]))
    garbage[16] = 7
    path = write_segment(tmp_path, 0, b0, bytes(garbage), data_batch(2, 2, [b"unseen"]))
    code, out, _ = run(capsys, "log", "dump", "--json", str(path))
    assert code == 1
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["type"] for e in events] == ["file", "batch", "error"]
    assert events[2]["position"] == len(b0) and "magic 7" in events[2]["message"]


def test_dump_a_tail_of_zeros(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b0 = data_batch(0, 1, [b"ok"])
    path = write_segment(tmp_path, 0, b0, bytes(100))  # a preallocated tail
    code, out, _ = run(capsys, "log", "dump", str(path))
    assert code == 1
    assert f"Found 100 invalid bytes at the end of {path}, from byte position {len(b0)}" in out


def test_dump_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = SimpleRecord(b"v", key=b"k", headers=(("h", b"1"),), timestamp_ms=T0 + 5)
    path = write_segment(
        tmp_path,
        0,
        leader_change(0, 1),
        encode_batch(1, 1, [b"hello", record], timestamp_ms=T0),
    )
    code, out, _ = run(capsys, "log", "dump", "--records", str(path))
    assert code == 0
    records = [line for line in out.splitlines() if line.startswith("| ")]
    assert records[0].startswith(f"| offset: 0 CreateTime: {T0} keySize: 4 ")
    assert "controlType: LEADER_CHANGE" in records[0]
    assert "control: LeaderChangeMessage(version=0, leader_id=1," in records[0]
    assert records[1] == (
        f"| offset: 1 CreateTime: {T0} keySize: -1 valueSize: 5 "
        "headerKeys: [] key: None value: b'hello'"
    )
    assert records[2] == (
        f"| offset: 2 CreateTime: {T0 + 5} keySize: 1 valueSize: 1 "
        "headerKeys: [h] key: b'k' value: b'v'"
    )


def test_dump_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kraft_version = encode_control_value(KRaftVersionRecord(kraft_version=1))
    b0 = encode_batch(
        0,
        3,
        [
            SimpleRecord(kraft_version, key=KRAFT_VERSION_KEY),
            SimpleRecord(b"", key=b"\x00\x00\x00\x2a"),
        ],
        timestamp_ms=T0,
        control=True,
    )
    b1 = corrupt_crc(data_batch(2, 3, [b"\x00\xff"]))
    path = write_segment(tmp_path, 0, b0, b1)
    code, out, _ = run(capsys, "log", "dump", "--json", "--records", str(path))
    assert code == 1
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["type"] for e in events] == ["file", "batch", "record", "record", "batch", "record"]
    assert events[0] == {"type": "file", "path": str(path), "size_in_bytes": len(b0) + len(b1)}
    control = events[1]
    assert control["is_control"] and control["crc_valid"] and control["epoch"] == 3
    assert control["control_types"] == ["KRAFT_VERSION", "UNKNOWN(42)"]
    assert (control["base_offset"], control["last_offset"], control["count"]) == (0, 1, 2)
    assert control["size_in_bytes"] == len(b0) and control["position"] == 0
    assert events[2]["control_type"] == "KRAFT_VERSION"
    assert base64.b64decode(events[2]["key"]) == KRAFT_VERSION_KEY
    assert events[2]["control"] == {"version": 0, "kraft_version": 1}
    assert events[2]["control_error"] is None
    assert (
        events[3]["control"] is None
        and "unknown control record type 42" in events[3]["control_error"]
    )
    bad = events[4]
    assert not bad["crc_valid"] and bad["position"] == len(b0) and bad["control_types"] is None
    assert events[5]["key"] is None and base64.b64decode(events[5]["value"]) == b"\x00\x00"


def test_dump_a_batch_whose_records_cannot_be_decoded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = bytearray(leader_change(0, 1))
    damaged[-1] = 0x7F  # the header count of the last record: 63 headers that are not there
    path = write_segment(tmp_path, 0, bytes(damaged), data_batch(1, 1, [b"after"]))
    code, out, err = run(capsys, "log", "dump", "--records", str(path))
    assert code == 1
    lines = out.splitlines()
    assert "isvalid: false" in lines[2] and "controlTypes" not in lines[2]
    assert lines[3].startswith("| records unreadable: corrupt record in batch")
    assert lines[4].startswith("baseOffset: 1 ")
    assert "corrupt record" in err


def test_dump_a_data_directory_finds_the_metadata_partition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = tmp_path / "__cluster_metadata-0"
    write_segment(partition, 0, leader_change(0, 1), data_batch(1, 1, [b"a"]))
    write_segment(partition, 2, data_batch(2, 1, [b"b"]))
    (partition / "00000000000000000000.index").write_bytes(b"\x00" * 8)  # not a segment
    for path in (tmp_path, partition):
        code, out, _ = run(capsys, "log", "dump", str(path))
        assert code == 0
        dumping = [line for line in out.splitlines() if line.startswith("Dumping")]
        assert dumping == [
            f"Dumping {partition / '00000000000000000000.log'}",
            f"Dumping {partition / '00000000000000000002.log'}",
        ]
        offsets = re.findall(r"^baseOffset: (\d+)", out, re.MULTILINE)
        assert offsets == ["0", "1", "2"]


def test_dump_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "log", "dump", str(tmp_path / "missing"))
    assert code == 1 and err.startswith("error: ") and "no such file" in err
    code, _, err = run(capsys, "log", "dump", str(tmp_path))
    assert code == 1 and "no log segments" in err


def test_dump_an_empty_segment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_segment(tmp_path, 0)
    code, out, _ = run(capsys, "log", "dump", str(path))
    assert code == 0 and out.splitlines() == [f"Dumping {path}", "Log starting offset: 0"]


# -- the installed console script --------------------------------------------------------------


def test_console_script(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "kraft"
    if not script.exists():
        pytest.skip("the kraft console script is not installed next to this interpreter")
    uuid = subprocess.run(
        [str(script), "storage", "random-uuid"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert uuid_from_text(uuid)
    args = [str(script), "storage", "format", "--cluster-id", uuid, "--node-id", "1", str(tmp_path)]
    subprocess.run(args, check=True, capture_output=True, timeout=60)
    again = subprocess.run(args, check=False, capture_output=True, text=True, timeout=60)
    assert again.returncode == 1
    assert again.stderr.startswith("error: ") and "Traceback" not in again.stderr


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_dump_never_crashes_on_damaged_segments(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    record = SimpleRecord(b"value", key=b"key", headers=(("h", b"1"), ("n", None)))
    segment = bytearray(leader_change(0, 1) + encode_batch(1, 1, [b"a", record], timestamp_ms=T0))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(segment) - 1))
        segment[position] = data.draw(st.integers(0, 255))
    segment = segment[: data.draw(st.integers(0, len(segment)))]
    path = write_segment(tmp_path_factory.mktemp("fuzz"), 0, bytes(segment))
    for argv in (
        ["log", "dump", "--records", str(path)],
        ["log", "dump", "--json", "--records", str(path)],
    ):
        assert main(argv) in (0, 1)
