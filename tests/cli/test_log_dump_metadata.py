"""``kraft log dump --metadata``: a metadata log and snapshot, every record decoded as Kafka's
``--cluster-metadata-decoder`` shows it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from kraft.cli.main import main
from kraft.common.uuids import uuid_to_text
from kraft.log.meta_properties import CLUSTER_METADATA_DIR
from kraft.metadata import MetadataRecordSerde, at_latest_version
from kraft.metadata.records import (
    BrokerEndpoint,
    FeatureLevelRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from kraft.record import encode_batch
from kraft.record.control import LeaderChangeMessage, control_batch
from kraft.record.offsets import OffsetAndEpoch
from kraft.snapshot.raw import FileRawSnapshotWriter
from kraft.snapshot.writer import SnapshotWriter

T0 = 1_700_000_000_000
TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
SERDE = MetadataRecordSerde()
RECORDS = [
    at_latest_version(FeatureLevelRecord(name="metadata.version", feature_level=21)),
    at_latest_version(
        RegisterBrokerRecord(
            broker_id=1,
            incarnation_id=TOPIC_ID,
            broker_epoch=2,
            end_points=(BrokerEndpoint(name="PLAINTEXT", host="b1", port=9092),),
        )
    ),
    at_latest_version(TopicRecord(name="foo", topic_id=TOPIC_ID)),
    at_latest_version(
        PartitionRecord(
            partition_id=0,
            topic_id=TOPIC_ID,
            replicas=(1,),
            isr=(1,),
            leader=1,
            leader_epoch=0,
            partition_epoch=0,
        )
    ),
]


def write_metadata_log(data_dir: Path, *extra_values: bytes) -> Path:
    directory = data_dir / CLUSTER_METADATA_DIR
    directory.mkdir(parents=True)
    values = [SERDE.encode(r) for r in RECORDS] + list(extra_values)
    path = directory / f"{0:020d}.log"
    path.write_bytes(
        control_batch(0, 1, [LeaderChangeMessage(leader_id=1)], timestamp_ms=T0)
        + encode_batch(1, 1, values, timestamp_ms=T0)
    )
    return directory


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_every_metadata_record_is_printed_as_kafkas_decoder_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_metadata_log(tmp_path)
    code, out, err = run(capsys, "log", "dump", "--metadata", str(tmp_path))
    assert (code, err) == (0, "")
    records = [line for line in out.splitlines() if line.startswith("| ")]
    assert "controlType: LEADER_CHANGE" in records[0] and "payload" not in records[0]
    payloads = [json.loads(line.split(" payload: ", 1)[1]) for line in records[1:]]
    assert payloads[0] == {
        "type": "FEATURE_LEVEL_RECORD",
        "version": 0,
        "data": {"name": "metadata.version", "featureLevel": 21},
    }
    assert payloads[1]["type"] == "REGISTER_BROKER_RECORD" and payloads[1]["version"] == 3
    assert payloads[1]["data"]["endPoints"] == [
        {"name": "PLAINTEXT", "host": "b1", "port": 9092, "securityProtocol": 0}
    ]
    assert payloads[1]["data"]["incarnationId"] == uuid_to_text(TOPIC_ID)
    assert payloads[2] == {
        "type": "TOPIC_RECORD",
        "version": 0,
        "data": {"name": "foo", "topicId": uuid_to_text(TOPIC_ID)},
    }
    assert payloads[3]["type"] == "PARTITION_RECORD" and payloads[3]["version"] == 1
    assert payloads[3]["data"]["replicas"] == [1] and payloads[3]["data"]["leader"] == 1
    assert payloads[3]["data"]["eligibleLeaderReplicas"] is None


def test_json_lines_carry_the_decoded_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = write_metadata_log(tmp_path)
    code, out, _ = run(capsys, "log", "dump", "--metadata", "--json", str(directory))
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    records = [e for e in events if e["type"] == "record"]
    assert [r["metadata"]["type"] for r in records[1:]] == [
        "FEATURE_LEVEL_RECORD",
        "REGISTER_BROKER_RECORD",
        "TOPIC_RECORD",
        "PARTITION_RECORD",
    ]
    assert records[0]["metadata"] is None and records[0]["control_type"] == "LEADER_CHANGE"


def test_a_value_that_is_not_a_metadata_record_is_reported_and_fails_the_dump(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_metadata_log(tmp_path, b"\x01\x02\x00\x09")  # a TopicRecord cut in its name
    code, out, err = run(capsys, "log", "dump", "--metadata", str(tmp_path))
    assert code == 1
    last = [line for line in out.splitlines() if line.startswith("| ")][-1]
    assert "payload: undecodable (bad TopicRecord v0: name:" in last
    assert "the record at offset 5 is not a metadata record: bad TopicRecord v0: name" in err
    # without --metadata the same log is only bytes, and nothing is wrong with it
    assert run(capsys, "log", "dump", "--records", str(tmp_path))[0] == 0


def test_a_metadata_snapshot_is_decoded_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = FileRawSnapshotWriter.create(tmp_path, OffsetAndEpoch(5, 1))
    with SnapshotWriter(raw, SERDE, last_contained_log_timestamp_ms=T0, timestamp_ms=T0) as writer:
        writer.append(RECORDS)
        writer.freeze()
    (snapshot,) = tmp_path.glob("*.checkpoint")
    code, out, _ = run(capsys, "log", "dump", "--metadata", str(snapshot))
    assert code == 0
    assert "valid: true" in out
    assert out.count(" payload: {") == len(RECORDS)
    assert '"type":"PARTITION_RECORD","version":1' in out
