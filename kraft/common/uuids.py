"""Kafka's ``Uuid``: the reserved values and the text form.

On the wire and in records a Kafka ``Uuid`` is 16 bytes, a :class:`uuid.UUID` here. In text
(``meta.properties``, the ``quorum-state`` file, metrics, the CLI) it is Kafka's
``Uuid.toString``: the 16 bytes in URL-safe base64 without padding, 22 characters.
Kafka's ``Uuid.ZERO_UUID`` (all zero bits) means "none": a replica without a directory id, a
vote without a candidate directory.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from typing import Final

__all__ = ["ONE_UUID", "ZERO_UUID", "uuid_from_text", "uuid_to_text"]

#: Kafka's ``Uuid.ZERO_UUID``: "no id" (no directory id, no voted directory, no topic id).
ZERO_UUID: Final = uuid.UUID(int=0)
#: Kafka's ``Uuid.ONE_UUID``: the metadata topic's id, never generated.
ONE_UUID: Final = uuid.UUID(int=1)

_TEXT = re.compile(r"[A-Za-z0-9_-]{22}")


def uuid_to_text(value: uuid.UUID) -> str:
    """Kafka's text form of ``value`` (``Uuid.toString``): URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def uuid_from_text(text: str) -> uuid.UUID:
    """The ``Uuid`` whose text form is ``text``; ``ValueError`` (saying why) if it is not one.

    Stricter than Kafka's ``Uuid.fromString`` in one way: only the canonical 22-character
    form is accepted (no ``==`` padding, no stray bits in the last character), so that every
    id has exactly one spelling and compares equal as text.
    """
    if not isinstance(text, str) or not _TEXT.fullmatch(text):
        raise ValueError(
            f"{text!r} is not a Kafka Uuid (22 characters of URL-safe base64 without padding)"
        )
    try:
        value = uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    except (binascii.Error, ValueError) as exc:  # pragma: no cover - the regex rules this out
        raise ValueError(f"{text!r} is not a Kafka Uuid: {exc}") from exc
    if uuid_to_text(value) != text:
        raise ValueError(f"{text!r} is not a Kafka Uuid in canonical form")
    return value
