"""Snapshots in the Raft client (KIP-630; docs/snapshots.md, docs/protocol.md §1.4, §2).

Leader side: a Fetch at offset 0 while a (non-bootstrap) snapshot exists, or one the log can no
longer serve (below the log start, at it in another epoch, in an epoch older than the earliest
snapshot), is answered with the latest SnapshotId; FetchSnapshot is served by position and
max bytes with SNAPSHOT_NOT_FOUND and POSITION_OUT_OF_RANGE, after the leader-only validation,
and counts for check-quorum.

Follower side: a SnapshotId in a Fetch response starts a download; FetchSnapshot chunks advance
the position; the last chunk freezes the snapshot (if it reads as a valid snapshot), truncates
the log to it and sets the high watermark; listeners load it before any later commit. Errors
abandon the download, bad chunks are refused, and a download survives a change of leader.

API: ``create_snapshot``, ``latest_snapshot_id``, listeners that load the snapshot, and the
periodic cleaner (``log_clean_interval_ms``).

Kafka's counterparts are in ``KafkaRaftClientSnapshotTest`` (testFetchResponseWithSnapshotId,
testFetchSnapshotRequestAsLeader, testPartialFetchSnapshotRequestAsLeader,
testFetchSnapshotRequestUnknownPartition, testFetchSnapshotRequestMissingSnapshot,
testFetchSnapshotRequestBootstrapSnapshot, testFetchSnapshotRequestWithInvalidPosition,
testFetchSnapshotRequestWithOlderEpoch, testFetchSnapshotResponsePartialData,
testFetchSnapshotResponseMissingSnapshot, testFetchSnapshotResponseToNotFollower,
testFetchSnapshotRequestClusterIdValidation, testCreateSnapshotAsLeaderWithInvalidSnapshotId,
testLeaderShouldResignLeadershipIfNotGetFetchSnapshotRequestFromMajorityVoters, ...).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft.errors import IllegalStateError
from kraft.log.base import SnapshotRetention
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    SnapshotId,
)
from kraft.raft.listeners import BatchReader
from kraft.record.batch import encode_batch
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.serde import BytesSerde
from kraft.snapshot import MemoryRawSnapshotWriter, SnapshotReader, SnapshotWriter
from kraft.testing import RaftClientBuilder, RaftTestContext, RecordingListener

LOCAL = 1
VOTERS = (1, 2, 3)
TIMESTAMP_MS = 1_704_067_200_000


# =============================================================================================
# Helpers
# =============================================================================================
class EventListener(RecordingListener[bytes]):
    """Records, in order, each snapshot it loads (id and data records) and each committed
    batch (base and last offset)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[Any, ...]] = []

    def handle_commit(self, reader: BatchReader[bytes]) -> None:
        with reader:
            for batch in reader:
                self.batches.append(batch)
                self.events.append(("commit", batch.base_offset, batch.last_offset))

    def handle_load_snapshot(self, reader: Any) -> None:
        with reader:
            records = [r for batch in reader for r in batch.records]
        self.snapshots.append(reader.snapshot_id)
        self.events.append(("snapshot", reader.snapshot_id, records))


def snapshot_bytes(
    snapshot_id: OffsetAndEpoch, records: list[list[bytes]], timestamp_ms: int = TIMESTAMP_MS
) -> bytes:
    """A valid snapshot file, as a leader would hold it: one batch per inner list."""
    frozen: list[Any] = []
    writer = SnapshotWriter(
        MemoryRawSnapshotWriter(snapshot_id, on_freeze=frozen.append),
        BytesSerde(),
        last_contained_log_timestamp_ms=timestamp_ms,
        timestamp_ms=timestamp_ms,
    )
    for batch in records:
        writer.append(batch)
    writer.freeze()
    (raw,) = frozen
    data: bytes = raw.records()
    return data


# -- leader ------------------------------------------------------------------------------------
LEADER_EPOCH = 2
SNAPSHOT = OffsetAndEpoch(5, LEADER_EPOCH)
SNAPSHOT_RECORDS = [[b"state-1", b"state-2"], [b"state-3"]]


def leader_context(**config: object) -> RaftTestContext[bytes]:
    """Replica 1 leads epoch 2 of (1, 2, 3): offsets 0-1 are epoch-1 records, 2 the
    LeaderChange, 3-4 epoch-2 records; voter 2 fetched to the end, so the HW is 5 = LEO."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS)
        .append_to_log(1, [b"a", b"b"])
        .with_unknown_leader(1)
        .with_config(**config)
        .build()
    )
    assert ctx.become_leader() == LEADER_EPOCH
    ctx.append_and_drain([b"c", b"d"])
    assert ctx.advance_leader_high_watermark_to_log_end() == 5
    ctx.sent_requests()
    ctx.sent_responses()
    return ctx


def make_snapshot(
    ctx: RaftTestContext[bytes],
    snapshot_id: OffsetAndEpoch = SNAPSHOT,
    records: list[list[bytes]] | None = None,
) -> bytes:
    """Write and freeze ``snapshot_id`` through the client; return the file's bytes."""
    writer = ctx.client.create_snapshot(snapshot_id, TIMESTAMP_MS)
    assert writer is not None
    with writer:
        for batch in SNAPSHOT_RECORDS if records is None else records:
            writer.append(batch)
        writer.freeze()
    raw = ctx.log.read_snapshot(snapshot_id)
    assert raw is not None
    data: bytes = raw.records()
    return data


def leader_with_snapshot(
    *, cleaned: bool, **config: object
) -> tuple[RaftTestContext[bytes], bytes]:
    """:func:`leader_context` with snapshot (5, 2); ``cleaned``: the log starts at 5."""
    ctx = leader_context(**config)
    data = make_snapshot(ctx)
    if cleaned:
        assert ctx.log.delete_before_snapshot(SNAPSHOT)
        assert (ctx.log.log_start_offset, ctx.log_end_offset) == (5, 5)
    return ctx, data


