# State Explorer: two commands set up a fresh machine.
#   make demo   the main job (example pipelines on the local engine, snapshots under out/)
#   make test   the whole test suite
# Both build .venv with pip first when it is missing or stale, then compile the numba kernels into
# their cache (python -m explorer.kernels --warm: no first open meets an empty cache, ~20 CPU-s once).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)

.PHONY: venv demo test test-fast lab sample-data bench bench-smoke flink-fixtures flink-restore-check spark-fixtures browser-deps chaos chaos-kill fuzz clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m widgets._labextension
	$(BIN)/python -m explorer.kernels --warm
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/state-explorer demo --out out

# Two workers (CI's machine has two cores). --dist loadfile keeps each test file in one worker, so a file's
# module fixtures (a Flink restore JVM, a planted job) are built once; each worker starts its own SparkSession
# and JupyterLab where it first meets their tests.
TEST_WORKERS ?= 2
test: $(STAMP) browser-deps
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

# The browser tests drive Debian's chromium (a test tool's own browser download does not work here).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "the browser tests need Debian's chromium: sudo apt-get install chromium" >&2; fi; }

# 1,000 injected crashes, recovered; the report counts lost and duplicated records.
chaos: $(STAMP)
	$(BIN)/python -m explorer.engine.checkpoint.chaos --trials 1000 --report benchmarks/results/recovery.json

# Damaged snapshots of every format read in children under a memory limit and a timeout
# (tools/fuzz/fuzz.py); the report counts outcomes per format. make fuzz N=100000 for a long run
# (MAX_SECONDS=3600 stops it in time; the report is rewritten every 500 cases).
N ?= 10000
SEED ?= 1
fuzz: $(STAMP)
	$(BIN)/python tools/fuzz/fuzz.py --n $(N) --seed $(SEED) $(if $(MAX_SECONDS),--max-seconds $(MAX_SECONDS)) --report benchmarks/results/fuzz.json

# Jobs in child processes killed with SIGKILL at random moments, recovered, outputs compared,
# until KILLS jobs were really killed (a job may end before its kill point).
KILLS ?= 1000
chaos-kill: $(STAMP)
	$(BIN)/python -m explorer.engine.checkpoint.chaos --kill --kills $(KILLS) --trials 100000 --report benchmarks/results/recovery-kill.json

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not spark and not browser and not slow and not flink"

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks

sample-data: $(STAMP)
	$(BIN)/python -m explorer.sample_data sample_data

bench: $(STAMP)
	$(BIN)/python -m benchmarks

bench-smoke: $(STAMP)
	$(BIN)/python -m benchmarks --smoke

# Real Apache Flink savepoints and checkpoints under sample_data/flink (needs Java 17; fetches Flink's jars from PyPI).
flink-fixtures:
	tools/flink/make_fixtures.sh

# Savepoints edited by explorer.edit, restored by real Apache Flink into HashMap and RocksDB (one JVM; also in make test).
flink-restore-check: $(STAMP)
	$(BIN)/python -m pytest -m flink tests/edit

# Real Spark Structured Streaming checkpoints under sample_data/spark (PySpark 4.3 from .venv; Java 17),
# each with EXPECTED.json computed from its input. The Spark 3.5 ones need a PySpark 3.5 venv,
# made here under $(SPARK35_VENV) from PyPI when missing. Check them with tools/spark/check_fixtures.py.
SPARK35_VENV ?= .cache/spark35
spark-fixtures: $(STAMP)
	$(BIN)/python tools/spark/make_fixtures.py
	test -x $(SPARK35_VENV)/bin/python || { $(PYTHON) -m venv $(SPARK35_VENV) && \
	  $(SPARK35_VENV)/bin/pip install --quiet 'pyspark==3.5.*' 'pandas<2.3' 'numpy<2' 'pyarrow<17'; }
	PYSPARK_PYTHON=$(abspath $(SPARK35_VENV))/bin/python PYSPARK_DRIVER_PYTHON=$(abspath $(SPARK35_VENV))/bin/python \
	  $(SPARK35_VENV)/bin/python tools/spark/make_fixtures.py --spark35

clean:
	rm -rf out .pytest_cache build *.egg-info
