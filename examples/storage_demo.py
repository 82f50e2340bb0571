"""The storage layer end to end: format, write, crash, recover, dump.

    python examples/storage_demo.py --dir run/storage-demo

1. formats a data directory (meta.properties, as `kraft storage format` does);
2. writes a LeaderChange control batch and data batches of 100-byte records as leader of
   epoch 1, rolling small segments, flushes, and records the election in `quorum-state`;
3. appends more batches without flushing and "crashes" mid-write (the last batch is torn);
4. reopens the log: recovery cuts the torn tail and keeps everything that was flushed;
5. dumps the segments with `kraft log dump`, as kafka-dump-log would.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import shutil
import sys
from pathlib import Path

from kraft.cli.main import main as kraft_cli
from kraft.log import FileLog, Isolation
from kraft.log.meta_properties import CLUSTER_METADATA_DIR, format_storage, random_uuid
from kraft.log.quorum_state import ElectionState, FileQuorumStateStore
from kraft.record import (
    ControlRecordType,
    LeaderChangeMessage,
    LeaderChangeVoter,
    SimpleRecord,
    encode_control_key,
    encode_control_value,
    iter_batches,
)

NODE_ID = 1
EPOCH = 1
START_MS = 1_700_000_000_000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="run/storage-demo", help="data directory (recreated)")
    parser.add_argument("--batches", type=int, default=200, help="data batches to write")
    parser.add_argument("--records-per-batch", type=int, default=50)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    data_dir = Path(args.dir)
    shutil.rmtree(data_dir, ignore_errors=True)
    meta = format_storage(data_dir, random_uuid(), NODE_ID)
    print(
        f"formatted {data_dir}: cluster.id={meta.cluster_id} node.id={meta.node_id} "
        f"directory.id={meta.directory_id}"
    )
    log_dir = data_dir / CLUSTER_METADATA_DIR

    # -- 2. write as the leader of epoch 1 ----------------------------------------------------
    log = FileLog.open(log_dir, segment_bytes=256 * 1024)
    FileQuorumStateStore.in_directory(data_dir).write_election_state(
        ElectionState.with_elected_leader(EPOCH, NODE_ID)
    )
    log.initialize_leader_epoch(EPOCH)
    leader_change = LeaderChangeMessage(
        version=0,
        leader_id=NODE_ID,
        voters=(LeaderChangeVoter(NODE_ID),),
        granting_voters=(LeaderChangeVoter(NODE_ID),),
    )
    log.append_as_leader(
        [
            SimpleRecord(
                value=encode_control_value(leader_change),
                key=encode_control_key(ControlRecordType.LEADER_CHANGE),
            )
        ],
        EPOCH,
        timestamp_ms=START_MS,
        control=True,
    )
    payload = b"x" * 100
    for i in range(args.batches):
        log.append_as_leader([payload] * args.records_per_batch, EPOCH, timestamp_ms=START_MS + i)
    log.flush()
    log.update_high_watermark(log.log_end_offset)
    flushed = log.log_end_offset
    print(
        f"wrote {flushed} records in {args.batches + 1} batches, "
        f"{log.size_in_bytes():,} bytes in {len(log.segments())} segments; flushed"
    )

    # -- 3. unflushed appends, then a crash in the middle of the last batch --------------------
    for i in range(5):
        log.append_as_leader([payload] * args.records_per_batch, EPOCH, timestamp_ms=START_MS + i)
    active = log.segments()[-1].log_path
    end_before_crash = log.log_end_offset
    log.abandon()
    torn_at = os.path.getsize(active) - 1234
    os.truncate(active, torn_at)
    print(f"crash: log end was {end_before_crash}; {active.name} torn at byte {torn_at}")

    # -- 4. recovery ---------------------------------------------------------------------------
    logging.getLogger("kraft.log.file").setLevel(logging.WARNING)
    log = FileLog.open(log_dir, segment_bytes=256 * 1024)
    assert log.log_end_offset >= flushed, "recovery lost flushed data"
    batches = sum(1 for _ in iter_batches(log.read(0, Isolation.UNCOMMITTED, 1 << 30).records))
    print(
        f"recovered: log end offset {log.log_end_offset} (flushed: {flushed}), "
        f"{batches} whole batches readable, epochs {log.epoch_entries()}"
    )
    log.close()

    # -- 5. dump -------------------------------------------------------------------------------
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = kraft_cli(["log", "dump", str(log_dir)])
    lines = out.getvalue().splitlines()
    print(f"\n$ kraft log dump {log_dir}   ({len(lines)} lines; first and last shown)")
    shown = [*lines[:4], "...", *lines[-3:]] if len(lines) > 8 else lines
    print("\n".join(shown))
    return code


if __name__ == "__main__":
    sys.exit(main())
