"""The postgres sink on a real server through Spark's real JDBC writer: staged rows are
invisible, the commit fence publishes them exactly once (also racing, also from another
process), recovery drops the losers' staging tables, and the password never leaves the URI.

The generic sink contract runs for this sink in tests/sinks/test_contract.py; this module
checks what is specific to PostgreSQL (DDL, the fence, catalog state, redaction)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg2
import pytest
from sluice.contracts.records import Prepared
from sluice.sinks.postgres import (
    FENCE_TABLE,
    STAGING_SCHEMA,
    PostgresSink,
    PostgresSinkError,
    PostgresUrl,
    StagingTableMissing,
    staging_name,
)
from sluice.spec import PostgresSinkConfig
from sluice.testing.sink_contract import KEYS, changelog

from tests.fixtures.postgres_tables import read_table, staging_tables

# Trust authentication ignores it, so it can travel the whole path and be looked for.
PASSWORD = "pg-S3cret/p@ss"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _uri(sqlalchemy_url: str, password: str = PASSWORD) -> str:
    """``postgresql+psycopg2://postgres@host:port/db`` as a libpq URI with a password."""
    user, rest = sqlalchemy_url.split("://", 1)[1].split("@", 1)
    return f"postgresql://{user}:{password.replace('/', '%2F').replace('@', '%40')}@{rest}"


@pytest.fixture(scope="module")
def pg_url(postgres_server: Any) -> str:
    """One database for the module; every test uses its own tables and pipeline name."""
    return _uri(postgres_server.create_database(f"pgsink_{uuid.uuid4().hex[:8]}"))


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex[:8]


def make_sink(url: str, table: str, mode: str = "append", pipeline: str = "p", **kw: Any) -> Any:
    keys = KEYS if mode == "upsert" else ()
    spec = PostgresSinkConfig(name=kw.pop("name", "out"), mode=mode, table=table,  # type: ignore[arg-type]
                    connection="warehouse", keys=kw.pop("keys", keys))  # fmt: skip
    return PostgresSink(spec, url, pipeline)


