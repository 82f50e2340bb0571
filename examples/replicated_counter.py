"""A replicated counter on a real node: ``RaftNode`` embedded in a program.

The state machine is a ``Listener`` that adds up the committed increments (and starts over from
a snapshot's sum when it is handed one). The node is a quorum of one voter, on a port the OS
picks, in a data directory formatted as ``kraft storage format`` does. Increments are appended
on the leader; the counter changes only when they commit, which the program waits for.

    python examples/replicated_counter.py
"""

from __future__ import annotations

import tempfile
import threading

from kraft.config import Endpoint, QuorumConfig
from kraft.log.meta_properties import format_storage, random_uuid
from kraft.raft.listeners import BatchReader, LeaderAndEpoch, Listener, SnapshotReaderLike
from kraft.record.serde import MsgspecSerde
from kraft.runtime.node import RaftNode

TIMEOUT_S = 30.0


class Counter(Listener[int]):
    """The sum of every committed increment; callbacks run on the node's driver thread."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.value = 0
        self.committed = -1  # the last committed offset this counter has seen
        self.leader = LeaderAndEpoch(None, 0)

    def handle_commit(self, reader: BatchReader[int]) -> None:
        with reader, self.changed:
            for batch in reader:  # a control batch (LeaderChange) has no records
                self.value += sum(batch.records)
                self.committed = batch.last_offset
            self.changed.notify_all()

    def handle_load_snapshot(self, reader: SnapshotReaderLike[int]) -> None:
        with self.changed:
            try:
                self.value = sum(sum(batch.records) for batch in reader)
                self.committed = reader.snapshot_id.offset - 1
            finally:
                reader.close()
            self.changed.notify_all()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        with self.changed:
            self.leader = leader
            self.changed.notify_all()


def main() -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        format_storage(data_dir, random_uuid(), node_id=1)
        # One voter: it elects itself. Port 0: the OS picks one (nobody dials a lone voter).
        config = QuorumConfig(voters={1: Endpoint("127.0.0.1", 0)}, append_linger_ms=0)
        counter = Counter()
        node = RaftNode(node_id=1, data_dir=data_dir, config=config, serde=MsgspecSerde(int))
        node.register(counter)  # before start: the counter sees every commit from the first on
        with node:  # start() ... close()
            with counter.changed:  # leading, with every earlier commit applied
                if not counter.changed.wait_for(lambda: counter.leader.is_leader(1), TIMEOUT_S):
                    raise TimeoutError("node 1 did not become leader")
            epoch = counter.leader.epoch
            last = -1
            for increment in (1, 2, 3, 4):
                last = node.client.prepare_append(epoch, [increment])
                node.client.schedule_prepared_append()
            with counter.changed:
                if not counter.changed.wait_for(lambda: counter.committed >= last, TIMEOUT_S):
                    raise TimeoutError(f"offset {last} did not commit")
                print(
                    f"node 1 leads epoch {epoch} on {node.listen_address}; "
                    f"counter = {counter.value} after offset {counter.committed}"
                )


if __name__ == "__main__":
    main()
