"""Blocks of producer ids for the brokers (Kafka's ``ProducerIdControlManager``).

A broker asks for a block when its transaction coordinator runs out; the controller hands out
the next :data:`PRODUCER_ID_BLOCK_SIZE` ids and records where the following block starts
(``ProducerIdsRecord.next_producer_id``), so that no two blocks ever overlap, across
controller failovers too: the next producer id only ever grows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kraft.common.limits import INT64_MAX
from kraft.controller.cluster_control import ClusterControlManager
from kraft.controller.result import ControllerApiError, ControllerResult
from kraft.metadata.image import MetadataReplayError
from kraft.metadata.records import ProducerIdsRecord, at_latest_version
from kraft.metadata.timeline import LATEST, SnapshotRegistry, TimelineInteger
from kraft.protocol.errors import Errors

__all__ = ["PRODUCER_ID_BLOCK_SIZE", "ProducerIdControlManager", "ProducerIdsBlock"]

#: Kafka's ``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``.
PRODUCER_ID_BLOCK_SIZE: Final = 1000


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """The ids ``first_producer_id`` to ``last_producer_id``, inclusive, for one broker
    (Kafka's ``ProducerIdsBlock``)."""

    assigned_broker_id: int
    first_producer_id: int
    size: int = PRODUCER_ID_BLOCK_SIZE

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


class ProducerIdControlManager:
    """The next producer id to hand out, in the timeline."""

    def __init__(self, registry: SnapshotRegistry, cluster_control: ClusterControlManager) -> None:
        self._cluster = cluster_control
        self._next_producer_id = TimelineInteger(registry)

    def next_producer_id(self, offset: int = LATEST) -> int:
        return self._next_producer_id.get(offset)

    def generate_next_producer_id(
        self, broker_id: int, broker_epoch: int
    ) -> ControllerResult[ProducerIdsBlock]:
        """The next block for ``broker_id``, which must be registered at ``broker_epoch``
        (STALE_BROKER_EPOCH otherwise); UNKNOWN_SERVER_ERROR once the ids run out."""
        self._cluster.check_broker_epoch(broker_id, broker_epoch)
        first = self._next_producer_id.get()
        if first > INT64_MAX - PRODUCER_ID_BLOCK_SIZE:
            raise ControllerApiError(
                Errors.UNKNOWN_SERVER_ERROR,
                "Exhausted all producerIds as the next block's end producerId has exceeded "
                "the int64 type limit",
            )
        block = ProducerIdsBlock(broker_id, first)
        record = ProducerIdsRecord(
            broker_id=broker_id,
            broker_epoch=broker_epoch,
            next_producer_id=block.next_block_first_id,
        )
        return ControllerResult([at_latest_version(record)], block)

    def replay(self, record: ProducerIdsRecord, offset: int) -> None:
        """The next block starts at ``record.next_producer_id``, which must be above the
        current one (blocks never overlap)."""
        current = self._next_producer_id.get()
        if record.next_producer_id <= current:
            raise MetadataReplayError(
                f"ProducerIdsRecord at offset {offset}: next producer id "
                f"{record.next_producer_id} is not above the current {current}"
            )
        self._next_producer_id.set(record.next_producer_id)
