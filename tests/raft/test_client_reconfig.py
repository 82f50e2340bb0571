"""Dynamic voters (KIP-853) at the client: the scenarios of Kafka's
``KafkaRaftClientReconfigTest``, in kraft's words.

Under kraft.version 1 the voters live in the log: the bootstrap checkpoint (snapshot 0-0,
written by ``kraft storage format``) holds the first set, each change is a ``VotersRecord``
that applies from the moment it is appended, and the leader changes the set one voter at a
time -- AddRaftVoter (the new voter must be a caught-up observer that supports kraft.version 1,
asked with ApiVersions), RemoveRaftVoter, UpdateRaftVoter -- answering once the new set has
committed the change (Kafka's ``AddVoterHandler``, ``RemoveVoterHandler``,
``UpdateVoterHandler``).

Every context here is replica 1 with the voter set of the bootstrap checkpoint and no static
voters (``RaftClientBuilder.with_bootstrap_voters``); replica ``n`` has the directory id
``replica_key(n)`` gives it and listens on ``CONTROLLER`` at localhost:9990+n.
"""

from __future__ import annotations

import uuid
from typing import Any

from kraft.config import Endpoint as ConfigEndpoint
from kraft.protocol.api import ApiKey
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    AddRaftVoterResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    Endpoint,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    LeaderIdAndEpoch,
    NodeEndpoint,
    RemoveRaftVoterResponse,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoteRequest,
)
from kraft.raft.requests import bootstrap_server_id
from kraft.raft.states import ReplicaKey
from kraft.raft.voter_set import VoterSet
from kraft.record.batch import SimpleRecord, iter_batches
from kraft.record.control import (
    ControlRecordType,
    KRaftVersionRecord,
    VotersRecord,
    control_batch,
    control_records,
    encode_control_key,
    encode_control_value,
)
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.serde import BytesSerde
from kraft.snapshot.raw import MemoryRawSnapshotWriter
from kraft.snapshot.writer import SnapshotWriter
from kraft.testing import LocalCluster, RaftClientBuilder, RaftTestContext
from kraft.testing.context import ADMIN_ID
from kraft.testing.messages import (
    add_voter_request,
    api_versions_response,
    fetch_response,
    fetch_snapshot_response,
    listeners_of,
    remove_voter_request,
    replica_key,
    update_voter_request,
    vote_response,
    voter_endpoints,
    voter_set,
)

LOCAL = 1
#: A directory id no replica of these tests has: another disk under a voter's id.
OTHER_DISK = uuid.UUID(int=0xBAD)
#: The epoch the leader contexts start from; ``become_leader`` wins the next one.
START_EPOCH = 3


def leader(*voters: int | ReplicaKey, fenced: bool = True, **config: int) -> RaftTestContext[bytes]:
    """Replica 1 leads the bootstrap voter set ``voters`` (1, 2, ...) in epoch 4. With
    ``fenced`` voter 2 has fetched at the log end, so the leader has a high watermark in its
    epoch (the previous leaders are fenced: a change may begin)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(*voters))
        .with_unknown_leader(START_EPOCH)
        .with_config(**config)
        .build()
    )
    epoch = context.become_leader()
    assert (context.role, epoch) == ("Leader", START_EPOCH + 1)
    context.sent_requests()
    if fenced and len(voters) > 1:
        context.fetch_at_log_end(2)
        assert context.high_watermark == context.log_end_offset
    return context


def static_leader(*voters: int) -> RaftTestContext[bytes]:
    """Replica 1 leads the static (kraft.version 0) voter set ``voters``, fenced."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters)
        .with_local_directory_id(replica_key(LOCAL).directory_id or uuid.uuid4())
        .with_unknown_leader(START_EPOCH)
        .build()
    )
    context.become_leader()
    context.sent_requests()
    context.fetch_at_log_end(2)
    return context


def ask_api_versions(context: RaftTestContext[bytes], replica: int) -> int:
    """Poll until the leader asks ``replica`` for its ApiVersions (at the listener the
    AddRaftVoter named); return the request's correlation id."""
    sent = context.poll_until_request(ApiVersionsRequest)
    assert len(sent) == 1, sent
    assert sent[0].destination == replica
    assert sent[0].destination_address == ("localhost", 9990 + replica)
    return sent[0].correlation_id


def start_add(context: RaftTestContext[bytes], replica: int, **fields: Any) -> int:
    """Deliver an admin's AddRaftVoter for ``replica``, answer the leader's ApiVersions with
    kraft.version 0..1, and poll until idle: the VotersRecord is appended. Returns the
    AddRaftVoter's correlation id."""
    correlation_id = context.deliver_request(add_voter_request(replica, **fields), ADMIN_ID)
    context.deliver_response(ask_api_versions(context, replica), api_versions_response(), replica)
    context.poll_until_idle()
    return correlation_id


def start_remove(context: RaftTestContext[bytes], replica: int) -> int:
    correlation_id = context.deliver_request(remove_voter_request(replica), ADMIN_ID)
    context.poll_until_idle()
    return correlation_id


def add_error(context: RaftTestContext[bytes], replica: int | None = None, **fields: Any) -> int:
    """The error an AddRaftVoter for ``replica`` gets, answering the leader's ApiVersions with
    kraft.version 0..1 if it asks."""
    replica = 3 if replica is None else replica
    correlation_id = context.deliver_request(add_voter_request(replica, **fields), ADMIN_ID)
    context.poll_until_idle()
    for request in context.sent_requests(ApiVersionsRequest):
        context.deliver_response(request, api_versions_response())
        context.poll_until_idle()
    response = context.response_to(correlation_id, AddRaftVoterResponse)
    assert response is not None, "AddRaftVoter not answered"
    return response.error_code


def remove_error(context: RaftTestContext[bytes], replica: int) -> int:
    response = context.admin_call(remove_voter_request(replica), RemoveRaftVoterResponse)
    assert response is not None, "RemoveRaftVoter not answered"
    return response.error_code


def voters_record(voters: VoterSet) -> SimpleRecord:
    """The VotersRecord of ``voters`` as a control record for ``append_to_log(control=True)``."""
    return SimpleRecord(
        key=encode_control_key(ControlRecordType.KRAFT_VOTERS),
        value=encode_control_value(voters.to_record()),
    )


def control_kinds(data: bytes | memoryview) -> list[list[ControlRecordType]]:
    """The control record types of each control batch in ``data`` (data batches: [])."""
    return [
        [kind for kind, _ in control_records(batch)] if batch.is_control else []
        for batch in iter_batches(data, verify_crc=False)
    ]


