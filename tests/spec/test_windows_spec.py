"""Spec fields of the window issue: window types, emit modes, select/filter, the new
aggregates, idle_timeout and partitioned files sources."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sluice.spec import parse_spec
from sluice.spec.components.windows import CountWindow, HoppingWindow, SessionWindow, TumblingWindow
from sluice.spec.model import WindowSpec

from tests.spec.test_loader import ORIGIN, base, only_problem


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        ({"type": "tumbling", "size": "1m"}, TumblingWindow(size_us=60_000_000)),
        (
            {"type": "hopping", "size": "10s", "slide": "2s"},
            HoppingWindow(size_us=10_000_000, slide_us=2_000_000),
        ),
        ({"type": "session", "gap": "30s"}, SessionWindow(gap_us=30_000_000)),
        (
            {"type": "session", "gap": "30s", "max_duration": "10m"},
            SessionWindow(gap_us=30_000_000, max_duration_us=600_000_000),
        ),
        ({"type": "count", "count": 5}, CountWindow(count=5, count_slide=5)),
        ({"type": "count", "count": 5, "slide": 2}, CountWindow(count=5, count_slide=2)),
    ],
)
def test_every_window_type_parses(
    tmp_path: Path, window: dict[str, Any], expected: WindowSpec
) -> None:
    data = base(tmp_path)
    data["window"] = window
    assert parse_spec(data, origin=ORIGIN).window == expected


@pytest.mark.parametrize(
    ("window", "field", "words"),
    [
        ({"type": "sliding", "size": "1m"}, "window.type", "not valid"),
        ({"type": "hopping", "size": "10s"}, "window.slide", "required"),
        ({"type": "hopping", "size": "10s", "slide": "20s"}, "window.slide", "longer than"),
        ({"type": "session", "size": "10s", "gap": "5s"}, "window.size", "does not apply"),
        ({"type": "session"}, "window.gap", "required"),
        ({"type": "session", "gap": "5s", "max_duration": "0s"}, "window.max_duration", "zero"),
        ({"type": "count"}, "window.count", "required"),
        ({"type": "count", "count": 2, "slide": 3}, "window.slide", "larger than"),
        ({"type": "count", "count": 0}, "window.count", "positive"),
    ],
)
def test_bad_windows_name_the_field(
    tmp_path: Path, window: dict[str, Any], field: str, words: str
) -> None:
    data = base(tmp_path)
    data["window"] = window
    problem, _ = only_problem(data, field)
    assert words in problem


def test_on_update_needs_upsert_sinks(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["emit"] = "on_update"
    problem, fix = only_problem(data, "sinks.out.mode")
    assert "upsert" in problem and "mode: upsert" in fix
    data["sinks"][0]["mode"] = "upsert"
    spec = parse_spec(data, origin=ORIGIN)
    assert spec.emit == "on_update" and spec.sinks[0].mode == "upsert"


def test_select_filter_and_new_aggregates(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["select"] = {"host": "parse_url(url, 'HOST')", "cents": "amount * 100"}
    data["filter"] = "amount IS NULL OR amount >= 0"
    data["key_by"] = ["host"]
    data["aggregates"] = {
        "users": "count_distinct(user)",
        "approx_users": "approx_count_distinct(user)",
        "first_url": "first(url)",
        "last_cents": "last(cents)",
        "total": "sum(cents)",
    }
    spec = parse_spec(data, origin=ORIGIN)
    assert spec.select == (("host", "parse_url(url, 'HOST')"), ("cents", "amount * 100"))
    assert spec.filter == "amount IS NULL OR amount >= 0"
    assert spec.key_by == ("host",)
    assert [a.func for a in spec.aggregates] == [
        "count_distinct", "approx_count_distinct", "first", "last", "sum",
    ]  # fmt: skip
    assert spec.state_shape()["key_by"] == {"host": "derived"}


@pytest.mark.parametrize(
    ("section", "value", "field", "words"),
    [
        ("select", {"user": "upper(user)"}, "select.user", "clashes"),
        ("select", {"bad name": "1"}, "select.bad name", "not a valid column name"),
        ("select", ["x"], "select", "expected a mapping"),
        ("filter", "", "filter", "predicate"),
    ],
)
def test_bad_select_and_filter(
    tmp_path: Path, section: str, value: Any, field: str, words: str
) -> None:
    data = base(tmp_path)
    data[section] = value
    problem, _ = only_problem(data, field)
    assert words in problem


def test_idle_timeout_and_partitioned_files(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["event_time"]["idle_timeout"] = "30s"
    data["source"]["partition_by"] = "directory"
    spec = parse_spec(data, origin=ORIGIN)
    assert spec.event_time.idle_timeout_us == 30_000_000
    assert spec.source.partition_by == "directory"
    data["source"]["partition_by"] = "hash"
    only_problem(data, "source.partition_by")


def test_tumbling_shape_is_unchanged_for_existing_checkpoints(tmp_path: Path) -> None:
    """Checkpoints written before the window issue stored this shape; it must still match."""
    shape = parse_spec(base(tmp_path), origin=ORIGIN).state_shape()
    assert shape["window"] == {"type": "tumbling", "size_us": 60_000_000}
    assert "select" not in shape
