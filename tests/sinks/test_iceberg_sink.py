"""The ``iceberg`` sink against real catalogs (docs/iceberg.md): pyiceberg's SQL catalog in a
real PostgreSQL with the warehouse on a local disk or on SeaweedFS S3, and the Iceberg
project's REST catalog server (tests/fixtures/iceberg.py).

The sink contract runs on every backend (PostgreSQL + local and the REST catalog in make test,
PostgreSQL + S3 and the REST catalog with its warehouse on S3 in make test-extended); the
rewind of a whole pipeline and a SIGKILL at ``commit.mid_sinks`` run in make test-extended, a
SIGKILL at ``commit.after_checkpoint`` in make chaos. Then what is Iceberg's own: a concurrent
writer's commit between our load and our commit is retried, never lost nor doubled; racing and
late commits publish once and every epoch is named by exactly one snapshot summary; schema
evolution; rewinds by time travel; and pipelines end to end — qos 2 with ``emit: on_update``
equal to the reference, a SIGKILL in the commit step then a resume, and a rewind equal to a
run that never rewound.
"""

from __future__ import annotations

import re
import signal
import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.contracts.records import Prepared
from sluice.demo import render_click_files
from sluice.protocol import RunRequest, run_until_drained
from sluice.sinks.exceptions import IcebergSinkError
from sluice.sinks.iceberg import COMMIT_ATTEMPTS, STAGING, IcebergSink, epoch_property
from sluice.spec import IcebergSinkConfig, parse_spec
from sluice.storage import ObjectStore, open_store
from sluice.testing.sink_contract import KEYS, Harness, SinkContract, UpsertSinkContract

from tests.faults.crashing import crash_step
from tests.fixtures.pipelines import Workspace, click_reference, click_spec_dict, runtime
from tests.reference import compare_rows

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
DDL = (
    "user string, window_start timestamp, window_end timestamp, clicks long,"
    " _op string, _epoch long"
)


# -- catalogs -----------------------------------------------------------------------------------


@dataclass
class Catalog:
    """One catalog backend: its connection URI and a warehouse for one test."""

    url: str
    warehouse: str

    def store(self) -> ObjectStore:
        return open_store(self.warehouse)


@pytest.fixture(scope="module")
def pg_catalog_url(postgres_server: Any) -> str:
    url = postgres_server.create_database("iceberg_catalog")
    return "postgresql://" + url.split("://", 1)[1]


BACKENDS = [
    pytest.param("pg-local", id="pg-local"),
    pytest.param("rest", id="rest"),
    pytest.param("pg-s3", id="pg-s3", marks=pytest.mark.extended),
    pytest.param("rest-s3", id="rest-s3", marks=pytest.mark.extended),
]


