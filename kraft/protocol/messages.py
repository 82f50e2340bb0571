"""The KRaft RPCs as frozen msgspec Structs: one class per request and per response.

Shape
    Each message is Kafka's message for that API (``clients/src/main/resources/common/message/
    <Name>{Request,Response}.json``) with the ``Topics[Partitions[]]`` nesting flattened: KRaft
    replicates one partition, ``__cluster_metadata``-0, so a message holds exactly one partition.
    The ``topic_name`` and ``partition_index`` fields stay (and Fetch's ``topic_id``) so that the
    receiver can still answer a wrong topic-partition with INVALID_REQUEST, as
    ``KafkaRaftClient`` does. Where Kafka has an error code both at the top level and in the
    partition, the flat message has ``error_code`` (top level) and ``partition_error_code``.

Wire
    ``array_like=True``: a message is a msgpack array, ``[api_key, field1, field2, ...]`` in field
    order, the first element being the msgspec tag, which is Kafka's API key. Requests and
    responses of one API share the key, so they form two unions, :data:`Request` and
    :data:`Response`, each decoded by its own typed decoder (:mod:`kraft.protocol.frame`).

Evolution
    Fields are only ever appended, each with a default (STYLE habit 3). An older peer ignores
    the fields it does not know (msgspec drops trailing array items of an ``array_like``
    struct); a newer peer fills the fields an older one did not send with their defaults. This
    plays the part of Kafka's ignorable and tagged fields. Requests keep their first few fields
    (the ones a sender must think about) without defaults; every response field has one, so
    that an error response is just ``VoteResponse(error_code=...)``.

Directory ids are ``uuid.UUID``; :data:`~kraft.common.uuids.ZERO_UUID` means "none". Error
codes are plain ``int`` on the wire (an :class:`~kraft.protocol.errors.Errors` member is one), so
that a code kraft does not know still decodes. Record bytes (``records``, ``unaligned_records``)
are raw Kafka v2 batch bytes, carried untouched.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar, Protocol, TypeAlias

import msgspec

from kraft.common.limits import INT32_MAX, INT64_MAX
from kraft.common.uuids import ZERO_UUID
from kraft.protocol.api import (
    ADD_RAFT_VOTER_VERSION,
    API_VERSIONS_VERSION,
    BEGIN_QUORUM_EPOCH_VERSION,
    DESCRIBE_QUORUM_VERSION,
    END_QUORUM_EPOCH_VERSION,
    FETCH_SNAPSHOT_VERSION,
    FETCH_VERSION,
    KRAFT_FORWARD_APPEND_VERSION,
    KRAFT_READ_INDEX_VERSION,
    METADATA_PARTITION_INDEX,
    METADATA_TOPIC_ID,
    METADATA_TOPIC_NAME,
    REMOVE_RAFT_VOTER_VERSION,
    UPDATE_FEATURES_VERSION,
    UPDATE_RAFT_VOTER_VERSION,
    VOTE_VERSION,
    ApiKey,
)

__all__ = [
    "AddRaftVoterRequest",
    "AddRaftVoterResponse",
    "ApiVersion",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "RemoveRaftVoterRequest",
    "RemoveRaftVoterResponse",
    "SupportedFeature",
    "FinalizedFeatureKey",
    "FeatureUpdate",
    "ForwardAppendRequest",
    "ForwardAppendResponse",
    "ReadIndexRequest",
    "ReadIndexResponse",
    "FeatureUpdateResult",
    "UpdateFeaturesRequest",
    "UpdateFeaturesResponse",
    "UpdateRaftVoterRequest",
    "UpdateRaftVoterResponse",
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "RESPONSE_TYPE_FOR",
    "BeginQuorumEpochRequest",
    "BeginQuorumEpochResponse",
    "DescribeQuorumNode",
    "DescribeQuorumRequest",
    "DescribeQuorumResponse",
    "Endpoint",
    "EndQuorumEpochRequest",
    "EndQuorumEpochResponse",
    "EpochEndOffset",
    "FetchRequest",
    "FetchResponse",
    "FetchSnapshotRequest",
    "FetchSnapshotResponse",
    "LeaderIdAndEpoch",
    "NodeEndpoint",
    "PreferredCandidate",
    "ReplicaState",
    "Request",
    "Response",
    "SnapshotId",
    "VoteRequest",
    "VoteResponse",
]


class _Wire(msgspec.Struct, frozen=True, array_like=True):
    """Base of every wire struct: frozen, encoded as a msgpack array of its fields."""


class _Message(_Wire, frozen=True, tag_field="api_key"):
    """Base of the requests and responses: each sets ``tag=<its API key>``.

    An ``array_like`` struct writes its tag as the array's first item; ``tag_field`` only
    names it (msgspec wants one name across a union). Nested structs derive from
    :class:`_Wire`, not from this class: a ``tag_field`` without a ``tag`` would make msgspec tag
    them with their class name.
    """


class _OffsetAndEpochLike(Protocol):
    """Anything with an ``offset`` and an ``epoch`` (``kraft.log.OffsetAndEpoch``). The wire
    layer sits below the log layer (tests/test_layering.py), so it names the shape, not the
    class."""

    @property
    def offset(self) -> int: ...

    @property
    def epoch(self) -> int: ...


# ---------------------------------------------------------------------------------------------
# Shared structs


class NodeEndpoint(_Wire, frozen=True):
    """A node's address, in a response's ``NodeEndpoints`` (for the leaders it names)."""

    node_id: int
    host: str
    port: int
    #: Fetch's NodeEndpoint (v16+) has a rack; the KRaft RPCs' do not.
    rack: str | None = None


class Endpoint(_Wire, frozen=True):
    """A named listener: Kafka's ``LeaderEndpoint`` (Begin/EndQuorumEpoch) and DescribeQuorum's
    ``Listener``."""

    name: str
    host: str
    port: int


class PreferredCandidate(_Wire, frozen=True):
    """One of EndQuorumEpoch's ``PreferredCandidates`` (v1, KIP-853), best first."""

    candidate_id: int
    candidate_directory_id: uuid.UUID = ZERO_UUID


