"""A two-phase-commit sink into a SQLite table: the worked example of a user-defined sink
(docs/extending.md).

```yaml
sinks:
  - name: out
    type: sluice.examples:SqliteSink
    options: {path: data/out.db, table: clicks_per_minute}
    mode: upsert                       # or append (the default)
```

The protocol, all inside the one database file so that a single transaction spans it:

1. *prepare*, one transaction: create the target table if missing (columns typed from the
   output; upsert: primary key on the row identity ``config.keys``), then copy the epoch's rows
   into a staging table that this attempt alone owns,
   ``_sluice_stage_<hash(pipeline, sink)>_e<epoch>_<hash(attempt)>``. Readers of the target
   never see it; a zombie attempt writes to its own table, never to the winner's.
2. *commit*, one transaction: insert ``(pipeline, sink, epoch)`` into the fence table
   ``_sluice_commits``; only if that row is new, move the staged rows into the target
   (append: ``INSERT … SELECT``; upsert: delete the deleted keys, then
   ``INSERT … ON CONFLICT (keys) DO UPDATE``); drop the staging table; ``COMMIT``. The fence
   row and the rows appear together or not at all. SQLite admits one writer at a time
   (``BEGIN IMMEDIATE``), so of two racing commits the second finds the fence row and only
   drops what is left; a late retry of an old epoch finds its fence row too and cannot bring
   back an old value.
3. *abort* / *abort_others* drop staging tables (recovery finds them by their name prefix).

Rows are collected on the driver (fine for the example's sizes). Timestamps are stored as
ISO-8601 text in UTC (``2026-01-01T00:01:00.000000Z``), booleans as 0/1, decimals as text,
nested values as JSON text. Nothing here reads the wall clock.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql import types as T

from sluice.contracts.records import Prepared
from sluice.contracts.sinks import Sink
from sluice.examples._sqlite import Options, quote, read_only, transaction
from sluice.examples.exceptions import SqliteSinkError, StagingTableMissing
from sluice.spec.components.plugins import PluginSinkConfig

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "FENCE_TABLE",
    "SqliteSink",
    "read_table",
    "staging_name",
    "staging_prefix",
    "staging_tables",
]

FENCE_TABLE = "_sluice_commits"
STAGING_PREFIX = "_sluice_stage_"
CHANGELOG_COLUMNS = ("_op", "_epoch")
_ISO_UTC = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"  # XXX: 'Z' in UTC


@dataclass(frozen=True)
class SqliteStaged:
    """The sink's handle: the target table and the epoch's staging table (None: no rows)."""

    table: str | None = None  # None in the bare Prepared recovery aborts with
    staging_table: str | None = None

    def to_dict(self) -> dict[str, str | int | None]:
        return {"table": self.table, "staging_table": self.staging_table}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SqliteStaged:
        return cls(data.get("table"), data.get("staging_table"))


class SqliteSink(Sink[SqliteStaged]):
    """Writes ``options.table`` in the SQLite file ``options.path``. Built by the engine as
    ``SqliteSink(config, options, pipeline_name)``."""

    handle_type = SqliteStaged

    def __init__(self, config: PluginSinkConfig, options: dict[str, Any], pipeline: str) -> None:
        opts = Options(f"pipeline {pipeline}, sink {config.name}", options, {"path", "table"})
        if config.mode == "upsert" and not config.keys:
            raise SqliteSinkError(
                f"pipeline {pipeline}, sink {config.name}: upsert needs keys",
                pipeline=pipeline,
                sink=config.name,
            )
        self.name = config.name
        self.config = config
        self.pipeline = pipeline
        self.path = opts.text("path")
        self.table = opts.identifier("table")

    def __repr__(self) -> str:
        return f"SqliteSink({self.pipeline}/{self.name} -> {self.uri})"

    @property
    def uri(self) -> str:
        return f"sqlite://{Path(self.path).resolve()}#{self.table}"

    def _where(self, epoch: int, attempt: str) -> str:
        return f"pipeline {self.pipeline}, sink {self.name}, epoch {epoch}, attempt {attempt}"

    def _context(self, epoch: int, attempt: str) -> dict[str, Any]:
        """What :meth:`_where` names, as a :class:`~sluice.sinks.exceptions.SinkError`'s data."""
        return {"pipeline": self.pipeline, "sink": self.name, "epoch": epoch, "attempt": attempt}

    # -- prepare ------------------------------------------------------------------------------

    def prepare(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """Create the target if missing and stage the rows (nothing for an empty epoch)."""
        if rows is None:  # not counted by the engine: count first
            rows = df.count()
        frame = _storable(df.drop(*CHANGELOG_COLUMNS) if self.config.mode == "append" else df)
        columns = [(f.name, _sqlite_type(f.dataType)) for f in frame.schema.fields]
        data = [tuple(row) for row in frame.collect()]
        self._check_keys([c for c, _ in columns], data, epoch, attempt)
        staging = staging_name(self.pipeline, self.name, epoch, attempt) if data else None
        with transaction(self.path) as conn:
            self._ensure_target(conn, columns)
            if staging is not None:
                _stage(conn, staging, columns, data)
        staged = SqliteStaged(self.table, staging)
        return Prepared.of(self.name, self.uri, epoch, attempt, len(data), staged)

    def _check_keys(
        self, columns: list[str], data: list[tuple[Any, ...]], epoch: int, attempt: str
    ) -> None:
        """Refuse, before the checkpoint, upsert rows that commit could never publish: a key
        column missing or null, or a key upserted twice in one epoch."""
        if self.config.mode != "upsert":
            return
        missing = [k for k in self.config.keys if k not in columns]
        if missing:
            raise SqliteSinkError(
                f"{self._where(epoch, attempt)}: key columns {missing} are not in the output",
                **self._context(epoch, attempt),
            )
        at = [columns.index(k) for k in self.config.keys]
        op = columns.index("_op")
        seen: set[tuple[Any, ...]] = set()
        for row in data:
            key = tuple(row[i] for i in at)
            if None in key or (row[op] == "upsert" and key in seen):
                problem = "has a null" if None in key else "is upserted twice"
                raise SqliteSinkError(
                    f"{self._where(epoch, attempt)}: key {key} {problem}",
                    **self._context(epoch, attempt),
                )
            if row[op] == "upsert":
                seen.add(key)

    def _ensure_target(self, conn: sqlite3.Connection, columns: list[tuple[str, str]]) -> None:
        _ensure_fence(conn)
        data = [(c, t) for c, t in columns if c not in CHANGELOG_COLUMNS]
        defs = [f"{quote(c)} {t}" for c, t in data]
        if self.config.mode == "upsert":
            defs.append(f"PRIMARY KEY ({', '.join(map(quote, self.config.keys))})")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {quote(self.table)} ({', '.join(defs)})")
        existing = _columns(conn, self.table)
        absent = [c for c, _ in data if c not in existing]
        if absent:
            raise SqliteSinkError(
                f"pipeline {self.pipeline}, sink {self.name}: table {self.uri} has no columns "
                f"{absent}; add them or write to a new table",
                pipeline=self.pipeline,
                sink=self.name,
            )

    # -- commit -------------------------------------------------------------------------------

    def commit(self, prepared: Prepared) -> None:
        """Fence row, then (if it is new) the staged rows, then drop staging: one transaction.
        Idempotent; racing commits serialise on SQLite's write lock."""
        staging = self.handle(prepared).staging_table
        with transaction(self.path) as conn:
            _ensure_fence(conn)
            if self._insert_fence(conn, prepared):
                self._publish(conn, prepared, staging)
            if staging:
                conn.execute(f"DROP TABLE IF EXISTS {quote(staging)}")

    def _insert_fence(self, conn: sqlite3.Connection, prepared: Prepared) -> bool:
        cursor = conn.execute(
            f"INSERT OR IGNORE INTO {FENCE_TABLE} (pipeline, sink, epoch, attempt, row_count) "
            "VALUES (?, ?, ?, ?, ?)",
            (self.pipeline, self.name, prepared.epoch, prepared.attempt, prepared.rows),
        )
        return cursor.rowcount == 1

    def _publish(self, conn: sqlite3.Connection, prepared: Prepared, staging: str | None) -> None:
        """Move the staged rows into the target, inside the fence's transaction."""
        if prepared.rows == 0:
            return
        if not staging or not _columns(conn, staging):
            where = self._where(prepared.epoch, prepared.attempt)
            raise StagingTableMissing(where, staging or "(none)")
        columns = [c for c in _columns(conn, staging) if c not in CHANGELOG_COLUMNS]
        cols = ", ".join(map(quote, columns))
        target, source = quote(self.table), quote(staging)
        if self.config.mode == "append":
            conn.execute(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {source}")
            return
        keys = ", ".join(map(quote, self.config.keys))
        conn.execute(
            f"DELETE FROM {target} WHERE ({keys}) IN "
            f"(SELECT {keys} FROM {source} WHERE _op = 'delete')"
        )
        values = [quote(c) for c in columns if c not in self.config.keys]
        action = (
            "DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in values)
            if values
            else "DO NOTHING"
        )
        conn.execute(
            f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {source} "
            f"WHERE _op = 'upsert' ON CONFLICT ({keys}) {action}"
        )

    # -- abort and recovery -------------------------------------------------------------------

    def abort(self, prepared: Prepared) -> None:
        staging = self.handle(prepared).staging_table
        if staging and Path(self.path).exists():
            with transaction(self.path) as conn:
                conn.execute(f"DROP TABLE IF EXISTS {quote(staging)}")

    def abort_others(self, epoch: int, keep: str | None) -> int:
        """Drop the staging tables of every attempt of ``epoch`` but ``keep``."""
        if not Path(self.path).exists():
            return 0
        mine = staging_name(self.pipeline, self.name, epoch, keep) if keep is not None else None
        with transaction(self.path) as conn:
            names = _tables(conn, staging_prefix(self.pipeline, self.name, epoch))
            doomed = [n for n in names if n != mine]
            for name in doomed:
                conn.execute(f"DROP TABLE {quote(name)}")
        return len(doomed)


# -- names, types, catalog ----------------------------------------------------------------------


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()


def staging_prefix(pipeline: str, sink: str, epoch: int) -> str:
    """The start of the name of every staging table of (pipeline, sink, epoch)."""
    return f"{STAGING_PREFIX}{_digest(pipeline, sink)[:12]}_e{epoch}_"


def staging_name(pipeline: str, sink: str, epoch: int, attempt: str) -> str:
    return staging_prefix(pipeline, sink, epoch) + _digest(pipeline, sink, epoch, attempt)[:12]


def _storable(df: DataFrame) -> DataFrame:
    """Columns as values sqlite3 binds exactly: timestamps as ISO text in UTC, decimals and
    dates as text, nested values as JSON."""
    return df.select(*[_storable_column(f) for f in df.schema.fields])


def _storable_column(field: T.StructField) -> Column:
    column, kind = F.col(f"`{field.name}`"), field.dataType
    if isinstance(kind, T.TimestampType):
        column = F.date_format(column, _ISO_UTC)
    elif isinstance(kind, T.TimestampNTZType):
        column = F.date_format(column, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS")
    elif isinstance(kind, T.DecimalType | T.DateType):
        column = column.cast("string")
    elif isinstance(kind, T.ArrayType | T.MapType | T.StructType):
        column = F.to_json(column)
    return column.alias(field.name)


def _sqlite_type(kind: T.DataType) -> str:
    if isinstance(kind, T.IntegralType | T.BooleanType):
        return "INTEGER"
    if isinstance(kind, T.FractionalType) and not isinstance(kind, T.DecimalType):
        return "REAL"
    return "BLOB" if isinstance(kind, T.BinaryType) else "TEXT"


def _stage(
    conn: sqlite3.Connection, staging: str, columns: list[tuple[str, str]], data: list[Any]
) -> None:
    """Create the attempt's staging table (it must not exist yet) and fill it."""
    defs = ", ".join(f"{quote(c)} {t}" for c, t in columns)
    conn.execute(f"CREATE TABLE {quote(staging)} ({defs})")
    marks = ", ".join("?" for _ in columns)
    conn.executemany(f"INSERT INTO {quote(staging)} VALUES ({marks})", data)


def _ensure_fence(conn: sqlite3.Connection) -> None:
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {FENCE_TABLE} (pipeline TEXT NOT NULL, sink TEXT NOT NULL, "
        "epoch INTEGER NOT NULL, attempt TEXT NOT NULL, row_count INTEGER NOT NULL, "
        "PRIMARY KEY (pipeline, sink, epoch))"
    )


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """The columns of ``table`` in order (empty when it does not exist)."""
    return [row[1] for row in conn.execute(f"PRAGMA table_info({quote(table)})")]


def _tables(conn: sqlite3.Connection, prefix: str) -> list[str]:
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, ?) = ? "
        "ORDER BY name",
        (len(prefix), prefix),
    )
    return [row[0] for row in rows]


# -- readers (tests, operators) -----------------------------------------------------------------


def read_table(path: str, table: str) -> list[dict[str, Any]]:
    """Every row of ``table`` as dicts, in no particular order; empty when the file or the
    table does not exist (yet: the sink creates it at the first prepare)."""
    if not Path(path).exists():
        return []
    with read_only(path) as conn:
        if not _columns(conn, table):
            return []
        cursor = conn.execute(f"SELECT * FROM {quote(table)}")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def staging_tables(path: str) -> list[str]:
    """Every staging table left in the file (of any pipeline or sink): what no commit or abort
    removed."""
    if not Path(path).exists():
        return []
    with read_only(path) as conn:
        return _tables(conn, STAGING_PREFIX)
