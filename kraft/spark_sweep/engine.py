"""``kraft sim sweep --engine spark``: the seeds of a sweep as Spark tasks, the events in Parquet.

The driver (this process) splits the runs into chunks (one Spark task each, :func:`chunk_runs`:
consecutive runs, many chunks per core, slow scenarios spread out, so that no slow chunk holds
up the end), the executors run them (:func:`kraft.spark_sweep.tasks.run_chunk`)
and write their events to ``OUT/events/`` (docs/analysis.md, *The sweep's Parquet layout*), and
the driver collects one :class:`~kraft.simulation.sweep.SweepRun` a run, writes
``OUT/sweep.parquet`` (every run recorded in ``OUT``) and ``OUT/sweep.json`` (this sweep's
summary, the same as the local engine's).

Executors need kraft in their Python: the driver's own interpreter by default
(``PYSPARK_PYTHON``, a virtual environment every machine has at the same path), or kraft
shipped as a zip (:func:`build_zip`, ``--py-files``) to executors whose Python has kraft's
dependencies but not kraft. The scenario modules always travel with the tasks.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from kraft.analysis.events import EVENT_SCHEMA_DDL
from kraft.analysis.session import DEFAULT_MASTER, LOCAL_DRIVER_JAVA_OPTIONS, spark_session
from kraft.simulation.sweep import (
    RUNS_DIR,
    SWEEP_FILE,
    RunOptions,
    SweepRun,
    SweepSummary,
    decode_runs,
    shard_seeds,
    summarize,
)
from kraft.spark_sweep.tasks import EVENTS_DIR, ChunkConfig, run_chunk, write_atomically

__all__ = [
    "SUMMARY_PARQUET",
    "build_zip",
    "chunk_runs",
    "chunk_size",
    "event_arrow_schema",
    "spark_sweep",
]

#: One row per run recorded in ``OUT`` (docs/analysis.md lists the columns).
SUMMARY_PARQUET = "sweep.parquet"
#: The most runs in one task: bounds what a lost task costs and an executor buffers.
MAX_CHUNK = 64
#: Tasks per core: enough that the last tasks, some slower than others, end together.
TASKS_PER_CORE = 16


def chunk_size(runs: int, cores: int) -> int:
    """Runs per task for ``runs`` runs on ``cores`` cores."""
    return max(1, min(MAX_CHUNK, math.ceil(runs / max(1, cores * TASKS_PER_CORE))))


def chunk_runs(runs: Sequence[tuple[str, int]], cores: int) -> list[list[tuple[str, int]]]:
    """``runs`` (in scenario order) as the tasks' chunks, in the order Spark should start them.

    A chunk holds consecutive runs, mostly of one scenario (few files per chunk); the chunks
    are then dealt round-robin across scenarios, so that the slow scenarios' chunks are spread
    over the sweep rather than all left for its end.
    """
    size = chunk_size(len(runs), cores)
    by_scenario: dict[str, list[list[tuple[str, int]]]] = {}
    for start in range(0, len(runs), size):
        chunk = list(runs[start : start + size])
        by_scenario.setdefault(chunk[0][0], []).append(chunk)
    queues = list(by_scenario.values())
    dealt: list[list[tuple[str, int]]] = []
    for round_ in range(max((len(q) for q in queues), default=0)):
        dealt += [queue[round_] for queue in queues if round_ < len(queue)]
    return dealt


def event_arrow_schema() -> Any:
    """:data:`~kraft.analysis.events.EVENT_SCHEMA_DDL` as an Arrow schema (needs a running
    SparkContext: Spark parses the DDL)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(EVENT_SCHEMA_DDL)
    return to_arrow_schema(schema)


def build_zip(directory: Path | str) -> Path:
    """``kraft.zip`` in ``directory``: the kraft package as this process imports it, for
    ``--py-files`` (sources only: executors need kraft's dependencies, msgspec, crc32c and
    pyarrow among them, installed; the scenario modules travel with the tasks)."""
    target = Path(directory) / "kraft.zip"
    root = Path(__file__).resolve().parents[1]
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".typed") and "__pycache__" not in path.parts:
                archive.write(path, f"kraft/{path.relative_to(root)}")
    return target


def _filesystem(out: str) -> tuple[Any, str, str]:
    """pyarrow's file system of ``out``, the root path in it, and ``out`` as executors are
    told it (a local path made absolute)."""
    from pyarrow import fs as pafs

    uri = out if "://" in out else str(Path(out).resolve())
    filesystem, root = pafs.FileSystem.from_uri(uri)
    filesystem.create_dir(root, recursive=True)
    return filesystem, root.rstrip("/"), uri


def _files_under(filesystem: Any, directory: str) -> list[str]:
    from pyarrow import fs as pafs

    selector = pafs.FileSelector(directory, recursive=True, allow_not_found=True)
    return [info.path for info in filesystem.get_file_info(selector) if info.is_file]


def _recorded_runs(filesystem: Any, root: str) -> dict[tuple[str, int], SweepRun]:
    runs: dict[tuple[str, int], SweepRun] = {}
    for path in sorted(_files_under(filesystem, f"{root}/{RUNS_DIR}")):
        if path.endswith(".jsonl") and not path.rpartition("/")[2].startswith("."):
            with filesystem.open_input_stream(path) as stream:
                for run in decode_runs(stream.read(), path):
                    runs[run.scenario, run.seed] = run
    return runs