# =============================================================================================
# The bootstrap checkpoint
# =============================================================================================
def test_a_bootstrapped_voter_elects_itself_among_the_checkpoint_voters() -> None:
    """KIP-853: with no static voters, the bootstrap checkpoint's VotersRecord is the voter
    set; the replica asks exactly those voters for votes and leads them under kraft.version 1."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2, 3))
        .with_unknown_leader(START_EPOCH)
        .build()
    )
    assert context.client.is_voter and context.client.kraft_version == 1
    assert context.client.voter_ids == frozenset({1, 2, 3})
    context.expire_election_timeout()
    sent = context.poll_until_request(VoteRequest)
    assert sorted(r.destination for r in sent) == [2, 3]
    assert {r.destination_address for r in sent} == {("localhost", 9992), ("localhost", 9993)}
    request = sent[0].body
    assert isinstance(request, VoteRequest)
    context.deliver_response(sent[0], vote_response(request.replica_epoch, granted=True))
    context.poll_until_idle()
    assert context.epoch == START_EPOCH + 1  # the pre-vote, then the real vote's epoch
    assert context.client.voter_set == voter_set(1, 2, 3)


def test_the_first_leader_writes_the_bootstrap_records_into_the_log() -> None:
    """Kafka's ``testLeaderWritesBootstrapRecords``: the bootstrap checkpoint is never
    replicated, so the first leader writes its KRaftVersionRecord and VotersRecord into the log,
    in the batch of its LeaderChange record."""
    context = leader(1, 2, fenced=False)
    first = context.log.read(0).records
    batches = list(iter_batches(first, verify_crc=False))
    assert [kind for kind, _ in control_records(batches[0])] == [
        ControlRecordType.LEADER_CHANGE,
        ControlRecordType.KRAFT_VERSION,
        ControlRecordType.KRAFT_VOTERS,
    ]
    records = dict(control_records(batches[0]))
    version = records[ControlRecordType.KRAFT_VERSION]
    assert isinstance(version, KRaftVersionRecord) and version.kraft_version == 1
    voters = records[ControlRecordType.KRAFT_VOTERS]
    assert isinstance(voters, VotersRecord)
    assert VoterSet.from_record(voters) == voter_set(1, 2)


def test_a_kraft_version_0_leader_writes_no_voter_records() -> None:
    """Kafka's ``testLeaderDoesNotBootstrapRecordsWithKraftVersion0``: static voters, the
    LeaderChange record alone."""
    context = static_leader(1, 2)
    assert control_kinds(context.log.read(0).records)[0] == [ControlRecordType.LEADER_CHANGE]
    assert context.client.kraft_version == 0


def test_the_bootstrap_checkpoint_is_not_offered_to_a_fetcher() -> None:
    """Kafka's ``testBootstrapCheckpointIsNotReturnedOnFetch``: a follower fetching from
    offset 0 gets the log, not snapshot 0-0."""
    context = leader(1, 2, fenced=False)
    context.deliver_request(context.fetch_request(context.epoch, 2, 0, 0), 2)
    context.poll()
    response = context.single_sent_response(FetchResponse)
    assert response.partition_error_code == Errors.NONE
    assert response.snapshot_id is None or response.snapshot_id.end_offset < 0
    assert response.records


def test_a_follower_does_not_download_the_bootstrap_checkpoint() -> None:
    """Kafka's ``testFollowerDoesNotRequestLeaderBootstrapSnapshot``: told to fetch snapshot
    0-0, a follower that holds it already keeps fetching the log from offset 0."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2))
        .with_elected_leader(1, 2)
        .build()
    )
    sent = context.poll_until_request(FetchRequest)
    context.deliver_response(
        sent[0], fetch_response(1, 2, snapshot_id=OffsetAndEpoch(0, 0), high_watermark=0)
    )
    context.poll()
    assert context.sent_requests(FetchSnapshotRequest) == []
    sent = context.poll_until_request(FetchRequest)
    body = sent[0].body
    assert isinstance(body, FetchRequest)
    assert (body.fetch_offset, body.last_fetched_epoch) == (0, 0)


def test_a_follower_applies_a_fetched_voters_record_before_it_commits() -> None:
    """Kafka's ``testFollowerReadsKRaftBootstrapRecords``: the VotersRecord a follower
    appends is its voter set at once, committed or not."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2))
        .with_elected_leader(5, 2)
        .build()
    )
    sent = context.poll_until_request(FetchRequest)
    assert context.client.voter_ids == frozenset({1, 2})
    records = control_batch(
        0, 5, [KRaftVersionRecord(0, 1), voter_set(1, 2, 3).to_record()], timestamp_ms=0
    )
    context.deliver_response(sent[0], fetch_response(5, 2, records, high_watermark=0))
    context.poll()
    assert context.log_end_offset == 2 and context.high_watermark == 0
    assert context.client.voter_ids == frozenset({1, 2, 3})


# =============================================================================================
# AddRaftVoter
# =============================================================================================
def test_add_voter() -> None:
    """Kafka's ``testAddVoter``: a caught-up observer that supports kraft.version 1 is added;
    the VotersRecord applies once appended, and the answer (NONE) waits until the new set
    has committed it -- here the new voter's own fetch makes the majority of {1, 2, 3}."""
    context = leader(1, 2)
    assert not context.client.voter_set.is_voter(replica_key(3))
    context.fetch_at_log_end(3)  # the observer is caught up
    correlation_id = start_add(context, 3)

    assert context.client.voter_set == voter_set(1, 2, 3)
    assert context.high_watermark is not None
    assert context.high_watermark < context.log_end_offset  # not committed yet...
    assert context.response_to(correlation_id, AddRaftVoterResponse) is None  # ...not answered

    context.fetch_at_log_end(3)  # 1 and 3 are a majority of the new set
    assert context.high_watermark == context.log_end_offset
    context.poll_until_idle()
    response = context.response_to(correlation_id, AddRaftVoterResponse)
    assert response is not None and response.error_code == Errors.NONE


def test_add_voter_acknowledged_on_append() -> None:
    """KIP-1186: with ``ack_when_committed`` false the leader answers NONE once the
    VotersRecord is appended, before it commits."""
    context = leader(1, 2)
    context.fetch_at_log_end(3)
    correlation_id = start_add(context, 3, ack_when_committed=False)
    assert context.high_watermark is not None
    assert context.high_watermark < context.log_end_offset
    response = context.response_to(correlation_id, AddRaftVoterResponse)
    assert response is not None and response.error_code == Errors.NONE
    assert context.client.voter_set == voter_set(1, 2, 3)


def test_add_voter_appends_the_new_set_at_the_log_end() -> None:
    """KIP-853: the change is one VotersRecord: the whole new set, the new voter with the
    listeners the request named and the kraft.version range its ApiVersions reported."""
    context = leader(1, 2)
    context.fetch_at_log_end(3)
    end = context.log_end_offset
    start_add(context, 3)
    batches = list(iter_batches(context.log.read(end).records, verify_crc=False))
    records = [m for b in batches if b.is_control for _, m in control_records(b)]
    voters = [m for m in records if isinstance(m, VotersRecord)]
    assert len(voters) == 1
    added = VoterSet.from_record(voters[0])
    assert added.keys == (replica_key(1), replica_key(2), replica_key(3))
    node = added.node(3)
    assert node is not None
    assert node.endpoints == (("CONTROLLER", "localhost", 9993),)
    assert node.supported_kraft_versions == (0, 1)


def test_add_voter_under_kraft_version_0_is_unsupported() -> None:
    """Kafka's ``testAddVoterWithKraftVersion0``: static voters cannot change."""
    context = static_leader(1, 2)
    context.fetch_at_log_end(3)
    assert add_error(context) == Errors.UNSUPPORTED_VERSION


def test_add_an_existing_voter_is_a_duplicate() -> None:
    """Kafka's ``testAddVoterWithExistingVoter``: DUPLICATE_VOTER, whatever its directory."""
    context = leader(1, 2)
    context.fetch_at_log_end(2)
    assert add_error(context, 2) == Errors.DUPLICATE_VOTER
    assert context.client.voter_set == voter_set(1, 2)


def test_add_voter_on_a_replica_that_does_not_lead() -> None:
    """Kafka's ``testAddVoterToNotLeader``: NOT_LEADER_OR_FOLLOWER."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2))
        .with_unknown_leader(START_EPOCH)
        .build()
    )
    assert add_error(context) == Errors.NOT_LEADER_OR_FOLLOWER
    follower: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2))
        .with_elected_leader(START_EPOCH, 2)
        .build()
    )
    assert add_error(follower) == Errors.NOT_LEADER_OR_FOLLOWER


def test_add_voter_that_never_fetched_times_out() -> None:
    """Kafka's ``testAddVoterWithLaggingNewVoter``: a replica that is not a caught-up observer
    is not added (REQUEST_TIMED_OUT) and the voter set is unchanged."""
    context = leader(1, 2)
    assert add_error(context) == Errors.REQUEST_TIMED_OUT
    assert context.client.voter_set == voter_set(1, 2)


def test_add_voter_that_lags_times_out() -> None:
    """A new voter must have fetched up to the leader's log end."""
    context = leader(1, 2)
    context.deliver_request(
        context.fetch_request(
            context.epoch, 3, 0, 0, replica_directory_id=replica_key(3).directory_id
        ),
        3,
    )
    context.poll()
    context.sent_responses()
    assert add_error(context) == Errors.REQUEST_TIMED_OUT
    assert context.client.voter_set == voter_set(1, 2)


