"""The files sink's two-phase commit on both backends: staged output is invisible to every
reader, commit publishes exactly the rows, and commit / abort are idempotent and crash-safe."""

from __future__ import annotations

import io
import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import sluice.sinks.files as files_module
from sluice.contracts.records import Prepared
from sluice.sinks import FilesSink
from sluice.spec import FilesSinkConfig

from tests.fixtures.pipelines import Workspace

DDL = "user string, n long, ts timestamp, amount double"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make_rows(count: int, start: int = 0) -> list[tuple[Any, ...]]:
    return [(f"u{i:03d}", i, T0 + timedelta(seconds=i, milliseconds=250), i * 1.5)
            for i in range(start, start + count)]  # fmt: skip


def frame(spark: Any, rows: list[tuple[Any, ...]], partitions: int = 1) -> Any:
    return spark.createDataFrame(rows, DDL).repartition(partitions)


def make_sink(ws: Workspace, fmt: str = "parquet") -> FilesSink:
    return FilesSink(FilesSinkConfig(name="out", path=ws.uri("out"), format=fmt), ws.store("out"))  # type: ignore[arg-type]


def local_dir(ws: Workspace) -> str:
    return ws.uri("out")[len("file://") :]


def arrow_rows(ws: Workspace) -> list[dict[str, Any]]:
    """What pyarrow.dataset sees at the sink path (hidden `_`/`.` names skipped by default)."""
    if ws.backend == "local":
        if not os.path.isdir(local_dir(ws)):
            return []
        dataset = ds.dataset(local_dir(ws), format="parquet")
    else:
        from pyarrow.fs import S3FileSystem

        fs = S3FileSystem(
            endpoint_override=os.environ["AWS_ENDPOINT_URL"],
            access_key=os.environ["AWS_ACCESS_KEY_ID"],
            secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
            region=os.environ.get("AWS_REGION", "us-east-1"),
        )
        path = ws.uri("out")[len("s3://") :]
        try:
            dataset = ds.dataset(path, format="parquet", filesystem=fs)
        except FileNotFoundError:
            return []
    return dataset.to_table().to_pylist()


def duckdb_count(ws: Workspace) -> int:
    import duckdb

    sql = f"select count(*) from read_parquet('{local_dir(ws)}/*.parquet')"
    try:
        return int(duckdb.connect().execute(sql).fetchall()[0][0])
    except duckdb.IOException:
        return 0  # "No files found that match the pattern"


def spark_rows(spark: Any, ws: Workspace) -> list[dict[str, Any]]:
    from sluice.storage import to_spark_uri

    path = to_spark_uri(ws.uri("out"))
    try:
        frame = spark.read.schema(DDL).parquet(path)
        return [r.asDict() for r in frame.collect()]
    except Exception as exc:
        if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
            return []
        raise


def visible(spark: Any, ws: Workspace) -> dict[str, int]:
    counts = {"arrow": len(arrow_rows(ws)), "spark": len(spark_rows(spark, ws)),
              "store": len(make_sink(ws).committed_keys())}  # fmt: skip
    if ws.backend == "local":
        counts["duckdb"] = duckdb_count(ws)
    return counts


def snapshot(ws: Workspace) -> dict[str, bytes]:
    store = ws.store("out")
    return {i.key: store.get(i.key) for i in store.list()}


def test_prepare_stages_invisibly_and_commit_publishes_exactly(
    spark: Any, workspace: Workspace
) -> None:
    sink = make_sink(workspace)
    rows = make_rows(7)
    prepared = sink.prepare(3, "att1", frame(spark, rows), len(rows))

    assert prepared.rows == 7 and prepared.epoch == 3 and prepared.attempt == "att1"
    assert prepared.files, "nothing staged"
    keys = [i.key for i in workspace.store("out").list()]
    assert keys and all(k.startswith("_staging/000000000003-att1/") for k in keys)
    assert [f.staged_key for f in prepared.files] == sorted(f.staged_key for f in prepared.files)
    assert [f.final_key for f in prepared.files] == [
        f"part-000000000003-{n:05d}.parquet" for n in range(len(prepared.files))]  # fmt: skip
    assert all(f.size > 0 for f in prepared.files)
    assert Prepared.from_dict(json.loads(json.dumps(prepared.to_dict()))) == prepared
    assert set(visible(spark, workspace).values()) == {0}

    sink.commit(prepared)
    expected = sorted((u, n, a) for u, n, _, a in rows)
    assert sorted((r["user"], r["n"], r["amount"]) for r in arrow_rows(workspace)) == expected
    assert (
        sorted((r["user"], r["n"], r["amount"]) for r in spark_rows(spark, workspace)) == expected
    )
    counts = visible(spark, workspace)
    assert counts == {k: (len(prepared.files) if k == "store" else 7) for k in counts}
    assert workspace.store("out").list("_staging/") == []
    assert sink.committed_keys() == [f.final_key for f in prepared.files]


