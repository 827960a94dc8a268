"""Compaction of a files sink on both backends: the rows (and an upsert sink's table) are the
same before and after, partition folders and newer epochs are left alone, and a crash after
any step is finished by the next run with the same result as a run that did not crash."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import sluice.sinks.files as files_module
from sluice.cli import main
from sluice.demo import render_click_files
from sluice.protocol import run_until_drained
from sluice.sinks import FilesSink
from sluice.sinks.compaction import (
    COMPACTION,
    CompactionConflict,
    InjectedCrash,
    compact,
)
from sluice.sinks.files import committed_keys, read_rows, read_upsert
from sluice.spec import FilesSinkConfig, parse_spec
from sluice.storage import ObjectStore, open_store, to_spark_uri
from sluice.testing.sink_contract import KEYS, changelog

from tests.fixtures.pipelines import Workspace, click_spec_dict, runtime

Tree = dict[str, bytes]
DDL = "user string, n long, ts timestamp, amount double"
REQUIRED_N = "user string, n long not null, ts timestamp, amount double"  # Spark: required
T0 = datetime(2026, 1, 1, tzinfo=UTC)
M0 = "window_start=2026-01-01 00%3A00%3A00"  # the window_start folders Spark names
M1 = "window_start=2026-01-01 00%3A01%3A00"
M2 = "window_start=2026-01-01 00%3A02%3A00"
M3 = "window_start=2026-01-01 00%3A03%3A00"
# (epoch, [(user, minute, clicks)], op): one changelog frame per epoch of the upsert tree
UPSERT_EPOCHS = [
    (1, [("alice", 0, 3), ("bob", 0, 1), ("carol", 1, 7), ("alice", 2, 2)], "upsert"),
    (2, [("alice", 0, 5), ("dave", 3, 1)], "upsert"),
    (3, [("bob", 0, None)], "delete"),
    (3, [("dave", 3, 2)], "upsert"),
    (4, [("alice", 0, 6)], "upsert"),
    (5, [("carol", 1, 8)], "upsert"),
]


def click_rows(count: int, start: int, users: tuple[str, ...] = ("u",)) -> list[tuple[Any, ...]]:
    def at(i: int) -> datetime:
        return T0 + timedelta(seconds=i, milliseconds=250)

    return [(users[i % len(users)], i, at(i), i * 1.5) for i in range(start, start + count)]


def committed_tree(
    spark: Any, root: Path, spec: FilesSinkConfig, frames: list[tuple[int, Any]]
) -> Tree:
    """Commit each (epoch, frame) through a real files sink; the committed files' bytes."""
    store = open_store(str(root))
    sink = FilesSink(spec, store)
    for epoch, df in frames:
        sink.commit(sink.prepare(epoch, f"a{epoch}", df, df.count()))
    return {key: store.get(key) for key in committed_keys(store)}


@pytest.fixture(scope="module")
def trees(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Tree]:
    """Spark-written sink outputs, made once and copied into each test's store:

    * ``append``: Parquet, epochs 1-5 of 2 rows in one file (epoch 2: 4 rows, two files;
      epoch 3 with ``n`` required, as Spark writes a column it knows has no nulls);
    * ``upsert``: a Parquet changelog partitioned by ``window_start`` (UPSERT_EPOCHS);
    * ``jsonl``: JSON lines partitioned by ``user``, epochs 1-4.
    """
    root = tmp_path_factory.mktemp("trees")

    def clicks(epoch: int, count: int, users: tuple[str, ...] = ("u",)) -> Any:
        ddl = REQUIRED_N if epoch == 3 else DDL
        return spark.createDataFrame(click_rows(count, epoch * 10, users), ddl).repartition(2)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(files_module, "ROWS_PER_FILE", 2)  # epoch 2's 4 rows: two files
        append_frames = [(e, clicks(e, 4 if e == 2 else 2)) for e in range(1, 6)]
        append = committed_tree(
            spark, root / "append", FilesSinkConfig(name="out", path="-"), append_frames
        )
    by_epoch: dict[int, Any] = {}
    for epoch, rows, op in UPSERT_EPOCHS:
        df = changelog(spark, epoch, rows, op)[0]
        by_epoch[epoch] = by_epoch[epoch].unionAll(df) if epoch in by_epoch else df
    upsert_spec = FilesSinkConfig(
        name="out", path="-", mode="upsert", keys=KEYS, partition_by=("window_start",)
    )
    upsert = committed_tree(spark, root / "upsert", upsert_spec, sorted(by_epoch.items()))
    jsonl_spec = FilesSinkConfig(name="out", path="-", format="jsonl", partition_by=("user",))
    jsonl_frames = [(e, clicks(e, 4, ("a", "b"))) for e in range(1, 5)]
    jsonl = committed_tree(spark, root / "jsonl", jsonl_spec, jsonl_frames)
    return {"append": append, "upsert": upsert, "jsonl": jsonl}


