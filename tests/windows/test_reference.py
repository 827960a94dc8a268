"""Pin the windowing reference with small hand-computed cases, and the generator's promises.

No Spark here: these run in well under a second each. Times are seconds after
2024-01-01T00:00:00 (UTC); ``at(75)`` is 00:01:15.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.windows.data import (
    BRIDGE_USER,
    EVENT_TIME,
    FILE_ORDER,
    SCHEMA,
    epoch_splits,
    make_files,
)
from tests.windows.reference import (
    Reference,
    compare,
    compute,
    parse_duration_us,
    parse_line,
    read_order,
)

T0 = datetime(2024, 1, 1)
TUMBLING = {"type": "tumbling", "size": "1m"}
WINDOW_KEYS = ["user", "window_start", "window_end"]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def rec(user: str | None, seconds: float, amount: Any = None, url: str = "/") -> str:
    ts = at(seconds).isoformat(timespec="microseconds")
    return json.dumps({"user": user, "url": url, "ts": ts, "amount": amount})


def text(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def spec(
    window: dict[str, Any],
    *,
    emit: str = "on_close",
    bound: str = "0s",
    lateness: str = "0s",
    idle: str | None = None,
    aggregates: dict[str, str] | None = None,
    key_by: tuple[str, ...] = ("user",),
    **extra: Any,
) -> dict[str, Any]:
    event_time: dict[str, Any] = {
        "column": "ts",
        "max_out_of_orderness": bound,
        "allowed_lateness": lateness,
    }
    if idle is not None:
        event_time["idle_timeout"] = idle
    return {
        "source": {
            "type": "files",
            "format": "jsonl",
            "schema": SCHEMA,
            "partition_by": "directory",
        },
        "event_time": event_time,
        "key_by": list(key_by),
        "window": window,
        "aggregates": aggregates or {"n": "count(*)", "total": "sum(amount)"},
        "emit": emit,
        **extra,
    }


def row(user: str, start: float, end: float, **aggs: Any) -> dict[str, Any]:
    return {"user": user, "window_start": at(start), "window_end": at(end), **aggs}


def assert_rows(
    actual: list[dict[str, Any]], expected: list[dict[str, Any]], keys: list[str] | None = None
) -> None:
    problems = compare(actual, expected, keys or WINDOW_KEYS)
    assert not problems, "\n".join(problems)
    assert len(actual) == len(expected)


# --------------------------------------------------------------------------- basics


def test_durations() -> None:
    assert parse_duration_us("500ms") == 500_000
    assert parse_duration_us("5s") == 5_000_000
    assert parse_duration_us("1m") == 60_000_000
    assert parse_duration_us("2h") == 7_200_000_000
    assert parse_duration_us("1d") == 86_400_000_000
    assert parse_duration_us(1.5) == 1_500_000
    with pytest.raises(ValueError):
        parse_duration_us("5 minutes")


def test_read_order_interleaves_partitions_and_skips_hidden_keys() -> None:
    keys = ["b/0001.jsonl", "a/0002.jsonl", "a/0001.jsonl", "a/_tmp.jsonl", ".x/0001.jsonl"]
    assert read_order(keys) == ["a/0001.jsonl", "b/0001.jsonl", "a/0002.jsonl"]
    assert FILE_ORDER(keys) == ["a/0001.jsonl", "b/0001.jsonl", "a/0002.jsonl"]
    assert read_order(["b", "a", "_c"], "none") == ["a", "b"]


def test_tumbling_on_close_and_on_update() -> None:
    files = {
        "a/0001.jsonl": text(
            rec("u1", 10, 1.0),
            rec("u1", 20, 2.0),
            rec("u2", 30, 4.0),
            rec("u1", 70, 8.0),
            rec("u1", 130, 16.0),
        )
    }
    closed = compute(spec(TUMBLING, bound="5s"), files)
    assert closed.final_watermark == at(125)
    assert_rows(
        closed.emitted,
        [
            row("u1", 0, 60, n=2, total=3.0),
            row("u2", 0, 60, n=1, total=4.0),
            row("u1", 60, 120, n=1, total=8.0),  # 120 <= 125: closed
        ],
    )
    assert closed.late == []
    assert closed.counts == {"records_read": 5, "accepted": 5, "late": 0, "dead": 0, "filtered": 0}
    updated = compute(spec(TUMBLING, bound="5s", emit="on_update"), files)
    assert_rows(updated.emitted, [*closed.emitted, row("u1", 120, 180, n=1, total=16.0)])


def test_late_and_allowed_late_tumbling() -> None:
    files = {
        "a/0001.jsonl": text(
            rec("u1", 10, 1.0),
            rec("u1", 100, 2.0),  # W = 10
            rec("u1", 50, 3.0),  # W = 100: [0, 60) + 30 s = 90 <= 100 -> late
            rec("u1", 75, 4.0),  # W = 100, 75 < 100 but [60, 120) + 30 > 100 -> allowed
            rec("u1", 89.999999, 5.0),  # W = 100, 90 > 100 - 30 -> allowed
        )
    }
    ref = compute(spec(TUMBLING, lateness="30s", emit="on_update"), files)
    assert ref.counts == {"records_read": 5, "accepted": 4, "late": 1, "dead": 0, "filtered": 0}
    assert ref.late == [
        {
            "user": "u1",
            "url": "/",
            "ts": at(50),
            "amount": 3.0,
            "window_start": at(0),
            "window_end": at(60),
            "watermark": at(100),
            "source_file": "a/0001.jsonl",
            "source_line": 3,
        }
    ]
    assert_rows(
        ref.emitted,
        [row("u1", 0, 60, n=1, total=1.0), row("u1", 60, 120, n=3, total=11.0)],
    )
    # on_close: the final watermark is 100, so only windows with end + 30 s <= 100 close.
    closed = compute(spec(TUMBLING, lateness="30s"), files)
    assert_rows(closed.emitted, [row("u1", 0, 60, n=1, total=1.0)])
    behind = [r for r in ref.records if r["watermark"] and r["event_time"] < r["watermark"]]
    assert [(r["source_line"], r["status"]) for r in behind] == [
        (3, "late"),
        (4, "accepted"),
        (5, "accepted"),
    ]


def test_lateness_boundary_is_inclusive() -> None:
    """``end + allowed_lateness <= W`` is missed: equality is late."""
    files = {"a/0001.jsonl": text(rec("u1", 90), rec("u1", 0))}  # W = 90 = 60 + 30
    ref = compute(spec(TUMBLING, lateness="30s"), files)
    assert ref.counts["late"] == 1
    files = {"a/0001.jsonl": text(rec("u1", 89.999999), rec("u1", 0))}
    assert compute(spec(TUMBLING, lateness="30s"), files).counts["late"] == 0


def test_watermark_is_per_partition() -> None:
    """A record behind another partition's newest time is not late (W(r) is per partition)."""
    files = {
        "a/0001.jsonl": text(rec("u1", 200)),
        "b/0001.jsonl": text(rec("u1", 10), rec("u1", 12)),
    }
    ref = compute(spec(TUMBLING, emit="on_update"), files)
    assert ref.counts["late"] == 0
    assert ref.final_watermark == at(12)  # min over partitions
    assert_rows(ref.emitted, [row("u1", 0, 60, n=2, total=None), row("u1", 180, 240, n=1)])


