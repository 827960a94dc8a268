# Sluice developer entry points. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
LINT_PATHS := include tests dags jobs plugins bench
PIP := $(BIN)/python -m pip --disable-pip-version-check

.PHONY: help venv jvm jars kafka-jars iceberg-rest flink-venv bench bench-quick run test test-extended flake-hunt chaos soak chromium-check sink-matrix airflow airflow-stop compose-check postgres-check lint typecheck clean java-check

help:
	@echo "make venv       create $(VENV) ($(PYTHON)) and install requirements.txt + sluice (editable)"
	@echo "make jvm        build Sluice's Spark helper jar (include/sluice/jvm, javac) ahead of first use"
	@echo "make jars       fetch Spark's extra jars (s3a, JDBC, Delta, Kafka connector) into .cache/jars with Maven"
	@echo "make kafka-jars fetch a Kafka broker for the tests into .cache/kafka with Maven (not on Spark's classpath)"
	@echo "make iceberg-rest  fetch Iceberg's REST catalog test server into .cache/iceberg-rest with Maven (tests only)"
	@echo "make run        run the demo pipeline: $(BIN)/sluice demo (no Maven, no services)"
	@echo "make test       run the tests not marked slow on TEST_WORKERS=2 workers (starts its own S3, PostgreSQL, Airflow, Spark)"
	@echo "make test-extended  the rest of the fence (marked extended): Spark copies of cases the in-memory"
	@echo "                protocol suite covers, the whole backend x sink contract matrix; .ci/run runs it after make test"
	@echo "make flake-hunt make test's Kafka, Airflow, serve and faults folders FLAKE_ROUNDS (5) times, two at once"
	@echo "make chaos      the slow suites (every point of every crash matrix, the rest of the window matrix), then make soak"
	@echo "make soak       SOAK_EPOCHS (300) qos-2 epochs under random crashes, races and S3 faults; prints duplicates and losses"
	@echo "                SOAK_MODE=warm: SOAK_EPOCHS (1000) through one sluice serve within SOAK_MINUTES (120), heap/threads flat"
	@echo "make sink-matrix  the whole qos crash matrix (sinks x qos x fault points), printed and saved"
	@echo "make bench      Nexmark q0/q5/q7/q11, 10M events: Sluice qos 0/1/2 beside Spark Structured Streaming,"
	@echo "                PyFlink and DuckDB, fixed cost per epoch, scaling (bench/results/latest.md + .png)"
	@echo "make bench-quick  the same at smoke size (bench/results/quick.md, a few minutes)"
	@echo "make flink-venv the benchmark's PyFlink in .cache/bench/flink-venv (apart from $(VENV))"
	@echo "make airflow    a local Airflow 3: the demo DAG unpaused, warm epochs on sluice serve (SLUICE_EXECUTION=cold: spark-submit)"
	@echo "make airflow-stop  the scheduler first, then the rest; waits until every process it started has exited"
	@echo "make compose-test  the docker-compose stack for real: engine, local images, the demo DAG (20-30 min)"
	@echo "make astro-test the Astro project's image (Dockerfile) built without a registry, the demo DAG in it"
	@echo "make lint       ruff check + format --check, lint-imports (the floors), import cycles"
	@echo "make typecheck  mypy (--strict on sluice.contracts)"
	@echo "make clean      remove caches and build leftovers (keeps $(VENV) and .cache/)"

venv: $(INSTALLED)

# Re-installs only when requirements.txt or pyproject.toml changed since the last install.
$(INSTALLED): requirements.txt pyproject.toml
	@if [[ ! -x $(BIN)/python ]]; then \
	  command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found on PATH" >&2; exit 1; }; \
	  echo "creating $(VENV) with $$($(PYTHON) --version)"; \
	  $(PYTHON) -m venv $(VENV); \
	fi
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -r requirements.txt
	$(PIP) install --quiet -e .
	@touch $@

jars: $(INSTALLED)
	scripts/fetch-jars.sh

