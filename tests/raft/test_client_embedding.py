"""Commit futures, read barriers, leader transfer and forwarding (kraft/raft/embedding.py):
``KafkaRaftClient.append``, ``read_barrier`` and ``transfer_leadership`` in a LocalCluster
of real clients, with partitions where the outcome depends on them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kraft import StrSerde
from kraft.common.uuids import ZERO_UUID
from kraft.errors import (
    BufferAllocationError,
    IllegalStateError,
    LeaderTransferError,
    NotLeaderError,
    OperationTimeoutError,
    RecordBatchTooLargeError,
)
from kraft.log import MemoryLog
from kraft.protocol.envelope import InboundRequest, InboundResponse
from kraft.protocol.errors import Errors
from kraft.protocol.messages import ForwardAppendRequest, ForwardAppendResponse
from kraft.raft.commits import CommitTracker
from kraft.raft.forwarding import MAX_FORWARDED_BYTES, Forwarder
from kraft.raft.futures import RaftFuture
from kraft.testing import ADMIN_ID
from kraft.testing.channel import MockNetworkChannel
from kraft.testing.cluster import LocalCluster

TIMEOUT_MS = 30_000


def elected(cluster: LocalCluster[bytes]) -> int:
    assert cluster.run_until(lambda: cluster.leader() is not None, TIMEOUT_MS)
    leader = cluster.leader()
    assert leader is not None
    # The leader has committed in its epoch (its LeaderChange) and every voter follows it.
    client = cluster.nodes[leader]
    assert cluster.run_until(
        lambda: all(
            n.high_watermark is not None and n.high_watermark >= client.log_end_offset
            for n in cluster.nodes.values()
        ),
        TIMEOUT_MS,
    )
    return leader


def settle(cluster: LocalCluster[bytes], future: RaftFuture[int], ms: int = TIMEOUT_MS) -> None:
    assert cluster.run_until(future.done, ms), f"still pending: {future}"


def followers(cluster: LocalCluster[bytes], leader: int) -> list[int]:
    return [n for n, c in cluster.nodes.items() if n != leader and c.is_voter]


def delivered(cluster: LocalCluster[bytes], node: int) -> list[bytes]:
    return [r for batch in cluster.listeners[node].batches for r in batch.records]


@pytest.fixture
def cluster() -> LocalCluster[bytes]:
    return LocalCluster(3, 1, seed=7)


# -- commit futures ----------------------------------------------------------------------------


def test_an_append_on_the_leader_completes_once_committed_and_delivered(
    cluster: LocalCluster[bytes],
) -> None:
    leader = elected(cluster)
    client = cluster.nodes[leader]
    future = client.append([b"a", b"b"])
    seen_at_completion: list[list[bytes]] = []
    future.add_done_callback(lambda f: seen_at_completion.append(delivered(cluster, leader)))
    assert not future.done()
    settle(cluster, future)
    offset = future.result()
    assert client.high_watermark is not None and client.high_watermark > offset
    assert seen_at_completion[0][-2:] == [b"a", b"b"]  # the listener had them already
    assert cluster.logs[leader].epoch_at(offset) == client.epoch


@pytest.mark.parametrize("where", ["follower", "observer"])
def test_an_append_anywhere_is_forwarded_and_completes_where_it_was_made(
    cluster: LocalCluster[bytes], where: str
) -> None:
    leader = elected(cluster)
    node = followers(cluster, leader)[0] if where == "follower" else 4
    future = cluster.nodes[node].append([b"x"])
    settle(cluster, future)
    offset = future.result()
    assert delivered(cluster, node)[-1] == b"x"  # handed to this node's listener first
    record = cluster.logs[leader].read(offset, max_bytes=1 << 20).records
    assert record  # the leader's log holds the batch at that offset
    cluster.run_for(2_000)
    assert delivered(cluster, leader).count(b"x") == 1  # written once, never sent again


def test_a_forwarded_append_waits_for_a_leader_then_goes_to_it(
    cluster: LocalCluster[bytes],
) -> None:
    leader = elected(cluster)
    cluster.disconnected.add(leader)
    follower = followers(cluster, leader)[0]
    assert cluster.run_until(lambda: cluster.nodes[follower].leader_id != leader, TIMEOUT_MS)
    future = cluster.nodes[follower].append([b"during election"], timeout_ms=TIMEOUT_MS)
    settle(cluster, future)
    assert future.result() >= 0
    new_leader = cluster.leader()
    assert new_leader not in (None, leader)


def test_an_append_on_a_deposed_leader_fails_when_a_later_epoch_commits_without_it(
    cluster: LocalCluster[bytes],
) -> None:
    leader = elected(cluster)
    old = cluster.nodes[leader]
    cluster.disconnected.add(leader)
    lost = old.append([b"lost"], timeout_ms=10 * TIMEOUT_MS)
    assert cluster.run_until(lambda: cluster.leader() not in (None, leader), TIMEOUT_MS)
    new_leader = cluster.leader()
    settle(cluster, cluster.nodes[new_leader].append([b"kept"]))  # type: ignore[index]
    assert not lost.done()  # the old leader cannot know yet
    cluster.disconnected.discard(leader)
    settle(cluster, lost)
    exc = lost.exception()
    assert isinstance(exc, NotLeaderError)
    assert exc.leader_id == new_leader and exc.epoch > 0
    assert b"lost" not in delivered(cluster, leader)


def test_an_append_without_a_majority_times_out_with_its_outcome_unknown(
    cluster: LocalCluster[bytes],
) -> None:
    leader = elected(cluster)
    cluster.disconnected.update(followers(cluster, leader))
    future = cluster.nodes[leader].append([b"alone"], timeout_ms=500)
    settle(cluster, future)
    assert isinstance(future.exception(), OperationTimeoutError)
    assert isinstance(future.exception(), TimeoutError)


def test_a_batch_still_in_the_accumulator_fails_at_once_when_leadership_ends() -> None:
    cluster: LocalCluster[bytes] = LocalCluster(3, seed=3, append_linger_ms=60_000)
    leader = elected(cluster)
    client = cluster.nodes[leader]
    # prepare_append keeps its batch in the accumulator until schedule_prepared_append.
    future: RaftFuture[int] = RaftFuture()
    client._embedding.tracker.track_batch(  # the path append() takes, minus the scheduling
        future, client.prepare_append(client.epoch, [b"held"]), client.epoch, 10**9
    )
    client.resign(client.epoch)
    settle(cluster, future, 1_000)
    assert isinstance(future.exception(), NotLeaderError)


def test_bad_appends_fail_with_typed_errors(cluster: LocalCluster[bytes]) -> None:
    leader = elected(cluster)
    client = cluster.nodes[leader]
    with pytest.raises(ValueError, match="at least one record"):
        client.append([])
    with pytest.raises(ValueError, match="negative timeout"):
        client.append([b"x"], timeout_ms=-1)
    huge = b"x" * (cluster.config.max_batch_size_bytes + 1)
    assert isinstance(client.append([huge]).exception(), RecordBatchTooLargeError)
    follower = cluster.nodes[followers(cluster, leader)[0]]
    assert isinstance(follower.append([huge]).exception(), RecordBatchTooLargeError)


def test_forwarded_bytes_awaiting_an_answer_are_bounded(cluster: LocalCluster[bytes]) -> None:
    leader = elected(cluster)
    follower = followers(cluster, leader)[0]
    cluster.disconnected.add(follower)
    record = b"x" * (512 * 1024)
    futures = [
        cluster.nodes[follower].append([record], timeout_ms=60_000)
        for _ in range(MAX_FORWARDED_BYTES // len(record) + 1)
    ]
    assert [f.done() for f in futures[:-1]] == [False] * (len(futures) - 1)
    assert isinstance(futures[-1].exception(), BufferAllocationError)
    cluster.disconnected.discard(follower)
    for future in futures[:-1]:
        settle(cluster, future, 120_000)
        assert future.exception() is None or isinstance(future.exception(), OperationTimeoutError)


def test_a_forwarded_batch_the_serde_cannot_read_is_refused() -> None:
    cluster: LocalCluster[str] = LocalCluster(3, seed=5, serde=StrSerde())
    assert cluster.run_until(lambda: cluster.leader() is not None, TIMEOUT_MS)
    leader = cluster.leader()
    assert leader is not None
    request = ForwardAppendRequest(records=(b"\xff\xfe not utf-8",), timeout_ms=1000)
    now = cluster.clock.now_ms()
    cluster.queues[leader].add(InboundRequest(1, ADMIN_ID, ZERO_UUID, None, request, now))
    cluster.run_for(10)
    answer = cluster.admin_responses[1]
    assert isinstance(answer, ForwardAppendResponse)
    assert answer.error_code == Errors.INVALID_RECORD


def test_futures_fail_when_the_client_closes(cluster: LocalCluster[bytes]) -> None:
    leader = elected(cluster)
    cluster.disconnected.update(followers(cluster, leader))
    future = cluster.nodes[leader].append([b"x"], timeout_ms=60_000)
    barrier = cluster.nodes[leader].read_barrier(timeout_ms=60_000)
    cluster.run_for(10)
    cluster.nodes[leader].close()
    assert isinstance(future.exception(), IllegalStateError)
    assert isinstance(barrier.exception(), IllegalStateError)


# -- read barriers -----------------------------------------------------------------------------


def test_a_read_barrier_covers_every_acknowledged_write(cluster: LocalCluster[bytes]) -> None:
    leader = elected(cluster)
    write = cluster.nodes[4].append([b"w"])
    settle(cluster, write)
    for node in (leader, *followers(cluster, leader), 4):
        barrier = cluster.nodes[node].read_barrier()
        settle(cluster, barrier)
        assert barrier.result() >= write.result(), node
        assert b"w" in delivered(cluster, node), node  # delivered up to the barrier


def test_a_leader_cut_off_from_the_majority_confirms_no_read(
    cluster: LocalCluster[bytes],
) -> None:
    """A read on a leader that does not know it was deposed would be stale: the barrier
    needs a majority to answer in the leader's epoch after the call."""
    leader = elected(cluster)
    cluster.disconnected.update(followers(cluster, leader))
    barrier = cluster.nodes[leader].read_barrier(timeout_ms=200)  # below check-quorum
    settle(cluster, barrier)
    assert cluster.nodes[leader].is_leader  # it still believes it leads
    assert isinstance(barrier.exception(), OperationTimeoutError)