def load(ws: Workspace, tree: Tree, sub: str = "out") -> ObjectStore:
    store = ws.store(sub)
    for key, data in tree.items():
        store.put(key, data)
    return store


def files(store: ObjectStore) -> Tree:
    return {key: store.get(key) for key in committed_keys(store)}


def ordered(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in rows)


def spark_view(spark: Any, ws: Workspace, sub: str = "out") -> list[str]:
    """Spark's own reader, partition discovery included."""
    return ordered([r.asDict() for r in spark.read.parquet(to_spark_uri(ws.uri(sub))).collect()])


def test_compacts_append_files_and_leaves_newer_epochs(
    spark: Any, workspace: Workspace, trees: dict[str, Tree]
) -> None:
    store = load(workspace, trees["append"])
    rows, seen_by_spark = ordered(read_rows(store, "parquet")), spark_view(spark, workspace)
    assert len(trees["append"]) == 6
    epoch_3 = pq.ParquetFile(io.BytesIO(trees["append"]["part-000000000003-00000.parquet"]))
    assert not epoch_3.schema_arrow.field("n").nullable  # merged with files where it is

    report = compact(store, "parquet", up_to_epoch=4)

    after = files(store)
    merged, newest = (
        "part-000000000001-000000000004-c00000.parquet",
        "part-000000000005-00000.parquet",
    )
    assert sorted(after) == [merged, newest]
    assert after[newest] == trees["append"][newest]
    assert ordered(read_rows(store, "parquet")) == rows
    assert spark_view(spark, workspace) == seen_by_spark
    # the timestamp encoding Spark wrote (INT96) is kept, with Spark's schema metadata
    parquet = pq.ParquetFile(io.BytesIO(after[merged]))
    assert {c.name: c.physical_type for c in parquet.schema}["ts"] == "INT96"
    assert b"org.apache.spark.sql.parquet.row.metadata" in parquet.schema_arrow.metadata
    assert store.list(f"{COMPACTION}/") == []
    replaced = [k for k in trees["append"] if not k.startswith("part-000000000005")]
    assert (report.files_before, report.files_after) == (6, 2)
    assert (report.replaced, report.written, report.rows) == (5, 1, 10)
    assert report.bytes_before == sum(len(trees["append"][k]) for k in replaced)
    assert report.bytes_after == len(after[merged])
    assert report.id is not None and report.id.startswith("000000000001-000000000004-")
    assert report.recovered == ()


def test_compacts_an_upsert_changelog_per_partition_folder(
    spark: Any, workspace: Workspace, trees: dict[str, Tree]
) -> None:
    store = load(workspace, trees["upsert"])
    table = ordered(read_upsert(store, "parquet", KEYS))
    changes, seen_by_spark = ordered(read_rows(store, "parquet")), spark_view(spark, workspace)
    assert len(trees["upsert"]) == 9

    report = compact(store, "parquet", up_to_epoch=4)

    assert sorted(files(store)) == [
        f"{M0}/part-000000000001-000000000004-c00000.parquet",  # epochs 1, 2, 3, 4
        f"{M1}/part-000000000001-00001.parquet",  # one file up to epoch 4: left alone
        f"{M1}/part-000000000005-00000.parquet",  # above up_to_epoch
        f"{M2}/part-000000000001-00002.parquet",
        f"{M3}/part-000000000002-000000000003-c00000.parquet",  # epochs 2, 3
    ]
    assert (report.files_before, report.files_after, report.replaced) == (9, 5, 6)
    assert ordered(read_upsert(store, "parquet", KEYS)) == table
    assert ordered(read_rows(store, "parquet")) == changes  # _op and _epoch included
    assert spark_view(spark, workspace) == seen_by_spark
    assert store.list(f"{COMPACTION}/") == []