def test_commit_twice_is_a_no_op(spark: Any, workspace: Workspace) -> None:
    sink = make_sink(workspace)
    prepared = sink.prepare(1, "a", frame(spark, make_rows(5)), 5)
    sink.commit(prepared)
    before = snapshot(workspace)
    sink.commit(prepared)
    assert snapshot(workspace) == before
    assert len(arrow_rows(workspace)) == 5


def test_crash_mid_commit_then_commit_again_ends_complete(
    spark: Any, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files_module, "ROWS_PER_FILE", 4)
    sink = make_sink(workspace)
    rows = make_rows(12)
    prepared = sink.prepare(2, "b", frame(spark, rows, partitions=6), len(rows))
    assert len(prepared.files) == 3

    store = workspace.store("out")
    store.move(prepared.files[0].staged_key, prepared.files[0].final_key)  # crashed after 1 move
    assert len(arrow_rows(workspace)) < 12  # partially visible: the crash is real

    sink.commit(prepared)
    assert sorted(r["n"] for r in arrow_rows(workspace)) == list(range(12))
    assert sorted(r["n"] for r in spark_rows(spark, workspace)) == list(range(12))
    assert store.list("_staging/") == []
    assert sink.committed_keys() == [f.final_key for f in prepared.files]


def test_crash_after_all_moves_before_cleanup(spark: Any, workspace: Workspace) -> None:
    sink = make_sink(workspace)
    prepared = sink.prepare(1, "c", frame(spark, make_rows(3)), 3)
    store = workspace.store("out")
    for f in prepared.files:
        store.move(f.staged_key, f.final_key)
    sink.commit(prepared)
    assert len(arrow_rows(workspace)) == 3
    assert store.list("_staging/") == []


def test_abort_removes_staging(spark: Any, workspace: Workspace) -> None:
    sink = make_sink(workspace)
    prepared = sink.prepare(4, "d", frame(spark, make_rows(4)), 4)
    assert workspace.store("out").list("_staging/")
    sink.abort(prepared)
    assert workspace.store("out").list() == []
    sink.abort(prepared)  # idempotent
    assert set(visible(spark, workspace).values()) == {0}


def test_abort_others_keeps_the_given_attempt(spark: Any, workspace: Workspace) -> None:
    sink = make_sink(workspace)
    staged = {a: sink.prepare(5, a, frame(spark, make_rows(2, start=i * 10)), 2)
              for i, a in enumerate(("x1", "x2", "x3"))}  # fmt: skip
    other_epoch = sink.prepare(6, "x1", frame(spark, make_rows(2, start=100)), 2)
    store = workspace.store("out")

    removed = sink.abort_others(5, "x2")
    assert removed >= 2
    left = [i.key for i in store.list("_staging/")]
    assert left and all(k.startswith(("_staging/000000000005-x2/", "_staging/000000000006-x1/"))
                        for k in left)  # fmt: skip
    assert any(k.startswith("_staging/000000000006-x1/") for k in left)
    assert sink.abort_others(5, "x2") == 0  # idempotent

    sink.commit(staged["x2"])
    assert sorted(r["n"] for r in arrow_rows(workspace)) == [10, 11]

    assert sink.abort_others(6, None) > 0
    assert store.list("_staging/") == []
    assert other_epoch.files and not store.exists(other_epoch.files[0].staged_key)


def test_jsonl_format_writes_jsonl_files_with_iso_timestamps(
    spark: Any, workspace: Workspace
) -> None:
    sink = make_sink(workspace, "jsonl")
    rows = [*make_rows(3), ("u999", 999, None, None)]
    prepared = sink.prepare(1, "j", frame(spark, rows), len(rows))
    assert all(f.final_key.endswith(".jsonl") for f in prepared.files)
    sink.commit(prepared)
    keys = sink.committed_keys()
    assert keys and all(k.startswith("part-000000000001-") and k.endswith(".jsonl") for k in keys)
    store = workspace.store("out")
    records = [json.loads(line) for k in keys
               for line in store.get(k).decode().splitlines() if line.strip()]  # fmt: skip
    by_user = {r["user"]: r for r in records}
    assert len(records) == 4
    for u, n, ts, amount in make_rows(3):
        record = by_user[u]
        assert record["n"] == n and record["amount"] == amount
        assert "T" in record["ts"]
        assert datetime.fromisoformat(record["ts"].replace("Z", "+00:00")) == ts
    assert by_user["u999"]["ts"] is None and "amount" in by_user["u999"]  # nulls kept