def test_a_read_barrier_waits_for_one_majority_round_trip(cluster: LocalCluster[bytes]) -> None:
    leader = elected(cluster)
    follower_ids = followers(cluster, leader)
    cluster.disconnected.add(follower_ids[0])
    barrier = cluster.nodes[leader].read_barrier()
    assert not barrier.done()  # not before one voter besides the leader answered
    settle(cluster, barrier, 1_000)  # the other follower answers: a majority of three
    assert barrier.result() >= 0


def test_a_read_barrier_fails_when_leadership_ends_first(cluster: LocalCluster[bytes]) -> None:
    leader = elected(cluster)
    cluster.disconnected.update(followers(cluster, leader))
    client = cluster.nodes[leader]
    barrier = client.read_barrier(timeout_ms=10 * TIMEOUT_MS)
    client.resign(client.epoch)
    settle(cluster, barrier, 1_000)
    assert isinstance(barrier.exception(), NotLeaderError)


# -- leader transfer ---------------------------------------------------------------------------


def test_leadership_moves_to_the_named_voter(cluster: LocalCluster[bytes]) -> None:
    leader = elected(cluster)
    target = followers(cluster, leader)[-1]
    transfer = cluster.nodes[leader].transfer_leadership(target)
    settle(cluster, transfer)
    assert transfer.result() == target == cluster.leader()


