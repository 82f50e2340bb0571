"""QuorumState: startup rules, legal and illegal transitions, persistence (docs/protocol.md §1.1,
§1.7), vote granting per state (§1.2), and the leader's high-watermark and check-quorum rules
(§1.5, §1.6)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import kraft.raft.quorum as quorum_module
from kraft.config import Endpoint, QuorumConfig
from kraft.errors import IllegalStateError
from kraft.log.quorum_state import ElectionState, MemoryQuorumStateStore
from kraft.raft.leader import LeaderState
from kraft.raft.quorum import TRANSITIONS, QuorumState
from kraft.raft.states import (
    NO_DEADLINE,
    CandidateState,
    FollowerState,
    ProspectiveState,
    ReplicaKey,
    ResignedState,
    UnattachedState,
)
from kraft.raft.voter_set import VoterSet

VOTERS = {
    1: Endpoint("127.0.0.1", 9091),
    2: Endpoint("127.0.0.1", 9092),
    3: Endpoint("127.0.0.1", 9093),
}
CONFIG = QuorumConfig(voters=VOTERS, election_timeout_ms=1000, fetch_timeout_ms=2000)


class FakeAccumulator:
    closed = False

    def close(self) -> None:
        self.closed = True


def quorum(
    local_id: int | None = 1,
    stored: ElectionState | None = None,
    log_epoch: int = 0,
    now_ms: int = 0,
) -> tuple[QuorumState[bytes], MemoryQuorumStateStore]:
    store = MemoryQuorumStateStore()
    if stored is not None:
        store.write_election_state(stored)
    store.writes.clear()
    q: QuorumState[bytes] = QuorumState(local_id, None, CONFIG, store, random.Random(7))
    q.initialize(log_epoch, now_ms)
    return q, store


def elect(q: QuorumState[bytes], now_ms: int = 0) -> LeaderState[bytes]:
    q.transition_to_prospective(now_ms)
    q.transition_to_candidate(now_ms)
    state = q.state
    assert isinstance(state, CandidateState)
    state.granting.add(2)
    return q.transition_to_leader(10, FakeAccumulator(), now_ms)  # type: ignore[arg-type]


# -- startup (§1.1, rules tried in order) -------------------------------------------------------


def test_startup_without_stored_state_is_unattached_at_epoch_zero() -> None:
    q, _ = quorum()
    assert isinstance(q.state, UnattachedState)
    assert (q.epoch, q.leader_id, q.voted_key) == (0, None, None)


def test_startup_rule_1_log_epoch_above_stored_epoch_wins_and_forgets_the_vote() -> None:
    q, store = quorum(stored=ElectionState.with_voted_candidate(2, 3), log_epoch=5)
    assert isinstance(q.state, UnattachedState)
    assert (q.epoch, q.voted_key) == (5, None)
    assert store.read_election_state() == ElectionState(5)


def test_startup_rule_2_stored_leader_self_comes_back_resigned_in_that_epoch() -> None:
    q, store = quorum(stored=ElectionState.with_elected_leader(4, 1))
    assert isinstance(q.state, ResignedState)
    assert q.epoch == 4
    assert store.writes == []  # Resigned is never persisted


def test_startup_rule_3_stored_vote_for_self_resumes_as_candidate() -> None:
    q, _ = quorum(stored=ElectionState.with_voted_candidate(4, 1))
    assert isinstance(q.state, CandidateState)
    assert q.epoch == 4
    assert q.voted_key == ReplicaKey(1)


def test_startup_rule_4_stored_leader_with_endpoints_is_followed() -> None:
    q, _ = quorum(stored=ElectionState.with_elected_leader(4, 2))
    assert isinstance(q.state, FollowerState)
    assert (q.epoch, q.leader_id) == (4, 2)


def test_startup_rule_4_leader_without_endpoints_is_unattached_with_that_leader() -> None:
    q, _ = quorum(stored=ElectionState.with_elected_leader(4, 9))
    assert isinstance(q.state, UnattachedState)
    assert (q.epoch, q.leader_id) == (4, 9)


def test_startup_rule_5_stored_vote_for_another_is_kept() -> None:
    q, _ = quorum(stored=ElectionState.with_voted_candidate(4, 2))
    assert isinstance(q.state, UnattachedState)
    assert q.voted_key == ReplicaKey(2)


def test_observer_never_times_out_into_an_election() -> None:
    q, _ = quorum(local_id=7)
    assert q.is_observer
    assert isinstance(q.state, UnattachedState)
    assert q.state.election_deadline_ms == NO_DEADLINE
    with pytest.raises(IllegalStateError):
        q.transition_to_prospective(0)


def test_a_stored_vote_without_a_local_id_is_illegal() -> None:
    with pytest.raises(IllegalStateError):
        quorum(local_id=None, stored=ElectionState.with_voted_candidate(3, 2))


def test_election_timeout_is_drawn_from_t_to_2t() -> None:
    q, _ = quorum()
    draws = {q.random_election_timeout_ms() for _ in range(2000)}
    assert min(draws) >= 1000
    assert max(draws) < 2000
    assert len(draws) > 500


# -- transitions and persistence (§1.1, §1.7) ------------------------------------------------


def test_prospective_is_never_persisted_candidate_bumps_epoch_and_votes_for_itself() -> None:
    q, store = quorum(stored=ElectionState(3))
    store.writes.clear()  # initialize wrote the restored state back
    q.transition_to_prospective(0)
    prospective = q.state  # a local: mypy would keep q.state narrowed past the next transition
    assert isinstance(prospective, ProspectiveState)
    assert q.epoch == 3
    assert store.writes == []
    q.transition_to_candidate(0)
    assert isinstance(q.state, CandidateState)
    assert q.epoch == 4
    assert store.read_election_state() == ElectionState.with_voted_candidate(4, 1)


def test_leader_is_persisted_and_starts_with_no_high_watermark() -> None:
    q, store = quorum(stored=ElectionState(3))
    q.state.high_watermark = 42
    leader = elect(q)
    assert leader.high_watermark is None
    assert store.read_election_state() == ElectionState.with_elected_leader(4, 1)


def test_resigned_is_not_persisted_and_closes_the_accumulator() -> None:
    q, store = quorum(stored=ElectionState(3))
    leader = elect(q)
    writes = len(store.writes)
    q.transition_to_resigned([2, 3], 0)
    assert isinstance(q.state, ResignedState)
    assert q.state.unacknowledged == {2, 3}
    assert leader.accumulator.closed  # type: ignore[attr-defined]
    assert len(store.writes) == writes


def test_candidate_only_from_prospective() -> None:
    q, _ = quorum(stored=ElectionState(3))
    with pytest.raises(IllegalStateError):
        q.transition_to_candidate(0)


def test_leader_needs_a_majority() -> None:
    q, _ = quorum(stored=ElectionState(3))
    q.transition_to_prospective(0)
    q.transition_to_candidate(0)
    with pytest.raises(IllegalStateError):
        q.transition_to_leader(0, FakeAccumulator(), 0)  # type: ignore[arg-type]


def test_leader_to_follower_in_the_same_epoch_is_illegal() -> None:
    q, _ = quorum(stored=ElectionState(3))
    elect(q)
    with pytest.raises(IllegalStateError):
        q.transition_to_follower(4, 2, q.leader_endpoints(2), 0)
    q.transition_to_follower(5, 2, q.leader_endpoints(2), 0)
    assert isinstance(q.state, FollowerState)


def test_follower_to_follower_same_epoch_only_with_more_endpoints() -> None:
    q, _ = quorum(stored=ElectionState.with_elected_leader(4, 2))
    with pytest.raises(IllegalStateError):
        q.transition_to_follower(4, 2, q.leader_endpoints(2), 0)
    with pytest.raises(IllegalStateError):
        q.transition_to_follower(4, 3, q.leader_endpoints(3), 0)  # two leaders in one epoch
    more = (*q.leader_endpoints(2), ("OTHER", "127.0.0.1", 9999))
    q.transition_to_follower(4, 2, more, 0)
    assert isinstance(q.state, FollowerState)
    assert q.state.leader_endpoints == more


def test_lower_epoch_is_illegal() -> None:
    q, _ = quorum(stored=ElectionState(5))
    with pytest.raises(IllegalStateError):
        q.transition_to_unattached(4, 0)
    with pytest.raises(IllegalStateError):
        q.transition_to_follower(4, 2, q.leader_endpoints(2), 0)


def test_a_vote_is_persisted_and_only_one_per_epoch() -> None:
    q, store = quorum(stored=ElectionState(5))
    q.transition_to_voted(ReplicaKey(2), 0)
    assert store.read_election_state() == ElectionState.with_voted_candidate(5, 2)
    with pytest.raises(IllegalStateError):
        q.transition_to_voted(ReplicaKey(3), 0)


def test_prospective_vote_is_persisted_but_stays_prospective() -> None:
    q, store = quorum(stored=ElectionState(5))
    q.transition_to_prospective(0)
    q.transition_to_voted(ReplicaKey(2), 0)
    assert isinstance(q.state, ProspectiveState)
    assert store.read_election_state() == ElectionState.with_voted_candidate(5, 2)


def test_lost_pre_vote_returns_to_unattached_same_epoch_keeping_the_vote() -> None:
    q, _ = quorum(stored=ElectionState.with_voted_candidate(5, 2))
    q.transition_to_prospective(0)
    q.transition_to_unattached(5, 0)
    assert isinstance(q.state, UnattachedState)
    assert (q.epoch, q.voted_key) == (5, ReplicaKey(2))


def test_follower_keeps_the_high_watermark_it_knew() -> None:
    q, _ = quorum(stored=ElectionState(5))
    q.state.high_watermark = 17
    q.transition_to_follower(6, 2, q.leader_endpoints(2), 0)
    assert q.high_watermark == 17


# -- vote granting per state (§1.2) ---------------------------------------------------------


C = ReplicaKey(2)


@pytest.mark.parametrize(
    ("state", "standard", "pre_vote"),
    [
        (UnattachedState(5, None, None, None, 0), True, True),
        (UnattachedState(5, None, 3, None, 0), False, True),  # known leader
        (UnattachedState(5, None, None, ReplicaKey(2), 0), True, True),  # same candidate again
        (UnattachedState(5, None, None, ReplicaKey(3), 0), False, True),  # voted for another
        (ProspectiveState(5, None, 1, None, None, frozenset({1, 2, 3}), 0), True, True),
        (CandidateState(5, None, 1, None, frozenset({1, 2, 3}), 0, retries=1), False, True),
        (FollowerState(5, None, 3, (), None, 0, has_fetched=False), False, True),
        (FollowerState(5, None, 3, (), None, 0, has_fetched=True), False, False),
        (ResignedState(5, None, 1, frozenset({1, 2, 3}), 0, []), False, True),
    ],
)
def test_vote_granting_table_with_an_up_to_date_log(state, standard: bool, pre_vote: bool) -> None:
    assert state.can_grant_vote(C, True, pre_vote=False) is standard
    assert state.can_grant_vote(C, True, pre_vote=True) is pre_vote
    # Never with a log that is behind ours.
    assert state.can_grant_vote(C, False, pre_vote=True) is False
    if state.name == "Unattached":
        assert state.can_grant_vote(C, False, pre_vote=False) is False


def test_voted_state_matches_a_stored_directory_id_exactly() -> None:
    """§1.2: a Voted replica grants again only to the same id and, if one was stored, the same
    directory id (a candidate sending none does not match a stored one); a vote stored without
    a directory id matches the id alone."""
    d1, d2 = uuid.uuid4(), uuid.uuid4()
    voted = UnattachedState(5, None, None, ReplicaKey(2, d1), 0)
    assert voted.can_grant_vote(ReplicaKey(2, d1), True, pre_vote=False)
    assert not voted.can_grant_vote(ReplicaKey(2, d2), True, pre_vote=False)
    assert not voted.can_grant_vote(ReplicaKey(2, None), True, pre_vote=False)
    voted_without = UnattachedState(5, None, None, ReplicaKey(2, None), 0)
    assert voted_without.can_grant_vote(ReplicaKey(2, d2), True, pre_vote=False)


# -- leader: high watermark (§1.5) and check-quorum (§1.6) --------------------------------------


def leader_state(
    voters: frozenset[int] = frozenset({1, 2, 3}), start: int = 10
) -> LeaderState[bytes]:
    return LeaderState(
        epoch=4,
        local=ReplicaKey(1),
        epoch_start_offset=start,
        voter_set=VoterSet.from_static({v: Endpoint("h", 9000 + v) for v in voters}),
        accumulator=FakeAccumulator(),  # type: ignore[arg-type]
        check_quorum_timeout_ms=3000,
        begin_quorum_epoch_interval_ms=1000,
        check_quorum_deadline_ms=3000,
    )


def test_no_high_watermark_until_a_majority_holds_a_record_of_the_epoch() -> None:
    leader = leader_state()
    assert not leader.update_local_state(11, 0)
    # Follower 2 at the epoch start offset: a majority holds only older records.
    assert not leader.update_replica_state(ReplicaKey(2), 0, 10, 11)
    assert leader.high_watermark is None
    assert leader.update_replica_state(ReplicaKey(2), 1, 11, 11)
    assert leader.high_watermark == 11


def test_high_watermark_never_decreases() -> None:
    leader = leader_state()
    leader.update_local_state(20, 0)
    leader.update_replica_state(ReplicaKey(2), 0, 20, 20)
    assert leader.high_watermark == 20
    leader.update_replica_state(ReplicaKey(2), 1, 15, 20)  # follower truncated and refetches
    assert leader.high_watermark == 20


def test_observers_never_move_the_high_watermark() -> None:
    leader = leader_state()
    leader.update_local_state(20, 0)
    assert not leader.update_replica_state(ReplicaKey(7), 0, 20, 20)
    assert leader.high_watermark is None
    assert [s.key.id for s in leader.active_observers(0)] == [7]


def test_anonymous_fetchers_are_not_tracked() -> None:
    leader = leader_state()
    assert not leader.update_replica_state(ReplicaKey(-1), 0, 20, 20)
    assert leader.active_observers(0) == []


def test_single_voter_commits_on_its_own_append_and_never_fails_check_quorum() -> None:
    leader = leader_state(frozenset({1}))
    assert leader.update_local_state(11, 0)
    assert leader.high_watermark == 11
    assert not leader.check_quorum_expired(10**12)


def test_check_quorum_resets_when_a_majority_fetched() -> None:
    leader = leader_state(frozenset({1, 2, 3, 4, 5}))
    leader.record_fetch_for_check_quorum(2, 2000)
    assert leader.check_quorum_deadline_ms == 3000  # leader + 1 of 5: no majority yet
    leader.record_fetch_for_check_quorum(3, 2500)
    assert leader.check_quorum_deadline_ms == 5500
    assert not leader.check_quorum_expired(5499)
    assert leader.check_quorum_expired(5500)


def test_preferred_successors_are_ordered_by_fetch_offset() -> None:
    leader = leader_state(frozenset({1, 2, 3, 4}))
    leader.update_replica_state(ReplicaKey(2), 0, 5, 20)
    leader.update_replica_state(ReplicaKey(4), 0, 15, 20)
    assert leader.successors_by_fetch_offset() == [4, 2, 3]


# -- the transition table and its diagram in docs/protocol.md ------------------------------------

DIAGRAM_BEGIN = "<!-- transitions:begin"
DIAGRAM_END = "<!-- transitions:end -->"


def render_transitions() -> str:
    """``TRANSITIONS`` as the text diagram docs/protocol.md shows: one line per transition."""
    width = max(len(name) for name in TRANSITIONS)
    lines = [
        f"{source:<{width}} --> {target:<{width}}  ({change.value})"
        for source, targets in TRANSITIONS.items()
        for target, change in targets.items()
    ]
    return "\n".join(lines)


def test_the_transition_diagram_in_docs_is_generated_from_the_table() -> None:
    """docs/protocol.md shows QuorumState's transition table; it must say what the code
    checks. On failure, paste the printed text between the markers."""
    doc = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text(encoding="utf-8")
    begin = doc.index(DIAGRAM_BEGIN)
    end = doc.index(DIAGRAM_END)
    block = doc[doc.index("\n", begin) + 1 : end].strip()
    assert block.startswith("```text\n") and block.endswith("\n```")
    expected = render_transitions()
    if block[len("```text\n") : -len("\n```")] != expected:
        print(f"```text\n{expected}\n```")
    assert block[len("```text\n") : -len("\n```")] == expected


def test_the_transitions_are_checked_against_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``transition_to_*`` methods consult ``TRANSITIONS``: removing an entry makes that
    transition illegal (and leaves the state as it was)."""
    q, _ = quorum()
    table = {source: dict(targets) for source, targets in quorum_module.TRANSITIONS.items()}
    del table["Unattached"]["Prospective"]
    monkeypatch.setattr(quorum_module, "TRANSITIONS", table)
    with pytest.raises(IllegalStateError):
        q.transition_to_prospective(0)
    assert isinstance(q.state, UnattachedState)
    q.transition_to_unattached(1, 0)  # still listed: allowed
    assert q.epoch == 1


