"""MemoryLog's checked reads: a batch found intact once is not trusted for ever."""

from __future__ import annotations

import pytest

from kraft.errors import CorruptRecordError
from kraft.log.memory import MemoryLog


def three_batches() -> MemoryLog:
    log = MemoryLog()
    for value in (b"a", b"b", b"c"):
        log.append_as_leader([value], 1, timestamp_ms=0)
    return log


def test_a_batch_read_intact_and_then_corrupted_is_refused() -> None:
    log = three_batches()
    whole = log.read(0).records
    assert log.read(1).start_offset == 1  # every batch checked (and remembered) intact
    log.corrupt_batch(1, 40)
    with pytest.raises(CorruptRecordError):
        log.read(1)
    assert len(log.read(0).records) < len(whole)  # the intact batch before it only
    assert [batch is None for _, _, batch in log.held_batches(0, 3)] == [False, True, False]


def test_a_batch_read_intact_and_then_overwritten_is_refused() -> None:
    log = three_batches()
    log.read(0)
    log.misdirect_next_append(0)
    log.append_as_leader([b"d"], 1, timestamp_ms=0)  # lands on batch 0; offset 3 is blank
    with pytest.raises(CorruptRecordError):
        log.read(0)
    assert [batch is None for _, _, batch in log.held_batches(0, 4)] == [True, False, False, True]


def test_a_batch_truncated_and_appended_again_is_read_as_the_new_one() -> None:
    log = three_batches()
    log.read(0)
    log.truncate_to(1)
    log.append_as_leader([b"x", b"y"], 2, timestamp_ms=0)
    held = log.held_batches(0, 3)
    assert [(base, last) for base, last, _ in held] == [(0, 0), (1, 2)]
    assert held[1][2] is not None and held[1][2].epoch == 2
