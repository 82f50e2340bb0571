"""The Spark engine of the sweep on the tests' local Spark: the Parquet layout the analysis
reads (docs/analysis.md), the same runs as the local engine, resuming, keep-passing no."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kraft.analysis.events import EVENT_SCHEMA_DDL, load_events
from kraft.analysis.job import analyze
from kraft.simulation.scenario import run_scenario
from kraft.simulation.sweep import read_runs, sweep

pytestmark = pytest.mark.spark

pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

from pyspark.sql.types import StructType  # noqa: E402

from kraft.spark_sweep import EVENTS_DIR, SUMMARY_PARQUET, build_zip, spark_sweep  # noqa: E402
from kraft.spark_sweep.engine import chunk_runs, chunk_size  # noqa: E402

SCENARIOS = '''
from kraft.simulation.scenario import ScenarioRun, scenario


@scenario("spark_sweep_passes")
def spark_sweep_passes(run: ScenarioRun) -> None:
    """Three voters elect a leader and commit a few appends."""
    cluster = run.cluster(voters=3)
    run.await_(lambda: cluster.leader() is not None, 10_000, "a leader")
    cluster.run_for(300)


@scenario("spark_sweep_fails_on_even_seeds")
def spark_sweep_fails_on_even_seeds(run: ScenarioRun) -> None:
    """Kills node 2 on even seeds, then expects it to be running."""
    cluster = run.cluster(voters=3)
    cluster.run_for(500)
    if run.seed % 2 == 0:
        cluster.kill(2)
    cluster.run_for(200)
    run.expect(cluster.node(2).client is not None, "node 2 is running")
'''

NAMES = ["spark_sweep_passes", "spark_sweep_fails_on_even_seeds"]


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("spark-sweep-scenarios")
    (directory / "spark_sweep_test_scenarios.py").write_text(textwrap.dedent(SCENARIOS))
    return directory


def test_the_events_land_in_parquet_partitioned_by_scenario_as_the_local_engine_logs_them(
    spark: Any, tmp_path: Path, scenarios: Path
) -> None:
    local = sweep(NAMES, [1, 2, 3], tmp_path / "local", scenario_dir=scenarios)
    out = tmp_path / "spark"
    summary = spark_sweep(NAMES, [1, 2, 3], str(out), scenario_dir=scenarios)
    assert summary.engine == "spark" and summary.total.runs == 6
    assert [(r.scenario, r.seed) for r in summary.failed] == [
        ("spark_sweep_fails_on_even_seeds", 2)
    ]
    by_run = {(r.scenario, r.seed): r.digest for r in read_runs(tmp_path / "local").values()}
    table = pq.read_table(out / SUMMARY_PARQUET).to_pylist()
    assert {(row["scenario"], row["seed"]): row["digest"] for row in table} == by_run
    assert local.total.events == summary.total.events
    for name in NAMES:
        files = list((out / EVENTS_DIR / f"scenario={name}").glob("*.parquet"))
        assert files
        # The event schema's columns, in its order, less the partition column.
        columns = StructType.fromDDL(EVENT_SCHEMA_DDL).names
        assert pq.read_schema(files[0]).names == [c for c in columns if c != "scenario"]
    # Read back with Spark, the rows are those load_events gives from the JSON Lines logs.
    from_json = load_events(spark, tmp_path / "local")
    parquet = spark.read.schema(EVENT_SCHEMA_DDL).parquet(str(out / EVENTS_DIR))
    # Spark puts the partition column last; the file's columns keep the schema's order.
    from_parquet = parquet.select(*from_json.columns)
    assert from_parquet.count() == summary.total.events
    assert from_parquet.exceptAll(from_json).count() == 0
    assert from_json.exceptAll(from_parquet).count() == 0
    # One pipeline: the analysis reads the dataset as the sweep wrote it.
    result = analyze(spark, str(out / EVENTS_DIR), tmp_path / "report")
    assert (result.runs, result.events, result.violations) == (6, summary.total.events, 0)


def test_keep_passing_no_and_resuming(spark: Any, tmp_path: Path, scenarios: Path) -> None:
    out = tmp_path / "spark"
    first = spark_sweep(NAMES, [1, 2], str(out), scenario_dir=scenarios, keep_passing=False)
    assert first.total.runs == 4
    rows = pq.read_table(out / SUMMARY_PARQUET).to_pylist()
    kept = {(r["scenario"], r["seed"]) for r in rows if r["events_file"]}
    assert len(rows) == 4 and kept == {("spark_sweep_fails_on_even_seeds", 2)}
    events = spark.read.schema(EVENT_SCHEMA_DDL).parquet(str(out / EVENTS_DIR))
    assert {tuple(r) for r in events.select("scenario", "seed").distinct().collect()} == kept
    # A chunk that died after writing its events and before recording its runs: its file
    # is deleted when the sweep starts again, and its runs run again.
    leftover = (
        out / EVENTS_DIR / "scenario=spark_sweep_fails_on_even_seeds" / "part-1of1-dead-0.parquet"
    )
    leftover.write_bytes(
        (out / next(iter(r["events_file"] for r in rows if r["events_file"]))).read_bytes()
    )
    second = spark_sweep(NAMES, [1, 2, 3], str(out), scenario_dir=scenarios)
    assert second.resumed == 4 and second.total.runs == 6
    assert not leftover.exists()
    rows = pq.read_table(out / SUMMARY_PARQUET).to_pylist()
    assert sorted((r["scenario"], r["seed"]) for r in rows) == sorted(
        (n, s) for n in NAMES for s in (1, 2, 3)
    )
    events = spark.read.schema(EVENT_SCHEMA_DDL).parquet(str(out / EVENTS_DIR))
    assert events.count() == sum(r["events"] for r in rows if r["events_file"])


def test_the_zip_of_kraft_runs_the_same_simulation(tmp_path: Path) -> None:
    zipped = build_zip(tmp_path)
    # A Python that finds kraft only in the zip: no site (so no installed kraft), the
    # dependencies' directory by hand.
    site = Path(msgspec.__file__).parents[1]
    # The scenario modules travel with the tasks, not in the zip: an executor loads them from
    # a directory it writes (kraft.spark_sweep.tasks); here, the catalogue's own.
    catalogue = Path(__file__).parents[2] / "simulations"
    probe = (
        "import sys; sys.path[:0] = sys.argv[1:3]\n"
        "import kraft\n"
        "from kraft.simulation.scenario import run_scenario\n"
        "from kraft.spark_sweep.tasks import run_chunk\n"
        "result = run_scenario('leader_failure', 3, message_events=False, "
        "scenario_dir=sys.argv[3])\n"
        "print(kraft.__file__, result.digest)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-S", "-c", probe, str(zipped), str(site), str(catalogue)],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", "")},
    )
    kraft_file, digest = ran.stdout.split()
    assert kraft_file.startswith(str(zipped))
    assert digest == run_scenario("leader_failure", 3, message_events=False).digest


def test_chunks_cover_every_run_once_and_spread_the_scenarios() -> None:
    runs = [(name, seed) for name in ("a", "b", "c") for seed in range(1, 33)]
    chunks = chunk_runs(runs, cores=2)
    assert sorted(run for chunk in chunks for run in chunk) == sorted(runs)
    assert {len(chunk) for chunk in chunks} == {chunk_size(len(runs), 2)} == {3}
    # Dealt round-robin: the first chunks are of every scenario, not all of "a".
    assert [chunk[0][0] for chunk in chunks[:6]] == ["a", "b", "c", "a", "b", "c"]
    assert chunk_size(10**6, 100) == 64 and chunk_runs([], 2) == []


def test_kraft_analyze_reads_the_sweeps_out_directory(
    spark: Any, tmp_path: Path, scenarios: Path
) -> None:
    out = tmp_path / "spark"
    summary = spark_sweep(NAMES, [1, 2], str(out), scenario_dir=scenarios)
    result = analyze(spark, str(out), tmp_path / "report")
    assert result.runs == 4 and result.events == summary.total.events