def test_every_transition_not_in_the_table_raises() -> None:
    """From each reachable state, each target the table does not list raises
    ``IllegalStateError`` and changes nothing."""

    def in_state(name: str) -> QuorumState[bytes]:
        q, _ = quorum()
        if name == "Voted":
            q.transition_to_voted(ReplicaKey(2), 0)
        elif name == "Prospective":
            q.transition_to_prospective(0)
        elif name == "Candidate":
            q.transition_to_prospective(0)
            q.transition_to_candidate(0)
        elif name in ("Leader", "Resigned"):
            elect(q)
            if name == "Resigned":
                q.transition_to_resigned([2, 3], 0)
        elif name == "Follower":
            q.transition_to_follower(1, 2, q.leader_endpoints(2), 0)
        assert q.state.name == name
        return q

    attempts: dict[str, Callable[[QuorumState[bytes]], object]] = {
        "Unattached": lambda q: q.transition_to_unattached(q.epoch, 0),
        "Voted": lambda q: q.transition_to_voted(ReplicaKey(3), 0),
        "Prospective": lambda q: q.transition_to_prospective(0),
        "Candidate": lambda q: q.transition_to_candidate(0),
        "Leader": lambda q: q.transition_to_leader(0, FakeAccumulator(), 0),  # type: ignore[arg-type]
        "Resigned": lambda q: q.transition_to_resigned([], 0),
    }
    checked = 0
    for source, allowed in TRANSITIONS.items():
        for target, attempt in attempts.items():
            q = in_state(source)
            if target in allowed and (
                target != "Unattached" or allowed[target].allows(q.epoch, q.epoch)
            ):
                continue
            before = (q.state.name, q.epoch)
            with pytest.raises(IllegalStateError):
                attempt(q)
            assert (q.state.name, q.epoch) == before
            checked += 1
    assert checked >= 20
