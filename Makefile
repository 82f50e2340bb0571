# kraft — the two commands that matter: `make run` (the main job) and `make test` (all tests).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_DIR ?= run

.PHONY: install run test test-slow lint bench sim-sweep clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	touch $@

# The main job: format a data directory, write a log, reopen (recover) it, dump it; run a
# three-node quorum of real Raft clients in memory (election, replication, failover); then
# sweep a catalogue of fault scenarios over tens of seeds, the replicated kv store's (its
# histories checked for linearizability) and the metadata controller's among them, as Spark
# tasks on local Spark (events in Parquet under $(RUN_DIR)/sim/events) and analyse them (report in $(RUN_DIR)/report/report.md).
RUN_SCENARIOS ?= leader_failure leader_partitioned_away lossy_network all_nodes_killed \
	rolling_restarts asymmetric_partition remove_leader rolling_replacement kv_nemesis \
	kv_leader_transfers controller_broker_churn controller_failover_storm
RUN_SEEDS ?= 1-30
run: install
	$(PY) examples/storage_demo.py --dir $(RUN_DIR)/storage-demo
	$(PY) examples/raft_in_memory.py
	rm -rf $(RUN_DIR)/sim
	$(VENV)/bin/kraft sim sweep --engine spark --master 'local[2]' --scenario $(RUN_SCENARIOS) \
		--seeds $(RUN_SEEDS) --no-message-events --out $(RUN_DIR)/sim
	$(VENV)/bin/kraft analyze $(RUN_DIR)/sim/events --out $(RUN_DIR)/report --master 'local[2]'

# The simulation sweep of the issue's bar: every scenario, 200 seeds, no message events.
sim-sweep: install
	$(VENV)/bin/kraft sim sweep --scenario all --seeds 1-200 --jobs 2 --no-message-events \
		--keep-passing no --out $(RUN_DIR)/sweep

# All tests except those marked slow. pytest's exit code is the verdict (5 = no tests = failure).
test: install
	$(PY) -m pytest -q -m "not slow"

test-slow: install
	$(PY) -m pytest -q -m slow

# mypy is strict everywhere (pyproject.toml) but tests/: test modules have no package, so no
# [[tool.mypy.overrides]] can name them; their bodies are still checked, without asking for an
# annotation on every test function. The format check comes last so that the others still run.
lint: install
	$(VENV)/bin/ruff check kraft tests examples simulations
	$(VENV)/bin/mypy kraft examples simulations
	$(VENV)/bin/mypy --allow-untyped-defs --allow-incomplete-defs --allow-untyped-calls tests
	$(VENV)/bin/ruff format --check kraft tests examples simulations

bench: install
	$(PY) tests/benchmarks/bench_log.py --quick
	$(PY) tests/benchmarks/bench_raft.py
	$(PY) tests/benchmarks/bench_sim.py
	$(PY) tests/benchmarks/bench_loss.py
	$(PY) tests/benchmarks/bench_analysis.py --events 2000000
	$(PY) tests/benchmarks/bench_transport.py
	$(PY) tests/benchmarks/bench_quorum.py --seconds 5
	$(PY) tests/benchmarks/bench_snapshot_transfer.py
	$(PY) tests/benchmarks/bench_metadata_image.py
	$(PY) tests/benchmarks/bench_controller.py --seconds 10 --topics-per-request 1 100

clean:
	rm -rf $(RUN_DIR) bench-data .pytest_cache .mypy_cache .ruff_cache .hypothesis
