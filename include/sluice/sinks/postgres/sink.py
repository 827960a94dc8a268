"""The ``postgres`` sink: rows into a PostgreSQL table, exactly once.

Why a staged table plus a commit fence, and not ``PREPARE TRANSACTION``: Spark's JDBC writer
inserts from one connection per partition, on the executors, and no single prepared
transaction can span several connections; a default server also has
``max_prepared_transactions = 0``. So the two phases are:

1. *prepare*: Spark writes the rows (``mode("errorifexists")``) into a staging table that this
   attempt alone owns, ``sluice_staging.<name>``; readers of the target never see it. The name
   is a deterministic function of (pipeline, sink, epoch, attempt), short enough for
   PostgreSQL's 63-byte identifiers, and its prefixes encode (pipeline) and
   (pipeline, sink, epoch), so recovery finds every attempt's table by listing the catalog —
   even one left half-written by a crash, with no registry that could disagree with it.
2. *commit*, one transaction: insert ``(pipeline, sink, epoch)`` into the fence table
   ``sluice.commits`` (``ON CONFLICT DO NOTHING``); only if that inserted the row, move the
   staged rows into the target (append: ``INSERT … SELECT``; upsert: delete the staged
   deletes' keys, then ``INSERT … ON CONFLICT (keys) DO UPDATE``); commit; then drop the
   staging table. The fence row and the rows become visible together or not at all. Two
   commits racing serialise on the fence's primary key: the second waits for the first's
   uncommitted insert, then sees the conflict and does nothing; a late retry of an old epoch
   does nothing either, so it cannot bring back an old value.

Prepare also refuses upsert rows that commit could never publish (a null or repeated key),
so such an epoch fails before its checkpoint instead of in a commit retried forever. An
epoch without rows stages nothing; its commit still records the fence row, so every
committed epoch has one. ``committed_at`` is the database's ``now()``: the sink never reads
the wall clock. The connection URI's password goes to psycopg2 and to Spark's JDBC
properties only; messages and :class:`Prepared` carry :meth:`PostgresUrl.redacted`.

Retraction (a rewind, docs/rewind.md) is :mod:`sluice.sinks.postgres.undo`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg2 import sql

from sluice.contracts.records import Prepared
from sluice.contracts.sinks import Sink
from sluice.sinks.exceptions import PostgresSinkError, StagingTableMissing, Where
from sluice.sinks.postgres.catalog import (
    DDL_LOCK,
    FENCE,
    column_names,
    create_schema,
    drop,
    ensure_fence,
    exists,
    staging_names,
)
from sluice.sinks.postgres.names import (
    EPOCH_COLUMN,
    FENCE_SCHEMA,
    STAGING_SCHEMA,
    split_table,
    staging_name,
    staging_prefix,
)
from sluice.sinks.postgres.types import pg_type
from sluice.sinks.postgres.undo import UndoLog
from sluice.sinks.postgres.url import PostgresUrl, connect
from sluice.sinks.staging import FieldsHandle
from sluice.spec.components.postgres_sink import PostgresSinkConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["CHANGELOG_COLUMNS", "PostgresSink"]

CHANGELOG_COLUMNS = ("_op", "_epoch")


@dataclass(frozen=True)
class PostgresStaged(FieldsHandle):
    """A postgres sink's handle: the target table and the epoch's staging table (None: the
    epoch had no rows, or they were written directly; both None in the bare ``Prepared``
    recovery aborts a dead attempt with)."""

    table: str | None = None
    staging_table: str | None = None


class PostgresSink(Sink[PostgresStaged]):
    """Writes ``config.table`` through ``url``; see the module docstring for the protocol."""

    supports_retraction = True
    handle_type = PostgresStaged

    def __init__(self, config: PostgresSinkConfig, url: str, pipeline: str) -> None:
        if not config.table:
            raise PostgresSinkError(
                f"pipeline {pipeline}, sink {config.name}: no table",
                pipeline=pipeline,
                sink=config.name,
            )
        if config.mode == "upsert" and not config.keys:
            raise PostgresSinkError.without_keys(pipeline, config.name)
        self.name = config.name
        self.config = config
        self.pipeline = pipeline
        self.schema, self.table = split_table(config.table)
        self._url = PostgresUrl.parse(url)
        self._undo_log = UndoLog(
            pipeline, config.name, self.schema, self.table, config.mode, tuple(config.keys)
        )

    def __repr__(self) -> str:
        return f"PostgresSink({self.pipeline}/{self.name} -> {self.uri})"

    @property
    def uri(self) -> str:
        return self._url.redacted(f"{self.schema}.{self.table}")

    @property
    def _target(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table)

    def _where(self, epoch: int, attempt: str) -> str:
        return f"pipeline {self.pipeline}, sink {self.name}, epoch {epoch}, attempt {attempt}"

    def _context(self, epoch: int, attempt: str) -> Where:
        """What :meth:`_where` names, as a :class:`SinkError`'s attributes."""
        return {"pipeline": self.pipeline, "sink": self.name, "epoch": epoch, "attempt": attempt}

    # -- prepare ------------------------------------------------------------------------------

    def prepare(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """Create the target if missing, then stage the rows (nothing for an empty epoch)."""
        if rows is None:  # not counted by the engine: count first
            rows = df.count()
        if self.config.mode == "append":
            df = df.drop(*CHANGELOG_COLUMNS)
        self._ensure_tables(df)
        staged = PostgresStaged(f"{self.schema}.{self.table}")
        if rows > 0:
            name = staging_name(self.pipeline, self.name, epoch, attempt)
            self._spark_write(df, f"{STAGING_SCHEMA}.{name}", "errorifexists", epoch, attempt)
            self._seal(name, epoch, attempt)
            staged = PostgresStaged(staged.table, f"{STAGING_SCHEMA}.{name}")
        return Prepared.of(self.name, self.uri, epoch, attempt, rows, staged)

    def _ensure_tables(self, df: DataFrame) -> None:
        """Schemas, the fence table and the target (typed from ``df``), each if missing."""
        data = [f for f in df.schema.fields if f.name not in CHANGELOG_COLUMNS]
        columns = [(f.name, pg_type(f.name, f.dataType)) for f in data]
        missing_keys = [k for k in self.config.keys if k not in {c for c, _ in columns}]
        if self.config.mode == "upsert" and missing_keys:
            raise PostgresSinkError(
                f"pipeline {self.pipeline}, sink {self.name}: key columns {missing_keys} are not "
                f"in the output columns {[c for c, _ in columns]}",
                pipeline=self.pipeline,
                sink=self.name,
            )
        with connect(self._url) as conn, conn, conn.cursor() as cur:
            ensure_fence(cur)
            if not exists(cur, self.schema, self.table):
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (DDL_LOCK,))
                create_schema(cur, self.schema)
                cur.execute(self._create_target(columns))
            self._undo_log.ensure(cur)
            existing = set(column_names(cur, self.schema, self.table))
        absent = [c for c, _ in columns if c not in existing]
        if absent:
            raise PostgresSinkError(
                f"pipeline {self.pipeline}, sink {self.name}: table {self.uri} has no "
                f"columns {absent}; add them or write to a new table",
                pipeline=self.pipeline,
                sink=self.name,
            )

    def _create_target(self, columns: list[tuple[str, str]]) -> sql.Composed:
        defs = [sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in columns]
        if self.config.mode == "append":
            defs.append(sql.SQL("{} bigint").format(sql.Identifier(EPOCH_COLUMN)))
        if self.config.mode == "upsert":
            keys = sql.SQL(", ").join(map(sql.Identifier, self.config.keys))
            defs.append(sql.SQL("PRIMARY KEY ({})").format(keys))
        return sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
            self._target, sql.SQL(", ").join(defs)
        )

    def _spark_write(self, df: DataFrame, table: str, mode: str, epoch: int, attempt: str) -> None:
        url, props = self._url.jdbc()
        quoted = ".".join(f'"{p}"' for p in split_table(table))
        try:
            df.write.jdbc(url, quoted, mode=mode, properties=props)
        except Exception as exc:
            text = self._url.scrub(str(exc))
            hint = (
                " (the PostgreSQL JDBC jar is not on Spark's classpath: make jars)"
                if "org.postgresql.Driver" in text
                else ""
            )
            raise PostgresSinkError(
                f"{self._where(epoch, attempt)}: Spark could not write {table} at "
                f"{self._url.redacted()}{hint}: {_reason(text) or type(exc).__name__}",
                **self._context(epoch, attempt),
            ) from exc

    def _seal(self, name: str, epoch: int, attempt: str) -> None:
        """Label the staging table for operators (its name is a hash), and refuse rows that
        the upsert could never publish, here, before the checkpoint, rather than in a
        commit that would fail on every retry."""
        table = sql.Identifier(STAGING_SCHEMA, name)
        comment = f"sluice staging: {self._where(epoch, attempt)}, target {self.uri}"
        with connect(self._url) as conn:
            with conn, conn.cursor() as cur:
                cur.execute(
                    sql.SQL("COMMENT ON TABLE {} IS {}").format(table, sql.Literal(comment))
                )
                problem = self._unpublishable(cur, table)
            if problem:
                drop(conn, f"{STAGING_SCHEMA}.{name}")
                raise PostgresSinkError(
                    f"{self._where(epoch, attempt)}: {problem}", **self._context(epoch, attempt)
                )

    def _unpublishable(self, cur: Any, table: sql.Identifier) -> str | None:
        """Why the staged rows cannot go into the upsert's primary key, or None."""
        if self.config.mode != "upsert":
            return None
        keys = sql.SQL(", ").join(map(sql.Identifier, self.config.keys))
        null = sql.SQL(" OR ").join(
            sql.SQL("{} IS NULL").format(sql.Identifier(k)) for k in self.config.keys
        )
        cur.execute(sql.SQL("SELECT {} FROM {} WHERE {} LIMIT 1").format(keys, table, null))
        row = cur.fetchone()
        if row is not None:
            return (
                f"key {dict(zip(self.config.keys, row, strict=True))} has a null in the primary key"
            )
        cur.execute(
            sql.SQL(
                "SELECT {k} FROM {t} WHERE _op = 'upsert' GROUP BY {k} HAVING count(*) > 1 LIMIT 1"
            ).format(k=keys, t=table)
        )
        row = cur.fetchone()
        if row is not None:
            return f"key {dict(zip(self.config.keys, row, strict=True))} is upserted twice"
        return None

    # -- commit -------------------------------------------------------------------------------

    def commit(self, prepared: Prepared) -> None:
        """1. fence row, 2. move the staged rows (if the fence row is new), 3. COMMIT,
        4. drop the staging table. Idempotent; concurrent commits serialise on the fence."""
        staging = self.handle(prepared).staging_table
        with connect(self._url) as conn:
            with conn, conn.cursor() as cur:
                ensure_fence(cur)
            with conn, conn.cursor() as cur:
                if self._insert_fence(cur, prepared):
                    if prepared.retract_after is not None:
                        self._undo_log.retract(cur, prepared.retract_after, prepared.epoch)
                    self._publish(cur, prepared, staging)
            if staging:
                drop(conn, staging)

    def _insert_fence(self, cur: Any, prepared: Prepared) -> bool:
        cur.execute(
            sql.SQL(
                "INSERT INTO {} (pipeline, sink, epoch, attempt, {}, committed_at) "
                "VALUES (%s, %s, %s, %s, %s, now()) "
                "ON CONFLICT (pipeline, sink, epoch) DO NOTHING RETURNING 1"
            ).format(FENCE, sql.Identifier("rows")),
            (self.pipeline, self.name, prepared.epoch, prepared.attempt, prepared.rows),
        )
        return cur.fetchone() is not None

    def _publish(self, cur: Any, prepared: Prepared, staging: str | None) -> None:
        """Move the staged rows into the target, inside the fence's transaction."""
        if prepared.rows == 0:
            return
        if not staging or not exists(cur, *split_table(staging)):
            raise StagingTableMissing(
                self.pipeline, self.name, prepared.epoch, prepared.attempt, staging or "(none)"
            )
        source = sql.Identifier(*split_table(staging))
        columns = [
            c for c in column_names(cur, *split_table(staging)) if c not in CHANGELOG_COLUMNS
        ]
        cols = sql.SQL(", ").join(map(sql.Identifier, columns))
        if self.config.mode == "append":
            cur.execute(
                sql.SQL("INSERT INTO {} ({}, {}) SELECT {}, %s FROM {}").format(
                    self._target, cols, sql.Identifier(EPOCH_COLUMN), cols, source
                ),
                (prepared.epoch,),
            )
            return
        keys = self.config.keys
        match = sql.SQL(" AND ").join(
            sql.SQL("t.{k} = s.{k}").format(k=sql.Identifier(k)) for k in keys
        )
        self._undo_log.record(cur, prepared.epoch, source, match)
        cur.execute(
            sql.SQL("DELETE FROM {} t USING {} s WHERE s._op = 'delete' AND {}").format(
                self._target, source, match
            )
        )
        values = [c for c in columns if c not in keys]
        action = (
            sql.SQL("DO UPDATE SET {}").format(
                sql.SQL(", ").join(
                    sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in values
                )
            )
            if values
            else sql.SQL("DO NOTHING")
        )
        cur.execute(
            sql.SQL(
                "INSERT INTO {} ({}) SELECT {} FROM {} WHERE _op = 'upsert' ON CONFLICT ({}) {}"
            ).format(
                self._target, cols, cols, source,
                sql.SQL(", ").join(map(sql.Identifier, keys)), action,
            )
        )  # fmt: skip

    # -- retraction (rewinds: sluice.sinks.postgres.undo) --------------------------------------

    def forget_through(self, epoch: int) -> None:
        """No rewind will go below ``epoch`` any more: drop the undo rows it cannot need."""
        if self.config.mode != "upsert":
            return
        with connect(self._url) as conn, conn, conn.cursor() as cur:
            self._undo_log.forget_through(cur, epoch)

    # -- abort, recovery, direct writes ---------------------------------------------------------

    def abort(self, prepared: Prepared) -> None:
        staging = self.handle(prepared).staging_table
        if staging:
            with connect(self._url) as conn:
                drop(conn, staging)

    def abort_others(self, epoch: int, keep: str | None) -> int:
        """Drop the staging tables of every attempt of ``epoch`` but ``keep``."""
        mine = staging_name(self.pipeline, self.name, epoch, keep) if keep is not None else None
        with connect(self._url) as conn:
            with conn, conn.cursor() as cur:
                names = staging_names(cur, staging_prefix(self.pipeline, self.name, epoch))
            doomed = [n for n in names if n != mine]
            for name in doomed:
                drop(conn, f"{STAGING_SCHEMA}.{name}")
        return len(doomed)

    def write(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """qos 0/1: append straight into the target (no fence: a replay duplicates); upsert
        sinks stage and commit, which a replay cannot duplicate."""
        if rows is None:  # not counted by the engine: count first
            rows = df.count()
        if self.config.mode == "upsert":
            return super().write(epoch, attempt, df, rows)
        from pyspark.sql import functions as F

        df = df.drop(*CHANGELOG_COLUMNS)
        self._ensure_tables(df)
        if rows > 0:
            tagged = df.withColumn(EPOCH_COLUMN, F.lit(epoch).cast("bigint"))
            self._spark_write(tagged, f"{self.schema}.{self.table}", "append", epoch, attempt)
        staged = PostgresStaged(f"{self.schema}.{self.table}")
        return Prepared.of(self.name, self.uri, epoch, attempt, rows, staged)

    def committed_epochs(self) -> list[int]:
        """The epochs whose fence row exists, ascending."""
        with connect(self._url) as conn, conn, conn.cursor() as cur:
            if not exists(cur, FENCE_SCHEMA, "commits"):
                return []
            cur.execute(
                sql.SQL("SELECT epoch FROM {} WHERE pipeline = %s AND sink = %s ORDER BY epoch")
                .format(FENCE),
                (self.pipeline, self.name),
            )  # fmt: skip
            return [int(r[0]) for r in cur.fetchall()]


def _reason(text: str) -> str:
    """The line of a Spark / py4j error that says what went wrong (not "An error occurred
    while calling o95.jdbc")."""
    lines = [line.strip(" :") for line in text.splitlines() if line.strip(" :")]
    for line in lines:
        if "Exception" in line or "ERROR" in line or line.startswith("["):
            return line[:500]
    return lines[0][:500] if lines else ""