def test_add_voter_before_the_leader_committed_in_its_epoch() -> None:
    """Kafka's ``testAddVoterWithoutFencedPreviousLeaders``: until a record of its epoch is
    committed the leader may not know the latest voter set; REQUEST_TIMED_OUT."""
    context = leader(1, 2, fenced=False)
    context.fetch_at_log_end(3)
    assert context.high_watermark is None
    assert add_error(context) == Errors.REQUEST_TIMED_OUT


def test_add_voter_while_another_add_is_pending() -> None:
    """Kafka's ``testAddVoterWithPendingAddVoter``: one change at a time."""
    context = leader(1, 2)
    context.fetch_at_log_end(3)
    context.fetch_at_log_end(4)
    first = context.deliver_request(add_voter_request(3), ADMIN_ID)
    ask_api_versions(context, 3)  # the first change waits for the answer
    assert add_error(context, 4) == Errors.REQUEST_TIMED_OUT
    assert context.response_to(first, AddRaftVoterResponse) is None


def test_add_voter_while_a_removal_is_uncommitted() -> None:
    """Kafka's ``testAddVoterWithPendingRemoveVoter``: a VotersRecord not committed yet
    blocks the next change."""
    context = leader(1, 2, 3)
    start_remove(context, 3)
    assert context.client.voter_ids == frozenset({1, 2})
    context.fetch_at_log_end(4)
    assert add_error(context, 4) == Errors.REQUEST_TIMED_OUT


def test_add_voter_whose_api_versions_lack_kraft_version_1() -> None:
    """Kafka's ``testAddVoterInvalidFeatureVersion``: a replica that cannot read a
    VotersRecord is refused with INVALID_REQUEST."""
    for kraft_versions in [(0, 0), None]:
        context = leader(1, 2)
        context.fetch_at_log_end(3)
        correlation_id = context.deliver_request(add_voter_request(3), ADMIN_ID)
        context.deliver_response(
            ask_api_versions(context, 3), api_versions_response(kraft_versions), 3
        )
        context.poll_until_idle()
        response = context.response_to(correlation_id, AddRaftVoterResponse)
        assert response is not None and response.error_code == Errors.INVALID_REQUEST
        assert context.client.voter_set == voter_set(1, 2)


def test_add_voter_whose_api_versions_failed() -> None:
    """Kafka's ``testAddVoterWithApiVersionsFromIncorrectNode``: an ApiVersions error ends
    the change with REQUEST_TIMED_OUT."""
    context = leader(1, 2)
    context.fetch_at_log_end(3)
    correlation_id = context.deliver_request(add_voter_request(3), ADMIN_ID)
    context.deliver_response(
        ask_api_versions(context, 3), api_versions_response(error=Errors.INVALID_REQUEST), 3
    )
    context.poll_until_idle()
    response = context.response_to(correlation_id, AddRaftVoterResponse)
    assert response is not None and response.error_code == Errors.REQUEST_TIMED_OUT
    assert context.client.voter_set == voter_set(1, 2)


def test_add_voter_without_the_default_listener() -> None:
    """Kafka's ``testAddVoterWithMissingDefaultListener``: the leader must be able to reach
    the new voter on the controller listener; INVALID_REQUEST."""
    context = leader(1, 2)
    context.fetch_at_log_end(3)
    other = (Endpoint("NOT_THE_DEFAULT", "localhost", 9993),)
    assert add_error(context, 3, listeners=other) == Errors.INVALID_REQUEST


def test_add_voter_without_a_directory_id() -> None:
    """Kafka's ``testAddVoterWithMissingDirectoryId``: a KIP-853 voter has a directory id;
    INVALID_REQUEST."""
    context = leader(1, 2)
    context.fetch_at_log_end(3)
    error = add_error(context, replica_key(3, directory=False))  # type: ignore[arg-type]
    assert error == Errors.INVALID_REQUEST


def test_add_voter_times_out_when_the_new_set_does_not_commit() -> None:
    """Kafka's ``testAddVoterTimeout``: REQUEST_TIMED_OUT after the timeout; the appended
    VotersRecord stays in force (uncommitted)."""
    context = leader(1, 2)
    timeout = context.config.request_timeout_ms
    context.fetch_at_log_end(3)
    correlation_id = start_add(context, 3, timeout_ms=timeout)
    assert context.response_to(correlation_id, AddRaftVoterResponse) is None
    context.advance(timeout)
    context.poll_until_idle()
    response = context.response_to(correlation_id, AddRaftVoterResponse)
    assert response is not None and response.error_code == Errors.REQUEST_TIMED_OUT
    assert context.client.voter_set == voter_set(1, 2, 3)


def test_add_voter_fails_when_the_leader_resigns() -> None:
    """Kafka's ``testAddVoterFailsWhenLosingLeadership``: a pending change is answered
    NOT_LEADER_OR_FOLLOWER when the leader gives up its epoch."""
    context = leader(1, 2)
    context.fetch_at_log_end(3)
    correlation_id = context.deliver_request(add_voter_request(3), ADMIN_ID)
    ask_api_versions(context, 3)
    context.client.resign(context.epoch)
    context.poll_until_idle()
    response = context.response_to(correlation_id, AddRaftVoterResponse)
    assert response is not None and response.error_code == Errors.NOT_LEADER_OR_FOLLOWER


def test_voter_changes_from_another_cluster() -> None:
    """Kafka's ``testAddVoterInvalidClusterId`` / ``testRemoveVoterInvalidClusterId`` /
    ``testUpdateVoterInvalidClusterId``: a request whose ClusterId field is empty or another
    cluster's is refused with INCONSISTENT_CLUSTER_ID and changes nothing."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2, 3))
        .with_unknown_leader(START_EPOCH)
        .with_cluster_id("cluster-a")
        .build()
    )
    context.become_leader()
    context.fetch_at_log_end(2)
    context.fetch_at_log_end(4)
    for other in ["", "cluster-b"]:
        assert add_error(context, 4, cluster_id=other) == Errors.INCONSISTENT_CLUSTER_ID
        response = context.admin_call(
            remove_voter_request(3, cluster_id=other), RemoveRaftVoterResponse
        )
        assert response is not None and response.error_code == Errors.INCONSISTENT_CLUSTER_ID
        updated = update(context, 2, listeners=another_listener(2), cluster_id=other)
        assert updated.error_code == Errors.INCONSISTENT_CLUSTER_ID
    assert context.client.voter_set == voter_set(1, 2, 3)


def test_voter_changes_in_an_envelope_of_another_cluster() -> None:
    """kraft's request header carries the sender's cluster id too: another cluster's is
    refused before any handler (``kraft.raft.rpc.refusal``)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2, 3))
        .with_unknown_leader(START_EPOCH)
        .with_cluster_id("cluster-a")
        .build()
    )
    context.become_leader()
    context.fetch_at_log_end(2)
    context.fetch_at_log_end(4)
    correlation_id = context.deliver_request(
        remove_voter_request(3), ADMIN_ID, cluster_id="cluster-b"
    )
    context.poll_until_idle()
    response = context.response_to(correlation_id, RemoveRaftVoterResponse)
    assert response is not None and response.error_code == Errors.INCONSISTENT_CLUSTER_ID
    assert context.client.voter_set == voter_set(1, 2, 3)