def test_hopping_partial_and_full_misses() -> None:
    hopping = {"type": "hopping", "size": "1m", "slide": "20s"}
    files = {
        "a/0001.jsonl": text(
            rec("u1", 110, 1.0),
            # W = 110: [20,80) and [40,100) missed, [60,120) not: accepted, 2 late rows
            rec("u1", 75, 2.0),
            rec("u1", 200, 4.0),
            # W = 200: [20,80), [40,100), [60,120) all missed: late, 3 rows
            rec("u1", 65, 8.0),
        )
    }
    ref = compute(spec(hopping, emit="on_update"), files)
    assert ref.counts == {"records_read": 4, "accepted": 3, "late": 1, "dead": 0, "filtered": 0}
    assert [(r["source_line"], r["window_start"], r["watermark"]) for r in ref.late] == [
        (2, at(20), at(110)),
        (2, at(40), at(110)),
        (4, at(20), at(200)),
        (4, at(40), at(200)),
        (4, at(60), at(200)),
    ]
    assert_rows(
        ref.emitted,
        [
            row("u1", 60, 120, n=2, total=3.0),
            row("u1", 80, 140, n=1, total=1.0),
            row("u1", 100, 160, n=1, total=1.0),
            row("u1", 160, 220, n=1, total=4.0),
            row("u1", 180, 240, n=1, total=4.0),
            row("u1", 200, 260, n=1, total=4.0),
        ],
    )
    closed = compute(spec(hopping), files)  # final watermark 200
    assert [r["window_start"] for r in closed.emitted] == [at(60), at(80), at(100)]