def query(url: str, statement: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    parsed = PostgresUrl.parse(url)
    with psycopg2.connect(**parsed.connect_kwargs()) as conn, conn.cursor() as cur:
        cur.execute(statement, args)
        rows = cur.fetchall() if cur.description else []
    conn.close()
    return rows


def fence(url: str, pipeline: str) -> list[tuple[Any, ...]]:
    return query(
        url,
        f"SELECT sink, epoch, attempt, rows FROM {FENCE_TABLE} WHERE pipeline = %s "
        "ORDER BY sink, epoch",
        (pipeline,),
    )


def view(rows: list[dict[str, Any]]) -> list[tuple[str, int, int | None]]:
    return sorted(
        (r["user"], int((r["window_start"] - T0).total_seconds() // 60), r["clicks"]) for r in rows
    )


Row = tuple[str, int, int | None]  # (user, minute, clicks), as sink_contract.changelog takes
ROWS: list[Row] = [("alice", 0, 3), ("bob", 0, 1), ("carol", 1, 7)]


# -- the connection URI -------------------------------------------------------------------------


def test_the_uri_is_parsed_for_psycopg2_and_jdbc_and_redacted() -> None:
    url = PostgresUrl.parse(
        "postgresql://ann:p%40ss%2Fw@db.example:6543/ware%20house?sslmode=require&application_name=x"
    )
    assert (url.host, url.port, url.dbname, url.user, url.password) == (
        "db.example", 6543, "ware house", "ann", "p@ss/w",
    )  # fmt: skip
    assert url.connect_kwargs()["sslmode"] == "require"
    jdbc, props = url.jdbc()
    assert jdbc == "jdbc:postgresql://db.example:6543/ware house"
    assert props["password"] == "p@ss/w" and props["user"] == "ann"
    assert props["driver"] == "org.postgresql.Driver"
    assert (props["sslmode"], props["ApplicationName"]) == ("require", "x")
    assert url.redacted("s.t") == "postgresql://db.example:6543/ware house/s.t"
    assert "p@ss" not in repr(url)
    assert PostgresUrl.parse("postgres://h/db").port == 5432
    in_query = PostgresUrl.parse("postgresql://h/db?user=u&password=hidden&sslmode=disable")
    assert (in_query.user, in_query.password) == ("u", "hidden")
    assert "hidden" not in repr(in_query) and "hidden" not in in_query.redacted()
    assert PostgresUrl.parse("postgresql://u@[::1]:5/db").redacted() == "postgresql://[::1]:5/db"
    with pytest.raises(PostgresSinkError, match="names no database"):
        PostgresUrl.parse("postgresql://u:secret@h:5432")
    with pytest.raises(PostgresSinkError, match="scheme 'mysql'"):
        PostgresUrl.parse("mysql://u:secret@h/db")


def test_a_connection_error_does_not_show_the_password(postgres_server: Any) -> None:
    bad = _uri(postgres_server.url("no_such_db_x"))
    with pytest.raises(PostgresSinkError) as err:
        read_table(bad, "t")
    assert "no_such_db_x" in str(err.value) and PASSWORD not in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__
    unencoded = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{postgres_server.port}/db"
    with pytest.raises(PostgresSinkError, match="percent-encoded") as err:
        read_table(unencoded, "t")
    assert PASSWORD not in str(err.value) and "S3cret" not in str(err.value)


# -- prepare: DDL, staging, invisibility ------------------------------------------------------


TYPED_DDL = (
    "user string, window_start timestamp, window_end timestamp, n int, big long, x double,"
    " f float, ok boolean, day date, price decimal(10,2), _op string, _epoch long"
)


def typed_rows(op: str = "upsert") -> list[tuple[Any, ...]]:
    return [
        ("ann", T0, T0 + timedelta(minutes=1), 1, 2**40, 0.5, 1.5, True, date(2026, 1, 2),
         Decimal("12.34"), op, 1),
        ("bob", T0 + timedelta(microseconds=123456), T0 + timedelta(minutes=1), None, None, None,
         None, None, None, None, op, 1),
    ]  # fmt: skip


def test_the_target_is_created_with_derived_types_and_a_primary_key(
    spark: Any, pg_url: str, tag: str
) -> None:
    table, pipeline = f"analytics_{tag}.typed", f"typed_{tag}"
    sink = make_sink(pg_url, table, "upsert", pipeline)
    prepared = sink.prepare(1, "a1", spark.createDataFrame(typed_rows(), TYPED_DDL), 2)

    columns = query(
        pg_url,
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = 'typed' ORDER BY ordinal_position",
        (f"analytics_{tag}",),
    )
    assert columns == [
        ("user", "text"), ("window_start", "timestamp with time zone"),
        ("window_end", "timestamp with time zone"), ("n", "integer"), ("big", "bigint"),
        ("x", "double precision"), ("f", "real"), ("ok", "boolean"), ("day", "date"),
        ("price", "numeric"),
    ]  # fmt: skip
    primary_key = query(
        pg_url,
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary "
        "ORDER BY array_position(i.indkey, a.attnum)",
        (f'"analytics_{tag}"."typed"',),
    )
    assert [c for (c,) in primary_key] == list(KEYS)
    assert read_table(pg_url, table) == []  # staged, invisible

    sink.commit(prepared)
    rows = sorted(read_table(pg_url, table), key=lambda r: r["user"])
    assert rows[0] == {
        "user": "ann", "window_start": T0, "window_end": T0 + timedelta(minutes=1), "n": 1,
        "big": 2**40, "x": 0.5, "f": 1.5, "ok": True, "day": date(2026, 1, 2),
        "price": Decimal("12.34"),
    }  # fmt: skip
    assert rows[1]["window_start"] == T0 + timedelta(microseconds=123456)  # same instant, UTC
    assert rows[1]["n"] is None and rows[1]["price"] is None


def test_an_unsupported_column_type_is_a_clear_error(spark: Any, pg_url: str, tag: str) -> None:
    df = spark.createDataFrame([("a", [1, 2])], "user string, tags array<int>")
    with pytest.raises(PostgresSinkError, match=r"column 'tags' has Spark type array<int>"):
        make_sink(pg_url, f"bad_{tag}").prepare(1, "a1", df, 1)


def test_prepare_stages_into_an_attempt_owned_table_named_within_63_chars(
    spark: Any, pg_url: str, tag: str
) -> None:
    pipeline, name = f"a_very_long_pipeline_name_{tag}" * 3, "a_long_sink_name" * 4
    sink = make_sink(pg_url, f"staged_{tag}", pipeline=pipeline, name=name)
    df, n = changelog(spark, 7, ROWS)
    prepared = sink.prepare(7, "attempt-1", df, n)

    staging = prepared.detail("staging_table")
    assert staging == f"{STAGING_SCHEMA}.{staging_name(pipeline, name, 7, 'attempt-1')}"
    assert len(staging.split(".")[1]) <= 63
    assert staging_tables(pg_url, pipeline) == [staging]
    assert staging_tables(pg_url, pipeline, name, 7) == [staging]
    assert staging_tables(pg_url, pipeline, name, 8) == []
    staged = query(pg_url, f"SELECT count(*) FROM {staging}")
    assert staged == [(n,)]
    assert prepared.uri == sink.uri == f"{PostgresUrl.parse(pg_url).redacted()}/public.staged_{tag}"
    assert read_table(pg_url, f"staged_{tag}") == []
    assert fence(pg_url, pipeline) == []
    comment = query(pg_url, "SELECT obj_description(%s::regclass)", (staging,))[0][0]
    assert "epoch 7, attempt attempt-1" in comment and PASSWORD not in comment


# -- commit: the fence ------------------------------------------------------------------------


def test_commit_publishes_once_and_records_the_fence(spark: Any, pg_url: str, tag: str) -> None:
    table, pipeline = f"fenced_{tag}", f"fenced_{tag}"
    df, n = changelog(spark, 1, ROWS)
    prepared = make_sink(pg_url, table, pipeline=pipeline).prepare(1, "a1", df, n)

    make_sink(pg_url, table, pipeline=pipeline).commit(prepared)
    assert view(read_table(pg_url, table)) == sorted(ROWS)
    assert fence(pg_url, pipeline) == [("out", 1, "a1", n)]
    assert staging_tables(pg_url, pipeline) == []

    # a retry in another process, from the JSON manifest: the fence says done, nothing staged
    again = Prepared.from_dict(json.loads(json.dumps(prepared.to_dict())))
    make_sink(pg_url, table, pipeline=pipeline).commit(again)
    assert view(read_table(pg_url, table)) == sorted(ROWS)
    assert make_sink(pg_url, table, pipeline=pipeline).committed_epochs() == [1]


def test_many_commits_racing_publish_once(spark: Any, pg_url: str, tag: str) -> None:
    table, pipeline = f"race_{tag}", f"race_{tag}"
    df, n = changelog(spark, 2, ROWS)
    prepared = make_sink(pg_url, table, pipeline=pipeline).prepare(2, "a1", df, n)
    errors = _race(4, lambda: make_sink(pg_url, table, pipeline=pipeline).commit(prepared))
    assert errors == []
    assert view(read_table(pg_url, table)) == sorted(ROWS)
    assert fence(pg_url, pipeline) == [("out", 2, "a1", n)]


def test_racing_first_commits_on_a_fresh_database_create_the_fence_once(
    postgres_server: Any, tag: str
) -> None:
    url = _uri(postgres_server.create_database(f"pgsink_fresh_{tag}"))
    empty = Prepared("out", "postgresql://redacted", 4, "a1", 0)
    errors = _race(4, lambda: make_sink(url, "t", pipeline="fresh").commit(empty))
    assert errors == []
    assert fence(url, "fresh") == [("out", 4, "a1", 0)]


def _race(threads: int, work: Callable[[], None]) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def run() -> None:
        try:
            start.wait()
            work()
        except BaseException as exc:  # collected and asserted by the caller
            errors.append(exc)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return errors


def test_an_empty_epoch_stages_nothing_and_still_records_the_fence(
    spark: Any, pg_url: str, tag: str
) -> None:
    table, pipeline = f"empty_{tag}", f"empty_{tag}"
    df, _ = changelog(spark, 3, [])
    sink = make_sink(pg_url, table, "upsert", pipeline)
    prepared = sink.prepare(3, "a1", df, 0)
    assert prepared.detail("staging_table") is None
    assert staging_tables(pg_url, pipeline) == []
    sink.commit(prepared)
    sink.commit(prepared)
    assert read_table(pg_url, table) == []  # the table exists, empty
    assert query(pg_url, "SELECT to_regclass(%s) IS NOT NULL", (table,)) == [(True,)]
    assert fence(pg_url, pipeline) == [("out", 3, "a1", 0)]


def test_missing_staging_without_a_fence_is_an_error_naming_the_attempt(
    spark: Any, pg_url: str, tag: str
) -> None:
    table, pipeline = f"lost_{tag}", f"lost_{tag}"
    df, n = changelog(spark, 5, ROWS)
    sink = make_sink(pg_url, table, pipeline=pipeline)
    prepared = sink.prepare(5, "a9", df, n)
    query(pg_url, f"DROP TABLE {prepared.detail('staging_table')}")  # an operator "cleaned up"

    with pytest.raises(StagingTableMissing) as err:
        sink.commit(prepared)
    message = str(err.value)
    for part in (f"pipeline {pipeline}", "sink out", "epoch 5", "attempt a9", "would be lost"):
        assert part in message
    assert PASSWORD not in message and PASSWORD not in json.dumps(prepared.to_dict())
    assert fence(pg_url, pipeline) == []  # rolled back with the failed move
    assert read_table(pg_url, table) == []


def test_a_late_commit_of_a_losing_attempt_publishes_nothing(
    spark: Any, pg_url: str, tag: str
) -> None:
    table, pipeline = f"zombie_{tag}", f"zombie_{tag}"
    sink = make_sink(pg_url, table, pipeline=pipeline)
    df, n = changelog(spark, 1, ROWS)
    winner = sink.prepare(1, "win", df, n)
    zombie = sink.prepare(1, "zombie", df, n)
    sink.commit(winner)
    sink.commit(zombie)  # the epoch is fenced: the zombie's rows stay out, its table goes
    assert view(read_table(pg_url, table)) == sorted(ROWS)
    assert fence(pg_url, pipeline) == [("out", 1, "win", n)]
    assert staging_tables(pg_url, pipeline) == []


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        ([("alice", 0, 1), (None, 0, 2)], "has a null in the primary key"),
        ([("alice", 0, 1), ("alice", 0, 2)], "is upserted twice"),
    ],
    ids=["null-key", "repeated-key"],
)
def test_upsert_rows_no_commit_could_publish_fail_at_prepare(
    spark: Any, pg_url: str, tag: str, rows: list[Row], problem: str
) -> None:
    table, pipeline = f"refused_{tag}", f"refused_{tag}"
    df, n = changelog(spark, 1, rows)
    with pytest.raises(PostgresSinkError, match=problem) as err:
        make_sink(pg_url, table, "upsert", pipeline).prepare(1, "a1", df, n)
    assert f"pipeline {pipeline}, sink out, epoch 1, attempt a1" in str(err.value)
    assert staging_tables(pg_url, pipeline) == []


# -- abort and recovery -------------------------------------------------------------------------


def test_abort_and_abort_others_drop_staging_tables_but_the_winners(
    spark: Any, pg_url: str, tag: str
) -> None:
    table, pipeline = f"aborts_{tag}", f"aborts_{tag}"
    sink = make_sink(pg_url, table, pipeline=pipeline)
    df, n = changelog(spark, 5, ROWS[:1])
    winner = sink.prepare(5, "win", df, n)
    loser = sink.prepare(5, "zombie", df, n)
    later = sink.prepare(6, "next", df, n)
    other = make_sink(pg_url, f"other_{tag}", pipeline=pipeline, name="other").prepare(
        5, "x", df, n
    )
    # a crash between Spark's CREATE TABLE and its inserts leaves an empty table behind
    half = f"{STAGING_SCHEMA}.{staging_name(pipeline, 'out', 5, 'crashed')}"
    query(pg_url, f'CREATE TABLE {half} ("user" text)')
    assert len(staging_tables(pg_url, pipeline)) == 5

    assert sink.abort_others(5, keep="win") == 2  # zombie + crashed
    left = staging_tables(pg_url, pipeline)
    assert sorted(left) == sorted(p.detail("staging_table") for p in (winner, later, other))
    sink.abort(loser)  # already gone: idempotent
    sink.commit(winner)
    assert sink.abort_others(5, keep=None) == 0
    sink.abort(later)
    sink.abort(later)
    assert staging_tables(pg_url, pipeline) == [other.detail("staging_table")]
    assert view(read_table(pg_url, table)) == [ROWS[0]]


# -- upsert and direct writes ---------------------------------------------------------------------


def test_upsert_changelog_across_epochs_ends_in_the_final_table(
    spark: Any, pg_url: str, tag: str
) -> None:
    table, pipeline = f"changes_{tag}", f"changes_{tag}"
    epochs: list[tuple[int, list[Row], str]] = [
        (1, [("alice", 0, 1), ("bob", 0, 2), ("carol", 0, 3)], "upsert"),  # inserts
        (2, [("alice", 0, 10), ("dan", 1, 4)], "upsert"),  # update + insert
        (3, [("bob", 0, None), ("nobody", 9, None)], "delete"),  # delete (and a no-op one)
    ]
    for epoch, rows, op in epochs:
        df, n = changelog(spark, epoch, rows, op)
        prepared = make_sink(pg_url, table, "upsert", pipeline).prepare(epoch, f"a{epoch}", df, n)
        make_sink(pg_url, table, "upsert", pipeline).commit(prepared)
    assert view(read_table(pg_url, table)) == [("alice", 0, 10), ("carol", 0, 3), ("dan", 1, 4)]
    assert [e for (_, e, _, _) in fence(pg_url, pipeline)] == [1, 2, 3]


def test_direct_append_write_is_at_least_once(spark: Any, pg_url: str, tag: str) -> None:
    table, pipeline = f"direct_{tag}", f"direct_{tag}"
    df, n = changelog(spark, 1, ROWS)
    sink = make_sink(pg_url, table, pipeline=pipeline)
    written = sink.write(1, "a1", df, n)
    assert view(read_table(pg_url, table)) == sorted(ROWS)
    sink.write(1, "a2", df, n)  # a qos 1 replay duplicates, by design
    assert len(read_table(pg_url, table)) == 2 * n
    assert written.rows == n and written.detail("staging_table") is None
    assert fence(pg_url, pipeline) == [] and staging_tables(pg_url, pipeline) == []
    assert set(read_table(pg_url, table)[0]) == {"user", "window_start", "window_end", "clicks"}
