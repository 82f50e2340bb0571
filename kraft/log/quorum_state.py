"""The election state a replica must never forget, and where it is kept (Kafka's
``FileQuorumStateStore``; the file is described in docs/storage.md).

Raft's safety rests on two facts surviving a crash: the highest epoch a replica has seen, and
whom it voted for in that epoch (a replica that forgot its vote could vote twice and elect two
leaders). Kafka keeps them in the ``quorum-state`` file, written on every durable transition
(Unattached, Voted, Candidate, Follower, Leader; never Prospective or Resigned) and read once at
startup. No log end offset or high watermark is stored.

The file is one line of JSON (no newline) plus a ``data_version`` field (Kafka's
``QuorumStateData``); shown here wrapped::

    v1  {"leaderId":-1,"leaderEpoch":2,"votedId":1,
         "votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}
    v0  {"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,
         "appliedOffset":0,"currentVoters":[],"data_version":0}

``-1`` means "none" for ``leaderId`` and ``votedId``, and the zero Uuid does for
``votedDirectoryId``; in memory both are ``None``. As in Kafka the version written follows the
``kraft.version`` feature: 0 writes v0 (which has no room for a directory id, so it is dropped),
1 writes v1. Both are read.

A write replaces the file atomically (temporary file, fsync, rename, directory fsync), so a
crash leaves the old state or the new one. Reading a damaged file is a
:class:`~kraft.errors.QuorumStateError`: the node must not start with a guessed epoch or vote.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Final, Protocol, runtime_checkable

import msgspec

from kraft.common.fsutil import write_atomically
from kraft.common.limits import INT32_MAX
from kraft.common.uuids import ZERO_UUID, uuid_from_text, uuid_to_text
from kraft.errors import QuorumStateError
from kraft.log.api import ReplicatedLog

__all__ = [
    "QUORUM_STATE_FILE",
    "ElectionState",
    "FileQuorumStateStore",
    "MemoryQuorumStateStore",
    "NO_SUCH_VOTER",
    "QuorumStateStore",
    "decode_quorum_state",
    "encode_quorum_state",
    "recovered_election_state",
    "require_election_state",
]

logger = logging.getLogger(__name__)

#: The file's name inside a data directory (Kafka's ``FileQuorumStateStore.DEFAULT_FILE_NAME``).
QUORUM_STATE_FILE: Final = "quorum-state"

_NONE: Final = -1
#: The replica id a recovered quorum state holds its vote for: no node has it (node ids are
#: configured, and ``kraft storage recover-quorum-state`` refuses a node that has this one).
NO_SUCH_VOTER: Final = INT32_MAX
#: kraft.version -> quorum-state data version (Kafka's ``KRaftVersion.quorumStateVersion``).
_DATA_VERSION_FOR_KRAFT_VERSION: Final = {0: 0, 1: 1}


class ElectionState(msgspec.Struct, frozen=True):
    """A replica's durable election state: its epoch, the leader it knows, its vote.

    ``leader_id`` and ``voted_id`` may both be set: a follower keeps its vote for the rest of
    the epoch. ``voted_directory_id`` (KIP-853) is the directory id of the voted candidate, a
    Kafka Uuid string; ``None`` means "any directory of ``voted_id``" (kraft.version 0).
    Invalid combinations raise ``ValueError``.
    """

    epoch: int
    leader_id: int | None = None
    voted_id: int | None = None
    voted_directory_id: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.epoch <= INT32_MAX:
            raise ValueError(f"epoch {self.epoch} is not a non-negative int32")
        for name, value in (("leader_id", self.leader_id), ("voted_id", self.voted_id)):
            if value is not None and not 0 <= value <= INT32_MAX:
                raise ValueError(f"{name} {value} is not a non-negative int32 (use None)")
        if self.voted_directory_id is not None:
            if self.voted_id is None:
                raise ValueError("voted_directory_id without voted_id")
            if uuid_from_text(self.voted_directory_id) == ZERO_UUID:
                raise ValueError("the zero Uuid means no directory id: use None")

    # -- factories (Kafka's ElectionState.with*) ---------------------------------------------
    @classmethod
    def with_unknown_leader(cls, epoch: int) -> ElectionState:
        """No leader known and no vote cast in ``epoch``."""
        return cls(epoch)

    @classmethod
    def with_elected_leader(cls, epoch: int, leader_id: int) -> ElectionState:
        """``leader_id`` leads ``epoch``."""
        return cls(epoch, leader_id=leader_id)

    @classmethod
    def with_voted_candidate(
        cls, epoch: int, voted_id: int, voted_directory_id: str | None = None
    ) -> ElectionState:
        """This replica voted for ``voted_id`` (of ``voted_directory_id``) in ``epoch``."""
        return cls(epoch, voted_id=voted_id, voted_directory_id=voted_directory_id)

    # -- queries -----------------------------------------------------------------------------
    @property
    def has_leader(self) -> bool:
        """Whether a leader of this epoch is known."""
        return self.leader_id is not None

    @property
    def has_voted(self) -> bool:
        """Whether this replica has cast its vote in this epoch."""
        return self.voted_id is not None

    @property
    def leader_id_or_sentinel(self) -> int:
        """The leader id, or -1 (Kafka's sentinel, as on disk and on the wire)."""
        return _NONE if self.leader_id is None else self.leader_id

    @property
    def voted_id_or_sentinel(self) -> int:
        """The voted id, or -1."""
        return _NONE if self.voted_id is None else self.voted_id

    def is_leader(self, node_id: int) -> bool:
        """Whether ``node_id`` is the known leader of this epoch."""
        if node_id < 0:
            raise ValueError(f"negative node id {node_id}")
        return self.leader_id == node_id

    def is_voted_candidate(self, node_id: int, directory_id: str | None) -> bool:
        """Whether this replica's vote went to the replica ``(node_id, directory_id)``.

        As in Kafka, a vote stored without a directory id (kraft.version 0) matches any
        directory of the voted node.
        """
        if node_id < 0:
            raise ValueError(f"negative node id {node_id}")
        if self.voted_id != node_id:
            return False
        return self.voted_directory_id is None or self.voted_directory_id == directory_id


# -- the file format ---------------------------------------------------------------------------

_ReplicaId = Annotated[int, msgspec.Meta(ge=_NONE, le=INT32_MAX)]
_Epoch = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]