# =============================================================================================
# RemoveRaftVoter
# =============================================================================================
def test_remove_voter() -> None:
    """Kafka's ``testRemoveVoter``: the VotersRecord without the voter applies once appended;
    the answer waits for the new set to commit it (the removed voter's fetches no longer
    count)."""
    context = leader(1, 2, 3)
    correlation_id = start_remove(context, 3)
    assert context.client.voter_set == voter_set(1, 2)
    assert context.response_to(correlation_id, RemoveRaftVoterResponse) is None

    context.fetch_at_log_end(3)  # not a voter any more: no commit
    assert context.high_watermark is not None
    assert context.high_watermark < context.log_end_offset
    context.poll_until_idle()
    assert context.response_to(correlation_id, RemoveRaftVoterResponse) is None

    context.fetch_at_log_end(2)
    assert context.high_watermark == context.log_end_offset
    context.poll_until_idle()
    response = context.response_to(correlation_id, RemoveRaftVoterResponse)
    assert response is not None and response.error_code == Errors.NONE


def test_remove_the_leader() -> None:
    """Kafka's ``testRemoveVoterIsLeader``: the leader removes itself, leads until the change
    commits in the new set ({2, 3}: both), then resigns (EndQuorumEpoch to the voters) and
    carries on as an observer: it never starts an election."""
    context = leader(1, 2, 3)
    epoch = context.epoch
    correlation_id = start_remove(context, LOCAL)
    assert not context.client.voter_set.is_voter(replica_key(LOCAL))
    assert context.role == "Leader"

    context.fetch_at_log_end(2)  # 2 alone is no majority of {2, 3}
    assert context.high_watermark is not None
    assert context.high_watermark < context.log_end_offset
    context.fetch_at_log_end(3)
    context.poll_until_idle()
    response = context.response_to(correlation_id, RemoveRaftVoterResponse)
    assert response is not None and response.error_code == Errors.NONE

    sent = context.poll_until_request(EndQuorumEpochRequest)
    assert sorted(r.destination for r in sent) == [2, 3]
    assert context.role != "Leader" and not context.client.is_voter
    context.client.resign(epoch)  # allowed, and a no-op now
    context.expire_election_timeout()
    context.poll_until_idle()
    assert context.role not in ("Prospective", "Candidate", "Leader")
    assert context.sent_requests(VoteRequest) == []


def test_remove_voter_under_kraft_version_0_is_unsupported() -> None:
    """Kafka's ``testRemoveVoterWithKraftVersion0``."""
    context = static_leader(1, 2, 3)
    assert remove_error(context, 3) == Errors.UNSUPPORTED_VERSION


def test_remove_a_replica_that_is_not_a_voter() -> None:
    """Kafka's ``testRemoveVoterWithNoneVoter`` / ``...NoneVoterId``: another directory of a
    voter's id, or an unknown id: VOTER_NOT_FOUND."""
    context = leader(1, 2, 3)
    response = context.admin_call(
        remove_voter_request(ReplicaKey(3, OTHER_DISK)), RemoveRaftVoterResponse
    )
    assert response is not None and response.error_code == Errors.VOTER_NOT_FOUND
    assert remove_error(context, 4) == Errors.VOTER_NOT_FOUND
    assert context.client.voter_set == voter_set(1, 2, 3)


def test_remove_the_other_voter_of_two() -> None:
    """KIP-853: removing voter 2 of {1, 2} leaves {1}, whose majority is the leader alone: the
    removal commits as soon as it is appended."""
    context = leader(1, 2)
    correlation_id = start_remove(context, 2)
    assert context.voter_set == voter_set(1)
    assert context.high_watermark == context.log_end_offset
    response = context.response_to(correlation_id, RemoveRaftVoterResponse)
    assert response is not None and response.error_code == Errors.NONE


def test_remove_the_only_voter() -> None:
    """Kafka's ``testRemoveVoterToEmptyVoterSet``: a voter set is never empty."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=()).with_bootstrap_voters(voter_set(1)).build()
    )
    context.poll_until_idle()
    assert context.role == "Leader"
    assert remove_error(context, LOCAL) == Errors.VOTER_NOT_FOUND


def test_remove_voter_on_a_replica_that_does_not_lead() -> None:
    """Kafka's ``testRemoveVoterToNotLeader``."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2, 3))
        .with_unknown_leader(START_EPOCH)
        .build()
    )
    assert remove_error(context, 2) == Errors.NOT_LEADER_OR_FOLLOWER


def test_remove_voter_before_the_leader_committed_in_its_epoch() -> None:
    """Kafka's ``testRemoveVoterWithoutFencedPreviousLeaders``."""
    context = leader(1, 2, 3, fenced=False)
    assert remove_error(context, 3) == Errors.REQUEST_TIMED_OUT
    assert context.client.voter_set == voter_set(1, 2, 3)


def test_remove_voter_while_a_change_is_pending() -> None:
    """Kafka's ``testRemoveVoterWithPendingRemoveVoter`` / ``...WithPendingAddVoter``."""
    context = leader(1, 2, 3)
    start_remove(context, 3)
    assert remove_error(context, 2) == Errors.REQUEST_TIMED_OUT

    adding = leader(1, 2)
    adding.fetch_at_log_end(3)
    adding.deliver_request(add_voter_request(3), ADMIN_ID)
    ask_api_versions(adding, 3)
    assert remove_error(adding, 2) == Errors.REQUEST_TIMED_OUT


def test_remove_voter_times_out_and_the_removal_stays() -> None:
    """Kafka's ``testRemoveVoterTimedOut``: REQUEST_TIMED_OUT after the request timeout; the
    uncommitted VotersRecord stays in force."""
    context = leader(1, 2, 3)
    correlation_id = start_remove(context, 3)
    context.advance(context.config.request_timeout_ms)
    context.poll_until_idle()
    response = context.response_to(correlation_id, RemoveRaftVoterResponse)
    assert response is not None and response.error_code == Errors.REQUEST_TIMED_OUT
    assert context.client.voter_set == voter_set(1, 2)


def test_an_uncommitted_voter_set_blocks_the_next_change() -> None:
    """Kafka's ``AddVoterHandler`` / ``RemoveVoterHandler``: even with no change pending (the
    last one timed out), a change must wait until the voter set in force has committed --
    REQUEST_TIMED_OUT; so consecutive sets always differ by one voter."""
    context = leader(1, 2, 3)
    correlation_id = start_remove(context, 3)
    context.advance(context.config.request_timeout_ms)
    context.poll_until_idle()
    timed_out = context.response_to(correlation_id, RemoveRaftVoterResponse)
    assert timed_out is not None and timed_out.error_code == Errors.REQUEST_TIMED_OUT

    context.fetch_at_log_end(4)
    assert add_error(context, 4) == Errors.REQUEST_TIMED_OUT
    assert remove_error(context, 2) == Errors.REQUEST_TIMED_OUT
    context.fetch_at_log_end(2)  # {1, 2} commits the removal: changes may go on
    context.fetch_at_log_end(4)
    context.deliver_request(add_voter_request(4), ADMIN_ID)
    ask_api_versions(context, 4)


def test_remove_voter_fails_when_the_leader_resigns() -> None:
    """Kafka's ``testRemoveVoterFailsWhenLosingLeadership``."""
    context = leader(1, 2, 3)
    correlation_id = start_remove(context, 3)
    context.client.resign(context.epoch)
    context.poll_until_idle()
    response = context.response_to(correlation_id, RemoveRaftVoterResponse)
    assert response is not None and response.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert context.client.voter_set == voter_set(1, 2)


# =============================================================================================
# The voter set in force: the high watermark, elections, truncation, snapshots
# =============================================================================================
def follower_with_voters_record(
    voters_in_log: VoterSet, local: int = LOCAL, bootstrap: tuple[int, ...] = (1, 2)
) -> RaftTestContext[bytes]:
    """Replica ``local`` with the bootstrap set ``bootstrap`` and a log holding one
    uncommitted VotersRecord (``voters_in_log``, epoch 3 at offset 0); no leader known in
    epoch 4."""
    return (
        RaftClientBuilder(local, voters=())
        .with_bootstrap_voters(voter_set(*bootstrap))
        .with_local_directory_id(replica_key(local).directory_id or uuid.uuid4())
        .append_to_log(3, [voters_record(voters_in_log)], control=True)
        .with_unknown_leader(4)
        .build()
    )