class EpochEndOffset(_Wire, frozen=True):
    """Fetch's ``DivergingEpoch``: the largest epoch the follower shares with the leader, and
    the leader's end offset for it; the follower truncates to it."""

    epoch: int = -1
    end_offset: int = -1

    @classmethod
    def of(cls, offset_and_epoch: _OffsetAndEpochLike) -> EpochEndOffset:
        """From an ``OffsetAndEpoch``: its offset is the end offset."""
        return cls(epoch=offset_and_epoch.epoch, end_offset=offset_and_epoch.offset)


class LeaderIdAndEpoch(_Wire, frozen=True):
    """A response's ``CurrentLeader``: -1 for an unknown leader or epoch."""

    leader_id: int = -1
    leader_epoch: int = -1


class SnapshotId(_Wire, frozen=True):
    """A snapshot's id: its end offset (exclusive) and the epoch of the record before it."""

    end_offset: int = -1
    epoch: int = -1

    @classmethod
    def of(cls, offset_and_epoch: _OffsetAndEpochLike) -> SnapshotId:
        """From an ``OffsetAndEpoch`` (a snapshot id in the log layer)."""
        return cls(end_offset=offset_and_epoch.offset, epoch=offset_and_epoch.epoch)


class ReplicaState(_Wire, frozen=True):
    """One voter or observer in a DescribeQuorum response.

    Timestamps are the leader's wall-clock milliseconds, -1 when unknown (KIP-836).
    """

    replica_id: int
    replica_directory_id: uuid.UUID = ZERO_UUID
    log_end_offset: int = -1
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1


class DescribeQuorumNode(_Wire, frozen=True):
    """DescribeQuorum v2's ``Nodes``: a voter's listeners."""

    node_id: int
    listeners: tuple[Endpoint, ...] = ()


class ApiVersion(_Wire, frozen=True):
    """ApiVersions' ``ApiKeys``: one API the node speaks and the versions of it."""

    api_key: int
    min_version: int = 0
    max_version: int = 0


class SupportedFeature(_Wire, frozen=True):
    """ApiVersions' ``SupportedFeatures``: a feature (``kraft.version``) and its range."""

    name: str
    min_version: int = 0
    max_version: int = 0


