"""Provision an Airflow metadata database for Sluice: one pool per pipeline, the Spark connection,
and (with ``--serve-url``) the connection to a ``sluice serve`` server for warm execution.

    python -m sluice.airflow.provision [--pipelines DIR] [--spark-master local[*]]
        [--serve-url http://127.0.0.1:8790 [--serve-token-file PATH] [--serve-conn-id ID]]
        [--seed-inputs]

With ``--seed-inputs`` (``make airflow``) every shipped spec that reads files and has no input
yet gets its demo input (:func:`sluice.demo.shipped_input`), so each DAG passes when unpaused.

Idempotent: pools are created or resized to one slot; the Spark connection is created only when
it does not exist (an operator's edits to it are kept). The serve connection is created, or
updated to the given URL and token (a server's token may be rotated); the token is read from
``--serve-token-file`` or ``$SLUICE_SERVE_TOKEN``, never from the command line, and never
printed. A pool that does not exist would block the pipeline's tasks silently, which is why
this runs in every set-up (make airflow, compose init, tests).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sluice.airflow.factory import (
    DEFAULT_SPARK_CONN,
    PIPELINES_DIR_ENV,
    SERVE_CONN_ENV,
    SPARK_CONN_ENV,
    pool_name,
)
from sluice.airflow.hooks import DEFAULT_SERVE_CONN
from sluice.serve import DEFAULT_PORT
from sluice.spec import PipelineSpec, SpecError, load_spec
from sluice.words import count

__all__ = [
    "ensure_pools",
    "ensure_serve_connection",
    "ensure_spark_connection",
    "main",
    "seed_inputs",
]


def _specs(pipelines_dir: Path) -> list[PipelineSpec]:
    """The specs that load; a bad spec hides nothing but itself (docs/airflow.md): its DAG is
    a placeholder showing the error, it gets no pool and no input until fixed."""
    specs = []
    for path in sorted([*pipelines_dir.glob("*.yaml"), *pipelines_dir.glob("*.yml")]):
        try:
            specs.append(load_spec(path))
        except SpecError as exc:
            print(f"skipped {path} (its DAG shows the error until fixed): {exc}")
    return specs


def ensure_pools(pipelines_dir: Path) -> list[str]:
    from airflow.models.pool import Pool

    names = []
    for spec in _specs(pipelines_dir):
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


def ensure_serve_connection(conn_id: str, url: str, token: str) -> str:
    """Create or update the ``http`` connection to a ``sluice serve`` server at ``url``
    (password = ``token``); returns ``created``, ``updated`` or ``unchanged``."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SystemExit(f"--serve-url {url!r}: expected http(s)://host[:port]")
    wanted: dict[str, Any] = {
        "conn_type": "http",
        "host": parts.hostname,
        "port": parts.port or DEFAULT_PORT,
        "schema": parts.scheme,
        "password": token,
    }
    with create_session() as session:
        conn = session.query(Connection).filter(Connection.conn_id == conn_id).first()
        if conn is None:
            session.add(Connection(conn_id=conn_id, description="sluice serve (warm execution)",
                                   **wanted))  # fmt: skip
            return "created"
        if all(getattr(conn, k) == v for k, v in wanted.items()):
            return "unchanged"
        for key, value in wanted.items():
            setattr(conn, key, value)
        return "updated"


def seed_inputs(pipelines_dir: Path) -> list[str]:
    """Write the demo input of each shipped spec that reads files into its ``source.path``
    when nothing is there yet (a folder with files is kept as it is); one line per spec."""
    from sluice.demo import shipped_input
    from sluice.spec.components.files_source import FilesSourceConfig
    from sluice.storage import open_store

    done = []
    for spec in _specs(pipelines_dir):
        files = shipped_input(spec.name)
        source = spec.source
        if files is None or not isinstance(source, FilesSourceConfig):
            continue
        store = open_store(source.path, s3=spec.s3)
        existing = store.list()
        if existing:
            done.append(f"{spec.name}: kept the {count(len(existing), 'files')} in {store.uri()}")
            continue
        for name, body in files:
            store.put(name, body)
        done.append(f"{spec.name}: wrote {count(len(files), 'files')} to {store.uri()}")
    return done


def _serve_token(token_file: Path | None) -> str:
    if token_file is not None:
        return token_file.read_text(encoding="utf-8").strip()
    token = os.environ.get("SLUICE_SERVE_TOKEN", "")
    if not token:
        raise SystemExit("--serve-url needs --serve-token-file or $SLUICE_SERVE_TOKEN")
    return token


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice.airflow.provision")
    default_dir = os.environ.get(PIPELINES_DIR_ENV) or "include/pipelines"
    parser.add_argument("--pipelines", default=default_dir, type=Path)
    parser.add_argument("--spark-master", default=os.environ.get("SLUICE_SPARK_MASTER", "local[*]"))
    parser.add_argument("--conn-id", default=os.environ.get(SPARK_CONN_ENV, DEFAULT_SPARK_CONN))
    parser.add_argument("--serve-url", default=None, help="create the sluice serve connection")
    parser.add_argument("--serve-token-file", type=Path, default=None)
    parser.add_argument(
        "--serve-conn-id", default=os.environ.get(SERVE_CONN_ENV) or DEFAULT_SERVE_CONN
    )
    parser.add_argument("--seed-inputs", action="store_true", help="demo input of shipped specs")
    args = parser.parse_args(argv)
    pools = ensure_pools(args.pipelines)
    created = ensure_spark_connection(args.conn_id, args.spark_master)
    print(f"pools: {', '.join(pools) or '(no pipelines)'}")
    state = "created" if created else "exists, kept"
    print(f"connection {args.conn_id}: {state} (spark, master {args.spark_master})")
    if args.serve_url:
        token = _serve_token(args.serve_token_file)
        done = ensure_serve_connection(args.serve_conn_id, args.serve_url, token)
        print(f"connection {args.serve_conn_id}: {done} (sluice serve at {args.serve_url})")
    if args.seed_inputs:
        for line in seed_inputs(args.pipelines):
            print(f"input of {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