def test_zero_rows_stages_nothing(spark: Any, workspace: Workspace) -> None:
    sink = make_sink(workspace)
    prepared = sink.prepare(1, "z", frame(spark, []), 0)
    assert prepared.files == () and prepared.rows == 0
    assert workspace.store("out").list() == []
    sink.commit(prepared)
    assert workspace.store("out").list() == []
    assert set(visible(spark, workspace).values()) == {0}


def test_committed_parquet_is_readable_per_file(spark: Any, workspace: Workspace) -> None:
    sink = make_sink(workspace)
    prepared = sink.prepare(9, "p", frame(spark, make_rows(6)), 6)
    sink.commit(prepared)
    store = workspace.store("out")
    total = 0
    for key in sink.committed_keys():
        table = pq.read_table(io.BytesIO(store.get(key)))
        assert table.schema.names == ["user", "n", "ts", "amount"]
        total += table.num_rows
    assert total == 6


# -- partition_by ------------------------------------------------------------------------------

# a value that needs escaping, a plain one and a null: Spark's folder names for each
PARTITIONED_USERS = {
    "a/b c": "user=a%2Fb c",
    "bob": "user=bob",
    None: "user=__HIVE_DEFAULT_PARTITION__",
}


def make_partitioned_sink(ws: Workspace, fmt: str = "parquet", by: str = "user") -> FilesSink:
    spec = FilesSinkConfig(name="out", path=ws.uri("out"), format=fmt, partition_by=(by,))  # type: ignore[arg-type]
    return FilesSink(spec, ws.store("out"))


def partitioned_rows(count: int, start: int = 0) -> list[tuple[Any, ...]]:
    users = list(PARTITIONED_USERS)
    return [(users[i % 3], *rest) for i, (_, *rest) in enumerate(make_rows(count, start))]


def hive_rows(spark: Any, ws: Workspace) -> list[dict[str, Any]]:
    """What Spark's own Parquet reader sees (partition columns discovered from the folders)."""
    from sluice.storage import to_spark_uri

    try:
        return [r.asDict() for r in spark.read.parquet(to_spark_uri(ws.uri("out"))).collect()]
    except Exception as exc:
        if any(s in str(exc) for s in ("PATH_NOT_FOUND", "does not exist", "UNABLE_TO_INFER")):
            return []  # no path, or only hidden files under it
        raise


def test_partitioned_prepare_stages_hive_folders_and_commit_keeps_them(
    spark: Any, workspace: Workspace
) -> None:
    sink = make_partitioned_sink(workspace)
    rows = partitioned_rows(9)
    prepared = sink.prepare(3, "att1", frame(spark, rows, partitions=3), len(rows))

    keys = [i.key for i in workspace.store("out").list()]
    assert keys and all(k.startswith("_staging/000000000003-att1/") for k in keys)
    assert [f.staged_key for f in prepared.files] == sorted(f.staged_key for f in prepared.files)
    # one file per folder (the folder's rows sit in one task), numbered over the whole epoch
    folders = sorted(PARTITIONED_USERS.values())
    expected_keys = [f"{d}/part-000000000003-{n:05d}.parquet" for n, d in enumerate(folders)]
    assert [f.final_key for f in prepared.files] == expected_keys
    assert Prepared.from_dict(json.loads(json.dumps(prepared.to_dict()))) == prepared
    assert files_module.read_rows(workspace.store("out"), "parquet") == []
    assert hive_rows(spark, workspace) == []

    sink.commit(prepared)
    assert sink.committed_keys() == [f.final_key for f in prepared.files]
    assert workspace.store("out").list("_staging/") == []
    # read_rows adds the partition column back from the path, as a string (None for null)
    got = files_module.read_rows(workspace.store("out"), "parquet")
    assert all(list(r) == ["n", "ts", "amount", "user"] for r in got)
    expected = sorted(((u, n, a) for u, n, _, a in rows), key=repr)
    assert sorted(((r["user"], r["n"], r["amount"]) for r in got), key=repr) == expected
    # Spark's reader finds the same rows, with the unescaped values
    seen = hive_rows(spark, workspace)
    assert sorted(((r["user"], r["n"], r["amount"]) for r in seen), key=repr) == expected
    if workspace.backend == "local":
        hive = ds.dataset(local_dir(workspace), format="parquet", partitioning="hive")
        assert hive.to_table().num_rows == 9


