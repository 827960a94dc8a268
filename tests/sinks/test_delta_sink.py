"""The delta sink on both backends (a local directory and S3 on SeaweedFS), with real Delta:
staged rows are invisible to Delta readers, commit publishes them once — also when repeated,
from a new instance or from two threads at once — abort and recovery clean the staging, and
an upsert sink ends in the last value per key."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sluice.contracts.records import Prepared
from sluice.sinks.delta import (
    STAGING,
    DeltaSink,
    DeltaSinkError,
    StagingMissing,
    txn_app_id,
    txn_version,
)
from sluice.spark import delta_jar
from sluice.spec import DeltaSinkConfig
from sluice.storage import to_spark_uri

from tests.fixtures.delta_tables import read_table
from tests.fixtures.pipelines import LOCAL_NOW_S3_SLOW, Workspace, new_workspace


@pytest.fixture(params=LOCAL_NOW_S3_SLOW)
def workspace(request: pytest.FixtureRequest, tmp_path: Any) -> Workspace:
    """Delta on S3 runs in make chaos here (make test covers it in tests/faults/
    test_sink_matrix.py): every Delta step is a log commit, slow on 2 cores."""
    return new_workspace(request, tmp_path)


pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        delta_jar() is None, reason="no delta-spark jar in the jars dir (make jars)"
    ),
]

DDL = "user string, minute int, clicks long, _op string, _epoch long"
KEYS = ("user", "minute")
PIPELINE = "clicks"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def changelog(
    spark: Any, epoch: int, rows: Sequence[tuple[str, int, int | None]], op: str = "upsert"
) -> tuple[Any, int]:
    """An output frame as the engine emits it (``_op`` / ``_epoch`` included)."""
    data = [(user, minute, clicks, op, epoch) for user, minute, clicks in rows]
    return spark.createDataFrame(data, DDL).repartition(2), len(data)


def make_sink(
    ws: Workspace, spark: Any, mode: str = "append", partition_by: tuple[str, ...] = ()
) -> DeltaSink:
    spec = DeltaSinkConfig(
        name="lake",
        path=ws.uri("lake"),
        mode=mode,  # type: ignore[arg-type]
        partition_by=partition_by,
        keys=KEYS if mode == "upsert" else (),
    )
    return DeltaSink(spec, ws.store("lake"), PIPELINE, lambda: spark)


def table(spark: Any, ws: Workspace) -> list[tuple[Any, ...]]:
    """What a Delta reader sees, as sorted (user, minute, clicks)."""
    return sorted((r["user"], r["minute"], r["clicks"]) for r in read_table(spark, ws.uri("lake")))


def staged(ws: Workspace) -> list[str]:
    return [i.key for i in ws.store("lake").list(f"{STAGING}/")]


def committed_version(spark: Any, ws: Workspace) -> int | None:
    return txn_version(spark, ws.uri("lake"), txn_app_id(PIPELINE, "lake"))


ROWS = [("alice", 0, 3), ("bob", 0, 1), ("carol", 1, 7)]
MORE = [("dave", 2, 4), ("erin", 2, 5)]


def test_prepared_rows_stay_invisible_then_commit_publishes_them_once(
    spark: Any, workspace: Workspace
) -> None:
    sink = make_sink(workspace, spark)
    df, n = changelog(spark, 1, ROWS)
    sink.commit(sink.prepare(1, "a1", df, n))
    df, n = changelog(spark, 2, MORE)
    prepared = sink.prepare(2, "a2", df, n)

    assert dict(prepared.details) == {
        "staging": f"{STAGING}/000000000002-a2/",
        "txn_app_id": "sluice:clicks:lake",
    }
    assert any(k.endswith(".parquet") for k in staged(workspace))
    delta = spark.read.format("delta").load(to_spark_uri(workspace.uri("lake")))
    assert delta.count() == len(ROWS)  # staged rows are not in the Delta log
    assert "_op" not in delta.columns and "_epoch" not in delta.columns

    sink.commit(prepared)
    sink.commit(prepared)  # a retry in the same process
    make_sink(workspace, spark).commit(Prepared.from_dict(prepared.to_dict()))  # a new process
    assert table(spark, workspace) == sorted(ROWS + MORE)
    assert committed_version(spark, workspace) == 2
    assert staged(workspace) == []


def test_two_threads_committing_the_same_prepared_publish_once(
    spark: Any, workspace: Workspace
) -> None:
    df, n = changelog(spark, 1, ROWS)
    prepared = make_sink(workspace, spark).prepare(1, "a1", df, n)
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def commit() -> None:
        try:
            start.wait()
            make_sink(workspace, spark).commit(prepared)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=commit) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert table(spark, workspace) == sorted(ROWS)
    assert staged(workspace) == []


def test_delta_itself_refuses_an_epoch_already_in_the_log(
    spark: Any, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second guard: with our own txn check blinded, a zombie attempt's commit of an
    epoch the table already holds goes to Delta, which skips it (append and MERGE alike)."""
    for mode in ("append", "upsert"):
        ws = Workspace(workspace.backend, workspace.uri(mode))
        df, n = changelog(spark, 1, ROWS)
        make_sink(ws, spark, mode).commit(make_sink(ws, spark, mode).prepare(1, "a1", df, n))
        df, n = changelog(spark, 1, [(u, m, 100) for u, m, _ in ROWS])  # would show if applied
        zombie = make_sink(ws, spark, mode)
        prepared = zombie.prepare(1, "zombie", df, n)
        monkeypatch.setattr(zombie, "committed", lambda epoch: False)
        zombie.commit(prepared)
        assert table(spark, ws) == sorted(ROWS), mode
        assert staged(ws) == []


