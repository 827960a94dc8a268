"""Plugin sources and sinks in the spec (``type: module:Class``): parsed without importing
anything; every problem names its field."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from sluice.spec import SpecError, parse_spec

ORIGIN = "pipelines/plugins.yaml"
SOURCE = "mypkg.sources:TableSource"  # never imported by the loader: the module does not exist
SINK = "mypkg.sinks:TableSink"


def plugin_spec(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "plugins",
        "source": {
            "type": SOURCE,
            "schema": {"user": "string", "ts": "timestamp", "amount": "double"},
            "options": {"table": "clicks", "rows_per_epoch": 10, "tags": ["a", {"b": None}]},
        },
        "event_time": {"column": "ts"},
        "key_by": ["user"],
        "window": {"type": "tumbling", "size": "1m"},
        "aggregates": {"clicks": "count(*)"},
        "sinks": [{"name": "out", "type": SINK, "options": {"table": "out"}}],
        "checkpoint": {"storage": str(tmp_path / "ckpt")},
    }
    spec.update(overrides)
    return spec


def problems(data: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """field -> (problem, fix) of every problem reported."""
    with pytest.raises(SpecError) as info:
        parse_spec(data, origin=ORIGIN)
    assert info.value.source == ORIGIN
    return {p.field: (p.problem, p.fix) for p in info.value.problems}


def test_plugin_source_and_sinks_parse_without_importing(tmp_path: Path) -> None:
    data = plugin_spec(tmp_path, emit="on_update")
    data["sinks"][0]["mode"] = "upsert"
    data["late_records"] = {"type": SINK, "options": {"table": "late"}}
    data["dead_letters"] = {"type": SINK}
    spec = parse_spec(data, origin=ORIGIN)
    assert spec.source.type == SOURCE and spec.source.plugin
    assert spec.source.storage_path() is None and not hasattr(spec.source, "path")
    assert spec.source.options == (
        ("rows_per_epoch", 10),
        ("table", "clicks"),
        ("tags", ["a", {"b": None}]),
    )
    assert spec.source.schema == (("user", "string"), ("ts", "timestamp"), ("amount", "double"))
    out = spec.sinks[0]
    assert (out.name, out.type, out.mode, out.options) == (
        "out",
        SINK,
        "upsert",
        (("table", "out"),),
    )
    assert out.plugin and out.keys == ("user", "window_start", "window_end")  # like built-ins
    assert spec.late_records.name == "late_records" and spec.late_records.option("table") == "late"
    assert spec.dead_letters.type == SINK and spec.dead_letters.options == ()


def test_plugins_do_not_change_the_state_shape(tmp_path: Path) -> None:
    plugin = parse_spec(plugin_spec(tmp_path))
    files = plugin_spec(tmp_path)
    files["source"] = {"type": "files", "path": str(tmp_path / "in"), "format": "jsonl",
                       "schema": files["source"]["schema"]}  # fmt: skip
    files["sinks"] = [{"name": "out", "type": "files", "path": str(tmp_path / "out")}]
    assert plugin.state_shape() == parse_spec(files).state_shape()
    assert plugin.fingerprint() == parse_spec(files).fingerprint()
    other = plugin_spec(tmp_path)
    other["source"]["options"] = {"table": "elsewhere"}
    assert parse_spec(other).fingerprint() == plugin.fingerprint()


@pytest.mark.parametrize(
    "reference",
    ["mypkg.sources:", ":TableSource", "my-pkg:TableSource", "mypkg:Table:Source", "a..b:C"],
)
def test_a_malformed_class_reference_names_the_field(tmp_path: Path, reference: str) -> None:
    data = plugin_spec(tmp_path)
    data["source"]["type"] = reference
    data["sinks"][0]["type"] = reference
    found = problems(data)
    for field in ("source.type", "sinks[0].type"):
        problem, fix = found[field]
        assert problem == f"{reference!r} is not a class reference"
        assert "module:Class" in fix and "docs/extending.md" in fix


def test_a_plugin_source_needs_a_schema(tmp_path: Path) -> None:
    data = plugin_spec(tmp_path)
    del data["source"]["schema"]
    problem, fix = problems(data)["source.schema"]
    assert "required for a plugin source" in problem and "ts: timestamp" in fix


def test_files_settings_do_not_apply_to_a_plugin_source(tmp_path: Path) -> None:
    data = plugin_spec(tmp_path)
    data["source"]["path"] = "data/in"
    data["sinks"][0]["table"] = "out"
    found = problems(data)
    assert found["source.path"] == (
        "is not a setting of a plugin source",
        "put the source's own settings under source.options",
    )
    assert found["sinks[0].table"][0] == "is not a setting of a plugin sink"


def test_options_must_be_a_mapping_of_json_values(tmp_path: Path) -> None:
    data = plugin_spec(tmp_path)
    data["source"]["options"] = {"since": datetime.date(2026, 1, 1), "ok": [1, {"x": float("nan")}]}
    data["sinks"][0]["options"] = ["table", "out"]
    found = problems(data)
    assert (
        found["source.options.since"][0] == "datetime.date(2026, 1, 1) (date) is not a JSON value"
    )
    assert "quote dates" in found["source.options.since"][1]
    assert found["source.options.ok[1].x"][0] == "nan is not a JSON number"
    assert found["sinks[0].options"][0] == "expected a mapping, got list"


def test_options_are_only_for_plugins(tmp_path: Path) -> None:
    data = plugin_spec(tmp_path)
    data["sinks"] = [{"name": "out", "type": "files", "path": "out", "options": {"a": 1}}]
    problem, _ = problems(data)["sinks[0].options"]
    assert problem == "is not a setting of a files sink"


def test_an_unknown_type_without_a_colon_points_at_plugins(tmp_path: Path) -> None:
    data = plugin_spec(tmp_path)
    data["sinks"][0]["type"] = "sqlite"
    problem, fix = problems(data)["sinks[0].type"]
    assert problem == "'sqlite' is not valid"
    assert "['files', 'postgres', 'delta', 'iceberg', 'kafka']" in fix and "module:Class" in fix


def test_a_plugin_side_sink_is_appended(tmp_path: Path) -> None:
    data = plugin_spec(tmp_path, dead_letters={"type": SINK, "mode": "upsert"})
    problem, _ = problems(data)["dead_letters.mode"]
    assert problem == "late records and dead letters are appended, never upserted"


def test_a_plugin_source_has_no_path_for_outputs_to_collide_with(tmp_path: Path) -> None:
    data = plugin_spec(tmp_path, sinks=[{"name": "out", "type": "files", "path": "out"}])
    assert parse_spec(data).sinks[0].path == "out"  # "" is not the working directory
