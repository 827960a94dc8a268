"""Airflow integration: one DAG per pipeline spec (``plan >> process >> commit``).

The engine never imports this package; only DAG files, the provisioning script and the
Airflow plugin do. Importing it requires Apache Airflow 3.

The names below come from :mod:`sluice.airflow.factory`, loaded on first use: the triggerer
imports :mod:`sluice.airflow.triggers` on its event loop, and the factory (the Spark
provider, operators, requests) would block that loop for a few hundred milliseconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    if name in __all__:
        from sluice.airflow import factory

        return getattr(factory, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
