"""``VoterSet``: who votes, how to reach them, and what they support (Kafka's ``VoterSet``).

A voter is a :class:`~kraft.raft.states.ReplicaKey` -- its node id and, since KIP-853, the
directory id of its storage -- with the listeners it can be reached on and the range of
``kraft.version`` it supports. Under ``kraft.version`` 0 the set comes from the configuration
(``QuorumConfig.voters``: ids and one address each, no directory ids); under 1 it comes from
the log, one ``VotersRecord`` per change (``kraft.raft.voter_history``).

A ``VoterSet`` is immutable: :meth:`VoterSet.add`, :meth:`VoterSet.remove` and
:meth:`VoterSet.update` return a new set, or ``None`` when the change is not allowed (Kafka's
``Optional.empty()``), so that a caller turns that into its own error code.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from kraft.common.uuids import ZERO_UUID
from kraft.config import Endpoint
from kraft.raft.states import Endpoints, ReplicaKey
from kraft.record.control import (
    KRaftVersionFeature,
    LeaderChangeMessage,
    LeaderChangeVoter,
    VotersRecord,
    VotersRecordEndpoint,
    VotersRecordVoter,
)

__all__ = ["DEFAULT_LISTENER", "VoterNode", "VoterSet"]

#: The listener name a static voter's address is known by (Kafka's default controller
#: listener name, ``CONTROLLER``).
DEFAULT_LISTENER = "CONTROLLER"


@dataclass(frozen=True, slots=True)
class VoterNode:
    """One voter: its key, its listeners ``(name, host, port)`` (the first is the default),
    and the ``kraft.version`` range it supports, ``(min, max)``."""

    key: ReplicaKey
    endpoints: Endpoints = ()
    supported_kraft_versions: tuple[int, int] = (0, 0)

    def is_voter(self, replica: ReplicaKey) -> bool:
        """Whether ``replica`` is this voter: the same id and, when this voter has a directory
        id, the same directory id (Kafka's ``VoterNode.isVoter``)."""
        if replica.id != self.key.id:
            return False
        return self.key.directory_id is None or self.key.directory_id == replica.directory_id

    def supports(self, kraft_version: int) -> bool:
        low, high = self.supported_kraft_versions
        return low <= kraft_version <= high


class VoterSet:
    """An immutable set of voters, by node id. See the module docstring."""

    __slots__ = ("_voters",)

    def __init__(self, voters: Mapping[int, VoterNode]) -> None:
        for voter_id, node in voters.items():
            if voter_id != node.key.id:
                raise ValueError(f"voter {node.key} filed under id {voter_id}")
        self._voters: dict[int, VoterNode] = dict(sorted(voters.items()))

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_static(cls, voters: Mapping[int, Endpoint]) -> VoterSet:
        """The ``kraft.version`` 0 set: configured ids and addresses, no directory ids."""
        return cls(
            {
                voter_id: VoterNode(
                    ReplicaKey(voter_id),
                    ((DEFAULT_LISTENER, endpoint.host, endpoint.port),),
                    (0, 0),
                )
                for voter_id, endpoint in voters.items()
            }
        )

    @classmethod
    def from_record(cls, record: VotersRecord) -> VoterSet:
        """The set a ``VotersRecord`` holds (its zero directory ids mean "none")."""
        voters: dict[int, VoterNode] = {}
        for voter in record.voters:
            directory = None if voter.voter_directory_id == ZERO_UUID else voter.voter_directory_id
            feature = voter.kraft_version_feature
            voters[voter.voter_id] = VoterNode(
                ReplicaKey(voter.voter_id, directory),
                tuple((e.name, e.host, e.port) for e in voter.endpoints),
                (feature.min_supported_version, feature.max_supported_version),
            )
        return cls(voters)

    def to_record(self) -> VotersRecord:
        """The ``VotersRecord`` (version 0) that holds this set."""
        return VotersRecord(
            version=0,
            voters=tuple(
                VotersRecordVoter(
                    voter_id=node.key.id,
                    voter_directory_id=node.key.directory_id or ZERO_UUID,
                    endpoints=tuple(
                        VotersRecordEndpoint(name, host, port)
                        for name, host, port in node.endpoints
                    ),
                    kraft_version_feature=KRaftVersionFeature(*node.supported_kraft_versions),
                )
                for node in self._voters.values()
            ),
        )

    # -- queries ---------------------------------------------------------------------------
    @property
    def ids(self) -> frozenset[int]:
        return frozenset(self._voters)

    @property
    def keys(self) -> tuple[ReplicaKey, ...]:
        """The voters' keys, by id."""
        return tuple(node.key for node in self._voters.values())

    def nodes(self) -> Iterator[VoterNode]:
        return iter(self._voters.values())

    def node(self, voter_id: int) -> VoterNode | None:
        return self._voters.get(voter_id)

    def key(self, voter_id: int) -> ReplicaKey | None:
        node = self._voters.get(voter_id)
        return None if node is None else node.key

    def endpoints(self, voter_id: int) -> Endpoints:
        """The listeners of voter ``voter_id`` (none for a replica that is not a voter)."""
        node = self._voters.get(voter_id)
        return () if node is None else node.endpoints

    def is_voter(self, replica: ReplicaKey) -> bool:
        """Whether ``replica`` is one of these voters (directory ids compared where known)."""
        node = self._voters.get(replica.id)
        return node is not None and node.is_voter(replica)

    def is_only_voter(self, replica: ReplicaKey) -> bool:
        return len(self._voters) == 1 and self.is_voter(replica)

    def majority_size(self) -> int:
        return len(self._voters) // 2 + 1

    def supports_kraft_version(self, kraft_version: int) -> bool:
        """Whether every voter supports ``kraft_version`` (a precondition of an upgrade)."""
        return all(node.supports(kraft_version) for node in self._voters.values())

    def differs_by_one_voter(self, other: VoterSet) -> bool:
        """Whether ``other`` is this set with at most one change: one voter key added or
        removed, or one voter's listeners or versions updated -- the only changes KIP-853
        makes, so that any majority of one set overlaps any majority of the other."""
        mine, theirs = set(self.keys), set(other.keys)
        updated = sum(self.node(k.id) != other.node(k.id) for k in mine & theirs)
        return len(mine ^ theirs) + updated <= 1

    def leader_change(
        self, leader_id: int, granting: Sequence[int], kraft_version: int
    ) -> LeaderChangeMessage:
        """The LeaderChange record a new leader writes: these voters and those that voted for
        it, with directory ids (version 1) under ``kraft.version`` 1."""

        def voter(voter_id: int) -> LeaderChangeVoter:
            key = self.key(voter_id)
            if key is None or key.directory_id is None:
                return LeaderChangeVoter(voter_id)
            return LeaderChangeVoter(voter_id, key.directory_id)

        return LeaderChangeMessage(
            version=1 if kraft_version >= 1 else 0,
            leader_id=leader_id,
            voters=tuple(voter(v) for v in self._voters),
            granting_voters=tuple(voter(v) for v in granting),
        )

    # -- changes ---------------------------------------------------------------------------
    def add(self, node: VoterNode) -> VoterSet | None:
        """With ``node`` added; ``None`` if its id is a voter already."""
        if node.key.id in self._voters:
            return None
        return VoterSet({**self._voters, node.key.id: node})

    def remove(self, replica: ReplicaKey) -> VoterSet | None:
        """Without voter ``replica``; ``None`` if it is not a voter or is the last one."""
        if not self.is_voter(replica) or len(self._voters) == 1:
            return None
        return VoterSet({i: n for i, n in self._voters.items() if i != replica.id})

    def update(self, node: VoterNode) -> VoterSet | None:
        """With voter ``node.key`` given ``node``'s endpoints and versions; ``None`` if it is
        not a voter."""
        if not self.is_voter(node.key):
            return None
        return VoterSet({**self._voters, node.key.id: node})

    # -- dunder ----------------------------------------------------------------------------
    def __contains__(self, voter_id: object) -> bool:
        return voter_id in self._voters

    def __len__(self) -> int:
        return len(self._voters)

    def __iter__(self) -> Iterator[int]:
        return iter(self._voters)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VoterSet) and self._voters == other._voters

    def __hash__(self) -> int:
        return hash(tuple(self._voters.values()))

    def __repr__(self) -> str:
        parts = []
        for node in self._voters.values():
            directory = node.key.directory_id
            parts.append(f"{node.key.id}" + ("" if directory is None else f":{directory}"))
        return f"VoterSet({', '.join(parts)})"
