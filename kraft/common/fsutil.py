"""Durable files: fsync of a directory, crash-safe replacement of a small file.

Here, below both :mod:`kraft.log` and :mod:`kraft.snapshot`, because both use them (a frozen
snapshot's rename is made durable by :func:`fsync_directory`).
``quorum-state``, ``meta.properties``, ``leader-epoch-checkpoint`` and ``repair-target`` are
all replaced the same way: write a temporary file, fsync it, rename it over the old one
(atomic on POSIX), fsync the directory so the rename itself is durable. A crash at any point
leaves either the old file or the new one, never a mix.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

__all__ = ["fsync_directory", "write_atomically"]

logger = logging.getLogger(__name__)


def fsync_directory(directory: Path) -> None:
    """fsync a directory so that a rename, a new entry or a deletion in it survives a crash."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old file or the new one.

    Delete a stale ``<path>.tmp``, write the data to it, flush, fsync, rename it over ``path``,
    then fsync the directory. On failure the temporary file is removed (best effort) and the
    ``OSError`` propagates: callers translate it into their own error naming the file.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.unlink(missing_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            logger.warning("could not remove the temporary file %s", tmp)
        raise
    fsync_directory(path.parent)
