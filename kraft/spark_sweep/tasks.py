"""What a Spark executor runs for ``kraft sim sweep --engine spark``: a chunk of runs, their
events straight into Parquet under ``OUT``, one :class:`~kraft.simulation.sweep.SweepRun` per
run back to the driver.

Each run writes its JSON Lines event log to the executor's scratch directory (the simulator's
only output; its digest is the local engine's), which pyarrow parses with the event schema and
deletes: nothing per run lands under ``OUT``. A chunk writes, per scenario, one Parquet file
``OUT/events/scenario=<name>/part-<shard>-<key>-<n>.parquet`` (a new one every
:data:`ROWS_PER_FILE` rows), then ``OUT/runs/part-<shard>-<key>.jsonl``, its runs: that file
is the chunk's commit (a resumed sweep skips its runs; event files no run names are the
leftovers of a chunk that died before it and are deleted). Every file is written under a
hidden name and renamed, so that readers never see half a file; ``key`` is a hash of the
chunk's runs, so that a retried task overwrites its own files.

pyarrow is imported inside functions: it comes with the ``spark`` extra.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from kraft.simulation.events import Event
from kraft.simulation.scenario import EVENTS_FILE
from kraft.simulation.sweep import RUNS_DIR, RunOptions, SweepRun, encode_run, run_one

__all__ = [
    "EVENTS_DIR",
    "ROWS_PER_FILE",
    "ChunkConfig",
    "chunk_key",
    "minus_one_columns",
    "run_chunk",
    "write_atomically",
]

#: The events dataset under ``OUT``, partitioned by scenario (Hive style).
EVENTS_DIR = "events"
#: Rows buffered per scenario before a chunk writes a Parquet file (bounds executor memory:
#: about 100 MB of Arrow at the sizes of message events).
ROWS_PER_FILE = 500_000


def minus_one_columns() -> tuple[str, ...]:
    """The event fields whose default is -1 (left out of a JSON line at the default): stored
    as -1, as :func:`kraft.analysis.events.load_events` gives them from JSON."""
    return tuple(field.name for field in msgspec.structs.fields(Event) if field.default == -1)


@dataclass(frozen=True)
class ChunkConfig:
    """What every chunk of one sweep is given (pickled to the executors with the task)."""

    #: ``OUT`` as pyarrow names it: an absolute path or a URI every executor reaches.
    out: str
    options: RunOptions
    #: The scenario modules, file name to source: executors need no shared directory.
    scenario_sources: dict[str, str]
    #: The event schema as an Arrow schema (``scenario`` included; the files leave it out).
    schema: Any
    #: ``K/N`` of ``--shard``, as it is named in file names (``1of1``).
    shard: str


def chunk_key(chunk: Sequence[tuple[str, int]]) -> str:
    """A name for a chunk's files that only its runs decide (a retry writes the same)."""
    return hashlib.sha256(repr(sorted(chunk)).encode()).hexdigest()[:16]


def run_chunk(config: ChunkConfig, chunk: Sequence[tuple[str, int]]) -> list[SweepRun]:
    """Run ``chunk`` (scenario, seed pairs), write its events and runs under ``config.out``;
    its runs, ``events_file`` naming where the kept runs' events are."""
    from pyarrow import fs as pafs

    filesystem, root = pafs.FileSystem.from_uri(config.out)
    options = msgspec.structs.replace(
        config.options, scenario_dir=_materialize(config.scenario_sources)
    )
    prefix = f"part-{config.shard}-{chunk_key(chunk)}"
    writer = _EventFiles(filesystem, root, prefix, config.schema)
    runs: list[SweepRun] = []
    with tempfile.TemporaryDirectory(prefix="kraft-sweep-") as scratch:
        for scenario, seed in chunk:
            directory = Path(scratch) / f"{scenario}-{seed}"
            run = run_one(scenario, seed, str(directory), options)
            events = directory / EVENTS_FILE
            events_file = ""
            if run.run_dir and events.is_file():  # kept: failed, or passing and kept
                events_file = writer.add(scenario, events)
            shutil.rmtree(directory, ignore_errors=True)
            runs.append(msgspec.structs.replace(run, run_dir="", events_file=events_file))
        writer.close()
    write_atomically(
        filesystem, f"{root}/{RUNS_DIR}/{prefix}.jsonl", b"".join(map(encode_run, runs))
    )
    return runs


class _EventFiles:
    """The Parquet files of one chunk's events, one open batch of tables per scenario."""

    def __init__(self, filesystem: Any, root: str, prefix: str, schema: Any) -> None:
        self._fs = filesystem
        self._root = root
        self._prefix = prefix
        self._schema = schema
        self._minus_one = minus_one_columns()
        self._tables: dict[str, list[Any]] = {}
        self._rows: dict[str, int] = {}
        self._numbers: dict[str, int] = {}

    def _name(self, scenario: str) -> str:
        number = self._numbers.setdefault(scenario, 0)
        return f"{EVENTS_DIR}/scenario={scenario}/{self._prefix}-{number}.parquet"

    def add(self, scenario: str, events: Path) -> str:
        """Buffer the event log ``events``; the file (relative to ``OUT``) it will be in."""
        name = self._name(scenario)
        table = self._parse(events)
        self._tables.setdefault(scenario, []).append(table)
        self._rows[scenario] = self._rows.get(scenario, 0) + table.num_rows
        if self._rows[scenario] >= ROWS_PER_FILE:
            self._flush(scenario)
        return name

    def close(self) -> None:
        for scenario in list(self._tables):
            self._flush(scenario)

    def _parse(self, events: Path) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json as pj

        table = pj.read_json(
            events,
            parse_options=pj.ParseOptions(
                explicit_schema=self._schema, unexpected_field_behavior="ignore"
            ),
        )
        table = table.drop_columns(["scenario"])
        for name in self._minus_one:
            index = table.schema.get_field_index(name)
            column = pc.fill_null(
                table.column(index), pa.scalar(-1, table.schema.field(index).type)
            )
            table = table.set_column(index, name, column)
        return table

    def _flush(self, scenario: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = self._tables.pop(scenario, [])
        self._rows.pop(scenario, None)
        if not tables:
            return
        path = f"{self._root}/{self._name(scenario)}"
        self._numbers[scenario] += 1
        directory, _, name = path.rpartition("/")
        self._fs.create_dir(directory, recursive=True)
        hidden = f"{directory}/.{name}.tmp"
        pq.write_table(pa.concat_tables(tables), hidden, filesystem=self._fs)
        self._fs.move(hidden, path)


def write_atomically(filesystem: Any, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` under a hidden name, then rename it into place."""
    directory, _, name = path.rpartition("/")
    filesystem.create_dir(directory, recursive=True)
    hidden = f"{directory}/.{name}.tmp"
    with filesystem.open_output_stream(hidden) as stream:
        stream.write(data)
    filesystem.move(hidden, path)


def _materialize(sources: dict[str, str]) -> str:
    """The scenario modules written to a directory of this machine (once per content)."""
    digest = hashlib.sha256(repr(sorted(sources.items())).encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / f"kraft-scenarios-{digest}"
    if not root.is_dir():
        staging = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
        for name, source in sources.items():
            (staging / name).write_text(source)
        try:
            staging.rename(root)
        except OSError:  # another worker of this machine got there first: same content
            shutil.rmtree(staging, ignore_errors=True)
    return str(root)
