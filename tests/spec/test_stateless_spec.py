"""Stateless specs (neither ``window`` nor ``process``): output columns, ``output:``, and every
refusal, with its field, problem and fix; their state shape; what ``sluice validate`` shows."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from sluice.protocol.upgrade import compare_shapes
from sluice.report import describe_spec
from sluice.spec import SpecError, parse_spec

SCHEMA = {"user": "string", "url": "string", "ts": "timestamp", "amount": "double"}


def body(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "etl",
        "source": {
            "type": "files",
            "path": str(tmp_path / "in"),
            "format": "jsonl",
            "schema": dict(SCHEMA),
        },
        "event_time": {"column": "ts", "max_out_of_orderness": "5s"},
        "select": {"cents": "amount * 100", "host": "parse_url(url, 'HOST')"},
        "filter": "amount > 0",
        "sinks": [{"name": "out", "type": "files", "path": str(tmp_path / "out")}],
        "checkpoint": {"storage": str(tmp_path / "ckpt")},
    }
    data.update(overrides)
    return data


def problems(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return [(p.field, p.problem, p.fix) for p in info.value.problems]


def test_a_spec_without_window_or_process_is_stateless(tmp_path: Path) -> None:
    spec = parse_spec(body(tmp_path))
    assert spec.stateless and spec.operator == "stateless"
    assert (spec.window, spec.process, spec.aggregates, spec.key_by) == (None, None, (), ())
    assert spec.output_columns() == ("user", "url", "ts", "amount", "cents", "host")
    with pytest.raises(TypeError, match="pipeline etl runs no window"):
        _ = spec.windowing


def test_output_picks_and_orders_columns(tmp_path: Path) -> None:
    spec = parse_spec(body(tmp_path, output=["host", "ts", "cents"]))
    assert spec.output_columns() == ("host", "ts", "cents")


def test_the_state_shape_ignores_select_filter_and_output(tmp_path: Path) -> None:
    one = parse_spec(body(tmp_path))
    other = parse_spec(body(tmp_path, select={"x": "1"}, filter="url > ''", output=["x"]))
    assert one.state_shape() == other.state_shape() == {"operator": "stateless"}
    assert one.fingerprint() == other.fingerprint()
    windowed = parse_spec(body(tmp_path, window={"type": "tumbling", "size": "1m"},
                               aggregates={"n": "count(*)"}))  # fmt: skip
    assert windowed.fingerprint() != one.fingerprint()


def test_key_by_is_refused(tmp_path: Path) -> None:
    assert problems(body(tmp_path, key_by=["user"])) == [(
        "key_by",
        "has no meaning in a stateless pipeline (no window, no process function): every "
        "accepted record is one output row",
        "remove key_by, or add a window and aggregates (or a process function) to group by it",
    )]  # fmt: skip


def test_unknown_and_duplicate_output_columns_are_refused(tmp_path: Path) -> None:
    columns = "['user', 'url', 'ts', 'amount', 'cents', 'host']"
    assert problems(body(tmp_path, output=["user", "nope", "cents", "user"])) == [
        ("output[1]", "'nope' is not a source or select column", f"use some of {columns}"),
        ("output", "names 'user' twice", "list each column once"),
    ]


@pytest.mark.parametrize("value", [[], {"user": 1}, ["user", 3]])
def test_output_must_be_a_list_of_names(tmp_path: Path, value: Any) -> None:
    assert problems(body(tmp_path, output=value)) == [
        ("output", f"{value!r} is not a list of column names", "e.g. ['user', 'url']")
    ]


@pytest.mark.parametrize("operator", ["window", "process"])
def test_output_is_refused_with_a_window_or_a_process_function(
    tmp_path: Path, operator: str
) -> None:
    extra: dict[str, Any] = {"window": {"type": "tumbling", "size": "1m"},
                             "aggregates": {"n": "count(*)"}}  # fmt: skip
    if operator == "process":
        extra = {"process": {"function": "mod:fn", "output": {"user": "string"}}}
    found = problems(body(tmp_path, output=["user"], **extra))
    assert found == [(
        "output",
        "only applies to a stateless pipeline (no window, no process)",
        "remove it: windows emit keys, window bounds and aggregates; a process function "
        "declares process.output",
    )]  # fmt: skip


def test_sinks_are_append_and_partitioned_by_output_columns(tmp_path: Path) -> None:
    sink = {"name": "out", "type": "files", "path": str(tmp_path / "out"), "mode": "upsert",
            "partition_by": ["host", "amount"]}  # fmt: skip
    assert problems(body(tmp_path, sinks=[sink], output=["host", "cents"])) == [
        ("sinks.out.mode", "a stateless pipeline's output is appended", "remove mode: upsert"),
        ("sinks.out.partition_by", "'amount' is not an output column",
         "use ['host', 'cents']"),
    ]  # fmt: skip
    del sink["mode"]
    spec = parse_spec(body(tmp_path, sinks=[sink]))  # amount is output without ``output:``
    assert spec.sinks[0].partition_by == ("host", "amount")


@pytest.mark.parametrize("extra", [{"aggregates": {"n": "count(*)"}}, {"emit": "on_close"}])
def test_aggregates_or_emit_without_a_window_still_need_the_window(
    tmp_path: Path, extra: dict[str, Any]
) -> None:
    window = (
        "window",
        "is required",
        "e.g. {type: tumbling, size: 1m}; or leave out aggregates and emit for a stateless "
        "pipeline (docs/stateless.md)",
    )
    found = problems(body(tmp_path, **extra))
    assert found[0] == window
    if "emit" in extra:  # and the aggregates the window would compute
        assert [f for f, _, _ in found] == ["window", "aggregates"]


def test_event_time_is_still_required(tmp_path: Path) -> None:
    data = body(tmp_path)
    del data["event_time"]
    assert [f for f, _, _ in problems(data)] == ["event_time"]


def test_stateless_shapes_under_the_upgrade_rules(tmp_path: Path) -> None:
    stateless = parse_spec(body(tmp_path)).state_shape()
    changed = parse_spec(body(tmp_path, select={}, filter=None, output=["ts"])).state_shape()
    window = {"type": "tumbling", "size": "1m"}
    windowed = parse_spec(body(tmp_path, window=window, aggregates={"n": "count(*)"}))
    same = compare_shapes(stateless, changed)
    assert not same.changed and not same.reset_all
    started = compare_shapes(stateless, windowed.state_shape())
    assert not started.drops_state and started.reset_all
    shown = '{"size_us": 60000000, "type": "tumbling"}'
    assert started.added == (
        f"operator: stateless before, window {shown} now (it starts with empty state)",
    )
    stopped = compare_shapes(windowed.state_shape(), stateless)
    assert stopped.drops_state and stopped.reset_all
    assert stopped.dropped == (
        f"operator: stored window {shown}, spec now stateless (all state is dropped)",
    )


def test_validate_says_what_the_spec_means(tmp_path: Path) -> None:
    spec = parse_spec(body(tmp_path, output=["host", "cents"]))
    console = Console(record=True, width=200)
    console.print(describe_spec(spec))
    text = console.export_text()
    for line in ("stateless: every accepted record is appended as one row, no state",
                 "select cents", "amount * 100", "filter", "amount > 0", "output",
                 "host, cents", "(stays empty: no window, so nothing is late)"):  # fmt: skip
        assert line in text, line
    full = copy.deepcopy(body(tmp_path))
    console = Console(record=True, width=200)
    console.print(describe_spec(parse_spec(full)))
    assert "user, url, ts, amount, cents, host (schema + select)" in console.export_text()
