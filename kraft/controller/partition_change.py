"""The record that changes one partition: Kafka's ``PartitionChangeBuilder``.

Given a partition as it is and what should become of it (a target ISR, a target replica list,
an election type), :meth:`PartitionChangeBuilder.build` returns the ``PartitionChangeRecord``
that gets there, or ``None`` when nothing would change. The record holds only what changes; the
epochs are not in it: replaying it (``PartitionRegistration.merge``) bumps the leader epoch when
the record names a leader and the partition epoch always.

Kafka's rules, at ``metadata.version`` 3.9-IV0 (kraft's; no eligible leader replicas, KIP-966,
and no leader epoch bump on an ISR shrink, which only versions before 3.6 needed):

- The current leader stays while it is in the target ISR and acceptable (the caller's
  predicate: registered, unfenced, not in controlled shutdown, not being removed).
- Otherwise the first acceptable replica of the target ISR, in replica order, leads; with
  ``Election.PREFERRED`` the first replica is preferred to the current leader; with
  ``Election.UNCLEAN`` a replica outside the ISR may lead when no ISR member can, and then the
  ISR becomes that replica alone and the leader recovery state RECOVERING.
- When no replica can lead, the leader becomes -1 and the ISR keeps its last member: an
  empty ISR is never written (which replica was in sync last is what a clean election needs).
- A replica list that drops a replica bumps the leader epoch (the record names the leader even
  when it stays), so that the dropped replica's fetches are fenced.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from kraft.metadata.image import NO_LEADER, NO_LEADER_CHANGE
from kraft.metadata.records import ApiMessageAndVersion, PartitionChangeRecord, at_latest_version

__all__ = ["Election", "LeaderRecoveryState", "PartitionChangeBuilder", "change_record_is_no_op"]


class LeaderRecoveryState(enum.IntEnum):
    """Kafka's ``LeaderRecoveryState``: whether a leader elected uncleanly has recovered."""

    NO_CHANGE = -1
    RECOVERED = 0
    RECOVERING = 1


class Election(enum.Enum):
    """Which replicas may be elected (Kafka's ``PartitionChangeBuilder.Election``)."""

    #: An ISR member, the first replica (the preferred leader) if it can lead.
    PREFERRED = "preferred"
    #: An ISR member; the current leader if it still can lead.
    ONLINE = "online"
    #: An ISR member if one can lead, else any acceptable replica (data may be lost).
    UNCLEAN = "unclean"


class _Partition(Protocol):
    """The fields of a partition the builder reads (``PartitionRegistration``'s)."""

    @property
    def replicas(self) -> tuple[int, ...]: ...
    @property
    def isr(self) -> tuple[int, ...]: ...
    @property
    def removing_replicas(self) -> tuple[int, ...]: ...
    @property
    def adding_replicas(self) -> tuple[int, ...]: ...
    @property
    def leader(self) -> int: ...
    @property
    def leader_recovery_state(self) -> int: ...
    @property
    def directories(self) -> tuple[uuid.UUID, ...]: ...


def change_record_is_no_op(record: PartitionChangeRecord) -> bool:
    """Whether ``record`` changes nothing (every field at its "no change" value)."""
    return (
        record.isr is None
        and record.leader == NO_LEADER_CHANGE
        and record.replicas is None
        and record.removing_replicas is None
        and record.adding_replicas is None
        and record.leader_recovery_state == LeaderRecoveryState.NO_CHANGE
        and record.directories is None
        and record.eligible_leader_replicas is None
        and record.last_known_elr is None
    )


class PartitionChangeBuilder:
    """Builds the ``PartitionChangeRecord`` from ``partition`` to its targets (module docstring).

    ``is_acceptable_leader`` says whether a broker may lead now. ``default_dir`` gives the log
    directory of a replica new to the partition (Kafka's ``DefaultDirProvider``); replicas that
    stay keep theirs. Set the ``target_*`` attributes and ``election``, then :meth:`build`.
    """

    def __init__(
        self,
        partition: _Partition,
        topic_id: uuid.UUID,
        partition_id: int,
        is_acceptable_leader: Callable[[int], bool],
        default_dir: Callable[[int], uuid.UUID],
    ) -> None:
        self._partition = partition
        self._topic_id = topic_id
        self._partition_id = partition_id
        self._is_acceptable_leader = is_acceptable_leader
        self._default_dir = default_dir
        self.target_isr: Sequence[int] = partition.isr
        self.target_replicas: Sequence[int] = partition.replicas
        self.election = Election.ONLINE
        self.target_leader_recovery_state = LeaderRecoveryState(partition.leader_recovery_state)

    def _is_valid_new_leader(self, replica: int) -> bool:
        return replica in self.target_isr and self._is_acceptable_leader(replica)

    def elect_leader(self) -> tuple[int, bool]:
        """The leader after the change and whether its election is unclean."""
        current = self._partition.leader
        if self.election is Election.PREFERRED and self.target_replicas:
            preferred = self.target_replicas[0]
            if self._is_valid_new_leader(preferred):
                return preferred, False
        if self._is_valid_new_leader(current):
            return current, False
        for replica in self.target_replicas:
            if self._is_valid_new_leader(replica):
                return replica, False
        if self.election is Election.UNCLEAN:
            for replica in self.target_replicas:
                if self._is_acceptable_leader(replica):
                    return replica, True
        return NO_LEADER, False

    def build(self) -> ApiMessageAndVersion | None:
        """The change record at kraft's record version, or ``None`` when nothing changes."""
        partition = self._partition
        target_isr = tuple(self.target_isr)
        target_replicas = tuple(self.target_replicas)
        leader = NO_LEADER_CHANGE
        isr: tuple[int, ...] | None = None
        recovery = LeaderRecoveryState.NO_CHANGE
        new_leader, unclean = self.elect_leader()
        if new_leader != partition.leader:
            leader = new_leader
            if unclean:
                # The new leader may lack records the old ISR had: it is the ISR alone now,
                # and it recovers (KIP-704) before serving.
                isr = (new_leader,)
                if partition.leader_recovery_state != LeaderRecoveryState.RECOVERING:
                    recovery = LeaderRecoveryState.RECOVERING
        if leader == NO_LEADER_CHANGE and not set(partition.replicas) <= set(target_replicas):
            # A dropped replica must stop fetching: naming the same leader bumps the epoch.
            leader = partition.leader
        if isr is None and target_isr and target_isr != partition.isr:
            isr = target_isr
        replicas: tuple[int, ...] | None = None
        directories: tuple[uuid.UUID, ...] | None = None
        if target_replicas:
            current_dirs = dict(zip(partition.replicas, partition.directories, strict=True))
            new_dirs = tuple(
                current_dirs[r] if r in current_dirs else self._default_dir(r)
                for r in target_replicas
            )
            if new_dirs != partition.directories:
                directories = new_dirs
            if target_replicas != partition.replicas:
                replicas = target_replicas
        if self.target_leader_recovery_state != partition.leader_recovery_state:
            recovery = self.target_leader_recovery_state
        record = PartitionChangeRecord(
            partition_id=self._partition_id,
            topic_id=self._topic_id,
            isr=isr,
            leader=leader,
            replicas=replicas,
            leader_recovery_state=recovery,
            directories=directories,
        )
        return None if change_record_is_no_op(record) else at_latest_version(record)
