"""Shared pytest configuration: fixture modules every test directory can use."""

import pytest

pytest_plugins = [
    "tests.fixtures.airflow",
    "tests.fixtures.file_times",
    "tests.fixtures.seaweed",
    "tests.fixtures.kafka",
    "tests.fixtures.pipelines",
    "tests.fixtures.postgres",
    "tests.fixtures.s3proxy",
    "tests.fixtures.serve",
    "tests.fixtures.spark_cluster",
]

# make test runs two pytest-xdist workers with --dist loadfile --no-loadscope-reorder: a file
# runs whole on one worker, and files start in collection order. The files that take longest
# (measured in a fresh-clone run, seconds of one worker) go first, so no long file starts last
# and leaves the other worker idle (longest-processing-time-first).
LONGEST_FIRST = (
    "tests/airflow/test_dag_test.py",  # ~280 s: three DAG runs with spark-submit
    "tests/airflow/test_server.py",  # ~250 s: a real Airflow API server and scheduler
    "tests/sinks/test_contract.py",
    "tests/test_cli.py",
    "tests/integration/test_windows.py",
    "tests/faults/test_crash_recovery.py",
    "tests/sinks/test_delta_sink.py",
    "tests/integration/test_split_invariance.py",
    "tests/faults/test_corruption.py",
    "tests/faults/test_storage_faults.py",  # ~210 s: a pipeline through the S3 fault proxy
    "tests/faults/test_bad_input.py",
    "tests/faults/test_security.py",
    "tests/faults/test_spark_kills.py",
    "tests/airflow/test_monitor_browser.py",  # ~65-140 s: an Airflow API server, Chromium
    "tests/airflow/test_monitor_rewind_browser.py",  # ~60-100 s: the same
    "tests/keyed/test_count_window_average.py",
    "tests/serve/test_crashes.py",  # ~60-180 s: three sluice serve starts, two SIGKILLs
    "tests/serve/test_server.py",
    "tests/faults/test_crash_matrix.py",  # ~200 s: 13 SIGKILLs, 4 of them in a new JVM
    "tests/keyed/test_keyed_crashes.py",
    "tests/airflow/test_warm.py",
    "tests/stateless/test_stateless_pipelines.py",
    "tests/stateless/test_stateless_crashes.py",  # a SIGKILL in a new JVM
    "tests/airflow/test_cluster.py",
    "tests/faults/test_races.py",
    "tests/protocol/test_retention.py",
    "tests/protocol/test_upgrade.py",
    "tests/faults/test_sink_matrix.py",
    "tests/faults/test_crash_on_update.py",
    "tests/integration/test_nexmark_queries.py",
    "tests/integration/test_sessions.py",
    "tests/keyed/test_keyed_pipelines.py",
    "tests/sources/test_kafka_source.py",
    "tests/sources/test_kafka_security.py",
    "tests/protocol/test_rewind.py",
    "tests/test_monitor.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first (a stable sort: the order inside a file is kept)."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
