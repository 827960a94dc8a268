"""What the postgres sink asks of, and creates in, PostgreSQL's catalog: whether a table or
schema exists, a table's columns, the fence table and the staging schema, the staging tables
left of a pipeline; and dropping a table. Each runs on the caller's cursor or connection."""

from __future__ import annotations

from typing import Any

from psycopg2 import sql

from sluice.sinks.postgres.names import FENCE_SCHEMA, STAGING_SCHEMA, split_table

__all__ = [
    "DDL_LOCK",
    "FENCE",
    "column_names",
    "create_schema",
    "drop",
    "ensure_fence",
    "exists",
    "has_schema",
    "staging_names",
]

FENCE = sql.Identifier(FENCE_SCHEMA, "commits")
DDL_LOCK = 0x5C_0CE_DD1  # pg_advisory_xact_lock key: concurrent CREATE … IF NOT EXISTS races


def exists(cur: Any, schema: str, table: str) -> bool:
    cur.execute("SELECT to_regclass(%s)", (sql.Identifier(schema, table).as_string(cur),))
    return cur.fetchone()[0] is not None


def column_names(cur: Any, schema: str, table: str) -> list[str]:
    cur.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum",
        (sql.Identifier(schema, table).as_string(cur),),
    )
    return [r[0] for r in cur.fetchall()]


def create_schema(cur: Any, schema: str) -> None:
    """``CREATE SCHEMA`` only when missing: ``IF NOT EXISTS`` alone still needs the right to
    create schemas, which a sink's user may lack for an existing one."""
    if not has_schema(cur, schema):
        cur.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))


def ensure_fence(cur: Any) -> None:
    """The fence table and the staging schema, if missing (serialised by an advisory lock)."""
    if exists(cur, FENCE_SCHEMA, "commits") and has_schema(cur, STAGING_SCHEMA):
        return
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (DDL_LOCK,))
    create_schema(cur, FENCE_SCHEMA)
    create_schema(cur, STAGING_SCHEMA)
    cur.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (pipeline text NOT NULL, sink text NOT NULL, "
            "epoch bigint NOT NULL, attempt text NOT NULL, {} bigint NOT NULL, "
            "committed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (pipeline, sink, epoch))"
        ).format(FENCE, sql.Identifier("rows"))
    )


def has_schema(cur: Any, schema: str) -> bool:
    cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
    return cur.fetchone() is not None


def drop(conn: Any, table: str) -> None:
    with conn, conn.cursor() as cur:
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(*split_table(table))))


def staging_names(cur: Any, prefix: str) -> list[str]:
    cur.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND left(c.relname::text, %s) = %s "
        "ORDER BY c.relname",
        (STAGING_SCHEMA, len(prefix), prefix),
    )
    return [r[0] for r in cur.fetchall()]