class FinalizedFeatureKey(_Wire, frozen=True):
    """ApiVersions' ``FinalizedFeatures``: a feature's finalized level (a controller node
    answers with them; kraft finalizes one level, so both bounds are it)."""

    name: str
    max_version_level: int
    min_version_level: int


class FeatureUpdate(_Wire, frozen=True):
    """UpdateFeatures' ``FeatureUpdates``: finalize ``feature`` at ``max_version_level``
    (``downgrade_type`` 0: no downgrade, 1: safe downgrades only, 2: unsafe downgrades)."""

    feature: str
    max_version_level: int
    downgrade_type: int = 0


class FeatureUpdateResult(_Wire, frozen=True):
    """UpdateFeatures' ``Results``: the outcome for one feature."""

    feature: str
    error_code: int = 0
    error_message: str | None = None


# ---------------------------------------------------------------------------------------------
# Requests


class VoteRequest(_Message, frozen=True, tag=ApiKey.VOTE.value):
    """Vote (API key 52, v2): a prospective (``pre_vote``) or candidate replica asks a voter.

    ``replica_epoch`` is the candidate's bumped epoch, or for a pre-vote its current epoch
    (KIP-996). ``last_offset_epoch``/``last_offset`` describe the sender's log end, which the
    voter compares with its own, epoch first (Kafka's ``handleVoteRequest``). ``voter_id`` and
    ``voter_directory_id`` name the receiver (v1, KIP-853); -1 / ZERO match any.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.VOTE
    MAX_VERSION: ClassVar[int] = VOTE_VERSION

    replica_epoch: int
    replica_id: int
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool = False
    replica_directory_id: uuid.UUID = ZERO_UUID
    voter_id: int = -1
    voter_directory_id: uuid.UUID = ZERO_UUID
    topic_name: str = METADATA_TOPIC_NAME
    partition_index: int = METADATA_PARTITION_INDEX


class BeginQuorumEpochRequest(_Message, frozen=True, tag=ApiKey.BEGIN_QUORUM_EPOCH.value):
    """BeginQuorumEpoch (API key 53, v1): a new leader announces itself to a voter, then
    repeats it as a heartbeat (KIP-595)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.BEGIN_QUORUM_EPOCH
    MAX_VERSION: ClassVar[int] = BEGIN_QUORUM_EPOCH_VERSION

    leader_id: int
    leader_epoch: int
    voter_id: int = -1
    voter_directory_id: uuid.UUID = ZERO_UUID
    leader_endpoints: tuple[Endpoint, ...] = ()
    topic_name: str = METADATA_TOPIC_NAME
    partition_index: int = METADATA_PARTITION_INDEX


class EndQuorumEpochRequest(_Message, frozen=True, tag=ApiKey.END_QUORUM_EPOCH.value):
    """EndQuorumEpoch (API key 54, v1): a resigning leader asks the voters to elect a successor,
    naming its ``preferred_candidates`` best first (the position sets each voter's election
    backoff)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.END_QUORUM_EPOCH
    MAX_VERSION: ClassVar[int] = END_QUORUM_EPOCH_VERSION

    leader_id: int
    leader_epoch: int
    preferred_candidates: tuple[PreferredCandidate, ...] = ()
    leader_endpoints: tuple[Endpoint, ...] = ()
    topic_name: str = METADATA_TOPIC_NAME
    partition_index: int = METADATA_PARTITION_INDEX


class FetchRequest(_Message, frozen=True, tag=ApiKey.FETCH.value):
    """Fetch (API key 1, v18): a follower or observer reads the leader's log from its end.

    ``replica_id`` is Kafka's ``ReplicaState.ReplicaId`` (-1: an anonymous observer);
    ``fetch_offset`` the fetcher's log end offset and ``last_fetched_epoch`` the epoch of its
    last record, which the leader validates (KIP-595). ``high_watermark`` is the
    fetcher's (v18, KIP-1166): -1 unknown, ``INT64_MAX`` not supported.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.FETCH
    MAX_VERSION: ClassVar[int] = FETCH_VERSION

    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int
    max_bytes: int = INT32_MAX  # Kafka's default: Integer.MAX_VALUE, no limit
    log_start_offset: int = -1
    replica_directory_id: uuid.UUID = ZERO_UUID
    high_watermark: int = INT64_MAX
    topic_name: str = METADATA_TOPIC_NAME
    topic_id: uuid.UUID = METADATA_TOPIC_ID
    partition_index: int = METADATA_PARTITION_INDEX