def test_hopping_aligns_to_the_epoch_when_size_is_not_a_multiple_of_slide() -> None:
    hopping = {"type": "hopping", "size": "50s", "slide": "20s"}
    ref = compute(spec(hopping, emit="on_update"), {"a/0001.jsonl": text(rec("u1", 45))})
    # starts s = 20k with s <= 45 < s + 50: 0, 20, 40
    assert [(r["window_start"], r["window_end"]) for r in ref.emitted] == [
        (at(0), at(50)),
        (at(20), at(70)),
        (at(40), at(90)),
    ]


def test_sessions_merge_when_they_overlap_or_touch() -> None:
    """As Flink's ``TimeWindow.intersects``: windows that only touch are one session too
    (issue #23 changed this on purpose: before, [30, 40) and [40, 50) stayed apart)."""
    files = {
        "a/0001.jsonl": text(
            rec("u1", 0, 1.0),
            rec("u2", 3, 16.0),
            rec("u1", 5, 2.0),  # [5, 15) overlaps [0, 10): one session [0, 15)
            rec("u1", 30, 4.0),
            rec("u1", 40, 8.0),  # [40, 50) touches [30, 40): one session [30, 50)
            rec("u1", 61, 1.0),  # 11 s after the last record: a new session
        )
    }
    ref = compute(spec({"type": "session", "gap": "10s"}, emit="on_update"), files)
    assert_rows(
        ref.emitted,
        [
            row("u1", 0, 15, n=2, total=3.0),
            row("u2", 3, 13, n=1, total=16.0),
            row("u1", 30, 50, n=2, total=12.0),
            row("u1", 61, 71, n=1, total=1.0),
        ],
    )


def test_session_bridged_by_an_allowed_late_record() -> None:
    files = {
        "a/0001.jsonl": text(
            rec("u1", 0, 1.0),
            rec("u1", 2, 2.0),  # session [0, 12)
            rec("u1", 20, 4.0),
            rec("u1", 22, 8.0),  # session [20, 32): 18 s apart > gap
            rec("u2", 40, 0.5),  # W = 40 from now on
            rec("u1", 5, 32.0),  # 5 + 30 <= 40: late, reports [5, 15)
            rec("u1", 11, 16.0),  # 11 + 30 > 40: allowed-late; [11, 21) bridges both
            rec("u2", 100, 0.25),  # final watermark 100
        )
    }
    session = {"type": "session", "gap": "10s"}
    updated = compute(spec(session, lateness="30s", emit="on_update"), files)
    assert_rows(
        updated.emitted,
        [
            row("u1", 0, 32, n=5, total=31.0),
            row("u2", 40, 50, n=1, total=0.5),
            row("u2", 100, 110, n=1, total=0.25),
        ],
    )
    assert [(r["source_line"], r["window_start"], r["window_end"]) for r in updated.late] == [
        (6, at(5), at(15))
    ]
    closed = compute(spec(session, lateness="30s"), files)  # end + 30 <= 100
    assert_rows(
        closed.emitted,
        [row("u1", 0, 32, n=5, total=31.0), row("u2", 40, 50, n=1, total=0.5)],
    )
    # Without the bridging record the two bursts stay apart.
    lines = files["a/0001.jsonl"].splitlines()
    del lines[6]
    apart = compute(spec(session, lateness="30s", emit="on_update"), {"a/0001.jsonl": text(*lines)})
    assert [(r["window_start"], r["window_end"]) for r in apart.emitted if r["user"] == "u1"] == [
        (at(0), at(12)),
        (at(20), at(32)),
    ]


def test_session_late_rule_is_t_plus_lateness() -> None:
    """Late when ``t + allowed_lateness <= W``, even if ``t + gap`` would still be open."""
    files = {"a/0001.jsonl": text(rec("u1", 100), rec("u1", 70))}  # W = 100
    session = {"type": "session", "gap": "1m"}
    assert compute(spec(session, lateness="30s"), files).counts["late"] == 1
    files = {"a/0001.jsonl": text(rec("u1", 100), rec("u1", 70.000001))}
    assert compute(spec(session, lateness="30s"), files).counts["late"] == 0


