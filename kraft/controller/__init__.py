"""Kafka's metadata controller on the Raft client (docs/controller.md): the control managers
that turn requests into metadata records, and the ``QuorumController`` that appends them at its
claimed epoch and completes each write when its offset commits.
"""

from kraft.controller.brokers_to_isrs import BrokersToIsrs, TopicIdPartition
from kraft.controller.cluster_control import BrokerRegistrationReply, ClusterControlManager
from kraft.controller.configs import (
    ConfigResource,
    ConfigResourceType,
    ConfigurationControlManager,
    OpType,
)
from kraft.controller.features import FeatureControlManager, UpgradeType
from kraft.controller.heartbeats import (
    BrokerControlState,
    BrokerControlStates,
    BrokerHeartbeatManager,
    UsableBroker,
)
from kraft.controller.partition_change import Election, PartitionChangeBuilder
from kraft.controller.placement import InvalidReplicationFactorError, StripedReplicaPlacer
from kraft.controller.producer_ids import ProducerIdControlManager, ProducerIdsBlock
from kraft.controller.replication import (
    BrokerHeartbeatReply,
    ReplicationControlManager,
    TopicControlInfo,
)
from kraft.controller.result import ApiError, ControllerApiError, ControllerResult

__all__ = [
    "ApiError",
    "BrokerControlState",
    "BrokerControlStates",
    "BrokerHeartbeatManager",
    "BrokerRegistrationReply",
    "ClusterControlManager",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigurationControlManager",
    "ControllerApiError",
    "ControllerResult",
    "FeatureControlManager",
    "OpType",
    "ProducerIdControlManager",
    "ProducerIdsBlock",
    "UpgradeType",
    "UsableBroker",
    "BrokerHeartbeatReply",
    "BrokersToIsrs",
    "Election",
    "InvalidReplicationFactorError",
    "PartitionChangeBuilder",
    "ReplicationControlManager",
    "StripedReplicaPlacer",
    "TopicControlInfo",
    "TopicIdPartition",
]
