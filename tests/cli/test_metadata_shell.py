"""``kraft metadata shell``: the image of a snapshot file or a metadata log directory, browsed
with ls, cat, tree, find and cd, from arguments or stdin."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest

from kraft.cli.main import main
from kraft.common.uuids import uuid_to_text
from kraft.metadata.delta import MetadataDelta
from kraft.metadata.image import MetadataImage, MetadataProvenance
from kraft.metadata.records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerEndpoint,
    ClientQuotaRecord,
    ConfigRecord,
    EntityData,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
    at_latest_version,
)
from kraft.metadata.serde import MetadataRecordSerde
from kraft.record import encode_batch
from kraft.record.offsets import OffsetAndEpoch
from kraft.snapshot import FileRawSnapshotWriter, SnapshotWriter, snapshot_path

T0 = 1_700_000_000_000
ORDERS = uuid.UUID(int=0x0123)
SERDE = MetadataRecordSerde()


def partition(index: int, leader: int, topic_id: uuid.UUID = ORDERS) -> PartitionRecord:
    return PartitionRecord(
        partition_id=index,
        topic_id=topic_id,
        replicas=(1, 2),
        isr=(1, 2),
        leader=leader,
        leader_epoch=3,
        partition_epoch=4,
    )


RECORDS: list[MetadataRecord] = [
    FeatureLevelRecord(name="metadata.version", feature_level=21),
    RegisterBrokerRecord(
        broker_id=1,
        broker_epoch=7,
        incarnation_id=uuid.UUID(int=9),
        end_points=(BrokerEndpoint(name="PLAINTEXT", host="b1", port=9092),),
        rack="r1",
    ),
    TopicRecord(name="orders", topic_id=ORDERS),
    *(partition(index, 1 + index % 2) for index in range(12)),
    ConfigRecord(resource_type=2, resource_name="orders", name="retention.ms", value="60000"),
    ConfigRecord(resource_type=4, resource_name="", name="log.retention.hours", value="1"),
    ProducerIdsRecord(broker_id=1, broker_epoch=7, next_producer_id=5000),
    # Areas kraft's controller does not write, as a Kafka log may hold them.
    ClientQuotaRecord(
        entity=(EntityData(entity_type="user", entity_name="alice"),),
        key="producer_byte_rate",
        value=1024.0,
    ),
    UserScramCredentialRecord(name="alice", mechanism=2, iterations=8192),
]


def image_of(records: list[MetadataRecord]) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in records:
        delta.replay(record)
    return delta.apply(MetadataProvenance(len(records) - 1, 2, T0))


def write_snapshot(directory: Path, image: MetadataImage) -> Path:
    snapshot_id = OffsetAndEpoch(image.provenance.offset + 1, image.provenance.epoch)
    raw = FileRawSnapshotWriter.create(directory, snapshot_id)
    with SnapshotWriter(raw, SERDE, last_contained_log_timestamp_ms=T0, timestamp_ms=T0) as writer:
        writer.append(list(image.records()))
        writer.freeze()
    return snapshot_path(directory, snapshot_id)


def shell(
    capsys: pytest.CaptureFixture[str], *args: str, stdin: str | None = None
) -> tuple[int, str, str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdin", io.StringIO(stdin or ""))
        code = main(["metadata", "shell", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return write_snapshot(tmp_path, image_of(RECORDS))


def test_ls_lists_the_image_and_partitions_in_number_order(capsys, snapshot: Path) -> None:
    code, out, _ = shell(capsys, "--snapshot", str(snapshot), "ls", "/")
    assert code == 0
    areas = "acls brokers clientQuotas configs controllers delegationTokens features"
    assert out.split() == [*areas.split(), "producerIds", "provenance", "scram", "topics"]
    code, out, _ = shell(capsys, "--snapshot", str(snapshot), "ls", "/topics/orders")
    assert out.split() == [str(i) for i in range(12)] + ["id", "name"]


def test_cat_prints_a_partition_a_broker_a_config_and_features(capsys, snapshot: Path) -> None:
    code, out, err = shell(
        capsys,
        "--snapshot",
        str(snapshot),
        "cat",
        "/topics/orders/11",
        "/brokers/1",
        "/configs/TOPIC:orders/retention.ms",
        "/configs/BROKER/log.retention.hours",
        "/features/metadata.version",
        "/producerIds/nextProducerId",
        "/topics/orders/id",
        "/clientQuotas/user=alice/producer_byte_rate",
        "/scram/SCRAM-SHA-512/alice",
    )
    assert (code, err) == (0, "")
    lines = out.splitlines()
    part = json.loads(lines[0])
    assert (part["replicas"], part["leader"], part["leader_epoch"], part["partition_epoch"]) == (
        [1, 2],
        2,
        3,
        4,
    )
    broker = json.loads(lines[1])
    assert (broker["epoch"], broker["rack"], broker["incarnation_id"]) == (
        7,
        "r1",
        uuid_to_text(uuid.UUID(int=9)),
    )
    assert lines[2:8] == ["60000", "1", "21", "5000", uuid_to_text(ORDERS), "1024.0"]
    assert json.loads(lines[8])["iterations"] == 8192


def test_commands_from_stdin_with_cd_globs_find_and_tree(capsys, snapshot: Path) -> None:
    script = "\n".join(
        [
            "cd /topics/orders",
            "pwd",
            "cat 1?",  # 10 and 11
            "find /features /configs",
            "cd ..",
            "tree orders/0",
            "# a comment",
            "exit",
            "ls /",  # not run
        ]
    )
    code, out, err = shell(capsys, "--snapshot", str(snapshot), stdin=script)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "/topics/orders"
    assert [json.loads(line)["leader"] for line in lines[1:3]] == [1, 2]
    assert lines[3:9] == [
        "/features",
        "/features/metadata.version",
        "/configs",
        "/configs/BROKER",
        "/configs/BROKER/log.retention.hours",
        "/configs/TOPIC:orders",
    ]
    assert lines[-1].startswith("0: {") and json.loads(lines[-1][3:])["isr"] == [1, 2]
    assert "brokers" not in out


def test_a_failing_command_says_why_and_the_exit_code_is_one(capsys, snapshot: Path) -> None:
    code, out, err = shell(
        capsys, "--snapshot", str(snapshot), stdin="ls /nowhere\ncat /topics\nfrob\npwd\n"
    )
    assert code == 1
    assert out == "/\n"  # the commands after a failure still run
    assert err.splitlines() == [
        "ls: /nowhere: no such node",
        "cat: /topics: is a directory",
        "frob: unknown command (try help)",
    ]


def test_a_directory_is_its_latest_snapshot_then_the_log_after_it(capsys, tmp_path: Path) -> None:
    log_dir = tmp_path / "__cluster_metadata-0"
    log_dir.mkdir()
    write_snapshot(log_dir, image_of(RECORDS))
    after: list[MetadataRecord] = [
        TopicRecord(name="later", topic_id=uuid.UUID(int=0x77)),
        partition(0, 2, uuid.UUID(int=0x77)),
    ]
    # The segment holds the records the snapshot covers (skipped: they would not replay twice)
    # and the two after it.
    values = [SERDE.encode(at_latest_version(record)) for record in RECORDS + after]
    covered = len(RECORDS)
    segment = encode_batch(0, 2, values[:covered], timestamp_ms=T0) + encode_batch(
        covered, 3, values[covered:], timestamp_ms=T0 + 5
    )
    # Then an aborted transaction, and one that the log ends in: neither shows.
    aborted: list[MetadataRecord] = [
        BeginTransactionRecord(),
        TopicRecord(name="aborted", topic_id=uuid.UUID(int=0x88)),
        AbortTransactionRecord(),
        BeginTransactionRecord(),
        TopicRecord(name="unfinished", topic_id=uuid.UUID(int=0x99)),
    ]
    segment += encode_batch(
        len(values),
        3,
        [SERDE.encode(at_latest_version(record)) for record in aborted],
        timestamp_ms=T0 + 9,
    )
    (log_dir / f"{0:020d}.log").write_bytes(segment + b"\x00\x01")  # and a torn tail
    code, out, err = shell(
        capsys,
        "--directory",
        str(tmp_path),
        stdin="ls /topics\ncat /topics/later/0 /provenance/offset /provenance/epoch\n",
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == ["later", "orders"]
    assert json.loads(lines[2])["leader"] == 2
    assert lines[3:] == [str(len(values) + 2), "3"]  # up to the Abort
    assert "warning:" in err and "stopped reading" in err


def test_a_missing_file_or_directory_is_an_error(capsys, tmp_path: Path) -> None:
    code, _, err = shell(capsys, "--directory", str(tmp_path / "nothing"), "ls")
    assert code == 1 and "no such file or directory" in err
    code, _, err = shell(capsys, "--snapshot", str(tmp_path / "x.checkpoint"), "ls")
    assert code == 1 and "error:" in err