def test_leadership_moves_to_the_most_caught_up_voter_by_default(
    cluster: LocalCluster[bytes],
) -> None:
    leader = elected(cluster)
    behind, ahead = followers(cluster, leader)
    cluster.disconnected.add(behind)
    settle(cluster, cluster.nodes[leader].append([b"only two have it"]))
    cluster.disconnected.discard(behind)
    transfer = cluster.nodes[leader].transfer_leadership()
    settle(cluster, transfer)
    assert transfer.result() == ahead


@pytest.mark.parametrize(
    ("target", "why"),
    [
        (lambda leader, behind: leader, "is the leader already"),
        (lambda leader, behind: 4, "not a voter"),
        (lambda leader, behind: 99, "not a voter"),
        (lambda leader, behind: behind, "has not caught up"),
    ],
)
def test_a_transfer_to_anything_but_a_caught_up_voter_is_refused(
    cluster: LocalCluster[bytes], target: Callable[[int, int], int], why: str
) -> None:
    leader = elected(cluster)
    behind = followers(cluster, leader)[0]
    cluster.disconnected.add(behind)
    settle(cluster, cluster.nodes[leader].append([b"x"]))
    transfer = cluster.nodes[leader].transfer_leadership(target(leader, behind))
    exc = transfer.exception()
    assert isinstance(exc, LeaderTransferError) and why in str(exc)
    assert cluster.nodes[leader].is_leader


def test_only_the_leader_transfers(cluster: LocalCluster[bytes]) -> None:
    leader = elected(cluster)
    transfer = cluster.nodes[followers(cluster, leader)[0]].transfer_leadership()
    exc = transfer.exception()
    assert isinstance(exc, NotLeaderError) and exc.leader_id == leader


def test_a_followers_read_barrier_is_asked_again_of_the_next_leader(
    cluster: LocalCluster[bytes],
) -> None:
    leader = elected(cluster)
    follower = followers(cluster, leader)[0]
    cluster.disconnected.add(leader)  # the ReadIndex request is lost with the leader
    barrier = cluster.nodes[follower].read_barrier(timeout_ms=TIMEOUT_MS)
    settle(cluster, barrier)
    assert barrier.result() >= 0
    assert cluster.nodes[follower].leader_id != leader


def test_a_forwarded_write_answered_is_never_sent_or_appended_again() -> None:
    """Found by the simulator (kv_leader_transfers, seed 113): a replica that became leader
    while its forwarded write awaited local delivery appended it a second time."""
    channel = MockNetworkChannel()
    tracker = CommitTracker(MemoryLog(), lambda: (1, 1))
    forwarder = Forwarder(channel, tracker, lambda: (1, 1), lambda node: None, 1 << 20)
    future = forwarder.append((b"x",), deadline_ms=10_000)
    forwarder.poll(0, local_id=2)
    (request,) = channel.drain_requests()
    answer = ForwardAppendResponse(last_offset=5, batch_epoch=1)
    assert forwarder.handle_response(InboundResponse(request.correlation_id, 1, answer, 1), 1)
    assert forwarder.take_unsent() == []  # were this replica leader now, it must not append it
    forwarder.poll(2, local_id=2)
    assert channel.drain_requests() == []  # nor send it again
    assert not future.done()  # it waits for offset 5 to reach this replica's listeners
