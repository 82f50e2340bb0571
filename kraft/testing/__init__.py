"""Test doubles and harnesses for code built on the Raft core (and for kraft's own tests),
as ``trio.testing`` is for trio. docs/testing.md shows each at work.

- :class:`ManualClock`: virtual time that moves only when told to.
- :class:`MockNetworkChannel`: records what a client sends and answers.
- :class:`MockableRandom`: a seeded ``random.Random`` whose next draws a test fixes, so a
  backoff or an election timeout can be asserted exactly.
- :class:`RecordingListener`: keeps every commit, snapshot and leader change a client delivers.
- Message builders (:func:`vote_request`, :func:`fetch_response`, ...): what a peer would send;
  :func:`add_voter_request`, :func:`api_versions_response`, :func:`voter_set`, ... for dynamic
  voters (KIP-853).
- :class:`RaftClientBuilder` / :class:`RaftTestContext`: put one ``KafkaRaftClient`` in a given
  situation, then drive it message by message. A Kafka-style client test is a few lines.
- :class:`LocalCluster`: a few real clients wired together in memory, delivering every message
  at once and in a fixed order: elections and replication end to end, deterministically. The
  simulator (:mod:`kraft.simulation`, docs/simulation.md) adds latency, loss and faults.

Everything here is deterministic: the same calls give the same results, run after run.
"""

from kraft.common.clock import ManualClock
from kraft.testing.channel import MockNetworkChannel
from kraft.testing.cluster import LocalCluster
from kraft.testing.context import ADMIN_ID, RaftClientBuilder, RaftTestContext
from kraft.testing.listener import RecordingListener
from kraft.testing.messages import (
    VOTER_PORT_BASE,
    add_voter_request,
    api_versions_response,
    begin_epoch_request,
    begin_epoch_response,
    end_epoch_response,
    fetch_request,
    fetch_response,
    fetch_snapshot_response,
    listeners_of,
    remove_voter_request,
    replica_key,
    update_voter_request,
    vote_request,
    vote_response,
    voter_endpoint,
    voter_node,
    voter_set,
)
from kraft.testing.randomness import MockableRandom

__all__ = [
    "ADMIN_ID",
    "VOTER_PORT_BASE",
    "LocalCluster",
    "ManualClock",
    "MockNetworkChannel",
    "MockableRandom",
    "RaftClientBuilder",
    "RaftTestContext",
    "RecordingListener",
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
    "voter_node",
    "voter_set",
]
