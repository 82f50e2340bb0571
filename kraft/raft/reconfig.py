"""Voter changes (KIP-853): following the voter set in the log, and the leader's
AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter.

Every replica follows the voter set of its log (:meth:`Reconfiguration.follow_changes`):
without configured bootstrap servers, an observer asks the voters it knows for the leader, and
requests carry the address the voter set gives their destination (the runtime connects there).

The leader's handlers are Kafka's ``AddVoterHandler``, ``RemoveVoterHandler`` and
``UpdateVoterHandler``. One change at a time: while a change is pending, and until the voter set
in force has committed, another gets REQUEST_TIMED_OUT -- so consecutive voter sets differ by
one voter and any majority of one overlaps any majority of the next. The rules, in the order
they are checked:

1. Leader-only: a replica that does not lead answers NOT_LEADER_OR_FOLLOWER (and, shutting
   down, BROKER_NOT_AVAILABLE); UpdateRaftVoter also checks its epoch (FENCED_LEADER_EPOCH /
   UNKNOWN_LEADER_EPOCH).
2. A change already pending -> REQUEST_TIMED_OUT.
3. No high watermark yet in this epoch (the leader has not committed its LeaderChange, so an
   uncommitted change of a previous leader may still be in flight) -> REQUEST_TIMED_OUT.
4. ``kraft.version`` 0 (voters from the configuration) -> UNSUPPORTED_VERSION.
5. The latest VotersRecord is not committed yet -> REQUEST_TIMED_OUT.
6. Add: the id is a voter already -> DUPLICATE_VOTER; the leader then asks the new replica with
   ApiVersions for its ``kraft.version`` range (INVALID_REQUEST if it does not include the
   finalized version; an error or no answer -> REQUEST_TIMED_OUT), and checks that it is an
   observer that has fetched and caught up recently (else REQUEST_TIMED_OUT).
   Remove / update: the replica is not a voter -> VOTER_NOT_FOUND. Update: a range without the
   finalized version, or no listener -> INVALID_REQUEST.
7. The leader appends the new ``VotersRecord``; it applies at once. Add and remove answer NONE
   once it commits (by the new majority), or REQUEST_TIMED_OUT at the request's timeout (add)
   or the request timeout (remove); update answers at once (the voter retries if it is lost).
8. A leader that loses leadership answers a pending change NOT_LEADER_OR_FOLLOWER.

The leader that removes itself keeps leading until the removal commits, then resigns: the
client does that (``KafkaRaftClient._poll_leader``).

A follower that is a voter sends UpdateRaftVoter to its leader when the voter set holds other
listeners or another ``kraft.version`` range for it than its own (it moved, or was upgraded):
at once in a new epoch, then at most every :data:`UPDATE_VOTER_PERIOD_FACTOR` fetch timeouts,
taking its turn on the connection to the leader before the next Fetch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kraft.common.clock import Clock
from kraft.common.uuids import ZERO_UUID
from kraft.config import QuorumConfig
from kraft.log.api import ReplicatedLog
from kraft.protocol.api import KRAFT_VERSION_FEATURE, MAX_VERSIONS, SUPPORTED_KRAFT_VERSIONS
from kraft.protocol.envelope import InboundRequest, InboundResponse
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    Endpoint,
    LeaderIdAndEpoch,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    Response,
    SupportedFeature,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
)
from kraft.raft.channel import NetworkChannel
from kraft.raft.leader import LeaderState
from kraft.raft.quorum import QuorumState
from kraft.raft.requests import RequestManager
from kraft.raft.rpc import directory_or_none, leader_node_endpoints, validate_leader_only
from kraft.raft.states import NO_DEADLINE, Endpoints, FollowerState, ReplicaKey
from kraft.raft.voter_set import VoterNode, VoterSet

__all__ = ["UPDATE_VOTER_PERIOD_FACTOR", "Reconfiguration", "api_versions_response"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_KRAFT_RANGE = (min(SUPPORTED_KRAFT_VERSIONS), max(SUPPORTED_KRAFT_VERSIONS))

#: A follower checks its entry in the voter set every this many fetch timeouts (Kafka: 3).
UPDATE_VOTER_PERIOD_FACTOR = 3


def api_versions_response() -> ApiVersionsResponse:
    """What any replica answers to ApiVersions: its APIs and its ``kraft.version`` range."""
    return ApiVersionsResponse(
        api_keys=tuple(ApiVersion(int(key), 0, version) for key, version in MAX_VERSIONS.items()),
        supported_features=(SupportedFeature(KRAFT_VERSION_FEATURE, *_KRAFT_RANGE),),
    )


def _endpoints(listeners: tuple[Endpoint, ...]) -> Endpoints:
    return tuple((e.name, e.host, e.port) for e in listeners)


@dataclass(frozen=True, slots=True)
class _Refusal:
    error: Errors
    message: str


@dataclass(slots=True)
class _Change:
    """The one change in progress: who asked, what for, and how far it got."""

    kind: str  # "add", "remove"
    request: InboundRequest
    key: ReplicaKey
    endpoints: Endpoints
    deadline_ms: int
    #: The offset of the VotersRecord once appended; ``None`` before (an add waits for
    #: ApiVersions first).
    offset: int | None = None
    #: False: answer once the VotersRecord is appended, not committed (KIP-1186).
    ack_when_committed: bool = True


class Reconfiguration(Generic[T]):
    """Voter changes: what follows the log, the leader's pending change and its handlers.
    See the module docstring. ``respond`` answers an earlier request."""

    def __init__(
        self,
        quorum: QuorumState[T],
        config: QuorumConfig,
        requests: RequestManager,
        channel: NetworkChannel,
        clock: Clock,
        shutting_down: Callable[[], bool],
        respond: Callable[[InboundRequest, Response], None],
    ) -> None:
        self._quorum = quorum
        self._config = config
        self._requests = requests
        self._channel = channel
        self._clock = clock
        self._shutting_down = shutting_down
        self._respond = respond
        self._pending: _Change | None = None
        #: Without configured bootstrap servers an observer asks the voters it knows.
        self._bootstrap_from_voters = not config.bootstrap_servers
        self._changes_seen = -1
        #: When this follower next compares its voter entry with itself; the epoch it did.
        self._update_due_ms = 0
        self._update_epoch = -1
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
        change = self._pending
        if not endpoints and change is not None and change.key.id == destination:
            endpoints = change.endpoints
        if not endpoints:
            return None
        _name, host, port = endpoints[0]
        return host, port

    def removed_self_committed(self, state: LeaderState[Any]) -> bool:
        """A leader leads on after removing itself, until the removal commits: then this is
        True, and it resigns."""
        removal = self._quorum.history.last_voter_set_offset
        high_watermark = state.high_watermark
        return (
            not self._quorum.is_voter
            and removal is not None
            and high_watermark is not None
            and high_watermark > removal
        )

    def _append_voters(self, state: LeaderState[T], voters: VoterSet) -> int:
        """Append a VotersRecord for ``voters`` (it applies once written); its offset."""
        return state.accumulator.append_control_messages(
            [voters.to_record()], self._clock.wall_ms()
        )

    @property
    def pending_change(self) -> str | None:
        """``"add"`` or ``"remove"`` while a change is in progress."""
        return None if self._pending is None else self._pending.kind

    # -- requests --------------------------------------------------------------------------
    def _precheck(self, now: int) -> _Refusal | tuple[LeaderState[T], VoterSet]:  # noqa: PLR0911
        """Rules 1-5: why not, or the leader state and the committed voter set."""
        state = self._quorum.state
        if not isinstance(state, LeaderState):
            return _Refusal(Errors.NOT_LEADER_OR_FOLLOWER, "this replica is not the leader")
        if self._shutting_down():
            return _Refusal(Errors.BROKER_NOT_AVAILABLE, "the leader is shutting down")
        self.poll(state, now)  # a change that just committed or expired is no longer pending
        if self._pending is not None:
            return _Refusal(Errors.REQUEST_TIMED_OUT, "another voter change is in progress")
        if state.high_watermark is None:
            return _Refusal(Errors.REQUEST_TIMED_OUT, "no commit in this leader's epoch yet")
        history = self._quorum.history
        if history.kraft_version < 1:
            return _Refusal(Errors.UNSUPPORTED_VERSION, "kraft.version 0: the voters are static")
        offset = history.last_voter_set_offset
        if offset is None or offset >= state.high_watermark:
            return _Refusal(Errors.REQUEST_TIMED_OUT, "the latest voter change is not committed")
        return state, history.last_voter_set

    def handle_add_voter(
        self, request: InboundRequest, body: AddRaftVoterRequest, now: int
    ) -> Response | None:
        checked = self._precheck(now)
        if isinstance(checked, _Refusal):
            return _add_response(checked.error, checked.message)
        state, voters = checked
        key = ReplicaKey(body.voter_id, directory_or_none(body.voter_directory_id))
        if body.voter_id < 0 or key.directory_id is None:
            return _add_response(Errors.INVALID_REQUEST, "a voter needs an id and a directory id")
        if not body.listeners:
            return _add_response(Errors.INVALID_REQUEST, "the new voter has no listener")
        if body.voter_id in voters:
            return _add_response(Errors.DUPLICATE_VOTER, f"{body.voter_id} is a voter already")
        timeout = body.timeout_ms if body.timeout_ms > 0 else self._config.request_timeout_ms
        self._pending = _Change(
            "add",
            request,
            key,
            _endpoints(body.listeners),
            now + timeout,
            ack_when_committed=body.ack_when_committed,
        )
        logger.info(
            "adding voter %s at %s: asking for its kraft.version range", key, body.listeners
        )
        self.poll(state, now)  # sends the ApiVersions request
        return None

    def handle_remove_voter(
        self, request: InboundRequest, body: RemoveRaftVoterRequest, now: int
    ) -> Response | None:
        checked = self._precheck(now)
        if isinstance(checked, _Refusal):
            return _remove_response(checked.error, checked.message)
        state, voters = checked
        key = ReplicaKey(body.voter_id, directory_or_none(body.voter_directory_id))
        removed = voters.remove(key)
        if removed is None:
            why = "the last voter" if voters.is_voter(key) else "not a voter"
            error = Errors.INVALID_REQUEST if voters.is_voter(key) else Errors.VOTER_NOT_FOUND
            return _remove_response(error, f"cannot remove {key}: {why}")
        change = _Change("remove", request, key, (), now + self._config.request_timeout_ms)
        change.offset = self._append_voters(state, removed)
        self._pending = change
        logger.info("removing voter %s: voter set %s at offset %d", key, removed, change.offset)
        return None

    def handle_update_voter(
        self, request: InboundRequest, body: UpdateRaftVoterRequest, now: int
    ) -> Response:
        quorum = self._quorum
        error = validate_leader_only(quorum, body.current_leader_epoch, self._shutting_down())
        if error is not None:
            return self._update_response(error)
        checked = self._precheck(now)
        if isinstance(checked, _Refusal):
            return self._update_response(checked.error)
        state, voters = checked
        version = quorum.history.kraft_version
        low, high = body.min_supported_kraft_version, body.max_supported_kraft_version
        if not low <= version <= high or not body.listeners:
            return self._update_response(Errors.INVALID_REQUEST)
        key = ReplicaKey(body.voter_id, directory_or_none(body.voter_directory_id))
        updated = voters.update(VoterNode(key, _endpoints(body.listeners), (low, high)))
        if updated is None:
            return self._update_response(Errors.VOTER_NOT_FOUND)
        if updated != voters:
            offset = self._append_voters(state, updated)
            logger.info("updated voter %s: voter set %s at offset %d", key, updated, offset)
        return self._update_response(Errors.NONE)

    def _update_response(self, error: Errors) -> UpdateRaftVoterResponse:
        quorum = self._quorum
        leader = quorum.leader_id
        return UpdateRaftVoterResponse(
            error_code=error,
            current_leader=LeaderIdAndEpoch(-1 if leader is None else leader, quorum.epoch),
            node_endpoints=leader_node_endpoints(quorum),
        )

    # -- the follower's UpdateRaftVoter -----------------------------------------------------
    def maybe_send_update_voter(self, state: FollowerState, now: int) -> int | None:
        """Send UpdateRaftVoter to the leader if this voter's entry is out of date and it is
        time; the milliseconds until the leader needs attention, or None: send the Fetch."""
        quorum = self._quorum
        if state.epoch != self._update_epoch:
            self._update_epoch, self._update_due_ms = state.epoch, now
        if now < self._update_due_ms or not self._needs_update():
            return None
        leader = state.leader_id
        if not self._requests.is_ready(leader, now):
            return None  # the Fetch in flight goes first; this one goes at its answer
        self._update_due_ms = now + UPDATE_VOTER_PERIOD_FACTOR * self._config.fetch_timeout_ms
        low, high = _KRAFT_RANGE
        assert quorum.local_id is not None
        request = UpdateRaftVoterRequest(
            current_leader_epoch=state.epoch,
            voter_id=quorum.local_id,
            voter_directory_id=quorum.local_directory_id or ZERO_UUID,
            listeners=tuple(Endpoint(*e) for e in quorum.local_endpoints),
            min_supported_kraft_version=low,
            max_supported_kraft_version=high,
        )
        logger.info("telling leader %d this voter's listeners %s", leader, request.listeners)
        return self._requests.maybe_send(self._channel, leader, lambda _dest: request, now)

    def _needs_update(self) -> bool:
        quorum = self._quorum
        if quorum.history.kraft_version < 1 or not quorum.local_endpoints or not quorum.is_voter:
            return False
        assert quorum.local_id is not None
        node = quorum.voter_set.node(quorum.local_id)
        return node is not None and (
            node.endpoints != quorum.local_endpoints
            or node.supported_kraft_versions != _KRAFT_RANGE
        )

    # -- ApiVersions, commits and timeouts -------------------------------------------------
    def handle_response(
        self,
        response: InboundResponse,
        body: ApiVersionsResponse | UpdateRaftVoterResponse,
        now: int,
    ) -> bool:
        """An answer to ApiVersions (the leader adding a voter) or UpdateRaftVoter (a
        follower); False if it was an error (the destination backs off)."""
        if isinstance(body, ApiVersionsResponse):
            return self._handle_api_versions_response(response, body, now)
        if body.error_code != Errors.NONE:
            logger.info("UpdateRaftVoter answered %s", Errors.from_code(body.error_code).name)
            return False
        return True

    def _handle_api_versions_response(
        self, response: InboundResponse, body: ApiVersionsResponse, now: int
    ) -> bool:
        """The replica being added told its ``kraft.version`` range: check it and whether
        it is caught up, then append the new voter set. False if the answer was an error."""
        change = self._pending
        state = self._quorum.state
        if (
            change is None
            or change.kind != "add"
            or change.offset is not None
            or change.key.id != response.source
            or not isinstance(state, LeaderState)
        ):
            return True  # nothing waits for it
        if body.error_code != Errors.NONE:
            self._finish(Errors.REQUEST_TIMED_OUT, f"ApiVersions failed: {body.error_code}")
            return False
        version = self._quorum.history.kraft_version
        supported = body.feature_range(KRAFT_VERSION_FEATURE)
        if supported is None or not supported[0] <= version <= supported[1]:
            self._finish(
                Errors.INVALID_REQUEST,
                f"{change.key} supports kraft.version {supported or (0, 0)}, not {version}",
            )
            return True
        if not state.is_replica_caught_up(change.key, now, self._config.fetch_timeout_ms):
            self._finish(Errors.REQUEST_TIMED_OUT, f"{change.key} is not caught up")
            return True
        added = self._quorum.history.last_voter_set.add(
            VoterNode(change.key, change.endpoints, supported)
        )
        if added is None:  # cannot happen: rule 5 held when the change began
            self._finish(Errors.DUPLICATE_VOTER, f"{change.key.id} became a voter meanwhile")
            return True
        change.offset = self._append_voters(state, added)
        logger.info("adding voter %s: voter set %s at offset %d", change.key, added, change.offset)
        if not change.ack_when_committed:
            self._finish(Errors.NONE, None)
        return True

    def poll(self, state: LeaderState[Any], now: int) -> int:
        """Complete a change that committed, expire one that timed out, send a pending
        ApiVersions; the milliseconds until this needs a poll again."""
        change = self._pending
        if change is None:
            return NO_DEADLINE
        high_watermark = state.high_watermark
        offset = change.offset
        if offset is not None and high_watermark is not None and high_watermark > offset:
            logger.info("voter change (%s %s) committed", change.kind, change.key)
            self._finish(Errors.NONE, None)
            return NO_DEADLINE
        if now >= change.deadline_ms:
            self._finish(Errors.REQUEST_TIMED_OUT, f"the {change.kind} did not complete in time")
            return NO_DEADLINE
        until = change.deadline_ms - now
        if change.kind == "add" and change.offset is None:
            until = min(
                until,
                self._requests.maybe_send(
                    self._channel, change.key.id, lambda _dest: ApiVersionsRequest(), now
                ),
            )
        return max(0, until)

    def leadership_lost(self) -> None:
        """Leadership ended: a pending change is answered NOT_LEADER_OR_FOLLOWER."""
        if self._pending is not None:
            self._finish(Errors.NOT_LEADER_OR_FOLLOWER, "leadership moved")

    def _finish(self, error: Errors, message: str | None) -> None:
        change = self._pending
        assert change is not None
        self._pending = None
        if error != Errors.NONE:
            logger.info(
                "voter change (%s %s) failed: %s %s",
                change.kind,
                change.key,
                error.name,
                message or "",
            )
        if change.kind == "add":
            self._respond(change.request, _add_response(error, message))
        else:
            self._respond(change.request, _remove_response(error, message))


def _add_response(error: Errors, message: str | None) -> AddRaftVoterResponse:
    return AddRaftVoterResponse(error_code=error, error_message=message)


def _remove_response(error: Errors, message: str | None) -> RemoveRaftVoterResponse:
    return RemoveRaftVoterResponse(error_code=error, error_message=message)
