"""Where a new partition's replicas go (Kafka's part of ``ReplicationControlManager`` that checks
a manual assignment or asks the ``ReplicaPlacer``): each assignment is the partition's replicas
and its first ISR, the replicas that are active (registered, unfenced, not in controlled
shutdown). A refusal raises :class:`~kraft.controller.result.ControllerApiError` with Kafka's
code and message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from kraft.controller.cluster_control import ClusterControlManager
from kraft.controller.placement import InvalidReplicationFactorError, StripedReplicaPlacer
from kraft.controller.result import ControllerApiError
from kraft.protocol.controller_messages import CreatableTopic
from kraft.protocol.errors import Errors

__all__ = ["Assignment", "ReplicaAssigner"]

#: A new partition's replicas and its first ISR.
Assignment = tuple[tuple[int, ...], tuple[int, ...]]


class ReplicaAssigner:
    """Assignments for a topic creation (:meth:`manual` or :meth:`placed`) and for new
    partitions (:meth:`place`, :meth:`validate_manual`). ``default_num_partitions`` and
    ``default_replication_factor`` are what a creation asking for -1 gets."""

    def __init__(
        self,
        cluster: ClusterControlManager,
        placer: StripedReplicaPlacer,
        *,
        default_num_partitions: int,
        default_replication_factor: int,
    ) -> None:
        self._cluster = cluster
        self._placer = placer
        self._default_num_partitions = default_num_partitions
        self._default_replication_factor = default_replication_factor

    def manual(self, topic: CreatableTopic) -> list[Assignment]:
        if topic.replication_factor != -1:
            _fail(
                Errors.INVALID_REQUEST,
                "A manual partition assignment was specified, but replication factor was not "
                "set to -1.",
            )
        if topic.num_partitions != -1:
            _fail(
                Errors.INVALID_REQUEST,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            )
        by_index: dict[int, Assignment] = {}
        replication_factor: int | None = None
        for assignment in topic.assignments:
            if assignment.partition_index in by_index:
                _fail(
                    Errors.INVALID_REPLICA_ASSIGNMENT,
                    "Found multiple manual partition assignments for partition "
                    f"{assignment.partition_index}",
                )
            replicas = tuple(assignment.broker_ids)
            self.validate_manual(replicas, replication_factor)
            replication_factor = len(replicas)
            isr = tuple(broker for broker in replicas if self._cluster.is_active(broker))
            if not isr:
                _fail(
                    Errors.INVALID_REPLICA_ASSIGNMENT,
                    "All brokers specified in the manual partition assignment for partition "
                    f"{assignment.partition_index} are fenced or in controlled shutdown.",
                )
            by_index[assignment.partition_index] = (replicas, isr)
        if sorted(by_index) != list(range(len(by_index))):
            _fail(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                "partitions should be a consecutive 0-based integer sequence",
            )
        return [by_index[index] for index in range(len(by_index))]

    def placed(self, topic: CreatableTopic) -> list[Assignment]:
        if topic.replication_factor < -1 or topic.replication_factor == 0:
            _fail(
                Errors.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        if topic.num_partitions < -1 or topic.num_partitions == 0:
            _fail(
                Errors.INVALID_PARTITIONS,
                "Number of partitions was set to an invalid non-positive value.",
            )
        num_partitions = (
            self._default_num_partitions if topic.num_partitions == -1 else topic.num_partitions
        )
        replication_factor = (
            self._default_replication_factor
            if topic.replication_factor == -1
            else topic.replication_factor
        )
        return self.place(num_partitions, replication_factor)

    def place(self, num_partitions: int, replication_factor: int) -> list[Assignment]:
        try:
            placements = self._placer.place(
                num_partitions, replication_factor, self._cluster.usable_brokers()
            )
        except InvalidReplicationFactorError as exc:
            _fail(
                Errors.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): {exc}",
            )
        assignments = []
        for placed in placements:
            replicas = tuple(placed)
            isr = tuple(broker for broker in replicas if self._cluster.is_active(broker))
            if not isr:
                # The placer counts fenced brokers as usable; with every replica fenced or
                # shutting down there would be no leader (Kafka refuses this case the same way).
                _fail(
                    Errors.INVALID_REPLICATION_FACTOR,
                    f"Unable to replicate the partition {replication_factor} time(s): All "
                    "brokers are currently fenced or in controlled shutdown.",
                )
            assignments.append((replicas, isr))
        return assignments

    def validate_manual(self, replicas: Sequence[int], replication_factor: int | None) -> None:
        if not replicas:
            _fail(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.",
            )
        seen: set[int] = set()
        for broker in sorted(replicas):
            if self._cluster.registration(broker) is None:
                _fail(
                    Errors.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {broker}, but no such "
                    "broker is registered.",
                )
            if broker in seen:
                _fail(
                    Errors.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes the broker {broker} more than once.",
                )
            seen.add(broker)
        if replication_factor is not None and len(replicas) != replication_factor:
            _fail(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes a partition with {len(replicas)} "
                "replica(s), but this is not consistent with previous partitions, which have "
                f"{replication_factor} replica(s).",
            )


def _fail(error: Errors, message: str) -> NoReturn:
    raise ControllerApiError(error, message)
