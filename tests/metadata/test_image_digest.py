"""image_digest: equal content gives equal digests however the image was built (replayed delta
by delta, in one delta, loaded from a snapshot's records), different content different ones."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from test_image import histories, image_of, partition, register, replayed

from kraft.metadata.delta import MetadataDelta
from kraft.metadata.digest import image_digest
from kraft.metadata.image import MetadataImage, MetadataProvenance
from kraft.metadata.records import MetadataRecord, PartitionChangeRecord, TopicRecord

T1 = uuid.UUID(int=0x11)
T2 = uuid.UUID(int=0x22)


def snapshot_loaded(image: MetadataImage) -> MetadataImage:
    """``image`` as a reader loading a snapshot of it sees it (kraft.metadata.loader)."""
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in image.records():
        delta.replay(record.message)
    return delta.apply(image.provenance)


@settings(max_examples=100, deadline=None)
@given(histories())
def test_a_replayed_image_and_its_snapshot_have_the_same_digest(deltas) -> None:
    image = replayed(deltas)
    assert image_digest(snapshot_loaded(image)) == image_digest(image)
    one = image_of([record for records in deltas for record in records], at=image.provenance)
    assert image_digest(one) == image_digest(image)


def test_the_order_the_maps_hold_does_not_matter() -> None:
    a: list[MetadataRecord] = [TopicRecord(name="a", topic_id=T1), partition(T1)]
    b: list[MetadataRecord] = [TopicRecord(name="b", topic_id=T2), partition(T2)]
    first = image_of([register(1), register(2), *a, *b])
    second = image_of([register(2), register(1), *b, *a])
    assert list(first.topics) != list(second.topics)
    assert image_digest(first) == image_digest(second)


def test_the_provenance_is_not_content() -> None:
    image = image_of([register(1)])
    assert image_digest(image) == image_digest(
        image.with_provenance(MetadataProvenance(99, 7, 123))
    )


def test_any_change_of_content_changes_the_digest() -> None:
    base = image_of([register(1), TopicRecord(name="a", topic_id=T1), partition(T1)])
    moved = image_of([PartitionChangeRecord(topic_id=T1, partition_id=0, leader=2)], base)
    reregistered = image_of([register(1, epoch=6)], base)
    digests = {image_digest(image) for image in (base, moved, reregistered, MetadataImage.EMPTY)}
    assert len(digests) == 4