class _Version(msgspec.Struct):
    data_version: int


class _Voter(msgspec.Struct, frozen=True):
    voter_id: _ReplicaId = msgspec.field(name="voterId")


class _QuorumStateV0(msgspec.Struct, frozen=True, kw_only=True):
    # Field order is Kafka's: it is the order of the keys in the file. The ids and the epoch
    # are mandatory, as in Kafka's generated JSON converter.
    cluster_id: str = msgspec.field(name="clusterId", default="")
    leader_id: _ReplicaId = msgspec.field(name="leaderId")
    leader_epoch: _Epoch = msgspec.field(name="leaderEpoch")
    voted_id: _ReplicaId = msgspec.field(name="votedId")
    applied_offset: int = msgspec.field(name="appliedOffset", default=0)
    current_voters: list[_Voter] | None = msgspec.field(name="currentVoters", default_factory=list)
    data_version: int = 0


class _QuorumStateV1(msgspec.Struct, frozen=True):
    leader_id: _ReplicaId = msgspec.field(name="leaderId")
    leader_epoch: _Epoch = msgspec.field(name="leaderEpoch")
    voted_id: _ReplicaId = msgspec.field(name="votedId")
    voted_directory_id: str = msgspec.field(name="votedDirectoryId")
    data_version: int = 1


_ENCODER: Final = msgspec.json.Encoder()
_VERSION_DECODER: Final = msgspec.json.Decoder(_Version)
_V0_DECODER: Final = msgspec.json.Decoder(_QuorumStateV0)
_V1_DECODER: Final = msgspec.json.Decoder(_QuorumStateV1)


def _optional_id(value: int) -> int | None:
    return None if value == _NONE else value