def test_an_observer_fetches_from_the_voters_of_its_log() -> None:
    """KIP-853: an observer without configured bootstrap servers looks for the leader among
    the voters its log names (here only the checkpoint knows voter 3), at their addresses."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(4, voters=(1, 2))
        .with_bootstrap_voters(voter_set(3))
        .with_local_directory_id(replica_key(4).directory_id or uuid.uuid4())
        .build()
    )
    assert not context.client.is_voter
    sent = context.poll_until_request(FetchRequest)
    assert [(r.destination, r.destination_address) for r in sent] == [(3, ("localhost", 9993))]


def test_an_appended_voters_record_governs_elections() -> None:
    """KIP-853: a replica asks the voters of the latest VotersRecord in its log, committed or
    not, for votes."""
    context = follower_with_voters_record(voter_set(1, 2, 3))
    assert context.client.voter_ids == frozenset({1, 2, 3})
    context.expire_election_timeout()
    sent = context.poll_until_request(VoteRequest)
    assert sorted(r.destination for r in sent) == [2, 3]


def test_a_replica_removed_in_its_log_does_not_start_elections() -> None:
    """KIP-853: a replica the latest VotersRecord leaves out is an observer: it never
    campaigns."""
    context = follower_with_voters_record(voter_set(2, 3), bootstrap=(1, 2, 3))
    assert not context.client.is_voter
    context.expire_election_timeout()
    context.poll_until_idle()
    assert context.role not in ("Prospective", "Candidate", "Leader")
    assert context.sent_requests(VoteRequest) == []


def test_a_replica_added_in_its_log_is_a_voter() -> None:
    """KIP-853: a replica becomes a voter when a VotersRecord naming it reaches its log."""
    context = follower_with_voters_record(voter_set(1, 2, 3), local=3)
    assert context.client.is_voter
    context.expire_election_timeout()
    sent = context.poll_until_request(VoteRequest)
    assert sorted(r.destination for r in sent) == [1, 2]


def test_a_truncation_rolls_the_voter_set_back() -> None:
    """KIP-853: the leader's divergence answer truncates the uncommitted VotersRecord; the set
    before it applies again."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2))
        .append_to_log(3, [voters_record(voter_set(1, 2, 3))], control=True)
        .with_elected_leader(5, 2)
        .build()
    )
    assert context.client.voter_ids == frozenset({1, 2, 3})
    sent = context.poll_until_request(FetchRequest)
    body = sent[0].body
    assert isinstance(body, FetchRequest)
    assert (body.fetch_offset, body.last_fetched_epoch) == (1, 3)
    context.deliver_response(
        sent[0], fetch_response(5, 2, diverging_epoch=OffsetAndEpoch(0, 2), high_watermark=0)
    )
    context.poll()
    assert context.log_end_offset == 0
    assert context.client.voter_ids == frozenset({1, 2})


def test_a_snapshot_holds_the_kraft_version_and_the_voters_after_its_header() -> None:
    """Kafka's snapshot writer under kraft.version 1: the header, then the KRaftVersionRecord
    and the VotersRecord in force at the snapshot, then the state machine's records."""
    context = leader(1, 2)
    context.append_and_drain([b"a", b"b"])
    context.fetch_at_log_end(2)
    end = context.log_end_offset
    snapshot_id = OffsetAndEpoch(end, context.epoch)
    writer = context.client.create_snapshot(snapshot_id, 0)
    assert writer is not None
    writer.append([b"state"])
    writer.freeze()
    reader = context.log.read_snapshot(snapshot_id)
    assert reader is not None
    try:
        data = reader.read(0, reader.size_in_bytes)
    finally:
        reader.close()
    batches = list(iter_batches(data, verify_crc=False))
    head = [m for b in batches if b.is_control for _, m in control_records(b)][:3]
    kinds = [type(m).__name__ for m in head]
    assert kinds == ["SnapshotHeaderRecord", "KRaftVersionRecord", "VotersRecord"]
    assert isinstance(head[1], KRaftVersionRecord) and head[1].kraft_version == 1
    assert isinstance(head[2], VotersRecord)
    assert VoterSet.from_record(head[2]) == context.client.voter_set


def test_a_snapshot_holds_the_voter_set_in_force_at_its_end() -> None:
    """KIP-853: a snapshot ending before a VotersRecord holds the set before it; one ending
    after it holds the new set (Kafka's ``VoterSetHistory.valueAtOrBefore``)."""
    context = leader(1, 2)
    context.fetch_at_log_end(3)
    before = context.log_end_offset  # the VotersRecord goes here
    correlation_id = start_add(context, 3)
    context.fetch_at_log_end(3)
    context.poll_until_idle()
    assert context.response_to(correlation_id, AddRaftVoterResponse) is not None
    after = context.log_end_offset

    def snapshot_voters(end: int) -> VoterSet:
        snapshot_id = OffsetAndEpoch(end, context.epoch)
        writer = context.client.create_snapshot(snapshot_id, 0)
        assert writer is not None
        writer.freeze()
        reader = context.log.read_snapshot(snapshot_id)
        assert reader is not None
        try:
            data = reader.read(0, reader.size_in_bytes)
        finally:
            reader.close()
        records = [m for b in iter_batches(data, verify_crc=False) for _, m in control_records(b)]
        (voters,) = [m for m in records if isinstance(m, VotersRecord)]
        return VoterSet.from_record(voters)

    assert snapshot_voters(before) == voter_set(1, 2)
    assert snapshot_voters(after) == voter_set(1, 2, 3)


# =============================================================================================
# UpdateRaftVoter
# =============================================================================================
def another_listener(replica: int) -> tuple[Endpoint, ...]:
    return (*listeners_of(replica), Endpoint("ANOTHER_LISTENER", "localhost", 8990 + replica))


def update(
    context: RaftTestContext[bytes], replica: object, epoch: int | None = None, **fields: Any
) -> UpdateRaftVoterResponse:
    epoch = context.epoch if epoch is None else epoch
    response = context.admin_call(
        update_voter_request(epoch, replica, **fields),  # type: ignore[arg-type]
        UpdateRaftVoterResponse,
        source=replica if isinstance(replica, int) else ADMIN_ID,
    )
    assert response is not None, "UpdateRaftVoter not answered"
    return response


def test_update_voter() -> None:
    """Kafka's ``testUpdateVoter``: a voter's new listeners go into a new VotersRecord, and
    the leader answers NONE (naming itself) without waiting for the commit."""
    context = leader(1, 2)
    response = update(context, 2, listeners=another_listener(2))
    assert response.error_code == Errors.NONE
    assert response.current_leader == LeaderIdAndEpoch(LOCAL, context.epoch)
    assert context.client.voter_ids == frozenset({1, 2})
    assert context.client.voter_set.endpoints(2) == (
        ("CONTROLLER", "localhost", 9992),
        ("ANOTHER_LISTENER", "localhost", 8992),
    )


def test_update_a_replica_that_is_not_a_voter() -> None:
    """Kafka's ``testUpdateVoterWithNoneVoter`` / ``...NoneVoterId``: VOTER_NOT_FOUND."""
    context = leader(1, 2)
    assert update(context, ReplicaKey(2, OTHER_DISK)).error_code == Errors.VOTER_NOT_FOUND
    assert update(context, 3).error_code == Errors.VOTER_NOT_FOUND
    assert context.client.voter_set == voter_set(1, 2)


def test_update_voter_with_a_kraft_range_without_the_current_version() -> None:
    """Kafka's ``UpdateVoterHandler``: a voter that no longer supports the finalized
    kraft.version (1) is refused with INVALID_REQUEST."""
    context = leader(1, 2)
    response = update(context, 2, kraft_versions=(0, 0))
    assert response.error_code == Errors.INVALID_REQUEST
    assert context.client.voter_set == voter_set(1, 2)


