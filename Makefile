# kraft — the two commands that matter: `make run` (the main job) and `make test` (all tests).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_DIR ?= run

.PHONY: install run test test-slow lint bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# The main job, for now: format a data directory, write a log, reopen (recover) it, dump it;
# then run a three-node quorum of real Raft clients in memory (election, replication, failover).
run: install
	$(PY) examples/storage_demo.py --dir $(RUN_DIR)/storage-demo
	$(PY) examples/raft_in_memory.py

# All tests except those marked slow. pytest's exit code is the verdict (5 = no tests = failure).
test: install
	$(PY) -m pytest -q -m "not slow"

test-slow: install
	$(PY) -m pytest -q -m slow

lint: install
	$(VENV)/bin/ruff check kraft tests examples
	$(VENV)/bin/mypy kraft

bench: install
	$(PY) tests/benchmarks/bench_log.py --quick
	$(PY) tests/benchmarks/bench_raft.py
	$(PY) tests/benchmarks/bench_sim.py

clean:
	rm -rf $(RUN_DIR) bench-data .pytest_cache .mypy_cache .ruff_cache .hypothesis
