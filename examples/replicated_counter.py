"""A replicated counter on a real node: ``RaftNode`` embedded in a program.

The state machine is a ``Listener`` that adds up the committed increments (and starts over from
a snapshot's sum when it is handed one). The node is a quorum of one voter, on a port the OS
picks, in a data directory formatted as ``kraft storage format`` does. ``node.append`` returns
a future that completes once the increment has committed and the counter has applied it.

    python examples/replicated_counter.py
"""

from __future__ import annotations

import tempfile

from kraft.config import Endpoint, QuorumConfig
from kraft.log.meta_properties import format_storage, random_uuid
from kraft.raft.listeners import BatchReader, Listener, SnapshotReaderLike
from kraft.record.serde import MsgspecSerde
from kraft.runtime.node import RaftNode

TIMEOUT_MS = 30_000


class Counter(Listener[int]):
    """The sum of every committed increment; callbacks run on the node's driver thread."""

    def __init__(self) -> None:
        self.value = 0

    def handle_commit(self, reader: BatchReader[int]) -> None:
        with reader:
            for batch in reader:  # a control batch (LeaderChange) has no records
                self.value += sum(batch.records)

    def handle_load_snapshot(self, reader: SnapshotReaderLike[int]) -> None:
        try:
            self.value = sum(sum(batch.records) for batch in reader)
        finally:
            reader.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        format_storage(data_dir, random_uuid(), node_id=1)
        # One voter: it elects itself. Port 0: the OS picks one (nobody dials a lone voter).
        config = QuorumConfig(voters={1: Endpoint("127.0.0.1", 0)}, append_linger_ms=0)
        counter = Counter()
        node = RaftNode(node_id=1, data_dir=data_dir, config=config, serde=MsgspecSerde(int))
        node.register(counter)  # before start: the counter sees every commit from the first on
        with node:  # start() ... close()
            # Each append waits (until its timeout) for the node to lead, then commits.
            futures = [node.append([step], timeout_ms=TIMEOUT_MS) for step in (1, 2, 3, 4)]
            last = max(future.result() for future in futures)
            print(f"node 1 on {node.listen_address}: counter = {counter.value} after offset {last}")


if __name__ == "__main__":
    main()
