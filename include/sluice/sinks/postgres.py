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

Retraction (a rewind, docs/rewind.md). Append targets have a ``_sluice_epoch`` column (the
epoch that wrote the row), so retracting epochs is one ``DELETE``. Upsert targets have an undo
table ``sluice.undo_<hash>``: each commit first records, for every key it touches, the row as
it was before (or that the key was absent). Retracting the epochs after ``k`` puts back, per
key, the image recorded by the earliest of them, and deletes their undo rows. Inside a
commit this runs in the fence's transaction, so the rewound output disappears exactly when the
replacement appears. Retention forgets undo rows no retained checkpoint can need.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

import psycopg2
from psycopg2 import sql

from sluice.contracts.records import Prepared
from sluice.contracts.sinks import Sink
from sluice.sinks.exceptions import PostgresSinkError, StagingTableMissing
from sluice.spec.components.postgres_sink import PostgresSinkConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType

__all__ = [
    "CHANGELOG_COLUMNS",
    "FENCE_TABLE",
    "STAGING_SCHEMA",
    "PostgresSink",
    "PostgresSinkError",
    "PostgresUrl",
    "StagingTableMissing",
    "read_table",
    "staging_tables",
]

FENCE_SCHEMA = "sluice"
FENCE_TABLE = f"{FENCE_SCHEMA}.commits"
STAGING_SCHEMA = "sluice_staging"
CHANGELOG_COLUMNS = ("_op", "_epoch")
EPOCH_COLUMN = "_sluice_epoch"  # append targets: the epoch that wrote the row
_EXISTED = "_sluice_existed"  # undo tables: whether the key had a row before the epoch
_FENCE = sql.Identifier(FENCE_SCHEMA, "commits")
_DDL_LOCK = 0x5C_0CE_DD1  # pg_advisory_xact_lock key: concurrent CREATE … IF NOT EXISTS races
_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg2")
# libpq URI parameters Spark's JDBC driver (pgjdbc) also understands, under its own names
_JDBC_PARAMS = {
    "sslmode": "sslmode",
    "sslrootcert": "sslrootcert",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "application_name": "ApplicationName",
    "connect_timeout": "connectTimeout",
    "options": "options",
}


# -- the connection URI -----------------------------------------------------------------------


@dataclass(frozen=True)
class PostgresUrl:
    """A parsed ``postgresql://user:password@host:port/dbname?params`` (libpq URI)."""

    host: str
    port: int
    dbname: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    params: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may hold secrets

    @classmethod
    def parse(cls, url: str) -> PostgresUrl:
        parts = urlsplit(url)
        if parts.scheme not in _SCHEMES:
            raise PostgresSinkError(
                f"not a postgresql:// URI (scheme {parts.scheme!r}); "
                "expected postgresql://user:password@host:port/dbname"
            )
        try:
            port = parts.port or 5432
        except ValueError:
            raise PostgresSinkError(
                "the postgresql:// URI has an invalid port (is the password percent-encoded?)"
            ) from None
        dbname = unquote(parts.path.lstrip("/"))
        if not dbname or "/" in dbname:
            raise PostgresSinkError("the postgresql:// URI names no database (…/dbname)")
        params = dict(parse_qsl(parts.query))
        # libpq also takes ?user=…&password=…; the netloc's win, as in libpq
        user, password = params.pop("user", None), params.pop("password", None)
        return cls(
            host=parts.hostname or "localhost",
            port=port,
            dbname=dbname,
            user=unquote(parts.username) if parts.username else user,
            password=unquote(parts.password) if parts.password is not None else password,
            params=tuple(params.items()),
        )

    def redacted(self, table: str | None = None) -> str:
        """``postgresql://host:port/db[/schema.table]``: no user, no password."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        suffix = f"/{table}" if table else ""
        return f"postgresql://{host}:{self.port}/{self.dbname}{suffix}"

    def connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(self.params)
        kwargs.update(host=self.host, port=self.port, dbname=self.dbname)
        if self.user:
            kwargs["user"] = self.user
        if self.password is not None:
            kwargs["password"] = self.password
        return kwargs

    def jdbc(self) -> tuple[str, dict[str, str]]:
        """Spark's JDBC URL (no secrets) and connection properties (user, password, driver)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        props = {_JDBC_PARAMS[k]: v for k, v in self.params if k in _JDBC_PARAMS}
        props.update(driver="org.postgresql.Driver", reWriteBatchedInserts="true")
        if self.user:
            props["user"] = self.user
        if self.password is not None:
            props["password"] = self.password
        return f"jdbc:postgresql://{host}:{self.port}/{self.dbname}", props

    def scrub(self, text: str) -> str:
        """``text`` with the password masked (for driver messages quoted in our errors)."""
        return text.replace(self.password, "***") if self.password else text


