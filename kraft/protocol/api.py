"""API keys, versions and the identity of KRaft's one topic-partition.

Every number here was checked against Kafka's sources (see docs/protocol-wire.md):

- API keys: the ``"apiKey"`` of ``clients/src/main/resources/common/message/*Request.json``, which
  generate ``ApiMessageType`` and so ``clients/.../common/protocol/ApiKeys.java``.
- Versions: the top of each message's ``"validVersions"`` range. Vote v2 (KIP-996 pre-vote: the
  ``PreVote`` flag, "candidate" fields renamed to "replica") and Fetch v18 (KIP-1166: the
  follower's high watermark) postdate the stored Kafka snapshot (Oct 2024, Vote 0-1, Fetch 0-17);
  they were checked against the JSON shipped by later Kafka releases (as vendored by the
  ``kafka-protocol`` and ``kafka_client`` crates and by franz-go's validated definitions).
- ``__cluster_metadata``-0 and its topic id: ``common/internals/Topic.java``
  (``CLUSTER_METADATA_TOPIC_NAME``) and ``common/Uuid.java`` (``METADATA_TOPIC_ID = ONE_UUID``,
  ``new Uuid(0L, 1L)``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from kraft.common.uuids import ONE_UUID

__all__ = [
    "ADD_RAFT_VOTER_VERSION",
    "API_VERSIONS_VERSION",
    "KRAFT_FORWARD_APPEND_VERSION",
    "KRAFT_READ_INDEX_VERSION",
    "KRAFT_VERSION_FEATURE",
    "REMOVE_RAFT_VOTER_VERSION",
    "SUPPORTED_KRAFT_VERSIONS",
    "UPDATE_FEATURES_VERSION",
    "UPDATE_RAFT_VOTER_VERSION",
    "MAX_VERSIONS",
    "METADATA_PARTITION_INDEX",
    "METADATA_TOPIC_ID",
    "METADATA_TOPIC_NAME",
    "ApiKey",
    "BEGIN_QUORUM_EPOCH_VERSION",
    "DESCRIBE_QUORUM_VERSION",
    "END_QUORUM_EPOCH_VERSION",
    "FETCH_SNAPSHOT_VERSION",
    "FETCH_VERSION",
    "VOTE_VERSION",
]


class ApiKey(enum.IntEnum):
    """Kafka's API keys (``ApiKeys.java``) for the RPCs a KRaft quorum speaks.

    The value is also the msgspec tag of the message on kraft's wire (docs/protocol-wire.md).
    """

    FETCH = 1
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DESCRIBE_CONFIGS = 32
    CREATE_PARTITIONS = 37
    INCREMENTAL_ALTER_CONFIGS = 44
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    UPDATE_FEATURES = 57
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    ALLOCATE_PRODUCER_IDS = 67
    DESCRIBE_TOPIC_PARTITIONS = 75
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    # kraft's own RPCs, far above Kafka's keys (docs/protocol-wire.md, "kraft's RPCs").
    KRAFT_FORWARD_APPEND = 30000
    KRAFT_READ_INDEX = 30001


#: Vote: v1 adds voter keys and directory ids (KIP-853); v2 adds ``PreVote`` (KIP-996).
VOTE_VERSION = 2
#: BeginQuorumEpoch: v1 adds the voter key and leader endpoints (KIP-853).
BEGIN_QUORUM_EPOCH_VERSION = 1
#: EndQuorumEpoch: v1 replaces PreferredSuccessors with PreferredCandidates (KIP-853).
END_QUORUM_EPOCH_VERSION = 1
#: Fetch: v17 adds ReplicaDirectoryId (KIP-853); v18 the follower's high watermark (KIP-1166).
FETCH_VERSION = 18
#: FetchSnapshot: v1 adds ReplicaDirectoryId and leader endpoints (KIP-853).
FETCH_SNAPSHOT_VERSION = 1
#: DescribeQuorum: v1 adds fetch timestamps (KIP-836); v2 directory ids and nodes (KIP-853).
DESCRIBE_QUORUM_VERSION = 2

#: ApiVersions: v4 is the version Kafka 4.0 clients send (KIP-511 fields).
API_VERSIONS_VERSION = 4
#: AddRaftVoter: v1 adds ``AckWhenCommitted`` (KIP-1186).
ADD_RAFT_VOTER_VERSION = 1
#: UpdateFeatures: v1 (KIP-584; v2 only changes the response's ``Results`` handling).
UPDATE_FEATURES_VERSION = 1
#: RemoveRaftVoter and UpdateRaftVoter: v0 (KIP-853).
REMOVE_RAFT_VOTER_VERSION = 0
UPDATE_RAFT_VOTER_VERSION = 0
#: kraft's ForwardAppend and ReadIndex: v0.
KRAFT_FORWARD_APPEND_VERSION = 0
KRAFT_READ_INDEX_VERSION = 0

#: The ``kraft.version`` feature levels this kraft supports: 0 (static voters from the
#: configuration) and 1 (voters in the log, KIP-853).
KRAFT_VERSION_FEATURE = "kraft.version"
SUPPORTED_KRAFT_VERSIONS = (0, 1)

#: The highest version kraft speaks of each API that has kraft messages.
MAX_VERSIONS: Mapping[ApiKey, int] = MappingProxyType(
    {
        ApiKey.FETCH: FETCH_VERSION,
        ApiKey.VOTE: VOTE_VERSION,
        ApiKey.BEGIN_QUORUM_EPOCH: BEGIN_QUORUM_EPOCH_VERSION,
        ApiKey.END_QUORUM_EPOCH: END_QUORUM_EPOCH_VERSION,
        ApiKey.DESCRIBE_QUORUM: DESCRIBE_QUORUM_VERSION,
        ApiKey.FETCH_SNAPSHOT: FETCH_SNAPSHOT_VERSION,
        ApiKey.API_VERSIONS: API_VERSIONS_VERSION,
        ApiKey.ADD_RAFT_VOTER: ADD_RAFT_VOTER_VERSION,
        ApiKey.REMOVE_RAFT_VOTER: REMOVE_RAFT_VOTER_VERSION,
        ApiKey.UPDATE_RAFT_VOTER: UPDATE_RAFT_VOTER_VERSION,
        ApiKey.UPDATE_FEATURES: UPDATE_FEATURES_VERSION,
        ApiKey.KRAFT_FORWARD_APPEND: KRAFT_FORWARD_APPEND_VERSION,
        ApiKey.KRAFT_READ_INDEX: KRAFT_READ_INDEX_VERSION,
    }
)

#: KRaft replicates one topic-partition: ``__cluster_metadata``-0 (Kafka's ``Topic.java``).
METADATA_TOPIC_NAME = "__cluster_metadata"
METADATA_PARTITION_INDEX = 0
#: Kafka's ``Uuid.METADATA_TOPIC_ID``, which is ``Uuid.ONE_UUID``.
METADATA_TOPIC_ID = ONE_UUID
