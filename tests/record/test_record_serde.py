"""Record serdes (kraft.record.serde): round trips, and bad bytes become CorruptRecordError."""

from __future__ import annotations

from typing import Literal

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.common.limits import INT64_MAX, INT64_MIN
from kraft.errors import CorruptRecordError
from kraft.record import BytesSerde, MsgspecSerde, RecordSerde, StrSerde

Format = Literal["msgpack", "json"]


class Point(msgspec.Struct, frozen=True):
    x: int
    y: int
    label: str = ""
    tags: tuple[str, ...] = ()


points = st.builds(
    Point,
    st.integers(INT64_MIN, INT64_MAX),
    st.integers(INT64_MIN, INT64_MAX),
    st.text(max_size=10),
    st.lists(st.text(max_size=5), max_size=3).map(tuple),
)


def _accepts_serde(serde: RecordSerde[Point], value: Point) -> Point:
    """Typed use through the protocol: what the raft client does."""
    return serde.decode(serde.encode(value))


@given(st.binary(max_size=100))
def test_bytes_serde_is_identity(data: bytes) -> None:
    serde = BytesSerde()
    assert serde.encode(data) == data
    assert serde.decode(data) == data
    decoded = serde.decode(memoryview(data))
    assert type(decoded) is bytes
    assert decoded == data


@given(st.text(max_size=50))
def test_str_serde_round_trip(text: str) -> None:
    serde = StrSerde()
    assert serde.encode(text) == text.encode("utf-8")
    assert serde.decode(serde.encode(text)) == text
    assert serde.decode(memoryview(serde.encode(text))) == text


def test_str_serde_bad_utf8_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="utf-8") as info:
        StrSerde().decode(b"\xff\xfe")
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


@pytest.mark.parametrize("fmt", ["msgpack", "json"])
@given(value=points)
def test_msgspec_serde_round_trip(fmt: Format, value: Point) -> None:
    serde = MsgspecSerde(Point, format=fmt)
    raw = serde.encode(value)
    assert serde.decode(raw) == value
    assert serde.decode(memoryview(raw)) == value
    assert _accepts_serde(serde, value) == value


def test_msgspec_serde_default_is_msgpack() -> None:
    serde = MsgspecSerde(Point)
    assert serde.encode(Point(1, 2)) == msgspec.msgpack.encode(Point(1, 2))
    json_serde = MsgspecSerde(Point, format="json")
    assert json_serde.encode(Point(1, 2)) == b'{"x":1,"y":2,"label":"","tags":[]}'
    assert repr(serde) == "MsgspecSerde(Point, format='msgpack')"


def test_msgspec_serde_of_a_generic_type() -> None:
    serde: MsgspecSerde[list[int]] = MsgspecSerde(list[int])
    assert serde.decode(serde.encode([1, 2, 3])) == [1, 2, 3]


@pytest.mark.parametrize(
    ("fmt", "data", "cause"),
    [
        ("msgpack", b"\xc1", msgspec.DecodeError),  # 0xc1 is never used in msgpack
        ("msgpack", b"", msgspec.DecodeError),  # truncated
        ("msgpack", msgspec.msgpack.encode({"x": "no", "y": 1}), msgspec.ValidationError),
        ("msgpack", msgspec.msgpack.encode({"y": 1}), msgspec.ValidationError),  # x missing
        ("msgpack", msgspec.msgpack.encode(Point(1, 2)) + b"\x00", msgspec.DecodeError),
        ("json", b"{", msgspec.DecodeError),
        ("json", b'{"x": 1.5, "y": 1}', msgspec.ValidationError),
        ("json", b"[1, 2]", msgspec.ValidationError),
    ],
)
def test_msgspec_serde_errors_become_corrupt_record(
    fmt: Format, data: bytes, cause: type[Exception]
) -> None:
    serde = MsgspecSerde(Point, format=fmt)
    with pytest.raises(CorruptRecordError, match="Point") as info:
        serde.decode(data)
    assert type(info.value.__cause__) is cause


def test_msgspec_serde_rejects_an_unknown_format() -> None:
    with pytest.raises(ValueError, match="yaml"):
        MsgspecSerde(Point, format="yaml")  # type: ignore[arg-type]


def test_serdes_satisfy_the_protocol() -> None:
    serdes: list[RecordSerde[bytes] | RecordSerde[str] | RecordSerde[Point]] = [
        BytesSerde(),
        StrSerde(),
        MsgspecSerde(Point),
    ]
    for serde in serdes:
        assert callable(serde.encode)
        assert callable(serde.decode)
