"""Spec loading: the demo spec validates; every problem names the file, the field and a fix,
and all problems are reported together."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from sluice.spec import PipelineSpec, SpecError, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "include" / "pipelines" / "clicks_per_minute.yaml"
ORIGIN = "pipelines/test.yaml"


def base(tmp_path: Path) -> dict[str, Any]:
    return {
        "name": "clicks",
        "source": {
            "type": "files",
            "path": str(tmp_path / "in"),
            "format": "jsonl",
            "schema": {"user": "string", "url": "string", "ts": "timestamp", "amount": "double"},
        },
        "event_time": {"column": "ts", "max_out_of_orderness": "5s"},
        "key_by": ["user"],
        "window": {"type": "tumbling", "size": "1m"},
        "aggregates": {"clicks": "count(*)", "total": "sum(amount)"},
        "sinks": [{"name": "out", "type": "files", "path": str(tmp_path / "out")}],
        "checkpoint": {"storage": str(tmp_path / "ckpt")},
    }


def errors_of(data: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(data, origin=ORIGIN)
    return info.value


def only_problem(data: Any, field: str) -> tuple[str, str]:
    """The single problem reported for ``field``; checks the message names file, field, fix."""
    err = errors_of(data)
    assert err.source == ORIGIN
    matching = [p for p in err.problems if p.field == field]
    assert matching, f"no problem for {field!r}; got {err.problems}"
    problem = matching[0]
    assert problem.fix, f"{field}: no fix suggested"
    text = str(err)
    assert f"{ORIGIN}: {field}: {problem.problem}." in text
    assert f"Fix: {problem.fix}" in text
    return problem.problem, problem.fix


# -- valid specs ----------------------------------------------------------------------------


def test_demo_spec_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_DATA", raising=False)
    spec = load_spec(DEMO)
    assert isinstance(spec, PipelineSpec)
    assert spec.name == "clicks_per_minute"
    assert spec.origin == str(DEMO)
    assert spec.source.path == "data/demo/in"
    assert spec.source.format == "jsonl"
    assert spec.source.max_files_per_epoch == 5
    assert dict(spec.source.schema) == {"user": "string", "url": "string", "ts": "timestamp",
                                        "amount": "double"}  # fmt: skip
    assert spec.event_time.column == "ts"
    assert spec.event_time.max_out_of_orderness_us == 5_000_000
    assert spec.event_time.allowed_lateness_us == 0
    assert spec.key_by == ("user",)
    assert spec.window.size_us == 60_000_000
    assert [a.expression for a in spec.aggregates] == ["count(*)", "sum(amount)", "max(amount)",
                                                       "avg(amount)"]  # fmt: skip
    assert [s.name for s in spec.sinks] == ["out"]
    assert spec.sinks[0].path == "data/demo/out"
    assert spec.late_records.path == "data/demo/late"
    assert spec.dead_letters.format == "jsonl"
    assert spec.checkpoint.storage == "data/demo/checkpoints"
    assert spec.checkpoint.timeout_us == 600_000_000
    assert spec.qos == 2


def test_minimal_spec_defaults(tmp_path: Path) -> None:
    spec = parse_spec(base(tmp_path))
    assert spec.sinks[0].format == "parquet"
    assert spec.event_time.allowed_lateness_us == 0
    assert spec.checkpoint.interval_us == 60_000_000
    assert spec.checkpoint.retained == 10
    assert spec.emit == "on_close"
    assert spec.source.header is True
    assert spec.source.max_files_per_epoch is None


def test_default_late_and_dead_sinks_under_checkpoint_storage(tmp_path: Path) -> None:
    spec = parse_spec(base(tmp_path))
    ckpt = str(tmp_path / "ckpt")
    assert spec.late_records.path == f"{ckpt}/clicks/late_records"
    assert spec.dead_letters.path == f"{ckpt}/clicks/dead_letters"
    for sink, name in ((spec.late_records, "late_records"), (spec.dead_letters, "dead_letters")):
        assert sink.name == name
        assert sink.type == "files"
        assert sink.format == "jsonl"


def test_configured_late_sink_keeps_its_role_name(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["late_records"] = {"type": "files", "path": str(tmp_path / "late"), "format": "parquet"}
    spec = parse_spec(data)
    assert spec.late_records.name == "late_records"
    assert spec.late_records.path == str(tmp_path / "late")
    assert spec.late_records.format == "parquet"


def test_execution_is_optional_and_changes_no_state(tmp_path: Path) -> None:
    plain = parse_spec(base(tmp_path))
    assert plain.execution is None  # the deployment's SLUICE_EXECUTION decides
    for mode in ("cold", "warm"):
        spec = parse_spec({**base(tmp_path), "execution": mode})
        assert spec.execution == mode
        assert spec.fingerprint() == plain.fingerprint() and spec == plain


@pytest.mark.parametrize("value", ["hot", "", 1, True, ["warm"]])
def test_execution_must_be_cold_or_warm(tmp_path: Path, value: Any) -> None:
    problem, fix = only_problem({**base(tmp_path), "execution": value}, "execution")
    assert "is not valid" in problem or "is empty" in problem
    assert "'cold', 'warm'" in fix or "give it a value" in fix


# -- one problem each -----------------------------------------------------------------------


def test_unknown_top_level_field_suggests_the_close_one(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["windows"] = data.pop("window")
    problem, fix = only_problem(data, "windows")
    assert problem == "unknown field"
    assert "did you mean 'window'?" in fix


def test_unknown_nested_field_suggests_the_close_one(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["source"]["max_file_per_epoch"] = 3
    problem, fix = only_problem(data, "source.max_file_per_epoch")
    assert problem == "unknown field"
    assert "did you mean 'max_files_per_epoch'?" in fix


def test_unknown_field_without_close_match_lists_allowed(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["checkpoint"]["zzzz"] = 1
    _, fix = only_problem(data, "checkpoint.zzzz")
    assert "allowed" in fix and "storage" in fix


@pytest.mark.parametrize("name", ["Clicks", "my-pipeline", "a b", "", 42, None])
def test_bad_pipeline_name(tmp_path: Path, name: Any) -> None:
    data = base(tmp_path)
    data["name"] = name
    problem, fix = only_problem(data, "name")
    assert "not a valid pipeline name" in problem
    assert "lower-case" in fix


def test_missing_source(tmp_path: Path) -> None:
    data = base(tmp_path)
    del data["source"]
    problem, fix = only_problem(data, "source")
    assert problem == "is required"
    assert "files source" in fix


@pytest.mark.parametrize(
    ("section", "key", "value", "field"),
    [
        ("source", "type", "kinesis", "source.type"),
        ("source", "format", "xml", "source.format"),
        ("window", "type", "sliding", "window.type"),
    ],
)
def test_unknown_type(tmp_path: Path, section: str, key: str, value: str, field: str) -> None:
    data = base(tmp_path)
    data[section][key] = value
    problem, fix = only_problem(data, field)
    assert repr(value) in problem and "not valid" in problem
    assert "use one of" in fix


def test_unknown_schema_type(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["source"]["schema"]["amount"] = "decimal"
    problem, fix = only_problem(data, "source.schema.amount")
    assert "unknown type 'decimal'" in problem
    assert "double" in fix


def test_unknown_sink_type(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["sinks"][0]["type"] = "kinesis"
    problem, _ = only_problem(data, "sinks[0].type")
    assert "'kinesis'" in problem


@pytest.mark.parametrize("column", ["user", "amount", "nope"])
def test_event_time_column_must_be_a_timestamp(tmp_path: Path, column: str) -> None:
    data = base(tmp_path)
    data["event_time"]["column"] = column
    problem, fix = only_problem(data, "event_time.column")
    assert f"{column!r} is not a timestamp column" in problem
    assert "timestamp" in fix


def test_key_by_not_in_schema(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["key_by"] = ["user", "country"]
    problem, fix = only_problem(data, "key_by")
    assert "'country' is not a schema column" in problem
    assert "user" in fix


def test_key_by_twice(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["key_by"] = ["user", "user"]
    problem, _ = only_problem(data, "key_by")
    assert "twice" in problem


@pytest.mark.parametrize("expression", ["median(amount)", "sum amount", "count()", "sum(*)"])
def test_unsupported_aggregate(tmp_path: Path, expression: str) -> None:
    data = base(tmp_path)
    data["aggregates"]["x"] = expression
    problem, fix = only_problem(data, "aggregates.x")
    assert "not a supported aggregate" in problem or "is not defined" in problem
    assert "count" in fix or "column" in fix


def test_sum_of_a_string_column(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["aggregates"]["total"] = "sum(url)"
    problem, fix = only_problem(data, "aggregates.total")
    assert "sum needs a numeric column" in problem and "'url' is string" in problem
    assert "double" in fix


def test_aggregate_of_unknown_column(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["aggregates"]["total"] = "sum(price)"
    problem, _ = only_problem(data, "aggregates.total")
    assert "'price' is not a schema column" in problem


def test_aggregate_name_clashing_with_input_column(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["aggregates"]["amount"] = "sum(amount)"
    problem, _ = only_problem(data, "aggregates.amount")
    assert "clashes" in problem


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("window", "size", "1 minute"),
        ("window", "size", "0s"),
        ("event_time", "max_out_of_orderness", "-5s"),
        ("event_time", "allowed_lateness", "soon"),
        ("checkpoint", "interval", "5x"),
        ("checkpoint", "timeout", "0m"),
    ],
)
def test_bad_durations(tmp_path: Path, section: str, key: str, value: str) -> None:
    data = base(tmp_path)
    data[section][key] = value
    problem, fix = only_problem(data, f"{section}.{key}")
    assert "duration" in problem or "greater than zero" in problem
    assert "1m" in fix


def test_window_size_required(tmp_path: Path) -> None:
    data = base(tmp_path)
    del data["window"]["size"]
    problem, _ = only_problem(data, "window.size")
    assert problem == "is required"


def test_duplicate_sink_names(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["sinks"].append({"name": "out", "type": "files", "path": str(tmp_path / "out2")})
    problem, fix = only_problem(data, "sinks")
    assert "'out' is used twice" in problem
    assert "own name" in fix


def test_no_sinks(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["sinks"] = []
    problem, _ = only_problem(data, "sinks")
    assert "at least one sink" in problem


def test_bad_sink_name(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["sinks"][0]["name"] = "Out-1"
    problem, _ = only_problem(data, "sinks[0].name")
    assert "not a valid sink name" in problem


@pytest.mark.parametrize("sub", ["in", "in/out", "in/deep/er"])
def test_sink_inside_the_source_path(tmp_path: Path, sub: str) -> None:
    data = base(tmp_path)
    data["sinks"][0]["path"] = str(tmp_path / sub)
    problem, fix = only_problem(data, "sinks.out.path")
    assert "inside the source path" in problem
    assert "outside source.path" in fix


def test_sibling_with_common_prefix_is_not_inside(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["sinks"][0]["path"] = str(tmp_path / "input-results")  # shares "in" as a prefix
    parse_spec(data)


def test_late_sink_inside_source_via_file_uri(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["late_records"] = {"type": "files", "path": (tmp_path / "in" / "late").as_uri()}
    problem, _ = only_problem(data, "late_records.path")
    assert "inside the source path" in problem


def test_checkpoint_inside_the_source_path(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["checkpoint"]["storage"] = str(tmp_path / "in" / "ckpt")
    problem, _ = only_problem(data, "checkpoint.storage")
    assert "inside the source path" in problem


@pytest.mark.parametrize("level", [0, 1, 2])
def test_every_qos_level_is_accepted(tmp_path: Path, level: int) -> None:
    data = base(tmp_path)
    data["qos"] = level
    assert parse_spec(data, origin=ORIGIN).qos == level


def test_postgres_and_delta_sinks(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["emit"] = "on_update"
    data["sinks"] = [
        {"name": "pg", "type": "postgres", "table": "public.clicks", "connection": "warehouse",
         "mode": "upsert"},
        {"name": "lake", "type": "delta", "path": str(tmp_path / "lake"), "mode": "upsert",
         "partition_by": "window_start"},
    ]  # fmt: skip
    spec = parse_spec(data, origin=ORIGIN)
    pg, lake = spec.sinks
    assert (pg.type, pg.table, pg.connection) == ("postgres", "public.clicks", "warehouse")
    assert pg.keys == lake.keys == ("user", "window_start", "window_end")
    assert lake.partition_by == ("window_start",)


@pytest.mark.parametrize(
    ("sink", "field", "words"),
    [
        ({"type": "postgres", "connection": "c"}, "sinks[0].table", "is required"),
        ({"type": "postgres", "table": "a.b.c", "connection": "c"}, "sinks[0].table",
         "not a table name"),
        ({"type": "postgres", "table": "t", "connection": "c", "path": "x"}, "sinks[0].path",
         "not a setting of a postgres sink"),
        ({"type": "delta", "path": "lake", "format": "jsonl"}, "sinks[0].format",
         "not a setting of a delta sink"),
        ({"type": "files", "path": "out", "partition_by": ["nope"]}, "sinks.out.partition_by",
         "'nope' is not a result column"),
        ({"type": "kafka", "topic": "t", "bootstrap_servers": "h:9092", "path": "x"},
         "sinks[0].path", "not a setting of a kafka sink"),
    ],
)  # fmt: skip
def test_bad_sink_settings_are_named(
    tmp_path: Path, sink: dict[str, Any], field: str, words: str
) -> None:
    data = base(tmp_path)
    data["sinks"] = [{"name": "out", **sink}]
    problem, _ = only_problem(data, field)
    assert words in problem


def test_dead_letters_cannot_be_upserted(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["dead_letters"] = {"type": "files", "path": str(tmp_path / "dead"), "mode": "upsert"}
    problem, _ = only_problem(data, "dead_letters.mode")
    assert "appended, never upserted" in problem


@pytest.mark.parametrize("level", [3, "2", True])
def test_qos_not_a_level(tmp_path: Path, level: Any) -> None:
    data = base(tmp_path)
    data["qos"] = level
    problem, _ = only_problem(data, "qos")
    assert "not a qos level" in problem


@pytest.mark.parametrize("value", [0, -1, "3", 2.5, True])
def test_max_files_per_epoch_positive_int(tmp_path: Path, value: Any) -> None:
    data = base(tmp_path)
    data["source"]["max_files_per_epoch"] = value
    problem, _ = only_problem(data, "source.max_files_per_epoch")
    assert "not a positive whole number" in problem


def test_schema_column_starting_with_underscore(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["source"]["schema"]["_file"] = "string"
    problem, _ = only_problem(data, "source.schema._file")
    assert "must not start with '_'" in problem


def test_top_level_not_a_mapping() -> None:
    problem, _ = only_problem(["a", "b"], "")
    assert "expected a mapping" in problem


def test_empty_document() -> None:
    problem, _ = only_problem(None, "(file)")
    assert problem == "is empty"


# -- several at once ------------------------------------------------------------------------


def test_several_problems_reported_together(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["name"] = "Bad Name"
    data["key_by"] = ["country"]
    data["aggregates"]["total"] = "sum(url)"
    data["window"]["size"] = "forever"
    data["qos"] = 5
    data["sinks"][0]["path"] = str(tmp_path / "in" / "out")
    err = errors_of(data)
    fields = {p.field for p in err.problems}
    assert {"name", "key_by", "aggregates.total", "window.size", "qos",
            "sinks.out.path"} <= fields  # fmt: skip
    assert str(err).startswith(f"invalid pipeline spec ({len(err.problems)} problems)")
    for p in err.problems:
        assert p.fix
        assert f"{ORIGIN}: {p.field}: " in str(err)


def test_load_spec_reports_several_problems_with_the_file_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: ok_name\n"
        "source: {type: files, path: in, format: jsonl, schema: {ts: timestamp, u: string}}\n"
        "event_time: {column: u}\n"
        "window: {type: tumbling, size: 1m, slide: 30s}\n"
        "aggregates: {n: count(*)}\n"
        "sinks: [{name: out, type: files, path: out}]\n"
        "checkpoint: {storage: ckpt}\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(path)
    text = str(info.value)
    assert f"{path}: event_time.column: " in text
    assert f"{path}: window.slide: does not apply to tumbling windows" in text
    assert "(2 problems)" in text


# -- environment interpolation ----------------------------------------------------------------


def test_env_variable_is_substituted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_TEST_ROOT", str(tmp_path / "env"))
    data = base(tmp_path)
    data["source"]["path"] = "${SLUICE_TEST_ROOT}/in"
    data["checkpoint"]["storage"] = "${SLUICE_TEST_ROOT:-nowhere}/ckpt"
    spec = parse_spec(data)
    assert spec.source.path == f"{tmp_path}/env/in"
    assert spec.checkpoint.storage == f"{tmp_path}/env/ckpt"  # the set value beats the default


def test_env_default_used_when_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_TEST_UNSET", raising=False)
    data = base(tmp_path)
    data["source"]["path"] = f"${{SLUICE_TEST_UNSET:-{tmp_path}/dflt}}/in"
    data["name"] = "${SLUICE_TEST_UNSET:-from_default}"
    spec = parse_spec(data)
    assert spec.source.path == f"{tmp_path}/dflt/in"
    assert spec.name == "from_default"


def test_env_empty_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_TEST_UNSET", raising=False)
    data = base(tmp_path)
    data["sinks"][0]["path"] = f"{tmp_path}/out${{SLUICE_TEST_UNSET:-}}"
    assert parse_spec(data).sinks[0].path == f"{tmp_path}/out"


def test_env_missing_variable_is_a_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_TEST_MISSING", raising=False)
    data = base(tmp_path)
    data["sinks"][0]["path"] = "${SLUICE_TEST_MISSING}/out"
    problem, fix = only_problem(data, "sinks[0].path")
    assert "environment variable SLUICE_TEST_MISSING is not set" in problem
    assert "export SLUICE_TEST_MISSING=" in fix and "${SLUICE_TEST_MISSING:-default}" in fix


def test_env_in_demo_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_DATA", str(tmp_path))
    spec = load_spec(DEMO)
    assert spec.source.path == f"{tmp_path}/in"
    assert spec.sinks[0].path == f"{tmp_path}/out"
    assert spec.checkpoint.storage == f"{tmp_path}/checkpoints"


def test_interpolation_does_not_mutate_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLUICE_TEST_ROOT", str(tmp_path))
    data = base(tmp_path)
    data["source"]["path"] = "${SLUICE_TEST_ROOT}/in"
    before = copy.deepcopy(data)
    parse_spec(data)
    assert data == before


# -- files ------------------------------------------------------------------------------------


def test_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nsource: {type: files, path: [\n  nope: :\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    (problem,) = info.value.problems
    assert problem.field == "(yaml)"
    assert "not valid YAML" in problem.problem
    assert "indentation" in problem.fix
    assert str(path) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.problems[0].field == "(file)"
    assert "cannot read" in str(info.value)
    assert str(path) in str(info.value)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing here\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert f"{path}: (file): is empty." in str(info.value)


# -- one validation path: sections and the rules across them -----------------------------------


def test_a_section_with_problems_still_lends_what_it_could_read_to_the_rules(
    tmp_path: Path,
) -> None:
    data = base(tmp_path)
    data["checkpoint"] = {"storage": str(tmp_path / "in" / "ckpt"), "retained": 0}
    data["key_by"] = ["user", "country"]
    data["sinks"][0]["partition_by"] = ["user"]  # a result column: the key named
    err = errors_of(data)
    assert [p.field for p in err.problems] == [
        "key_by",  # 'country' is not a schema column
        "checkpoint.retained",
        "late_records.path",  # at their default place, in the checkpoint storage
        "dead_letters.path",
        "checkpoint.storage",
    ]
    assert err.problems[-1].problem == "is inside the source path"


@pytest.mark.parametrize(
    ("section", "value", "field", "problem", "fix"),
    [
        ("restart", {"attempts": -1}, "restart.attempts", "-1 is not a whole number >= 0",
         "e.g. 3"),
        ("restart", {"delay": "1m", "max_delay": "5s"}, "restart.max_delay",
         "is shorter than restart.delay", "raise it, e.g. 5m"),
        ("restart", {"multiplier": 0.5}, "restart.multiplier", "0.5 is not a number >= 1",
         "e.g. 2"),
        ("restart", {"attempt": 1}, "restart.attempt", "unknown field",
         "did you mean 'attempts'?"),
        ("s3", {"zone": "x"}, "s3.zone", "unknown field",
         "allowed: ['endpoint_url', 'region']"),
        ("event_time", {"column": "ts", "idle_timeout": "0s"}, "event_time.idle_timeout",
         "must be greater than zero", "write a duration like 1m"),
        ("event_time", {"max_out_of_orderness": "5s"}, "event_time.column", "is required",
         "add it"),
        ("checkpoint", {"storage": "  "}, "checkpoint.storage", "is empty", "give it a value"),
        ("emit", None, "emit", "is required", "one of ['on_close', 'on_update']"),
        ("execution", "hot", "execution", "'hot' is not valid",
         "use one of ['cold', 'warm'] (absent: the deployment's SLUICE_EXECUTION; "
         "docs/warm-execution.md)"),
    ],
)  # fmt: skip
def test_section_problems_name_field_problem_and_fix(
    tmp_path: Path, section: str, value: Any, field: str, problem: str, fix: str
) -> None:
    data = base(tmp_path)
    data[section] = value
    assert only_problem(data, field) == (problem, fix)
