"""The ``process:`` section and the type syntax it uses: every problem named by its field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from sluice.spec import load_spec, parse_spec
from sluice.spec.exceptions import SpecError
from sluice.spec.types import InvalidType, arrow_type, parse_type, spark_ddl

BASE: dict[str, Any] = {
    "name": "keyed",
    "source": {
        "type": "files",
        "path": "/tmp/keyed/in",
        "format": "jsonl",
        "schema": {"key": "long", "value": "long", "ts": "timestamp"},
    },
    "event_time": {"column": "ts"},
    "key_by": ["key"],
    "process": {
        "function": "mod:fn",
        "state": {"sum": {"kind": "value", "type": "struct<count: long, sum: bigint>"}},
        "output": {"key": "long", "average": "double"},
    },
    "sinks": [{"name": "out", "type": "files", "path": "/tmp/keyed/out"}],
    "checkpoint": {"storage": "/tmp/keyed/ckpt"},
}


def _problems(change: Any) -> list[str]:
    body = copy.deepcopy(BASE)
    change(body)
    with pytest.raises(SpecError) as info:
        parse_spec(body)
    return [f"{p.field}: {p.problem}" for p in info.value.problems]


def test_a_valid_process_section() -> None:
    spec = parse_spec(copy.deepcopy(BASE))
    assert spec.window is None and spec.process is not None
    assert spec.process.state[0].type == "struct<count:long,sum:long>"
    assert spec.state_shape()["state.sum"] == "value<struct<count:long,sum:long>>"
    assert "window" not in spec.state_shape()


def test_the_shipped_example_parses() -> None:
    spec = load_spec("include/pipelines/count_window_average.yaml")
    assert spec.process is not None and spec.process.function == "count_window_average:flat_map"
    assert spec.process.base_dir is not None and spec.process.base_dir.endswith("pipelines")


def test_ttl_is_not_part_of_the_state_shape() -> None:
    body = copy.deepcopy(BASE)
    body["process"]["state"]["sum"]["ttl"] = "1h"
    assert parse_spec(body).fingerprint() == parse_spec(copy.deepcopy(BASE)).fingerprint()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda b: b.update(window={"type": "tumbling", "size": "1m"}),
         "window: does not apply to a pipeline with a process function"),
        (lambda b: b["process"].pop("function"), "process.function: is required"),
        (lambda b: b["process"].update(function="not a ref"),
         "process.function: 'not a ref' is not a function reference"),
        (lambda b: b["process"]["state"]["sum"].update(kind="bag"),
         "process.state.sum.kind: 'bag' is not valid"),
        (lambda b: b["process"]["state"]["sum"].update(type="lng"),
         "process.state.sum.type: unknown type 'lng'"),
        (lambda b: b["process"]["state"].update(m={"kind": "map", "type": "long"}),
         "process.state.m.key_type: is required"),
        (lambda b: b["process"]["state"].update(r={"kind": "reducing", "type": "long"}),
         "process.state.r.reduce: is required"),
        (lambda b: b["process"]["state"]["sum"].update(reduce="m:f"),
         "process.state.sum.reduce: does not apply to value state"),
        (lambda b: b["process"]["state"]["sum"].update(ttl="soon"),
         "process.state.sum.ttl:"),
        (lambda b: b["process"].update(output={}),
         "process.output: must map each output column to a type"),
        (lambda b: b["process"]["output"].update(_op="string"),
         "process.output._op: is not a valid output column name"),
        (lambda b: b["sinks"][0].update(mode="upsert"),
         "sinks.out.mode: a process function's output is appended"),
        (lambda b: b["sinks"][0].update(partition_by=["nope"]),
         "sinks.out.partition_by: 'nope' is not an output column"),
    ],
)  # fmt: skip
def test_each_problem_names_its_field(change: Any, expected: str) -> None:
    problems = _problems(change)
    assert any(p.startswith(expected) for p in problems), problems


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("bigint", "long"),
        ("Array< Integer >", "array<int>"),
        ("map<string, array<double>>", "map<string,array<double>>"),
        ("struct<a: int, b: struct<c: bool>>", "struct<a:int,b:struct<c:boolean>>"),
    ],
)
def test_types_have_one_canonical_form(text: str, canonical: str) -> None:
    assert parse_type(text) == canonical
    assert arrow_type(canonical) is not None
    assert "`" in spark_ddl(canonical) or "struct" not in canonical


@pytest.mark.parametrize(
    "text", ["lng", "array<int", "map<array<int>,int>", "struct<a int>", "struct<a:int,a:int>"]
)
def test_bad_types_are_refused(text: str) -> None:
    with pytest.raises(InvalidType):
        parse_type(text)
