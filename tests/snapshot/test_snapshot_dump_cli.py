"""``kraft log dump`` on snapshot files: id, header timestamp, batches, footer, validity."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kraft.cli.main import main
from kraft.record import encode_batch
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.serde import BytesSerde
from kraft.snapshot import FileRawSnapshotWriter, SnapshotWriter, snapshot_file_name

SID = OffsetAndEpoch(42, 3)
T0 = 1_700_000_000_000


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def write_snapshot(directory: Path, sid: OffsetAndEpoch = SID) -> Path:
    raw = FileRawSnapshotWriter.create(directory, sid)
    with SnapshotWriter(
        raw, BytesSerde(), last_contained_log_timestamp_ms=T0 - 1, timestamp_ms=T0
    ) as writer:
        writer.append([b"a", b"b"])
        writer.append([b"c"])
        writer.freeze()
    return directory / snapshot_file_name(sid)


def test_dump_a_snapshot_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_snapshot(tmp_path)
    code, out, err = run(capsys, "log", "dump", str(path))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Dumping {path}"
    assert lines[1] == (
        f"Snapshot end offset: 42 epoch: 3 lastContainedLogTimestamp: {T0 - 1} valid: true"
    )
    assert re.findall(r"^baseOffset: (\d+) lastOffset: (\d+)", out, re.M) == [
        ("0", "0"),
        ("1", "3"),
        ("4", "4"),
    ]
    assert "controlTypes: [SNAPSHOT_HEADER]" in lines[2]
    assert "controlTypes: [SNAPSHOT_FOOTER]" in lines[4]
    assert all("isvalid: true" in line for line in lines[2:])
    assert all("partitionLeaderEpoch: 3" in line for line in lines[2:])


def test_dump_a_snapshot_as_json_with_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_snapshot(tmp_path)
    code, out, _ = run(capsys, "log", "dump", "--json", "--records", str(path))
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["type"] for e in events] == [
        "file",
        "snapshot",
        "batch",
        "record",
        "batch",
        "record",
        "record",
        "record",
        "batch",
        "record",
    ]
    assert events[1] == {
        "type": "snapshot",
        "path": str(path),
        "end_offset": 42,
        "epoch": 3,
        "last_contained_log_timestamp_ms": T0 - 1,
        "valid": True,
        "problem": None,
    }
    assert events[3]["control"] == {"version": 0, "last_contained_log_timestamp": T0 - 1}
    assert events[3]["control_type"] == "SNAPSHOT_HEADER"
    assert events[-1]["control_type"] == "SNAPSHOT_FOOTER"


def test_dump_an_invalid_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_snapshot(tmp_path)
    data = path.read_bytes()
    # A data batch after the footer: every CRC holds, but it is not a snapshot any more.
    bad = tmp_path / snapshot_file_name(OffsetAndEpoch(7, 3))
    bad.write_bytes(data + encode_batch(5, 3, [b"x"], timestamp_ms=T0))
    code, out, err = run(capsys, "log", "dump", str(bad))
    assert code == 1
    assert "valid: false" in out
    assert "not a control batch" in out
    assert "not a valid snapshot" in err
    assert out.count("isvalid: true") == 4


def test_dump_a_directory_lists_segments_then_snapshots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "00000000000000000000.log").write_bytes(
        encode_batch(0, 3, [b"x"] * 50, timestamp_ms=T0)
    )
    write_snapshot(tmp_path, OffsetAndEpoch(50, 3))
    write_snapshot(tmp_path, OffsetAndEpoch(9, 3))
    (tmp_path / (snapshot_file_name(OffsetAndEpoch(60, 3)) + ".part")).write_bytes(b"junk")
    code, out, _ = run(capsys, "log", "dump", str(tmp_path))
    assert code == 0
    assert [line.split("/")[-1] for line in out.splitlines() if line.startswith("Dumping")] == [
        "00000000000000000000.log",
        snapshot_file_name(OffsetAndEpoch(9, 3)),
        snapshot_file_name(OffsetAndEpoch(50, 3)),
    ]


def test_dump_a_directory_of_snapshots_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_snapshot(tmp_path)
    code, out, _ = run(capsys, "log", "dump", str(tmp_path))
    assert code == 0 and "Snapshot end offset: 42" in out
