"""What a peer would send: request and response builders, with the addresses every test config
gives the voters.

Each builder takes the fields a test varies, epoch first, and leaves the rest at the message's
defaults (the metadata topic partition; no ``node_endpoints`` in a response, so the client takes
a named leader's address from its voter set). ``**fields`` sets any other field.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from kraft.common.limits import INT64_MAX
from kraft.common.uuids import ZERO_UUID
from kraft.config import Endpoint as ConfigEndpoint
from kraft.protocol.api import KRAFT_VERSION_FEATURE, SUPPORTED_KRAFT_VERSIONS
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    AddRaftVoterRequest,
    ApiVersionsResponse,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    Endpoint,
    EndQuorumEpochResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    RemoveRaftVoterRequest,
    SnapshotId,
    SupportedFeature,
    UpdateRaftVoterRequest,
    VoteRequest,
    VoteResponse,
)
from kraft.raft.states import ReplicaKey
from kraft.raft.voter_set import DEFAULT_LISTENER, VoterNode, VoterSet
from kraft.record.offsets import OffsetAndEpoch

__all__ = [
    "VOTER_PORT_BASE",
    "add_voter_request",
    "api_versions_response",
    "begin_epoch_request",
    "begin_epoch_response",
    "end_epoch_response",
    "fetch_request",
    "fetch_response",
    "fetch_snapshot_response",
    "listeners_of",
    "remove_voter_request",
    "replica_key",
    "update_voter_request",
    "vote_request",
    "vote_response",
    "voter_endpoint",
    "voter_endpoints",
    "voter_node",
    "voter_set",
]

#: Test configs give voter ``n`` the address localhost:(VOTER_PORT_BASE + n).
VOTER_PORT_BASE = 9990


def voter_endpoint(voter_id: int) -> ConfigEndpoint:
    """The address the builders, ``RaftClientBuilder`` and ``LocalCluster`` give a voter."""
    return ConfigEndpoint("localhost", VOTER_PORT_BASE + voter_id)


def voter_endpoints(voters: Iterable[int]) -> dict[int, ConfigEndpoint]:
    """``QuorumConfig.voters`` for these voter ids, at :func:`voter_endpoint`."""
    return {v: voter_endpoint(v) for v in voters}


def replica_key(replica_id: int, *, directory: bool = True) -> ReplicaKey:
    """Replica ``replica_id`` with the directory id the builders give it (a fixed UUID made
    from its id), or without one (``directory=False``)."""
    if not directory:
        return ReplicaKey(replica_id)
    return ReplicaKey(replica_id, uuid.UUID(int=(0xD1 << 96) | replica_id))


def listeners_of(replica_id: int) -> tuple[Endpoint, ...]:
    """The listeners the builders give replica ``replica_id``: ``CONTROLLER`` at
    :func:`voter_endpoint`."""
    endpoint = voter_endpoint(replica_id)
    return (Endpoint(DEFAULT_LISTENER, endpoint.host, endpoint.port),)


def voter_node(
    replica: int | ReplicaKey, supported_kraft_versions: tuple[int, int] = SUPPORTED_KRAFT_VERSIONS
) -> VoterNode:
    """A voter at its :func:`listeners_of` address; an id gets :func:`replica_key`'s
    directory id. It supports kraft.version 0..1 unless told otherwise."""
    key = replica_key(replica) if isinstance(replica, int) else replica
    endpoints = tuple((e.name, e.host, e.port) for e in listeners_of(key.id))
    return VoterNode(key, endpoints, supported_kraft_versions)


def voter_set(*replicas: int | ReplicaKey) -> VoterSet:
    """The KIP-853 voter set of these replicas (:func:`voter_node` each)."""
    nodes = [voter_node(r) for r in replicas]
    return VoterSet({n.key.id: n for n in nodes})


# -- requests -------------------------------------------------------------------------------------
def fetch_request(
    epoch: int,
    replica_id: int,
    fetch_offset: int,
    last_fetched_epoch: int,
    *,
    max_wait_ms: int = 0,
    high_watermark: int = INT64_MAX,
    replica_directory_id: uuid.UUID | None = None,
) -> FetchRequest:
    """A Fetch from ``replica_id`` in ``epoch`` at ``fetch_offset`` (its log end), whose last
    record has ``last_fetched_epoch``; ``high_watermark`` is the fetcher's (KIP-1166);
    ``replica_directory_id`` the fetcher's directory id (KIP-853; none by default)."""
    return FetchRequest(
        replica_id=replica_id,
        current_leader_epoch=epoch,
        fetch_offset=fetch_offset,
        last_fetched_epoch=last_fetched_epoch,
        max_wait_ms=max_wait_ms,
        high_watermark=high_watermark,
        replica_directory_id=ZERO_UUID if replica_directory_id is None else replica_directory_id,
    )


