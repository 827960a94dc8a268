"""``lookup:`` specs (#36 item 1, docs/joins.md): what a valid lookup gives the rest of the
spec (its columns to key, aggregate, filter and write; its key columns read), and every
refusal with its field, problem and fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sluice.contracts.records import Plan, TablePin
from sluice.spec import SpecError, parse_spec

SCHEMA = {"user": "string", "url": "string", "ts": "timestamp", "amount": "double"}


def lookup(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "name": "users",
        "table": {"type": "files", "path": str(tmp_path / "users"), "format": "parquet"},
        "on": {"user": "user_id"},
        "columns": {"country": "string", "tier": "int"},
    }
    item.update(overrides)
    return item


def body(tmp_path: Path, lookups: Any, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "enrich",
        "source": {
            "type": "files",
            "path": str(tmp_path / "in"),
            "format": "jsonl",
            "schema": dict(SCHEMA),
        },
        "event_time": {"column": "ts", "max_out_of_orderness": "5s"},
        "lookup": lookups,
        "sinks": [{"name": "out", "type": "files", "path": str(tmp_path / "out")}],
        "checkpoint": {"storage": str(tmp_path / "ckpt")},
    }
    data.update(overrides)
    return data


def problems(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return [(p.field, p.problem, p.fix) for p in info.value.problems]


def test_a_lookup_adds_its_columns_to_every_record(tmp_path: Path) -> None:
    spec = parse_spec(body(tmp_path, [lookup(tmp_path)], select={"cents": "amount * 100"}))
    (users,) = spec.lookup
    assert (users.name, users.on, users.how, users.format) == (
        "users",
        (("user", "user_id"),),
        "left",
        "parquet",
    )
    assert users.columns == (("country", "string"), ("tier", "int"))
    assert spec.output_columns() == ("user", "url", "ts", "amount", "cents", "country", "tier")


def test_windows_key_and_aggregate_by_looked_up_columns_with_their_types(tmp_path: Path) -> None:
    spec = parse_spec(
        body(
            tmp_path,
            [lookup(tmp_path, how="inner")],
            key_by=["country"],
            window={"type": "tumbling", "size": "1m"},
            aggregates={"best": "max(tier)"},
        )
    )
    assert spec.state_shape()["key_by"] == {"country": "string"}
    assert spec.lookup[0].how == "inner"


def test_the_key_columns_are_read_the_looked_up_ones_are_not_source_columns(
    tmp_path: Path,
) -> None:
    spec = parse_spec(body(tmp_path, [lookup(tmp_path)], output=["ts", "country"]))
    assert spec.read_columns() == ("user", "ts")


def test_a_later_lookup_may_key_on_an_earlier_ones_column(tmp_path: Path) -> None:
    second = lookup(
        tmp_path, name="countries", on={"country": "code"}, columns={"continent": "string"}
    )
    spec = parse_spec(body(tmp_path, [lookup(tmp_path), second]))
    assert [lk.name for lk in spec.lookup] == ["users", "countries"]
    assert spec.output_columns()[-1] == "continent"


def test_every_problem_of_a_lookup_is_named(tmp_path: Path) -> None:
    bad = {
        "name": "Users",
        "table": {"type": "hive", "path": "", "format": "csv"},
        "on": {"usr": "user_id", "url": "bad name"},
        "columns": {"amount": "double", "tier": "int8"},
        "how": "outer",
        "as": "u",
    }
    found = problems(body(tmp_path, [bad]))
    fields = [f for f, _, _ in found]
    assert fields == [
        "lookup[0].as",
        "lookup[0].name",
        "lookup[0].table.type",
        "lookup[0].table.path",
        "lookup[0].table.format",
        "lookup[0].on.usr",
        "lookup[0].on.url",
        "lookup[0].columns.amount",
        "lookup[0].columns.tier",
        "lookup[0].how",
    ]
    by_field = {f: (p, fix) for f, p, fix in found}
    assert by_field["lookup[0].on.usr"] == ("is not a record column", "did you mean 'user'?")
    assert by_field["lookup[0].columns.amount"][0] == "clashes with a record column"
    assert by_field["lookup[0].how"][0] == "'outer' is not a lookup join"


def test_a_delta_table_is_a_path_without_a_format(tmp_path: Path) -> None:
    table = {"type": "delta", "path": f"{tmp_path.as_uri()}/users"}
    spec = parse_spec(body(tmp_path, [lookup(tmp_path, table=table)]))
    assert (spec.lookup[0].table_type, spec.lookup[0].path) == ("delta", table["path"])
    found = problems(body(tmp_path, [lookup(tmp_path, table={**table, "format": "parquet"})]))
    assert found == [
        (
            "lookup[0].table.format",
            "is not a field of this table type",
            "a delta table's files are Parquet: remove format",
        )
    ]


def test_a_postgres_table_is_a_connection_and_a_table_name(tmp_path: Path) -> None:
    table = {"type": "postgres", "connection": "App_DB", "table": "public.users"}
    [spec] = parse_spec(body(tmp_path, [lookup(tmp_path, table=table)])).lookup
    assert (spec.table_type, spec.connection, spec.table) == ("postgres", "app_db", "public.users")
    assert spec.describe() == "postgres table public.users via app_db"
    bad = {"type": "postgres", "path": "x", "table": "users; drop table x"}
    found = problems(body(tmp_path, [lookup(tmp_path, table=bad)]))
    assert [(f, p) for f, p, _ in found] == [
        ("lookup[0].table.path", "is not a field of this table type"),
        ("lookup[0].table.connection", "is required"),
        ("lookup[0].table.table", "'users; drop table x' is not a table name"),
    ]


def test_an_iceberg_table_is_a_catalog_connection_and_a_namespaced_name(tmp_path: Path) -> None:
    table = {"type": "iceberg", "connection": "lake", "table": "dim.eu.users"}
    [spec] = parse_spec(body(tmp_path, [lookup(tmp_path, table=table)])).lookup
    assert spec.describe() == "iceberg table dim.eu.users via lake"
    found = problems(body(tmp_path, [lookup(tmp_path, table={**table, "table": "users"})]))
    assert found == [
        ("lookup[0].table.table", "'users' is not a table name", "namespace.table, e.g. lake.users")
    ]


def test_lookups_named_twice_or_missing_their_parts_are_refused(tmp_path: Path) -> None:
    found = problems(
        body(
            tmp_path, [lookup(tmp_path), lookup(tmp_path, columns={"x": "long"}), {"name": "bare"}]
        )
    )
    assert [(f, p) for f, p, _ in found] == [
        ("lookup[1].name", "'users' names another lookup too"),
        ("lookup[2].table", "is required: the table to look up in"),
        ("lookup[2].on", "is required: record column -> table column"),
        ("lookup[2].columns", "is required: the table columns each record gets"),
    ]
    assert problems(body(tmp_path, {"name": "users"}))[0][:2] == (
        "lookup",
        "expected a list of lookups, got dict",
    )


def test_a_plan_stores_its_table_pins_and_reads_them_back() -> None:
    pin = TablePin("file:///t/users", (("a.parquet", "10:sha256:aa"), ("b.parquet", "12:x")))
    plain = Plan.from_dict(
        {
            "pipeline": "p",
            "epoch": 1,
            "source_range": {},
            "start_offset": {},
            "end_offset": {},
            "watermark": {},
            "state": {},
            "fingerprint": "f",
            "state_shape": {},
            "created_at": 0.0,
        }
    )
    assert "tables" not in plain.to_dict()  # a plan without lookups keeps its form
    from dataclasses import replace

    pinned = replace(plain, tables=(("users", pin),))
    body_ = pinned.to_dict()
    assert body_["tables"]["users"]["files"] == {"a.parquet": "10:sha256:aa", "b.parquet": "12:x"}
    assert Plan.from_dict(body_) == pinned
    assert body_["tables"]["users"]["version"] == pin.version
    assert TablePin(pin.uri, pin.files[:1]).version != pin.version