class FetchSnapshotRequest(_Message, frozen=True, tag=ApiKey.FETCH_SNAPSHOT.value):
    """FetchSnapshot (API key 59, v1): a follower downloads a snapshot from ``position`` on."""

    API_KEY: ClassVar[ApiKey] = ApiKey.FETCH_SNAPSHOT
    MAX_VERSION: ClassVar[int] = FETCH_SNAPSHOT_VERSION

    replica_id: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int = INT32_MAX  # Kafka's default: Integer.MAX_VALUE, no limit
    replica_directory_id: uuid.UUID = ZERO_UUID
    topic_name: str = METADATA_TOPIC_NAME
    partition_index: int = METADATA_PARTITION_INDEX


class DescribeQuorumRequest(_Message, frozen=True, tag=ApiKey.DESCRIBE_QUORUM.value):
    """DescribeQuorum (API key 55, v2): an admin asks the leader for the quorum's state."""

    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_QUORUM
    MAX_VERSION: ClassVar[int] = DESCRIBE_QUORUM_VERSION

    topic_name: str = METADATA_TOPIC_NAME
    partition_index: int = METADATA_PARTITION_INDEX


class ApiVersionsRequest(_Message, frozen=True, tag=ApiKey.API_VERSIONS.value):
    """ApiVersions (API key 18, v4): what the receiver speaks. A leader asks a replica it is
    about to add as a voter, for the ``kraft.version`` range it supports (KIP-853)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.API_VERSIONS
    MAX_VERSION: ClassVar[int] = API_VERSIONS_VERSION

    client_software_name: str = "kraft"
    client_software_version: str = ""


class AddRaftVoterRequest(_Message, frozen=True, tag=ApiKey.ADD_RAFT_VOTER.value):
    """AddRaftVoter (API key 80, v1): an admin asks the leader to make the observer
    ``(voter_id, voter_directory_id)``, reachable at ``listeners``, a voter (KIP-853).
    ``ack_when_committed`` false: answer once the VotersRecord is appended (KIP-1186)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_RAFT_VOTER
    MAX_VERSION: ClassVar[int] = ADD_RAFT_VOTER_VERSION

    voter_id: int
    voter_directory_id: uuid.UUID
    listeners: tuple[Endpoint, ...] = ()
    timeout_ms: int = 30_000
    cluster_id: str | None = None
    ack_when_committed: bool = True


class RemoveRaftVoterRequest(_Message, frozen=True, tag=ApiKey.REMOVE_RAFT_VOTER.value):
    """RemoveRaftVoter (API key 81, v0): an admin asks the leader to remove the voter
    ``(voter_id, voter_directory_id)`` (KIP-853)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.REMOVE_RAFT_VOTER
    MAX_VERSION: ClassVar[int] = REMOVE_RAFT_VOTER_VERSION

    voter_id: int
    voter_directory_id: uuid.UUID
    cluster_id: str | None = None


class UpdateRaftVoterRequest(_Message, frozen=True, tag=ApiKey.UPDATE_RAFT_VOTER.value):
    """UpdateRaftVoter (API key 82, v0): a voter tells its leader its current listeners and
    the ``kraft.version`` range it supports, when the voter set says otherwise (KIP-853)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.UPDATE_RAFT_VOTER
    MAX_VERSION: ClassVar[int] = UPDATE_RAFT_VOTER_VERSION

    current_leader_epoch: int
    voter_id: int
    voter_directory_id: uuid.UUID
    listeners: tuple[Endpoint, ...] = ()
    min_supported_kraft_version: int = 0
    max_supported_kraft_version: int = 0
    cluster_id: str | None = None