def _drop_leftovers(
    filesystem: Any, root: str, recorded: dict[tuple[str, int], SweepRun], shard: str
) -> None:
    """Delete this shard's event files that no recorded run names: a chunk wrote them and
    died before recording its runs, which run again (other shards may be running)."""
    named = {f"{root}/{run.events_file}" for run in recorded.values() if run.events_file}
    for path in _files_under(filesystem, f"{root}/{EVENTS_DIR}"):
        name = path.rpartition("/")[2]
        mine = name.startswith((f"part-{shard}-", f".part-{shard}-"))
        if mine and path not in named:
            filesystem.delete_file(path)


def _summary_table(runs: Sequence[SweepRun]) -> Any:
    import pyarrow as pa

    columns = [
        ("scenario", pa.string()),
        ("seed", pa.int64()),
        ("ok", pa.bool_()),
        ("violations", pa.int32()),
        ("expectations", pa.int32()),
        ("failure_kinds", pa.list_(pa.string())),
        ("events", pa.int64()),
        ("simulated_ms", pa.int64()),
        ("wall_s", pa.float64()),
        ("digest", pa.string()),
        ("error", pa.string()),
        ("replay", pa.string()),
        ("shrunk_replay", pa.string()),
        ("shrunk_faults", pa.int32()),
        ("events_file", pa.string()),
    ]
    rows = [msgspec.structs.asdict(run) for run in runs]
    return pa.Table.from_pylist(rows, schema=pa.schema(columns))


def spark_sweep(
    scenarios: Sequence[str],
    seeds: Sequence[int],
    out: str,
    *,
    master: str | None = None,
    scenario_dir: Path | str,
    message_events: bool = True,
    keep_passing: bool = True,
    shard: tuple[int, int] = (1, 1),
    shrink_runs: int = 0,
    replay_scenarios: str | None = None,
    py_files: Sequence[str] = (),
) -> SweepSummary:
    """Run every scenario with every seed of ``shard`` on Spark (``master``: None keeps what
    ``spark-submit`` set, else ``local[*]``), events to ``out/events/``; runs recorded in
    ``out`` are not run again. Writes ``out/sweep.parquet`` and ``out/sweep.json``.

    ``py_files``: zips (or ``.py`` files) added to every executor's path (:func:`build_zip`).
    The runs come back together at the end: progress is Spark's (its console progress bar
    on a terminal, its UI).
    """
    import pyarrow.parquet as pq

    # Executors run the driver's interpreter unless told otherwise: pyspark's own default is
    # whatever `python3` is on the PATH, which rarely has kraft.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # A local master's JVM only schedules (the simulations run in Python workers).
    local_master = (master or DEFAULT_MASTER).startswith("local")
    conf = {"spark.driver.extraJavaOptions": LOCAL_DRIVER_JAVA_OPTIONS} if local_master else {}
    spark = spark_session(master, app_name="kraft-sweep", conf=conf, progress=sys.stderr.isatty())
    context = spark.sparkContext
    for path in py_files:
        context.addPyFile(path)
    filesystem, root, uri = _filesystem(out)
    shard_name = f"{shard[0]}of{shard[1]}"
    recorded = _recorded_runs(filesystem, root)
    _drop_leftovers(filesystem, root, recorded, shard_name)
    mine = shard_seeds(seeds, shard)
    wanted = [(name, seed) for name in scenarios for seed in mine]
    runs = [recorded[key] for key in wanted if key in recorded]
    resumed = len(runs)
    todo = [key for key in wanted if key not in recorded]
    directory = Path(scenario_dir).resolve()
    config = ChunkConfig(
        out=uri,
        options=RunOptions(
            scenario_dir=None,
            message_events=message_events,
            keep_passing=keep_passing,
            shrink_runs=shrink_runs,
            replay_scenarios=replay_scenarios,
        ),
        scenario_sources={p.name: p.read_text() for p in sorted(directory.glob("*.py"))},
        schema=event_arrow_schema(),
        shard=shard_name,
    )
    cores = context.defaultParallelism
    chunks = chunk_runs(todo, cores)
    started = time.perf_counter()
    if chunks:
        tasks = context.parallelize(chunks, len(chunks))
        for run in tasks.flatMap(partial(run_chunk, config)).collect():
            runs.append(run)
            recorded[run.scenario, run.seed] = run
    elapsed = time.perf_counter() - started
    summary = summarize(
        runs,
        scenarios,
        mine,
        jobs=cores,
        scenario_dir=str(directory),
        message_events=message_events,
        elapsed_s=elapsed,
        engine="spark",
        master=context.master,
        shard=shard,
        resumed=resumed,
    )
    everything = sorted(recorded.values(), key=lambda r: (r.scenario, r.seed))
    with tempfile.TemporaryDirectory(prefix="kraft-sweep-") as scratch:
        local = Path(scratch) / SUMMARY_PARQUET
        pq.write_table(_summary_table(everything), local)
        write_atomically(filesystem, f"{root}/{SUMMARY_PARQUET}", local.read_bytes())
    write_atomically(
        filesystem,
        f"{root}/{SWEEP_FILE}",
        msgspec.json.format(msgspec.json.encode(summary)) + b"\n",
    )
    return summary
