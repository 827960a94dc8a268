"""Shared pytest configuration: fixture modules every test directory can use."""

pytest_plugins = [
    "tests.fixtures.airflow",
    "tests.fixtures.seaweed",
    "tests.fixtures.pipelines",
    "tests.fixtures.postgres",
    "tests.fixtures.spark_cluster",
]