@contextmanager
def _connect(url: PostgresUrl) -> Iterator[Any]:
    """A psycopg2 connection in UTC, closed on exit (transactions are the caller's)."""
    try:
        conn = psycopg2.connect(**url.connect_kwargs())
    except psycopg2.Error as exc:
        # from None: the driver's own exception could quote connection settings verbatim
        raise PostgresSinkError(
            f"cannot connect to {url.redacted()}: {url.scrub(str(exc)).strip()}"
        ) from None
    with closing(conn):
        with conn, conn.cursor() as cur:
            cur.execute("SET TIME ZONE 'UTC'")
        yield conn


# -- names ------------------------------------------------------------------------------------


def split_table(table: str) -> tuple[str, str]:
    """``schema.table`` or ``table`` (schema ``public``) as (schema, table)."""
    schema, _, name = table.rpartition(".")
    return schema or "public", name


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()


def staging_prefix(pipeline: str, sink: str | None = None, epoch: int | None = None) -> str:
    """The start of every staging table name of ``pipeline`` (and ``sink``, and ``epoch``)."""
    prefix = f"s{_digest(pipeline)[:12]}_"
    if sink is not None:
        prefix += f"{_digest(pipeline, sink)[:8]}_"
        if epoch is not None:
            prefix += f"e{epoch}_"
    return prefix


def undo_name(pipeline: str, sink: str) -> str:
    """The undo table of an upsert sink, in the fence's schema."""
    return f"undo_{_digest(pipeline, sink)[:16]}"


def staging_name(pipeline: str, sink: str, epoch: int, attempt: str) -> str:
    """At most 56 characters of ``[a-z0-9_]`` (PostgreSQL allows 63)."""
    return staging_prefix(pipeline, sink, epoch) + _digest(pipeline, sink, epoch, attempt)[:12]


# -- types ------------------------------------------------------------------------------------


def pg_type(column: str, dtype: DataType) -> str:
    """The PostgreSQL column type of a Spark type (the target table's, not staging's)."""
    from pyspark.sql import types as T

    simple: list[tuple[type, str]] = [
        (T.StringType, "text"),
        (T.IntegerType, "integer"),
        (T.LongType, "bigint"),
        (T.ShortType, "smallint"),
        (T.ByteType, "smallint"),
        (T.DoubleType, "double precision"),
        (T.FloatType, "real"),
        (T.BooleanType, "boolean"),
        (T.TimestampNTZType, "timestamp"),
        (T.TimestampType, "timestamptz"),
        (T.DateType, "date"),
        (T.BinaryType, "bytea"),
    ]
    for spark_type, pg in simple:
        if isinstance(dtype, spark_type):
            return pg
    if isinstance(dtype, T.DecimalType):
        return f"numeric({dtype.precision},{dtype.scale})"
    raise PostgresSinkError(
        f"column {column!r} has Spark type {dtype.simpleString()}, which the postgres sink "
        "cannot store; cast it (e.g. to string) in the pipeline"
    )


# -- the sink ---------------------------------------------------------------------------------