def ask(ctx: RaftTestContext[bytes], body: Any, source: int = 2) -> Any:
    """Deliver a request from ``source``, poll, and return the one answer's body."""
    ctx.deliver_request(body, source)
    ctx.poll()
    sent = ctx.sent_responses()
    assert len(sent) == 1, sent
    return sent[0].body


def fetch(epoch: int, offset: int, last_epoch: int, replica: int = 2) -> FetchRequest:
    return FetchRequest(
        replica_id=replica,
        current_leader_epoch=epoch,
        fetch_offset=offset,
        last_fetched_epoch=last_epoch,
        max_wait_ms=0,
    )


def fetch_snapshot(
    epoch: int = LEADER_EPOCH,
    snapshot_id: OffsetAndEpoch = SNAPSHOT,
    position: int = 0,
    max_bytes: int = 1 << 31 - 1,
    replica: int = 2,
) -> FetchSnapshotRequest:
    return FetchSnapshotRequest(
        replica_id=replica,
        current_leader_epoch=epoch,
        snapshot_id=SnapshotId.of(snapshot_id),
        position=position,
        max_bytes=max_bytes,
    )


# -- follower ----------------------------------------------------------------------------------
FOLLOWER_EPOCH = 5
REMOTE = 2
OTHER = 3
REMOTE_SNAPSHOT = OffsetAndEpoch(10, 3)


def follower_context(**config: object) -> RaftTestContext[bytes]:
    """Replica 1 follows 2 in epoch 5; its log holds two epoch-1 records (LEO 2)."""
    return (
        RaftClientBuilder(LOCAL, VOTERS)
        .append_to_log(1, [b"a", b"b"])
        .with_elected_leader(FOLLOWER_EPOCH, REMOTE)
        .with_config(**config)
        .build()
    )


def leader_says(
    snapshot_id: OffsetAndEpoch | None = None,
    *,
    records: bytes = b"",
    high_watermark: int = -1,
    epoch: int = FOLLOWER_EPOCH,
    leader: int = REMOTE,
) -> FetchResponse:
    return FetchResponse(
        high_watermark=high_watermark,
        records=records,
        snapshot_id=None if snapshot_id is None else SnapshotId.of(snapshot_id),
        current_leader=LeaderIdAndEpoch(leader, epoch),
    )


def chunk(
    data: bytes,
    position: int,
    length: int,
    *,
    snapshot_id: OffsetAndEpoch = REMOTE_SNAPSHOT,
    error: int = Errors.NONE,
    epoch: int = FOLLOWER_EPOCH,
    leader: int = REMOTE,
) -> FetchSnapshotResponse:
    """The leader's answer to a FetchSnapshot at ``position``: ``length`` bytes of ``data``."""
    return FetchSnapshotResponse(
        partition_error_code=error,
        snapshot_id=SnapshotId.of(snapshot_id),
        current_leader=LeaderIdAndEpoch(leader, epoch),
        size=len(data),
        position=position,
        unaligned_records=b"" if error else data[position : position + length],
    )


def start_download(
    ctx: RaftTestContext[bytes], snapshot_id: OffsetAndEpoch = REMOTE_SNAPSHOT
) -> tuple[Any, FetchSnapshotRequest]:
    """Answer the follower's Fetch with ``snapshot_id``; return its FetchSnapshot."""
    (request,) = ctx.poll_until_request(FetchRequest)
    ctx.deliver_response(request, leader_says(snapshot_id))
    ctx.poll()
    return the_request(ctx, FetchSnapshotRequest)


def latest(ctx: RaftTestContext[bytes]) -> OffsetAndEpoch | None:
    """``client.latest_snapshot_id`` (a call, so that type checkers do not narrow it)."""
    return ctx.client.latest_snapshot_id


def the_request(ctx: RaftTestContext[bytes], kind: type[Any]) -> tuple[Any, Any]:
    """The next request the client sends (polling for it), which must be a ``kind``."""
    for _ in range(5):
        sent = ctx.sent_requests()
        if sent:
            break
        ctx.poll()
    assert len(sent) == 1, sent
    assert isinstance(sent[0].body, kind), sent[0].body
    return sent[0], sent[0].body


REMOTE_DATA = snapshot_bytes(REMOTE_SNAPSHOT, [[b"s1", b"s2"], [b"s3"], [b"s4" * 20]])


# =============================================================================================
# Leader: Fetch answered with a SnapshotId
# =============================================================================================
def test_fetch_at_offset_zero_gets_the_latest_snapshot_id_even_if_the_log_starts_at_zero() -> None:
    """§1.4/§1.12: an empty fetcher (offset 0) is sent the latest snapshot, not the log, as
    soon as a non-bootstrap snapshot exists, whatever the log start."""
    ctx = leader_context()
    make_snapshot(ctx, OffsetAndEpoch(3, 2), [[b"early"]])
    make_snapshot(ctx)
    assert ctx.log.log_start_offset == 0
    response = ask(ctx, fetch(LEADER_EPOCH, 0, 0))
    assert isinstance(response, FetchResponse)
    assert response.partition_error_code == Errors.NONE
    assert response.snapshot_id == SnapshotId.of(SNAPSHOT)
    assert response.records == b""
    assert response.diverging_epoch is None
    assert response.current_leader == LeaderIdAndEpoch(LOCAL, LEADER_EPOCH)


def test_fetch_at_offset_zero_with_only_the_bootstrap_snapshot_gets_records() -> None:
    """§1.4: the bootstrap snapshot (0, 0) is never sent; the fetcher reads the log."""
    ctx = leader_context()
    make_snapshot(ctx, OffsetAndEpoch(0, 0), [[b"bootstrap"]])
    response = ask(ctx, fetch(LEADER_EPOCH, 0, 0))
    assert response.snapshot_id is None
    assert response.records == ctx.log.read(0).records


