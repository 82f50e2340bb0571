"""The leader's side of voter changes (KIP-853): AddRaftVoter, RemoveRaftVoter,
UpdateRaftVoter, and the ``kraft.version`` upgrade. The other replicas' side (following the
voter set of the log, UpdateRaftVoter, auto-join) is ``kraft.raft.membership``.

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

Under ``kraft.version`` 0 the leader keeps what each static voter reports of itself in
UpdateRaftVoter (directory id, listeners, ``kraft.version`` range) for an upgrade. Upgrading
``kraft.version`` 0 to 1 (UpdateFeatures, as ``kafka-features.sh upgrade --feature
kraft.version=1``): once every static voter has told the leader its directory id, listeners and
a ``kraft.version`` range that includes 1, the leader appends ``KRaftVersionRecord(1)`` and the
``VotersRecord`` of those voters, and answers when they commit. Until every voter has, the
answer is INVALID_UPDATE_VERSION naming the voters missing. A downgrade is refused
(INVALID_UPDATE_VERSION), as in Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kraft.common.clock import Clock
from kraft.config import QuorumConfig
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
    FeatureUpdateResult,
    LeaderIdAndEpoch,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    Response,
    SupportedFeature,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
)
from kraft.raft.channel import NetworkChannel
from kraft.raft.leader import LeaderState
from kraft.raft.quorum import QuorumState
from kraft.raft.requests import RequestManager
from kraft.raft.rpc import (
    directory_or_none,
    leader_node_endpoints,
    valid_cluster_id,
    validate_leader_only,
)
from kraft.raft.states import NO_DEADLINE, Endpoints, ReplicaKey
from kraft.raft.voter_set import DEFAULT_LISTENER, VoterNode, VoterSet
from kraft.record.control import ControlMessage, KRaftVersionRecord

__all__ = ["KRAFT_RANGE", "Reconfiguration", "api_versions_response"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The ``kraft.version`` range this kraft supports, as ApiVersions and UpdateRaftVoter say it.
KRAFT_RANGE = (min(SUPPORTED_KRAFT_VERSIONS), max(SUPPORTED_KRAFT_VERSIONS))


def api_versions_response() -> ApiVersionsResponse:
    """What any replica answers to ApiVersions: its APIs and its ``kraft.version`` range."""
    return ApiVersionsResponse(
        api_keys=tuple(ApiVersion(int(key), 0, version) for key, version in MAX_VERSIONS.items()),
        supported_features=(SupportedFeature(KRAFT_VERSION_FEATURE, *KRAFT_RANGE),),
    )


def _has_default_listener(listeners: tuple[Endpoint, ...]) -> bool:
    """Whether the quorum can reach a voter with these listeners (Kafka's default listener
    check: the quorum speaks on ``CONTROLLER``)."""
    return any(e.name == DEFAULT_LISTENER for e in listeners)


def _endpoints(listeners: tuple[Endpoint, ...]) -> Endpoints:
    return tuple((e.name, e.host, e.port) for e in listeners)


@dataclass(frozen=True, slots=True)
class _Refusal:
    error: Errors
    message: str


@dataclass(slots=True)
class _Change:
    """The one change in progress: who asked, what for, and how far it got."""

    kind: str  # "add", "remove", "upgrade"
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
    """The leader's pending voter change and its handlers. See the module docstring.
    ``respond`` answers an earlier request."""

    def __init__(
        self,
        quorum: QuorumState[T],
        config: QuorumConfig,
        requests: RequestManager,
        channel: NetworkChannel,
        clock: Clock,
        shutting_down: Callable[[], bool],
        respond: Callable[[InboundRequest, Response], None],
        cluster_id: str | None = None,
    ) -> None:
        self._quorum = quorum
        self._cluster_id = cluster_id
        self._config = config
        self._requests = requests
        self._channel = channel
        self._clock = clock
        self._shutting_down = shutting_down
        self._respond = respond
        self._pending: _Change | None = None
        #: The leader, under kraft.version 0: what each voter said in UpdateRaftVoter.
        self._reported: dict[int, VoterNode] = {}

    def _append_voters(self, state: LeaderState[T], voters: VoterSet) -> int:
        """Append a VotersRecord for ``voters`` (it applies once written); its offset."""
        return state.accumulator.append_control_messages(
            [voters.to_record()], self._clock.wall_ms()
        )

    @property
    def pending_change(self) -> str | None:
        """``"add"``, ``"remove"`` or ``"upgrade"`` while a change is in progress."""
        return None if self._pending is None else self._pending.kind

    def address_of(self, destination: int) -> tuple[str, int] | None:
        """The address of the replica being added, if it is ``destination``."""
        change = self._pending
        if change is None or change.key.id != destination or not change.endpoints:
            return None
        _name, host, port = change.endpoints[0]
        return host, port

    def removed_self_committed(self, state: LeaderState[Any]) -> bool:
        """A leader leads on after removing itself, until the removal commits: then this is
        True, and it resigns."""
        removal = self._quorum.history.last_voter_set_offset
        if removal is None:
            return False  # the static voter set (kraft.version 0): nobody is ever removed
        high_watermark = state.high_watermark
        return high_watermark is not None and high_watermark > removal and self._quorum.is_observer

    # -- requests --------------------------------------------------------------------------
    def _precheck(  # noqa: PLR0911 -- one return per rule, in order
        self, now: int, cluster_id: str | None
    ) -> _Refusal | tuple[LeaderState[T], VoterSet]:
        """Rules 0-5: why not, or the leader state and the committed voter set."""
        if not valid_cluster_id(self._cluster_id, cluster_id):
            return _Refusal(Errors.INCONSISTENT_CLUSTER_ID, f"cluster id {cluster_id!r}")
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
        checked = self._precheck(now, body.cluster_id)
        if isinstance(checked, _Refusal):
            return _add_response(checked.error, checked.message)
        state, voters = checked
        key = ReplicaKey(body.voter_id, directory_or_none(body.voter_directory_id))
        if body.voter_id < 0 or key.directory_id is None:
            return _add_response(Errors.INVALID_REQUEST, "a voter needs an id and a directory id")
        if not _has_default_listener(body.listeners):
            why = f"the new voter has no {DEFAULT_LISTENER} listener"
            return _add_response(Errors.INVALID_REQUEST, why)
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
        checked = self._precheck(now, body.cluster_id)
        if isinstance(checked, _Refusal):
            return _remove_response(checked.error, checked.message)
        state, voters = checked
        key = ReplicaKey(body.voter_id, directory_or_none(body.voter_directory_id))
        removed = voters.remove(key)
        if removed is None:  # not a voter, or the last one (a voter set is never empty)
            why = "the last voter" if voters.is_voter(key) else "not a voter"
            return _remove_response(Errors.VOTER_NOT_FOUND, f"cannot remove {key}: {why}")
        change = _Change("remove", request, key, (), now + self._config.request_timeout_ms)
        change.offset = self._append_voters(state, removed)
        self._pending = change
        logger.info("removing voter %s: voter set %s at offset %d", key, removed, change.offset)
        return None

    def handle_update_voter(  # noqa: PLR0911 -- one return per rule, in order
        self, request: InboundRequest, body: UpdateRaftVoterRequest, now: int
    ) -> Response:
        quorum = self._quorum
        if not valid_cluster_id(self._cluster_id, body.cluster_id):
            return self._update_response(Errors.INCONSISTENT_CLUSTER_ID)
        error = validate_leader_only(quorum, body.current_leader_epoch, self._shutting_down())
        if error is not None:
            return self._update_response(error)
        if quorum.history.kraft_version == 0:
            return self._update_response(self._record_report(body))
        checked = self._precheck(now, body.cluster_id)
        if isinstance(checked, _Refusal):
            return self._update_response(checked.error)
        state, voters = checked
        version = quorum.history.kraft_version
        low, high = body.min_supported_kraft_version, body.max_supported_kraft_version
        if not low <= version <= high or not _has_default_listener(body.listeners):
            return self._update_response(Errors.INVALID_REQUEST)
        key = ReplicaKey(body.voter_id, directory_or_none(body.voter_directory_id))
        updated = voters.update(VoterNode(key, _endpoints(body.listeners), (low, high)))
        if updated is None:
            return self._update_response(Errors.VOTER_NOT_FOUND)
        if updated != voters:
            offset = self._append_voters(state, updated)
            logger.info("updated voter %s: voter set %s at offset %d", key, updated, offset)
        return self._update_response(Errors.NONE)

    def _record_report(self, body: UpdateRaftVoterRequest) -> Errors:
        """Under kraft.version 0: keep what a static voter says of itself, for an upgrade."""
        key = ReplicaKey(body.voter_id, directory_or_none(body.voter_directory_id))
        if not self._quorum.voter_set.is_voter(key):
            return Errors.VOTER_NOT_FOUND
        if key.directory_id is None or not body.listeners:
            return Errors.INVALID_REQUEST
        versions = (body.min_supported_kraft_version, body.max_supported_kraft_version)
        self._reported[key.id] = VoterNode(key, _endpoints(body.listeners), versions)
        return Errors.NONE

    def _update_response(self, error: Errors) -> UpdateRaftVoterResponse:
        quorum = self._quorum
        leader = quorum.leader_id
        return UpdateRaftVoterResponse(
            error_code=error,
            current_leader=LeaderIdAndEpoch(-1 if leader is None else leader, quorum.epoch),
            node_endpoints=leader_node_endpoints(quorum),
        )

    # -- upgrading kraft.version -------------------------------------------------------------
    def handle_update_features(
        self, request: InboundRequest, body: UpdateFeaturesRequest, now: int
    ) -> Response | None:
        """UpdateFeatures for ``kraft.version``: see the module docstring."""
        checked = self._check_upgrade(body)
        if isinstance(checked, _Refusal):
            return _features_response(checked.error, checked.message or None)
        state, target, voters = checked
        if body.validate_only:
            return _features_response(Errors.NONE, None)
        timeout = body.timeout_ms if body.timeout_ms > 0 else self._config.request_timeout_ms
        quorum = self._quorum
        change = _Change("upgrade", request, quorum.local_key or ReplicaKey(-1), (), now + timeout)
        change.offset = state.accumulator.append_control_messages(
            [KRaftVersionRecord(0, target), voters.to_record()], self._clock.wall_ms()
        )
        self._pending = change
        logger.info("kraft.version -> %d with voters %s", target, voters)
        return None

    def _check_upgrade(  # noqa: PLR0911 -- one return per rule, in order
        self, body: UpdateFeaturesRequest
    ) -> _Refusal | tuple[LeaderState[T], int, VoterSet]:
        updates = body.feature_updates
        if len(updates) != 1 or updates[0].feature != KRAFT_VERSION_FEATURE:
            names = [u.feature for u in updates]
            why = f"kraft finalizes only kraft.version, not {names}"
            return _Refusal(Errors.INVALID_UPDATE_VERSION, why)
        target = updates[0].max_version_level
        state = self._quorum.state
        current = self._quorum.history.kraft_version
        if not isinstance(state, LeaderState):
            return _Refusal(Errors.NOT_LEADER_OR_FOLLOWER, "not the leader")
        if target == current:
            return _Refusal(Errors.NONE, "")
        if not current < target <= KRAFT_RANGE[1]:
            why = f"kraft.version {current} cannot become {target} (no downgrade)"
            return _Refusal(Errors.INVALID_UPDATE_VERSION, why)
        if self._shutting_down() or self._pending is not None or state.high_watermark is None:
            return _Refusal(Errors.REQUEST_TIMED_OUT, "the leader is not ready for a change")
        voters = self._upgraded_voters(target)
        if isinstance(voters, str):
            return _Refusal(Errors.INVALID_UPDATE_VERSION, voters)
        return state, target, voters

    def _upgraded_voters(self, target: int) -> VoterSet | str:
        """The voter set an upgrade writes, from what each static voter reported (the
        leader from itself), or why there is none yet."""
        quorum = self._quorum
        local = quorum.local_key
        reported = dict(self._reported)
        if local is not None and local.directory_id is not None and quorum.local_endpoints:
            reported[local.id] = VoterNode(local, quorum.local_endpoints, KRAFT_RANGE)
        missing = sorted(v for v in quorum.voters if v not in reported)
        if missing:
            return f"voters {missing} have not reported their directory id and listeners yet"
        unable = sorted(v for v in quorum.voters if not reported[v].supports(target))
        if unable:
            return f"voters {unable} do not support kraft.version {target}"
        return VoterSet({v: reported[v] for v in quorum.voters})

    # -- ApiVersions, commits and timeouts -------------------------------------------------
    def handle_api_versions_response(
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

    def start_of_epoch_messages(self) -> list[ControlMessage]:
        """What a new leader appends after its LeaderChange, in the same batch (Kafka's
        ``appendStartOfEpochControlRecords``): under ``kraft.version`` 1, the
        ``KRaftVersionRecord`` and ``VotersRecord`` when the voters in force come from the
        bootstrap checkpoint alone (replicas that never had it learn them from the log), or
        when the leader's own listeners or range differ from its entry (the keys stay the
        same, so this is no membership change)."""
        quorum = self._quorum
        history = quorum.history
        if history.kraft_version < 1:
            return []
        voters = history.last_voter_set
        local = quorum.local_key
        node = None if local is None else voters.node(local.id)
        updated = None
        if node is not None and quorum.local_endpoints:
            wanted = VoterNode(node.key, quorum.local_endpoints, KRAFT_RANGE)
            updated = voters.update(wanted) if wanted != node else None
        offset = history.last_voter_set_offset
        if updated is None and offset is not None and offset >= 0:
            return []
        return [KRaftVersionRecord(0, history.kraft_version), (updated or voters).to_record()]

    def leadership_lost(self) -> None:
        """Leadership ended: a pending change is answered NOT_LEADER_OR_FOLLOWER."""
        self._reported.clear()
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
        elif change.kind == "remove":
            self._respond(change.request, _remove_response(error, message))
        else:
            self._respond(change.request, _features_response(error, message))


def _features_response(error: Errors, message: str | None) -> UpdateFeaturesResponse:
    return UpdateFeaturesResponse(
        error_code=error,
        error_message=message,
        results=(FeatureUpdateResult(KRAFT_VERSION_FEATURE, error, message),),
    )


def _add_response(error: Errors, message: str | None) -> AddRaftVoterResponse:
    return AddRaftVoterResponse(error_code=error, error_message=message)


def _remove_response(error: Errors, message: str | None) -> RemoveRaftVoterResponse:
    return RemoveRaftVoterResponse(error_code=error, error_message=message)
