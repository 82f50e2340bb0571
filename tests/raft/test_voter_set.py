"""``VoterSet`` (Kafka's ``VoterSet``, KIP-853): the record round trip, the add / remove /
update rules, voter identity with and without directory ids, and the one-voter-at-a-time
check."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.common.uuids import ZERO_UUID
from kraft.config import Endpoint
from kraft.raft.states import ReplicaKey
from kraft.raft.voter_set import DEFAULT_LISTENER, VoterNode, VoterSet
from kraft.record.control import (
    ControlRecordType,
    VotersRecord,
    decode_control_value,
    encode_control_value,
)

DIR_A = uuid.UUID(int=0xA)
DIR_B = uuid.UUID(int=0xB)


def node(voter_id: int, directory: uuid.UUID | None = None, port: int | None = None) -> VoterNode:
    port = 9990 + voter_id if port is None else port
    return VoterNode(
        ReplicaKey(voter_id, directory), ((DEFAULT_LISTENER, "localhost", port),), (0, 1)
    )


def voters(*nodes: VoterNode) -> VoterSet:
    return VoterSet({n.key.id: n for n in nodes})


# -- the record round trip -------------------------------------------------------------------
_directories = st.one_of(st.none(), st.uuids().filter(lambda u: u != ZERO_UUID))
_endpoints = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=12),
        st.text(max_size=20),
        st.integers(min_value=0, max_value=65535),
    ),
    max_size=3,
    unique_by=lambda e: e[0],
).map(tuple)
_ranges = st.tuples(st.integers(0, 3), st.integers(0, 3)).map(lambda r: (min(r), max(r)))


@st.composite
def voter_sets(draw: st.DrawFn) -> VoterSet:
    ids = draw(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=7, unique=True))
    return VoterSet(
        {
            i: VoterNode(ReplicaKey(i, draw(_directories)), draw(_endpoints), draw(_ranges))
            for i in ids
        }
    )


@settings(max_examples=200, deadline=None)
@given(voter_sets())
def test_a_voter_set_survives_its_record_and_the_bytes_of_it(voter_set: VoterSet) -> None:
    """KIP-853: a VotersRecord holds the whole set; reading it back (from the record, and from
    the record's encoded bytes) gives the same set -- ids, directory ids, listeners, ranges."""
    record = voter_set.to_record()
    assert VoterSet.from_record(record) == voter_set
    decoded = decode_control_value(ControlRecordType.KRAFT_VOTERS, encode_control_value(record))
    assert isinstance(decoded, VotersRecord)
    assert VoterSet.from_record(decoded) == voter_set


def test_a_voter_without_a_directory_id_is_written_as_the_zero_uuid() -> None:
    """Kafka writes ``Uuid.ZERO_UUID`` for "no directory id"; it reads back as none."""
    record = voters(node(1), node(2, DIR_A)).to_record()
    assert [v.voter_directory_id for v in record.voters] == [ZERO_UUID, DIR_A]
    assert VoterSet.from_record(record).keys == (ReplicaKey(1), ReplicaKey(2, DIR_A))


def test_the_static_set_has_the_configured_addresses_and_no_directory_ids() -> None:
    """kraft.version 0: the configured ids and addresses, on the default listener, each
    supporting only kraft.version 0."""
    static = VoterSet.from_static({2: Endpoint("h2", 2), 1: Endpoint("h1", 1)})
    assert static.ids == frozenset({1, 2})
    assert static.keys == (ReplicaKey(1), ReplicaKey(2))
    assert static.endpoints(2) == ((DEFAULT_LISTENER, "h2", 2),)
    assert static.endpoints(3) == ()
    assert not static.supports_kraft_version(1) and static.supports_kraft_version(0)


def test_a_node_is_filed_under_its_own_id() -> None:
    with pytest.raises(ValueError, match="filed under"):
        VoterSet({1: node(2)})


# -- is_voter ----------------------------------------------------------------------------------
def test_is_voter_compares_directory_ids_only_where_the_voter_has_one() -> None:
    """Kafka's ``VoterNode.isVoter``: same id; and the same directory id when the voter set
    knows one (a replica without one is then not the voter). A voter without a directory id
    (a static one) matches any directory."""
    known, static = voters(node(1, DIR_A)), voters(node(1))
    assert known.is_voter(ReplicaKey(1, DIR_A))
    assert not known.is_voter(ReplicaKey(1, DIR_B))
    assert not known.is_voter(ReplicaKey(1))
    assert not known.is_voter(ReplicaKey(2, DIR_A))
    assert static.is_voter(ReplicaKey(1)) and static.is_voter(ReplicaKey(1, DIR_B))
    assert not static.is_voter(ReplicaKey(2))


def test_is_only_voter_and_the_majority() -> None:
    alone = voters(node(1, DIR_A))
    assert alone.is_only_voter(ReplicaKey(1, DIR_A)) and not alone.is_only_voter(ReplicaKey(2))
    assert alone.majority_size() == 1
    assert voters(node(1), node(2)).majority_size() == 2
    assert voters(node(1), node(2), node(3)).majority_size() == 2
    assert not voters(node(1), node(2)).is_only_voter(ReplicaKey(1))


# -- add / remove / update -----------------------------------------------------------------------
def test_add_a_new_id_and_refuse_a_duplicate_id() -> None:
    """Kafka's ``addVoter``: empty when the id is a voter already, whatever its directory."""
    base = voters(node(1, DIR_A), node(2, DIR_B))
    added = base.add(node(3, DIR_A))
    assert added is not None and added.ids == frozenset({1, 2, 3})
    assert base.ids == frozenset({1, 2})  # immutable
    assert base.add(node(2, DIR_B)) is None
    assert base.add(node(2, DIR_A)) is None  # same id, another directory: still a duplicate


def test_remove_a_voter_and_refuse_an_unknown_one_or_the_last() -> None:
    """Kafka's ``removeVoter``: empty for a replica that is not a voter (wrong id, or wrong
    directory id) and when the set would be empty."""
    base = voters(node(1, DIR_A), node(2, DIR_B))
    removed = base.remove(ReplicaKey(2, DIR_B))
    assert removed is not None and removed.ids == frozenset({1})
    assert base.remove(ReplicaKey(2, DIR_A)) is None  # another incarnation of voter 2
    assert base.remove(ReplicaKey(3, DIR_B)) is None
    alone = voters(node(1, DIR_A))
    assert alone.remove(ReplicaKey(1, DIR_A)) is None  # never an empty voter set


def test_update_a_voter_and_refuse_a_replica_that_is_not_one() -> None:
    """Kafka's ``updateVoter``: new listeners and range for an existing voter key; empty for a
    replica that is not a voter."""
    base = voters(node(1, DIR_A), node(2, DIR_B))
    moved = node(2, DIR_B, port=8000)
    updated = base.update(moved)
    assert updated is not None
    assert updated.endpoints(2) == ((DEFAULT_LISTENER, "localhost", 8000),)
    assert updated.keys == base.keys
    assert base.update(node(2, DIR_A, port=8000)) is None
    assert base.update(node(3, DIR_B)) is None


# -- differs_by_one_voter --------------------------------------------------------------------------
def test_differs_by_one_voter() -> None:
    """KIP-853: each change adds or removes one voter, so that any majority of the old set
    overlaps any majority of the new one. A replaced directory id is two changes (a removal and
    an addition); a changed listener is none."""
    base = voters(node(1, DIR_A), node(2, DIR_B), node(3, DIR_A))
    grown = base.add(node(4, DIR_B))
    shrunk = base.remove(ReplicaKey(3, DIR_A))
    moved = base.update(node(2, DIR_B, port=1))
    assert grown is not None and shrunk is not None and moved is not None
    assert base.differs_by_one_voter(base)
    assert base.differs_by_one_voter(grown) and grown.differs_by_one_voter(base)
    assert base.differs_by_one_voter(shrunk)
    assert base.differs_by_one_voter(moved)
    two_more = grown.add(node(5, DIR_A))
    assert two_more is not None and not base.differs_by_one_voter(two_more)
    assert not grown.differs_by_one_voter(shrunk)
    replaced = voters(node(1, DIR_A), node(2, DIR_A), node(3, DIR_A))  # voter 2, new disk
    assert not base.differs_by_one_voter(replaced)


def test_supports_kraft_version_needs_every_voter() -> None:
    """An upgrade to kraft.version 1 needs every voter to support it."""
    old = VoterNode(ReplicaKey(2, DIR_B), (), (0, 0))
    assert voters(node(1, DIR_A), node(2, DIR_B)).supports_kraft_version(1)
    assert not voters(node(1, DIR_A), old).supports_kraft_version(1)
