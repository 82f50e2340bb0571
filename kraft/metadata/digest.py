"""A digest of a :class:`~kraft.metadata.image.MetadataImage`'s content, to tell whether two
images hold the same metadata without keeping them (the simulator's ``image_agreement``
invariant, docs/simulation.md).

The digest is a SHA-256 over the image's canonical records: every record of
:meth:`MetadataImage.records` encoded by ``kraft.metadata.codec`` (Kafka's bytes), sorted, each
framed by its length. Sorting makes it independent of the order the image's maps happen to hold
(an image replayed from the log and one loaded from a snapshot may order their maps
differently); the length frames keep two sequences of records from hashing alike by their
concatenation. The provenance (offset, epoch, append time) is not content: it is not hashed,
and callers compare digests of images at the same offset.
"""

from __future__ import annotations

import hashlib

from kraft.metadata.codec import encode_record
from kraft.metadata.image import MetadataImage

__all__ = ["image_digest"]


def image_digest(image: MetadataImage) -> str:
    """The hex SHA-256 of ``image``'s canonical records (module docstring): equal for two
    images with the same content however they were built."""
    digest = hashlib.sha256()
    for encoded in sorted(encode_record(record) for record in image.records()):
        digest.update(len(encoded).to_bytes(4, "big"))
        digest.update(encoded)
    return digest.hexdigest()
