"""``FileLog`` on disk: torn writes and corruption on recovery, the index and the epoch
checkpoint as derived data, the segment layout, reads and truncation; ``MemoryLog`` where the
same contract applies."""

from __future__ import annotations

import logging
import os
import random
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from kraft.errors import CorruptRecordError, InvalidAppendError, LogDirectoryError
from kraft.log import FileLog, Isolation, MemoryLog, ReplicatedLog
from kraft.log.file import EPOCH_CHECKPOINT, RECOVERY_POINT
from kraft.log.segment import index_path, log_path
from kraft.record import encode_batch, iter_batches, with_base_offset

SEGMENT_BYTES = 1024
TIMESTAMP_MS = 1_700_000_000_000
EPOCH_FIELD = range(12, 16)  # PartitionLeaderEpoch: not under the CRC


def payload(offset: int, size: int = 40) -> bytes:
    return (f"record-{offset}-".encode() * size)[:size]


def fill(
    log: ReplicatedLog, count: int, *, epoch: int = 1, records: int = 2, size: int = 40
) -> list[bytes]:
    """Append ``count`` leader batches; return each batch as the bytes it must be stored as."""
    out = []
    for _ in range(count):
        base = log.log_end_offset
        values = [payload(base + i, size) for i in range(records)]
        info = log.append_as_leader(values, epoch, timestamp_ms=TIMESTAMP_MS)
        assert info.first_offset == base
        out.append(encode_batch(base, epoch, values, timestamp_ms=TIMESTAMP_MS))
    return out


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def disk_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in segment_files(directory))


def flip_bit(path: Path, position: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 1 << bit
    path.write_bytes(bytes(data))


def batch_positions(data: bytes) -> list[tuple[int, int, int]]:
    """(position, size, base offset) of every batch in ``data``."""
    return [(b.position, b.size_in_bytes, b.base_offset) for b in iter_batches(data)]


def read_all(log: ReplicatedLog, start: int = 0) -> bytes:
    return log.read(start, Isolation.UNCOMMITTED, 1 << 30).records


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(params=["memory", "file"])
def any_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ReplicatedLog]:
    if request.param == "memory":
        yield MemoryLog()
        return
    log = FileLog.open(tmp_path / "log", segment_bytes=SEGMENT_BYTES, index_interval_bytes=64)
    yield log
    log.close()


# -- torn writes ---------------------------------------------------------------------------