class PostgresSink(Sink):
    """Writes ``spec.table`` through ``url``; see the module docstring for the protocol."""

    supports_retraction = True

    def __init__(self, spec: PostgresSinkConfig, url: str, pipeline: str) -> None:
        if not spec.table:
            raise PostgresSinkError(
                f"pipeline {pipeline}, sink {spec.name}: no table",
                pipeline=pipeline,
                sink=spec.name,
            )
        if spec.mode == "upsert" and not spec.keys:
            raise PostgresSinkError(
                f"pipeline {pipeline}, sink {spec.name}: upsert needs keys",
                pipeline=pipeline,
                sink=spec.name,
            )
        self.name = spec.name
        self.spec = spec
        self.pipeline = pipeline
        self.schema, self.table = split_table(spec.table)
        self._url = PostgresUrl.parse(url)

    def __repr__(self) -> str:
        return f"PostgresSink({self.pipeline}/{self.name} -> {self.uri})"

    @property
    def uri(self) -> str:
        return self._url.redacted(f"{self.schema}.{self.table}")

    @property
    def _target(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table)

    @property
    def _undo(self) -> sql.Identifier:
        return sql.Identifier(FENCE_SCHEMA, undo_name(self.pipeline, self.name))

    def _where(self, epoch: int, attempt: str) -> str:
        return f"pipeline {self.pipeline}, sink {self.name}, epoch {epoch}, attempt {attempt}"

    def _context(self, epoch: int, attempt: str) -> dict[str, Any]:
        """What :meth:`_where` names, as a :class:`SinkError`'s attributes."""
        return {"pipeline": self.pipeline, "sink": self.name, "epoch": epoch, "attempt": attempt}

    # -- prepare ------------------------------------------------------------------------------

    def prepare(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """Create the target if missing, then stage the rows (nothing for an empty epoch)."""
        if rows is None:  # not counted by the engine: count first
            rows = df.count()
        if self.spec.mode == "append":
            df = df.drop(*CHANGELOG_COLUMNS)
        self._ensure_tables(df)
        details: dict[str, Any] = {"table": f"{self.schema}.{self.table}"}
        if rows > 0:
            name = staging_name(self.pipeline, self.name, epoch, attempt)
            self._spark_write(df, f"{STAGING_SCHEMA}.{name}", "errorifexists", epoch, attempt)
            self._seal(name, epoch, attempt)
            details["staging_table"] = f"{STAGING_SCHEMA}.{name}"
        return Prepared(
            self.name, self.uri, epoch, attempt, rows, details=tuple(sorted(details.items()))
        )

    def _ensure_tables(self, df: DataFrame) -> None:
        """Schemas, the fence table and the target (typed from ``df``), each if missing."""
        data = [f for f in df.schema.fields if f.name not in CHANGELOG_COLUMNS]
        columns = [(f.name, pg_type(f.name, f.dataType)) for f in data]
        missing_keys = [k for k in self.spec.keys if k not in {c for c, _ in columns}]
        if self.spec.mode == "upsert" and missing_keys:
            raise PostgresSinkError(
                f"pipeline {self.pipeline}, sink {self.name}: key columns {missing_keys} are not "
                f"in the output columns {[c for c, _ in columns]}",
                pipeline=self.pipeline,
                sink=self.name,
            )
        with _connect(self._url) as conn, conn, conn.cursor() as cur:
            _ensure_fence(cur)
            if not _exists(cur, self.schema, self.table):
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
                _create_schema(cur, self.schema)
                cur.execute(self._create_target(columns))
            self._ensure_bookkeeping(cur)
            existing = set(_columns(cur, self.schema, self.table))
        absent = [c for c, _ in columns if c not in existing]
        if absent:
            raise PostgresSinkError(
                f"pipeline {self.pipeline}, sink {self.name}: table {self.uri} has no "
                f"columns {absent}; add them or write to a new table",
                pipeline=self.pipeline,
                sink=self.name,
            )

    def _ensure_bookkeeping(self, cur: Any) -> None:
        """What retraction needs: an append target's epoch column, an upsert's undo table."""
        if self.spec.mode == "append":
            if EPOCH_COLUMN not in _columns(cur, self.schema, self.table):
                cur.execute(
                    sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} bigint").format(
                        self._target, sql.Identifier(EPOCH_COLUMN)
                    )
                )
            return
        if _exists(cur, FENCE_SCHEMA, undo_name(self.pipeline, self.name)):
            return
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
        cur.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {u} (LIKE {t}); "
                "ALTER TABLE {u} ADD COLUMN IF NOT EXISTS {e} bigint NOT NULL DEFAULT 0, "
                "ADD COLUMN IF NOT EXISTS {x} boolean NOT NULL DEFAULT true; "
                "CREATE INDEX IF NOT EXISTS {i} ON {u} ({e})"
            ).format(
                u=self._undo, t=self._target, e=sql.Identifier(EPOCH_COLUMN),
                x=sql.Identifier(_EXISTED),
                i=sql.Identifier(undo_name(self.pipeline, self.name) + "_epoch"),
            )
        )  # fmt: skip
        comment = f"sluice undo log (rewinds): pipeline {self.pipeline}, sink {self.name}"
        cur.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(self._undo, sql.Literal(comment)))

    def _create_target(self, columns: list[tuple[str, str]]) -> sql.Composed:
        defs = [sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in columns]
        if self.spec.mode == "append":
            defs.append(sql.SQL("{} bigint").format(sql.Identifier(EPOCH_COLUMN)))
        if self.spec.mode == "upsert":
            keys = sql.SQL(", ").join(map(sql.Identifier, self.spec.keys))
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
        with _connect(self._url) as conn:
            with conn, conn.cursor() as cur:
                cur.execute(
                    sql.SQL("COMMENT ON TABLE {} IS {}").format(table, sql.Literal(comment))
                )
                problem = self._unpublishable(cur, table)
            if problem:
                _drop(conn, f"{STAGING_SCHEMA}.{name}")
                raise PostgresSinkError(
                    f"{self._where(epoch, attempt)}: {problem}", **self._context(epoch, attempt)
                )

    def _unpublishable(self, cur: Any, table: sql.Identifier) -> str | None:
        """Why the staged rows cannot go into the upsert's primary key, or None."""
        if self.spec.mode != "upsert":
            return None
        keys = sql.SQL(", ").join(map(sql.Identifier, self.spec.keys))
        null = sql.SQL(" OR ").join(
            sql.SQL("{} IS NULL").format(sql.Identifier(k)) for k in self.spec.keys
        )
        cur.execute(sql.SQL("SELECT {} FROM {} WHERE {} LIMIT 1").format(keys, table, null))
        row = cur.fetchone()
        if row is not None:
            return (
                f"key {dict(zip(self.spec.keys, row, strict=True))} has a null in the primary key"
            )
        cur.execute(
            sql.SQL(
                "SELECT {k} FROM {t} WHERE _op = 'upsert' GROUP BY {k} HAVING count(*) > 1 LIMIT 1"
            ).format(k=keys, t=table)
        )
        row = cur.fetchone()
        if row is not None:
            return f"key {dict(zip(self.spec.keys, row, strict=True))} is upserted twice"
        return None

    # -- commit -------------------------------------------------------------------------------

    def commit(self, prepared: Prepared) -> None:
        """1. fence row, 2. move the staged rows (if the fence row is new), 3. COMMIT,
        4. drop the staging table. Idempotent; concurrent commits serialise on the fence."""
        staging = prepared.detail("staging_table")
        with _connect(self._url) as conn:
            with conn, conn.cursor() as cur:
                _ensure_fence(cur)
            with conn, conn.cursor() as cur:
                if self._insert_fence(cur, prepared):
                    if prepared.retract_after is not None:
                        self._retract(cur, prepared.retract_after, prepared.epoch)
                    self._publish(cur, prepared, staging)
            if staging:
                _drop(conn, staging)

    def _insert_fence(self, cur: Any, prepared: Prepared) -> bool:
        cur.execute(
            sql.SQL(
                "INSERT INTO {} (pipeline, sink, epoch, attempt, {}, committed_at) "
                "VALUES (%s, %s, %s, %s, %s, now()) "
                "ON CONFLICT (pipeline, sink, epoch) DO NOTHING RETURNING 1"
            ).format(_FENCE, sql.Identifier("rows")),
            (self.pipeline, self.name, prepared.epoch, prepared.attempt, prepared.rows),
        )
        return cur.fetchone() is not None

    def _publish(self, cur: Any, prepared: Prepared, staging: str | None) -> None:
        """Move the staged rows into the target, inside the fence's transaction."""
        if prepared.rows == 0:
            return
        if not staging or not _exists(cur, *split_table(staging)):
            raise StagingTableMissing(
                self.pipeline, self.name, prepared.epoch, prepared.attempt, staging or "(none)"
            )
        source = sql.Identifier(*split_table(staging))
        columns = [c for c in _columns(cur, *split_table(staging)) if c not in CHANGELOG_COLUMNS]
        cols = sql.SQL(", ").join(map(sql.Identifier, columns))
        if self.spec.mode == "append":
            cur.execute(
                sql.SQL("INSERT INTO {} ({}, {}) SELECT {}, %s FROM {}").format(
                    self._target, cols, sql.Identifier(EPOCH_COLUMN), cols, source
                ),
                (prepared.epoch,),
            )
            return
        keys = self.spec.keys
        match = sql.SQL(" AND ").join(
            sql.SQL("t.{k} = s.{k}").format(k=sql.Identifier(k)) for k in keys
        )
        self._record_undo(cur, prepared.epoch, source, match)
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

    # -- retraction (rewinds) -------------------------------------------------------------------

    def _record_undo(
        self, cur: Any, epoch: int, source: sql.Identifier, match: sql.Composable
    ) -> None:
        """Before an upsert epoch changes the target: the rows it touches as they are, and the
        keys it touches that have no row."""
        self._ensure_bookkeeping(cur)
        target_cols = _columns(cur, self.schema, self.table)
        cols = sql.SQL(", ").join(map(sql.Identifier, target_cols))
        t_cols = _prefixed("t", target_cols)
        keys = sql.SQL(", ").join(map(sql.Identifier, self.spec.keys))
        s_keys = _prefixed("s", self.spec.keys)
        marks = sql.SQL("{}, {}").format(sql.Identifier(EPOCH_COLUMN), sql.Identifier(_EXISTED))
        cur.execute(
            sql.SQL(
                "INSERT INTO {u} ({cols}, {marks}) SELECT {t_cols}, %s, true FROM {t} t "
                "WHERE EXISTS (SELECT 1 FROM {s} s WHERE {m})"
            ).format(u=self._undo, cols=cols, marks=marks, t_cols=t_cols, t=self._target,
                     s=source, m=match),
            (epoch,),
        )  # fmt: skip
        cur.execute(
            sql.SQL(
                "INSERT INTO {u} ({keys}, {marks}) SELECT DISTINCT {s_keys}, %s, false FROM {s} s "
                "WHERE NOT EXISTS (SELECT 1 FROM {t} t WHERE {m})"
            ).format(u=self._undo, keys=keys, marks=marks, s_keys=s_keys, s=source,
                     t=self._target, m=match),
            (epoch,),
        )  # fmt: skip

    def _retract(self, cur: Any, after: int, before: int) -> None:
        """Inside the caller's transaction: the target as it was when ``after`` was the last
        epoch published, as far as the epochs between ``after`` and ``before`` changed it."""
        epoch = sql.Identifier(EPOCH_COLUMN)
        if not _exists(cur, self.schema, self.table):
            return
        self._ensure_bookkeeping(cur)
        if self.spec.mode == "append":
            cur.execute(
                sql.SQL("DELETE FROM {} WHERE {e} > %s AND {e} < %s").format(self._target, e=epoch),
                (after, before),
            )
            return
        keys = sql.SQL(", ").join(map(sql.Identifier, self.spec.keys))
        match = sql.SQL(" AND ").join(
            sql.SQL("t.{k} = u.{k}").format(k=sql.Identifier(k)) for k in self.spec.keys
        )
        target_cols = _columns(cur, self.schema, self.table)
        cols = sql.SQL(", ").join(map(sql.Identifier, target_cols))
        first = sql.SQL(
            "(SELECT DISTINCT ON ({keys}) * FROM {u} WHERE {e} > %s AND {e} < %s "
            "ORDER BY {keys}, {e})"
        ).format(keys=keys, u=self._undo, e=epoch)
        cur.execute(
            sql.SQL("DELETE FROM {t} t USING {first} u WHERE {m}").format(
                t=self._target, first=first, m=match
            ),
            (after, before),
        )
        cur.execute(
            sql.SQL("INSERT INTO {t} ({cols}) SELECT {cols} FROM {first} u WHERE u.{x}").format(
                t=self._target, cols=cols, first=first, x=sql.Identifier(_EXISTED)
            ),
            (after, before),
        )
        cur.execute(
            sql.SQL("DELETE FROM {} WHERE {e} > %s AND {e} < %s").format(self._undo, e=epoch),
            (after, before),
        )

    def forget_through(self, epoch: int) -> None:
        """No rewind will go below ``epoch`` any more: drop the undo rows it cannot need."""
        if self.spec.mode != "upsert":
            return
        with _connect(self._url) as conn, conn, conn.cursor() as cur:
            if _exists(cur, FENCE_SCHEMA, undo_name(self.pipeline, self.name)):
                cur.execute(
                    sql.SQL("DELETE FROM {} WHERE {} <= %s").format(
                        self._undo, sql.Identifier(EPOCH_COLUMN)
                    ),
                    (epoch,),
                )

    # -- abort, recovery, direct writes ---------------------------------------------------------

    def abort(self, prepared: Prepared) -> None:
        staging = prepared.detail("staging_table")
        if staging:
            with _connect(self._url) as conn:
                _drop(conn, staging)

    def abort_others(self, epoch: int, keep: str | None) -> int:
        """Drop the staging tables of every attempt of ``epoch`` but ``keep``."""
        mine = staging_name(self.pipeline, self.name, epoch, keep) if keep is not None else None
        with _connect(self._url) as conn:
            with conn, conn.cursor() as cur:
                names = _staging_names(cur, staging_prefix(self.pipeline, self.name, epoch))
            doomed = [n for n in names if n != mine]
            for name in doomed:
                _drop(conn, f"{STAGING_SCHEMA}.{name}")
        return len(doomed)

    def write(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """qos 0/1: append straight into the target (no fence: a replay duplicates); upsert
        sinks stage and commit, which a replay cannot duplicate."""
        if rows is None:  # not counted by the engine: count first
            rows = df.count()
        if self.spec.mode == "upsert":
            return super().write(epoch, attempt, df, rows)
        from pyspark.sql import functions as F

        df = df.drop(*CHANGELOG_COLUMNS)
        self._ensure_tables(df)
        if rows > 0:
            tagged = df.withColumn(EPOCH_COLUMN, F.lit(epoch).cast("bigint"))
            self._spark_write(tagged, f"{self.schema}.{self.table}", "append", epoch, attempt)
        details = (("table", f"{self.schema}.{self.table}"),)
        return Prepared(self.name, self.uri, epoch, attempt, rows, details=details)

    def committed_epochs(self) -> list[int]:
        """The epochs whose fence row exists, ascending."""
        with _connect(self._url) as conn, conn, conn.cursor() as cur:
            if not _exists(cur, FENCE_SCHEMA, "commits"):
                return []
            cur.execute(
                sql.SQL("SELECT epoch FROM {} WHERE pipeline = %s AND sink = %s ORDER BY epoch")
                .format(_FENCE),
                (self.pipeline, self.name),
            )  # fmt: skip
            return [int(r[0]) for r in cur.fetchall()]


# -- catalog helpers ----------------------------------------------------------------------------


def _exists(cur: Any, schema: str, table: str) -> bool:
    cur.execute("SELECT to_regclass(%s)", (sql.Identifier(schema, table).as_string(cur),))
    return cur.fetchone()[0] is not None


def _columns(cur: Any, schema: str, table: str) -> list[str]:
    cur.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum",
        (sql.Identifier(schema, table).as_string(cur),),
    )
    return [r[0] for r in cur.fetchall()]