def test_count_windows_with_slide() -> None:
    files = {
        "a/0001.jsonl": text(
            rec("u1", 50, 1.0),
            rec("u1", 10, 2.0),
            rec("u2", 5, 100.0),
            rec("u1", 30, 4.0),
        ),
        "b/0001.jsonl": text(rec("u1", 1000, 8.0)),
        "a/0002.jsonl": text(rec("u1", 0, 16.0), rec("u1", 20, 32.0)),
    }
    # u1 in position order: 50, 10, 30, (b) 1000, 0, 20 -> i = 0..5
    window = {"type": "count", "count": 3, "slide": 2}
    aggregates = {"n": "count(*)", "total": "sum(amount)", "firsts": "first(amount)"}
    keys = ["user", "window_index"]
    closed = compute(spec(window, aggregates=aggregates), files)
    expected_full = [
        # j = 0: i 0..2; j = 1: i 2..4 (window_end is the largest event time, inclusive)
        {
            "user": "u1",
            "window_index": 0,
            "window_start": at(10),
            "window_end": at(50),
            "n": 3,
            "total": 7.0,
            "firsts": 2.0,
        },
        {
            "user": "u1",
            "window_index": 1,
            "window_start": at(0),
            "window_end": at(1000),
            "n": 3,
            "total": 28.0,
            "firsts": 16.0,
        },
    ]
    assert_rows(closed.emitted, expected_full, keys)
    assert closed.late == [] and closed.counts["late"] == 0  # count windows are never late
    updated = compute(spec(window, aggregates=aggregates, emit="on_update"), files)
    partial = [
        {
            "user": "u1",
            "window_index": 2,
            "window_start": at(0),
            "window_end": at(20),
            "n": 2,
            "total": 48.0,
            "firsts": 16.0,
        },
        {
            "user": "u2",
            "window_index": 0,
            "window_start": at(5),
            "window_end": at(5),
            "n": 1,
            "total": 100.0,
            "firsts": 100.0,
        },
    ]
    assert_rows(updated.emitted, expected_full + partial, keys)


def test_count_windows_tumbling_by_default() -> None:
    lines = [rec("u1", s) for s in range(7)]
    ref = compute(spec({"type": "count", "count": 3}), {"a/0001.jsonl": text(*lines)})
    assert [(r["window_index"], r["n"]) for r in ref.emitted] == [(0, 3), (1, 3)]


def test_first_last_ties_and_cross_partition_positions() -> None:
    files = {
        "a/0001.jsonl": text(
            rec("u1", 10, url="A"),
            rec("u1", 10, url="B"),  # same time as A: A is first (earlier position)
            rec("u1", 30, url="C"),
        ),
        "b/0001.jsonl": text(rec("u1", 30, url="D")),
        # read after b/0001 (file order is (name, partition)): E is last, not D
        "a/0002.jsonl": text(rec("u1", 30, url="E"), rec("u1", 20, url="F")),
    }
    aggregates = {"first_url": "first(url)", "last_url": "last(url)", "urls": "count(url)"}
    ref = compute(spec(TUMBLING, aggregates=aggregates, emit="on_update"), files)
    assert_rows(ref.emitted, [row("u1", 0, 60, first_url="A", last_url="E", urls=6)])


def test_first_last_keep_nulls() -> None:
    files = {"a/0001.jsonl": text(rec("u1", 1, None), rec("u1", 2, 5.0), rec("u1", 3, None))}
    aggregates = {"f": "first(amount)", "l": "last(amount)", "lo": "min(amount)"}
    ref = compute(spec(TUMBLING, aggregates=aggregates, emit="on_update"), files)
    assert_rows(ref.emitted, [row("u1", 0, 60, f=None, l=None, lo=5.0)])


def test_all_aggregates() -> None:
    files = {
        "a/0001.jsonl": text(
            rec("u1", 1, 1.5, url="/a"),
            rec("u1", 2, None, url="/b"),
            rec("u1", 3, 2.25, url="/a"),
            rec("u1", 4, 0.1, url=None),  # type: ignore[arg-type]
            rec("u2", 5, None, url="/c"),
        )
    }
    aggregates = {
        "n": "count(*)",
        "amounts": "count(amount)",
        "total": "sum(amount)",
        "mean": "avg(amount)",
        "lo": "min(amount)",
        "hi": "max(ts)",
        "urls": "count_distinct(url)",
        "approx_urls": "approx_count_distinct(url)",
        "f": "first(url)",
        "l": "last(url)",
    }
    ref = compute(spec(TUMBLING, aggregates=aggregates, emit="on_update"), files)
    u1, u2 = ref.emitted
    assert u1 == row(
        "u1",
        0,
        60,
        n=4,
        amounts=3,
        total=3.85,
        mean=3.85 / 3,
        lo=0.1,
        hi=at(4),
        urls=2,
        approx_urls=2,
        f="/a",
        l=None,
    )
    assert isinstance(u1["n"], int) and isinstance(u1["total"], float)
    assert u2 == row(
        "u2",
        0,
        60,
        n=1,
        amounts=0,
        total=None,
        mean=None,
        lo=None,
        hi=at(5),
        urls=1,
        approx_urls=1,
        f="/c",
        l="/c",
    )


