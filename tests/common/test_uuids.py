"""Kafka's ``Uuid`` text form: base64url without padding, one spelling per id."""

from __future__ import annotations

import base64
import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.common.uuids import ONE_UUID, ZERO_UUID, uuid_from_text, uuid_to_text

DIR_ID = "J8aAPcfLQt2bqs1JT_rMgQ"
UUID_TEXT = re.compile(r"[A-Za-z0-9_-]{22}")


def test_reserved_uuids_are_kafkas() -> None:
    assert uuid_to_text(ZERO_UUID) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert uuid_to_text(ONE_UUID) == "AAAAAAAAAAAAAAAAAAAAAQ"


@given(st.binary(min_size=16, max_size=16))
def test_uuid_text_round_trip(raw: bytes) -> None:
    text = uuid_to_text(uuid.UUID(bytes=raw))
    assert len(text) == 22 and UUID_TEXT.fullmatch(text)
    assert uuid_from_text(text).bytes == raw
    assert text == base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "abc",
        DIR_ID + "A",
        DIR_ID + "==",
        DIR_ID[:-1],
        "J8aAPcfLQt2bqs1JT/rMgQ",
        "J8aAPcfLQt2bqs1JT+rMgQ",
        "AAAAAAAAAAAAAAAAAAAAAB",
        " J8aAPcfLQt2bqs1JT_rMg",
    ],
)
def test_uuid_from_text_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        uuid_from_text(bad)
