"""Benchmark: a metadata image of 100,000 partitions written as a snapshot and loaded back.

What is measured (issue 20 aims for under 5 s each), for ``--topics`` topics of
``--partitions`` partitions (1,000 x 100 by default), replication factor 3 over ``--brokers``
registered brokers, each replica with a log directory id:

- ``build``: the records of the cluster replayed into one ``MetadataDelta`` and applied (what
  a standby controller or a broker does with the log, here all at once);
- ``write``: ``image.records()`` encoded by ``MetadataRecordSerde`` into a ``SnapshotWriter``
  over a ``FileRawSnapshotWriter``, 1000 records per batch as ``SnapshotGenerator`` appends
  them, then frozen (fsync, rename, fsync of the directory);
- ``load``: ``read_snapshot_file`` (every CRC, header, footer checked) handed to
  ``MetadataLoader.handle_load_snapshot``: every record decoded and replayed onto EMPTY, the
  image applied. The loaded image is checked equal to the written one.

Each step is timed by the wall clock and by the process's CPU time: on a shared machine the
wall clock also counts the time other processes held the cores.

Files go to ``bench-data/`` at the repository root (or ``--dir``) and are deleted afterwards;
the load reads a warm page cache (the file was just written).

Run: ``.venv/bin/python tests/benchmarks/bench_metadata_image.py [--topics N] [--partitions N]
[--json]``. Not collected by pytest (``bench_*.py``); speed is measured here, never asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import uuid
from itertools import islice
from pathlib import Path

from kraft.metadata.delta import MetadataDelta
from kraft.metadata.image import MetadataImage, MetadataProvenance
from kraft.metadata.loader import MetadataLoader
from kraft.metadata.records import (
    BrokerEndpoint,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from kraft.metadata.serde import MetadataRecordSerde
from kraft.raft.state_machine import SNAPSHOT_CHUNK_RECORDS
from kraft.record.offsets import OffsetAndEpoch
from kraft.snapshot import FileRawSnapshotWriter, SnapshotWriter, read_snapshot_file, snapshot_path
from kraft.testing.cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]
TIMESTAMP_MS = 1_700_000_000_000


def cluster_records(topics: int, partitions: int, brokers: int) -> list[MetadataRecord]:
    """A cluster's records: metadata.version, the brokers, the topics with their partitions."""
    records: list[MetadataRecord] = [FeatureLevelRecord(name="metadata.version", feature_level=21)]
    directories = {b: uuid.UUID(int=(1 << 64) + b) for b in range(brokers)}
    for broker in range(brokers):
        records.append(
            RegisterBrokerRecord(
                broker_id=broker,
                incarnation_id=uuid.UUID(int=broker + 1),
                broker_epoch=broker + 10,
                end_points=(BrokerEndpoint(name="PLAINTEXT", host=f"b{broker}", port=9092),),
                rack=f"rack{broker % 3}",
                fenced=False,
                log_dirs=(directories[broker],),
            )
        )
    for t in range(topics):
        topic_id = uuid.UUID(int=(2 << 64) + t)
        records.append(TopicRecord(name=f"topic-{t:05d}", topic_id=topic_id))
        for p in range(partitions):
            replicas = tuple((t + p + i) % brokers for i in range(3))
            records.append(
                PartitionRecord(
                    partition_id=p,
                    topic_id=topic_id,
                    replicas=replicas,
                    isr=replicas,
                    leader=replicas[0],
                    leader_epoch=p % 7,
                    partition_epoch=p % 11,
                    directories=tuple(directories[r] for r in replicas),
                )
            )
    return records


class Stopwatch:
    """Wall-clock and CPU seconds since the last lap."""

    def __init__(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        lap = (wall - self._wall, cpu - self._cpu)
        self._wall, self._cpu = wall, cpu
        return lap


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=100, help="per topic")
    parser.add_argument("--brokers", type=int, default=30)
    parser.add_argument("--dir", type=Path, default=REPO / "bench-data" / "metadata-image")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)

    records = cluster_records(args.topics, args.partitions, args.brokers)
    clock = Stopwatch()
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in records:
        delta.replay(record)
    snapshot_id = OffsetAndEpoch(len(records), 3)
    image = delta.apply(MetadataProvenance(snapshot_id.offset - 1, 3, TIMESTAMP_MS))
    build = clock.lap()

    directory = args.dir
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    serde = MetadataRecordSerde()
    try:
        clock.lap()
        raw = FileRawSnapshotWriter.create(directory, snapshot_id)
        with SnapshotWriter(
            raw, serde, last_contained_log_timestamp_ms=TIMESTAMP_MS, timestamp_ms=TIMESTAMP_MS
        ) as writer:
            written = iter(image.records())
            while chunk := list(islice(written, SNAPSHOT_CHUNK_RECORDS)):
                writer.append(chunk)
            size = writer.freeze()
        write = clock.lap()

        cluster = LocalCluster(1, serde=serde)
        loader = MetadataLoader(cluster.nodes[1])
        clock.lap()
        loader.handle_load_snapshot(
            read_snapshot_file(snapshot_path(directory, snapshot_id), serde)
        )
        load = clock.lap()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if loader.image != image:
        print("the loaded image differs from the written one", file=sys.stderr)
        return 1

    result: dict[str, float] = {
        "partitions": image.partition_count(),
        "topics": len(image.topics),
        "brokers": len(image.brokers),
        "records": len(records),
        "snapshot_bytes": size,
    }
    for name, (wall, cpu) in (("build", build), ("write", write), ("load", load)):
        result[f"{name}_s"] = round(wall, 3)
        result[f"{name}_cpu_s"] = round(cpu, 3)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"image of {result['partitions']:,} partitions ({result['topics']:,} topics, "
            f"{result['brokers']} brokers), {len(records):,} records, snapshot "
            f"{size / 1024 / 1024:.1f} MiB"
        )
        for label, (wall, cpu) in (
            ("build (replay + apply)", build),
            ("write snapshot", write),
            ("load snapshot", load),
        ):
            print(f"  {label:22} {wall:6.2f} s  (CPU {cpu:5.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
