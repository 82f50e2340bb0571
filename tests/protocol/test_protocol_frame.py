"""The frame codec: size limits before the body, and bad bytes only ever raise typed errors."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    DescribeQuorumResponse,
    FetchRequest,
    FetchResponse,
    FrameDecoder,
    FrameError,
    FrameTooLargeError,
    MalformedFrameError,
    MessageEncodeError,
    ReplicaState,
    RequestFrame,
    RequestFrameDecoder,
    RequestHeader,
    ResponseFrame,
    ResponseFrameDecoder,
    ResponseHeader,
    VoteRequest,
    VoteResponse,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

VOTE = VoteRequest(replica_epoch=5, replica_id=1, last_offset_epoch=4, last_offset=100)
VOTE_FRAME = encode_request(RequestHeader.for_body(VOTE, 7, cluster_id="c"), VOTE)
FETCH_RESPONSE = FetchResponse(high_watermark=3, records=b"\x00" * 100)
FETCH_RESPONSE_FRAME = encode_response(ResponseHeader(7), FETCH_RESPONSE)


def prefix(length: int) -> bytes:
    return length.to_bytes(4, "big")


def framed(payload: bytes) -> bytes:
    return prefix(len(payload)) + payload


def decoders() -> list[FrameDecoder[Any]]:
    return [RequestFrameDecoder(max_frame_size=4096), ResponseFrameDecoder(max_frame_size=4096)]


def drain(decoder: FrameDecoder[Any], data: bytes) -> list[Any]:
    decoder.feed(data)
    return list(decoder)


# --- frame too large --------------------------------------------------------------------------


def test_too_large_is_rejected_on_the_length_prefix_alone() -> None:
    decoder = RequestFrameDecoder(max_frame_size=1000)
    with pytest.raises(FrameTooLargeError) as info:
        decoder.feed(prefix(1001))  # no body byte has arrived
    assert (info.value.size, info.value.max_frame_size) == (1001, 1000)
    assert decoder.buffered_bytes == 0


def test_too_large_is_rejected_when_the_prefix_arrives_byte_by_byte() -> None:
    decoder = ResponseFrameDecoder(max_frame_size=1000)
    for byte in prefix(2**31)[:3]:
        decoder.feed(bytes([byte]))
        assert decoder.next_frame() is None
    with pytest.raises(FrameTooLargeError):
        decoder.feed(prefix(2**31)[3:])


def test_frame_at_the_maximum_is_accepted() -> None:
    body_size = len(VOTE_FRAME) - 4
    assert len(drain(RequestFrameDecoder(max_frame_size=body_size), VOTE_FRAME)) == 1
    with pytest.raises(FrameTooLargeError):
        RequestFrameDecoder(max_frame_size=body_size - 1).feed(VOTE_FRAME)


def test_frames_before_a_too_large_one_are_still_handed_out() -> None:
    decoder = RequestFrameDecoder(max_frame_size=1000)
    decoder.feed(VOTE_FRAME + VOTE_FRAME + prefix(5000))
    assert decoder.next_frame() is not None
    assert decoder.next_frame() is not None
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()


def test_the_default_maximum_admits_an_8_mib_fetch() -> None:
    records = b"r" * (8 * 1024 * 1024)
    raw = encode_response(ResponseHeader(1), FetchResponse(records=records))
    assert len(raw) <= DEFAULT_MAX_FRAME_SIZE
    frame = drain(ResponseFrameDecoder(), raw)[0]
    assert frame.body.records == records


def test_encoding_checks_the_maximum_too() -> None:
    with pytest.raises(FrameTooLargeError):
        encode_response(ResponseHeader(1), FETCH_RESPONSE, max_frame_size=50)
    assert encode_response(ResponseHeader(1), FETCH_RESPONSE, max_frame_size=1000)


def test_max_frame_size_is_validated() -> None:
    for bad in (0, -1, 2**31):
        with pytest.raises(ValueError):
            RequestFrameDecoder(max_frame_size=bad)


# --- malformed and truncated --------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # a msgpack opcode that is never valid
        b"\x92",  # an array that stops short
        msgspec.msgpack.encode("not a frame"),
        msgspec.msgpack.encode([[52, 2, 1], [52, "five", 1, 4, 100]]),  # a wrong type
        msgspec.msgpack.encode([[99, 0, 1], [99, 1, 2]]),  # an unknown API key
        msgspec.msgpack.encode([[52, 0, 1], [52]]),  # required fields missing
        msgspec.msgpack.encode([[52, 0, 1]]),  # no body
        VOTE_FRAME[4:] + b"\x00",  # trailing bytes inside the frame
    ],
)
def test_malformed_bodies(payload: bytes) -> None:
    with pytest.raises(MalformedFrameError):
        drain(RequestFrameDecoder(), framed(payload))


def test_an_item_appended_to_the_frame_is_ignored() -> None:
    # Frames evolve like messages: appended items are for newer peers.
    payload = msgspec.msgpack.encode([[52, 0, 1], [52, 5, 1, 4, 100], "from the future"])
    assert decode_request(framed(payload)).body == VOTE


def test_zero_length_frame_is_malformed() -> None:
    with pytest.raises(MalformedFrameError):
        RequestFrameDecoder().feed(prefix(0))


def test_header_that_disagrees_with_its_body_is_malformed() -> None:
    header = RequestHeader.for_body(VOTE, 1)
    raw = encode_request(msgspec.structs.replace(header, api_key=1), VOTE)  # says Fetch
    with pytest.raises(MalformedFrameError, match="API key"):
        decode_request(raw)


def test_a_request_is_not_a_response() -> None:
    # Vote request and response share key 52; the response decoder reads a request's fields as
    # the wrong types (or a request decoder a response's).
    with pytest.raises(MalformedFrameError):
        decode_response(VOTE_FRAME)
    with pytest.raises(MalformedFrameError):
        decode_request(encode_response(ResponseHeader(1), DescribeQuorumResponse(
            current_voters=(ReplicaState(1),))))  # fmt: skip


@pytest.mark.parametrize("cut", [1, 3, 4, 5, len(VOTE_FRAME) - 1])
def test_truncated_frame_is_malformed_at_end_of_stream(cut: int) -> None:
    decoder = RequestFrameDecoder()
    assert drain(decoder, VOTE_FRAME[:cut]) == []
    with pytest.raises(MalformedFrameError, match="stream ended"):
        decoder.feed_eof()
    with pytest.raises(MalformedFrameError):
        decode_request(VOTE_FRAME[:cut])


def test_clean_end_of_stream() -> None:
    decoder = RequestFrameDecoder()
    assert len(drain(decoder, VOTE_FRAME * 3)) == 3
    decoder.feed_eof()


def test_decode_one_rejects_trailing_bytes_and_nothing() -> None:
    with pytest.raises(MalformedFrameError):
        decode_request(VOTE_FRAME + VOTE_FRAME[:2])
    with pytest.raises(MalformedFrameError):
        decode_request(VOTE_FRAME + VOTE_FRAME)
    with pytest.raises(MalformedFrameError):
        decode_request(b"")


def test_decoder_stays_broken_after_an_error() -> None:
    decoder = RequestFrameDecoder()
    with pytest.raises(MalformedFrameError):
        drain(decoder, framed(b"\xc1"))
    with pytest.raises(MalformedFrameError):
        decoder.feed(VOTE_FRAME)
    with pytest.raises(MalformedFrameError):
        decoder.next_frame()
    with pytest.raises(MalformedFrameError):
        decoder.feed_eof()


def test_msgspec_errors_are_chained_not_leaked() -> None:
    with pytest.raises(MalformedFrameError) as info:
        decode_request(framed(b"\xc1"))
    assert isinstance(info.value.__cause__, msgspec.DecodeError)


def test_unencodable_message_raises_a_typed_error() -> None:
    fetch = FetchRequest(
        replica_id=1,
        current_leader_epoch=1,
        fetch_offset=2**64,
        last_fetched_epoch=0,
        max_wait_ms=0,
    )
    with pytest.raises(MessageEncodeError):
        encode_request(RequestHeader.for_body(fetch, 1), fetch)
    weird = VoteResponse(leader_id=object())  # type: ignore[arg-type]
    with pytest.raises(MessageEncodeError):
        encode_response(ResponseHeader(1), weird)


def test_feed_accepts_any_bytes_like() -> None:
    decoder = RequestFrameDecoder()
    decoder.feed(bytearray(VOTE_FRAME[:10]))
    decoder.feed(memoryview(VOTE_FRAME)[10:])
    (frame,) = list(decoder)
    assert isinstance(frame, RequestFrame)
    assert frame.body == VOTE


def test_many_small_frames_in_one_chunk() -> None:
    decoder = ResponseFrameDecoder()
    frames = drain(decoder, FETCH_RESPONSE_FRAME * 500)
    assert len(frames) == 500
    assert all(isinstance(f, ResponseFrame) and f.body == FETCH_RESPONSE for f in frames)
    assert decoder.buffered_bytes == 0


# --- fuzz: nothing but the typed errors ---------------------------------------------------------

msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=30,
)


def feed_all(decoder: FrameDecoder[Any], chunks: list[bytes]) -> None:
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            for frame in decoder:
                assert isinstance(frame, RequestFrame | ResponseFrame)
        decoder.feed_eof()
    except FrameError as exc:
        assert isinstance(exc, FrameTooLargeError | MalformedFrameError)


@settings(max_examples=500)
@given(chunks=st.lists(st.binary(max_size=64), max_size=8))
def test_fuzz_arbitrary_bytes(chunks: list[bytes]) -> None:
    for decoder in decoders():
        feed_all(decoder, chunks)


@settings(max_examples=500)
@given(payloads=st.lists(st.binary(min_size=1, max_size=64), min_size=1, max_size=4))
def test_fuzz_well_framed_garbage(payloads: list[bytes]) -> None:
    for decoder in decoders():
        feed_all(decoder, [framed(p) for p in payloads])


@settings(max_examples=500)
@given(value=msgpack_values)
def test_fuzz_well_formed_msgpack_of_any_shape(value: Any) -> None:
    payload = msgspec.msgpack.encode(value)
    for decoder in decoders():
        feed_all(decoder, [framed(payload)])


@settings(max_examples=500)
@given(
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4),
    frame=st.sampled_from([VOTE_FRAME, FETCH_RESPONSE_FRAME]),
)
def test_fuzz_corrupted_valid_frames(flips: list[tuple[int, int]], frame: bytes) -> None:
    data = bytearray(frame)
    for position, mask in flips:
        data[position % len(data)] ^= mask
    for decoder in decoders():
        feed_all(decoder, [bytes(data)])
