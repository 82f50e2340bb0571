"""PartitionChangeBuilder: Kafka's ``PartitionChangeBuilderTest`` scenarios (the ones that apply
at metadata.version 3.9-IV0: no eligible leader replicas), in kraft's terms."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from kraft.controller.partition_change import (
    Election,
    LeaderRecoveryState,
    PartitionChangeBuilder,
    change_record_is_no_op,
)
from kraft.metadata.image import NO_LEADER, NO_LEADER_CHANGE, PartitionRegistration
from kraft.metadata.records import PartitionChangeRecord, record_version

TOPIC = uuid.UUID(int=0xF00)
DIRS = {broker: uuid.UUID(int=100 + broker) for broker in range(1, 6)}
NEW_DIR = uuid.UUID(int=999)


@dataclass(frozen=True)
class Part:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_recovery_state: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()

    @property
    def directories(self) -> tuple[uuid.UUID, ...]:
        return tuple(DIRS[r] for r in self.replicas)


#: replicas 2, 1, 3, all in sync, 1 leads (Kafka's FOO).
FOO = Part(replicas=(2, 1, 3), isr=(2, 1, 3), leader=1)
#: replicas 2, 1, 3, ISR 1, 3, 3 leads (Kafka's BAZ).
BAZ = Part(replicas=(2, 1, 3), isr=(1, 3), leader=3)
#: replicas 2, 1, 3, only 3 in sync and it cannot lead: no leader (Kafka's OFFLINE).
OFFLINE = Part(replicas=(2, 1, 3), isr=(3,), leader=NO_LEADER)


def builder(
    partition: Part,
    acceptable: frozenset[int] | None = None,
    *,
    isr: tuple[int, ...] | None = None,
    replicas: tuple[int, ...] | None = None,
    election: Election = Election.ONLINE,
) -> PartitionChangeBuilder:
    """A builder in which every broker but 3 may lead (``acceptable`` narrows that)."""
    accepted = acceptable if acceptable is not None else frozenset({1, 2, 4, 5})
    b = PartitionChangeBuilder(partition, TOPIC, 0, accepted.__contains__, lambda _: NEW_DIR)
    if isr is not None:
        b.target_isr = isr
    if replicas is not None:
        b.target_replicas = replicas
    b.election = election
    return b


def change(**fields: object) -> PartitionChangeRecord:
    return PartitionChangeRecord(topic_id=TOPIC, partition_id=0, **fields)  # type: ignore[arg-type]


def built(b: PartitionChangeBuilder) -> PartitionChangeRecord | None:
    result = b.build()
    if result is None:
        return None
    assert result.version == record_version(result.message.api_key)
    assert isinstance(result.message, PartitionChangeRecord)
    return result.message


def test_a_record_is_a_no_op_only_when_every_field_says_no_change() -> None:
    assert change_record_is_no_op(change())
    for field in (
        {"isr": (1,)},
        {"leader": NO_LEADER},
        {"replicas": (1,)},
        {"removing_replicas": (1,)},
        {"adding_replicas": (4,)},
        {"leader_recovery_state": LeaderRecoveryState.RECOVERED},
        {"directories": (NEW_DIR,)},
        {"eligible_leader_replicas": (5,)},
        {"last_known_elr": (6,)},
    ):
        assert not change_record_is_no_op(change(**field)), field


@pytest.mark.parametrize(
    ("b", "leader", "unclean"),
    [
        (builder(FOO, election=Election.PREFERRED), 2, False),
        (builder(FOO), 1, False),
        (builder(FOO, election=Election.UNCLEAN), 1, False),
        (builder(FOO, isr=(1, 3)), 1, False),
        (builder(FOO, isr=(1, 3), election=Election.UNCLEAN), 1, False),
        (builder(FOO, isr=(3,)), NO_LEADER, False),
        (builder(FOO, isr=(3,), election=Election.UNCLEAN), 2, True),
        (builder(FOO, isr=(4,), replicas=(2, 1, 3, 4), election=Election.UNCLEAN), 4, False),
        (builder(BAZ, election=Election.PREFERRED, acceptable=frozenset({1, 2, 3})), 3, False),
        (builder(BAZ, acceptable=frozenset({1, 2, 3})), 3, False),
        (builder(BAZ, election=Election.UNCLEAN, acceptable=frozenset({1, 2, 3})), 3, False),
    ],
)
def test_elect_leader(b: PartitionChangeBuilder, leader: int, unclean: bool) -> None:
    assert b.elect_leader() == (leader, unclean)


def test_nothing_to_change_builds_nothing() -> None:
    assert built(builder(FOO)) is None
    assert built(builder(FOO, election=Election.UNCLEAN)) is None
    assert built(builder(BAZ, election=Election.PREFERRED, acceptable=frozenset({1, 2, 3}))) is None


def test_an_isr_shrink_without_leader_change_does_not_name_the_leader() -> None:
    # Since metadata.version 3.6 an ISR shrink alone does not bump the leader epoch.
    assert built(builder(FOO, isr=(2, 1))) == change(isr=(2, 1))


def test_an_isr_expansion_changes_only_the_isr() -> None:
    assert built(builder(BAZ, isr=(1, 3, 2), acceptable=frozenset({1, 2, 3}))) == change(
        isr=(1, 3, 2)
    )


def test_losing_the_leader_from_the_isr_elects_the_first_isr_replica() -> None:
    assert built(builder(FOO, isr=(2, 3))) == change(isr=(2, 3), leader=2)


def test_no_acceptable_isr_member_leaves_the_partition_leaderless_keeping_the_isr() -> None:
    # The last ISR member stays in the ISR: an empty ISR is never written.
    assert built(builder(Part((1, 2), (1,), 1), acceptable=frozenset({2}), isr=())) == change(
        leader=NO_LEADER
    )


def test_reordering_replicas_moves_their_directories_with_them() -> None:
    assert built(builder(FOO, replicas=(3, 2, 1))) == change(
        replicas=(3, 2, 1), directories=(DIRS[3], DIRS[2], DIRS[1])
    )


def test_a_new_replica_gets_the_default_directory() -> None:
    assert built(builder(FOO, replicas=(2, 1, 3, 4))) == change(
        replicas=(2, 1, 3, 4), directories=(DIRS[2], DIRS[1], DIRS[3], NEW_DIR)
    )


def test_dropping_a_replica_names_the_same_leader_to_bump_its_epoch() -> None:
    assert built(builder(FOO, replicas=(2, 1, 4))) == change(
        leader=1, replicas=(2, 1, 4), directories=(DIRS[2], DIRS[1], NEW_DIR)
    )


def test_unclean_election_makes_the_new_leader_the_isr_and_recovering() -> None:
    assert built(builder(FOO, isr=(3,), election=Election.UNCLEAN)) == change(
        isr=(2,), leader=2, leader_recovery_state=LeaderRecoveryState.RECOVERING
    )
    offline = builder(OFFLINE, acceptable=frozenset({1}), election=Election.UNCLEAN)
    assert built(offline) == change(
        isr=(1,), leader=1, leader_recovery_state=LeaderRecoveryState.RECOVERING
    )


def test_an_offline_partition_stays_offline_without_unclean_election() -> None:
    assert built(builder(OFFLINE, acceptable=frozenset({1}))) is None


def test_a_leader_change_does_not_touch_a_recovering_state() -> None:
    recovering = Part((1, 2, 3), (1, 2, 3), 1, LeaderRecoveryState.RECOVERING)
    assert built(builder(recovering, acceptable=frozenset({2, 3}), isr=(2, 3))) == change(
        isr=(2, 3), leader=2
    )


def test_a_target_recovery_state_is_written() -> None:
    recovering = Part((1, 2, 3), (1,), 1, LeaderRecoveryState.RECOVERING)
    b = builder(recovering, acceptable=frozenset({1, 2, 3}), isr=(1, 2))
    b.target_leader_recovery_state = LeaderRecoveryState.RECOVERED
    assert built(b) == change(isr=(1, 2), leader_recovery_state=LeaderRecoveryState.RECOVERED)


def test_a_returning_preferred_replica_leads_under_preferred_election_only() -> None:
    assert built(builder(BAZ, isr=(1, 3, 2), acceptable=frozenset({1, 2, 3}))) == change(
        isr=(1, 3, 2)
    )
    preferred = builder(
        BAZ, isr=(1, 3, 2), acceptable=frozenset({1, 2, 3}), election=Election.PREFERRED
    )
    assert built(preferred) == change(isr=(1, 3, 2), leader=2)


def test_no_leader_change_is_the_record_default() -> None:
    assert change().leader == NO_LEADER_CHANGE


def registration(
    part: Part, leader_epoch: int = 100, partition_epoch: int = 200
) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=part.replicas,
        isr=part.isr,
        leader=part.leader,
        leader_recovery_state=part.leader_recovery_state,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        directories=part.directories,
    )


@pytest.mark.parametrize(
    ("part", "target", "leader_epoch"),
    [
        (FOO, {"isr": (2, 1)}, 100),  # ISR shrink: the leader epoch stays
        (FOO, {"isr": (2, 1, 3, 4), "replicas": (2, 1, 3, 4)}, 100),  # ISR expansion
        (FOO, {"isr": (2, 3)}, 101),  # new leader
        (FOO, {"replicas": (2, 1, 4)}, 101),  # a replica dropped: same leader, new epoch
        (FOO, {"replicas": (3, 2, 1)}, 100),  # replicas reordered
    ],
)
def test_replaying_the_change_bumps_the_epochs_as_kafka_does(
    part: Part, target: dict[str, tuple[int, ...]], leader_epoch: int
) -> None:
    # Replayed by kraft.metadata.image's PartitionRegistration.merge, as the managers do.
    record = built(builder(part, **target))  # type: ignore[arg-type]
    assert record is not None
    merged = registration(part).merge(record)
    assert (merged.leader_epoch, merged.partition_epoch) == (leader_epoch, 201)
    assert merged.isr == target.get("isr", part.isr)
    assert merged.replicas == target.get("replicas", part.replicas)