def test_torn_last_batch_reopens_at_the_previous_batch_boundary(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash can leave any prefix of the last batch: every one is cut back to the boundary."""
    template = tmp_path / "template"
    with FileLog.open(template) as log:
        kept = fill(log, 4, epoch=1)
    log = FileLog.open(template)  # the recovery point is now the end of those 4 batches
    last = fill(log, 1, epoch=2, records=3)[0]
    log.abandon()  # a crash before the flush: the last batch was never made durable
    boundary = sum(len(b) for b in kept)
    assert log_path(template, 0).stat().st_size == boundary + len(last)

    for keep in range(len(last)):
        directory = tmp_path / f"cut-{keep}"
        shutil.copytree(template, directory)
        os.truncate(log_path(directory, 0), boundary + keep)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kraft"):
            log = FileLog.open(directory)
        assert log.log_end_offset == 8
        assert read_all(log) == b"".join(kept)
        assert log.last_fetched_epoch == 1  # the epoch of the lost batch is forgotten
        assert log.epoch_entries() == [(1, 0)]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        if keep:
            assert len(warnings) == 1
            assert str(log_path(directory, 0)) in warnings[0]
            assert f"cutting {keep} bytes from byte {boundary}" in warnings[0]
        else:
            assert warnings == []
        # The log is usable, and what is appended now survives a clean reopen.
        again = fill(log, 1, epoch=3)
        log.close()
        with FileLog.open(directory) as log:
            assert read_all(log) == b"".join(kept + again)
            assert log.epoch_entries() == [(1, 0), (3, 8)]
        shutil.rmtree(directory)


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(b"\x00" * 4096, id="zeros"),
        pytest.param(random.Random(7).randbytes(300), id="random"),
        pytest.param(b"\x00\x00\x00", id="short"),
        pytest.param(encode_batch(3, 1, [b"x"], timestamp_ms=1), id="wrong-base-offset"),
        pytest.param(encode_batch(8, 0, [b"x"], timestamp_ms=1), id="epoch-going-back"),
    ],
)
def test_garbage_after_the_last_batch_is_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, garbage: bytes
) -> None:
    directory = tmp_path / "log"
    log = FileLog.open(directory)
    batches = fill(log, 4)
    log.abandon()
    with log_path(directory, 0).open("ab") as f:
        f.write(garbage)
    with caplog.at_level(logging.WARNING, logger="kraft"):
        log = FileLog.open(directory)
    assert log.log_end_offset == 8
    assert log_path(directory, 0).read_bytes() == b"".join(batches)
    assert any(str(log_path(directory, 0)) in r.getMessage() for r in caplog.records)
    log.close()


def test_a_bad_batch_followed_by_intact_ones_is_set_aside_with_them(tmp_path: Path) -> None:
    """Without a recovery point everything is checked. A bad batch with intact batches after
    it is not a torn tail (issue 17, hole 7: this used to cut it and every later segment):
    the rest of the log is set aside, kept, and the repair target says how far it reached."""
    directory = tmp_path / "log"
    with FileLog.open(directory, segment_bytes=SEGMENT_BYTES) as log:
        batches = fill(log, 20)
    files = segment_files(directory)
    assert len(files) >= 3
    (directory / RECOVERY_POINT).unlink()
    originals = [f.read_bytes() for f in files]
    first = batch_positions(originals[1])
    flip_bit(files[1], first[1][0] + 30)  # the second batch of the second segment
    with FileLog.open(directory, segment_bytes=SEGMENT_BYTES) as log:
        assert log.log_end_offset == first[1][2]
        assert segment_files(directory) == files[:2]
        assert read_all(log) == b"".join(batches)[: len(originals[0]) + first[1][0]]
        assert log.repair_target == (40, 1)
    (event,) = quarantined(directory)
    set_aside = sorted(event.iterdir())
    assert [p.read_bytes() for p in set_aside[1:]] == originals[2:]
    damaged = bytearray(originals[1][first[1][0] :])
    damaged[30] ^= 1
    assert set_aside[0].name == f"{first[1][2]:020d}.log"
    assert set_aside[0].read_bytes() == bytes(damaged)


# -- corruption ----------------------------------------------------------------------------

BATCH_BYTES = [i for i in range(0, 61 + 2 * 42) if i not in EPOCH_FIELD]


def quarantined(directory: Path) -> list[Path]:
    """The quarantine event directories, in order."""
    root = directory / "quarantine"
    return sorted(root.iterdir()) if root.exists() else []


@pytest.mark.parametrize("byte", BATCH_BYTES)
def test_bit_flip_inside_flushed_data_is_set_aside_not_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, byte: int
) -> None:
    """Flushed data is never silently cut, nor does damage there stop the log from opening
    any more (issue 17: it was a CorruptLogError): the log is set aside from the bad batch
    and the repair target keeps the replica from electing a log without what it lost."""
    directory = tmp_path / "log"
    with FileLog.open(directory) as log:  # close() sets the recovery point to the LEO
        batches = fill(log, 5)
    path = log_path(directory, 0)
    position, size, base = batch_positions(path.read_bytes())[2]
    assert byte < size
    flip_bit(path, position + byte, bit=byte % 8)
    damaged = path.read_bytes()[position:]
    with caplog.at_level(logging.ERROR, logger="kraft"):
        log = FileLog.open(directory)
    assert log.log_end_offset == base
    assert read_all(log) == b"".join(batches[:2])
    assert log.repair_target == (10, 1)
    assert "set aside" in caplog.text and str(path) in caplog.text
    log.close()
    (event,) = quarantined(directory)
    assert (event / f"{base:020d}.log").read_bytes() == damaged
    with FileLog.open(directory) as log:  # the target survives a restart
        assert log.repair_target == (10, 1)
        fill(log, 3)  # reaching (10, 1) again repairs it
        assert log.repair_target is None
    with FileLog.open(directory) as log:
        assert log.repair_target is None
    assert not (directory / "repair-target").exists()


@pytest.mark.parametrize("byte", [0, 5, 7, 11, 16, 17, 25, 60, 70])
def test_bit_flip_in_the_last_indexed_batch_is_set_aside(tmp_path: Path, byte: int) -> None:
    """Recovery starts at the last index entry; that batch is checked against the entry
    (its base offset is not under the CRC)."""
    directory = tmp_path / "log"
    with FileLog.open(directory, index_interval_bytes=0) as log:
        fill(log, 6)
        assert log.segments()[0].index_entries()  # every batch but the first is indexed
    path = log_path(directory, 0)
    position, _, base = batch_positions(path.read_bytes())[-1]
    flip_bit(path, position + byte)
    with FileLog.open(directory, index_interval_bytes=0) as log:
        assert log.log_end_offset == base
        assert log.repair_target == (12, 1)


def test_epoch_going_back_below_the_recovery_point_is_set_aside(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    with FileLog.open(directory) as log:
        fill(log, 2, epoch=3)
        fill(log, 3, epoch=4)
    path = log_path(directory, 0)
    position, _, base = batch_positions(path.read_bytes())[3]
    data = bytearray(path.read_bytes())
    struct.pack_into(">i", data, position + 12, 2)
    path.write_bytes(bytes(data))
    with FileLog.open(directory) as log:
        assert log.log_end_offset == base == 6
        assert log.repair_target == (10, 4)
        assert log.epoch_entries() == [(3, 0), (4, 4)]


@pytest.mark.parametrize("byte", BATCH_BYTES)
def test_bit_flip_in_the_unflushed_last_batch_is_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, byte: int
) -> None:
    """Bad bytes above the recovery point with nothing intact after them: a torn tail."""
    directory = tmp_path / "log"
    with FileLog.open(directory) as log:
        kept = fill(log, 3)
    log = FileLog.open(directory)
    tail = fill(log, 3, epoch=2)
    log.abandon()  # a crash: the tail was never flushed
    path = log_path(directory, 0)
    position, _, base = batch_positions(path.read_bytes())[5]
    flip_bit(path, position + byte, bit=7 - byte % 8)
    with caplog.at_level(logging.WARNING, logger="kraft"):
        log = FileLog.open(directory)
    assert log.log_end_offset == base
    assert read_all(log) == b"".join([*kept, *tail[:2]])
    assert any("cutting" in r.getMessage() for r in caplog.records)
    assert log.repair_target is None
    assert quarantined(directory) == []
    log.close()


def test_a_bad_unflushed_batch_before_intact_ones_is_set_aside(tmp_path: Path) -> None:
    """Above the recovery point too, a bad batch with intact ones after it is no torn write."""
    directory = tmp_path / "log"
    with FileLog.open(directory) as log:
        kept = fill(log, 3)
    log = FileLog.open(directory)
    tail = fill(log, 3, epoch=2)
    log.abandon()
    path = log_path(directory, 0)
    position, _, base = batch_positions(path.read_bytes())[4]
    flip_bit(path, position + 30)
    with FileLog.open(directory) as log:
        assert log.log_end_offset == base
        assert read_all(log) == b"".join([*kept, tail[0]])
        assert log.repair_target == (12, 2)
    (event,) = quarantined(directory)
    assert len((event / f"{base:020d}.log").read_bytes()) == len(tail[1]) + len(tail[2])


def test_a_lost_write_raises_the_repair_target(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A log ending below what it had made durable lost a write: nothing to cut, but it may
    have acknowledged what it lost."""
    directory = tmp_path / "log"
    log = FileLog.open(directory)
    batches = fill(log, 5, epoch=2)
    log.flush()  # the recovery point moves to (10, 2), in place
    log.abandon()
    path = log_path(directory, 0)
    os.truncate(path, len(b"".join(batches[:3])))
    with caplog.at_level(logging.ERROR, logger="kraft"):
        log = FileLog.open(directory)
    assert log.log_end_offset == 6
    assert log.repair_target == (10, 2)
    assert "lost write" in caplog.text
    log.close()
    with FileLog.open(directory) as log:
        assert log.repair_target == (10, 2)


@pytest.mark.parametrize("epoch", [1, 0, -1], ids=["lower", "zero", "negative"])
def test_a_tail_batch_whose_epoch_goes_back_is_cut(tmp_path: Path, epoch: int) -> None:
    """The epoch is not under the CRC, but a log's epochs never go back."""
    directory = tmp_path / "log"
    with FileLog.open(directory) as log:
        fill(log, 2, epoch=2)
    log = FileLog.open(directory)
    fill(log, 2, epoch=5)
    log.abandon()
    path = log_path(directory, 0)
    position, _, base = batch_positions(path.read_bytes())[3]
    data = bytearray(path.read_bytes())
    struct.pack_into(">i", data, position + 12, epoch)
    path.write_bytes(bytes(data))
    with FileLog.open(directory) as log:
        assert log.log_end_offset == base
        assert log.epoch_entries() == [(2, 0), (5, 4)]


def test_a_failed_open_leaks_no_file_descriptors(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    with FileLog.open(directory, segment_bytes=SEGMENT_BYTES) as log:
        fill(log, 20)
    (directory / "repair-target").write_text("0\nten 1\n")  # read once the segments are open
    before = open_fds()
    for _ in range(5):
        with pytest.raises(LogDirectoryError, match="repair target"):
            FileLog.open(directory, segment_bytes=SEGMENT_BYTES)
    assert open_fds() == before


# -- derived files: index, epoch checkpoint, recovery point --------------------------------


def index_entries(path: Path, base: int) -> list[tuple[int, int]]:
    return [(base + rel, pos) for rel, pos in struct.iter_unpack(">ii", path.read_bytes())]


def damage_index(path: Path, how: str, log_file: Path) -> None:
    raw = path.read_bytes()
    if how == "missing":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "torn":
        path.write_bytes(raw[: len(raw) - 3])
    elif how == "fewer-entries":
        path.write_bytes(raw[: len(raw) // 16 * 8])
    elif how == "garbage":
        path.write_bytes(random.Random(3).randbytes(len(raw)))
    elif how == "past-the-end":
        path.write_bytes(raw + struct.pack(">ii", 10_000, log_file.stat().st_size + 10))
    elif how == "wrong-position":
        # The last entry names the right offset but points at another (valid) batch.
        rel, _ = struct.unpack(">ii", raw[-8:])
        _, prev = struct.unpack(">ii", raw[-16:-8])
        path.write_bytes(
            raw[:-16] + struct.pack(">ii", rel - 1, prev) + struct.pack(">ii", rel, prev + 1)
        )
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    ["missing", "empty", "torn", "fewer-entries", "garbage", "past-the-end", "wrong-position"],
)
def test_a_damaged_index_is_rebuilt(tmp_path: Path, how: str) -> None:
    directory = tmp_path / "log"

    def reopen() -> FileLog:
        return FileLog.open(directory, segment_bytes=4096, index_interval_bytes=200)

    with reopen() as log:
        batches = fill(log, 60, records=3, size=30)
        offsets = log.log_end_offset
    originals = {p: p.read_bytes() for p in directory.glob("*.index")}
    assert len(originals) >= 3 and all(len(raw) >= 24 for raw in originals.values())
    for path in originals:
        damage_index(path, how, path.with_suffix(".log"))

    with reopen() as log:
        # Every offset is found in the batch that holds it.
        by_offset = {}
        for raw in batches:
            (view,) = iter_batches(raw)
            for offset in range(view.base_offset, view.next_offset):
                by_offset[offset] = raw
        for offset in range(offsets):
            assert log.read(offset, max_bytes=1).records == by_offset[offset], offset
        # The index files are rewritten, consistent with what the log holds in memory.
        for segment in log.segments():
            assert index_entries(segment.index_path, segment.base_offset) == (
                segment.index_entries()
            )
    assert {p: p.read_bytes() for p in directory.glob("*.index")} == originals


def epoch_log(directory: Path) -> tuple[list[tuple[int, int]], bytes]:
    with FileLog.open(directory) as log:
        fill(log, 2, epoch=1)
        fill(log, 1, epoch=3)
        log.initialize_leader_epoch(4)
        fill(log, 2, epoch=4)
        log.initialize_leader_epoch(6)  # holds no record: forgotten on reopen
        entries = log.epoch_entries()
    assert entries == [(1, 0), (3, 4), (4, 6), (6, 10)]
    with FileLog.open(directory) as log:
        assert log.epoch_entries() == entries[:-1]
    return entries[:-1], (directory / EPOCH_CHECKPOINT).read_bytes()


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(None, id="missing"),
        pytest.param(b"", id="empty"),
        pytest.param(b"\xff\xfe\x00garbage\x80", id="binary-garbage"),
        pytest.param(b"1\n1\n1 0\n", id="unknown-version"),
        pytest.param(b"0\n3\n1 0\n", id="wrong-count"),
        pytest.param(b"0\n1\n1 zero\n", id="not-a-number"),
        pytest.param(b"0\n2\n3 0\n1 4\n", id="epochs-going-back"),
        pytest.param(b"0\n1\n1 0\n", id="stale"),
    ],
)
def test_a_damaged_epoch_checkpoint_is_rebuilt_from_the_batches(
    tmp_path: Path, content: bytes | None
) -> None:
    directory = tmp_path / "log"
    entries, original = epoch_log(directory)
    path = directory / EPOCH_CHECKPOINT
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content)
    with FileLog.open(directory) as log:
        assert log.epoch_entries() == entries
        assert log.last_fetched_epoch == 4
    assert path.read_bytes() == original