def test_abort_and_abort_others_remove_staging_and_keep_the_winner(
    spark: Any, workspace: Workspace
) -> None:
    sink = make_sink(workspace, spark)
    df, n = changelog(spark, 3, ROWS)
    winner = sink.prepare(3, "win", df, n)
    zombie = sink.prepare(3, "zombie", df, n)
    other_epoch = sink.prepare(4, "zombie", df, n)

    assert make_sink(workspace, spark).abort_others(3, keep="win") > 0
    left = staged(workspace)
    assert left and all(k.startswith((winner.detail("staging"), other_epoch.detail("staging")))
                        for k in left)  # fmt: skip
    assert any(k.startswith(winner.detail("staging")) for k in left)
    sink.abort(zombie)  # idempotent: already gone
    sink.abort(other_epoch)
    sink.abort(other_epoch)
    sink.commit(winner)
    assert make_sink(workspace, spark).abort_others(3, keep=None) == 0
    assert table(spark, workspace) == sorted(ROWS)
    assert staged(workspace) == []


@pytest.mark.slow  # ~60 s; make test runs the same property in test_contract.py::TestDeltaUpsert
def test_upsert_changelog_across_epochs_ends_in_the_last_value_per_key(
    spark: Any, workspace: Workspace
) -> None:
    sink = make_sink(workspace, spark, "upsert", partition_by=("minute",))
    steps: list[tuple[int, Sequence[tuple[str, int, int | None]], str]] = [
        (1, ROWS, "upsert"),  # insert
        (2, [("alice", 0, 5), ("dave", 3, 1)], "upsert"),  # update + insert
        (3, [("bob", 0, None)], "delete"),
        (4, [("alice", 0, 6)], "upsert"),
    ]
    prepared = []
    for epoch, rows, op in steps:
        df, n = changelog(spark, epoch, rows, op)
        prepared.append(sink.prepare(epoch, f"a{epoch}", df, n))
        sink.commit(prepared[-1])
        make_sink(workspace, spark, "upsert", ("minute",)).commit(prepared[-1])  # no-op replay
    make_sink(workspace, spark, "upsert", ("minute",)).commit(prepared[1])  # late retry: no-op

    assert table(spark, workspace) == [("alice", 0, 6), ("carol", 1, 7), ("dave", 3, 1)]
    assert committed_version(spark, workspace) == 4
    assert set(read_table(spark, workspace.uri("lake"))[0]) == {"user", "minute", "clicks"}
    assert spark.conf.get("spark.databricks.delta.write.txnAppId", None) is None
    assert staged(workspace) == []