def encode_quorum_state(state: ElectionState, kraft_version: int = 1) -> bytes:
    """The quorum-state file's bytes for ``state`` under ``kraft_version`` (one line, no
    newline, as Kafka writes it). ``ValueError`` for a kraft.version kraft does not know."""
    data_version = _DATA_VERSION_FOR_KRAFT_VERSION.get(kraft_version)
    if data_version is None:
        raise ValueError(f"unsupported kraft.version {kraft_version}")
    record: _QuorumStateV0 | _QuorumStateV1
    if data_version == 0:
        # v0 cannot hold a directory id: Kafka drops it, and so do we. Kafka also wrote the
        # static voters here; an empty list tells its readers not to cross-check them.
        record = _QuorumStateV0(
            leader_id=state.leader_id_or_sentinel,
            leader_epoch=state.epoch,
            voted_id=state.voted_id_or_sentinel,
        )
    else:
        record = _QuorumStateV1(
            leader_id=state.leader_id_or_sentinel,
            leader_epoch=state.epoch,
            voted_id=state.voted_id_or_sentinel,
            voted_directory_id=state.voted_directory_id or uuid_to_text(ZERO_UUID),
        )
    return _ENCODER.encode(record)


def decode_quorum_state(data: bytes) -> ElectionState:
    """Parse the quorum-state file's bytes; ``ValueError`` (saying why) if they are not one.

    Keys Kafka does not need (``clusterId``, ``appliedOffset``, ``currentVoters``) and unknown
    keys are ignored, as Kafka ignores them.
    """
    try:
        version = _VERSION_DECODER.decode(data).data_version
        if version == 0:
            v0 = _V0_DECODER.decode(data)
            return ElectionState(
                v0.leader_epoch, _optional_id(v0.leader_id), _optional_id(v0.voted_id)
            )
        if version == 1:
            v1 = _V1_DECODER.decode(data)
            voted_id = _optional_id(v1.voted_id)
            directory_id: str | None = v1.voted_directory_id
            if uuid_from_text(v1.voted_directory_id) == ZERO_UUID or voted_id is None:
                directory_id = None
            return ElectionState(
                v1.leader_epoch, _optional_id(v1.leader_id), voted_id, directory_id
            )
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise ValueError(str(exc)) from exc
    raise ValueError(f"data_version {version} is not within the supported versions 0..1")


# -- stores ------------------------------------------------------------------------------------


@runtime_checkable
class QuorumStateStore(Protocol):
    """Where the Raft core keeps its :class:`ElectionState` (Kafka's ``QuorumStateStore``)."""

    def read_election_state(self) -> ElectionState | None:
        """The last state written, or ``None`` if none ever was (a new replica).

        :class:`~kraft.errors.QuorumStateError` if it exists but cannot be read.
        """

    def write_election_state(self, state: ElectionState, kraft_version: int = 1) -> None:
        """Make ``state`` durable before returning; :class:`~kraft.errors.QuorumStateError`
        if it could not be."""

    def clear(self) -> None:
        """Forget the stored state (tests, and wiping a replica)."""

    def describe(self) -> str:
        """Where the state lives, for log lines and error messages."""


class FileQuorumStateStore:
    """The ``quorum-state`` file of a data directory (Kafka's ``FileQuorumStateStore``)."""

    __slots__ = ("_path", "_tmp_path")

    def __init__(self, path: Path | str) -> None:
        self._path = Path(path)
        self._tmp_path = self._path.with_name(self._path.name + ".tmp")

    @classmethod
    def in_directory(cls, data_dir: Path | str) -> FileQuorumStateStore:
        """The store at ``<data_dir>/quorum-state``."""
        return cls(Path(data_dir) / QUORUM_STATE_FILE)

    @property
    def path(self) -> Path:
        """The file's path."""
        return self._path

    def describe(self) -> str:
        return f"quorum state file {self._path}"

    def __repr__(self) -> str:
        return f"FileQuorumStateStore({str(self._path)!r})"

    def read_election_state(self) -> ElectionState | None:
        # A leftover quorum-state.tmp is a write that never reached its rename: the old file
        # is the durable state, so the temporary file is not looked at.
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.error("cannot read the quorum state file %s: %s", self._path, exc)
            raise QuorumStateError(
                f"cannot read the quorum state file {self._path}: {exc}"
            ) from exc
        if not data.strip():
            logger.error("the quorum state file %s is empty", self._path)
            raise QuorumStateError(f"the quorum state file {self._path} is empty")
        try:
            return decode_quorum_state(data)
        except ValueError as exc:
            logger.error("malformed quorum state file %s: %s", self._path, exc)
            raise QuorumStateError(f"malformed quorum state file {self._path}: {exc}") from exc

    def write_election_state(self, state: ElectionState, kraft_version: int = 1) -> None:
        data = encode_quorum_state(state, kraft_version)
        logger.debug("writing %s to %s", state, self._path)
        try:
            write_atomically(self._path, data)
        except OSError as exc:
            logger.error("cannot write the quorum state file %s: %s", self._path, exc)
            raise QuorumStateError(
                f"cannot write the quorum state file {self._path}: {exc}"
            ) from exc

    def clear(self) -> None:
        try:
            self._path.unlink(missing_ok=True)
            self._tmp_path.unlink(missing_ok=True)
        except OSError as exc:
            raise QuorumStateError(
                f"cannot delete the quorum state file {self._path}: {exc}"
            ) from exc


