"""Record serdes: how the values a user appends become record values and back.

The raft client stores opaque record values; a :class:`RecordSerde` turns them into the user's
type ``T`` (Kafka's ``RecordSerde<T>``). A value that cannot be decoded is a
:class:`~kraft.errors.CorruptRecordError`, whatever library the serde uses underneath.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Literal, Protocol, TypeVar

import msgspec

from kraft.errors import CorruptRecordError

__all__ = ["BytesSerde", "MsgspecSerde", "RecordSerde", "StrSerde"]

T = TypeVar("T")


class RecordSerde(Protocol[T]):
    """Encodes a ``T`` to a record value and decodes it back.

    ``decode`` raises :class:`~kraft.errors.CorruptRecordError` for bytes it cannot read;
    ``encode`` raises ``TypeError`` or ``ValueError`` for a value it cannot write.
    """

    def encode(self, value: T) -> bytes:
        """The record value for ``value``."""

    def decode(self, data: bytes | memoryview) -> T:
        """The ``T`` held in the record value ``data``."""


class BytesSerde:
    """The identity serde: record values are the user's bytes."""

    __slots__ = ()

    def encode(self, value: bytes) -> bytes:
        """``value`` itself (copied if it is not ``bytes``)."""
        return value if type(value) is bytes else bytes(value)

    def decode(self, data: bytes | memoryview) -> bytes:
        """``data`` as ``bytes``."""
        return data if type(data) is bytes else bytes(data)


class StrSerde:
    """Record values are UTF-8 text."""

    __slots__ = ()

    def encode(self, value: str) -> bytes:
        """``value`` encoded as UTF-8."""
        return value.encode("utf-8")

    def decode(self, data: bytes | memoryview) -> str:
        """``data`` decoded as UTF-8; anything else is corrupt."""
        try:
            return str(data, "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"record value is not utf-8: {exc.reason}") from exc


class MsgspecSerde(Generic[T]):
    """Record values are ``type`` encoded with msgspec: MessagePack, or JSON on request.

    ``MsgspecSerde(SomeStruct)`` builds one encoder and one typed decoder, once; decoding
    validates the value against ``type``, and a value that is not a valid ``type`` is a
    :class:`~kraft.errors.CorruptRecordError`.
    """

    __slots__ = ("_decode", "_encode", "format", "type")

    def __init__(self, type: type[T], *, format: Literal["msgpack", "json"] = "msgpack") -> None:
        self.type = type
        self.format = format
        decode: Callable[[bytes | memoryview], T]
        if format == "msgpack":
            self._encode: Callable[[Any], bytes] = msgspec.msgpack.Encoder().encode
            decode = msgspec.msgpack.Decoder(type).decode
        elif format == "json":
            self._encode = msgspec.json.Encoder().encode
            decode = msgspec.json.Decoder(type).decode
        else:
            raise ValueError(f"unknown format {format!r}: expected 'msgpack' or 'json'")
        self._decode = decode

    def encode(self, value: T) -> bytes:
        """``value`` as MessagePack (or JSON) bytes."""
        return self._encode(value)

    def decode(self, data: bytes | memoryview) -> T:
        """The ``type`` in ``data``; undecodable or invalid data is corrupt."""
        try:
            return self._decode(data)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            raise CorruptRecordError(f"record value is not a valid {self._name}: {exc}") from exc

    @property
    def _name(self) -> str:
        return getattr(self.type, "__name__", repr(self.type))

    def __repr__(self) -> str:
        return f"MsgspecSerde({self._name}, format={self.format!r})"
