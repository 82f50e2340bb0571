"""Snapshot file names and the directory operations around them (KIP-630, Kafka's
``Snapshots`` and ``SnapshotPath``).

A snapshot with id ``(end_offset, epoch)`` lives beside the log segments as
``%020d-%010d.checkpoint``, e.g. ``00000000000000000100-0000000003.checkpoint``. Its life:

- ``<name>.checkpoint.part`` while it is written or downloaded;
- ``<name>.checkpoint`` once frozen (fsync, atomic rename, fsync of the directory);
- ``<name>.checkpoint.deleted`` for the moment of a deletion: the rename makes the snapshot
  invisible at once, the unlink follows.

A ``.part`` or ``.deleted`` file found on open is a leftover of a crash (mid-write, mid-download
or mid-delete) and is removed by :func:`clean_snapshot_directory`.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from kraft.common.fsutil import fsync_directory
from kraft.common.limits import INT32_MAX, INT64_MAX
from kraft.errors import StorageError
from kraft.record.offsets import OffsetAndEpoch

__all__ = [
    "DELETED_SUFFIX",
    "PART_SUFFIX",
    "SNAPSHOT_SUFFIX",
    "clean_snapshot_directory",
    "delete_snapshot_file",
    "list_snapshots",
    "parse_snapshot_file_name",
    "snapshot_file_name",
    "snapshot_path",
]

logger = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".checkpoint"
PART_SUFFIX = ".checkpoint.part"
DELETED_SUFFIX = ".checkpoint.deleted"

_NAME = re.compile(r"(\d{20})-(\d{10})(\.checkpoint(?:\.part|\.deleted)?)")


def snapshot_file_name(snapshot_id: OffsetAndEpoch, suffix: str = SNAPSHOT_SUFFIX) -> str:
    """``%020d-%010d`` of the end offset and epoch, then ``suffix``."""
    offset, epoch = snapshot_id
    if offset < 0 or epoch < 0:
        raise ValueError(f"a snapshot id is not negative: {snapshot_id}")
    return f"{offset:020d}-{epoch:010d}{suffix}"


def snapshot_path(
    directory: Path, snapshot_id: OffsetAndEpoch, suffix: str = SNAPSHOT_SUFFIX
) -> Path:
    """``directory / snapshot_file_name(snapshot_id, suffix)``."""
    return directory / snapshot_file_name(snapshot_id, suffix)


def parse_snapshot_file_name(name: str) -> tuple[OffsetAndEpoch, str] | None:
    """The id and suffix of a snapshot file name (frozen, ``.part`` or ``.deleted``);
    ``None`` for any other name, or numbers out of range (an epoch above int32)."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    offset, epoch = int(match[1]), int(match[2])
    if offset > INT64_MAX or epoch > INT32_MAX:
        return None
    return OffsetAndEpoch(offset, epoch), match[3]


def _entries(directory: Path) -> list[tuple[Path, OffsetAndEpoch, str]]:
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise StorageError(f"cannot list snapshots in {directory}: {exc}") from exc
    out = []
    for name in names:
        parsed = parse_snapshot_file_name(name)
        if parsed is not None:
            out.append((directory / name, parsed[0], parsed[1]))
    return out


def list_snapshots(directory: Path) -> list[OffsetAndEpoch]:
    """The ids of the frozen snapshots in ``directory``, by end offset, then epoch."""
    ids = [sid for _path, sid, suffix in _entries(directory) if suffix == SNAPSHOT_SUFFIX]
    return sorted(ids, key=lambda sid: (sid.offset, sid.epoch))


def clean_snapshot_directory(directory: Path) -> list[Path]:
    """Remove the ``.part`` and ``.deleted`` files a crash left behind; return what went.

    A ``.part`` file was never frozen (a write or download that did not finish), a ``.deleted``
    one was already invisible: neither holds anything the log may use.
    """
    removed = []
    for path, _sid, suffix in sorted(_entries(directory)):
        if suffix == SNAPSHOT_SUFFIX:
            continue
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot remove the snapshot leftover {path}: {exc}") from exc
        logger.info("removed the snapshot leftover %s", path)
        removed.append(path)
    if removed:
        _fsync_directory(directory)
    return removed


def delete_snapshot_file(directory: Path, snapshot_id: OffsetAndEpoch) -> bool:
    """Delete a frozen snapshot: rename it to ``.deleted`` (durably), then unlink it.

    Once the rename is on disk the snapshot is gone for any later open, even if the unlink
    never happens. ``False`` if there was no such snapshot. Readers already open keep reading
    (POSIX keeps an unlinked file's data until its last descriptor closes).
    """
    path = snapshot_path(directory, snapshot_id)
    deleted = snapshot_path(directory, snapshot_id, DELETED_SUFFIX)
    try:
        os.rename(path, deleted)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StorageError(f"cannot delete the snapshot {path}: {exc}") from exc
    _fsync_directory(directory)
    try:
        deleted.unlink()
    except OSError as exc:
        raise StorageError(f"cannot remove {deleted}: {exc}") from exc
    return True


def _fsync_directory(directory: Path) -> None:
    try:
        fsync_directory(directory)
    except OSError as exc:
        raise StorageError(f"cannot fsync the directory {directory}: {exc}") from exc
