"""``MetadataLoader`` on real clients (``LocalCluster`` with ``MetadataRecordSerde``): images
from commits, publishers, snapshots written by the policy, and a replica that loads a snapshot
with the same image as the others."""

from __future__ import annotations

import logging
import uuid

import pytest

from kraft.log.base import SnapshotRetention
from kraft.metadata.delta import MetadataDelta
from kraft.metadata.image import MetadataImage, MetadataProvenance
from kraft.metadata.loader import MetadataLoader
from kraft.metadata.records import (
    AbortTransactionRecord,
    ApiMessageAndVersion,
    BeginTransactionRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
    at_latest_version,
)
from kraft.metadata.serde import MetadataRecordSerde
from kraft.raft.state_machine import SnapshotPolicy
from kraft.record.offsets import OffsetAndEpoch
from kraft.snapshot.reader import SnapshotReader
from kraft.testing.cluster import LocalCluster

NO_TIME = 0  # max_interval_ms: no snapshot by time
NEVER = SnapshotPolicy(max_bytes_between_snapshots=1 << 40, max_interval_ms=NO_TIME)

Cluster = LocalCluster[ApiMessageAndVersion]


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def topic(name: str, partitions: int = 1) -> list[MetadataRecord]:
    records: list[MetadataRecord] = [TopicRecord(name=name, topic_id=topic_id(name))]
    for index in range(partitions):
        records.append(
            PartitionRecord(
                partition_id=index,
                topic_id=topic_id(name),
                replicas=(1, 2, 3),
                isr=(1, 2, 3),
                leader=1,
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    return records


def cluster_with_loaders(policy: SnapshotPolicy) -> tuple[Cluster, dict[int, MetadataLoader]]:
    cluster: Cluster = LocalCluster(3, seed=1, serde=MetadataRecordSerde())
    loaders = {}
    for node_id, client in cluster.nodes.items():
        loaders[node_id] = MetadataLoader(client, policy)
        client.register(loaders[node_id])
    assert cluster.run_until(lambda: cluster.leader() is not None, 10_000)
    return cluster, loaders


def commit(cluster: Cluster, records: list[MetadataRecord]) -> int:
    offset = cluster.append([at_latest_version(record) for record in records])
    assert offset is not None
    nodes = cluster.nodes.values()
    assert cluster.run_until(lambda: all((c.high_watermark or 0) > offset for c in nodes), 5_000)
    cluster.run_for(100)  # the followers learn the high watermark and deliver it
    return offset


def snapshot_image(cluster: Cluster, node_id: int) -> MetadataImage:
    raw = cluster.logs[node_id].latest_snapshot()
    assert raw is not None
    reader = SnapshotReader(raw, MetadataRecordSerde())
    delta = MetadataDelta(MetadataImage.EMPTY)
    try:
        for batch in reader:
            for record in batch.records:
                delta.replay(record.message)
    finally:
        reader.close()
    return delta.apply(MetadataProvenance.EMPTY)


def test_every_replica_builds_the_same_image_at_each_commit() -> None:
    cluster, loaders = cluster_with_loaders(NEVER)
    leader = cluster.leader()
    assert leader is not None
    offset = commit(cluster, [FeatureLevelRecord(name="metadata.version", feature_level=21)])
    offset = commit(cluster, [*topic("a", 2), NoOpRecord()])
    images = {node_id: loader.image for node_id, loader in loaders.items()}
    assert len({repr(image) for image in images.values()}) == 1
    image = images[leader]
    assert image.provenance == MetadataProvenance(
        offset, cluster.nodes[leader].epoch, image.provenance.last_contained_log_time_ms
    )
    assert image.features.metadata_version == 21
    assert sorted(image.topics["a"].partitions) == [0, 1]


def test_publishers_get_each_image_with_its_delta_and_a_late_one_the_current_image() -> None:
    cluster, loaders = cluster_with_loaders(NEVER)
    loader = loaders[1]
    seen: list[tuple[frozenset[uuid.UUID], int]] = []

    def publisher(delta: MetadataDelta, image: MetadataImage) -> None:
        assert delta.image is not image
        seen.append((delta.changed_topic_ids, image.provenance.offset))

    loader.add_publisher(publisher)
    offset_a = commit(cluster, topic("a"))
    offset_b = commit(
        cluster, [PartitionChangeRecord(topic_id=topic_id("a"), partition_id=0, leader=2)]
    )
    assert seen[-2:] == [
        (frozenset({topic_id("a")}), offset_a),
        (frozenset({topic_id("a")}), offset_b),
    ]
    assert loader.image.topics["a"].partitions[0].leader_epoch == 1

    late: list[MetadataImage] = []
    loader.add_publisher(lambda delta, image: late.append(delta.apply(image.provenance)))
    assert late == [loader.image]  # the whole image, as a delta from EMPTY
    loader.remove_publisher(publisher)
    commit(cluster, [NoOpRecord()])
    assert seen[-1][1] == offset_b and len(late) == 2


def test_a_failing_publisher_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    cluster, loaders = cluster_with_loaders(NEVER)
    offsets: list[int] = []

    def broken(delta: MetadataDelta, image: MetadataImage) -> None:
        raise RuntimeError("boom")

    loaders[1].add_publisher(broken)
    loaders[1].add_publisher(lambda delta, image: offsets.append(image.provenance.offset))
    with caplog.at_level(logging.ERROR, logger="kraft.metadata.loader"):
        offset = commit(cluster, [NoOpRecord()])
    assert offsets[-1] == offset
    assert "publisher" in caplog.text and "boom" in caplog.text


def test_a_record_that_does_not_fit_is_skipped_and_the_rest_applies(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, loaders = cluster_with_loaders(NEVER)
    stray = PartitionRecord(partition_id=0, topic_id=topic_id("nowhere"), replicas=(1,))
    with caplog.at_level(logging.ERROR, logger="kraft.metadata.loader"):
        offset = commit(cluster, [stray, *topic("a")])
    for loader in loaders.values():
        assert loader.replay_errors == 1
        assert list(loader.image.topics) == ["a"]
    assert f"at offset {offset - 2}" in caplog.text and "no topic with id" in caplog.text


def test_a_snapshot_of_the_image_is_written_once_the_applied_bytes_pass_the_policy() -> None:
    cluster, loaders = cluster_with_loaders(
        SnapshotPolicy(max_bytes_between_snapshots=2000, max_interval_ms=NO_TIME)
    )
    leader = cluster.leader()
    assert leader is not None
    client = cluster.nodes[leader]
    commit(cluster, [FeatureLevelRecord(name="metadata.version", feature_level=21)])
    snapshots = [client.latest_snapshot_id]
    for index in range(50):
        commit(cluster, topic(f"t{index}", 3))
        snapshots.append(client.latest_snapshot_id)
        if snapshots[-1] is not None:
            break
    assert snapshots[0] is None and 2 < len(snapshots) < 50  # not at once, and not never
    image = loaders[leader].image
    assert snapshots[-1] == OffsetAndEpoch(image.provenance.offset + 1, client.epoch)
    assert snapshot_image(cluster, leader) == image.with_provenance(MetadataProvenance.EMPTY)


def test_a_snapshot_is_written_when_the_interval_passed() -> None:
    cluster, _ = cluster_with_loaders(
        SnapshotPolicy(max_bytes_between_snapshots=1 << 30, max_interval_ms=60_000)
    )
    leader = cluster.leader()
    assert leader is not None
    commit(cluster, topic("early"))
    assert cluster.nodes[leader].latest_snapshot_id is None
    cluster.run_for(60_000)
    commit(cluster, topic("late"))
    assert sorted(snapshot_image(cluster, leader).topics) == ["early", "late"]


def test_a_replica_that_loads_a_snapshot_has_the_same_image() -> None:
    """Node 3 is cut off while the others snapshot and clean their logs: it catches up from the
    snapshot, whose image replaces its own, then the log after it."""
    cluster, loaders = cluster_with_loaders(
        SnapshotPolicy(max_bytes_between_snapshots=1000, max_interval_ms=NO_TIME)
    )
    leader = cluster.leader()
    assert leader is not None
    lagging = next(node_id for node_id in cluster.nodes if node_id != leader)
    commit(cluster, topic("before"))
    cluster.disconnected.add(lagging)
    for node_id in cluster.nodes:
        cluster.logs[node_id].retention = SnapshotRetention(
            retained_snapshots=1, retention_bytes=None, retention_ms=None
        )
    for index in range(20):
        cluster.append([at_latest_version(record) for record in topic(f"t{index}", 2)])
        cluster.run_for(50)
    cluster.run_for(cluster.config.log_clean_interval_ms)
    assert cluster.logs[leader].log_start_offset > cluster.logs[lagging].log_end_offset
    loaded: list[MetadataImage] = []
    loaders[lagging].add_publisher(
        lambda delta, image: loaded.append(image) if delta.image is MetadataImage.EMPTY else None
    )
    cluster.disconnected.clear()
    commit(cluster, topic("after"))
    assert loaded  # an image from EMPTY: the snapshot's
    assert loaders[lagging].image == loaders[leader].image
    assert {"before", "t19", "after"} <= set(loaders[lagging].image.topics)


def test_a_loader_on_a_restarted_node_starts_from_the_latest_snapshot() -> None:
    cluster, loaders = cluster_with_loaders(
        SnapshotPolicy(max_bytes_between_snapshots=1000, max_interval_ms=NO_TIME)
    )
    leader = cluster.leader()
    assert leader is not None
    for index in range(10):
        commit(cluster, topic(f"t{index}", 2))
    client = cluster.nodes[leader]
    snapshot_id = client.latest_snapshot_id
    assert snapshot_id is not None
    restarted = MetadataLoader(client, NEVER)
    snapshots: list[int] = []
    restarted.add_publisher(lambda delta, image: snapshots.append(image.provenance.offset))
    client.register(restarted)
    assert cluster.run_until(lambda: restarted.image == loaders[leader].image, 10_000)
    assert snapshots[0] == snapshot_id.offset - 1  # the snapshot came first


def test_a_transaction_is_published_whole_once_it_ends() -> None:
    """Kafka's MetadataBatchLoader: the records before a BeginTransactionRecord make an image of
    their own; nothing is published while the transaction is open, even across commits."""
    cluster, loaders = cluster_with_loaders(NEVER)
    loader = loaders[1]
    published: list[tuple[int, list[str]]] = []
    loader.add_publisher(
        lambda delta, image: published.append((image.provenance.offset, sorted(image.topics)))
    )
    assert published == [(0, [])]  # the image when it was added
    last = commit(cluster, [*topic("before"), BeginTransactionRecord(), *topic("in", 2)])
    assert published[1:] == [(last - 4, ["before"])]  # up to the record before the Begin
    assert list(loader.image.topics) == ["before"]
    end = commit(cluster, [*topic("still"), EndTransactionRecord()])
    assert published[2:] == [(end, ["before", "in", "still"])]
    assert loader.replay_errors == 0


def test_an_aborted_transaction_changes_nothing_but_the_offset() -> None:
    cluster, loaders = cluster_with_loaders(NEVER)
    loader = loaders[1]
    commit(cluster, topic("kept"))
    before = loader.image
    end = commit(cluster, [BeginTransactionRecord(), *topic("dropped"), AbortTransactionRecord()])
    assert loader.image == before.with_provenance(loader.image.provenance)
    assert loader.image.provenance.offset == end
    # Misplaced markers are skipped like any record that does not fit.
    commit(cluster, [EndTransactionRecord(), AbortTransactionRecord(), *topic("after")])
    assert loader.replay_errors == 2
    assert sorted(loader.image.topics) == ["after", "kept"]
