"""The record serde of the metadata log (Kafka's ``MetadataRecordSerde``): the raft client of a
controller or a broker reads and writes :class:`~kraft.metadata.records.ApiMessageAndVersion`
values, each record value framed and encoded by ``kraft.metadata.codec``.
"""

from __future__ import annotations

from kraft.metadata.codec import decode_record, encode_record
from kraft.metadata.records import ApiMessageAndVersion

__all__ = ["MetadataRecordSerde"]


class MetadataRecordSerde:
    """A :class:`kraft.record.serde.RecordSerde` of metadata records.

    ``decode`` raises :class:`~kraft.errors.MetadataRecordError` (a ``CorruptRecordError``) for
    a value that is not a metadata record; ``encode`` raises ``ValueError`` or ``TypeError`` for
    a record that cannot be written at its version.
    """

    __slots__ = ()

    def encode(self, value: ApiMessageAndVersion) -> bytes:
        """The record value of ``value``."""
        return encode_record(value)

    def decode(self, data: bytes | memoryview) -> ApiMessageAndVersion:
        """The record in the record value ``data``."""
        return decode_record(data)

    def __repr__(self) -> str:
        return "MetadataRecordSerde()"
