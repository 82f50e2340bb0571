"""``FileLog`` and ``MemoryLog`` against a plain list model, driven by hypothesis.

The model is a list of segments, each a list of batches ``(base offset, epoch, values, bytes)``,
plus the few scalars the contract speaks of (high watermark, flushed offset, an epoch started
at the log end offset with no record yet). Everything the ``ReplicatedLog`` contract answers
is recomputed from it by the simplest code that could work, written from the contract in
docs/storage.md (The log) and Kafka's ``ReplicatedLog``, and not from ``kraft/log/epoch_cache.py``:

- the epoch cache is the first batch of every run of equal epochs, plus the pending epoch;
- ``end_offset_for_epoch(e)`` is the largest epoch ``<= e`` and where the next one starts (the
  LEO for the latest), or epoch 0 at the first start when every epoch is above ``e``;
- a read is the whole batches from the one holding the start offset, below the isolation
  limit, within ``max_bytes`` except that the first one always comes.

For ``FileLog`` the model also predicts the segment files (a roll happens when a batch does not
fit in ``segment_bytes``) byte for byte, and a crash cuts the active segment at any byte at or
after what was flushed: the reopened log must hold every flushed batch and each unflushed one
that lies wholly before the cut.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from kafka.record.default_records import DefaultRecordBatch

from kraft.errors import CorruptRecordError, InvalidAppendError
from kraft.log import (
    FileLog,
    Isolation,
    MemoryLog,
    OffsetAndEpoch,
    ReplicatedLog,
    ValidOffsetAndEpoch,
)
from kraft.log.file import EPOCH_CHECKPOINT, RECOVERY_POINT
from kraft.log.segment import index_path, log_path
from kraft.record import encode_batch, iter_batches

SEGMENT_BYTES = 1024
INDEX_INTERVAL_BYTES = 128
TIMESTAMP_MS = 1_700_000_000_000

values = st.lists(st.binary(max_size=160), min_size=1, max_size=6)
epoch_steps = st.integers(min_value=-1, max_value=2)  # -1: an epoch that goes back


@dataclass(frozen=True)
class ModelBatch:
    base: int
    epoch: int
    values: tuple[bytes, ...]
    data: bytes

    @property
    def last(self) -> int:
        return self.base + len(self.values) - 1

    @property
    def next(self) -> int:
        return self.base + len(self.values)


@dataclass
class ModelSegment:
    base: int
    batches: list[ModelBatch] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(b.data) for b in self.batches)


class ListModel:
    """What the log should hold; ``segment_bytes=None`` for a log without segments."""

    def __init__(self, segment_bytes: int | None) -> None:
        self.segment_bytes = segment_bytes
        self.segments = [ModelSegment(0)]
        self.pending_epoch: int | None = None  # initialize_leader_epoch with no batch yet
        self.high_watermark = 0
        self.flushed = 0

    # -- derived ---------------------------------------------------------------------------
    def batches(self) -> list[ModelBatch]:
        return [b for s in self.segments for b in s.batches]

    @property
    def log_end_offset(self) -> int:
        batches = self.batches()
        return batches[-1].next if batches else self.segments[-1].base

    def epoch_entries(self) -> list[tuple[int, int]]:
        entries: list[tuple[int, int]] = []
        for b in self.batches():
            if not entries or entries[-1][0] != b.epoch:
                entries.append((b.epoch, b.base))
        if self.pending_epoch is not None:
            entries.append((self.pending_epoch, self.log_end_offset))
        return entries

    @property
    def latest_epoch(self) -> int | None:
        entries = self.epoch_entries()
        return entries[-1][0] if entries else None

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        entries = self.epoch_entries()
        below = [i for i, (e, _) in enumerate(entries) if e <= epoch]
        if not below:
            return OffsetAndEpoch(entries[0][1] if entries else self.log_end_offset, 0)
        i = below[-1]
        end = entries[i + 1][1] if i + 1 < len(entries) else self.log_end_offset
        return OffsetAndEpoch(end, entries[i][0])

    def validate(self, offset: int, epoch: int) -> ValidOffsetAndEpoch:
        if offset == 0:  # the log starts at 0 (no snapshots yet)
            return ValidOffsetAndEpoch.valid(OffsetAndEpoch(offset, epoch))
        end = self.end_offset_for_epoch(epoch)
        if end.epoch != epoch or end.offset < offset:
            return ValidOffsetAndEpoch.diverging(end)
        return ValidOffsetAndEpoch.valid(OffsetAndEpoch(offset, epoch))

    def read(self, start: int, isolation: Isolation, max_bytes: int) -> list[ModelBatch]:
        limit = self.high_watermark if isolation is Isolation.COMMITTED else self.log_end_offset
        out: list[ModelBatch] = []
        size = 0
        for b in self.batches():
            if b.last < start:
                continue
            if b.last >= limit or (out and size + len(b.data) > max_bytes):
                break
            out.append(b)
            size += len(b.data)
        return out

    def holding_batch_base(self, offset: int) -> int | None:
        """The base offset of the batch holding ``offset`` (None past the log end)."""
        for b in self.batches():
            if b.last >= offset:
                return b.base
        return None

    # -- changes ---------------------------------------------------------------------------
    def append(self, batch: ModelBatch) -> None:
        active = self.segments[-1]
        if (
            self.segment_bytes is not None
            and active.size
            and active.size + len(batch.data) > self.segment_bytes
        ):
            # A roll fsyncs the segment it closes.
            self.segments.append(ModelSegment(self.log_end_offset))
            self.flushed = max(self.flushed, self.log_end_offset)
            active = self.segments[-1]
        active.batches.append(batch)
        self.pending_epoch = None

    def truncate(self, offset: int) -> None:
        if offset < self.log_end_offset:
            k = max(i for i, s in enumerate(self.segments) if s.base <= offset)
            del self.segments[k + 1 :]
            seg = self.segments[k]
            seg.batches = [b for b in seg.batches if b.last < offset]
        self.pending_epoch = None  # an epoch starting at the (new) LEO is forgotten
        self.flushed = min(self.flushed, self.log_end_offset)

    def lose_unflushed(self, active_file: bytes) -> None:
        """A crash: the active segment keeps the batches found whole in what is left of it.

        (Usually those before the cut; but junk written after a cut can restore the bytes
        that were cut, e.g. a batch's last byte is often 0, and then the batch is whole.)
        """
        active = self.segments[-1]
        kept, pos = [], 0
        for b in active.batches:
            if active_file[pos : pos + len(b.data)] != b.data:
                break
            kept.append(b)
            pos += len(b.data)
        active.batches = kept
        self.reopened()

    def reopened(self) -> None:
        self.pending_epoch = None
        self.high_watermark = 0
        self.flushed = self.log_end_offset

    def flushed_position(self) -> int:
        """Bytes of the active segment that were fsynced."""
        return sum(len(b.data) for b in self.segments[-1].batches if b.next <= self.flushed)


def decode(records: bytes) -> list[tuple[int, int, list[tuple[int, bytes | None]]]]:
    return [
        (b.base_offset, b.partition_leader_epoch, [(r.offset, r.value) for r in b.records()])
        for b in iter_batches(records)
    ]


def expected_decode(batches: list[ModelBatch]) -> list[tuple[int, int, list[tuple[int, bytes]]]]:
    return [(b.base, b.epoch, [(b.base + i, v) for i, v in enumerate(b.values)]) for b in batches]


class LogMachine(RuleBasedStateMachine):
    """Rules shared by both logs; subclasses open the log and say what a crash does."""

    log: ReplicatedLog
    model: ListModel

    def __init__(self) -> None:
        super().__init__()
        self.timestamp_ms = TIMESTAMP_MS

    def next_epoch(self, step: int) -> int:
        latest = self.model.latest_epoch
        return (0 if latest is None else latest) + step

    # -- appends ---------------------------------------------------------------------------
    @initialize(
        batches=st.lists(
            st.tuples(
                st.lists(st.binary(min_size=20, max_size=300), min_size=1, max_size=4),
                st.integers(0, 1),
            ),
            max_size=16,
        )
    )
    def grow(self, batches: list[tuple[list[bytes], int]]) -> None:
        """Start from a log of a few segments, so that rolls, cross-segment reads and
        truncations are common (appends one at a time rarely fill many segments)."""
        for records, step in batches:
            self.append_as_leader(records, step)

    @rule(records=values, step=epoch_steps)
    def append_as_leader(self, records: list[bytes], step: int) -> None:
        epoch = self.next_epoch(step)
        base = self.model.log_end_offset
        self.timestamp_ms += 1
        if step < 0:
            before = self.model.epoch_entries()
            with pytest.raises(InvalidAppendError):
                self.log.append_as_leader(records, epoch, timestamp_ms=self.timestamp_ms)
            assert self.model.epoch_entries() == before
            return
        info = self.log.append_as_leader(records, epoch, timestamp_ms=self.timestamp_ms)
        assert (info.first_offset, info.last_offset) == (base, base + len(records) - 1)
        data = encode_batch(base, epoch, records, timestamp_ms=self.timestamp_ms)
        self.model.append(ModelBatch(base, epoch, tuple(records), data))

    @rule(
        data=st.data(),
        specs=st.lists(st.tuples(values, st.integers(0, 2)), min_size=1, max_size=4),
        damage=st.sampled_from([None, None, None, "base", "crc", "truncated", "epoch"]),
        kind=st.sampled_from([bytes, bytearray, memoryview]),
    )
    def append_as_follower(
        self,
        data: st.DataObject,
        specs: list[tuple[list[bytes], int]],
        damage: str | None,
        kind: type,
    ) -> None:
        bad = data.draw(st.integers(0, len(specs) - 1)) if damage else -1
        base = self.model.log_end_offset
        latest = self.model.latest_epoch
        epoch = 0 if latest is None else latest
        encoded: list[ModelBatch] = []
        for i, (records, step) in enumerate(specs):
            epoch += step
            self.timestamp_ms += 1
            batch_epoch, batch_base = epoch, base
            if i == bad and damage == "epoch":
                batch_epoch = epoch - 1 - step  # below the epoch before it
            if i == bad and damage == "base":
                batch_base = base + 1 if base == 0 or data.draw(st.booleans()) else base - 1
            raw = encode_batch(batch_base, batch_epoch, records, timestamp_ms=self.timestamp_ms)
            encoded.append(ModelBatch(base, epoch, tuple(records), raw))
            base += len(records)
        buf = bytearray(b"".join(b.data for b in encoded))
        if damage == "crc":
            start = sum(len(b.data) for b in encoded[:bad])
            flip = data.draw(st.integers(start + 21, start + len(encoded[bad].data) - 1))
            buf[flip] ^= 1 << data.draw(st.integers(0, 7))
        elif damage == "truncated":
            buf = buf[: len(buf) - data.draw(st.integers(1, len(encoded[-1].data) - 1))]
        payload = kind(bytes(buf)) if kind is not bytearray else buf
        if damage is None:
            info = self.log.append_as_follower(payload)
            assert (info.first_offset, info.last_offset) == (encoded[0].base, encoded[-1].last)
            for b in encoded:
                self.model.append(b)
            return
        error = CorruptRecordError if damage in ("crc", "truncated") else InvalidAppendError
        with pytest.raises(error):
            self.log.append_as_follower(payload)

    @rule(step=epoch_steps)
    def initialize_leader_epoch(self, step: int) -> None:
        epoch = self.next_epoch(step)
        latest = self.model.latest_epoch
        if epoch < 0 or (latest is not None and epoch < latest):
            with pytest.raises(InvalidAppendError):
                self.log.initialize_leader_epoch(epoch)
            return
        self.log.initialize_leader_epoch(epoch)
        if epoch != latest:
            self.model.pending_epoch = epoch

    # -- high watermark and truncation -----------------------------------------------------
    @rule(data=st.data())
    def update_high_watermark(self, data: st.DataObject) -> None:
        hw, leo = self.model.high_watermark, self.model.log_end_offset
        offset = data.draw(st.integers(max(0, hw - 1), leo + 1))
        if offset < hw or offset > leo:
            with pytest.raises(ValueError):
                self.log.update_high_watermark(offset)
            return
        self.log.update_high_watermark(offset)
        self.model.high_watermark = offset

    def check_truncate(self, offset: int) -> bool:
        """Truncate the model as the log should be; False if the log must refuse."""
        if offset < self.model.high_watermark:
            return False
        holding = self.model.holding_batch_base(offset)
        # Cutting the batch that holds the offset must not remove a committed record.
        return holding is None or holding >= self.model.high_watermark

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.model.log_end_offset + 2))
        if not self.check_truncate(offset):
            with pytest.raises(ValueError):
                self.log.truncate_to(offset)
            return
        self.log.truncate_to(offset)
        self.model.truncate(offset)

    @rule(data=st.data())
    def truncate_to_end_offset(self, data: st.DataObject) -> None:
        latest = self.model.latest_epoch or 0
        epoch = data.draw(st.integers(0, latest + 2))
        offset = data.draw(st.integers(0, self.model.log_end_offset + 3))
        # Where the two logs agree (KafkaMetadataLog.truncateToEndOffset).
        if epoch == 0:
            target = min(offset, self.model.log_end_offset)
        else:
            local = self.model.end_offset_for_epoch(epoch)
            target = min(local.offset, offset) if local.epoch == epoch else local.offset
        if not self.check_truncate(target):
            with pytest.raises(ValueError):
                self.log.truncate_to_end_offset(OffsetAndEpoch(offset, epoch))
            return
        assert self.log.truncate_to_end_offset(OffsetAndEpoch(offset, epoch)) == target
        self.model.truncate(target)

    @rule()
    def flush(self) -> None:
        self.log.flush()
        self.model.flushed = self.model.log_end_offset

    # -- reads -----------------------------------------------------------------------------
    @rule(
        data=st.data(),
        isolation=st.sampled_from(Isolation),
        max_bytes=st.sampled_from([0, 1, 100, 300, 1000, 100_000]),
    )
    def read(self, data: st.DataObject, isolation: Isolation, max_bytes: int) -> None:
        leo = self.model.log_end_offset
        start = data.draw(st.integers(-1, leo + 1))
        if not 0 <= start <= leo:
            with pytest.raises(ValueError):
                self.log.read(start, isolation, max_bytes)
            return
        self.check_read(start, isolation, max_bytes)

    def check_read(self, start: int, isolation: Isolation, max_bytes: int) -> None:
        got = self.log.read(start, isolation, max_bytes)
        batches = self.model.read(start, isolation, max_bytes)
        first = batches[0].base if batches else start
        records = b"".join(b.data for b in batches)
        assert (got.records, got.start_offset) == (records, first), (start, isolation, max_bytes)
        assert decode(got.records) == expected_decode(batches)

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def offsets_agree(self) -> None:
        m = self.model
        assert self.log.log_start_offset == 0
        assert self.log.log_end_offset == m.log_end_offset
        assert self.log.high_watermark == m.high_watermark
        assert self.log.last_flushed_offset == m.flushed
        assert self.log.last_fetched_epoch == (m.latest_epoch or 0)
        assert self.log.epoch_entries() == m.epoch_entries()  # type: ignore[attr-defined]

    @invariant()
    def epochs_agree(self) -> None:
        m = self.model
        latest = m.latest_epoch or 0
        for epoch in range(0, latest + 2):
            assert self.log.end_offset_for_epoch(epoch) == m.end_offset_for_epoch(epoch), epoch
        leo = m.log_end_offset
        for offset in sorted({0, 1, leo // 2, max(0, leo - 1), leo, leo + 1}):
            for epoch in sorted({0, max(0, latest - 1), latest, latest + 1}):
                assert self.log.validate_offset_and_epoch(offset, epoch) == m.validate(
                    offset, epoch
                ), (offset, epoch)

    @invariant()
    def reads_agree(self) -> None:
        m = self.model
        starts = {0, m.high_watermark, m.log_end_offset}
        batches = m.batches()
        if batches:
            starts |= {batches[-1].base, batches[len(batches) // 2].last}
        for start in sorted(starts):
            for isolation in Isolation:
                for max_bytes in (1, 1 << 20):
                    self.check_read(start, isolation, max_bytes)


class MemoryLogMachine(LogMachine):
    def __init__(self) -> None:
        super().__init__()
        self.log = MemoryLog()
        self.model = ListModel(segment_bytes=None)

    @rule()
    def crash(self) -> None:
        assert isinstance(self.log, MemoryLog)
        self.log.crash()
        active = self.model.segments[-1]
        flushed = b"".join(b.data for b in active.batches)[: self.model.flushed_position()]
        self.model.lose_unflushed(flushed)


class FileLogMachine(LogMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="kraft-log-model-"))
        self.log = self.open()
        self.model = ListModel(segment_bytes=SEGMENT_BYTES)

    def open(self) -> FileLog:
        return FileLog.open(
            self.directory, segment_bytes=SEGMENT_BYTES, index_interval_bytes=INDEX_INTERVAL_BYTES
        )

    def teardown(self) -> None:
        try:
            assert isinstance(self.log, FileLog)
            self.log.close()
            self.check_files_parse()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    @rule()
    def reopen(self) -> None:
        assert isinstance(self.log, FileLog)
        self.log.close()
        self.check_files_parse()
        self.log = self.open()
        self.model.reopened()

    @rule(data=st.data(), garbage=st.sampled_from([b"", b"", b"\x00" * 64, b"\xff" * 7]))
    def crash(self, data: st.DataObject, garbage: bytes) -> None:
        """Power cut: the active segment keeps what was flushed and any prefix of the rest."""
        assert isinstance(self.log, FileLog)
        self.log.abandon()
        active = self.model.segments[-1]
        path = log_path(self.directory, active.base)
        flushed = self.model.flushed_position()
        cut = data.draw(st.integers(flushed, active.size))
        with path.open("r+b") as f:
            f.truncate(cut)
            f.seek(cut)
            f.write(garbage)  # a half-written page: zeros or junk after the cut
        # A damaged byte in the unflushed part, anywhere but in an epoch field: the epoch
        # is not under the CRC, so a flip that raises it cannot be detected.
        epoch_fields: set[int] = set()
        pos = 0
        for b in active.batches:
            epoch_fields |= set(range(pos + 12, pos + 16))
            pos += len(b.data)
        candidates = [p for p in range(flushed, cut) if p not in epoch_fields]
        if len(candidates) > 0 and data.draw(st.booleans()):
            where = data.draw(st.sampled_from(candidates))
            raw = bytearray(path.read_bytes())
            raw[where] ^= 1 << data.draw(st.integers(0, 7))
            path.write_bytes(bytes(raw))
        self.model.lose_unflushed(path.read_bytes())
        self.log = self.open()
        self.check_files_parse()

    @invariant()
    def files_agree(self) -> None:
        """Segment files hold exactly the model's batches; index and checkpoints match."""
        assert isinstance(self.log, FileLog)
        names = sorted(p.name for p in self.directory.glob("*.log"))
        assert names == [log_path(self.directory, s.base).name for s in self.model.segments]
        for seg, live in zip(self.model.segments, self.log.segments(), strict=True):
            assert live.base_offset == seg.base
            assert log_path(self.directory, seg.base).read_bytes() == b"".join(
                b.data for b in seg.batches
            )
            # Every index entry points at a batch of the segment, by its last offset.
            raw = index_path(self.directory, seg.base).read_bytes()
            entries = [(seg.base + rel, pos) for rel, pos in struct.iter_unpack(">ii", raw)]
            positions, pos = {}, 0
            for b in seg.batches:
                positions[b.last] = pos
                pos += len(b.data)
            assert entries == live.index_entries()
            assert all(positions.get(off) == pos for off, pos in entries), entries
            assert entries == sorted(set(entries))
        lines = (self.directory / EPOCH_CHECKPOINT).read_text().split("\n")
        stored = [tuple(int(x) for x in line.split()) for line in lines[2:] if line]
        assert stored == self.model.epoch_entries()
        recovery_point = int((self.directory / RECOVERY_POINT).read_text().split()[1])
        assert recovery_point == self.log.recovery_point <= self.model.flushed

    def check_files_parse(self) -> None:
        """kafka-python reads every segment (with valid CRCs) as the model's batches."""
        for seg in self.model.segments:
            raw = log_path(self.directory, seg.base).read_bytes()
            pos = 0
            for b in seg.batches:
                kb = DefaultRecordBatch(raw[pos : pos + len(b.data)])
                assert kb.validate_crc()
                assert (kb.base_offset, kb.leader_epoch) == (b.base, b.epoch)
                assert [(r.offset, r.value) for r in kb] == [
                    (b.base + i, v) for i, v in enumerate(b.values)
                ]
                pos += len(b.data)
            assert pos == len(raw)


common = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestMemoryLogModel = MemoryLogMachine.TestCase
TestMemoryLogModel.settings = common
TestFileLogModel = FileLogMachine.TestCase
TestFileLogModel.settings = common
