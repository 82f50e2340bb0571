"""Snapshot file names, listing, crash leftovers and deletion (kraft.snapshot.files)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.errors import StorageError
from kraft.record.offsets import OffsetAndEpoch
from kraft.snapshot import (
    DELETED_SUFFIX,
    PART_SUFFIX,
    SNAPSHOT_SUFFIX,
    clean_snapshot_directory,
    delete_snapshot_file,
    list_snapshots,
    parse_snapshot_file_name,
    snapshot_file_name,
)


def test_the_name_is_kafkas() -> None:
    assert snapshot_file_name(OffsetAndEpoch(100, 3)) == (
        "00000000000000000100-0000000003.checkpoint"
    )
    assert snapshot_file_name(OffsetAndEpoch(0, 0), PART_SUFFIX).endswith(".checkpoint.part")
    with pytest.raises(ValueError, match="negative"):
        snapshot_file_name(OffsetAndEpoch(-1, 0))


@given(
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**31 - 1),
    st.sampled_from([SNAPSHOT_SUFFIX, PART_SUFFIX, DELETED_SUFFIX]),
)
def test_names_round_trip(offset: int, epoch: int, suffix: str) -> None:
    sid = OffsetAndEpoch(offset, epoch)
    assert parse_snapshot_file_name(snapshot_file_name(sid, suffix)) == (sid, suffix)


@pytest.mark.parametrize(
    "name",
    [
        "00000000000000000100-0000000003.log",
        "00000000000000000100.checkpoint",
        "0000000000000000100-0000000003.checkpoint",  # 19 digits
        "00000000000000000100-000000003.checkpoint",  # 9 digits
        "00000000000000000100-0000000003.checkpoint.tmp",
        "00000000000000000100-0000000003.checkpointx",
        "x00000000000000000100-0000000003.checkpoint",
        "00000000000000000100-9999999999.checkpoint",  # epoch past int32
        "99999999999999999999-0000000003.checkpoint",  # offset past int64
        "leader-epoch-checkpoint",
        "0000000000000000010a-0000000003.checkpoint",
    ],
)
def test_other_names_are_not_snapshots(name: str) -> None:
    assert parse_snapshot_file_name(name) is None


def touch(directory: Path, sid: OffsetAndEpoch, suffix: str = SNAPSHOT_SUFFIX) -> Path:
    path = directory / snapshot_file_name(sid, suffix)
    path.write_bytes(b"x")
    return path


def test_list_sorts_by_offset_then_epoch_and_ignores_the_rest(tmp_path: Path) -> None:
    ids = [
        OffsetAndEpoch(200, 1),
        OffsetAndEpoch(100, 3),
        OffsetAndEpoch(100, 2),
        OffsetAndEpoch(5, 9),
    ]
    for sid in ids:
        touch(tmp_path, sid)
    touch(tmp_path, OffsetAndEpoch(300, 4), PART_SUFFIX)
    touch(tmp_path, OffsetAndEpoch(50, 1), DELETED_SUFFIX)
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    assert list_snapshots(tmp_path) == [
        OffsetAndEpoch(5, 9),
        OffsetAndEpoch(100, 2),
        OffsetAndEpoch(100, 3),
        OffsetAndEpoch(200, 1),
    ]


def test_clean_removes_the_leftovers_of_a_crash(tmp_path: Path) -> None:
    frozen = touch(tmp_path, OffsetAndEpoch(10, 1))
    part = touch(tmp_path, OffsetAndEpoch(20, 1), PART_SUFFIX)
    deleted = touch(tmp_path, OffsetAndEpoch(5, 1), DELETED_SUFFIX)
    other = tmp_path / "00000000000000000000.log"
    other.write_bytes(b"")
    assert sorted(clean_snapshot_directory(tmp_path)) == sorted([part, deleted])
    assert sorted(tmp_path.iterdir()) == sorted([frozen, other])
    assert clean_snapshot_directory(tmp_path) == []


def test_delete_renames_then_unlinks(tmp_path: Path) -> None:
    sid = OffsetAndEpoch(10, 1)
    touch(tmp_path, sid)
    assert delete_snapshot_file(tmp_path, sid)
    assert list(tmp_path.iterdir()) == []
    assert not delete_snapshot_file(tmp_path, sid)


def test_a_missing_directory_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="missing"):
        list_snapshots(tmp_path / "missing")
    with pytest.raises(StorageError):
        clean_snapshot_directory(tmp_path / "missing")