def test_update_voter_epochs() -> None:
    """Kafka's ``testUpdateVoterOldEpoch`` / ``...NewEpoch``: an older epoch is fenced, a newer
    one unknown."""
    context = leader(1, 2)
    assert update(context, 2, context.epoch - 1).error_code == Errors.FENCED_LEADER_EPOCH
    assert update(context, 2, context.epoch + 1).error_code == Errors.UNKNOWN_LEADER_EPOCH


def test_update_voter_on_a_replica_that_does_not_lead() -> None:
    """Kafka's ``testUpdateVoterToNotLeader``."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2))
        .with_unknown_leader(START_EPOCH)
        .build()
    )
    response = update(context, 2)
    assert response.error_code == Errors.NOT_LEADER_OR_FOLLOWER


def test_update_voter_before_the_leader_committed_in_its_epoch() -> None:
    """Kafka's ``testUpdateVoterWithoutFencedPreviousLeaders``."""
    context = leader(1, 2, fenced=False)
    assert update(context, 2, listeners=another_listener(2)).error_code == (
        Errors.REQUEST_TIMED_OUT
    )


def test_update_voter_while_an_add_is_pending() -> None:
    """Kafka's ``testUpdateVoterWithPendingAddVoter``."""
    context = leader(1, 2)
    context.fetch_at_log_end(3)
    context.deliver_request(add_voter_request(3), ADMIN_ID)
    ask_api_versions(context, 3)
    assert update(context, 2, listeners=another_listener(2)).error_code == (
        Errors.REQUEST_TIMED_OUT
    )


def test_update_voter_under_kraft_version_0_is_kept_for_the_upgrade() -> None:
    """KAFKA-16538: under kraft.version 0 a static voter reports its directory id and
    listeners with UpdateRaftVoter; the leader answers NONE and keeps it for the upgrade to
    kraft.version 1, appending nothing. A report without a directory id is INVALID_REQUEST; one
    from a replica that is not a voter, VOTER_NOT_FOUND."""
    context = static_leader(1, 2)
    end = context.log_end_offset
    assert update(context, 2, listeners=another_listener(2)).error_code == Errors.NONE
    assert context.log_end_offset == end
    assert context.client.kraft_version == 0
    assert context.voter_set == VoterSet.from_static(voter_endpoints((1, 2)))
    no_directory = update(context, replica_key(2, directory=False), listeners=another_listener(2))
    assert no_directory.error_code == Errors.INVALID_REQUEST
    assert update(context, 3).error_code == Errors.VOTER_NOT_FOUND


# =============================================================================================
# ApiVersions
# =============================================================================================
def test_every_replica_answers_api_versions() -> None:
    """KIP-853: the leader asks a prospective voter for its ApiVersions, so every replica --
    leader, follower, unattached, observer -- answers with the kraft.version range it
    supports (0..1)."""
    contexts: list[RaftTestContext[bytes]] = [
        leader(1, 2),
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2))
        .with_elected_leader(START_EPOCH, 2)
        .build(),
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2))
        .with_unknown_leader(START_EPOCH)
        .build(),
        RaftClientBuilder(4, voters=())
        .with_bootstrap_voters(voter_set(1, 2))
        .with_local_directory_id(uuid.uuid4())
        .build(),
        RaftClientBuilder(LOCAL, voters=(1, 2)).build(),  # kraft.version 0
    ]
    for context in contexts:
        context.sent_responses()
        correlation_id = context.deliver_request(ApiVersionsRequest(), source=1000)
        context.poll()
        response = context.response_to(correlation_id, ApiVersionsResponse)
        assert response is not None, context.client
        assert response.error_code == Errors.NONE
        assert response.feature_range("kraft.version") == (0, 1)
        keys = {api.api_key for api in response.api_keys}
        assert {ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER, ApiKey.UPDATE_RAFT_VOTER} <= keys


# =============================================================================================
# A voter publishes its own listeners
# =============================================================================================
LOCAL_LISTENERS = (("CONTROLLER", "localhost", 9991), ("ANOTHER_LISTENER", "localhost", 8991))


def follow_for(context: RaftTestContext[bytes], ms: int) -> list[UpdateRaftVoterRequest]:
    """As leader 2 of epoch 4, answer every request the follower sends at once (fetches with
    nothing new), for ``ms`` of time in steps of 100 ms; the UpdateRaftVoter requests it
    sent."""
    updates: list[UpdateRaftVoterRequest] = []
    for _ in range(ms // 100):
        context.poll_until_idle()
        for request in context.sent_requests():
            body = request.body
            assert request.destination == 2, request
            if isinstance(body, UpdateRaftVoterRequest):
                updates.append(body)
                context.deliver_response(
                    request, UpdateRaftVoterResponse(current_leader=LeaderIdAndEpoch(2, 4))
                )
            elif isinstance(body, FetchRequest):
                context.deliver_response(request, fetch_response(4, 2, high_watermark=0))
        context.poll_until_idle()
        context.advance(100)
    return updates


def test_a_follower_publishes_listeners_the_voter_set_lacks() -> None:
    """Kafka's ``testFollowerSendsUpdateVoter``: a voter whose listeners (or kraft.version
    range) differ from its entry in the voter set sends UpdateRaftVoter to its leader, after a
    few fetch rounds; then it goes on fetching."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2, 3))
        .with_local_endpoints(LOCAL_LISTENERS)
        .with_elected_leader(4, 2)
        .build()
    )
    updates = follow_for(context, 5 * context.config.fetch_timeout_ms)
    assert updates, "no UpdateRaftVoter sent"
    update_request = updates[0]
    assert (update_request.current_leader_epoch, update_request.voter_id) == (4, LOCAL)
    assert update_request.voter_directory_id == replica_key(LOCAL).directory_id
    assert tuple((e.name, e.host, e.port) for e in update_request.listeners) == LOCAL_LISTENERS
    assert (
        update_request.min_supported_kraft_version,
        update_request.max_supported_kraft_version,
    ) == (0, 1)
    assert context.role == "Follower" and context.leader_id == 2


def test_a_follower_whose_entry_is_current_sends_no_update() -> None:
    """Kafka's ``testFollowerSendsUpdateVoterWhenDifferent``: nothing to publish, no
    UpdateRaftVoter."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2, 3))
        .with_elected_leader(4, 2)
        .build()
    )
    assert follow_for(context, 5 * context.config.fetch_timeout_ms) == []


def test_a_new_leader_publishes_its_own_listeners() -> None:
    """Kafka's ``testLeaderUpdatesVoter``: a leader whose listeners differ from its entry in
    the voter set writes the updated set when its epoch starts."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2))
        .with_local_endpoints(LOCAL_LISTENERS)
        .with_unknown_leader(START_EPOCH)
        .build()
    )
    context.become_leader()
    context.fetch_at_log_end(2)
    assert context.high_watermark == context.log_end_offset
    assert context.voter_set.endpoints(LOCAL) == LOCAL_LISTENERS
    assert context.voter_set.ids == frozenset({1, 2})


# =============================================================================================
# Joining, and voters from a downloaded snapshot
# =============================================================================================
def test_a_joining_observer_learns_the_voters_from_the_log() -> None:
    """``--no-initial-controllers``: a replica formatted with kraft.version 1 and no voters
    finds the leader through its bootstrap servers and learns the voter set from the records
    it fetches; named in it, it is a voter."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(4, voters=())
        .with_kraft_version(1)
        .with_local_directory_id(replica_key(4).directory_id or uuid.uuid4())
        .with_config(bootstrap_servers=(ConfigEndpoint("localhost", 9991),))
        .build()
    )
    assert context.client.kraft_version == 1 and context.client.voter_ids == frozenset()
    assert not context.client.is_voter
    sent = context.poll_until_request(FetchRequest)
    assert [r.destination for r in sent] == [bootstrap_server_id(0)]
    # "The leader is 1, in epoch 5, at localhost:9991" (the Fetch response's NodeEndpoints).
    leader_at = (NodeEndpoint(1, "localhost", 9991),)
    context.deliver_response(sent[0], fetch_response(5, 1, node_endpoints=leader_at))
    context.poll()
    assert (context.leader_id, context.epoch) == (1, 5)

    sent = context.poll_until_request(FetchRequest)
    assert [(r.destination, r.destination_address) for r in sent] == [(1, ("localhost", 9991))]
    records = control_batch(
        0, 5, [KRaftVersionRecord(0, 1), voter_set(1, 2, 3).to_record()], timestamp_ms=0
    )
    context.deliver_response(sent[0], fetch_response(5, 1, records, high_watermark=2))
    context.poll()
    assert context.client.voter_ids == frozenset({1, 2, 3}) and not context.client.is_voter

    sent = context.poll_until_request(FetchRequest)
    added = control_batch(2, 5, [voter_set(1, 2, 3, 4).to_record()], timestamp_ms=0)
    context.deliver_response(sent[0], fetch_response(5, 1, added, high_watermark=2))
    context.poll()
    assert context.client.is_voter