@pytest.mark.parametrize("content", [b"", b"0\n", b"banana\n", b"\x00\xff\x10", b"1\n5\n"])
def test_a_damaged_recovery_point_recovers_the_whole_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    directory = tmp_path / "log"
    with FileLog.open(directory, segment_bytes=SEGMENT_BYTES) as log:
        batches = fill(log, 12)
    (directory / RECOVERY_POINT).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="kraft"):
        log = FileLog.open(directory, segment_bytes=SEGMENT_BYTES)
    assert read_all(log) == b"".join(batches)
    assert log.recovery_point == log.log_end_offset == 24
    assert "recovery point" in caplog.text
    log.close()


def test_a_directory_is_opened_by_one_log_at_a_time(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    log = FileLog.open(directory)
    fill(log, 1)
    with pytest.raises(LogDirectoryError, match="in use"):
        FileLog.open(directory)
    fill(log, 1)  # the first log is unharmed
    log.close()
    with FileLog.open(directory) as again:
        assert again.log_end_offset == 4


def test_a_closed_log_refuses_to_work(tmp_path: Path) -> None:
    log = FileLog.open(tmp_path / "log")
    log.close()
    log.close()  # idempotent
    with pytest.raises(LogDirectoryError):
        log.append_as_leader([b"x"], 1, timestamp_ms=TIMESTAMP_MS)
    with pytest.raises(LogDirectoryError):
        log.read(0)


# -- layout --------------------------------------------------------------------------------


def test_segments_roll_at_segment_bytes(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    with FileLog.open(directory, segment_bytes=SEGMENT_BYTES) as log:
        batches = fill(log, 10, records=2, size=100)  # ~270 bytes: 3 per segment
        big = fill(log, 1, records=12, size=100)  # larger than a segment: alone in one
        batches += big + fill(log, 2, records=2, size=100)
        assert log.last_flushed_offset >= log.segments()[-1].base_offset
        assert log.recovery_point == log.segments()[-1].base_offset
    files = segment_files(directory)
    assert len(files) == 6
    for path in files:
        assert len(path.stem) == 20 and path.stem.isdigit()
        views = list(iter_batches(path.read_bytes()))
        assert views[0].base_offset == int(path.stem)
        assert path.stat().st_size <= SEGMENT_BYTES or len(views) == 1
        assert index_path(directory, int(path.stem)).exists()
    assert max(p.stat().st_size for p in files) > SEGMENT_BYTES  # the big batch
    assert disk_bytes(directory) == b"".join(batches)


def test_disk_bytes_are_exactly_the_appended_batches(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    with FileLog.open(directory, segment_bytes=SEGMENT_BYTES) as log:
        batches = fill(log, 7, epoch=1)
        base = log.log_end_offset
        control = encode_batch(base, 2, [b"\x00\x00\x00\x00"], timestamp_ms=5, control=True)
        log.append_as_leader([b"\x00\x00\x00\x00"], 2, timestamp_ms=5, control=True)
        batches += [control, *fill(log, 7, epoch=2)]
    assert disk_bytes(directory) == b"".join(batches)


def foreign_batches(base: int, epoch: int) -> bytes:
    """Batches our encoder would not produce (kafka-python's, and one with producer state):
    the follower must store them exactly as received."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=1000, key=b"key", value=b"v" * 50, headers=[("h", b"1")])
    builder.append(1, timestamp=990, key=None, value=None, headers=[])
    first = with_base_offset(bytes(builder.build()), base, epoch)
    own = bytearray(encode_batch(base + 2, epoch, [b"a" * 30, b"b"], timestamp_ms=7))
    struct.pack_into(">qhi", own, 43, 4242, 3, 17)  # producer id, epoch, base sequence
    struct.pack_into(">I", own, 17, crc32c.crc32c(bytes(own[21:])))
    return first + bytes(own)


def test_follower_append_is_a_byte_copy(any_log: ReplicatedLog, tmp_path: Path) -> None:
    leader = fill(any_log, 2)
    fetched = foreign_batches(any_log.log_end_offset, 2)
    # A view into a larger fetch response, not starting at byte 0.
    response = memoryview(b"header" + fetched + b"trailer")[6 : 6 + len(fetched)]
    info = any_log.append_as_follower(response)
    assert (info.first_offset, info.last_offset) == (4, 7)
    assert read_all(any_log) == b"".join(leader) + fetched
    if isinstance(any_log, FileLog):
        assert disk_bytes(any_log.directory) == b"".join(leader) + fetched
        any_log.close()
        with FileLog.open(any_log.directory) as log:
            assert read_all(log) == b"".join(leader) + fetched


def test_a_follower_append_larger_than_a_segment_is_split_at_batch_boundaries(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "log"
    chunk = b"".join(
        encode_batch(i * 4, 1, [payload(i, 60)] * 4, timestamp_ms=1) for i in range(20)
    )
    with FileLog.open(directory, segment_bytes=SEGMENT_BYTES) as log:
        log.append_as_follower(chunk)
        assert log.log_end_offset == 80
        assert len(log.segments()) == len(segment_files(directory)) > 3
    assert disk_bytes(directory) == chunk
    for path in segment_files(directory):
        assert path.stat().st_size <= SEGMENT_BYTES
        assert next(iter_batches(path.read_bytes())).base_offset == int(path.stem)


@pytest.mark.parametrize("damage", ["crc", "base-offset", "epoch", "partial", "empty"])
def test_a_bad_follower_append_appends_nothing(any_log: ReplicatedLog, damage: str) -> None:
    fill(any_log, 2, epoch=2)
    good = encode_batch(4, 2, [b"a"], timestamp_ms=1)
    error: type[Exception]
    if damage == "crc":
        bad, error = good[:-1] + b"\x01", CorruptRecordError
    elif damage == "base-offset":
        bad, error = encode_batch(6, 2, [b"b"], timestamp_ms=1), InvalidAppendError
    elif damage == "epoch":
        bad, error = encode_batch(5, 1, [b"b"], timestamp_ms=1), InvalidAppendError
    elif damage == "partial":
        bad, error = encode_batch(5, 2, [b"b"], timestamp_ms=1)[:-5], CorruptRecordError
    else:
        good, bad, error = b"", b"", InvalidAppendError
    before = read_all(any_log)
    with pytest.raises(error):
        any_log.append_as_follower(good + bad)
    assert read_all(any_log) == before
    assert any_log.log_end_offset == 4
    assert any_log.epoch_entries() == [(2, 0)]  # type: ignore[attr-defined]


# -- reads ---------------------------------------------------------------------------------


def test_read_across_segment_boundaries(tmp_path: Path) -> None:
    with FileLog.open(tmp_path / "log", segment_bytes=SEGMENT_BYTES) as log:
        batches = fill(log, 30, records=2, size=40)
        assert len(log.segments()) > 4
        everything = b"".join(batches)
        for i in range(len(batches)):
            base = 2 * i
            for start in (base, base + 1):
                got = log.read(start)
                assert got.start_offset == base
                assert got.records == b"".join(batches[i:])
        assert log.read(60).records == b""
        # A read that starts just before a segment ends continues into the next ones.
        second = log.segments()[1].base_offset
        got = log.read(second - 1, max_bytes=3 * len(batches[0]))
        assert (
            got.records
            == everything[sum(len(b) for b in batches[: second // 2 - 1]) :][: 3 * len(batches[0])]
        )


def test_committed_reads_stop_below_the_high_watermark(any_log: ReplicatedLog) -> None:
    batches = fill(any_log, 30, records=2)
    assert any_log.read(0, Isolation.COMMITTED).records == b""
    any_log.update_high_watermark(10)  # a batch boundary
    assert any_log.read(0, Isolation.COMMITTED).records == b"".join(batches[:5])
    assert any_log.read(10, Isolation.COMMITTED).records == b""
    assert any_log.read(10, Isolation.COMMITTED).start_offset == 10
    any_log.update_high_watermark(13)  # inside the batch [12, 13]: not yet visible
    assert any_log.read(3, Isolation.COMMITTED).records == b"".join(batches[1:6])
    any_log.update_high_watermark(14)
    assert any_log.read(3, Isolation.COMMITTED).records == b"".join(batches[1:7])
    assert any_log.read(3, Isolation.UNCOMMITTED).records == b"".join(batches[1:])
    any_log.update_high_watermark(60)
    assert any_log.read(0, Isolation.COMMITTED).records == b"".join(batches)


def test_read_max_bytes_returns_whole_batches_and_at_least_one(any_log: ReplicatedLog) -> None:
    batches = fill(any_log, 30, records=2)
    size = len(batches[0])
    assert all(len(b) == size for b in batches)
    for max_bytes in (0, 1, size - 1, size):
        assert any_log.read(4, max_bytes=max_bytes).records == batches[2]
    assert any_log.read(4, max_bytes=2 * size - 1).records == batches[2]
    assert any_log.read(4, max_bytes=2 * size).records == b"".join(batches[2:4])
    # Across segments (FileLog rolls every few batches here) the same rule holds.
    assert any_log.read(1, max_bytes=20 * size + 5).records == b"".join(batches[:20])


@pytest.mark.parametrize("start", [-1, 61, 1000])
def test_a_read_outside_the_log_is_a_value_error(any_log: ReplicatedLog, start: int) -> None:
    fill(any_log, 30)
    with pytest.raises(ValueError):
        any_log.read(start)


# -- truncation ----------------------------------------------------------------------------


def test_truncate_across_segments_deletes_the_later_segment_files(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    with FileLog.open(directory, segment_bytes=SEGMENT_BYTES) as log:
        batches = fill(log, 10, epoch=1) + fill(log, 10, epoch=2)
        files = segment_files(directory)
        assert len(files) >= 4
        log.truncate_to(15)  # inside the batch [14, 15] of epoch 1
        assert log.log_end_offset == 14
        assert log.recovery_point <= 14
        assert log.epoch_entries() == [(1, 0)]
        assert log.last_flushed_offset <= 14
        kept = [p for p in files if int(p.stem) <= 14]
        assert segment_files(directory) == kept
        assert not any(index_path(directory, int(p.stem)).exists() for p in files[len(kept) :])
        assert disk_bytes(directory) == b"".join(batches[:7])
        again = fill(log, 3, epoch=3)
    with FileLog.open(directory, segment_bytes=SEGMENT_BYTES) as log:
        assert read_all(log) == b"".join(batches[:7] + again)
        assert log.epoch_entries() == [(1, 0), (3, 14)]


def test_truncate_to_a_segment_base_empties_that_segment(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    with FileLog.open(directory, segment_bytes=SEGMENT_BYTES) as log:
        fill(log, 20)
        base = log.segments()[2].base_offset
        log.truncate_to(base)
        assert log.log_end_offset == base
        assert [s.base_offset for s in log.segments()][-1] == base
        assert log_path(directory, base).stat().st_size == 0
    with FileLog.open(directory, segment_bytes=SEGMENT_BYTES) as log:
        assert log.log_end_offset == base
        fill(log, 1)
        assert next(iter_batches(log_path(directory, base).read_bytes())).base_offset == base


def test_truncate_to_cuts_the_whole_batch_holding_the_offset(any_log: ReplicatedLog) -> None:
    batches = fill(any_log, 5, records=3)
    any_log.update_high_watermark(6)
    any_log.truncate_to(7)
    assert any_log.log_end_offset == 6
    assert read_all(any_log) == b"".join(batches[:2])
    any_log.truncate_to(100)  # past the end: nothing to cut
    assert any_log.log_end_offset == 6


def test_truncate_to_never_removes_a_committed_record(any_log: ReplicatedLog) -> None:
    batches = fill(any_log, 5, records=3)
    any_log.update_high_watermark(7)  # inside the batch [6, 8]
    with pytest.raises(ValueError):
        any_log.truncate_to(6)
    with pytest.raises(ValueError):
        any_log.truncate_to(8)  # >= HW, but the batch holding it starts below the HW
    assert read_all(any_log) == b"".join(batches)
    any_log.truncate_to(9)
    assert any_log.log_end_offset == 9


def test_an_empty_append_leaves_the_epochs_alone(any_log: ReplicatedLog) -> None:
    fill(any_log, 1, epoch=1)
    with pytest.raises(ValueError):
        any_log.append_as_leader([], 5, timestamp_ms=TIMESTAMP_MS)
    assert any_log.last_fetched_epoch == 1
    assert any_log.epoch_entries() == [(1, 0)]  # type: ignore[attr-defined]


# -- crashes -------------------------------------------------------------------------------


def test_memory_log_crash_keeps_exactly_the_flushed_batches() -> None:
    log = MemoryLog()
    flushed = fill(log, 3, epoch=1)
    log.flush()
    log.initialize_leader_epoch(2)
    fill(log, 2, epoch=2)
    log.update_high_watermark(8)
    log.crash()
    assert read_all(log) == b"".join(flushed)
    assert (log.log_end_offset, log.high_watermark, log.last_fetched_epoch) == (6, 0, 1)
    assert log.epoch_entries() == [(1, 0)]


def test_file_log_crash_keeps_the_flushed_batches(tmp_path: Path) -> None:
    """After a crash the log holds at least what was flushed and the HW is forgotten."""
    directory = tmp_path / "log"
    log = FileLog.open(directory)
    flushed = fill(log, 5, epoch=1)
    log.flush()
    assert log.last_flushed_offset == 10
    fill(log, 2, epoch=2)
    log.update_high_watermark(12)
    log.abandon()
    active = segment_files(directory)[-1]
    os.truncate(active, active.stat().st_size - len(flushed[0]) * 2)  # the unflushed part
    with FileLog.open(directory) as log:
        assert read_all(log) == b"".join(flushed)
        assert (log.log_end_offset, log.high_watermark, log.last_fetched_epoch) == (10, 0, 1)


def test_an_index_left_by_a_deleted_segment_is_not_reused(tmp_path: Path) -> None:
    """A crash between the two unlinks of a segment leaves its index; a new segment of the
    same name must start with an empty one."""
    directory = tmp_path / "log"

    def reopen() -> FileLog:
        return FileLog.open(directory, segment_bytes=SEGMENT_BYTES, index_interval_bytes=0)

    with reopen() as log:
        fill(log, 15, records=2, size=40)
        last = log.segments()[-1].base_offset
    assert index_path(directory, last).stat().st_size > 0
    log_path(directory, last).unlink()
    (directory / RECOVERY_POINT).unlink()
    with reopen() as log:
        assert log.log_end_offset == last
        fill(log, 1, records=6, size=90)  # does not fit: rolls to a new segment named `last`
        fill(log, 2, records=1, size=10)
        assert log.segments()[-1].base_offset == last
        entries = log.segments()[-1].index_entries()
        assert index_entries(index_path(directory, last), last) == entries
    raw = log_path(directory, last).read_bytes()
    positions = {b.position: b.last_offset for b in iter_batches(raw)}
    assert all(positions.get(pos) == off for off, pos in entries)


def test_a_segment_cut_behind_the_logs_back_is_an_error_not_a_hang(tmp_path: Path) -> None:
    with FileLog.open(tmp_path / "log", index_interval_bytes=0) as log:
        fill(log, 10)
        os.truncate(log_path(tmp_path / "log", 0), 100)
        with pytest.raises(CorruptRecordError):
            log.read(17)