def test_partitioned_commit_is_idempotent_and_finishes_after_a_crash(
    spark: Any, workspace: Workspace
) -> None:
    sink = make_partitioned_sink(workspace)
    rows = partitioned_rows(6)
    prepared = sink.prepare(7, "b", frame(spark, rows, partitions=2), len(rows))
    store = workspace.store("out")
    first = prepared.files[0]
    store.move(first.staged_key, first.final_key)  # crashed after one move
    assert sink.committed_keys() == [first.final_key]

    sink.commit(prepared)
    before = snapshot(workspace)
    sink.commit(prepared)
    sink.commit(Prepared.from_dict(prepared.to_dict()))
    assert snapshot(workspace) == before
    assert sink.committed_keys() == [f.final_key for f in prepared.files]
    assert sorted(r["n"] for r in files_module.read_rows(store, "parquet")) == list(range(6))
    assert store.list("_staging/") == []


def test_partitioned_abort_and_abort_others(spark: Any, workspace: Workspace) -> None:
    sink = make_partitioned_sink(workspace)
    staged = {
        a: sink.prepare(5, a, frame(spark, partitioned_rows(3, start=i * 10)), 3)
        for i, a in enumerate(("x1", "x2", "x3"))
    }
    store = workspace.store("out")
    assert any("/user=" in i.key for i in store.list("_staging/"))

    sink.abort(staged["x1"])
    sink.abort(staged["x1"])  # idempotent
    assert not any(i.key.startswith("_staging/000000000005-x1/") for i in store.list())
    assert sink.abort_others(5, "x2") > 0
    assert sink.abort_others(5, "x2") == 0
    assert all(i.key.startswith("_staging/000000000005-x2/") for i in store.list())
    assert files_module.read_rows(store, "parquet") == []

    sink.commit(staged["x2"])
    assert sorted(r["n"] for r in files_module.read_rows(store, "parquet")) == [10, 11, 12]
    assert store.list("_staging/") == []


def test_partitioned_jsonl_by_timestamp(spark: Any, workspace: Workspace) -> None:
    sink = make_partitioned_sink(workspace, "jsonl", by="ts")
    rows = [("u1", 1, T0, 1.0), ("u2", 2, T0, None), ("u3", 3, T0 + timedelta(minutes=1), 3.0)]
    prepared = sink.prepare(2, "j", frame(spark, rows), len(rows))
    sink.commit(prepared)

    assert sink.committed_keys() == [
        "ts=2026-01-01 00%3A00%3A00/part-000000000002-00000.jsonl",
        "ts=2026-01-01 00%3A01%3A00/part-000000000002-00001.jsonl",
    ]
    got = files_module.read_rows(workspace.store("out"), "jsonl")
    assert sorted((r["user"], r["ts"], r["amount"]) for r in got) == [
        ("u1", "2026-01-01 00:00:00", 1.0),
        ("u2", "2026-01-01 00:00:00", None),
        ("u3", "2026-01-01 00:01:00", 3.0),
    ]
    from sluice.storage import to_spark_uri

    reader = spark.read.schema("user string, n long, amount double, ts timestamp")
    found = reader.json(to_spark_uri(workspace.uri("out"))).selectExpr("user", "string(ts)")
    assert sorted(tuple(r) for r in found.collect()) == [
        ("u1", "2026-01-01 00:00:00"),
        ("u2", "2026-01-01 00:00:00"),
        ("u3", "2026-01-01 00:01:00"),
    ]  # a timestamp again: Spark's reader types the folder values


def test_partition_values_unescape_hive_folders() -> None:
    key = "day=2026-01-01 00%3A00%3A00/user=a%2Fb%3Dc/v=__HIVE_DEFAULT_PARTITION__/part-1.jsonl"
    expected = {"day": "2026-01-01 00:00:00", "user": "a/b=c", "v": None}
    assert files_module.partition_values(key) == expected
    assert files_module.partition_values("part-1.parquet") == {}
    assert files_module.is_hidden("_staging/x/part-1.parquet")
    assert files_module.is_hidden("user=a/_SUCCESS") and files_module.is_hidden("a/.x.crc")
    assert not files_module.is_hidden("_user=a/part-1.parquet")