def test_a_downloaded_snapshot_brings_its_voter_set() -> None:
    """KIP-853: a follower that installs the leader's snapshot takes the kraft.version and
    voter set it holds after its header (the log below it is gone)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2))
        .with_elected_leader(5, 2)
        .build()
    )
    snapshot_id = OffsetAndEpoch(10, 4)
    frozen: list[Any] = []
    writer = SnapshotWriter(
        MemoryRawSnapshotWriter(snapshot_id, on_freeze=frozen.append),
        BytesSerde(),
        last_contained_log_timestamp_ms=0,
        timestamp_ms=0,
        control_messages=[KRaftVersionRecord(0, 1), voter_set(1, 2, 3).to_record()],
    )
    writer.append([b"state"])
    writer.freeze()
    data: bytes = frozen[0].records()

    sent = context.poll_until_request(FetchRequest)
    context.deliver_response(sent[0], fetch_response(5, 2, snapshot_id=snapshot_id))
    context.poll()
    request, body = context.single_sent_request(FetchSnapshotRequest)
    assert body.position == 0
    context.deliver_response(request, fetch_snapshot_response(5, 2, snapshot_id, data, 0))
    context.poll()
    assert context.log.latest_snapshot_id == snapshot_id
    assert context.client.voter_ids == frozenset({1, 2, 3})
    assert context.client.kraft_version == 1


def test_the_new_voter_set_counts_the_votes() -> None:
    """KIP-853: a candidate whose log names voters {1, 2, 3} (uncommitted) wins with voter
    3's vote alone -- a majority of that set, though 3 is in no earlier one."""
    context = follower_with_voters_record(voter_set(1, 2, 3))
    context.expire_election_timeout()
    for _ in range(2):  # the pre-vote, then the vote
        sent = context.poll_until_request(VoteRequest)
        for request in sent:
            body = request.body
            assert isinstance(body, VoteRequest)
            if request.destination == 3:
                context.deliver_response(request, vote_response(body.replica_epoch, granted=True))
        context.poll_until_idle()
        if context.role == "Leader":
            break
    assert context.role == "Leader"


def test_a_new_voter_is_caught_up_only_under_its_own_directory_id() -> None:
    """Kafka's ``LeaderState``: replicas are told apart by id and directory id; the fetches of
    another disk of replica 3 do not make the new voter caught up."""
    context = leader(1, 2)
    context.deliver_request(
        context.fetch_request(
            context.epoch,
            3,
            context.log_end_offset,
            context.log.last_fetched_epoch,
            replica_directory_id=OTHER_DISK,
        ),
        3,
        source_directory_id=OTHER_DISK,
    )
    context.poll()
    context.sent_responses()
    assert add_error(context, 3) == Errors.REQUEST_TIMED_OUT


# =============================================================================================
# Changes seen while following, and DescribeQuorum
# =============================================================================================
def follower_of_2(
    local: int = LOCAL, bootstrap: tuple[int, ...] = (1, 2, 3)
) -> RaftTestContext[bytes]:
    """Replica ``local`` follows leader 2 in epoch 5, bootstrap voters ``bootstrap``."""
    return (
        RaftClientBuilder(local, voters=())
        .with_bootstrap_voters(voter_set(*bootstrap))
        .with_local_directory_id(replica_key(local).directory_id or uuid.uuid4())
        .with_elected_leader(5, 2)
        .build()
    )


def is_voter(context: RaftTestContext[bytes]) -> bool:
    """Whether the client is a voter now (a call, so that the type checker does not narrow a
    property across the polls that change it)."""
    return context.client.is_voter


def fetch_voters_record(context: RaftTestContext[bytes], voters: VoterSet) -> None:
    """As leader 2, answer the follower's Fetch with a VotersRecord at its log end."""
    sent = context.poll_until_request(FetchRequest)
    records = control_batch(context.log_end_offset, 5, [voters.to_record()], timestamp_ms=0)
    context.deliver_response(sent[0], fetch_response(5, 2, records, high_watermark=0))
    context.poll()


def test_a_follower_removed_while_following_stops_campaigning() -> None:
    """KIP-853: a voter that fetches the VotersRecord removing it is an observer at once: its
    leader's silence no longer makes it start an election."""
    context = follower_of_2()
    assert is_voter(context)
    fetch_voters_record(context, voter_set(2, 3))
    assert not is_voter(context)
    context.advance(2 * context.config.fetch_timeout_ms)
    context.poll_until_idle()
    assert context.role not in ("Prospective", "Candidate", "Leader")
    assert context.sent_requests(VoteRequest) == []


def test_an_observer_added_while_following_campaigns_when_its_leader_is_silent() -> None:
    """KIP-853: an observer that fetches the VotersRecord adding it is a voter at once, with
    a voter's fetch timeout: when the leader goes silent it starts an election."""
    context = follower_of_2(local=4)
    assert not is_voter(context)
    fetch_voters_record(context, voter_set(1, 2, 3, 4))
    assert is_voter(context)
    context.advance(2 * context.config.fetch_timeout_ms)
    sent = context.poll_until_request(VoteRequest)
    assert sorted(r.destination for r in sent) == [1, 2, 3]


def test_describe_quorum_reports_the_voter_set_in_force() -> None:
    """KIP-853 (DescribeQuorum v2): the leader describes the latest voter set, with directory
    ids and each voter's listeners; a replica being added moves from the observers to the
    voters once its VotersRecord is appended."""
    context = leader(1, 2)
    context.fetch_at_log_end(3)

    def describe() -> DescribeQuorumResponse:
        response = context.admin_call(DescribeQuorumRequest(), DescribeQuorumResponse)
        assert response is not None
        return response

    before = describe()
    assert [(v.replica_id, v.replica_directory_id) for v in before.current_voters] == [
        (1, replica_key(1).directory_id),
        (2, replica_key(2).directory_id),
    ]
    assert [o.replica_id for o in before.observers] == [3]

    start_add(context, 3)
    after = describe()
    assert [v.replica_id for v in after.current_voters] == [1, 2, 3]
    assert after.current_voters[2].replica_directory_id == replica_key(3).directory_id
    assert after.observers == ()
    nodes = {n.node_id: n.listeners for n in after.nodes}
    assert nodes[3] == listeners_of(3)