def _catalog(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> Catalog:
    if backend == "rest":
        server = request.getfixturevalue("iceberg_rest")
        return Catalog(server.uri, (tmp_path / "warehouse").as_uri())
    if backend == "rest-s3":  # the server writes metadata there, the sink stages and adds data
        server = request.getfixturevalue("iceberg_rest_s3")
        return Catalog(server.uri, f"{server.warehouse}/sink-{uuid.uuid4().hex[:10]}")
    url = request.getfixturevalue("pg_catalog_url")
    if backend == "pg-s3":
        bucket = request.getfixturevalue("s3_server").bucket("sluice-tests")
        return Catalog(url, f"s3://{bucket}/iceberg-{uuid.uuid4().hex[:10]}")
    return Catalog(url, (tmp_path / "warehouse").as_uri())


@pytest.fixture(params=BACKENDS)
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Catalog:
    return _catalog(request, tmp_path, request.param)


@pytest.fixture
def pg_local(request: pytest.FixtureRequest, tmp_path: Path) -> Catalog:
    return _catalog(request, tmp_path, "pg-local")


def _config(cat: Catalog, mode: str = "append", **extra: Any) -> IcebergSinkConfig:
    table = f"lake.t_{uuid.uuid4().hex[:10]}"
    return IcebergSinkConfig(name="out", table=table, connection="c", warehouse=cat.warehouse,  # type: ignore[arg-type]
                             mode=mode, keys=KEYS if mode == "upsert" else (), **extra)  # fmt: skip


def _sink(cat: Catalog, config: IcebergSinkConfig, pipeline: str = "p") -> IcebergSink:
    return IcebergSink(config, cat.url, cat.store(), pipeline)


def _rows(sink: IcebergSink) -> list[dict[str, Any]]:
    table = sink.load()
    if table is None:
        return []
    rows: list[dict[str, Any]] = table.scan().to_arrow().to_pylist()
    return rows


def _harness(cat: Catalog, mode: str) -> Harness:
    config, pipeline = _config(cat, mode), f"contract_{uuid.uuid4().hex[:6]}"
    return Harness(
        make=lambda: _sink(cat, config, pipeline),
        rows=lambda: _rows(_sink(cat, config, pipeline)),
        leftovers=lambda: [i.key for i in cat.store().list(STAGING)],
    )


class TestIcebergAppend(SinkContract):
    @pytest.fixture
    def harness(self, catalog: Catalog) -> Harness:
        return _harness(catalog, "append")


class TestIcebergUpsert(UpsertSinkContract):
    @pytest.fixture
    def harness(self, catalog: Catalog) -> Harness:
        return _harness(catalog, "upsert")


# -- helpers ------------------------------------------------------------------------------------


def changelog(
    spark: Any, epoch: int, rows: Sequence[tuple[str | None, int, int | None]], op: str = "upsert"
) -> tuple[Any, int]:
    data = [
        (u, T0 + timedelta(minutes=m), T0 + timedelta(minutes=m + 1), c, op, epoch)
        for u, m, c in rows
    ]
    return spark.createDataFrame(data, DDL), len(data)


def view(sink: IcebergSink) -> list[tuple[Any, int, Any]]:
    out = []
    for r in _rows(sink):
        minute = int((r["window_start"] - T0).total_seconds() // 60)
        out.append((r["user"], minute, r["clicks"]))
    return sorted(out, key=repr)


def summaries(sink: IcebergSink) -> list[str]:
    """The ``sluice.epoch`` of every snapshot summary of the table, in commit order."""
    table = sink.load()
    assert table is not None
    return [
        s.summary.get("sluice.epoch")
        for s in table.metadata.snapshots
        if s.summary is not None and s.summary.get("sluice.epoch") is not None
    ]


def publish(spark: Any, sink: IcebergSink, epoch: int, rows: Any, op: str = "upsert") -> Prepared:
    df, n = changelog(spark, epoch, rows, op)
    prepared = sink.prepare(epoch, f"a{epoch}", df, n)
    sink.commit(prepared)
    return prepared


# -- spec and handle ----------------------------------------------------------------------------


def _spec_body(**sink: Any) -> dict[str, Any]:
    body = click_spec_dict(Workspace("local", "file:///tmp/unused"), emit="on_update")
    base = {"name": "lake", "type": "iceberg", "table": "lake.clicks", "connection": "ice",
            "warehouse": "s3://lake/wh", "mode": "upsert"}  # fmt: skip
    body["sinks"] = [{**base, **sink}]
    return body


def test_the_spec_fills_in_the_keys_and_names_the_catalog_connection() -> None:
    spec = parse_spec(_spec_body(partition_by="user"))
    sink = spec.sinks[0]
    assert isinstance(sink, IcebergSinkConfig)
    assert sink.keys == ("user", "window_start", "window_end")
    assert sink.partition_by == ("user",) and sink.connection_ids() == ("ice",)
    assert sink.identifier() == ("lake", "clicks") and sink.describe().startswith("iceberg")


@pytest.mark.parametrize(
    ("setting", "field", "words"),
    [
        ({"table": "clicks"}, "sinks[0].table", "is not an Iceberg table name"),
        ({"catalog_name": "my catalog"}, "sinks[0].catalog_name", "is not a catalog name"),
        ({"connection": "no-dash"}, "sinks[0].connection", "is not a connection id"),
        ({"warehouse": "ftp://x/y"}, "sinks[0].warehouse", "unsupported scheme"),
        ({"path": "/tmp/x"}, "sinks[0].path", "is not a setting of a iceberg sink"),
    ],
)
def test_the_spec_refuses_bad_settings_naming_the_field(
    setting: dict[str, Any], field: str, words: str
) -> None:
    from sluice.spec import SpecError

    with pytest.raises(SpecError) as refused:
        parse_spec(_spec_body(**setting))
    found = {p.field: p.message for p in refused.value.problems}
    assert field in found and words in found[field], found


def test_the_handle_is_stored_and_read_back_also_from_a_bare_prepared() -> None:
    from sluice.sinks.iceberg import IcebergStaged

    handle = IcebergStaged("lake.clicks", "_sluice_staging/p/out/000000000003-a1/")
    prepared = Prepared.of("out", "uri", 3, "a1", 7, handle)
    assert prepared.to_dict()["details"] == {
        "table": "lake.clicks",
        "staging": "_sluice_staging/p/out/000000000003-a1/",
    }
    assert Prepared.from_dict(prepared.to_dict()).handle(IcebergStaged) == handle
    assert Prepared("out", "", 3, "a1", 0).handle(IcebergStaged) == IcebergStaged(None, None)


def test_catalog_properties_by_scheme_and_credentials_never_in_messages() -> None:
    from sluice.sinks.iceberg.catalog import catalog_properties, redacted
    from sluice.storage import S3Options

    s3 = S3Options(endpoint_url="http://127.0.0.1:8333", region="us-east-1")
    sql = catalog_properties("postgresql://u:pw@db:5432/cat", "s3://lake/wh", s3)
    assert sql["type"] == "sql" and sql["uri"] == "postgresql+psycopg2://u:pw@db:5432/cat"
    assert sql["warehouse"] == "s3://lake/wh" and sql["s3.endpoint"] == "http://127.0.0.1:8333"
    rest = catalog_properties("https://id:secret@cat.example/api?warehouse=w&token=t", "/wh", None)
    assert rest["type"] == "rest" and rest["uri"] == "https://cat.example/api"
    assert rest["credential"] == "id:secret" and rest["token"] == "t" and rest["warehouse"] == "w"
    assert "s3.endpoint" not in rest
    assert redacted("https://id:secret@cat.example/api?token=t") == "https://id:***@cat.example/api"
    with pytest.raises(IcebergSinkError) as refused:
        catalog_properties("thrift://u:pw@hive:9083", "/wh", None)
    assert "pw" not in str(refused.value) and "unsupported scheme 'thrift'" in str(refused.value)


# -- concurrency, fences ------------------------------------------------------------------------


def test_a_concurrent_writer_between_load_and_commit_is_retried_never_lost_nor_doubled(
    spark: Any, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer appends (pyiceberg, its own catalog instance) after our commit loaded
    the table and before it commits: the catalog refuses ours, the sink reloads and commits
    again. Both writers' rows are there once; the epoch's summary appears once."""
    import pyarrow as pa

    config = _config(catalog)
    sink = _sink(catalog, config)
    publish(spark, sink, 1, [("alice", 0, 1)])
    other = _sink(catalog, config).load()
    assert other is not None
    foreign = pa.table({"user": ["zed"], "window_start": [T0], "window_end": [T0], "clicks": [9]})
    foreign = foreign.cast(other.schema().as_arrow())
    real = IcebergSink._commit_transaction
    calls = []

    def racing(self: IcebergSink, tx: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            other.append(foreign)  # lands between our load and our commit
        real(self, tx)

    monkeypatch.setattr(IcebergSink, "_commit_transaction", racing)
    prepared = publish(spark, sink, 2, [("bob", 1, 2)])
    assert len(calls) == 2, "the refused commit was redone once"
    assert view(sink) == sorted([("alice", 0, 1), ("bob", 1, 2), ("zed", 0, 9)], key=repr)
    sink.commit(prepared)
    assert summaries(sink) == ["1", "2"]


def test_a_racing_commit_that_creates_the_table_and_publishes_first_is_seen(
    spark: Any, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two commits of epoch 1 find no table; ours loses the creation race, and the other
    commit publishes the epoch before ours loads the table it did not create. Ours must see
    the epoch there and publish nothing (it once committed it a second time: a contract
    suite's racing commits doubled the rows, 1 run in about 15)."""
    config = _config(catalog)
    sink = _sink(catalog, config)
    df, n = changelog(spark, 1, [("alice", 0, 1), ("bob", 1, 2)])
    prepared = sink.prepare(1, "a1", df, n)
    real = IcebergSink._create

    def racing(self: IcebergSink, data: Any, epoch: int, attempt: str) -> Any:
        real(self, data, epoch, attempt)
        _sink(catalog, config).commit(prepared)  # the other commit, all the way through
        return self.load()

    monkeypatch.setattr(IcebergSink, "_create", racing)
    sink.commit(prepared)
    monkeypatch.undo()
    assert view(sink) == [("alice", 0, 1), ("bob", 1, 2)]
    assert summaries(sink) == ["1"]


def test_a_concurrent_writer_in_an_upsert_is_retried(
    spark: Any, pg_local: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(pg_local, "upsert")
    sink = _sink(pg_local, config)
    publish(spark, sink, 1, [("alice", 0, 1), ("bob", 0, 1)])
    real, calls = IcebergSink._commit_transaction, []

    def racing(self: IcebergSink, tx: Any) -> None:
        calls.append(1)
        if len(calls) == 1:  # a concurrent upsert of another key by another pipeline
            other = _sink(pg_local, config, "other")
            df, n = changelog(spark, 7, [("carol", 2, 5)])
            monkeypatch.setattr(IcebergSink, "_commit_transaction", real)
            other.commit(other.prepare(7, "x", df, n))
            monkeypatch.setattr(IcebergSink, "_commit_transaction", racing)
        real(self, tx)

    monkeypatch.setattr(IcebergSink, "_commit_transaction", racing)
    publish(spark, sink, 2, [("alice", 0, 4)])
    assert view(sink) == [("alice", 0, 4), ("bob", 0, 1), ("carol", 2, 5)]
    assert summaries(sink) == ["1", "7", "2"]


def test_a_catalog_that_keeps_refusing_fails_naming_the_attempts(
    spark: Any, pg_local: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyiceberg.exceptions import CommitFailedException

    sink = _sink(pg_local, _config(pg_local))

    def refuse(self: IcebergSink, tx: Any) -> None:
        raise CommitFailedException("Table has been updated by another process")

    monkeypatch.setattr(IcebergSink, "_commit_transaction", refuse)
    monkeypatch.setattr("sluice.sinks.iceberg.sink.time.sleep", lambda s: None)
    df, n = changelog(spark, 1, [("alice", 0, 1)])
    prepared = sink.prepare(1, "a1", df, n)
    with pytest.raises(IcebergSinkError) as failed:
        sink.commit(prepared)
    message = str(failed.value)
    assert f"all {COMMIT_ATTEMPTS} commit attempts" in message
    assert "pipeline p, sink out, epoch 1, attempt a1" in message and sink.config.table in message
    assert failed.value.table == sink.config.table and failed.value.epoch == 1
    assert pg_local.store().list(STAGING), "the staged rows are kept for the next retry"


def test_racing_late_and_replayed_commits_leave_each_epoch_in_one_summary(
    spark: Any, catalog: Catalog
) -> None:
    config = _config(catalog)
    sink = _sink(catalog, config)
    first = publish(spark, sink, 1, [("alice", 0, 1)])
    df, n = changelog(spark, 2, [("bob", 0, 2)])
    second = sink.prepare(2, "a2", df, n)
    threads = [
        threading.Thread(target=lambda: _sink(catalog, config).commit(second)) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    publish(spark, sink, 3, [("carol", 0, 3)])
    _sink(catalog, config).commit(first)  # a retry long after later epochs: nothing
    _sink(catalog, config).commit(second)
    assert view(sink) == [("alice", 0, 1), ("bob", 0, 2), ("carol", 0, 3)]
    assert summaries(sink) == ["1", "2", "3"]
    table = sink.load()
    assert table is not None
    assert table.metadata.properties[epoch_property("p", "out")] == "3"
    assert sorted(sink.snapshots()) == [1, 2, 3]


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_a_qos1_replay_of_a_direct_write_adds_nothing(
    spark: Any, pg_local: Catalog, mode: str
) -> None:
    """qos 1 writes directly; a replay of the epoch (same planned input) finds the epoch."""
    sink = _sink(pg_local, _config(pg_local, mode))
    for _ in range(2):
        df, n = changelog(spark, 1, [("alice", 0, 1), ("bob", 0, 2)])
        _sink(pg_local, sink.config).write(1, f"a{uuid.uuid4().hex[:4]}", df, n)
    assert view(sink) == [("alice", 0, 1), ("bob", 0, 2)]
    assert summaries(sink) == ["1"]
    assert pg_local.store().list(STAGING) == []


def test_the_epoch_property_fences_even_when_the_snapshots_are_expired(
    spark: Any, pg_local: Catalog
) -> None:
    config = _config(pg_local)
    sink = _sink(pg_local, config)
    first = publish(spark, sink, 1, [("alice", 0, 1)])
    publish(spark, sink, 2, [("bob", 0, 2)])
    table = sink.load()
    assert table is not None
    old = sink.snapshots()[1]
    table.maintenance.expire_snapshots().by_id(old).commit()
    assert 1 not in sink.snapshots()
    sink.commit(first)
    assert view(sink) == [("alice", 0, 1), ("bob", 0, 2)]


def test_partition_by_makes_identity_partitions(spark: Any, pg_local: Catalog) -> None:
    sink = _sink(pg_local, _config(pg_local, partition_by=["user"]))
    publish(spark, sink, 1, [("alice", 0, 1), ("bob", 0, 2)])
    table = sink.load()
    assert table is not None
    fields = [(f.name, str(f.transform)) for f in table.spec().fields]
    assert fields == [("user", "identity")]
    files = [t.file.partition for t in table.scan().plan_files()]
    assert len(files) == 2


# -- what docs/iceberg.md promises a reader ----------------------------------------------------


def _run_documented_reader(cat: Catalog, table: str) -> Any:
    """docs/iceberg.md's pyiceberg reader, run as written: only its placeholders (the catalog
    database, the warehouse, the table) replaced by this test's; returns its last line's value."""
    text = (REPO / "docs/iceberg.md").read_text()
    readers = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "SqlCatalog(" in b]
    assert len(readers) == 1, readers
    code = readers[0]
    database = "postgresql+psycopg2://" + cat.url.split("://", 1)[1]
    for placeholder, value in (
        ('"postgresql+psycopg2://..."', database),
        ('"s3://lake/warehouse"', cat.warehouse),
        ('"analytics.clicks_per_minute"', table),
    ):
        assert placeholder in code, (placeholder, code)
        code = code.replace(placeholder, repr(value))
    *body, last = code.strip().splitlines()
    scope: dict[str, Any] = {}
    exec("\n".join(body), scope)
    return eval(last, scope)


def test_the_documented_reader_finds_the_table_and_its_epochs(
    spark: Any, pg_local: Catalog
) -> None:
    sink = _sink(pg_local, _config(pg_local))
    publish(spark, sink, 1, [("alice", 0, 1)])
    publish(spark, sink, 2, [("bob", 1, 2)])
    snapshots = sink.snapshots()
    found = _run_documented_reader(pg_local, sink.config.table)
    assert found == [(snapshots[1], "1"), (snapshots[2], "2")]


def test_the_spec_names_the_catalog_its_readers_open(spark: Any, pg_local: Catalog) -> None:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    config = _config(pg_local, catalog_name="analytics")
    sink = _sink(pg_local, config)
    publish(spark, sink, 1, [("alice", 0, 1)])
    database = "postgresql+psycopg2://" + pg_local.url.split("://", 1)[1]
    table = SqlCatalog("analytics", uri=database, warehouse=pg_local.warehouse).load_table(
        config.table
    )
    assert [s.summary.get("sluice.epoch") for s in table.metadata.snapshots] == ["1"]
    with pytest.raises(NoSuchTableError):  # the default name files it elsewhere
        _sink(pg_local, config.model_copy(update={"catalog_name": "sluice"})).catalog.load_table(
            config.table
        )


@pytest.mark.extended
def test_a_rest_catalog_on_s3_holds_metadata_and_data_in_the_bucket(
    spark: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The REST server writes the table's metadata with S3FileIO, the sink its data files with
    pyarrow: both under the server's s3:// warehouse, nothing on a local disk."""
    cat = _catalog(request, tmp_path, "rest-s3")
    sink = _sink(cat, _config(cat))
    publish(spark, sink, 1, [("alice", 0, 1), ("bob", 0, 2)], op="insert")
    table = sink.load()
    assert table is not None
    server = request.getfixturevalue("iceberg_rest_s3")
    assert table.metadata_location.startswith(server.warehouse + "/")
    data = [t.file.file_path for t in table.scan().plan_files()]
    assert data and all(path.startswith("s3://") for path in data), data
    assert view(sink) == [("alice", 0, 1), ("bob", 0, 2)] and summaries(sink) == ["1"]


def test_an_upsert_prepare_refuses_a_repeated_key_and_stages_nothing(
    spark: Any, pg_local: Catalog
) -> None:
    sink = _sink(pg_local, _config(pg_local, "upsert"))
    df, n = changelog(spark, 1, [(None, 0, 1), ("bob", 0, 2), (None, 0, 3)])
    with pytest.raises(IcebergSinkError) as refused:
        sink.prepare(1, "a1", df, n)
    assert "key {'user': None" in str(refused.value) and "more than once" in str(refused.value)
    assert pg_local.store().list(STAGING) == [] and sink.load() is None


# -- schema -------------------------------------------------------------------------------------


def test_a_new_column_evolves_the_table_in_the_epochs_commit(spark: Any, pg_local: Catalog) -> None:
    config = _config(pg_local, "upsert")
    sink = _sink(pg_local, config)
    publish(spark, sink, 1, [("alice", 0, 1), ("bob", 0, 2)])
    df, n = changelog(spark, 2, [("alice", 0, 5)])
    df = df.selectExpr("*", "'web' AS channel")
    sink.commit(sink.prepare(2, "a2", df, n))
    rows = {r["user"]: (r["clicks"], r["channel"]) for r in _rows(sink)}
    assert rows == {"alice": (5, "web"), "bob": (2, None)}
    table = sink.load()
    assert table is not None
    assert len(table.metadata.snapshots) == 2  # the schema change rode in epoch 2's commit


def test_a_type_change_is_refused_naming_the_column(spark: Any, pg_local: Catalog) -> None:
    sink = _sink(pg_local, _config(pg_local))
    publish(spark, sink, 1, [("alice", 0, 1)])
    df, n = changelog(spark, 2, [("bob", 0, 2)])
    df = df.selectExpr("user", "window_start", "window_end", "CAST(clicks AS STRING) AS clicks")
    prepared = sink.prepare(2, "a2", df, n)
    with pytest.raises(IcebergSinkError) as refused:
        sink.commit(prepared)
    message = str(refused.value)
    assert "column 'clicks' is string in the output but long in the table" in message
    assert "pipeline p, sink out, epoch 2, attempt a2" in message and sink.config.table in message
    assert view(sink) == [("alice", 0, 1)]


# -- rewinds ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_a_rewind_commit_restores_the_table_as_of_k_plus_its_rows(
    spark: Any, pg_local: Catalog, mode: str
) -> None:
    sink = _sink(pg_local, _config(pg_local, mode))
    publish(spark, sink, 1, [("alice", 0, 1)])
    publish(spark, sink, 2, [("alice", 0, 2), ("bob", 1, 1)])
    publish(spark, sink, 3, [("carol", 2, 3)])
    assert sink.retraction_problem(1) is None
    df, n = changelog(spark, 4, [("alice", 0, 7), ("dave", 3, 1)])
    prepared = replace(sink.prepare(4, "a4", df, n), retract_after=1)
    sink.commit(prepared)
    sink.commit(prepared)  # idempotent
    if mode == "upsert":
        assert view(sink) == [("alice", 0, 7), ("dave", 3, 1)]
    else:
        assert view(sink) == [("alice", 0, 1), ("alice", 0, 7), ("dave", 3, 1)]
    assert summaries(sink) == ["1", "2", "3", "4"]
    # a second rewind, past the first: to epoch 0 (nothing was published yet)
    empty, _ = changelog(spark, 5, [])
    sink.commit(replace(sink.prepare(5, "a5", empty, 0), retract_after=0))
    assert view(sink) == []


def test_a_rewind_past_expired_snapshots_is_refused_naming_them(
    spark: Any, pg_local: Catalog
) -> None:
    sink = _sink(pg_local, _config(pg_local))
    for epoch in (1, 2, 3):
        publish(spark, sink, epoch, [(f"u{epoch}", 0, epoch)])
    table = sink.load()
    assert table is not None
    table.maintenance.expire_snapshots().by_ids([sink.snapshots()[1]]).commit()
    problem = sink.retraction_problem(1)
    assert problem is not None and "is expired" in problem and "as of epoch 1" in problem
    assert sink.retraction_problem(2) is None


# -- pipelines end to end -----------------------------------------------------------------------

FILES = render_click_files(files=4, events_per_file=60, seed=11)
CONNECTION = "iceberg_e2e"


def _pipeline(ws: Workspace, cat: Catalog, tag: str, qos: int = 2) -> dict[str, Any]:
    body = click_spec_dict(ws, name=f"ice_{tag}", qos=qos, emit="on_update")
    body["source"]["max_files_per_epoch"] = 1
    body["sinks"] = [
        {"name": "lake", "type": "iceberg", "table": f"e2e.clicks_{tag}",
         "connection": CONNECTION, "warehouse": cat.warehouse, "mode": "upsert"},
    ]  # fmt: skip
    return body


def _table(spec: Any, cat: Catalog) -> list[dict[str, Any]]:
    config = spec.sinks[0]
    return _rows(IcebergSink(config, cat.url, cat.store(), spec.name))


def _check_reference(rows: list[dict[str, Any]], files: list[tuple[str, bytes]]) -> None:
    want = click_reference(files)
    expected = want.emitted + want.open_windows
    got = [{k: r[k] for k in expected[0]} for r in rows]
    assert compare_rows(got, expected, keys=["user", "window_start"]) == []
    assert len(got) == len(expected)


def test_a_pipeline_qos2_on_update_equals_the_reference(
    spark: Any, local_workspace: Workspace, pg_local: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"SLUICE_CONN_{CONNECTION.upper()}", pg_local.url)
    ws = local_workspace
    ws.put_files(FILES)
    spec = parse_spec(_pipeline(ws, pg_local, uuid.uuid4().hex[:6]))
    rt = runtime(spec)
    run_until_drained(rt, spark)
    assert rt.repo.latest_epoch() == len(FILES)
    rows = _table(spec, pg_local)
    _check_reference(rows, FILES)
    keys = Counter((r["user"], r["window_start"]) for r in rows)
    assert max(keys.values()) == 1, "one row per window"
    sink = IcebergSink(spec.sinks[0], pg_local.url, pg_local.store(), spec.name)
    snapshots = sink.snapshots()
    assert sorted(snapshots) == list(range(1, len(FILES) + 1))
    assert pg_local.store().list(STAGING) == []
    # sluice checkpoints / the monitor: the snapshot that holds each epoch
    for epoch, snapshot in snapshots.items():
        marker = rt.repo.sinks_committed(epoch)
        assert marker is not None
        assert marker.published == {
            spec.sinks[0].name: f"{spec.sinks[0].table} snapshot {snapshot}"
        }


@pytest.mark.parametrize(
    "point",
    [
        pytest.param("commit.mid_sinks", marks=pytest.mark.extended),
        pytest.param("commit.after_checkpoint", marks=pytest.mark.slow),
    ],
)
def test_a_sigkill_in_the_commit_then_resume_publishes_each_epoch_once(
    spark: Any,
    local_workspace: Workspace,
    pg_local: Catalog,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    point: str,
) -> None:
    monkeypatch.setenv(f"SLUICE_CONN_{CONNECTION.upper()}", pg_local.url)
    ws = local_workspace
    ws.put_files(FILES)
    body = _pipeline(ws, pg_local, uuid.uuid4().hex[:6])
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))
    spec = parse_spec(body)
    rt = runtime(spec)
    run_until_drained(rt, spark, max_epochs=1)
    code = crash_step(rt, spark, spec_path, point, 2, log=tmp_path / "cli.log")
    assert code == -signal.SIGKILL, (code, (tmp_path / "cli.log").read_text()[-3000:])
    assert rt.repo.checkpoint(2) is not None and rt.repo.sinks_committed(2) is None
    run_until_drained(rt, spark)
    rows = _table(spec, pg_local)
    _check_reference(rows, FILES)
    sink = IcebergSink(spec.sinks[0], pg_local.url, pg_local.store(), spec.name)
    assert summaries(sink) == [str(e) for e in range(1, len(FILES) + 1)]
    assert pg_local.store().list(STAGING) == []


@pytest.mark.extended
def test_a_rewind_equals_a_run_that_never_rewound(
    spark: Any, local_workspace: Workspace, pg_local: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Epochs 1-3 (a file each), a rewind to checkpoint 1 (epoch 4 replays file 2 and
    retracts epochs 2-3 in its one snapshot), then the rest: the table equals the reference
    after each step."""
    monkeypatch.setenv(f"SLUICE_CONN_{CONNECTION.upper()}", pg_local.url)
    ws = local_workspace
    ws.put_files(FILES)
    spec = parse_spec(_pipeline(ws, pg_local, uuid.uuid4().hex[:6]))
    rt = runtime(spec)
    run_until_drained(rt, spark, max_epochs=3)
    _check_reference(_table(spec, pg_local), FILES[:3])
    plan = RunRequest.from_conf(rt.name, {"restore_from": "checkpoint", "epoch": 1})
    planned = plan.resolve(rt).plan(rt, max_units=1)
    assert planned.epoch == 4
    run_until_drained(rt, spark, max_epochs=1)
    _check_reference(_table(spec, pg_local), FILES[:2])
    run_until_drained(rt, spark)
    _check_reference(_table(spec, pg_local), FILES)
    sink = IcebergSink(spec.sinks[0], pg_local.url, pg_local.store(), spec.name)
    assert summaries(sink) == [str(e) for e in range(1, rt.repo.latest_epoch() + 1)]