def test_compacts_jsonl_by_concatenating_lines(
    workspace: Workspace, trees: dict[str, Tree]
) -> None:
    tree = trees["jsonl"]
    store = load(workspace, tree)
    rows = ordered(read_rows(store, "jsonl"))

    compact(store, "jsonl", up_to_epoch=3)

    after = files(store)
    for folder in ("user=a", "user=b"):
        merged = after[f"{folder}/part-000000000001-000000000003-c00000.jsonl"]
        inputs = sorted(k for k in tree if k.startswith(folder) and "-000000000004-" not in k)
        assert len(inputs) == 3 and merged == b"".join(tree[k] for k in inputs)
        newest = [k for k in after if k.startswith(f"{folder}/part-000000000004-")]
        assert len(newest) == 1 and after[newest[0]] == tree[newest[0]]
    assert len(after) == 4
    assert ordered(read_rows(store, "jsonl")) == rows


def test_target_rows_cuts_merged_files_between_input_files(
    local_workspace: Workspace, trees: dict[str, Tree]
) -> None:
    store = load(local_workspace, trees["append"])
    rows = ordered(read_rows(store, "parquet"))
    # inputs in order: epoch 1 (2 rows), epoch 2 (2 + 2), epoch 3 (2), epoch 4 (2)
    report = compact(store, "parquet", up_to_epoch=4, target_rows=5)
    assert sorted(files(store)) == [
        "part-000000000001-000000000002-c00000.parquet",  # 2 + 2 rows
        "part-000000000002-000000000003-c00001.parquet",  # 2 + 2
        "part-000000000004-000000000004-c00002.parquet",  # 2
        "part-000000000005-00000.parquet",
    ]
    assert report.written == 3 and report.rows == 10
    assert ordered(read_rows(store, "parquet")) == rows


@pytest.mark.parametrize("point", ["written", "manifest", "moved", "deleted"])
def test_a_crash_after_each_step_is_finished_by_the_next_run(
    point: Any, workspace: Workspace, trees: dict[str, Tree]
) -> None:
    reference = load(workspace, trees["upsert"], "ref")
    compact(reference, "parquet", up_to_epoch=4)
    store = load(workspace, trees["upsert"])
    table = ordered(read_upsert(store, "parquet", KEYS))
    changes = read_rows(store, "parquet")

    with pytest.raises(InjectedCrash):
        compact(store, "parquet", up_to_epoch=4, crash_after=point)

    left = [i.key for i in store.list(f"{COMPACTION}/")]
    manifests = [k for k in left if k.endswith(".json") and k.count("/") == 1]
    if point == "written":  # before the commit point: nothing visible changed
        assert files(store) == trees["upsert"] and manifests == []
    elif point == "manifest":
        assert files(store) == trees["upsert"] and len(manifests) == 1
    elif point == "moved":  # the documented window: new files and the ones they replace
        assert len(read_rows(store, "parquet")) == len(changes) + 7
        with pytest.raises(ValueError, match="written twice"):
            read_upsert(store, "parquet", KEYS)
    else:
        assert files(store) == files(reference) and len(manifests) == 1

    report = compact(store, "parquet", up_to_epoch=4)

    assert files(store) == files(reference)
    assert store.list(f"{COMPACTION}/") == []
    assert ordered(read_upsert(store, "parquet", KEYS)) == table
    assert len(report.recovered) == 1 and report.recovered[0].startswith("000000000001-")
    # after the commit point the re-run only finishes; before it, it compacts again
    assert (report.id is None) == (point != "written")