def vote_request(
    epoch: int,
    candidate_id: int,
    last_epoch: int,
    last_offset: int,
    *,
    pre_vote: bool = False,
    **fields: Any,
) -> VoteRequest:
    """A (pre-)vote request from ``candidate_id`` whose log ends at ``last_offset`` in
    ``last_epoch``; ``fields`` sets any other ``VoteRequest`` field (``voter_id=...``)."""
    return VoteRequest(
        replica_epoch=epoch,
        replica_id=candidate_id,
        last_offset_epoch=last_epoch,
        last_offset=last_offset,
        pre_vote=pre_vote,
        **fields,
    )


def begin_epoch_request(epoch: int, leader_id: int, voter_id: int = -1) -> BeginQuorumEpochRequest:
    """A BeginQuorumEpoch from ``leader_id`` to ``voter_id``, with the endpoints the builders
    give every voter (``voter_endpoint``)."""
    endpoint = voter_endpoint(leader_id)
    return BeginQuorumEpochRequest(
        leader_id=leader_id,
        leader_epoch=epoch,
        voter_id=voter_id,
        leader_endpoints=(Endpoint("CONTROLLER", endpoint.host, endpoint.port),),
    )


def add_voter_request(
    replica: int | ReplicaKey,
    *,
    listeners: tuple[Endpoint, ...] | None = None,
    timeout_ms: int = 30_000,
    **fields: Any,
) -> AddRaftVoterRequest:
    """An admin's AddRaftVoter for ``replica`` (an id gets :func:`replica_key`'s directory id),
    reachable at ``listeners`` (default :func:`listeners_of`)."""
    key = replica_key(replica) if isinstance(replica, int) else replica
    return AddRaftVoterRequest(
        voter_id=key.id,
        voter_directory_id=key.directory_id or ZERO_UUID,
        listeners=listeners_of(key.id) if listeners is None else listeners,
        timeout_ms=timeout_ms,
        **fields,
    )


def remove_voter_request(replica: int | ReplicaKey, **fields: Any) -> RemoveRaftVoterRequest:
    """An admin's RemoveRaftVoter for ``replica`` (an id gets :func:`replica_key`'s directory
    id)."""
    key = replica_key(replica) if isinstance(replica, int) else replica
    return RemoveRaftVoterRequest(
        voter_id=key.id, voter_directory_id=key.directory_id or ZERO_UUID, **fields
    )


def update_voter_request(
    epoch: int,
    replica: int | ReplicaKey,
    *,
    listeners: tuple[Endpoint, ...] | None = None,
    kraft_versions: tuple[int, int] = SUPPORTED_KRAFT_VERSIONS,
    **fields: Any,
) -> UpdateRaftVoterRequest:
    """Voter ``replica``'s UpdateRaftVoter to its leader of ``epoch``: its ``listeners``
    (default :func:`listeners_of`) and the kraft.version range it supports."""
    key = replica_key(replica) if isinstance(replica, int) else replica
    return UpdateRaftVoterRequest(
        current_leader_epoch=epoch,
        voter_id=key.id,
        voter_directory_id=key.directory_id or ZERO_UUID,
        listeners=listeners_of(key.id) if listeners is None else listeners,
        min_supported_kraft_version=kraft_versions[0],
        max_supported_kraft_version=kraft_versions[1],
        **fields,
    )


