"""Micro-benchmark: metadata records encoded and decoded per second (``kraft.metadata.codec``).

The records of an image's snapshot: ``PartitionRecord`` v1 (three replicas, three directories,
the bulk of a large image), and of a controller's log: ``PartitionChangeRecord`` v1 (new ISR and
leader) and ``RegisterBrokerRecord`` v3 (one endpoint, one feature, one log dir). Each kind is
encoded with ``encode_record`` and decoded with ``decode_record``; the decoded records are
checked against the originals outside the timed part.

Run: ``.venv/bin/python tests/benchmarks/bench_metadata_records.py [--records N]``.
Not collected by pytest (``bench_*.py``); speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import random
import time
import uuid

from kraft.metadata.codec import decode_record, encode_record
from kraft.metadata.records import (
    ApiMessageAndVersion,
    BrokerEndpoint,
    BrokerFeature,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    at_latest_version,
)


def _uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128))


def records(kind: str, count: int, rng: random.Random) -> list[ApiMessageAndVersion]:
    dirs = (_uuid(rng), _uuid(rng), _uuid(rng))
    out = []
    for i in range(count):
        topic_id = _uuid(rng)
        if kind == "PartitionRecord":
            message: object = PartitionRecord(
                partition_id=i % 100,
                topic_id=topic_id,
                replicas=(1, 2, 3),
                isr=(1, 2, 3),
                leader=1,
                leader_epoch=i % 7,
                partition_epoch=i % 11,
                directories=dirs,
            )
        elif kind == "PartitionChangeRecord":
            message = PartitionChangeRecord(
                partition_id=i % 100, topic_id=topic_id, isr=(2, 3), leader=2
            )
        else:
            message = RegisterBrokerRecord(
                broker_id=i,
                incarnation_id=topic_id,
                broker_epoch=i,
                end_points=(BrokerEndpoint(name="PLAINTEXT", host=f"b{i}", port=9092),),
                features=(BrokerFeature(name="metadata.version", max_supported_version=21),),
                rack="r1",
                log_dirs=dirs[:1],
            )
        out.append(at_latest_version(message))  # type: ignore[arg-type]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    rng = random.Random(1)
    print(f"{'record':<24} {'encode/s':>10} {'decode/s':>10} {'bytes':>6}")
    for kind in ("PartitionRecord", "PartitionChangeRecord", "RegisterBrokerRecord"):
        batch = records(kind, args.records, rng)
        start = time.perf_counter()
        values = [encode_record(r) for r in batch]
        encoded = time.perf_counter()
        decoded = [decode_record(v) for v in values]
        done = time.perf_counter()
        assert decoded == batch
        print(
            f"{kind:<24} {args.records / (encoded - start):>10,.0f} "
            f"{args.records / (done - encoded):>10,.0f} {len(values[0]):>6}"
        )


if __name__ == "__main__":
    main()
