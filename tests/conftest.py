"""Shared pytest configuration: fixture modules every test directory can use."""

import os

import pytest

# The Spark JVMs the tests start as subprocesses (CLI runs, spark-submit from Airflow tasks,
# sluice serve, pipelines killed on purpose) live seconds to a minute, and spend much of
# their CPU in the C2 JIT compiler for code they then barely run: C1 only makes a cold
# `sluice run` of two epochs 0.78x as long (farm-bench, 4 pairs, median). The session each
# worker keeps for the whole run is started without it (tests/fixtures/pipelines.py: spark),
# since a long-lived JVM is slower with C1 only. Test infrastructure only: production JVMs
# keep the default.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")

# The sink and source contract suites live in the package (sluice.testing) so that users can
# run them against their own sinks; their asserts say what differed only if pytest rewrites
# them, which it does for test files and plugins alone.
pytest.register_assert_rewrite("sluice.testing")

pytest_plugins = [
    "tests.fixtures.airflow",
    "tests.fixtures.file_times",
    "tests.fixtures.seaweed",
    "tests.fixtures.iceberg",
    "tests.fixtures.kafka",
    "tests.fixtures.pipelines",
    "tests.fixtures.postgres",
    "tests.fixtures.s3proxy",
    "tests.fixtures.serve",
    "tests.fixtures.spark_cluster",
]

# make test runs two pytest-xdist workers with --dist loadfile --no-loadscope-reorder: a file
# runs whole on one worker, and files start in collection order. The files that take longest
# go first, so no long file starts last and leaves the other worker idle
# (longest-processing-time-first). Order from one worker's wall seconds per file in a full
# run (`make test PYTEST_ARGS=--file-times=F`, then `python -m tests.fixtures.file_times F`),
# measured under load beside the warm soak; the dead-letter fix since cut the stateless files.
LONGEST_FIRST = (
    "tests/airflow/test_server.py",  # ~270 s: a real Airflow API server and scheduler
    "tests/sinks/test_contract.py",  # ~260 s
    "tests/integration/test_windows.py",  # ~230 s
    "tests/joins/test_stream_join.py",  # ~200 s: joins over cuts, a rewind, idle sides
    "tests/state/test_compaction.py",  # ~180 s
    "tests/serve/test_crashes.py",  # ~60-180 s: three sluice serve starts, two SIGKILLs
    "tests/test_cli.py",  # ~165 s: CLI subprocesses, each a JVM
    "tests/airflow/test_dag_test.py",  # ~150 s: three DAG runs with spark-submit
    "tests/faults/test_corruption.py",
    "tests/faults/test_sink_matrix.py",
    "tests/faults/test_crash_matrix.py",
    "tests/faults/test_crash_recovery.py",
    "tests/serve/test_server.py",
    "tests/stateless/test_stateless_crashes.py",  # a SIGKILL in a new JVM
    "tests/sinks/test_delta_sink.py",
    "tests/keyed/test_keyed_pipelines.py",
    "tests/faults/test_storage_faults.py",  # a pipeline through the S3 fault proxy
    "tests/integration/test_lookup_join.py",  # ~70 s: Delta, Iceberg, PostgreSQL, S3 tables
    "tests/airflow/test_warm.py",
    "tests/faults/test_crash_on_update.py",
    "tests/stateless/test_stateless_pipelines.py",  # ~60 s (was ~370 s before the fix)
    "tests/faults/test_lookup_crash.py",  # ~26 s: CLI subprocesses killed at fault points
    "tests/faults/test_join_crash.py",  # ~80 s: a join killed at four fault points
    "tests/integration/test_nexmark_joins.py",  # ~60 s: q3, q8 over 1M events
    "tests/integration/test_split_invariance.py",
    "tests/airflow/test_cluster.py",
    "tests/keyed/test_keyed_crashes.py",
    "tests/windows/test_window_index.py",
    "tests/airflow/test_monitor_browser.py",  # an Airflow API server, Chromium
    "tests/faults/test_spark_kills.py",
    "tests/protocol/test_stateless_upgrade.py",
    "tests/storage/test_object_store_contract.py",
    "tests/integration/test_sessions.py",
    "tests/sources/test_kafka_source.py",
    "tests/protocol/test_upgrade.py",
    "tests/sources/test_file_names.py",
    "tests/sources/test_kafka_security.py",
    "tests/sinks/test_files_sink.py",
    "tests/sources/test_files_source.py",
    "tests/sinks/test_compaction.py",
    "tests/airflow/test_light_imports.py",
    "tests/integration/test_qos.py",
    "tests/keyed/test_batches.py",
    "tests/airflow/test_monitor_rewind_browser.py",
    "tests/integration/test_nexmark_queries.py",
    "tests/faults/test_security.py",
    "tests/faults/test_bad_input.py",
    "tests/keyed/test_count_window_average.py",
    "tests/test_monitor.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first (a stable sort: the order inside a file is kept)."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
