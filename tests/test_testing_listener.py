"""``RecordingListener``: the offset at which each leader change was announced, and the records
of a loaded snapshot."""

from __future__ import annotations

from typing import Any

from kraft.protocol.messages import FetchRequest, FetchSnapshotRequest
from kraft.raft.listeners import LeaderAndEpoch
from kraft.record.batch import encode_batch
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.serde import BytesSerde
from kraft.snapshot import MemoryRawSnapshotWriter, SnapshotWriter
from kraft.testing import (
    RaftClientBuilder,
    RaftTestContext,
    RecordingListener,
    fetch_response,
    fetch_snapshot_response,
)

SNAPSHOT_ID = OffsetAndEpoch(10, 3)
TIMESTAMP_MS = 1_704_067_200_000


def test_a_new_leader_is_announced_once_the_listener_is_past_its_leader_change_record() -> None:
    """Kafka's ``MockListener``: a local leader of epoch 2 is announced only after the
    listener read the epoch's LeaderChange record (offset 2, after two records of epoch 1)."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(local_id=1, voters=(1,))
        .append_to_log(epoch=1, records=[b"a", b"b"])
        .build()
    )
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    context.poll_until_idle()
    assert listener.leader_change_offsets == {LeaderAndEpoch(1, 2): 3}
    assert listener.next_offset == 3


def test_a_follower_records_the_offset_of_each_leader_it_hears_of() -> None:
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(local_id=1, voters=(1, 2, 3))
        .with_elected_leader(epoch=5, leader_id=2)
        .build()
    )
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    context.poll()
    records = encode_batch(0, 5, [b"x", b"y"], timestamp_ms=context.clock.wall_ms())
    context.answer_fetch(records=records, high_watermark=2)
    assert listener.next_offset == 2
    context.deliver_request(context.begin_epoch_request(epoch=6, leader_id=3), source=3)
    context.poll()
    assert listener.leader_change_offsets == {LeaderAndEpoch(2, 5): 0, LeaderAndEpoch(3, 6): 2}
    assert list(listener.leader_change_offsets) == listener.leader_changes


def snapshot_file(records: list[list[bytes]]) -> bytes:
    """The bytes of snapshot :data:`SNAPSHOT_ID` holding ``records``, one batch per list."""
    frozen: list[Any] = []
    writer = SnapshotWriter(
        MemoryRawSnapshotWriter(SNAPSHOT_ID, on_freeze=frozen.append),
        BytesSerde(),
        last_contained_log_timestamp_ms=TIMESTAMP_MS,
        timestamp_ms=TIMESTAMP_MS,
    )
    for batch in records:
        writer.append(batch)
    writer.freeze()
    (raw,) = frozen
    data: bytes = raw.records()
    return data


def test_a_downloaded_snapshot_is_loaded_with_its_records() -> None:
    """KIP-630: a follower told to fetch a snapshot downloads it (here in two chunks) and
    hands it to its listeners, which continue from its end offset."""
    context: RaftTestContext[bytes] = (
        RaftClientBuilder(local_id=1, voters=(1, 2, 3))
        .with_elected_leader(epoch=5, leader_id=2)
        .build()
    )
    listener: RecordingListener[bytes] = RecordingListener()
    context.client.register(listener)
    data = snapshot_file([[b"s1", b"s2"], [b"s3"]])
    (request,) = context.poll_until_request(FetchRequest)
    context.deliver_response(request, fetch_response(5, 2, snapshot_id=SNAPSHOT_ID))
    context.poll()
    half = len(data) // 2
    for position, length in ((0, half), (half, None)):
        request, body = context.single_sent_request(FetchSnapshotRequest)
        assert body.position == position
        context.deliver_response(
            request, fetch_snapshot_response(5, 2, SNAPSHOT_ID, data, position, length)
        )
        context.poll()
    context.poll_until_idle()
    assert listener.snapshots == [SNAPSHOT_ID]
    assert listener.snapshot_records == {SNAPSHOT_ID: [b"s1", b"s2", b"s3"]}
    assert listener.next_offset == 10
    assert listener.records == []  # committed batches only
