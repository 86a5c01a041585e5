# State Explorer: two commands set up a fresh machine.
#   make demo   the main job (example pipelines on the local engine, snapshots under out/)
#   make test   the whole test suite
# Both build .venv with pip first when it is missing or stale.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)

.PHONY: venv demo test test-fast lab sample-data bench bench-smoke flink-fixtures clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/state-explorer demo --out out

test: $(STAMP)
	$(BIN)/python -m pytest

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not spark and not browser and not slow"

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks

sample-data: $(STAMP)
	$(BIN)/python -m explorer.sample_data sample_data

bench: $(STAMP)
	$(BIN)/python -m benchmarks

bench-smoke: $(STAMP)
	$(BIN)/python -m benchmarks --smoke

clean:
	rm -rf out .pytest_cache build *.egg-info
