"""Kafka's cluster metadata: the records of ``__cluster_metadata`` (``ApiMessageAndVersion``
framing, Kafka's flexible-version encoding), timeline collections that can be read as of an
offset and reverted, and the immutable ``MetadataImage`` built from ``MetadataDelta``s
(docs/controller.md). Sans-IO, like the Raft core below it.
"""

from kraft.metadata.codec import decode_record, encode_record
from kraft.metadata.delta import MetadataDelta
from kraft.metadata.image import (
    BrokerRegistration,
    FeaturesImage,
    MetadataImage,
    MetadataProvenance,
    MetadataReplayError,
    PartitionRegistration,
    ProducerIdsImage,
    TopicImage,
)
from kraft.metadata.loader import MetadataBatchLoader, MetadataLoader, Publisher
from kraft.metadata.records import (
    METADATA_VERSION,
    METADATA_VERSION_NAME,
    ApiMessageAndVersion,
    MetadataRecord,
    MetadataRecordType,
    at_latest_version,
    record_version,
)
from kraft.metadata.serde import MetadataRecordSerde
from kraft.metadata.timeline import (
    LATEST,
    MissingSnapshotError,
    SnapshotRegistry,
    TimelineHashMap,
    TimelineHashSet,
    TimelineInteger,
    TimelineObject,
)

__all__ = [
    "LATEST",
    "MissingSnapshotError",
    "SnapshotRegistry",
    "TimelineHashMap",
    "TimelineHashSet",
    "TimelineInteger",
    "TimelineObject",
    "METADATA_VERSION",
    "METADATA_VERSION_NAME",
    "ApiMessageAndVersion",
    "BrokerRegistration",
    "FeaturesImage",
    "MetadataDelta",
    "MetadataBatchLoader",
    "MetadataImage",
    "MetadataLoader",
    "MetadataProvenance",
    "MetadataReplayError",
    "PartitionRegistration",
    "ProducerIdsImage",
    "Publisher",
    "TopicImage",
    "MetadataRecord",
    "MetadataRecordSerde",
    "MetadataRecordType",
    "at_latest_version",
    "decode_record",
    "encode_record",
    "record_version",
]
