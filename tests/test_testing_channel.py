"""The one in-memory test channel: ``MemoryChannel`` (the simulator's) and ``MockNetworkChannel``
(kraft.testing's view of it)."""

from __future__ import annotations

from kraft.protocol.envelope import OutboundRequest, OutboundResponse
from kraft.protocol.messages import FetchRequest, FetchResponse, VoteRequest, VoteResponse
from kraft.raft.memory_channel import MemoryChannel
from kraft.simulation.node import SimNode
from kraft.testing import MockNetworkChannel, fetch_request, vote_request

VOTE = OutboundRequest(1, 2, vote_request(1, 1, 0, 0), 0)
FETCH = OutboundRequest(2, 3, fetch_request(1, 1, 0, 0), 0)
ANSWER = OutboundResponse(7, 2, VoteResponse(leader_epoch=1, vote_granted=True))
FETCH_ANSWER = OutboundResponse(8, 3, FetchResponse())


def test_the_memory_channel_keeps_requests_and_responses_in_the_order_sent() -> None:
    """The simulator routes a node's messages in the order the client sent them."""
    channel = MemoryChannel(first_correlation_id=500)
    assert [channel.new_correlation_id() for _ in range(3)] == [500, 501, 502]
    channel.send(VOTE)
    channel.respond(ANSWER)
    channel.send(FETCH)
    assert channel.drain() == [VOTE, ANSWER, FETCH]
    assert channel.outbox == [] and channel.drain() == []


def test_the_mock_channel_drains_by_envelope_and_body_type() -> None:
    channel = MockNetworkChannel()
    assert channel.new_correlation_id() == 1
    for message in (VOTE, ANSWER, FETCH, FETCH_ANSWER):
        if isinstance(message, OutboundRequest):
            channel.send(message)
        else:
            channel.respond(message)
    assert channel.requests == [VOTE, FETCH]
    assert channel.responses == [ANSWER, FETCH_ANSWER]
    assert channel.drain_requests(FetchRequest) == [FETCH]
    assert channel.drain_responses(VoteResponse) == [ANSWER]
    assert channel.outbox == [VOTE, FETCH_ANSWER]  # the rest, still in order
    assert channel.drain_requests(VoteRequest) == [VOTE]
    assert channel.drain_responses() == [FETCH_ANSWER]
    assert channel.outbox == []


def test_the_simulator_and_the_tests_share_one_channel() -> None:
    assert issubclass(MockNetworkChannel, MemoryChannel)
    assert type(SimNode(1, frozenset({1})).channel) is MemoryChannel
