"""Lookup (stream–table) joins, #36 item 1 (docs/joins.md): each click gets its user's country
and tier from a Parquet table; the table version an epoch joins is the one its plan pinned,
so a retry joins what the first attempt would have, whatever the table became since.

The clicks come one JSON lines file per epoch; the table is a folder of Parquet files that
the tests rewrite between epochs as a table writer would (new files, old ones removed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console
from sluice.cli import main
from sluice.operators.exceptions import LookupTableError
from sluice.operators.lookup import lookup_tables
from sluice.pipeline import LOOKUP_KINDS
from sluice.protocol import (
    RunRequest,
    commit_epoch,
    plan_epoch,
    process_epoch,
    run_until_drained,
)
from sluice.protocol.exceptions import InvalidRunRequest, ProtocolError
from sluice.report import checkpoint_rows, checkpoint_table
from sluice.spec import parse_spec
from sluice.spec.model import LOOKUP_TABLES

from tests.fixtures.csv_lookup import CsvTable
from tests.fixtures.pipelines import committed_rows, runtime

pytestmark = pytest.mark.spark

T0 = datetime(2024, 1, 1)


def _clicks(tmp_path: Path, name: str, users: list[str], second: int = 0) -> None:
    """One file of clicks, the i-th ``second + i`` seconds after T0, of amount i + 1."""
    folder = tmp_path / "in"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {
                "user": u,
                "ts": (T0 + timedelta(seconds=second + i)).isoformat(),
                "amount": float(i + 1),
            }
        )
        for i, u in enumerate(users)
    ]
    (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")


def _table(
    tmp_path: Path,
    name: str,
    rows: dict[str, tuple[str, int]],
    *,
    drop: bool = True,
    key_type: pa.DataType | None = None,
) -> None:
    """A new version of the users table: ``name``.parquet, the older files removed."""
    folder = tmp_path / "users"
    folder.mkdir(exist_ok=True)
    if drop:
        for old in folder.glob("*.parquet"):
            old.unlink()
    table = pa.table(
        {
            "user_id": pa.array([int(k) if key_type else k for k in rows], key_type or pa.string()),
            "country": pa.array([c for c, _ in rows.values()], pa.string()),
            "tier": pa.array([t for _, t in rows.values()], pa.int32()),
        }
    )
    pq.write_table(table, folder / f"{name}.parquet")


def _spec(tmp_path: Path, how: str = "left", table: Any = None, **extra: Any) -> Any:
    return parse_spec(spec_body(tmp_path, how, table, **extra))


def spec_body(tmp_path: Path, how: str = "left", table: Any = None, **extra: Any) -> Any:
    """The pipeline of these tests: clicks enriched from the users table, written as is."""
    root = tmp_path.as_uri()
    table = table or {"type": "files", "path": f"{root}/users", "format": "parquet"}
    return dict(
        {
            "name": "lookup",
            "source": {
                "type": "files",
                "path": f"{root}/in",
                "format": "jsonl",
                "schema": {"user": "string", "ts": "timestamp", "amount": "double"},
                "max_files_per_epoch": 1,
            },
            "event_time": {"column": "ts", "max_out_of_orderness": "5s"},
            "lookup": [
                {
                    "name": "users",
                    "table": table,
                    "on": {"user": "user_id"},
                    "columns": {"country": "string", "tier": "int"},
                    "how": how,
                }
            ],
            "sinks": [{"name": "out", "type": "files", "path": f"{root}/out", "format": "jsonl"}],
            "checkpoint": {"storage": f"{root}/ckpt"},
        },
        **extra,
    )


def _out(spec: Any) -> dict[str, tuple[Any, Any]]:
    return {
        f"{r['user']}@{r['amount']:g}": (r["country"], r["tier"])
        for r in committed_rows(spec, "out")
    }


V1 = {"ann": ("de", 1), "bob": ("fr", 2)}
V2 = {"ann": ("at", 3), "bob": ("fr", 2), "cat": ("it", 1)}


def test_a_left_lookup_gives_each_record_its_row_and_nulls_where_there_is_none(
    spark: Any, tmp_path: Path
) -> None:
    _table(tmp_path, "v1", V1)
    _clicks(tmp_path, "a", ["ann", "bob", "zed"])
    spec = _spec(tmp_path)
    assert spec.output_columns() == ("user", "ts", "amount", "country", "tier")
    outcomes = run_until_drained(runtime(spec), spark)
    assert _out(spec) == {"ann@1": ("de", 1), "bob@2": ("fr", 2), "zed@3": (None, None)}
    assert outcomes[-1].checkpoint.result.stats.filtered == 0


def test_an_inner_lookup_filters_out_records_without_a_row(spark: Any, tmp_path: Path) -> None:
    _table(tmp_path, "v1", V1)
    _clicks(tmp_path, "a", ["ann", "zed", "bob", "zed"])
    spec = _spec(tmp_path, "inner", filter="country <> 'fr'")  # the filter sees the columns
    (outcome,) = run_until_drained(runtime(spec), spark)
    assert _out(spec) == {"ann@1": ("de", 1)}
    stats = outcome.checkpoint.result.stats
    assert (stats.records_read, stats.filtered, stats.accepted) == (4, 3, 1)


def test_each_epoch_joins_the_table_version_its_plan_pinned(spark: Any, tmp_path: Path) -> None:
    """Epoch 2 is planned under v1 and the table becomes v2 before it runs (a retry after a
    crash sees the same): it joins v1. Epoch 3, planned after, joins v2."""
    _table(tmp_path, "v1", V1, drop=False)
    spec = _spec(tmp_path)
    rt = runtime(spec)
    _clicks(tmp_path, "a", ["ann"])
    assert len(run_until_drained(rt, spark)) == 1
    _clicks(tmp_path, "b", ["ann", "cat"], second=10)
    plan = plan_epoch(rt)
    assert plan is not None and plan.epoch == 2
    assert dict(plan.tables)["users"].files[0][0] == "v1.parquet"
    # v2 written beside v1, which stays until the epochs pinned to it are done
    _table(tmp_path, "v2", V2, drop=False)
    record = process_epoch(rt, spark, plan.epoch)
    commit_epoch(rt, plan.epoch, record.attempt)
    (tmp_path / "users" / "v1.parquet").unlink()
    _clicks(tmp_path, "c", ["ann", "cat"], second=20)
    (outcome,) = run_until_drained(rt, spark)
    assert [k for k, _ in outcome.checkpoint.plan.tables[0][1].files] == ["v2.parquet"]
    rows = {
        (r["user"], r["ts"][17:19]): (r["country"], r["tier"]) for r in committed_rows(spec, "out")
    }
    assert rows == {
        ("ann", "00"): ("de", 1),
        ("ann", "10"): ("de", 1),  # planned under v1
        ("cat", "11"): (None, None),
        ("ann", "20"): ("at", 3),
        ("cat", "21"): ("it", 1),
    }


def test_a_pinned_file_rewritten_in_place_is_refused_naming_it(spark: Any, tmp_path: Path) -> None:
    _table(tmp_path, "v1", V1)
    _clicks(tmp_path, "a", ["ann"])
    spec = _spec(tmp_path)
    rt = runtime(spec)
    plan = plan_epoch(rt)
    assert plan is not None
    _table(tmp_path, "v1", V2)  # same name, other rows: the pinned version is lost
    with pytest.raises(LookupTableError, match=r"epoch 1: lookup users .*v1\.parquet changed"):
        process_epoch(rt, spark, plan.epoch)
    assert committed_rows(spec, "out") == []


def test_a_key_in_two_rows_is_refused_naming_the_key(spark: Any, tmp_path: Path) -> None:
    _table(tmp_path, "v1", V1)
    _table(tmp_path, "v1b", {"bob": ("es", 9)}, drop=False)
    _clicks(tmp_path, "a", ["ann"])
    with pytest.raises(LookupTableError, match=r"the key user_id='bob' is in 2 rows"):
        run_until_drained(runtime(_spec(tmp_path)), spark)


def test_a_key_of_another_type_is_refused_naming_both_columns(spark: Any, tmp_path: Path) -> None:
    _table(tmp_path, "v1", {"1": ("de", 1)}, key_type=pa.int64())
    _clicks(tmp_path, "a", ["ann"])
    expected = r"key column 'user_id' is bigint, the record's 'user' is string"
    with pytest.raises(LookupTableError, match=expected):
        run_until_drained(runtime(_spec(tmp_path)), spark)


def test_a_table_folder_without_files_is_refused_at_plan(spark: Any, tmp_path: Path) -> None:
    _clicks(tmp_path, "a", ["ann"])
    with pytest.raises(ProtocolError, match=r"lookup users: no parquet files under .*users"):
        plan_epoch(runtime(_spec(tmp_path)))


def test_a_warm_context_reads_an_unchanged_table_once(spark: Any, tmp_path: Path) -> None:
    _table(tmp_path, "v1", V1)
    _clicks(tmp_path, "a", ["ann"])
    spec = _spec(tmp_path)
    rt = runtime(spec)
    plan = plan_epoch(rt)
    assert plan is not None
    pins = dict(plan.tables)
    first = lookup_tables(spark, spec, pins, 1, rt.lookup_kinds)["users"]
    assert lookup_tables(spark, spec, pins, 2, rt.lookup_kinds)["users"] is first  # no new read
    _table(tmp_path, "v2", V2)
    from sluice.protocol.lookups import table_pins

    newer = dict(table_pins(rt, 3, None))
    assert newer["users"].version != pins["users"].version
    second = lookup_tables(spark, spec, newer, 3, rt.lookup_kinds)["users"]
    assert second is not first
    assert sorted(r["country"] for r in second.collect()) == ["at", "fr", "it"]


def test_windows_can_key_and_aggregate_by_looked_up_columns(spark: Any, tmp_path: Path) -> None:
    _table(tmp_path, "v1", V1)
    _clicks(tmp_path, "a", ["ann", "bob", "ann", "zed"])
    _clicks(tmp_path, "b", ["bob"], second=69)  # 00:01:09: closes the first minute
    root = tmp_path.as_uri()
    spec = _spec(
        tmp_path,
        key_by=["country"],
        window={"type": "tumbling", "size": "1m"},
        aggregates={"n": "count(*)", "total": "sum(amount)", "best": "max(tier)"},
        sinks=[{"name": "out", "type": "files", "path": f"{root}/out", "format": "jsonl"}],
    )
    run_until_drained(runtime(spec), spark)
    rows = {r["country"]: (r["n"], r["total"], r["best"]) for r in committed_rows(spec, "out")}
    assert rows == {"de": (2, 4.0, 1), "fr": (1, 2.0, 2), None: (1, 4.0, None)}


def _rewind_to_1(rt: Any, spark: Any, **conf: Any) -> None:
    """Rewind to checkpoint 1 (the run request the DAG's form sends), then run the replay."""
    request = RunRequest.from_conf(rt.name, {"restore_from": "checkpoint", "epoch": 1, **conf})
    plan = request.resolve(rt).plan(rt)
    assert plan is not None and plan.retract_after == 1
    record = process_epoch(rt, spark, plan.epoch)
    commit_epoch(rt, plan.epoch, record.attempt)
    run_until_drained(rt, spark)


def _three_epochs_then_v2(spark: Any, tmp_path: Path) -> tuple[Any, Any]:
    """Epochs 1 and 2 join v1, epoch 3 v2 (written beside v1: a pinned version is kept)."""
    _table(tmp_path, "v1", V1, drop=False)
    spec = _spec(tmp_path)
    rt = runtime(spec)
    for name, second in (("a", 0), ("b", 10)):
        _clicks(tmp_path, name, ["ann"], second)
        run_until_drained(rt, spark)
    _table(tmp_path, "v2", V2, drop=False)
    (tmp_path / "users" / "v1.parquet").rename(tmp_path / "users" / "_v1.parquet")
    _clicks(tmp_path, "c", ["ann"], 20)
    (outcome,) = run_until_drained(rt, spark)
    assert [k for k, _ in outcome.checkpoint.plan.tables[0][1].files] == ["v2.parquet"]
    (tmp_path / "users" / "_v1.parquet").rename(tmp_path / "users" / "v1.parquet")
    return spec, rt


def _by_second(spec: Any) -> dict[str, Any]:
    return {r["ts"][17:19]: r["country"] for r in committed_rows(spec, "out")}


def test_a_rewind_replays_each_epoch_with_the_table_version_it_joined(
    spark: Any, tmp_path: Path
) -> None:
    spec, rt = _three_epochs_then_v2(spark, tmp_path)
    assert _by_second(spec) == {"00": "de", "10": "de", "20": "at"}
    _rewind_to_1(rt, spark)
    assert _by_second(spec) == {"00": "de", "10": "de", "20": "at"}  # the same output again
    replays = [rt.repo.plan(e) for e in (4, 5)]
    assert [p.replays for p in replays if p] == [2, 3]


def test_a_rewind_asked_for_current_versions_joins_the_table_as_it_is(
    spark: Any, tmp_path: Path
) -> None:
    spec, rt = _three_epochs_then_v2(spark, tmp_path)
    (tmp_path / "users" / "v1.parquet").unlink()
    _rewind_to_1(rt, spark, lookup_versions="current")
    assert _by_second(spec) == {"00": "de", "10": "at", "20": "at"}
    assert [p.replays for e in (4, 5) if (p := rt.repo.plan(e))] == [None, None]


def test_a_pinned_replay_whose_table_version_is_gone_is_refused_naming_the_way_out(
    spark: Any, tmp_path: Path
) -> None:
    _, rt = _three_epochs_then_v2(spark, tmp_path)
    (tmp_path / "users" / "v1.parquet").unlink()
    with pytest.raises(LookupTableError, match=r"v1\.parquet is gone.*lookup_versions: current"):
        _rewind_to_1(rt, spark)


V3 = {"ann": ("pl", 4), "bob": ("fr", 2)}
REWIND = ["--restore-from", "checkpoint", "--epoch", "1", "--max-files", "3", "--quiet"]


def _spec_file(tmp_path: Path) -> str:
    """The spec of these tests as a file, for the CLI (JSON is YAML)."""
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec_body(tmp_path)))
    return str(path)