def _create_schema(cur: Any, schema: str) -> None:
    """``CREATE SCHEMA`` only when missing: ``IF NOT EXISTS`` alone still needs the right to
    create schemas, which a sink's user may lack for an existing one."""
    if not _has_schema(cur, schema):
        cur.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))


def _ensure_fence(cur: Any) -> None:
    """The fence table and the staging schema, if missing (serialised by an advisory lock)."""
    if _exists(cur, FENCE_SCHEMA, "commits") and _has_schema(cur, STAGING_SCHEMA):
        return
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
    _create_schema(cur, FENCE_SCHEMA)
    _create_schema(cur, STAGING_SCHEMA)
    cur.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (pipeline text NOT NULL, sink text NOT NULL, "
            "epoch bigint NOT NULL, attempt text NOT NULL, {} bigint NOT NULL, "
            "committed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (pipeline, sink, epoch))"
        ).format(_FENCE, sql.Identifier("rows"))
    )


def _prefixed(alias: str, columns: Sequence[str]) -> sql.Composed:
    """``alias.c1, alias.c2, ...``"""
    return sql.SQL(", ").join(
        sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(c)) for c in columns
    )


def _has_schema(cur: Any, schema: str) -> bool:
    cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
    return cur.fetchone() is not None


def _reason(text: str) -> str:
    """The line of a Spark / py4j error that says what went wrong (not "An error occurred
    while calling o95.jdbc")."""
    lines = [line.strip(" :") for line in text.splitlines() if line.strip(" :")]
    for line in lines:
        if "Exception" in line or "ERROR" in line or line.startswith("["):
            return line[:500]
    return lines[0][:500] if lines else ""