class UpdateFeaturesRequest(_Message, frozen=True, tag=ApiKey.UPDATE_FEATURES.value):
    """UpdateFeatures (API key 57, v1): an admin asks the leader to finalize feature levels;
    kraft knows one feature, ``kraft.version`` (Kafka's ``kafka-features.sh upgrade``)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.UPDATE_FEATURES
    MAX_VERSION: ClassVar[int] = UPDATE_FEATURES_VERSION

    feature_updates: tuple[FeatureUpdate, ...]
    timeout_ms: int = 60_000
    validate_only: bool = False


class ForwardAppendRequest(_Message, frozen=True, tag=ApiKey.KRAFT_FORWARD_APPEND.value):
    """kraft: append ``records`` (each a value the serde encoded) as one batch on the leader,
    answered once the batch commits or at ``timeout_ms`` (writes from any node)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.KRAFT_FORWARD_APPEND
    MAX_VERSION: ClassVar[int] = KRAFT_FORWARD_APPEND_VERSION

    records: tuple[bytes, ...] = ()
    timeout_ms: int = 0


class ReadIndexRequest(_Message, frozen=True, tag=ApiKey.KRAFT_READ_INDEX.value):
    """kraft: ask the leader for a read index (an offset at or above every write acknowledged
    before the request), answered once a majority confirmed its leadership."""

    API_KEY: ClassVar[ApiKey] = ApiKey.KRAFT_READ_INDEX
    MAX_VERSION: ClassVar[int] = KRAFT_READ_INDEX_VERSION

    timeout_ms: int = 0


# ---------------------------------------------------------------------------------------------
# Responses


class VoteResponse(_Message, frozen=True, tag=ApiKey.VOTE.value):
    """The answer to :class:`VoteRequest`: the voter's leader (-1 unknown) and epoch, and
    whether it granted the (pre-)vote; ``node_endpoints`` for the named leader (v1)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.VOTE
    MAX_VERSION: ClassVar[int] = VOTE_VERSION

    error_code: int = 0
    partition_error_code: int = 0
    leader_id: int = -1
    leader_epoch: int = -1
    vote_granted: bool = False
    node_endpoints: tuple[NodeEndpoint, ...] = ()
    topic_name: str = METADATA_TOPIC_NAME
    partition_index: int = METADATA_PARTITION_INDEX


class BeginQuorumEpochResponse(_Message, frozen=True, tag=ApiKey.BEGIN_QUORUM_EPOCH.value):
    """The answer to :class:`BeginQuorumEpochRequest`: NONE acknowledges the leader."""

    API_KEY: ClassVar[ApiKey] = ApiKey.BEGIN_QUORUM_EPOCH
    MAX_VERSION: ClassVar[int] = BEGIN_QUORUM_EPOCH_VERSION

    error_code: int = 0
    partition_error_code: int = 0
    leader_id: int = -1
    leader_epoch: int = -1
    node_endpoints: tuple[NodeEndpoint, ...] = ()
    topic_name: str = METADATA_TOPIC_NAME
    partition_index: int = METADATA_PARTITION_INDEX


class EndQuorumEpochResponse(_Message, frozen=True, tag=ApiKey.END_QUORUM_EPOCH.value):
    """The answer to :class:`EndQuorumEpochRequest`: NONE acknowledges the resignation."""

    API_KEY: ClassVar[ApiKey] = ApiKey.END_QUORUM_EPOCH
    MAX_VERSION: ClassVar[int] = END_QUORUM_EPOCH_VERSION

    error_code: int = 0
    partition_error_code: int = 0
    leader_id: int = -1
    leader_epoch: int = -1
    node_endpoints: tuple[NodeEndpoint, ...] = ()
    topic_name: str = METADATA_TOPIC_NAME
    partition_index: int = METADATA_PARTITION_INDEX


class FetchResponse(_Message, frozen=True, tag=ApiKey.FETCH.value):
    """The answer to :class:`FetchRequest`: at most one of ``records`` (raw v2 batches),
    ``diverging_epoch`` (truncate first) or ``snapshot_id`` (fetch that snapshot) carries the
    news; ``current_leader`` names the leader (KIP-595)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.FETCH
    MAX_VERSION: ClassVar[int] = FETCH_VERSION

    error_code: int = 0
    partition_error_code: int = 0
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    diverging_epoch: EpochEndOffset | None = None
    current_leader: LeaderIdAndEpoch = LeaderIdAndEpoch()
    snapshot_id: SnapshotId | None = None
    node_endpoints: tuple[NodeEndpoint, ...] = ()
    topic_name: str = METADATA_TOPIC_NAME
    topic_id: uuid.UUID = METADATA_TOPIC_ID
    partition_index: int = METADATA_PARTITION_INDEX