@pytest.mark.parametrize(
    ("offset", "last_epoch"),
    [(0, 0), (3, 2), (2, 1), (5, 1)],
    ids=["empty", "below-start", "below-start-older-epoch", "at-start-other-epoch"],
)
def test_fetch_the_cleaned_log_cannot_serve_gets_the_latest_snapshot_id(
    offset: int, last_epoch: int
) -> None:
    """§1.11 validateOffsetAndEpoch: below the log start, or at it in an epoch other than
    the snapshot's, the fetcher is sent the latest snapshot id; its fetch does not move the
    fetcher's progress (no records)."""
    ctx, _ = leader_with_snapshot(cleaned=True)
    response = ask(ctx, fetch(LEADER_EPOCH, offset, last_epoch))
    assert response.partition_error_code == Errors.NONE
    assert response.snapshot_id == SnapshotId.of(SNAPSHOT)
    assert response.records == b""
    assert response.log_start_offset == 5


def test_fetch_in_an_epoch_older_than_the_earliest_snapshot_gets_the_snapshot_id() -> None:
    """§1.12: ``lastEpoch < earliestSnapshot.epoch`` is sent the snapshot even above the log
    start."""
    ctx, _ = leader_with_snapshot(cleaned=True)
    ctx.append_and_drain([b"e", b"f"])
    response = ask(ctx, fetch(LEADER_EPOCH, 6, 1))
    assert response.snapshot_id == SnapshotId.of(SNAPSHOT)


def test_fetch_at_the_log_start_in_the_snapshot_epoch_is_served_from_the_log() -> None:
    """§1.11: at the log start in the snapshot's epoch the fetcher is caught up with the
    snapshot: it gets the log from there (nothing yet), no snapshot id."""
    ctx, _ = leader_with_snapshot(cleaned=True)
    response = ask(ctx, fetch(LEADER_EPOCH, 5, LEADER_EPOCH))
    assert (response.partition_error_code, response.snapshot_id) == (Errors.NONE, None)
    assert response.diverging_epoch is None
    ctx.append_and_drain([b"e"])
    response = ask(ctx, fetch(LEADER_EPOCH, 5, LEADER_EPOCH))
    assert response.snapshot_id is None
    assert response.records == ctx.log.read(5).records


# =============================================================================================
# Leader: FetchSnapshot
# =============================================================================================
@pytest.mark.parametrize("max_bytes", [1, 7, 64, 1 << 20])
def test_fetch_snapshot_chunks_by_position_and_max_bytes_concatenate_to_the_file(
    max_bytes: int,
) -> None:
    """§1.3: each answer is the slice [position, position + max_bytes) of the file, whatever
    batch boundary it cuts, with the file's size and the position echoed."""
    ctx, data = leader_with_snapshot(cleaned=True)
    received = b""
    while len(received) < len(data):
        response = ask(ctx, fetch_snapshot(position=len(received), max_bytes=max_bytes))
        assert isinstance(response, FetchSnapshotResponse)
        assert response.partition_error_code == Errors.NONE
        assert response.snapshot_id == SnapshotId.of(SNAPSHOT)
        assert (response.size, response.position) == (len(data), len(received))
        assert response.current_leader == LeaderIdAndEpoch(LOCAL, LEADER_EPOCH)
        assert response.unaligned_records == data[len(received) : len(received) + max_bytes]
        received += response.unaligned_records
    assert received == data


def test_fetch_snapshot_chunks_are_capped_by_fetch_snapshot_max_bytes() -> None:
    """kraft: the leader never sends more than ``fetch_snapshot_max_bytes`` in one answer."""
    ctx, data = leader_with_snapshot(cleaned=False, fetch_snapshot_max_bytes=10)
    response = ask(ctx, fetch_snapshot(position=3, max_bytes=1000))
    assert response.unaligned_records == data[3:13]


@pytest.mark.parametrize(
    "snapshot_id",
    [OffsetAndEpoch(5, 1), OffsetAndEpoch(4, 2), OffsetAndEpoch(6, 2), OffsetAndEpoch(0, 0)],
    ids=["other-epoch", "other-offset", "past-the-log", "bootstrap"],
)
def test_fetch_snapshot_of_an_unknown_or_bootstrap_id_is_snapshot_not_found(
    snapshot_id: OffsetAndEpoch,
) -> None:
    """§1.3: an unknown id, or the bootstrap id (0, 0) even when the leader holds it, is
    SNAPSHOT_NOT_FOUND; no bytes are sent and the leader keeps leading."""
    ctx, _ = leader_with_snapshot(cleaned=False)
    make_snapshot(ctx, OffsetAndEpoch(0, 0), [[b"bootstrap"]])
    response = ask(ctx, fetch_snapshot(snapshot_id=snapshot_id))
    assert isinstance(response, FetchSnapshotResponse)
    assert response.error_code == Errors.NONE
    assert response.partition_error_code == Errors.SNAPSHOT_NOT_FOUND
    assert response.unaligned_records == b""
    assert response.current_leader == LeaderIdAndEpoch(LOCAL, LEADER_EPOCH)
    assert ctx.role == "Leader"


def test_fetch_snapshot_of_a_snapshot_the_cleaner_deleted_is_snapshot_not_found() -> None:
    """§1.4: a download of a snapshot the leader no longer holds gets SNAPSHOT_NOT_FOUND (the
    follower then fetches again and learns the snapshot to get now)."""
    ctx, _ = leader_with_snapshot(cleaned=False)
    early = OffsetAndEpoch(3, 2)
    make_snapshot(ctx, early, [[b"early"]])
    assert ask(ctx, fetch_snapshot(snapshot_id=early)).partition_error_code == Errors.NONE
    ctx.log.delete_before_snapshot(SNAPSHOT)
    response = ask(ctx, fetch_snapshot(snapshot_id=early, position=10))
    assert response.partition_error_code == Errors.SNAPSHOT_NOT_FOUND


