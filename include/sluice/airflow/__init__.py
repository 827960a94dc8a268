"""Airflow integration: one DAG per pipeline spec (``plan >> process >> commit``).

The engine never imports this package; only DAG files, the provisioning script and the
Airflow plugin do. Importing it requires Apache Airflow 3.
"""

from sluice.airflow.factory import (
    EXECUTION_ENV,
    PIPELINES_DIR_ENV,
    SPARK_CONN_ENV,
    build_dag,
    build_dags,
    dag_id,
    execution_mode,
    pool_name,
)

__all__ = [
    "EXECUTION_ENV",
    "PIPELINES_DIR_ENV",
    "SPARK_CONN_ENV",
    "build_dag",
    "build_dags",
    "dag_id",
    "execution_mode",
    "pool_name",
]
