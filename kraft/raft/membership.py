"""Following the voter set (KIP-853): what every replica does as voters come and go.

The leader's side of a change is ``kraft.raft.reconfig``. Here is the rest:

- :meth:`Membership.follow_changes` keeps the voter history in step with the log once per
  poll, and on a new voter set points an observer without configured bootstrap servers at the
  voters it now knows (Kafka uses ``controller.quorum.voters`` the same way).
- :meth:`Membership.address_of`: requests carry the address the voter set (or the leader's
  endpoints, or an AddRaftVoter request) gives their destination, so the runtime can reach a
  voter it was never configured with.
- A follower that is a voter sends UpdateRaftVoter to its leader when the voter set holds
  other listeners or another ``kraft.version`` range for it than its own (it moved, or was
  upgraded): at once in a new epoch, then at most every :data:`UPDATE_PERIOD_FACTOR` fetch
  timeouts. Under ``kraft.version`` 0 it sends it once per epoch, so that the leader learns
  its directory id for an upgrade (``kraft.raft.reconfig``).
- Auto-join (``QuorumConfig.auto_join``, Kafka's ``controller.quorum.auto.join.enable``): an
  observer of a ``kraft.version`` 1 quorum asks its leader to add it, with AddRaftVoter for
  itself -- after RemoveRaftVoter of a voter that has its id but another directory id (its
  disk was replaced) -- at most every :data:`UPDATE_PERIOD_FACTOR` fetch timeouts.

These requests take their turn on the connection to the leader (one request in flight per
destination) before the next Fetch.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kraft.common.uuids import ZERO_UUID
from kraft.config import QuorumConfig
from kraft.log.api import ReplicatedLog
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    Endpoint,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    Request,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
)
from kraft.raft.channel import NetworkChannel
from kraft.raft.quorum import QuorumState
from kraft.raft.reconfig import KRAFT_RANGE, Reconfiguration
from kraft.raft.requests import RequestManager
from kraft.raft.states import FollowerState

__all__ = ["UPDATE_PERIOD_FACTOR", "Membership"]

logger = logging.getLogger(__name__)

#: A follower checks its entry in the voter set (or an observer whether to join) every this
#: many fetch timeouts (Kafka: 3).
UPDATE_PERIOD_FACTOR = 3

MembershipResponse = UpdateRaftVoterResponse | AddRaftVoterResponse | RemoveRaftVoterResponse


class Membership:
    """A replica following the voter set of its log. See the module docstring."""

    def __init__(
        self,
        quorum: QuorumState[Any],
        config: QuorumConfig,
        requests: RequestManager,
        channel: NetworkChannel,
        reconfig: Reconfiguration[Any],
    ) -> None:
        self._quorum = quorum
        self._config = config
        self._requests = requests
        self._channel = channel
        self._reconfig = reconfig
        #: Without configured bootstrap servers an observer asks the voters it knows.
        self._bootstrap_from_voters = not config.bootstrap_servers
        self._changes_seen = -1
        #: When this follower next looks at its voter entry, and the epoch it last did; under
        #: kraft.version 0, the epoch in which its leader heard from it.
        self._due_ms = 0
        self._epoch = -1
        self._reported_epoch = -1
        requests.address_of = self.address_of

    # -- following the log -----------------------------------------------------------------
    def follow_changes(self, log: ReplicatedLog) -> bool:
        """Catch the voter history up with ``log``; True if the voter set changed since the
        last call (the caller re-counts the leader's voters)."""
        quorum = self._quorum
        history = quorum.history
        history.sync(log)
        if history.changes == self._changes_seen:
            return False
        self._changes_seen = history.changes
        self._due_ms = 0  # a new voter set: look at this replica's entry again at once
        voters = history.last_voter_set
        logger.info(
            "voters now %s (kraft.version %d); this replica is %s",
            voters,
            history.kraft_version,
            "a voter" if quorum.is_voter else "an observer",
        )
        if self._bootstrap_from_voters:
            self._requests.set_bootstrap_servers(sorted(v for v in voters if v != quorum.local_id))
        return True

    def address_of(self, destination: int) -> tuple[str, int] | None:
        """Where ``destination`` listens, as this replica knows it: the voter set, the
        leader's endpoints, or the listeners of a replica being added."""
        quorum = self._quorum
        endpoints = quorum.voter_set.endpoints(destination)
        if not endpoints and destination == quorum.leader_id:
            endpoints = quorum.current_leader_endpoints()
        if not endpoints:
            return self._reconfig.address_of(destination)
        _name, host, port = endpoints[0]
        return host, port

    # -- requests to the leader ------------------------------------------------------------
    def maybe_send_to_leader(self, state: FollowerState, now: int) -> int | None:
        """Send UpdateRaftVoter, or an auto-join request, to the leader if one is due; the
        milliseconds until the leader needs attention, or None: send the Fetch."""
        if state.epoch != self._epoch:
            self._epoch, self._due_ms = state.epoch, now
        if now < self._due_ms:
            return None
        request = self._due_request(state)
        if request is None:  # nothing to say until the voter set or the epoch changes
            self._due_ms = now + UPDATE_PERIOD_FACTOR * self._config.fetch_timeout_ms
            return None
        leader = state.leader_id
        if not self._requests.is_ready(leader, now):
            return None  # a Fetch in flight goes first; this goes at its answer
        self._due_ms = now + UPDATE_PERIOD_FACTOR * self._config.fetch_timeout_ms
        logger.info("asking leader %d: %s", leader, type(request).__name__)
        return self._requests.maybe_send(self._channel, leader, lambda _dest: request, now)

    def _due_request(self, state: FollowerState) -> Request | None:
        quorum = self._quorum
        local = quorum.local_key
        if local is None or local.directory_id is None or not quorum.local_endpoints:
            return None
        if quorum.is_voter:
            return self._update_request(state, local.id, local.directory_id)
        if not self._config.auto_join or quorum.history.kraft_version < 1:
            return None
        stale_key = quorum.voter_set.key(local.id)
        if stale_key is not None:  # this id votes with another disk: remove that one first
            return RemoveRaftVoterRequest(local.id, stale_key.directory_id or ZERO_UUID)
        listeners = tuple(Endpoint(*e) for e in quorum.local_endpoints)
        timeout = self._config.request_timeout_ms
        return AddRaftVoterRequest(local.id, local.directory_id, listeners, timeout_ms=timeout)

    def _update_request(
        self, state: FollowerState, local_id: int, directory_id: uuid.UUID
    ) -> UpdateRaftVoterRequest | None:
        quorum = self._quorum
        if quorum.history.kraft_version >= 1:
            node = quorum.voter_set.node(local_id)
            assert node is not None
            if (node.endpoints, node.supported_kraft_versions) == (
                quorum.local_endpoints,
                KRAFT_RANGE,
            ):
                return None
        elif self._reported_epoch == state.epoch:
            return None
        low, high = KRAFT_RANGE
        return UpdateRaftVoterRequest(
            current_leader_epoch=state.epoch,
            voter_id=local_id,
            voter_directory_id=directory_id,
            listeners=tuple(Endpoint(*e) for e in quorum.local_endpoints),
            min_supported_kraft_version=low,
            max_supported_kraft_version=high,
        )

    def handle_response(self, body: MembershipResponse) -> bool:
        """The leader answered; False if with an error (the leader backs off)."""
        if body.error_code != Errors.NONE:
            logger.info(
                "%s answered %s", type(body).__name__, Errors.from_code(body.error_code).name
            )
            return False
        if isinstance(body, UpdateRaftVoterResponse):
            self._reported_epoch = self._quorum.epoch
        return True
