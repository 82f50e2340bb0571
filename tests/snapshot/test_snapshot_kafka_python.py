"""kafka-python, an independent parser of Kafka's v2 batches, reads a kraft snapshot file.

Its ``MemoryRecords`` walks the file batch by batch and checks every CRC: the header and
footer are control batches whose keys name SNAPSHOT_HEADER (3) and SNAPSHOT_FOOTER (4), the
data batches hold the values written, at offsets contiguous from 0, all in the snapshot epoch.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from kraft.record import ControlRecordType
from kraft.record.offsets import OffsetAndEpoch
from kraft.record.serde import BytesSerde
from kraft.snapshot import FileRawSnapshotWriter, SnapshotWriter, snapshot_file_name

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated importlib calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecords


def test_kafka_python_reads_a_kraft_snapshot_file(tmp_path: Path) -> None:
    sid = OffsetAndEpoch(12345, 9)
    values = [b"value %d" % i for i in range(500)]
    raw = FileRawSnapshotWriter.create(tmp_path, sid)
    with SnapshotWriter(
        raw,
        BytesSerde(),
        last_contained_log_timestamp_ms=1_000,
        timestamp_ms=2_000,
        max_batch_size_bytes=2_000,
    ) as writer:
        for start in range(0, len(values), 7):
            writer.append(values[start : start + 7])
        writer.freeze()
    data = (tmp_path / snapshot_file_name(sid)).read_bytes()

    records = MemoryRecords(data)
    batches = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        assert batch.magic == 2
        assert batch.leader_epoch == sid.epoch
        batches.append((batch, list(batch)))
    assert len(batches) > 3  # the limit split the data into several batches
    (header, header_records), *middle, (footer, footer_records) = batches
    assert header.is_control_batch
    assert [(r.version, r.type) for r in header_records] == [(0, ControlRecordType.SNAPSHOT_HEADER)]
    assert footer.is_control_batch
    assert [(r.version, r.type) for r in footer_records] == [(0, ControlRecordType.SNAPSHOT_FOOTER)]
    assert not any(b.is_control_batch for b, _ in middle)
    assert [r.value for _, rs in middle for r in rs] == values
    offsets = [r.offset for _, rs in batches for r in rs]
    assert offsets == list(range(len(values) + 2))