# -- responses ------------------------------------------------------------------------------------
def vote_response(
    epoch: int,
    *,
    granted: bool,
    leader_id: int = -1,
    error: int = Errors.NONE,
    **fields: Any,
) -> VoteResponse:
    """A voter's answer to a (pre-)vote in ``epoch``: ``granted`` or not, naming the leader it
    knows (-1: none); ``error`` is the partition error."""
    return VoteResponse(
        partition_error_code=error,
        leader_id=leader_id,
        leader_epoch=epoch,
        vote_granted=granted,
        **fields,
    )


def begin_epoch_response(
    epoch: int, leader_id: int, *, error: int = Errors.NONE, **fields: Any
) -> BeginQuorumEpochResponse:
    """A voter's answer to a BeginQuorumEpoch: with no ``error``, it follows ``leader_id`` in
    ``epoch`` (the acknowledgement the leader counts)."""
    return BeginQuorumEpochResponse(
        partition_error_code=error,
        leader_id=leader_id,
        leader_epoch=epoch,
        **fields,
    )


def end_epoch_response(
    epoch: int, leader_id: int = -1, *, error: int = Errors.NONE, **fields: Any
) -> EndQuorumEpochResponse:
    """A voter's answer to an EndQuorumEpoch, naming the leader it knows in ``epoch``."""
    return EndQuorumEpochResponse(
        partition_error_code=error,
        leader_id=leader_id,
        leader_epoch=epoch,
        **fields,
    )


def fetch_response(
    epoch: int,
    leader_id: int,
    records: bytes = b"",
    high_watermark: int = -1,
    error: int = Errors.NONE,
    *,
    diverging_epoch: OffsetAndEpoch | None = None,
    snapshot_id: OffsetAndEpoch | None = None,
    **fields: Any,
) -> FetchResponse:
    """The leader's answer to a Fetch: ``records`` (raw batches) and its ``high_watermark``;
    or, with ``diverging_epoch`` (the end offset and epoch the fetcher must truncate to) or
    ``snapshot_id`` (the snapshot the fetcher must download), no records."""
    return FetchResponse(
        partition_error_code=error,
        high_watermark=high_watermark,
        records=records,
        diverging_epoch=None if diverging_epoch is None else EpochEndOffset.of(diverging_epoch),
        snapshot_id=None if snapshot_id is None else SnapshotId.of(snapshot_id),
        current_leader=LeaderIdAndEpoch(leader_id, epoch),
        **fields,
    )


def fetch_snapshot_response(
    epoch: int,
    leader_id: int,
    snapshot_id: OffsetAndEpoch,
    data: bytes,
    position: int,
    length: int | None = None,
    *,
    error: int = Errors.NONE,
    **fields: Any,
) -> FetchSnapshotResponse:
    """The leader's answer to a FetchSnapshot at ``position``: ``length`` bytes (all the rest
    if ``None``) of the snapshot file ``data``, whose size it reports; no bytes with an
    ``error``."""
    end = len(data) if length is None else position + length
    return FetchSnapshotResponse(
        partition_error_code=error,
        snapshot_id=SnapshotId.of(snapshot_id),
        current_leader=LeaderIdAndEpoch(leader_id, epoch),
        size=len(data),
        position=position,
        unaligned_records=b"" if error else data[position:end],
        **fields,
    )


def api_versions_response(
    kraft_versions: tuple[int, int] | None = SUPPORTED_KRAFT_VERSIONS,
    *,
    error: int = Errors.NONE,
    **fields: Any,
) -> ApiVersionsResponse:
    """A replica's answer to ApiVersions: the ``kraft.version`` range it supports (``None``:
    it does not name the feature, as a kraft.version 0 replica)."""
    features = (
        ()
        if kraft_versions is None
        else (SupportedFeature(KRAFT_VERSION_FEATURE, kraft_versions[0], kraft_versions[1]),)
    )
    return ApiVersionsResponse(error_code=error, supported_features=features, **fields)