class FetchSnapshotResponse(_Message, frozen=True, tag=ApiKey.FETCH_SNAPSHOT.value):
    """The answer to :class:`FetchSnapshotRequest`: ``unaligned_records`` is the slice of the
    snapshot file from ``position`` (not aligned on batches); ``size`` the whole file's size."""

    API_KEY: ClassVar[ApiKey] = ApiKey.FETCH_SNAPSHOT
    MAX_VERSION: ClassVar[int] = FETCH_SNAPSHOT_VERSION

    error_code: int = 0
    partition_error_code: int = 0
    snapshot_id: SnapshotId = SnapshotId()
    current_leader: LeaderIdAndEpoch = LeaderIdAndEpoch()
    size: int = -1
    position: int = -1
    unaligned_records: bytes = b""
    node_endpoints: tuple[NodeEndpoint, ...] = ()
    topic_name: str = METADATA_TOPIC_NAME
    partition_index: int = METADATA_PARTITION_INDEX


class DescribeQuorumResponse(_Message, frozen=True, tag=ApiKey.DESCRIBE_QUORUM.value):
    """The answer to :class:`DescribeQuorumRequest`: the leader's view of every voter and
    observer (KIP-836, KIP-853)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_QUORUM
    MAX_VERSION: ClassVar[int] = DESCRIBE_QUORUM_VERSION

    error_code: int = 0
    error_message: str | None = None
    partition_error_code: int = 0
    partition_error_message: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    high_watermark: int = -1
    current_voters: tuple[ReplicaState, ...] = ()
    observers: tuple[ReplicaState, ...] = ()
    nodes: tuple[DescribeQuorumNode, ...] = ()
    topic_name: str = METADATA_TOPIC_NAME
    partition_index: int = METADATA_PARTITION_INDEX


class ApiVersionsResponse(_Message, frozen=True, tag=ApiKey.API_VERSIONS.value):
    """The answer to :class:`ApiVersionsRequest`: the APIs and the features the node
    supports (``kraft.version``: the range of :data:`SupportedFeature`); a controller node
    adds its controller's APIs, ``metadata.version`` and the finalized levels."""

    API_KEY: ClassVar[ApiKey] = ApiKey.API_VERSIONS
    MAX_VERSION: ClassVar[int] = API_VERSIONS_VERSION

    error_code: int = 0
    api_keys: tuple[ApiVersion, ...] = ()
    supported_features: tuple[SupportedFeature, ...] = ()
    #: The offset of the metadata image the finalized levels are read from (-1: none).
    finalized_features_epoch: int = -1
    finalized_features: tuple[FinalizedFeatureKey, ...] = ()

    def feature_range(self, name: str) -> tuple[int, int] | None:
        """The ``(min, max)`` versions of feature ``name`` the node supports, if it says."""
        for feature in self.supported_features:
            if feature.name == name:
                return feature.min_version, feature.max_version
        return None


class AddRaftVoterResponse(_Message, frozen=True, tag=ApiKey.ADD_RAFT_VOTER.value):
    """The answer to :class:`AddRaftVoterRequest`: NONE once the new voter set committed."""

    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_RAFT_VOTER
    MAX_VERSION: ClassVar[int] = ADD_RAFT_VOTER_VERSION

    error_code: int = 0
    error_message: str | None = None


class RemoveRaftVoterResponse(_Message, frozen=True, tag=ApiKey.REMOVE_RAFT_VOTER.value):
    """The answer to :class:`RemoveRaftVoterRequest`: NONE once the new voter set committed."""

    API_KEY: ClassVar[ApiKey] = ApiKey.REMOVE_RAFT_VOTER
    MAX_VERSION: ClassVar[int] = REMOVE_RAFT_VOTER_VERSION

    error_code: int = 0
    error_message: str | None = None