# The tests' Kafka broker (tests/fixtures/kafka.py): needs only Maven and Java, no venv.
kafka-jars:
	scripts/fetch-kafka.sh

# The tests' Iceberg REST catalog (tests/fixtures/iceberg.py): needs only Maven and Java.
iceberg-rest:
	scripts/fetch-iceberg-rest.sh

run: java-check $(INSTALLED) jvm
	$(BIN)/sluice demo

# Sluice's Spark helper jar (include/sluice/jvm): built with javac on first use anyway; this
# builds it ahead and says where it is.
jvm: java-check $(INSTALLED)
	@$(BIN)/python -c "from sluice.jvm import helper_jar; print('helper jar:', helper_jar())"

java-check:
	@command -v java >/dev/null || { \
	  echo "make: Java 17+ is required for Spark, but 'java' is not on PATH" \
	       "(Debian: apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }
	@major=$$(java -version 2>&1 | sed -nE 's/.* version "([0-9]+).*/\1/p' | head -n1); \
	if [[ -z "$$major" || "$$major" -lt 17 ]]; then \
	  echo "make: Java 17+ is required for Spark; found: $$(java -version 2>&1 | head -n1)" >&2; \
	  exit 1; \
	fi
	@command -v javac >/dev/null || { \
	  echo "make: a JDK's javac is required (Sluice builds a small Spark helper jar with it);" \
	       "Debian: apt-get install openjdk-17-jdk-headless" >&2; exit 1; }

# Two pytest workers (pytest-xdist), a test file each at a time, longest files first (see
# tests/conftest.py): every worker starts its own Spark session, SeaweedFS and PostgreSQL on
# free loopback ports. TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 2

# PYTEST_ARGS adds options, e.g. PYTEST_ARGS="--file-times=.artifacts/times.jsonl" (per-file
# wall and CPU seconds: tests/fixtures/file_times.py).
PYTEST_ARGS ?=
TEST_SETUP := java-check $(INSTALLED) jvm jars kafka-jars iceberg-rest compose-check postgres-check chromium-check

test: $(TEST_SETUP)
	$(BIN)/pytest -m "not slow and not extended" -n $(TEST_WORKERS) --dist loadfile \
	  --no-loadscope-reorder $(PYTEST_ARGS)

# The part of the fence moved out of make test to keep it fast (docs/testing.md, "The fence"):
# still run by .ci/run on every landing.
test-extended: $(TEST_SETUP)
	$(BIN)/pytest -m "extended and not slow" -n $(TEST_WORKERS) --dist loadfile \
	  --no-loadscope-reorder $(PYTEST_ARGS)

# make test's Kafka, Airflow, serve and faults folders FLAKE_ROUNDS times each, two pytest runs at
# once (each under the other's load); a failed run keeps its basetemp (scripts/flake-hunt.sh).
FLAKE_ROUNDS ?= 5
flake-hunt: $(TEST_SETUP)
	scripts/flake-hunt.sh $(FLAKE_ROUNDS)

chaos: java-check $(INSTALLED) jars kafka-jars iceberg-rest postgres-check chromium-check
	$(BIN)/pytest -m slow
	$(MAKE) soak

# The soak: exits non-zero unless duplicates and losses are 0; its summary is also written to
# $(SOAK_OUT). SOAK_MODE=cold (tests/faults/soak.py): epochs in-process and in CLI drivers.
# SOAK_MODE=warm (tests/faults/soak_warm.py): epochs through one `sluice serve`, also non-zero
# unless its heap after GC and thread counts stay flat; SOAK_MINUTES bounds it.
SOAK_MODE ?= cold
SOAK_SEED ?= 7
ifeq ($(SOAK_MODE),warm)
SOAK_EPOCHS ?= 1000
SOAK_MINUTES ?= 120
SOAK_OUT ?= bench/results/soak-warm.txt
SOAK_CMD = tests.faults.soak_warm --minutes $(SOAK_MINUTES)
else
SOAK_EPOCHS ?= 300
SOAK_OUT ?= bench/results/soak.txt
SOAK_CMD = tests.faults.soak
endif
soak: java-check $(INSTALLED) jars
	$(BIN)/python -m $(SOAK_CMD) --epochs $(SOAK_EPOCHS) --seed $(SOAK_SEED) --summary $(SOAK_OUT)

# The whole qos crash matrix (3 levels x 11 fault points x 5 sinks, ~1 h), printed at the end
# and saved to $(SINK_MATRIX_OUT).
SINK_MATRIX_OUT ?= bench/results/sink-matrix.txt
sink-matrix: java-check $(INSTALLED) jars kafka-jars postgres-check
	SLUICE_MATRIX_OUT=$(SINK_MATRIX_OUT) $(BIN)/pytest tests/faults/test_sink_matrix.py

# The Nexmark benchmark (bench/nexmark.py; never part of make test). BENCH_ARGS adds options,
# e.g. BENCH_ARGS="--sections duckdb,sluice --events 2000000".
BENCH_ARGS ?=
bench: java-check $(INSTALLED) flink-venv
	$(BIN)/python bench/nexmark.py $(BENCH_ARGS)

bench-quick: java-check $(INSTALLED) flink-venv
	$(BIN)/python bench/nexmark.py --quick $(BENCH_ARGS)

# The benchmark's PyFlink peer runs in its own venv (apache-flink pins its own pyarrow/pandas).
flink-venv:
	scripts/flink-venv.sh

# scripts/airflow-local.sh (settings in its header and docs/airflow.md, "Local Airflow").
airflow: java-check $(INSTALLED)
	scripts/airflow-local.sh

# The scheduler first (no new task), then the other services and sluice serve; waits for every
# process tree to exit, SIGKILLs what outlives AIRFLOW_STOP_TIMEOUT (scripts/airflow_local_stop.py).
airflow-stop:
	scripts/airflow-local.sh stop

# The docker-compose stack for real (scripts/compose_test.py; never part of make test): Debian's
# Docker engine when missing (dockerd started and stopped), a debootstrap base image (no
# registry), local stand-ins for the images it cannot pull (docker/compose.local.yaml), every
# service up on loopback ports, the demo DAG triggered through the REST API, its output and a
# rewind checked against the reference, then everything torn down; prints a summary.
# COMPOSE_TEST_ARGS=--keep leaves the stack up (scripts/compose_test.py --down removes it).
.PHONY: compose-test astro-test
COMPOSE_TEST_ARGS ?=
compose-test: $(INSTALLED) kafka-jars
	$(BIN)/python scripts/compose_test.py $(COMPOSE_TEST_ARGS)

# The Astro project (Dockerfile, packages.txt, airflow_settings.yaml) built on a stand-in for
# the Astro Runtime (no registry), the demo DAG run in its image with `airflow dags test`.
astro-test: $(INSTALLED)
	$(BIN)/python scripts/compose_test.py --astro $(COMPOSE_TEST_ARGS)

# A PostgreSQL server for the tests' Airflow metadata DB (the tests start their own on loopback).
postgres-check:
	scripts/install-postgres.sh

# Debian's chromium for the monitor's browser tests (playwright drives /usr/bin/chromium).
chromium-check:
	scripts/install-chromium.sh

# Debian's docker-compose validates docker-compose.yaml in the tests (no engine needed).
compose-check:
	scripts/install-compose-check.sh

lint: $(INSTALLED)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/lint-imports --no-cache
	$(BIN)/python scripts/import_cycles.py

# include/sluice is a namespace package (no __init__.py): map files to modules from include/.
typecheck: $(INSTALLED)
	MYPYPATH=include $(BIN)/mypy --explicit-package-bases
	MYPYPATH=include $(BIN)/mypy --explicit-package-bases --strict include/sluice/contracts

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache spark-warehouse metastore_db derby.log
	rm -rf include/*.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
