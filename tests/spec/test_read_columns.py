"""Which source columns a pipeline reads (``PipelineSpec.read_columns``): only those are
type-checked, unless the source says ``strict_schema: true`` (#35's decision,
docs/dead-letters.md). The expression scan may name more columns than an expression reads,
never fewer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sluice.spec import parse_spec
from sluice.spec.references import referenced

SCHEMA = {"user": "string", "url": "string", "ts": "timestamp", "amount": "double", "n": "long"}


def spec(tmp_path: Path, source: dict[str, Any] | None = None, **overrides: Any) -> Any:
    data: dict[str, Any] = {
        "name": "reads",
        "source": {
            "type": "files",
            "path": str(tmp_path / "in"),
            "format": "jsonl",
            "schema": dict(SCHEMA),
            **(source or {}),
        },
        "event_time": {"column": "ts", "max_out_of_orderness": "5s"},
        "key_by": ["user"],
        "window": {"type": "tumbling", "size": "1m"},
        "aggregates": {"clicks": "count(*)", "total": "sum(amount)"},
        "sinks": [{"name": "out", "type": "files", "path": str(tmp_path / "out")}],
        "checkpoint": {"storage": str(tmp_path / "ckpt")},
    }
    data.update(overrides)
    return parse_spec({k: v for k, v in data.items() if v is not None})


def test_a_windowed_pipeline_reads_its_event_time_keys_and_aggregated_columns(
    tmp_path: Path,
) -> None:
    assert spec(tmp_path).read_columns() == ("user", "ts", "amount")


def test_select_and_filter_add_the_columns_they_name(tmp_path: Path) -> None:
    got = spec(tmp_path, select={"host": "parse_url(URL, 'HOST')"}, filter="n > 0")
    assert got.read_columns() is None  # every column: no narrower parse
    assert spec(tmp_path, filter="`n` > 0").read_columns() == ("user", "ts", "amount", "n")


def test_a_column_named_only_in_a_string_or_a_comment_is_not_read(tmp_path: Path) -> None:
    got = spec(tmp_path, filter="user != 'url' /* n */ -- url\n AND amount > 0")
    assert got.read_columns() == ("user", "ts", "amount")


def test_strict_schema_reads_every_column(tmp_path: Path) -> None:
    assert spec(tmp_path, {"strict_schema": True}).read_columns() is None


def test_a_process_function_reads_every_column(tmp_path: Path) -> None:
    process = {"function": "mod:fn", "output": {"user": "string", "n": "long"}}
    got = spec(tmp_path, window=None, aggregates=None, process=process)
    assert got.read_columns() is None


def test_a_stateless_pipeline_reads_what_it_writes(tmp_path: Path) -> None:
    everything = spec(tmp_path, key_by=None, window=None, aggregates=None)
    assert everything.read_columns() is None  # no output: it writes every column
    some = spec(tmp_path, key_by=None, window=None, aggregates=None, output=["user", "amount"])
    assert some.read_columns() == ("user", "ts", "amount")


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("amount * 2", {"amount"}),
        ("AMOUNT + Amount", {"amount"}),
        ("`amount` + `weird``name`", {"amount", "weird`name"}),
        ("concat('amount', \"user\", 'it''s')", set()),
        ("'a\\'user' || url", {"url"}),
        ("transform(arr, user -> user + 1)", {"user"}),  # a lambda's name: more, never fewer
        ("amount /* user", {"amount"}),  # an open comment hides the rest
    ],
)
def test_referenced_names_every_column_an_expression_may_read(
    expression: str, names: set[str]
) -> None:
    columns = ["amount", "user", "url", "weird`name"]
    assert referenced(expression, columns) == names
