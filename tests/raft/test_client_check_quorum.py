"""Check-quorum: a leader that no majority of voters fetches from resigns.

docs/protocol.md §1.6: the check-quorum timer runs for 1.5 x fetch.timeout.ms; it restarts when,
within the interval, a majority of the voters has fetched (the leader counts implicitly). On
expiry the leader resigns, naming the other voters by fetch offset, descending, as its
preferred successors. It never expires for a single voter. §1.3: only fetches that pass the
leader-only validation count (a fenced or unknown epoch does not), and observers never count.

Mirrors Kafka's testLeaderShouldResignLeadershipIfNotGetFetchRequestFromMajorityVoters and
testLeaderShouldNotResignLeadershipIfOnlyOneVoters (``KafkaRaftClientTest``).
"""

from __future__ import annotations

import pytest

from kraft.log.quorum_state import ElectionState
from kraft.protocol.errors import Errors
from kraft.protocol.messages import EndQuorumEpochRequest, FetchRequest, FetchResponse
from kraft.testing import LocalCluster, RaftClientBuilder, RaftTestContext

LOCAL = 1
FETCH_TIMEOUT_MS = 2_000
CHECK_QUORUM_MS = FETCH_TIMEOUT_MS * 3 // 2


def leader(voters: tuple[int, ...], **config: int) -> tuple[RaftTestContext[bytes], int]:
    """Replica 1 just elected leader (epoch 5) of ``voters``; the clock is at the election."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, voters)
        .with_unknown_leader(4)
        .with_config(fetch_timeout_ms=FETCH_TIMEOUT_MS, **config)
        .build()
    )
    epoch = context.become_leader()
    context.sent_requests()
    return context, epoch


def deliver_fetch(
    context: RaftTestContext[bytes],
    replica: int,
    epoch: int,
    offset: int = 1,
    last_epoch: int | None = None,
) -> FetchResponse:
    """Deliver a Fetch (no long poll) from ``replica`` and return the answer."""
    context.deliver_request(
        FetchRequest(
            replica_id=replica,
            current_leader_epoch=epoch,
            fetch_offset=offset,
            last_fetched_epoch=epoch if last_epoch is None else last_epoch,
            max_wait_ms=0,
        ),
        replica,
    )
    context.poll()
    [response] = context.sent_responses(FetchResponse)
    assert isinstance(response.body, FetchResponse)
    return response.body


def still_leader_until(context: RaftTestContext[bytes], deadline_ms: int) -> None:
    """Assert the client leads up to ``deadline_ms`` - 1 and has resigned at ``deadline_ms``."""
    now = context.clock.now_ms()
    assert deadline_ms > now
    context.advance(deadline_ms - 1 - now)
    context.poll()
    assert context.role == "Leader", f"resigned before {deadline_ms}"
    context.advance(1)
    context.poll()
    assert context.role == "Resigned", f"still {context.role} at {deadline_ms}"


def test_leader_resigns_when_no_voter_fetches_for_one_and_a_half_fetch_timeouts() -> None:
    """§1.6: without fetches from a majority, the leader resigns 1.5 x F after its election."""
    context, epoch = leader((1, 2, 3))
    elected_at = context.clock.now_ms()
    still_leader_until(context, elected_at + CHECK_QUORUM_MS)
    assert context.epoch == epoch
    assert context.leader_id == LOCAL


def test_check_quorum_timeout_follows_the_fetch_timeout() -> None:
    """§1.6: the interval is 1.5 x fetch.timeout.ms, whatever F is configured to."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1, 2, 3))
        .with_unknown_leader(4)
        .with_config(fetch_timeout_ms=5_000)
        .build()
    )
    context.become_leader()
    still_leader_until(context, context.clock.now_ms() + 7_500)