def _drop(conn: Any, table: str) -> None:
    with conn, conn.cursor() as cur:
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(*split_table(table))))


def _staging_names(cur: Any, prefix: str) -> list[str]:
    cur.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND left(c.relname::text, %s) = %s "
        "ORDER BY c.relname",
        (STAGING_SCHEMA, len(prefix), prefix),
    )
    return [r[0] for r in cur.fetchall()]


# -- readers (tests, the crash matrix, operators) -----------------------------------------------


def read_table(url: str, table: str, *, bookkeeping: bool = False) -> list[dict[str, Any]]:
    """Every row of ``[schema.]table`` as dicts, in no particular order; timestamps come back
    in UTC. Empty when the table does not exist (yet: the sink creates it at the first
    prepare). The ``_sluice_epoch`` column of append targets is left out unless
    ``bookkeeping``."""
    parsed = PostgresUrl.parse(url)
    schema, name = split_table(table)
    with _connect(parsed) as conn, conn, conn.cursor() as cur:
        if not _exists(cur, schema, name):
            return []
        cur.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, name)))
        columns = [d[0] for d in cur.description]
        rows = [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
    if not bookkeeping:
        for row in rows:
            row.pop(EPOCH_COLUMN, None)
    return rows


def staging_tables(
    url: str, pipeline: str, sink: str | None = None, epoch: int | None = None
) -> list[str]:
    """``sluice_staging.<name>`` of every staging table left for ``pipeline`` (narrowed to
    ``sink``, and to ``epoch`` of that sink, when given): what no commit or abort removed."""
    with _connect(PostgresUrl.parse(url)) as conn, conn, conn.cursor() as cur:
        names = _staging_names(cur, staging_prefix(pipeline, sink, epoch))
    return [f"{STAGING_SCHEMA}.{n}" for n in names]