def test_a_crash_between_moves_is_finished_by_the_next_run(
    workspace: Workspace, trees: dict[str, Tree]
) -> None:
    reference = load(workspace, trees["upsert"], "ref")
    compact(reference, "parquet", up_to_epoch=4)
    store = load(workspace, trees["upsert"])
    with pytest.raises(InjectedCrash):
        compact(store, "parquet", up_to_epoch=4, crash_after="manifest")
    staged = sorted(k for k in (i.key for i in store.list(f"{COMPACTION}/")) if k.count("/") > 1)
    assert len(staged) == 2
    store.move(staged[0], staged[0].split("/", 2)[2])  # the first of two moves happened

    compact(store, "parquet", up_to_epoch=4)
    assert files(store) == files(reference)
    assert store.list(f"{COMPACTION}/") == []


def test_later_runs_compact_only_new_small_files(
    local_workspace: Workspace, trees: dict[str, Tree]
) -> None:
    store = load(local_workspace, trees["append"])
    rows = ordered(read_rows(store, "parquet"))
    first = compact(store, "parquet", up_to_epoch=2)
    merged = "part-000000000001-000000000002-c00000.parquet"
    assert first.replaced == 3 and merged in files(store)
    kept = files(store)[merged]

    again = compact(store, "parquet", up_to_epoch=2)
    assert again.id is None and again.files_before == again.files_after == 4
    single = compact(store, "parquet", up_to_epoch=3)  # epoch 3 alone: one file, left as is
    assert single.id is None

    compact(store, "parquet", up_to_epoch=5)
    assert sorted(files(store)) == [merged, "part-000000000003-000000000005-c00000.parquet"]
    assert files(store)[merged] == kept  # a compacted file is never rewritten
    assert ordered(read_rows(store, "parquet")) == rows


def test_a_taken_name_is_a_conflict_and_leaves_nothing_behind(
    local_workspace: Workspace, trees: dict[str, Tree]
) -> None:
    store = load(local_workspace, trees["append"])
    taken = "part-000000000001-000000000004-c00000.parquet"
    store.put(taken, trees["append"]["part-000000000005-00000.parquet"])
    before = files(store)
    with pytest.raises(CompactionConflict, match=taken):
        compact(store, "parquet", up_to_epoch=4)
    assert files(store) == before
    assert store.list(f"{COMPACTION}/") == []


def test_cli_compacts_a_pipeline_sink_up_to_the_epoch_before_the_latest(
    spark: Any, local_workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = local_workspace
    # 90 s of events a file, one file an epoch: every epoch closes a 1-minute window
    ws.put_files(render_click_files(files=3, events_per_file=20, seconds_per_file=90.0))
    body = click_spec_dict(ws, name="compact_cli")
    body["source"]["max_files_per_epoch"] = 1
    spec_path = Path(ws.uri("pipeline.json")[len("file://") :])
    spec_path.write_text(json.dumps(body))  # JSON is YAML
    rt = runtime(parse_spec(body))
    assert len(run_until_drained(rt, spark)) == 3
    store = ws.store("out")
    rows, before = ordered(read_rows(store, "parquet")), files(store)
    newest = sorted(k for k in before if k.startswith("part-000000000003-"))
    assert newest and len(before) > len(newest) + 1

    assert main(["compact", str(spec_path), "--sink", "out"]) == 0
    assert "files (sink)" in capsys.readouterr().out
    after = files(store)
    assert ordered(read_rows(store, "parquet")) == rows
    assert {k: after[k] for k in newest} == {k: before[k] for k in newest}  # newest untouched
    assert [k for k in after if k not in newest] == [
        "part-000000000001-000000000002-c00000.parquet"
    ]

    assert main(["compact", str(spec_path), "--sink", "out", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["up_to_epoch"] == 2 and report["id"] is None
    assert main(["compact", str(spec_path), "--sink", "nope"]) == 2
    assert main(["compact", str(spec_path), "--sink", "out", "--up-to-epoch", "4"]) == 2