def test_fetches_from_a_majority_restart_the_check_quorum_timer() -> None:
    """§1.6: each fetch that completes a majority (leader included) restarts the interval;
    an observer's fetch does not (Kafka:
    testLeaderShouldResignLeadershipIfNotGetFetchRequestFromMajorityVoters)."""
    context, epoch = leader((1, 2, 3))
    half = CHECK_QUORUM_MS // 2

    context.advance(half)
    context.poll()
    assert context.role == "Leader"
    assert deliver_fetch(context, 2, epoch).partition_error_code == Errors.NONE

    context.advance(half)
    context.poll()
    assert context.role == "Leader"
    assert deliver_fetch(context, 3, epoch).partition_error_code == Errors.NONE

    context.advance(half)
    context.poll()
    assert context.role == "Leader"
    # An observer fetches: the timer is not restarted.
    assert deliver_fetch(context, 4, epoch).partition_error_code == Errors.NONE

    context.advance(half)
    context.poll()
    assert context.role == "Resigned"
    assert context.epoch == epoch


@pytest.mark.parametrize("voters", [(1, 2), (1, 2, 3), (1, 2, 3, 4), (1, 2, 3, 4, 5)])
def test_fewer_than_a_majority_of_fetching_voters_do_not_restart_the_timer(
    voters: tuple[int, ...],
) -> None:
    """§1.6: a majority counts the leader plus ``len(voters) // 2`` other voters; one fewer is
    not enough."""
    context, epoch = leader(voters)
    elected_at = context.clock.now_ms()
    others = list(voters[1:])
    needed = len(voters) // 2
    context.advance(1_000)
    for replica in others[: needed - 1]:
        assert deliver_fetch(context, replica, epoch).partition_error_code == Errors.NONE
    still_leader_until(context, elected_at + CHECK_QUORUM_MS)


@pytest.mark.parametrize("voters", [(1, 2), (1, 2, 3), (1, 2, 3, 4), (1, 2, 3, 4, 5)])
def test_a_majority_of_fetching_voters_restarts_the_timer(voters: tuple[int, ...]) -> None:
    """§1.6: once the leader plus ``len(voters) // 2`` other voters have fetched, the interval
    restarts from that fetch."""
    context, epoch = leader(voters)
    others = list(voters[1:])
    needed = len(voters) // 2
    context.advance(1_000)
    for replica in others[:needed]:
        assert deliver_fetch(context, replica, epoch).partition_error_code == Errors.NONE
    still_leader_until(context, context.clock.now_ms() + CHECK_QUORUM_MS)


def test_voters_fetching_at_different_times_within_the_interval_form_a_majority() -> None:
    """§1.6: the majority is counted over the interval, not at one instant: voter 2 early and
    voter 3 late together restart the timer (5 voters: 2 others are needed)."""
    context, epoch = leader((1, 2, 3, 4, 5))
    elected_at = context.clock.now_ms()
    context.advance(500)
    deliver_fetch(context, 2, epoch)
    context.advance(CHECK_QUORUM_MS - 600)  # 100 ms before the deadline
    deliver_fetch(context, 3, epoch)
    restarted_at = context.clock.now_ms()
    assert restarted_at == elected_at + CHECK_QUORUM_MS - 100
    still_leader_until(context, restarted_at + CHECK_QUORUM_MS)


def test_the_count_starts_afresh_after_each_restart() -> None:
    """§1.6: after the timer restarts, earlier fetches no longer count: in the new interval one
    more voter alone is not a majority of five."""
    context, epoch = leader((1, 2, 3, 4, 5))
    context.advance(500)
    deliver_fetch(context, 2, epoch)
    deliver_fetch(context, 3, epoch)
    restarted_at = context.clock.now_ms()
    context.advance(500)
    deliver_fetch(context, 4, epoch)
    still_leader_until(context, restarted_at + CHECK_QUORUM_MS)


def test_one_voter_fetching_repeatedly_is_not_a_majority() -> None:
    """§1.6: the majority counts distinct voters; the same voter fetching again and again does
    not restart the timer of a five-voter quorum."""
    context, epoch = leader((1, 2, 3, 4, 5))
    elected_at = context.clock.now_ms()
    for _ in range(5):
        context.advance(500)
        deliver_fetch(context, 2, epoch)
    still_leader_until(context, elected_at + CHECK_QUORUM_MS)