def test_replace_a_failed_voter_with_a_new_disk() -> None:
    """KIP-853's replacement of a failed controller: voter 3's disk is lost; replica 3 comes
    back with a new directory id, fetching as an observer (it is not the voter (3, old disk));
    the old voter is removed, then the new replica added -- each change committed by the set
    it makes."""
    context = leader(1, 2, ReplicaKey(3, OTHER_DISK))
    context.fetch_at_log_end(3)  # replica 3 with its new disk: an observer
    assert not context.voter_set.is_voter(replica_key(3))

    removal = context.deliver_request(remove_voter_request(ReplicaKey(3, OTHER_DISK)), ADMIN_ID)
    context.poll_until_idle()
    assert context.voter_set == voter_set(1, 2)
    context.fetch_at_log_end(2)
    context.poll_until_idle()
    removed = context.response_to(removal, RemoveRaftVoterResponse)
    assert removed is not None and removed.error_code == Errors.NONE

    # The BeginQuorumEpoch the leader sent the dead voter 3 times out; then the new replica
    # 3, caught up, is asked for its ApiVersions.
    context.advance(context.config.request_timeout_ms)
    context.poll_until_idle()
    context.fetch_at_log_end(2)
    context.fetch_at_log_end(3)
    addition = start_add(context, 3)
    assert context.voter_set == voter_set(1, 2, 3)
    context.fetch_at_log_end(3)
    context.poll_until_idle()
    added = context.response_to(addition, AddRaftVoterResponse)
    assert added is not None and added.error_code == Errors.NONE


def test_update_voter_without_the_default_listener() -> None:
    """Kafka's ``UpdateVoterHandler``: the new listeners must include the controller listener
    the quorum uses; INVALID_REQUEST."""
    context = leader(1, 2)
    other = (Endpoint("NOT_THE_DEFAULT", "localhost", 8992),)
    assert update(context, 2, listeners=other).error_code == Errors.INVALID_REQUEST
    assert context.voter_set == voter_set(1, 2)


def test_add_voter_whose_api_versions_never_come() -> None:
    """Kafka's ``AddVoterHandler``: without an ApiVersions answer the change ends with
    REQUEST_TIMED_OUT at its timeout, and nothing is appended."""
    context = leader(1, 2)
    timeout = context.config.request_timeout_ms
    context.fetch_at_log_end(3)
    end = context.log_end_offset
    correlation_id = context.deliver_request(add_voter_request(3, timeout_ms=timeout), ADMIN_ID)
    ask_api_versions(context, 3)
    for _ in range(4):  # retried ApiVersions go unanswered too
        context.advance(timeout // 4)
        context.poll_until_idle()
        context.sent_requests(ApiVersionsRequest)
    response = context.response_to(correlation_id, AddRaftVoterResponse)
    assert response is not None and response.error_code == Errors.REQUEST_TIMED_OUT
    assert context.log_end_offset == end and context.voter_set == voter_set(1, 2)


# =============================================================================================
# End to end: a LocalCluster under kraft.version 1
# =============================================================================================
def converging(cluster: LocalCluster[bytes]) -> tuple[Any, Any, Any]:
    """Predicates over ``cluster``: a leader's id, everyone has committed an offset, everyone
    uses the voter set of these ids."""

    def leader() -> int:
        node = cluster.leader()
        assert node is not None
        return node

    def everyone_has(offset: int | None) -> bool:
        assert offset is not None
        return all((c.high_watermark or 0) > offset for c in cluster.nodes.values())

    def agree(ids: set[int]) -> bool:
        return all(c.voter_ids == frozenset(ids) for c in cluster.nodes.values())

    return leader, everyone_has, agree


def test_a_cluster_grows_and_shrinks_and_keeps_every_commit() -> None:
    """KIP-853 end to end, in memory: three bootstrapped voters add a fourth (a new node with
    an empty disk, caught up first), then remove a follower; every node converges on each
    voter set, and every committed record reaches every node."""
    cluster: LocalCluster[bytes] = LocalCluster(voters=3, seed=3, kraft_version=1)
    leader, everyone_has, agree = converging(cluster)
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    first = cluster.append([b"a", b"b"])
    assert cluster.run_until(lambda: everyone_has(first), 5_000)

    new = cluster.add_node()
    assert not cluster.nodes[new].is_voter
    assert cluster.run_until(lambda: cluster.listeners[new].records == [b"a", b"b"], 10_000)
    assert cluster.add_voter(new) == "NONE"
    assert cluster.run_until(lambda: agree({1, 2, 3, 4}), 10_000)
    assert cluster.nodes[new].is_voter

    victim = min({1, 2, 3} - {leader()})
    assert cluster.remove_voter(victim) == "NONE"
    assert cluster.run_until(lambda: agree({1, 2, 3, 4} - {victim}), 10_000)
    assert not cluster.nodes[victim].is_voter
    last = cluster.append([b"c"])
    assert cluster.run_until(lambda: everyone_has(last), 10_000)
    for listener in cluster.listeners.values():
        assert listener.records == [b"a", b"b", b"c"]


def test_a_grown_cluster_elects_with_the_new_majority() -> None:
    """KIP-853 end to end: two bootstrapped voters add a third; when the leader is lost, the
    other old voter and the new one are a majority of {1, 2, 3} (not of the old {1, 2}) and
    elect a leader that commits."""
    cluster: LocalCluster[bytes] = LocalCluster(voters=2, seed=5, kraft_version=1)
    leader, _, agree = converging(cluster)
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    new = cluster.add_node()
    assert cluster.run_until(lambda: cluster.nodes[new].high_watermark is not None, 10_000)
    assert cluster.add_voter(new) == "NONE"
    assert cluster.run_until(lambda: agree({1, 2, 3}), 10_000)

    first = leader()
    cluster.disconnected.add(first)
    assert cluster.run_until(lambda: cluster.leader() not in (None, first), 30_000)
    others = [n for n in cluster.nodes if n != first]
    last = cluster.append([b"after"])
    assert last is not None
    assert cluster.run_until(
        lambda: all((cluster.nodes[n].high_watermark or 0) > last for n in others), 10_000
    )
    assert cluster.listeners[new].records == [b"after"]


def test_a_cluster_carries_on_after_its_leader_removes_itself() -> None:
    """KIP-853 end to end: the leader removes itself; once that commits it resigns, the
    operator stops it, and the remaining voters elect a leader among themselves that commits
    new records."""
    cluster: LocalCluster[bytes] = LocalCluster(voters=3, seed=3, kraft_version=1)
    leader, everyone_has, _ = converging(cluster)
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    committed = cluster.append([b"a"])
    assert cluster.run_until(lambda: everyone_has(committed), 5_000)
    first = leader()
    assert cluster.remove_voter(first) == "NONE"
    assert not cluster.nodes[first].is_leader and not cluster.nodes[first].is_voter
    cluster.disconnected.add(first)
    assert cluster.run_until(lambda: cluster.leader() not in (None, first), 30_000)
    others = [n for n in cluster.nodes if n != first]
    last = cluster.append([b"b"])
    assert last is not None
    assert cluster.run_until(
        lambda: all((cluster.nodes[n].high_watermark or 0) > last for n in others), 10_000
    )
    assert all(cluster.nodes[n].voter_ids == frozenset(others) for n in others)


def test_voters_left_by_a_removed_leader_elect_a_new_one() -> None:
    """KIP-996 with KIP-853: a Prospective keeps the leader it followed (Kafka's
    ``ProspectiveState`` retains its leader and endpoints), so a pre-vote answer naming that
    leader -- now removed, so absent from the voter set -- is no news; granted by a majority of
    the new set {1, 3}, the replica campaigns instead of following the removed leader again."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters=())
        .with_bootstrap_voters(voter_set(1, 2, 3))
        .append_to_log(4, [voters_record(voter_set(1, 3))], control=True)
        .with_elected_leader(4, 2)
        .build()
    )
    assert context.client.voter_ids == frozenset({1, 3})
    context.expire_fetch_timeout()
    context.advance(1)
    sent = context.poll_until_request(VoteRequest)
    assert [r.destination for r in sent] == [3]
    body = sent[0].body
    assert isinstance(body, VoteRequest) and body.pre_vote
    removed_leader = (NodeEndpoint(2, "localhost", 9992),)
    context.deliver_response(
        sent[0],
        vote_response(body.replica_epoch, granted=True, leader_id=2, node_endpoints=removed_leader),
    )
    context.poll_until_idle()
    assert context.role in ("Candidate", "Leader"), context.client
    assert context.epoch == 5
