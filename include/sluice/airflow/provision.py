"""Provision an Airflow metadata database for Sluice: one pool per pipeline, the Spark connection.

    python -m sluice.airflow.provision [--pipelines DIR] [--spark-master local[*]]

Idempotent: pools are created or resized to one slot; the connection is created only when it
does not exist (an operator's edits to it are kept). A pool that does not exist would block the
pipeline's tasks silently, which is why this runs in every set-up (make airflow, compose init,
tests).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from sluice.airflow.factory import (
    DEFAULT_SPARK_CONN,
    PIPELINES_DIR_ENV,
    SPARK_CONN_ENV,
    pool_name,
)
from sluice.spec import load_spec

__all__ = ["ensure_pools", "ensure_spark_connection", "main"]


def ensure_pools(pipelines_dir: Path) -> list[str]:
    from airflow.models.pool import Pool

    names = []
    for path in sorted([*pipelines_dir.glob("*.yaml"), *pipelines_dir.glob("*.yml")]):
        spec = load_spec(path)
        name = pool_name(spec.name)
        Pool.create_or_update_pool(
            name, 1, f"Sluice pipeline {spec.name}: one epoch step at a time", False
        )
        names.append(name)
    return names


def ensure_spark_connection(conn_id: str, master: str) -> bool:
    """Create the ``spark`` connection if missing; True when it was created."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    with create_session() as session:
        if session.query(Connection).filter(Connection.conn_id == conn_id).first() is not None:
            return False
        session.add(
            Connection(
                conn_id=conn_id,
                conn_type="spark",
                host=master,
                description="Spark master for Sluice's process task",
            )
        )
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice.airflow.provision")
    default_dir = os.environ.get(PIPELINES_DIR_ENV) or "include/pipelines"
    parser.add_argument("--pipelines", default=default_dir, type=Path)
    parser.add_argument("--spark-master", default=os.environ.get("SLUICE_SPARK_MASTER", "local[*]"))
    parser.add_argument("--conn-id", default=os.environ.get(SPARK_CONN_ENV, DEFAULT_SPARK_CONN))
    args = parser.parse_args(argv)
    pools = ensure_pools(args.pipelines)
    created = ensure_spark_connection(args.conn_id, args.spark_master)
    print(f"pools: {', '.join(pools) or '(no pipelines)'}")
    state = "created" if created else "exists, kept"
    print(f"connection {args.conn_id}: {state} (spark, master {args.spark_master})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