def test_null_keys_are_a_group_and_key_by_may_be_empty() -> None:
    files = {"a/0001.jsonl": text(rec(None, 1, 1.0), rec(None, 2, 2.0), rec("u1", 3, 4.0))}
    ref = compute(spec(TUMBLING, emit="on_update"), files)
    assert [(r["user"], r["n"]) for r in ref.emitted] == [(None, 2), ("u1", 1)]
    everything = compute(spec(TUMBLING, emit="on_update", key_by=()), files)
    assert everything.emitted == [
        {"window_start": at(0), "window_end": at(60), "n": 3, "total": 7.0}
    ]


def test_select_and_filter() -> None:
    files = {
        "a/0001.jsonl": text(
            rec("u1", 10, 20.0, url="/buy"),
            rec("u1", 15, 5.0, url="/buy"),  # filtered: amount too small
            rec("u1", 200, 1.0, url="/look"),  # filtered, but W = 200 afterwards
            rec("u1", 20, 30.0, url="/buy"),  # late because of the filtered record
            rec("u1", 210, None, url="/buy"),  # filter is NULL -> filtered
            rec("u1", 230, 50.0, url="/buy"),
        )
    }
    s = spec(
        TUMBLING,
        emit="on_update",
        aggregates={"n": "count(*)", "doubled": "sum(twice)", "pages": "max(page)"},
        key_by=("user", "big"),
        select={"twice": "amount * 2", "big": "twice > 50", "page": "upper(url)"},
        filter="amount >= 10",
    )
    ref = compute(s, files)
    assert ref.counts == {"records_read": 6, "accepted": 2, "late": 1, "dead": 0, "filtered": 3}
    keys = ["user", "big", "window_start"]
    expected = [
        {
            "user": "u1",
            "big": False,
            "window_start": at(0),
            "window_end": at(60),
            "n": 1,
            "doubled": 40.0,
            "pages": "/BUY",
        },
        {
            "user": "u1",
            "big": True,
            "window_start": at(180),
            "window_end": at(240),
            "n": 1,
            "doubled": 100.0,
            "pages": "/BUY",
        },
    ]
    assert not compare(ref.emitted, expected, keys)
    assert len(ref.emitted) == 2
    # late rows carry the schema columns only, not the derived ones
    assert set(ref.late[0]) == {
        *SCHEMA,
        "window_start",
        "window_end",
        "watermark",
        "source_file",
        "source_line",
    }
    assert ref.late[0]["source_line"] == 4


def test_dead_letters() -> None:
    content = text(
        rec("u1", 10, 1.0),
        "not json",
        "[1, 2]",
        '{"user": "u1", "url": "/", "amount": 1}',
        '{"user": "u1", "url": "/", "ts": null}',
        '{"user": "u1", "url": "/", "ts": "2024-01-01T00:09:00", "amount": "abc"}',
        '{"user": "u1", "url": "/", "ts": "noon", "amount": 1}',
        "",
        "   ",
        '{"user": "u1", "url": "/", "ts": "2024-01-01T00:00:20Z", "amount": "2.5"}',
        '{"user": 7, "url": "/", "ts": "2024-01-01 00:00:30", "amount": 3}',
    )
    ref = compute(spec(TUMBLING, emit="on_update"), {"a/0001.jsonl": content})
    assert [(d["source_line"], d["reason_code"]) for d in ref.dead] == [
        (2, "malformed"),
        (3, "malformed"),
        (4, "missing_event_time"),
        (5, "missing_event_time"),
        (6, "wrong_type"),
        (7, "wrong_type"),
    ]
    assert ref.counts == {"records_read": 9, "accepted": 3, "late": 0, "dead": 6, "filtered": 0}
    # the dead record at 00:09:00 did not advance the watermark
    assert ref.final_watermark == at(30)
    assert [(r["user"], r["n"], r["total"]) for r in ref.emitted] == [
        ("7", 1, 3.0),
        ("u1", 2, 3.5),
    ]
    assert [r["source_line"] for r in ref.records] == [1, 10, 11]