@pytest.mark.parametrize("where", ["size", "past-size", "negative"])
def test_fetch_snapshot_at_a_position_outside_the_file_is_position_out_of_range(
    where: str,
) -> None:
    """§1.3: a position outside [0, size) is POSITION_OUT_OF_RANGE, with no bytes."""
    ctx, data = leader_with_snapshot(cleaned=True)
    position = {"size": len(data), "past-size": len(data) + 100, "negative": -1}[where]
    response = ask(ctx, fetch_snapshot(position=position))
    assert response.partition_error_code == Errors.POSITION_OUT_OF_RANGE
    assert response.unaligned_records == b""
    assert ask(ctx, fetch_snapshot(position=len(data) - 1)).unaligned_records == data[-1:]


@pytest.mark.parametrize(
    ("delta", "error"),
    [
        (-1, Errors.FENCED_LEADER_EPOCH),
        (+1, Errors.UNKNOWN_LEADER_EPOCH),
    ],
)
def test_fetch_snapshot_with_a_wrong_epoch_gets_the_leader_only_errors(
    delta: int,
    error: Errors,
) -> None:
    """§1.3 leader-only validation comes first: the snapshot exists, but an older epoch is
    FENCED_LEADER_EPOCH and a newer one UNKNOWN_LEADER_EPOCH, with no bytes."""
    ctx, _ = leader_with_snapshot(cleaned=True)
    response = ask(ctx, fetch_snapshot(epoch=LEADER_EPOCH + delta))
    assert response.partition_error_code == error
    assert response.unaligned_records == b""
    assert response.current_leader == LeaderIdAndEpoch(LOCAL, LEADER_EPOCH)
    assert (ctx.role, ctx.epoch) == ("Leader", LEADER_EPOCH)


def test_fetch_snapshot_to_a_follower_holding_the_snapshot_is_not_leader_or_follower() -> None:
    """§1.3: only the leader serves snapshots; a follower that holds one answers
    NOT_LEADER_OR_FOLLOWER, naming its leader."""
    ctx = follower_context()
    frozen = ctx.log.create_new_snapshot_unchecked(REMOTE_SNAPSHOT)
    assert frozen is not None
    frozen.append(REMOTE_DATA)
    frozen.freeze()
    response = ask(
        ctx, fetch_snapshot(epoch=FOLLOWER_EPOCH, snapshot_id=REMOTE_SNAPSHOT), source=OTHER
    )
    assert response.partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert response.current_leader == LeaderIdAndEpoch(REMOTE, FOLLOWER_EPOCH)
    assert response.unaligned_records == b""


# -- check-quorum ------------------------------------------------------------------------------
FETCH_TIMEOUT_MS = 2_000
CHECK_QUORUM_MS = FETCH_TIMEOUT_MS * 3 // 2