class UpdateRaftVoterResponse(_Message, frozen=True, tag=ApiKey.UPDATE_RAFT_VOTER.value):
    """The answer to :class:`UpdateRaftVoterRequest`; ``current_leader`` names the leader."""

    API_KEY: ClassVar[ApiKey] = ApiKey.UPDATE_RAFT_VOTER
    MAX_VERSION: ClassVar[int] = UPDATE_RAFT_VOTER_VERSION

    error_code: int = 0
    current_leader: LeaderIdAndEpoch = LeaderIdAndEpoch()
    node_endpoints: tuple[NodeEndpoint, ...] = ()


class UpdateFeaturesResponse(_Message, frozen=True, tag=ApiKey.UPDATE_FEATURES.value):
    """The answer to :class:`UpdateFeaturesRequest`: NONE once the new levels commit."""

    API_KEY: ClassVar[ApiKey] = ApiKey.UPDATE_FEATURES
    MAX_VERSION: ClassVar[int] = UPDATE_FEATURES_VERSION

    error_code: int = 0
    error_message: str | None = None
    results: tuple[FeatureUpdateResult, ...] = ()


class ForwardAppendResponse(_Message, frozen=True, tag=ApiKey.KRAFT_FORWARD_APPEND.value):
    """The answer to :class:`ForwardAppendRequest`: NONE with the offset of the batch's last
    record and its epoch once committed; NOT_LEADER_OR_FOLLOWER (with the leader this node
    knows), REQUEST_TIMED_OUT (outcome unknown), RECORD_LIST_TOO_LARGE, INVALID_RECORD..."""

    API_KEY: ClassVar[ApiKey] = ApiKey.KRAFT_FORWARD_APPEND
    MAX_VERSION: ClassVar[int] = KRAFT_FORWARD_APPEND_VERSION

    error_code: int = 0
    error_message: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    last_offset: int = -1
    batch_epoch: int = -1


class ReadIndexResponse(_Message, frozen=True, tag=ApiKey.KRAFT_READ_INDEX.value):
    """The answer to :class:`ReadIndexRequest`: NONE with the read index, or an error."""

    API_KEY: ClassVar[ApiKey] = ApiKey.KRAFT_READ_INDEX
    MAX_VERSION: ClassVar[int] = KRAFT_READ_INDEX_VERSION

    error_code: int = 0
    error_message: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    read_offset: int = -1


#: Every request kraft speaks; the union its typed decoder reads.
Request: TypeAlias = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
    | DescribeQuorumRequest
    | ApiVersionsRequest
    | AddRaftVoterRequest
    | RemoveRaftVoterRequest
    | UpdateRaftVoterRequest
    | UpdateFeaturesRequest
    | ForwardAppendRequest
    | ReadIndexRequest
)

#: Every response kraft speaks; the union its typed decoder reads.
Response: TypeAlias = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
    | DescribeQuorumResponse
    | ApiVersionsResponse
    | AddRaftVoterResponse
    | RemoveRaftVoterResponse
    | UpdateRaftVoterResponse
    | UpdateFeaturesResponse
    | ForwardAppendResponse
    | ReadIndexResponse
)

REQUEST_TYPES: tuple[type[Request], ...] = (
    VoteRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    DescribeQuorumRequest,
    ApiVersionsRequest,
    AddRaftVoterRequest,
    RemoveRaftVoterRequest,
    UpdateRaftVoterRequest,
    UpdateFeaturesRequest,
    ForwardAppendRequest,
    ReadIndexRequest,
)

RESPONSE_TYPES: tuple[type[Response], ...] = (
    VoteResponse,
    BeginQuorumEpochResponse,
    EndQuorumEpochResponse,
    FetchResponse,
    FetchSnapshotResponse,
    DescribeQuorumResponse,
    ApiVersionsResponse,
    AddRaftVoterResponse,
    RemoveRaftVoterResponse,
    UpdateRaftVoterResponse,
    UpdateFeaturesResponse,
    ForwardAppendResponse,
    ReadIndexResponse,
)

#: The response class that answers each request class.
RESPONSE_TYPE_FOR: Mapping[type[Request], type[Response]] = MappingProxyType(
    dict(zip(REQUEST_TYPES, RESPONSE_TYPES, strict=True))
)
