"""The metadata a controller holds, as of an offset, in a shape a
:class:`~kraft.metadata.image.MetadataImage` has too: so that the state a controller reads at
``LATEST`` can be compared with its state at its last committed offset, or with the image a
reader built from the same committed records (Kafka's controller tests compare the managers'
state after a revert the same way).

Only the metadata the managers replay from records is here (features, brokers, topics and their
partitions, configs, the next producer id): what the active controller keeps outside the
timeline (broker sessions, deferred writes) is not state a revert restores.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import msgspec

from kraft.controller.configs import ConfigResource
from kraft.metadata.image import METADATA_VERSION_FEATURE, BrokerRegistration, PartitionRegistration
from kraft.metadata.timeline import LATEST

if TYPE_CHECKING:
    from kraft.controller.quorum_controller import QuorumController
    from kraft.metadata.image import MetadataImage

__all__ = ["MetadataState"]

#: A topic: its id (None for a name whose topic is missing) and its partitions by index.
TopicState = tuple[uuid.UUID | None, dict[int, PartitionRegistration]]


class MetadataState(msgspec.Struct, frozen=True, kw_only=True):
    """Features (``finalized`` without ``metadata.version``), brokers by id, topics by name,
    configs by (resource type, name), and the next producer id (0 before the first block, as
    the controller counts)."""

    metadata_version: int
    finalized: dict[str, int]
    brokers: dict[int, BrokerRegistration]
    topics: dict[str, TopicState]
    configs: dict[tuple[int, str], dict[str, str]]
    next_producer_id: int

    @classmethod
    def of_controller(cls, controller: QuorumController, offset: int = LATEST) -> MetadataState:
        """``controller``'s state as of ``offset`` (an in-memory snapshot's, or ``LATEST``)."""
        finalized = controller.features.finalized(offset)
        finalized.pop(METADATA_VERSION_FEATURE, None)
        replication = controller.replication
        topics: dict[str, TopicState] = {}
        for name in replication.topic_names(offset):
            topic = replication.topic(name, offset)
            if topic is None:
                # The name map and the topic map disagree: no image holds such a topic.
                topics[name] = (None, {})
                continue
            partitions = {}
            for index in range(topic.num_partitions):
                partition = replication.partition(topic.topic_id, index, offset)
                if partition is not None:
                    partitions[index] = partition
            topics[name] = (topic.topic_id, partitions)
        configs = controller.configs
        return cls(
            metadata_version=controller.features.metadata_version(offset),
            finalized=finalized,
            brokers={b.id: b for b in controller.cluster_control.registrations(offset)},
            topics=topics,
            configs={
                (resource.type, resource.name): config
                for resource in configs.resources(offset)
                if (config := configs.config(ConfigResource(*resource), offset))
            },
            next_producer_id=controller.producer_ids.next_producer_id(offset),
        )

    @classmethod
    def of_image(cls, image: MetadataImage) -> MetadataState:
        """The same metadata, as ``image`` holds it."""
        return cls(
            metadata_version=image.features.metadata_version,
            finalized={
                name: level
                for name, level in image.features.finalized.items()
                if name != METADATA_VERSION_FEATURE
            },
            brokers=dict(image.brokers),
            topics={
                name: (topic.id, dict(topic.partitions)) for name, topic in image.topics.items()
            },
            configs={key: dict(config) for key, config in image.configs.items() if config},
            next_producer_id=max(image.producer_ids.next_producer_id, 0),
        )

    def differences(self, other: MetadataState, limit: int = 3) -> list[str]:
        """Where ``other`` differs from this state: at most ``limit`` entries per part, each
        ``part key: this != other`` (for a violation's message)."""
        found = []
        for part in self.__struct_fields__:
            mine, theirs = getattr(self, part), getattr(other, part)
            if mine == theirs:
                continue
            if not isinstance(mine, dict):
                found.append(f"{part}: {mine!r} != {theirs!r}")
                continue
            keys = sorted(set(mine) | set(theirs), key=repr)
            differing = [key for key in keys if mine.get(key) != theirs.get(key)]
            found.extend(
                f"{part} {key!r}: {mine.get(key)!r} != {theirs.get(key)!r}"
                for key in differing[:limit]
            )
        return found
