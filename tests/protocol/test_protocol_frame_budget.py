"""The decoders' memory: a shared budget for partial frames, and bytes let go once used.

The runtime gives every inbound connection's decoder the same :class:`FrameBudget` (Kafka's
``queued.max.request.bytes``): these tests hold the decoder to reserving what it holds as it
arrives, to never going past the budget, and to giving everything back.
"""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.protocol import (
    FetchRequest,
    FrameBudget,
    FrameBudgetExceededError,
    FrameError,
    RequestFrameDecoder,
    RequestHeader,
    encode_request,
)

KIB = 1024
MIB = 1024 * KIB


def request_frame(padding: int, correlation_id: int = 1) -> bytes:
    """A request frame of about ``padding`` bytes (a Fetch whose cluster id is padded)."""
    body = FetchRequest(
        replica_id=2, current_leader_epoch=1, fetch_offset=0, last_fetched_epoch=0, max_wait_ms=0
    )
    header = RequestHeader.for_body(body, correlation_id, cluster_id="x" * padding)
    return encode_request(header, body)


def feed_all(decoder: RequestFrameDecoder, data: bytes) -> int:
    """Feed ``data`` and take every complete frame; how many there were."""
    decoder.feed(data)
    return len(list(decoder))


def test_a_partial_frame_within_the_free_part_reserves_nothing() -> None:
    budget = FrameBudget(0)
    decoder = RequestFrameDecoder(budget=budget, free_bytes=1 * KIB)
    frame = request_frame(900)
    assert feed_all(decoder, frame[:-1]) == 0
    assert decoder.reserved_bytes == 0
    assert budget.in_use == 0
    assert feed_all(decoder, frame[-1:]) == 1


def test_the_reservation_follows_the_bytes_received_not_the_declared_length() -> None:
    budget = FrameBudget(1 * MIB)
    decoder = RequestFrameDecoder(budget=budget, free_bytes=10 * KIB)
    frame = request_frame(4 * MIB)  # declares 4 MiB: more than the whole budget
    assert feed_all(decoder, frame[: 100 * KIB]) == 0
    assert decoder.reserved_bytes == 100 * KIB - 10 * KIB
    assert budget.in_use == decoder.reserved_bytes


def test_a_partial_frame_past_the_budget_breaks_its_decoder_only() -> None:
    budget = FrameBudget(300 * KIB)
    first = RequestFrameDecoder(budget=budget, free_bytes=0)
    second = RequestFrameDecoder(budget=budget, free_bytes=0)
    frame = request_frame(1 * MIB)
    feed_all(first, frame[: 200 * KIB])
    with pytest.raises(FrameBudgetExceededError) as caught:
        feed_all(second, frame[: 200 * KIB])
    assert caught.value.budget_limit == 300 * KIB
    assert isinstance(caught.value, FrameError)  # the runtime closes the connection
    assert second.reserved_bytes == 0
    assert budget.in_use == first.reserved_bytes == 200 * KIB
    with pytest.raises(FrameBudgetExceededError):
        second.feed(b"more")  # broken, like after any frame error
    # The first decoder still gets its frame whole, and gives its reservation back.
    assert feed_all(first, frame[200 * KIB :]) == 1
    assert budget.in_use == first.reserved_bytes == 0


def test_frames_completed_in_one_read_need_no_budget() -> None:
    """A burst of pipelined requests in one read is handed out before anything is reserved:
    a full budget does not refuse a replica's ordinary traffic."""
    budget = FrameBudget(0)
    decoder = RequestFrameDecoder(budget=budget, free_bytes=1 * KIB)
    burst = b"".join(request_frame(500, i) for i in range(200))  # ~100 KiB in one chunk
    assert feed_all(decoder, burst) == 200
    assert budget.in_use == 0


def test_close_gives_back_the_reservation() -> None:
    budget = FrameBudget(1 * MIB)
    decoder = RequestFrameDecoder(budget=budget, free_bytes=0)
    feed_all(decoder, request_frame(1 * MIB)[: 500 * KIB])
    assert budget.in_use == 500 * KIB
    decoder.close()
    decoder.close()  # idempotent
    assert budget.in_use == 0
    assert decoder.buffered_bytes == 0
    with pytest.raises(FrameError):
        decoder.feed(b"x")


def test_a_large_frame_leaves_no_allocation_behind_once_handed_out() -> None:
    """The buffer of a 4 MiB frame is let go when the frame is handed out, not kept (as
    ``del buffer[:n]`` keeps it) for as long as the connection lives."""
    data = request_frame(4 * MIB) + request_frame(10, 2)[:5]  # the next frame has begun
    chunks = [data[start : start + 256 * KIB] for start in range(0, len(data), 256 * KIB)]
    decoder = RequestFrameDecoder()
    tracemalloc.start()
    try:
        baseline, _ = tracemalloc.get_traced_memory()
        for piece in chunks:
            decoder.feed(piece)
        frames = list(decoder)
        assert len(frames) == 1
        del frames
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoder.buffered_bytes == 5
    assert held - baseline < 256 * KIB


@settings(max_examples=60, deadline=None)
@given(
    frames=st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 40 * KIB)), min_size=1, max_size=12
    ),
    chunk=st.integers(1, 16 * KIB),
    limit=st.integers(0, 64 * KIB),
    free=st.integers(0, 8 * KIB),
)
def test_the_budget_is_never_exceeded_and_always_given_back(
    frames: list[tuple[int, int]], chunk: int, limit: int, free: int
) -> None:
    """Three decoders share a budget, fed interleaved chunks of frames of many sizes: the
    budget never goes past its limit, always equals what the live decoders reserve (what
    each holds beyond its free part), and is all given back at the end."""
    budget = FrameBudget(limit)
    decoders = [RequestFrameDecoder(budget=budget, free_bytes=free) for _ in range(3)]
    streams = [b"", b"", b""]
    for which, size in frames:
        streams[which] += request_frame(size)
    broken: set[int] = set()
    positions = [0, 0, 0]
    while any(positions[i] < len(streams[i]) for i in range(3) if i not in broken):
        for i, decoder in enumerate(decoders):
            if i in broken or positions[i] >= len(streams[i]):
                continue
            piece = streams[i][positions[i] : positions[i] + chunk]
            positions[i] += len(piece)
            try:
                feed_all(decoder, piece)
            except FrameBudgetExceededError:
                broken.add(i)
                assert decoder.reserved_bytes == 0
            else:
                assert decoder.reserved_bytes == max(0, decoder.buffered_bytes - free)
            assert budget.in_use <= limit
            assert budget.in_use == sum(d.reserved_bytes for d in decoders)
    for i in set(range(3)) - broken:
        assert decoders[i].buffered_bytes == 0  # every frame arrived whole
    for decoder in decoders:
        decoder.close()
    assert budget.in_use == 0


def test_a_negative_budget_or_free_part_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        FrameBudget(-1)
    with pytest.raises(ValueError, match="negative"):
        RequestFrameDecoder(free_bytes=-1)