class MemoryQuorumStateStore:
    """An in-memory store with the file's contract, for tests and the simulator.

    A write goes through the same encoding as the file (so kraft.version 0 drops the voted
    directory id here too) and is durable the moment it returns: a simulated crash keeps it.
    ``writes`` lists every state made durable, oldest first, for invariant checks.
    """

    __slots__ = ("_data", "_name", "writes")

    def __init__(self, name: str = "memory") -> None:
        self._name = name
        self._data: bytes | None = None
        #: Every state written, as it would be read back, oldest first.
        self.writes: list[ElectionState] = []

    @property
    def data(self) -> bytes | None:
        """The bytes the file would hold, or ``None`` before the first write."""
        return self._data

    def describe(self) -> str:
        return f"in-memory quorum state {self._name}"

    def __repr__(self) -> str:
        return f"MemoryQuorumStateStore({self._name!r})"

    def read_election_state(self) -> ElectionState | None:
        if self._data is None:
            return None
        try:
            return decode_quorum_state(self._data)
        except ValueError as exc:  # pragma: no cover - only bytes we encoded are held
            raise QuorumStateError(f"malformed {self.describe()}: {exc}") from exc

    def write_election_state(self, state: ElectionState, kraft_version: int = 1) -> None:
        self._data = encode_quorum_state(state, kraft_version)
        self.writes.append(decode_quorum_state(self._data))

    def clear(self) -> None:
        self._data = None


def require_election_state(store: QuorumStateStore, log: ReplicatedLog) -> None:
    """Refuse to start a node whose election state is missing while its log shows it took
    part in the quorum (docs/storage.md, "The quorum-state file").

    Without the state the node would start in epoch 0 with no vote and could vote a second
    time in an epoch where it already voted: two leaders. A node with an empty log and no
    snapshot but the bootstrap checkpoint ``0-0`` that ``kraft storage format`` writes for a
    dynamic quorum (KIP-853), and nothing set aside for repair, is taken to be new and starts
    as before.
    """
    if store.read_election_state() is not None:
        return
    snapshot = log.latest_snapshot_id
    fresh = snapshot is None or (snapshot.offset, snapshot.epoch) == (0, 0)
    if log.log_end_offset == 0 and fresh and log.repair_target is None:
        return
    message = (
        f"the {store.describe()} is missing, but this node has taken part in the quorum (its "
        f"log ends at offset {log.log_end_offset}, latest snapshot {snapshot}): it may have "
        "voted in the current epoch, and a second vote there could elect two leaders. "
        "Refusing to start. Recover with `kraft storage recover-quorum-state DATA_DIR --epoch "
        "N`, N being the epoch `kraft quorum describe` reports for the live quorum "
        "(docs/storage.md)"
    )
    logger.error("%s", message)
    raise QuorumStateError(message)


def recovered_election_state(epoch: int) -> ElectionState:
    """The state ``kraft storage recover-quorum-state`` writes for a node that lost its own:
    a vote, in ``epoch``, for :data:`NO_SUCH_VOTER`.

    The node comes back unattached in ``epoch`` having voted, so it grants no vote in
    ``epoch`` (it may have granted one there before it lost the file) nor below it (stale
    epochs are refused); it follows the leader of ``epoch`` once it hears from it, and votes
    again only in a later election, where it cannot have voted before if ``epoch`` is the
    quorum's current one. It does not vote for itself (it would restart as a candidate) nor
    claim any leadership.
    """
    return ElectionState.with_voted_candidate(epoch, NO_SUCH_VOTER)