def _three_versions(spark: Any, tmp_path: Path) -> tuple[Any, Any]:
    """Epochs 1-3 each join their own version of the table, replaced between them (v1, v2,
    v3: the older version's files deleted): the files epoch 2 pinned are gone."""
    spec = _spec(tmp_path)
    rt = runtime(spec)
    for (name, second), (version, rows) in zip(
        (("a", 0), ("b", 10), ("c", 20)), (("v1", V1), ("v2", V2), ("v3", V3)), strict=True
    ):
        _table(tmp_path, version, rows)
        _clicks(tmp_path, name, ["ann"], second)
        run_until_drained(rt, spark)
    assert _by_second(spec) == {"00": "de", "10": "at", "20": "pl"}
    return spec, rt


def test_a_refused_pinned_rewind_can_be_retried_with_current_versions(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pinned rewind is refused (epoch 2's version is gone) and leaves no plan behind:
    neither ``sluice restore`` nor the same rewind asking for the current versions is taken
    as its retry; the latter joins the table as it is now."""
    spec, rt = _three_versions(spark, tmp_path)
    path = _spec_file(tmp_path)
    assert main(["run", path, *REWIND]) == 2
    refused = capsys.readouterr().err
    assert "v2.parquet is gone" in refused and "lookup_versions: current" in refused
    assert main(["restore", path, "--epoch", "1"]) == 2  # pinned too: refused the same way
    assert "v2.parquet is gone" in capsys.readouterr().err
    assert rt.repo.plan(4) is None  # nothing planned that a later request would retry
    assert main(["run", path, *REWIND, "--lookup-versions", "current"]) == 0
    assert _by_second(spec) == {"00": "de", "10": "pl", "20": "pl"}
    assert rt.repo.plan(4) is not None and rt.repo.plan(4).replays is None


def test_a_pinned_rewind_after_a_current_one_joins_what_the_rewound_epochs_joined(
    spark: Any, tmp_path: Path
) -> None:
    """A row for cat lands in the table after epochs 1-3 (which found none); a pinned rewind
    replays what they joined, a current one joins cat's row, and a pinned rewind after that
    replays what the epochs it rewinds (the current rewind's) joined: cat's row, not the
    versions the first run joined, retracted since."""
    _table(tmp_path, "v1", V1)
    spec = _spec(tmp_path)
    rt = runtime(spec)
    for name, second in (("a", 0), ("b", 10), ("c", 20)):
        _clicks(tmp_path, name, ["cat"], second)
        run_until_drained(rt, spark)
    _table(tmp_path, "cat", {"cat": ("it", 1)}, drop=False)
    path = _spec_file(tmp_path)
    assert main(["run", path, *REWIND]) == 0  # epoch 4 replays 2..3 as they were
    assert _by_second(spec) == {"00": None, "10": None, "20": None}
    assert main(["run", path, *REWIND, "--lookup-versions", "current"]) == 0  # epoch 5
    assert _by_second(spec) == {"00": None, "10": "it", "20": "it"}
    assert main(["run", path, *REWIND]) == 0  # epoch 6 replays 5, which joined cat's row
    assert _by_second(spec) == {"00": None, "10": "it", "20": "it"}
    assert [rt.repo.plan(e).replays for e in (4, 5, 6)] == [2, None, 5]


def test_a_planned_pinned_rewind_is_not_taken_as_the_retry_of_a_current_one(
    spark: Any, tmp_path: Path
) -> None:
    """A pinned rewind planned and not committed (a crashed run): the same rewind asking for
    the current versions is another request, refused naming the planned epoch; the pinned
    request again is its retry."""
    _, rt = _three_epochs_then_v2(spark, tmp_path)
    pinned = {"restore_from": "checkpoint", "epoch": 1}
    plan = RunRequest.from_conf(rt.name, pinned).resolve(rt).plan(rt)
    assert plan is not None and plan.replays == 2
    current = RunRequest.from_conf(rt.name, {**pinned, "lookup_versions": "current"})
    with pytest.raises(InvalidRunRequest, match="epoch 4 is already planned as this rewind"):
        current.resolve(rt)
    assert RunRequest.from_conf(rt.name, pinned).resolve(rt).plan(rt) == plan


def _version(tmp_path: Path, name: str, rows: dict[str, tuple[str, int]]) -> None:
    """A new version of the users table; the older ones kept aside (``_`` names: not data)."""
    for old in (tmp_path / "users").glob("[!_]*.parquet"):
        old.rename(old.with_name(f"_{old.name}"))
    _table(tmp_path, name, rows, drop=False)


def test_each_replay_of_a_pinned_rewind_joins_what_its_rewound_epoch_joined(
    spark: Any, tmp_path: Path
) -> None:
    """Epochs 1-3 join v1, v2, v3; a rewind to 2 with the current versions replays epoch 3's
    input as epoch 4, joining v4. A pinned rewind to 1, a file per epoch, replays the epochs
    it retracts, 2 and 4: the second replay joins v4 as epoch 4 did, not v3 as epoch 3 (which
    the first rewind retracted) did."""
    spec = _spec(tmp_path)
    rt = runtime(spec)
    (tmp_path / "users").mkdir()
    for (name, second), (version, rows) in zip(
        (("a", 0), ("b", 10), ("c", 20)), (("v1", V1), ("v2", V2), ("v3", V3)), strict=True
    ):
        _version(tmp_path, version, rows)
        _clicks(tmp_path, name, ["ann"], second)
        run_until_drained(rt, spark)
    _version(tmp_path, "v4", {"ann": ("se", 5)})
    path = _spec_file(tmp_path)
    assert main(["run", path, *REWIND[:3], "2", "--lookup-versions", "current", "--quiet"]) == 0
    assert _by_second(spec) == {"00": "de", "10": "at", "20": "se"}
    for kept in (tmp_path / "users").glob("_*.parquet"):  # every version readable again
        kept.rename(kept.with_name(kept.name[1:]))
    assert main(["run", path, *REWIND[:3], "1", "--max-files", "1", "--quiet"]) == 0
    assert [rt.repo.plan(e).replays for e in (5, 6)] == [2, 4]
    assert _by_second(spec) == {"00": "de", "10": "at", "20": "se"}


@pytest.fixture
def csv_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """``type: csv`` registered (tests/fixtures/csv_lookup.py): the spec's line, the kind's."""
    monkeypatch.setitem(LOOKUP_TABLES, CsvTable.type, ("type", "path"))
    monkeypatch.setitem(LOOKUP_KINDS, CsvTable.type, CsvTable())


def _csv_table(tmp_path: Path, name: str, rows: dict[str, tuple[str, int]]) -> None:
    """A new version of the users table as ``name``.csv, the older files removed."""
    folder = tmp_path / "users_csv"
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.csv"):
        old.unlink()
    lines = ["user_id,country,tier"] + [f"{k},{c},{t}" for k, (c, t) in rows.items()]
    (folder / f"{name}.csv").write_text("\n".join(lines) + "\n")


def test_a_lookup_kind_of_ones_own_pins_and_joins_each_epochs_version(
    spark: Any, tmp_path: Path, csv_kind: None
) -> None:
    table = {"type": "csv", "path": f"{tmp_path.as_uri()}/users_csv"}
    spec = _spec(tmp_path, table=table)
    rt = runtime(spec)
    _csv_table(tmp_path, "v1", V1)
    _clicks(tmp_path, "a", ["ann", "cat"])
    run_until_drained(rt, spark)
    _csv_table(tmp_path, "v2", V2)
    _clicks(tmp_path, "b", ["ann", "cat"], second=10)
    (outcome,) = run_until_drained(rt, spark)
    assert outcome.checkpoint.plan.tables[0][1].kind == "csv"
    rows = {
        (r["user"], r["ts"][17:19]): (r["country"], r["tier"]) for r in committed_rows(spec, "out")
    }
    assert rows == {
        ("ann", "00"): ("de", 1),
        ("cat", "01"): (None, None),
        ("ann", "10"): ("at", 3),
        ("cat", "11"): ("it", 1),
    }
    _rewind_to_1(rt, spark)  # epoch 3 replays epoch 2 with the version it pinned (checked)
    assert rt.repo.plan(3).replays == 2
    assert _by_second(spec) == {"00": "de", "01": None, "10": "at", "11": "it"}


def _delta_table(spark: Any, tmp_path: Path, rows: dict[str, tuple[str, int]]) -> None:
    """A new version of the users table as a Delta table (the first write: version 0)."""
    frame = spark.createDataFrame(
        [(k, c, t) for k, (c, t) in rows.items()], "user_id string, country string, tier int"
    )
    frame.write.format("delta").mode("overwrite").save(str(tmp_path / "users_delta"))


def _iceberg_table(tmp_path: Path, rows: dict[str, tuple[str, int]]) -> None:
    """A new snapshot of Iceberg table lake.users (a SQLite catalog; created the first time)."""
    from pyiceberg.exceptions import NoSuchTableError
    from sluice.storage.catalogs import open_catalog

    catalog = open_catalog(f"sqlite:///{tmp_path}/catalog.db", str(tmp_path / "warehouse"), None)
    data = pa.table(
        {
            "user_id": pa.array(list(rows), pa.string()),
            "country": pa.array([c for c, _ in rows.values()], pa.string()),
            "tier": pa.array([t for _, t in rows.values()], pa.int32()),
        }
    )
    try:
        catalog.load_table(("lake", "users")).overwrite(data)
    except NoSuchTableError:
        catalog.create_namespace_if_not_exists("lake")
        catalog.create_table(("lake", "users"), schema=data.schema).append(data)


@pytest.fixture(params=["delta", "iceberg"])
def versioned_table(
    request: pytest.FixtureRequest, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, str], Callable[[dict[str, tuple[str, int]]], None]]:
    """A table type whose versions the table keeps: its spec, and how to write a version."""
    if request.param == "delta":
        spec = {"type": "delta", "path": f"{tmp_path.as_uri()}/users_delta"}
        return spec, lambda rows: _delta_table(spark, tmp_path, rows)
    monkeypatch.setenv("SLUICE_CONN_LAKE", f"sqlite:///{tmp_path}/catalog.db")
    spec = {"type": "iceberg", "connection": "lake", "table": "lake.users"}
    return spec, lambda rows: _iceberg_table(tmp_path, rows)


def test_a_versioned_table_joins_the_version_each_plan_pinned_and_a_rewind_replays_it(
    spark: Any, tmp_path: Path, versioned_table: Any
) -> None:
    """Delta and Iceberg: epoch 2 is planned at the first version and runs after the second
    was committed: it joins the first, epoch 3 the second. A rewind to checkpoint 1 replays
    epoch 2 at the first version again; asked for current versions, at the second."""
    table, write = versioned_table
    write(V1)
    spec = _spec(tmp_path, table=table)
    rt = runtime(spec)
    _clicks(tmp_path, "a", ["ann"])
    assert len(run_until_drained(rt, spark)) == 1
    _clicks(tmp_path, "b", ["ann", "cat"], second=10)
    plan = plan_epoch(rt)
    assert plan is not None and plan.epoch == 2
    pin = dict(plan.tables)["users"]
    assert (pin.kind, len(pin.files)) == (table["type"], 1)
    write(V2)
    record = process_epoch(rt, spark, plan.epoch)
    commit_epoch(rt, plan.epoch, record.attempt)
    _clicks(tmp_path, "c", ["ann", "cat"], second=20)
    (outcome,) = run_until_drained(rt, spark)
    assert outcome.checkpoint.plan.tables[0][1] != pin
    labels = [r["tables"]["users"] for r in checkpoint_rows(rt)]  # sluice checkpoints
    assert labels[0] == labels[1] != labels[2]
    if table["type"] == "delta":
        assert labels == ["v0", "v0", "v1"]
    else:
        assert all(label.startswith("metadata 0") for label in labels)

    def rows() -> dict[tuple[str, str], Any]:
        return {(r["user"], r["ts"][17:19]): r["country"] for r in committed_rows(spec, "out")}

    first_run = {("ann", "00"): "de", ("ann", "10"): "de", ("cat", "11"): None,
                 ("ann", "20"): "at", ("cat", "21"): "it"}  # fmt: skip
    assert rows() == first_run
    _rewind_to_1(rt, spark)
    assert rows() == first_run
    assert [p.replays for e in (4, 5) if (p := rt.repo.plan(e))] == [2, 3]
    _rewind_to_1(rt, spark, lookup_versions="current")
    assert rows() == {**first_run, ("ann", "10"): "at", ("cat", "11"): "it"}


def test_an_iceberg_lookup_whose_table_is_missing_is_refused_at_plan(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clicks(tmp_path, "a", ["ann"])
    monkeypatch.setenv("SLUICE_CONN_LAKE", f"sqlite:///{tmp_path}/catalog.db")
    spec = _spec(tmp_path, table={"type": "iceberg", "connection": "lake", "table": "lake.nope"})
    with pytest.raises(ProtocolError, match=r"lookup users \(iceberg table lake.nope via lake\)"):
        plan_epoch(runtime(spec))


def test_a_delta_path_without_a_table_is_refused_at_plan(spark: Any, tmp_path: Path) -> None:
    _clicks(tmp_path, "a", ["ann"])
    (tmp_path / "users_delta").mkdir()
    spec = _spec(tmp_path, table={"type": "delta", "path": f"{tmp_path.as_uri()}/users_delta"})
    with pytest.raises(ProtocolError, match=r"lookup users: no Delta table \(no _delta_log/"):
        plan_epoch(runtime(spec))


def _pg_spec(tmp_path: Path, **extra: Any) -> Any:
    table = {"type": "postgres", "connection": "app_db", "table": "public.users"}
    return _spec(tmp_path, table=table, **extra)


def _pg_users(server: Any, rows: dict[str, tuple[str, int]]) -> None:
    """The users table holds exactly ``rows`` (one transaction)."""
    values = ", ".join(f"('{k}', '{c}', {t})" for k, (c, t) in rows.items())
    server.psql(f"BEGIN; DELETE FROM users; INSERT INTO users VALUES {values}; COMMIT", "lookups")


@pytest.fixture
def app_db(postgres_server: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Database ``lookups`` with a users table (key text, country text, tier smallint), as
    connection ``app_db``."""
    postgres_server.create_database("lookups")
    postgres_server.psql(
        "CREATE TABLE users (user_id text PRIMARY KEY, country text, tier smallint)", "lookups"
    )
    url = f"postgresql://postgres@{postgres_server.host}:{postgres_server.port}/lookups"
    monkeypatch.setenv("SLUICE_CONN_APP_DB", url)
    return postgres_server


def test_a_postgres_table_is_copied_at_plan_time_and_each_epoch_joins_its_copy(
    spark: Any, tmp_path: Path, app_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Epoch 2 is planned before the table changes and runs after: it joins the copy its plan
    took. Epoch 3 joins the changed table; epoch 4, planned with the table unchanged, pins
    epoch 3's copy again (no new copy). Retention (2 checkpoints kept) deletes the copies no
    kept plan pins. The copy is fetched a row at a time here (batches of 50,000 rows)."""
    monkeypatch.setattr("sluice.lookups.postgres._BATCH_ROWS", 1)
    _pg_users(app_db, V1)
    spec = _pg_spec(tmp_path, checkpoint={"storage": f"{tmp_path.as_uri()}/ckpt", "retained": 2})
    rt = runtime(spec)
    _clicks(tmp_path, "a", ["ann"])
    run_until_drained(rt, spark)
    _clicks(tmp_path, "b", ["ann", "cat"], second=10)
    plan = plan_epoch(rt)
    assert plan is not None and plan.epoch == 2
    pin2 = dict(plan.tables)["users"]
    assert pin2.kind == "postgres" and pin2.uri.endswith("/ckpt/lookup/lookups/users")
    _pg_users(app_db, V2)
    record = process_epoch(rt, spark, plan.epoch)
    commit_epoch(rt, plan.epoch, record.attempt)
    for name, second in (("c", 20), ("d", 30)):
        _clicks(tmp_path, name, ["ann", "cat"], second=second)
        run_until_drained(rt, spark)
    pins = {e: dict(p.tables)["users"] for e in (3, 4) if (p := rt.repo.plan(e))}
    assert pins[3] == pins[4] != pin2  # unchanged: the same copy
    rows = {(r["user"], r["ts"][17:19]): r["country"] for r in committed_rows(spec, "out")}
    assert rows == {("ann", "00"): "de", ("ann", "10"): "de", ("cat", "11"): None,
                    ("ann", "20"): "at", ("cat", "21"): "it",
                    ("ann", "30"): "at", ("cat", "31"): "it"}  # fmt: skip
    kept = checkpoint_rows(rt)  # sluice checkpoints: epochs 3 and 4 kept
    assert [r["tables"] for r in kept] == [{"users": "copy of epoch 3"}] * 2
    shown = Console(width=400, record=True)
    shown.print(checkpoint_table(rt, kept))
    assert "users copy of epoch 3" in shown.export_text()
    copies = sorted(
        p.name for p in (tmp_path / "ckpt" / "lookup" / "lookups" / "users").glob("*.parquet")
    )
    assert copies == [pins[3].files[0][0]]  # epochs 1 and 2's copies retired with them


def test_a_postgres_lookup_without_its_connection_or_table_is_refused_at_plan(
    spark: Any, tmp_path: Path, app_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clicks(tmp_path, "a", ["ann"])
    spec = _pg_spec(tmp_path)
    app_db.psql("DROP TABLE users", "lookups")
    with pytest.raises(ProtocolError, match=r"lookup users .*reading it failed: .*users"):
        plan_epoch(runtime(spec))
    monkeypatch.delenv("SLUICE_CONN_APP_DB")
    with pytest.raises(ProtocolError, match=r"connection 'app_db' is not defined.*SLUICE_CONN_"):
        plan_epoch(runtime(spec))


def _parquet_bytes(rows: dict[str, str], column: str) -> bytes:
    import io

    sink = io.BytesIO()
    table = pa.table({"user_id": list(rows), column: list(rows.values())})
    pq.write_table(table, sink)
    return sink.getvalue()


@pytest.mark.s3
def test_every_table_type_pins_and_joins_on_s3(
    spark: Any, s3_server: Any, tmp_path: Path, app_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Source, checkpoints (so the PostgreSQL copy), the files and Delta tables and the
    Iceberg table's warehouse on the S3 server: the pins use its ETags, s3a and pyiceberg
    reads. Epoch 2 is planned, then all four tables change, then it runs: it joins the
    versions its plan pinned; epoch 3 the new ones."""
    from pyiceberg.exceptions import NoSuchTableError
    from sluice.storage import open_store, to_spark_uri
    from sluice.storage.catalogs import open_catalog

    root = f"s3://{s3_server.bucket('sluice-tests')}/lookups-{tmp_path.name[-12:]}"
    clicks = open_store(f"{root}/in")
    users = open_store(f"{root}/users")
    delta_uri = to_spark_uri(f"{root}/segments")
    lake = f"sqlite:///{tmp_path}/catalog.db"
    monkeypatch.setenv("SLUICE_CONN_LAKE", lake)

    def version(n: int) -> None:
        users.put(f"v{n}.parquet", _parquet_bytes({"ann": f"c{n}"}, "country"))
        if n > 1:
            users.delete(f"v{n - 1}.parquet")
        frame = spark.createDataFrame([("ann", f"s{n}")], "user_id string, segment string")
        frame.write.format("delta").mode("overwrite").save(delta_uri)
        _pg_users(app_db, {"ann": ("-", n)})
        levels = pa.table({"user_id": ["ann"], "level": [f"l{n}"]})
        catalog = open_catalog(lake, f"{root}/warehouse", None)
        try:
            catalog.load_table(("lake", "levels")).overwrite(levels)
        except NoSuchTableError:
            catalog.create_namespace_if_not_exists("lake")
            catalog.create_table(("lake", "levels"), schema=levels.schema).append(levels)

    def click(n: int) -> None:
        line = {"user": "ann", "ts": (T0 + timedelta(seconds=10 * n)).isoformat(), "amount": 1.0}
        clicks.put(f"{n:02d}.jsonl", (json.dumps(line) + "\n").encode())

    body = spec_body(tmp_path)
    body["source"]["path"] = f"{root}/in"
    body["lookup"] = [
        {"name": "users", "on": {"user": "user_id"}, "columns": {"country": "string"},
         "table": {"type": "files", "path": f"{root}/users", "format": "parquet"}},
        {"name": "segments", "on": {"user": "user_id"}, "columns": {"segment": "string"},
         "table": {"type": "delta", "path": f"{root}/segments"}},
        {"name": "tiers", "on": {"user": "user_id"}, "columns": {"tier": "int"},
         "table": {"type": "postgres", "connection": "app_db", "table": "users"}},
        {"name": "levels", "on": {"user": "user_id"}, "columns": {"level": "string"},
         "table": {"type": "iceberg", "connection": "lake", "table": "lake.levels"}},
    ]  # fmt: skip
    body["sinks"][0]["path"] = f"{root}/out"
    body["checkpoint"]["storage"] = f"{root}/ckpt"
    spec = parse_spec(body)
    rt = runtime(spec)
    version(1)
    click(1)
    run_until_drained(rt, spark)
    click(2)
    plan = plan_epoch(rt)
    assert plan is not None and plan.epoch == 2
    assert all(pin.uri.startswith("s3://") for _, pin in plan.tables)
    version(2)
    record = process_epoch(rt, spark, plan.epoch)
    commit_epoch(rt, plan.epoch, record.attempt)
    click(3)
    run_until_drained(rt, spark)
    rows = sorted(
        (r["ts"][17:19], r["country"], r["segment"], r["tier"], r["level"])
        for r in committed_rows(spec, "out")
    )
    assert rows == [("10", "c1", "s1", 1, "l1"), ("20", "c1", "s1", 1, "l1"),
                    ("30", "c2", "s2", 2, "l2")]  # fmt: skip


def test_a_savepoint_keeps_the_copy_its_epoch_joined_until_it_is_deleted(
    spark: Any, tmp_path: Path, app_db: Any
) -> None:
    """Retention deletes a PostgreSQL copy once no kept plan pins it: a savepoint's epoch is
    kept, so is its copy (a rewind to it replays with it); deleting the savepoint lets the
    next commit delete both."""
    from sluice.protocol.retention import delete_savepoint, take_savepoint

    spec = _pg_spec(tmp_path, checkpoint={"storage": f"{tmp_path.as_uri()}/ckpt", "retained": 1})
    rt = runtime(spec)
    folder = tmp_path / "ckpt" / "lookup" / "lookups" / "users"
    for epoch in (1, 2, 3):
        _pg_users(app_db, {"ann": (f"c{epoch}", epoch)})  # a new copy each epoch
        _clicks(tmp_path, f"e{epoch}", ["ann"], second=10 * epoch)
        run_until_drained(rt, spark)
        if epoch == 1:
            take_savepoint(rt, "before")
    first = dict(rt.repo.plan(1).tables)["users"].files[0][0]  # type: ignore[union-attr]
    assert sorted(p.name for p in folder.glob("*.parquet"))[0] == first
    assert len(list(folder.glob("*.parquet"))) == 2  # epoch 1's (savepoint), epoch 3's
    delete_savepoint(rt, "before")
    _pg_users(app_db, {"ann": ("c4", 4)})
    _clicks(tmp_path, "e4", ["ann"], second=40)
    run_until_drained(rt, spark)
    assert [p.name[:12] for p in folder.glob("*.parquet")] == ["000000000004"]