def test_partition_by_makes_delta_partition_columns(spark: Any, workspace: Workspace) -> None:
    from delta.tables import DeltaTable

    sink = make_sink(workspace, spark, partition_by=("minute",))
    df, n = changelog(spark, 1, ROWS)
    sink.commit(sink.prepare(1, "a1", df, n))

    detail = DeltaTable.forPath(spark, to_spark_uri(workspace.uri("lake"))).detail().collect()
    assert list(detail[0]["partitionColumns"]) == ["minute"]
    folders = {k.split("/")[0] for k in (i.key for i in workspace.store("lake").list())}
    assert {"minute=0", "minute=1"} <= folders
    assert table(spark, workspace) == sorted(ROWS)


def test_direct_write_is_visible_at_once_and_a_replay_adds_nothing(
    spark: Any, workspace: Workspace
) -> None:
    df, n = changelog(spark, 1, ROWS)
    make_sink(workspace, spark).write(1, "a1", df, n)
    assert table(spark, workspace) == sorted(ROWS)
    make_sink(workspace, spark).write(1, "a2", df, n)  # qos 1 replay of the same epoch
    assert table(spark, workspace) == sorted(ROWS)

    df, n = changelog(spark, 2, [("alice", 0, 9)])
    make_sink(workspace, spark).write(2, "a1", df, n)
    assert table(spark, workspace) == sorted([*ROWS, ("alice", 0, 9)])
    assert staged(workspace) == []


def test_commit_without_staging_or_txn_raises_a_clear_error(
    spark: Any, workspace: Workspace
) -> None:
    sink = make_sink(workspace, spark)
    empty, _ = changelog(spark, 1, [])
    nothing = sink.prepare(1, "a0", empty, 0)
    sink.commit(nothing)  # an epoch without rows: nothing staged, nothing to publish
    assert nothing.details == (("txn_app_id", "sluice:clicks:lake"),)

    df, n = changelog(spark, 2, ROWS)
    prepared = sink.prepare(2, "a7", df, n)
    workspace.store("lake").delete_prefix(prepared.detail("staging"))
    with pytest.raises(StagingMissing) as caught:
        make_sink(workspace, spark).commit(prepared)
    message = str(caught.value)
    assert all(part in message for part in ("pipeline clicks", "sink lake", "epoch 2", "a7"))
    assert table(spark, workspace) == []


def test_upsert_prepare_refuses_a_repeated_or_missing_key(
    spark: Any, local_workspace: Workspace
) -> None:
    sink = make_sink(local_workspace, spark, "upsert")
    df, n = changelog(spark, 1, [("alice", 0, 1), ("alice", 0, 2)])
    with pytest.raises(DeltaSinkError, match=r"epoch 1, attempt a1: key .*alice"):
        sink.prepare(1, "a1", df, n)
    with pytest.raises(DeltaSinkError, match=r"columns \['minute'\] are not in the output"):
        sink.prepare(1, "a2", df.drop("minute"), n)
    assert staged(local_workspace) == []


def test_sessions_enable_delta_and_still_read_plain_parquet_by_path(
    spark: Any, local_workspace: Workspace
) -> None:
    assert spark.conf.get("spark.sql.extensions") == "io.delta.sql.DeltaSparkSessionExtension"
    path = to_spark_uri(local_workspace.uri("plain"))
    df = spark.createDataFrame([(1, T0), (2, T0 + timedelta(seconds=1))], "n int, ts timestamp")
    df.write.parquet(path)
    df.write.mode("overwrite").parquet(path)
    assert spark.read.parquet(path).count() == 2
    assert spark.sql(f"SELECT count(*) AS n FROM parquet.`{path}`").first()["n"] == 2