def test_parse_line_conversions() -> None:
    schema = {"ts": "timestamp", "n": "int", "x": "double", "b": "boolean", "s": "string"}
    line = '{"ts": "2024-01-01T01:00:00+01:00", "n": " 7", "x": "1e2", "b": "TRUE", "s": 1.50}'
    assert parse_line(line, schema, "ts") == {
        "ts": datetime(2024, 1, 1),
        "n": 7,
        "x": 100.0,
        "b": True,
        "s": "1.50",
    }
    assert parse_line('{"ts": "2024-01-01 00:00"}', schema, "ts")["ts"] == datetime(2024, 1, 1)
    for bad in (
        '{"ts": "2024-01-01", "n": 1}',
        '{"ts": "x"}',
        '{"ts": "2024-01-01T00:00", "n": 1.5}',
        '{"ts": "2024-01-01T00:00", "n": 3000000000}',
        '{"ts": "2024-01-01T00:00", "b": 1}',
    ):
        with pytest.raises(Exception, match="wrong_type"):
            parse_line(bad, schema, "ts")


def test_idle_timeout_advances_the_final_watermark() -> None:
    files = {
        "a/0001.jsonl": text(rec("u1", 10), rec("u1", 200)),
        "b/0001.jsonl": text(rec("u2", 15)),
    }
    held = compute(spec(TUMBLING, bound="5s"), files)
    assert held.final_watermark == at(10) and held.emitted == [] and held.idle_partitions == ()
    freed = compute(spec(TUMBLING, bound="5s", idle="1m"), files)  # 200 - 15 > 60: b idle
    assert freed.idle_partitions == ("b",)
    assert freed.final_watermark == at(195)
    assert [(r["user"], r["window_start"]) for r in freed.emitted] == [("u1", at(0)), ("u2", at(0))]
    # strictly greater: a lag of exactly the timeout is not idle
    exact = compute(spec(TUMBLING, bound="5s", idle="185s"), files)
    assert exact.idle_partitions == () and exact.final_watermark == at(10)


def test_no_valid_records() -> None:
    ref = compute(spec(TUMBLING), {"a/0001.jsonl": text("nope")})
    assert ref.final_watermark is None and ref.emitted == [] and ref.counts["dead"] == 1


def test_partition_by_none_reads_in_key_order() -> None:
    s = spec(TUMBLING, emit="on_update", aggregates={"l": "last(url)"})
    s["source"]["partition_by"] = "none"
    files = {"b.jsonl": text(rec("u1", 5, url="B")), "a.jsonl": text(rec("u1", 5, url="A"))}
    assert compute(s, files).emitted[0]["l"] == "B"


# --------------------------------------------------------------------------- compare


def test_compare_reports_differences() -> None:
    import pandas as pd

    expected = [row("u1", 0, 60, n=2, total=3.0, approx=100), row("u2", 0, 60, n=1, total=None)]
    actual = [
        {
            "user": "u1",
            "window_start": pd.Timestamp(at(0), tz="UTC"),
            "window_end": pd.Timestamp(at(60)),
            "n": 2,
            "total": 3.0 + 1e-12,
            "approx": 101,
            "_op": "upsert",
        },
        {"user": "u2", "window_start": at(0), "window_end": at(60), "n": 1, "total": float("nan")},
    ]
    assert compare(actual, expected, WINDOW_KEYS, approx={"approx": 0.02}) == []
    problems = compare(actual, expected, WINDOW_KEYS)
    assert len(problems) == 1 and "approx = 101" in problems[0]
    actual[1]["n"] = 2
    actual.append(row("u3", 0, 60, n=1))
    problems = compare(actual[1:], expected, WINDOW_KEYS)
    assert any(p.startswith("missing row user='u1'") for p in problems)
    assert any(p.startswith("extra row user='u3'") for p in problems)
    assert any("n = 2, expected 1" in p for p in problems)
    assert any("duplicate" in p for p in compare([*actual, actual[0]], expected, WINDOW_KEYS))


# --------------------------------------------------------------------------- the generator

GENERATED = {
    **spec(TUMBLING, emit="on_update"),
    "event_time": EVENT_TIME,  # the defaults make_files is designed for: 5s / 30s / 1m
}


def test_make_files_is_deterministic() -> None:
    assert make_files(7) == make_files(7)
    assert make_files(7) != make_files(8)
    assert epoch_splits(make_files(7), 3) == epoch_splits(make_files(7), 3)