def test_fetches_with_a_stale_or_unknown_epoch_do_not_count() -> None:
    """§1.3 leader-only validation: a fetch answered FENCED_LEADER_EPOCH or
    UNKNOWN_LEADER_EPOCH is not a fetch from a follower of this leader and does not count."""
    context, epoch = leader((1, 2, 3))
    elected_at = context.clock.now_ms()
    context.advance(1_000)
    fenced = deliver_fetch(context, 2, epoch - 1, offset=0, last_epoch=0)
    assert fenced.partition_error_code == Errors.FENCED_LEADER_EPOCH
    unknown = deliver_fetch(context, 3, epoch + 1, offset=1, last_epoch=epoch)
    assert unknown.partition_error_code == Errors.UNKNOWN_LEADER_EPOCH
    still_leader_until(context, elected_at + CHECK_QUORUM_MS)


def test_anonymous_fetches_do_not_count() -> None:
    """§1.6 / §1.8: only voters count; an anonymous fetcher (replica id -1) is not a voter."""
    context, epoch = leader((1, 2, 3))
    elected_at = context.clock.now_ms()
    context.advance(1_000)
    assert deliver_fetch(context, -1, epoch).partition_error_code == Errors.NONE
    still_leader_until(context, elected_at + CHECK_QUORUM_MS)


def test_single_voter_never_resigns_by_check_quorum() -> None:
    """§1.6: check-quorum never expires for a single voter (Kafka:
    testLeaderShouldNotResignLeadershipIfOnlyOneVoters)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, (1,)).with_config(fetch_timeout_ms=FETCH_TIMEOUT_MS).build()
    )
    assert context.role == "Leader"
    epoch = context.epoch
    for _ in range(10):
        context.advance(CHECK_QUORUM_MS)
        context.poll()
    assert context.role == "Leader"
    assert context.epoch == epoch


def test_check_quorum_resignation_names_successors_by_fetch_offset() -> None:
    """§1.6: on expiry the successors are the other voters by fetch offset, descending; the
    Resigned leader sends them EndQuorumEpoch. Voter 3 fetched further than voter 2."""
    context, epoch = leader((1, 2, 3))
    context.advance(500)
    deliver_fetch(context, 3, epoch, offset=1)
    context.advance(500)
    deliver_fetch(context, 2, epoch, offset=0, last_epoch=0)
    still_leader_until(context, context.clock.now_ms() + CHECK_QUORUM_MS)
    context.poll()
    sent = context.sent_requests(EndQuorumEpochRequest)
    assert sorted(r.destination for r in sent) == [2, 3]
    for request in sent:
        assert isinstance(request.body, EndQuorumEpochRequest)
        assert request.body.leader_epoch == epoch
        assert [c.candidate_id for c in request.body.preferred_candidates] == [3, 2]


def test_check_quorum_resignation_is_not_persisted_and_leads_to_a_new_epoch() -> None:
    """§1.7: the Resigned state is not persisted; §1.6: after the election timeout the replica
    becomes Unattached in the next epoch."""
    context, epoch = leader((1, 2, 3))
    writes = list(context.store.writes)
    still_leader_until(context, context.clock.now_ms() + CHECK_QUORUM_MS)
    assert context.store.writes == writes
    assert context.stored_state() == ElectionState(epoch, leader_id=LOCAL)
    context.expire_election_timeout()
    context.poll()
    assert (context.role, context.epoch) == ("Unattached", epoch + 1)


def test_partitioned_leader_steps_down_and_the_others_elect_a_new_one() -> None:
    """§1.6 end to end: a leader cut off from the other voters resigns within 1.5 x F of its
    last majority fetch, while the connected voters elect a leader in a later epoch."""
    cluster: LocalCluster[bytes] = LocalCluster(3, fetch_timeout_ms=FETCH_TIMEOUT_MS)
    assert cluster.run_until(lambda: cluster.leader() is not None, 20_000)
    assert cluster.append([b"a"]) is not None
    cluster.run_for(1_000)
    old = cluster.leader()
    assert old is not None
    old_epoch = cluster.nodes[old].epoch
    cluster.disconnected.add(old)
    assert cluster.run_until(lambda: not cluster.nodes[old].is_leader, CHECK_QUORUM_MS)

    def new_leader() -> bool:
        new = cluster.leader()
        return new is not None and new != old and cluster.nodes[new].epoch > old_epoch

    assert cluster.run_until(new_leader, 30_000)
    assert not cluster.nodes[old].is_leader