def test_a_leader_hearing_only_fetch_snapshot_from_a_majority_does_not_resign() -> None:
    """§1.6: FetchSnapshot counts for check-quorum. Voter 2 only downloads, one chunk every
    second, for four check-quorum intervals: the leader keeps leading."""
    ctx, data = leader_with_snapshot(cleaned=True, fetch_timeout_ms=FETCH_TIMEOUT_MS)
    for second in range(4 * CHECK_QUORUM_MS // 1000):
        ctx.advance(1000)
        response = ask(ctx, fetch_snapshot(position=second % len(data), max_bytes=1))
        assert response.partition_error_code == Errors.NONE
        assert ctx.role == "Leader"
    ctx.advance(CHECK_QUORUM_MS)
    ctx.poll()
    assert ctx.role == "Resigned"  # and without them it does resign


@pytest.mark.parametrize("kind", ["observer", "fenced"])
def test_fetch_snapshot_from_an_observer_or_a_fenced_epoch_does_not_count(kind: str) -> None:
    """§1.6/§1.3: only FetchSnapshots that pass validation, from voters, count."""
    ctx, _ = leader_with_snapshot(cleaned=True, fetch_timeout_ms=FETCH_TIMEOUT_MS)
    request = (
        fetch_snapshot(replica=4) if kind == "observer" else fetch_snapshot(epoch=LEADER_EPOCH - 1)
    )
    for _ in range(4):
        ctx.advance(CHECK_QUORUM_MS // 4)
        ask(ctx, request, source=request.replica_id)
    ctx.poll()
    assert ctx.role == "Resigned"


# =============================================================================================
# Follower: downloading
# =============================================================================================
def test_a_snapshot_id_in_a_fetch_response_starts_a_download_at_position_zero() -> None:
    """§1.4: Fetches pause; the next request, to the leader, is FetchSnapshot of that id from
    position 0, in the current epoch, for at most ``fetch_snapshot_max_bytes``."""
    ctx = follower_context(fetch_snapshot_max_bytes=16)
    request, body = start_download(ctx)
    assert request.destination == REMOTE
    assert body == FetchSnapshotRequest(
        replica_id=LOCAL,
        current_leader_epoch=FOLLOWER_EPOCH,
        snapshot_id=SnapshotId.of(REMOTE_SNAPSHOT),
        position=0,
        max_bytes=16,
        replica_directory_id=body.replica_directory_id,
    )
    assert ctx.client.downloading_snapshot == REMOTE_SNAPSHOT
    assert latest(ctx) is None
    assert (ctx.log.log_start_offset, ctx.log_end_offset) == (0, 2)


def download_all(
    ctx: RaftTestContext[bytes],
    data: bytes,
    request: Any,
    body: FetchSnapshotRequest,
    step: int = 16,
) -> list[int]:
    """Answer FetchSnapshots with ``step`` bytes until the whole file is sent; return the
    positions asked for."""
    positions = []
    while True:
        positions.append(body.position)
        assert body.snapshot_id == SnapshotId.of(REMOTE_SNAPSHOT)
        ctx.deliver_response(request, chunk(data, body.position, step))
        ctx.poll()
        if body.position + step >= len(data):
            return positions
        request, body = the_request(ctx, FetchSnapshotRequest)


def test_chunks_advance_the_position_and_the_last_one_installs_the_snapshot() -> None:
    """§1.4: each FetchSnapshot asks from the bytes written so far. When they reach the size
    the snapshot is frozen, the log is truncated to it (start = LEO = snapshot end), the HW is
    the snapshot end, and the next request is a Fetch from there in the snapshot's epoch."""
    ctx = follower_context(fetch_snapshot_max_bytes=16)
    listener = EventListener()
    ctx.client.register(listener)
    request, body = start_download(ctx)
    positions = download_all(ctx, REMOTE_DATA, request, body)
    assert positions == list(range(0, len(REMOTE_DATA), 16))
    assert latest(ctx) == REMOTE_SNAPSHOT
    assert ctx.client.downloading_snapshot is None
    raw = ctx.log.read_snapshot(REMOTE_SNAPSHOT)
    assert raw is not None and raw.records() == REMOTE_DATA
    assert (ctx.log.log_start_offset, ctx.log_end_offset) == (10, 10)
    assert ctx.high_watermark == 10
    assert ctx.log.high_watermark == 10
    _, fetch_body = the_request(ctx, FetchRequest)
    assert (fetch_body.fetch_offset, fetch_body.last_fetched_epoch) == (10, 3)
    assert listener.events == [("snapshot", REMOTE_SNAPSHOT, [b"s1", b"s2", b"s3", b"s4" * 20])]


def test_listeners_load_the_downloaded_snapshot_then_get_commits_after_it() -> None:
    """§1.12/§2: a listener that had read the old log (offsets 0-1) is below the new log
    start: it loads the snapshot, then its commits continue from the snapshot's end."""
    ctx = follower_context()
    listener = EventListener()
    ctx.client.register(listener)
    (request,) = ctx.poll_until_request(FetchRequest)
    ctx.deliver_response(request, leader_says(high_watermark=2))
    ctx.poll()
    assert listener.events == [("commit", 0, 1)]
    request, body = the_request(ctx, FetchRequest)
    ctx.deliver_response(request, leader_says(REMOTE_SNAPSHOT))
    ctx.poll()
    request, body = the_request(ctx, FetchSnapshotRequest)
    download_all(ctx, REMOTE_DATA, request, body, step=len(REMOTE_DATA))
    request, body = the_request(ctx, FetchRequest)
    records = encode_batch(10, FOLLOWER_EPOCH, [b"x", b"y"], timestamp_ms=TIMESTAMP_MS)
    ctx.deliver_response(request, leader_says(records=records, high_watermark=12))
    ctx.poll()
    assert listener.events == [
        ("commit", 0, 1),
        ("snapshot", REMOTE_SNAPSHOT, [b"s1", b"s2", b"s3", b"s4" * 20]),
        ("commit", 10, 11),
    ]
    assert ctx.client.listener_next_offset(listener) == 12


@pytest.mark.parametrize("error", [Errors.SNAPSHOT_NOT_FOUND, Errors.POSITION_OUT_OF_RANGE])
def test_snapshot_not_found_or_position_out_of_range_abandons_the_download(error: int) -> None:
    """§1.4: the download is dropped (nothing installed, the log untouched) and the next
    request, without a backoff, is a Fetch from the log end; a snapshot id in its answer
    starts a new download from position 0."""
    ctx = follower_context()
    request, body = start_download(ctx)
    ctx.deliver_response(request, chunk(REMOTE_DATA, 0, 20))
    ctx.poll()
    request, body = the_request(ctx, FetchSnapshotRequest)
    assert body.position == 20
    ctx.deliver_response(request, chunk(REMOTE_DATA, 20, 20, error=error))
    ctx.poll()
    assert ctx.client.downloading_snapshot is None
    assert latest(ctx) is None
    assert (ctx.log.log_start_offset, ctx.log_end_offset) == (0, 2)
    request, fetch_body = the_request(ctx, FetchRequest)  # no clock advance: no backoff
    assert (fetch_body.fetch_offset, fetch_body.last_fetched_epoch) == (2, 1)
    newer = OffsetAndEpoch(12, 4)
    ctx.deliver_response(request, leader_says(newer))
    ctx.poll()
    _, body = the_request(ctx, FetchSnapshotRequest)
    assert (body.snapshot_id, body.position) == (SnapshotId.of(newer), 0)


@pytest.mark.parametrize("fault", ["ahead", "behind", "past-size", "empty"])
def test_a_chunk_at_the_wrong_position_is_refused(fault: str) -> None:
    """§1.4 (Kafka: IllegalStateException; kraft refuses the chunk, drops the download and
    backs off from the leader): nothing is written at the wrong place, nothing is installed,
    and the next request is a Fetch from the log end."""
    ctx = follower_context()
    request, _ = start_download(ctx)
    ctx.deliver_response(request, chunk(REMOTE_DATA, 0, 20))
    ctx.poll()
    request, _ = the_request(ctx, FetchSnapshotRequest)
    bad = {
        "ahead": chunk(REMOTE_DATA, 30, 20),
        "behind": chunk(REMOTE_DATA, 10, 20),
        "past-size": FetchSnapshotResponse(
            snapshot_id=SnapshotId.of(REMOTE_SNAPSHOT),
            current_leader=LeaderIdAndEpoch(REMOTE, FOLLOWER_EPOCH),
            size=25,
            position=20,
            unaligned_records=REMOTE_DATA[20:40],
        ),
        "empty": chunk(REMOTE_DATA, 20, 0),
    }[fault]
    ctx.deliver_response(request, bad)
    ctx.poll()
    assert latest(ctx) is None
    assert ctx.client.downloading_snapshot is None
    assert (ctx.log.log_start_offset, ctx.log_end_offset) == (0, 2)
    # The leader's connection backs off; the Fetch may go to a bootstrap server meanwhile.
    _, fetch_body = the_request(ctx, FetchRequest)
    assert fetch_body.fetch_offset == 2


def test_a_chunk_of_another_snapshot_is_refused_and_the_download_goes_on() -> None:
    """§1.4: a chunk naming another snapshot id is not written; the download of ours goes on
    from the same position."""
    ctx = follower_context()
    request, body = start_download(ctx)
    other = snapshot_bytes(OffsetAndEpoch(8, 3), [[b"zz"]])
    ctx.deliver_response(request, chunk(other, 0, 20, snapshot_id=OffsetAndEpoch(8, 3)))
    ctx.poll()
    assert ctx.client.downloading_snapshot == REMOTE_SNAPSHOT
    ctx.advance(ctx.config.retry_backoff_ms)
    request, body = the_request(ctx, FetchSnapshotRequest)
    assert (body.snapshot_id, body.position) == (SnapshotId.of(REMOTE_SNAPSHOT), 0)
    download_all(ctx, REMOTE_DATA, request, body, step=len(REMOTE_DATA))
    raw = ctx.log.read_snapshot(REMOTE_SNAPSHOT)
    assert raw is not None and raw.records() == REMOTE_DATA


def test_a_new_leader_restarts_the_download_from_zero() -> None:
    """Two leaders' files of the same id need not be byte-equal (the header's timestamps
    differ), so a download is never spliced across leaders: once the leader changes the
    follower drops what it has, fetches, and downloads what the new leader names from 0."""
    ctx = follower_context()
    theirs = snapshot_bytes(
        REMOTE_SNAPSHOT, [[b"s1", b"s2"], [b"s3"], [b"s4" * 20]], timestamp_ms=TIMESTAMP_MS + 1
    )
    assert len(theirs) == len(REMOTE_DATA) and theirs != REMOTE_DATA
    request, _ = start_download(ctx)
    ctx.deliver_response(request, chunk(REMOTE_DATA, 0, 30))
    ctx.poll()
    ctx.deliver_request(ctx.begin_epoch_request(FOLLOWER_EPOCH + 1, OTHER), OTHER)
    ctx.poll()
    assert (ctx.leader_id, ctx.epoch) == (OTHER, FOLLOWER_EPOCH + 1)
    ctx.sent_responses()
    ctx.sent_requests()  # what went out before the leader changed
    new = FOLLOWER_EPOCH + 1
    request, _ = the_request(ctx, FetchRequest)
    assert request.destination == OTHER
    assert ctx.client.downloading_snapshot is None
    ctx.deliver_response(request, leader_says(REMOTE_SNAPSHOT, epoch=new, leader=OTHER))
    ctx.poll()
    request, body = the_request(ctx, FetchSnapshotRequest)
    assert (body.current_leader_epoch, body.position) == (new, 0)
    ctx.deliver_response(request, chunk(theirs, 0, len(theirs), epoch=new, leader=OTHER))
    ctx.poll()
    raw = ctx.log.read_snapshot(REMOTE_SNAPSHOT)
    assert raw is not None and raw.records() == theirs
    assert ctx.log.log_start_offset == 10


def corrupt(data: bytes) -> bytes:
    """Flip one byte inside the second batch (inside its CRC-covered part)."""
    header_length = 12 + int.from_bytes(data[8:12], "big")
    at = header_length + 40
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


@pytest.mark.parametrize("damage", ["crc", "no-footer"])
def test_a_corrupt_downloaded_snapshot_is_set_aside_not_installed(damage: str) -> None:
    """Issue 5: a download whose bytes are not a valid snapshot (a CRC fails, or the footer is
    missing) is set aside (issue 17, §1.14: kept for inspection, not deleted): the log and the
    listeners are untouched, the next request is a Fetch, and a new download of the same id
    starts from 0."""
    ctx = follower_context()
    listener = EventListener()
    ctx.client.register(listener)
    bad = (
        corrupt(REMOTE_DATA)
        if damage == "crc"
        else snapshot_bytes(REMOTE_SNAPSHOT, [[b"s1"]])[:-80]
    )
    request, body = start_download(ctx)
    ctx.deliver_response(request, chunk(bad, 0, len(bad)))
    ctx.poll()
    assert latest(ctx) is None
    assert ctx.log.read_snapshot(REMOTE_SNAPSHOT) is None
    assert ctx.log.set_aside == [bad]
    assert ctx.client.downloading_snapshot is None
    assert (ctx.log.log_start_offset, ctx.log_end_offset) == (0, 2)
    assert not listener.snapshots
    request, fetch_body = the_request(ctx, FetchRequest)
    assert fetch_body.fetch_offset == 2
    ctx.deliver_response(request, leader_says(REMOTE_SNAPSHOT))
    ctx.poll()
    request, body = the_request(ctx, FetchSnapshotRequest)
    assert body.position == 0
    download_all(ctx, REMOTE_DATA, request, body, step=len(REMOTE_DATA))
    assert latest(ctx) == REMOTE_SNAPSHOT
    assert listener.snapshots == [REMOTE_SNAPSHOT]


def test_a_snapshot_id_the_follower_already_holds_is_installed_without_a_download() -> None:
    """kraft: a snapshot frozen but not yet installed (a crash between freezing and
    truncating) is installed when the leader names it again."""
    ctx = follower_context()
    writer = ctx.log.create_new_snapshot_unchecked(REMOTE_SNAPSHOT)
    assert writer is not None
    writer.append(REMOTE_DATA)
    writer.freeze()
    (request,) = ctx.poll_until_request(FetchRequest)
    ctx.deliver_response(request, leader_says(REMOTE_SNAPSHOT))
    ctx.poll()
    assert ctx.client.downloading_snapshot is None
    assert (ctx.log.log_start_offset, ctx.log_end_offset, ctx.high_watermark) == (10, 10, 10)
    _, body = the_request(ctx, FetchRequest)
    assert (body.fetch_offset, body.last_fetched_epoch) == (10, 3)


def test_a_downloaded_snapshot_replaces_a_divergent_log_of_a_newer_epoch() -> None:
    """§1.4 (``truncateToLatestSnapshot`` must be true after a download): a follower whose
    log holds records of epoch 4 that the leader never had is sent snapshot (10, 3) (its
    fetch is below the leader's log start). Those records sit below the snapshot's end, so
    they are not committed: the log must be emptied onto the snapshot."""
    ctx: RaftTestContext[bytes] = (
        RaftClientBuilder(LOCAL, VOTERS)
        .append_to_log(4, [b"stray", b"stray"])
        .with_elected_leader(FOLLOWER_EPOCH, REMOTE)
        .build()
    )
    request, body = start_download(ctx)
    download_all(ctx, REMOTE_DATA, request, body, step=len(REMOTE_DATA))
    assert latest(ctx) == REMOTE_SNAPSHOT
    assert (ctx.log.log_start_offset, ctx.log_end_offset) == (10, 10)
    assert ctx.high_watermark == 10


@pytest.mark.parametrize(
    "snapshot_id", [SnapshotId(10, -1), SnapshotId(-1, 3)], ids=["no-epoch", "no-offset"]
)
def test_an_invalid_snapshot_id_in_a_fetch_response_starts_no_download(
    snapshot_id: SnapshotId,
) -> None:
    """§1.4: an invalid snapshot id is refused (the follower backs off and fetches again)."""
    ctx = follower_context()
    (request,) = ctx.poll_until_request(FetchRequest)
    ctx.deliver_response(
        request,
        FetchResponse(
            snapshot_id=snapshot_id,
            current_leader=LeaderIdAndEpoch(REMOTE, FOLLOWER_EPOCH),
        ),
    )
    ctx.poll()
    assert ctx.client.downloading_snapshot is None
    ctx.advance(ctx.config.retry_backoff_ms)
    _, body = the_request(ctx, FetchRequest)
    assert body.fetch_offset == 2


def test_a_follower_that_becomes_leader_abandons_its_download() -> None:
    """Invariant "a leader never loads a snapshot": winning an election drops the download."""
    ctx = follower_context()
    request, _ = start_download(ctx)
    ctx.deliver_response(request, chunk(REMOTE_DATA, 0, 20))
    ctx.poll()
    ctx.sent_requests()
    ctx.advance(ctx.config.fetch_timeout_ms)
    ctx.become_leader()
    assert ctx.role == "Leader"
    assert ctx.client.downloading_snapshot is None
    assert latest(ctx) is None
    assert ctx.sent_requests(FetchSnapshotRequest) == []


# =============================================================================================
# create_snapshot, latest_snapshot_id, listeners
# =============================================================================================
def test_create_snapshot_returns_a_writer_and_the_frozen_snapshot_becomes_the_latest() -> None:
    """§2: ``create_snapshot`` gives a writer for that id; only once frozen is the snapshot
    visible as ``latest_snapshot_id``. The header carries the last contained log time."""
    ctx = leader_context()
    writer = ctx.client.create_snapshot(SNAPSHOT, TIMESTAMP_MS - 5)
    assert isinstance(writer, SnapshotWriter)
    assert writer.snapshot_id == SNAPSHOT
    writer.append([b"state"])
    assert latest(ctx) is None
    writer.freeze()
    assert latest(ctx) == SNAPSHOT
    raw = ctx.log.read_snapshot(SNAPSHOT)
    assert raw is not None
    with SnapshotReader(raw, BytesSerde()) as reader:
        assert reader.last_contained_log_timestamp_ms == TIMESTAMP_MS - 5
        assert [r for batch in reader for r in batch.records] == [b"state"]
    assert ctx.client.create_snapshot(SNAPSHOT, 0) is None  # it exists


@pytest.mark.parametrize(
    "snapshot_id",
    [OffsetAndEpoch(6, 2), OffsetAndEpoch(4, 2), OffsetAndEpoch(5, 1)],
    ids=["above-hw", "inside-a-batch", "wrong-epoch"],
)
def test_create_snapshot_refuses_an_invalid_id(snapshot_id: OffsetAndEpoch) -> None:
    """§1.11 createNewSnapshot: above the HW, not batch-aligned, or an epoch other than the
    record's before it is a ValueError."""
    ctx = leader_context()
    ctx.append_and_drain([b"e"])  # LEO 6, HW still 5
    with pytest.raises(ValueError):
        ctx.client.create_snapshot(snapshot_id, 0)
    assert latest(ctx) is None


def test_create_snapshot_below_the_log_start_is_none() -> None:
    """§1.11: a snapshot the log already starts past is not created (None)."""
    ctx, _ = leader_with_snapshot(cleaned=True)
    assert ctx.client.create_snapshot(OffsetAndEpoch(3, 2), 0) is None


def test_create_snapshot_before_initialize_is_an_illegal_state() -> None:
    ctx: RaftTestContext[bytes] = RaftClientBuilder(LOCAL, VOTERS).build(initialize=False)
    with pytest.raises(IllegalStateError):
        ctx.client.create_snapshot(OffsetAndEpoch(0, 0), 0)


def test_a_listener_registered_after_a_snapshot_loads_it_first_then_commits_after_it() -> None:
    """§1.12: a new listener, when a snapshot exists, loads the latest snapshot and then
    gets commits from its end offset, never the records the snapshot covers."""
    ctx, _ = leader_with_snapshot(cleaned=False)
    listener = EventListener()
    ctx.client.register(listener)
    ctx.poll()
    assert listener.events == [("snapshot", SNAPSHOT, [b"state-1", b"state-2", b"state-3"])]
    ctx.append_and_drain([b"e", b"f"])
    ctx.advance_leader_high_watermark_to_log_end()
    assert listener.events[1:] == [("commit", 5, 6)]


def test_a_listener_registered_before_a_snapshot_does_not_load_it() -> None:
    """§1.12: a listener that is caught up is not told of a new snapshot; its commits go on."""
    ctx = leader_context()
    listener = EventListener()
    ctx.client.register(listener)
    ctx.poll()
    assert listener.events[-1][0] == "commit" and listener.events[-1][2] == 4
    make_snapshot(ctx)
    ctx.append_and_drain([b"e"])
    ctx.advance_leader_high_watermark_to_log_end()
    assert [e[0] for e in listener.events].count("snapshot") == 0
    assert listener.events[-1] == ("commit", 5, 5)


def test_a_listener_left_below_the_log_start_loads_the_snapshot() -> None:
    """§1.12: a listener whose next offset fell below the log start (the log was cleaned
    while it held a reader open) loads the latest snapshot, then continues after it."""
    ctx = leader_context()
    listener = RecordingListener[bytes](auto_close=False)
    ctx.client.register(listener)
    ctx.poll()
    assert len(listener.open_readers) == 1
    make_snapshot(ctx)
    ctx.log.delete_before_snapshot(SNAPSHOT)
    (reader,) = listener.open_readers
    listener.open_readers = []
    # It read only the first batch (offsets 0-1) before closing.
    first = next(iter(reader))
    reader.close()
    assert first.last_offset == 1
    ctx.poll()
    assert listener.snapshots == [SNAPSHOT]
    assert ctx.client.listener_next_offset(listener) == 5


# =============================================================================================
# The periodic cleaner
# =============================================================================================
def test_the_cleaner_runs_every_log_clean_interval_and_moves_the_log_start() -> None:
    """§1.11/§2 ``maybeClean`` every ``log_clean_interval_ms``: between runs nothing is
    cleaned; at the next run the retention policy moves the log start to the latest snapshot
    and drops the older ones."""
    interval = 30_000
    ctx = leader_context(log_clean_interval_ms=interval, fetch_timeout_ms=100_000)
    ctx.log.retention = SnapshotRetention(
        retained_snapshots=1, retention_bytes=None, retention_ms=None
    )
    make_snapshot(ctx, OffsetAndEpoch(3, 2), [[b"early"]])
    # Run the cleaner now, so that we know when it runs next. One snapshot is within the
    # policy: nothing to clean.
    ctx.advance(interval)
    ctx.poll()
    assert ctx.log.log_start_offset == 0
    make_snapshot(ctx)
    assert ctx.log.snapshot_ids() == [OffsetAndEpoch(3, 2), SNAPSHOT]
    ctx.advance(interval - 1)
    ctx.poll()
    assert ctx.log.log_start_offset == 0
    assert 0 < ctx.poll() <= 1  # the client asks to be polled again for the cleaner
    ctx.advance(1)
    ctx.poll()
    assert ctx.log.log_start_offset == 5  # (3, 2) first, then (5, 2): one snapshot kept
    assert ctx.log.snapshot_ids() == [SNAPSHOT]
    assert ctx.role == "Leader"
    response = ask(ctx, fetch(LEADER_EPOCH, 3, 2))
    assert response.snapshot_id == SnapshotId.of(SNAPSHOT)


# =============================================================================================
# Property: a real leader and a real follower, any chunk size
# =============================================================================================
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.lists(st.binary(max_size=40), min_size=1, max_size=4), min_size=0, max_size=5
    ),
    max_bytes=st.integers(min_value=1, max_value=300),
    not_found_at=st.none() | st.integers(min_value=0, max_value=20),
)
def test_a_follower_downloads_a_leaders_snapshot_exactly(
    batches: list[list[bytes]], max_bytes: int, not_found_at: int | None
) -> None:
    """A leader (replica 1, epoch 2, log cleaned to snapshot (5, 2)) and an empty follower
    (replica 2), wired by hand: whatever the chunk size, and even when one FetchSnapshot is
    answered SNAPSHOT_NOT_FOUND (the download restarts), the follower ends with a byte-equal
    copy, its log at the snapshot, and its listener holding the snapshot's records."""
    leader = leader_context(fetch_snapshot_max_bytes=max_bytes)
    data = make_snapshot(leader, SNAPSHOT, batches)
    leader.log.delete_before_snapshot(SNAPSHOT)
    follower: RaftTestContext[bytes] = (
        RaftClientBuilder(2, VOTERS).with_elected_leader(LEADER_EPOCH, LOCAL).build()
    )
    listener = EventListener()
    follower.client.register(listener)
    snapshot_requests = 0
    for _ in range(2 * len(data) + 10):
        if latest(follower) == SNAPSHOT:
            break
        request, body = the_request(follower, FetchRequest | FetchSnapshotRequest)  # type: ignore[arg-type]
        if isinstance(body, FetchSnapshotRequest):
            if snapshot_requests == not_found_at:
                answer: Any = FetchSnapshotResponse(
                    partition_error_code=Errors.SNAPSHOT_NOT_FOUND,
                    snapshot_id=body.snapshot_id,
                    current_leader=LeaderIdAndEpoch(LOCAL, LEADER_EPOCH),
                )
            else:
                answer = ask(leader, body, source=2)
                assert len(answer.unaligned_records) <= max_bytes
            snapshot_requests += 1
        else:
            answer = ask(leader, body, source=2)
        follower.deliver_response(request, answer)
        follower.poll()
    raw = follower.log.read_snapshot(SNAPSHOT)
    assert raw is not None and raw.records() == data
    assert (follower.log.log_start_offset, follower.log_end_offset) == (5, 5)
    assert follower.high_watermark == 5
    assert listener.events == [("snapshot", SNAPSHOT, [r for b in batches for r in b])]