def test_make_files_layout() -> None:
    files = make_files(3)
    partitions = Counter(k.split("/")[0] for k in files)
    assert partitions == {"a": 6, "b": 6, "c": 1}  # the idle partition simply has fewer files
    assert all(f"{p}/0001.jsonl" in files for p in "abc")
    assert all(text.strip() for text in files.values())  # no empty files
    order = FILE_ORDER(files)
    assert order[:5] == [
        "a/0001.jsonl",
        "b/0001.jsonl",
        "c/0001.jsonl",
        "a/0002.jsonl",
        "b/0002.jsonl",
    ]
    records = sum(1 for text in files.values() for line in text.split("\n") if line.strip())
    assert 300 <= records <= 1000


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_make_files_has_every_promised_feature(seed: int) -> None:
    files = make_files(seed)
    ref = compute(GENERATED, files)
    # too-late and allowed-late records
    assert ref.counts["late"] >= 2  # one in the last file of each active partition
    allowed = [
        r
        for r in ref.records
        if r["status"] == "accepted" and r["event_time"] < (r["watermark"] or datetime.min)
    ]
    assert len(allowed) >= 2
    # out of order within the bound
    newest: dict[str, datetime] = {}
    within = 0
    for r in ref.records:
        m = newest.get(r["partition"])
        if m is not None and r["watermark"] < r["event_time"] < m:
            within += 1
        newest[r["partition"]] = max(m or r["event_time"], r["event_time"])
    assert within >= 5
    # dead letters of every kind
    assert Counter(d["reason_code"] for d in ref.dead) == {
        "malformed": 3,
        "missing_event_time": 2,
        "wrong_type": 2,
    }
    assert any(
        '"amount": "abc"' in files[d["source_file"]].split("\n")[d["source_line"] - 1]
        for d in ref.dead
    )
    # the idle partition: idle at the end with the timeout, holding the watermark back without
    assert ref.idle_partitions == ("c",)
    held = compute(
        {**GENERATED, "event_time": {**GENERATED["event_time"], "idle_timeout": None}}, files
    )
    assert held.final_watermark is not None and ref.final_watermark is not None
    assert held.final_watermark < ref.final_watermark - timedelta(minutes=1)
    # the sum of parts
    c = ref.counts
    assert c["records_read"] == c["accepted"] + c["late"] + c["dead"] + c["filtered"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_make_files_bridges_a_session(seed: int) -> None:
    files = make_files(seed)
    session = spec(
        {"type": "session", "gap": "10s"}, emit="on_update", bound="5s", lateness="30s", idle="1m"
    )
    ref = compute(session, files)
    bridged = [r for r in ref.emitted if r["user"] == BRIDGE_USER]
    assert len(bridged) == 1 and bridged[0]["n"] == 7
    # the bridging record is allowed-late: behind the watermark, accepted
    key, number = next(
        (k, i)
        for k in FILE_ORDER(files)
        for i, line in enumerate(files[k].split("\n"), start=1)
        if '"/bridge"' in line
    )
    (info,) = [r for r in ref.records if (r["source_file"], r["source_line"]) == (key, number)]
    assert info["status"] == "accepted" and info["event_time"] < info["watermark"]
    lines = files[key].split("\n")
    del lines[number - 1]
    apart = compute(session, {**files, key: "\n".join(lines)})
    assert [r["n"] for r in apart.emitted if r["user"] == BRIDGE_USER] == [3, 3]


def _global_watermark(records: list[dict[str, Any]], idle: timedelta, bound: timedelta) -> Any:
    newest: dict[str, datetime] = {}
    for r in records:
        newest[r["partition"]] = max(newest.get(r["partition"], r["event_time"]), r["event_time"])
    top = max(newest.values())
    return min(m for m in newest.values() if top - m <= idle) - bound


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_epoch_splits_keep_the_watermark_rule_split_invariant(seed: int) -> None:
    """At every cut of every split, each later record r has W_g(cut) <= W(r), so
    ``W'(r) = max(W(r), W_g) = W(r)``: the generated input does not depend on the epoch cut."""
    files = make_files(seed)
    ref = compute(GENERATED, files)
    order = FILE_ORDER(files)
    for split in epoch_splits(files, seed, count=4):
        assert [k for epoch in split for k in epoch] == order
        assert {"a/0001.jsonl", "b/0001.jsonl", "c/0001.jsonl"} <= set(split[0])
        done: set[str] = set()
        for epoch in split[:-1]:
            done |= set(epoch)
            before = [r for r in ref.records if r["source_file"] in done]
            w_g = _global_watermark(before, timedelta(minutes=1), timedelta(seconds=5))
            after = [r for r in ref.records if r["source_file"] not in done]
            assert all(r["watermark"] is not None and r["watermark"] >= w_g for r in after)


def test_reference_type() -> None:
    ref = compute(GENERATED, make_files(0))
    assert isinstance(ref, Reference)
    assert set(ref.counts) == {"records_read", "accepted", "late", "dead", "filtered"}


# --------------------------------------------------------------------------- brute force


def _brute_force(window: dict[str, Any], files: dict[str, str]) -> dict[tuple[Any, ...], int]:
    """Record counts per window, straight from the doc's rules, in plain Python (on_update)."""
    bound, lateness = timedelta(seconds=5), timedelta(seconds=30)
    newest: dict[str, datetime] = {}
    kept: list[tuple[str, datetime]] = []  # (user, t) of accepted records, in position order
    counts: Counter[tuple[Any, ...]] = Counter()
    for key in FILE_ORDER(files):
        for line in files[key].split("\n"):
            try:
                obj = json.loads(line)
                t = datetime.fromisoformat(obj["ts"])
                if not isinstance(obj.get("amount"), int | float | None):
                    continue
            except (ValueError, KeyError, TypeError):
                continue
            part = key.split("/")[0]
            w = newest[part] - bound if part in newest else None
            newest[part] = max(newest.get(part, t), t)
            if window["type"] == "session":
                if w is None or t + lateness > w:
                    kept.append((obj["user"], t))
                continue
            size, slide = timedelta(minutes=1), timedelta(seconds=window.get("slide_s", 60))
            s = T0 + ((t - T0) // slide) * slide  # T0 is aligned to both
            while s + size > t:
                if w is None or s + size + lateness > w:
                    counts[(obj["user"], s, s + size)] += 1
                s -= slide
    if window["type"] == "session":
        gap = timedelta(seconds=10)
        for user in {u for u, _ in kept}:
            times = sorted(t for u, t in kept if u == user)
            first = prev = times[0]
            n = 0
            for t in times:
                if t >= prev + gap:
                    counts[(user, first, prev + gap)] = n
                    first, n = t, 0
                prev, n = t, n + 1
            counts[(user, first, prev + gap)] = n
    return dict(counts)


@pytest.mark.parametrize(
    "window",
    [
        {"type": "tumbling", "size": "1m"},
        {"type": "hopping", "size": "1m", "slide": "20s", "slide_s": 20},
        {"type": "session", "gap": "10s"},
    ],
)
@pytest.mark.parametrize("seed", [5, 6])
def test_reference_matches_a_brute_force_reading(window: dict[str, Any], seed: int) -> None:
    files = make_files(seed)
    shape = {k: v for k, v in window.items() if k != "slide_s"}
    ref = compute({**GENERATED, "window": shape}, files)
    got = {(r["user"], r["window_start"], r["window_end"]): r["n"] for r in ref.emitted}
    assert got == _brute_force(window, files)


def test_session_max_duration_cuts_at_aligned_check_points() -> None:
    """gap 10 s, max_duration 20 s: check points at 0, 20, 40, 60 ... A session starting at
    5 is cut at 40 (the first check point at least 20 s after its start), then at 60; a
    session starting at 100 (aligned) is cut at 120; a session that times out first is not
    cut."""
    seconds = [5, 12, 19, 26, 33, 39, 41, 48, 55, 61, 100, 108, 116, 123, 200]
    files = {"a/0001.jsonl": text(*(rec("u1", t, 1.0) for t in seconds), rec("u2", 500))}
    window = {"type": "session", "gap": "10s", "max_duration": "20s"}
    ref = compute(spec(window, emit="on_update"), files)
    assert_rows(
        [r for r in ref.emitted if r["user"] == "u1"],
        [
            row("u1", 5, 40, n=6, total=6.0),  # 5..39: [5, 40), cut at 40 (40 - 5 >= 20)
            row("u1", 40, 60, n=3, total=3.0),  # 41, 48, 55
            row("u1", 60, 71, n=1, total=1.0),  # 61: times out at 71
            row("u1", 100, 120, n=3, total=3.0),  # 100, 108, 116: cut at 120
            row("u1", 120, 133, n=1, total=1.0),  # 123
            row("u1", 200, 210, n=1, total=1.0),
        ],
    )
