"""Tests of the independent reference (hand-computed answers) and of the demo input."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

try:
    from tests.reference import Reference, compare_rows, compute_reference, parse_timestamp
except ImportError:  # tests/ itself is on sys.path (rootdir-relative "prepend" import mode)
    from reference import (  # type: ignore[no-redef,unused-ignore]
        Reference,
        compare_rows,
        compute_reference,
        parse_timestamp,
    )

from sluice.demo import (
    MALFORMED_KINDS,
    click_file_name,
    demo_stats,
    render_click_files,
    write_click_files,
)

SCHEMA = {"user": "string", "url": "string", "ts": "timestamp", "amount": "double"}
AGGS = {
    "clicks": "count(*)",
    "total": "sum(amount)",
    "biggest": "max(amount)",
    "mean": "avg(amount)",
    "n": "count(amount)",
    "smallest": "min(amount)",
}
DAY = datetime(2026, 1, 1, tzinfo=UTC)


def t(hms: str) -> datetime:
    """'00:01:02.5' on 2026-01-01 UTC."""
    h, m, s = hms.split(":")
    return DAY + timedelta(hours=int(h), minutes=int(m), seconds=float(s))


def rec(ts: str | None = None, user: str | None = "u1", amount: Any = 1.0, **extra: Any) -> str:
    obj: dict[str, Any] = {"user": user, "url": "/x", "amount": amount, **extra}
    if ts is not None:
        obj["ts"] = f"2026-01-01T{ts}Z"
    return json.dumps(obj)


def content(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def run(
    files: list[tuple[str, bytes]] | bytes,
    *,
    bound: float = 5.0,
    lateness: float = 0.0,
    size: float = 60.0,
    schema: dict[str, str] = SCHEMA,
    aggs: dict[str, str] = AGGS,
    key_by: list[str] | None = None,
) -> Reference:
    if isinstance(files, bytes):
        files = [("a.jsonl", files)]
    ref = compute_reference(
        files,
        schema=schema,
        event_time="ts",
        max_out_of_orderness_s=bound,
        allowed_lateness_s=lateness,
        window_size_s=size,
        key_by=["user"] if key_by is None else key_by,
        aggregates=aggs,
    )
    assert ref.accepted_count + len(ref.late) + len(ref.dead) == ref.records_read
    return ref


def win(start: str, size: float = 60.0, **cols: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "window_start": t(start),
        "window_end": t(start) + timedelta(seconds=size),
    }
    row.update(cols)
    return row


KEYS = ["user", "window_start"]


# --------------------------------------------------------------------------- windows


def test_one_key_two_windows_and_an_open_one() -> None:
    ref = run(
        content(
            rec("00:00:10", amount=1.5),
            rec("00:00:50", amount=2.5),
            rec("00:01:10", amount=4),
            rec("00:03:00", amount=1),
        )
    )
    assert ref.records_read == 4 and ref.accepted_count == 4
    assert ref.late == [] and ref.dead == []
    assert ref.final_watermark == t("00:02:55")
    expected = [
        win("00:00:00", user="u1", clicks=2, total=4.0, biggest=2.5, mean=2.0, n=2, smallest=1.5),
        win("00:01:00", user="u1", clicks=1, total=4.0, biggest=4.0, mean=4.0, n=1, smallest=4.0),
    ]
    assert compare_rows(ref.emitted, expected, keys=KEYS) == []
    assert ref.emitted == expected  # exact types too: ints stay int, floats are float
    opened = [
        win("00:03:00", user="u1", clicks=1, total=1.0, biggest=1.0, mean=1.0, n=1, smallest=1.0)
    ]
    assert ref.open_windows == opened


def test_late_exactly_at_boundary_is_late() -> None:
    # M = 00:01:05 -> W = 00:01:00 == end of [00:00, 00:01) + 0 lateness -> late.
    ref = run(content(rec("00:01:05"), rec("00:00:30")))
    assert ref.late == [("a.jsonl", 2)]
    assert ref.accepted_count == 1


def test_one_microsecond_before_the_boundary_is_accepted() -> None:
    ref = run(content(rec("00:01:04.999999"), rec("00:00:30")))
    assert ref.late == []
    assert ref.accepted_count == 2
    # final W = 00:00:59.999999 < 00:01:00 -> both windows still open
    assert ref.emitted == []
    assert [r["window_start"] for r in ref.open_windows] == [t("00:00:00"), t("00:01:00")]


def test_allowed_lateness_shifts_the_boundary() -> None:
    late = run(content(rec("00:01:15"), rec("00:00:30")), lateness=10)
    assert late.late == [("a.jsonl", 2)]
    ok = run(content(rec("00:01:14.999999"), rec("00:00:30")), lateness=10)
    assert ok.late == []
    # a window closes only when W reaches end + lateness
    assert ok.emitted == []
    closes = run(content(rec("00:00:30"), rec("00:01:15")), lateness=10)
    assert [r["window_start"] for r in closes.emitted] == [t("00:00:00")]


def test_bridging_out_of_order_record_within_bound() -> None:
    ref = run(content(rec("00:01:02", amount=2), rec("00:00:58", amount=3), rec("00:02:10")))
    assert ref.late == []
    assert ref.final_watermark == t("00:02:05")
    expected = [
        win("00:00:00", user="u1", clicks=1, total=3.0, biggest=3.0, mean=3.0, n=1, smallest=3.0),
        win("00:01:00", user="u1", clicks=1, total=2.0, biggest=2.0, mean=2.0, n=1, smallest=2.0),
    ]
    assert ref.emitted == expected
    assert [r["window_start"] for r in ref.open_windows] == [t("00:02:00")]


def test_late_record_does_not_move_the_watermark_and_first_record_is_never_late() -> None:
    ref = run(content(rec("00:00:00"), rec("00:05:00"), rec("00:01:00"), rec("00:04:54")))
    # record 3: W = 00:04:55, window [01:00,02:00) -> late; record 4: window [04:00, 05:00),
    # end 05:00 > W 04:55 -> accepted.
    assert ref.late == [("a.jsonl", 3)]
    assert ref.final_watermark == t("00:04:55")
    assert [r["window_start"] for r in ref.emitted] == [t("00:00:00")]
    assert [r["window_start"] for r in ref.open_windows] == [t("00:04:00"), t("00:05:00")]


def test_watermark_carries_across_files_in_key_order() -> None:
    files = [("a", content(rec("00:02:00"))), ("b", content(rec("00:00:10"), rec("00:01:56")))]
    ref = run(files)
    assert ref.late == [("b", 1)]
    assert ref.accepted_count == 2
    with pytest.raises(ValueError):
        run(list(reversed(files)))


def test_keys_group_separately_and_nulls_group_together() -> None:
    lines = [
        rec("00:00:01", user="u1", amount=1),
        rec("00:00:02", user="u2", amount=2),
        rec("00:00:03", user=None, amount=3),
        json.dumps({"ts": "2026-01-01T00:00:04Z", "amount": 4}),  # user absent -> null
        rec("00:02:00", user="u1", amount=5),
    ]
    ref = run(content(*lines), aggs={"clicks": "count(*)", "total": "sum(amount)"})
    assert ref.emitted == [
        win("00:00:00", user=None, clicks=2, total=7.0),
        win("00:00:00", user="u1", clicks=1, total=1.0),
        win("00:00:00", user="u2", clicks=1, total=2.0),
    ]


def test_null_amounts_in_aggregates() -> None:
    lines = [
        rec("00:00:01", amount=3.0),
        rec("00:00:02", amount=None),
        json.dumps({"user": "u1", "ts": "2026-01-01T00:00:03Z"}),  # amount absent
        rec("00:00:04", user="u2", amount=None),
        rec("00:05:00", user="u3"),
    ]
    ref = run(content(*lines))
    assert ref.emitted == [
        win("00:00:00", user="u1", clicks=3, total=3.0, biggest=3.0, mean=3.0, n=1, smallest=3.0),
        win(
            "00:00:00", user="u2", clicks=1, total=None, biggest=None, mean=None, n=0, smallest=None
        ),
    ]


def test_int_sums_stay_int_and_avg_is_float() -> None:
    schema = {"user": "string", "ts": "timestamp", "qty": "long"}
    lines = [
        json.dumps({"user": "u", "ts": "2026-01-01T00:00:01Z", "qty": 2}),
        json.dumps({"user": "u", "ts": "2026-01-01T00:00:02Z", "qty": "3"}),
        json.dumps({"user": "u", "ts": "2026-01-01T00:02:00Z", "qty": 1}),
    ]
    ref = run(
        content(*lines), schema=schema, aggs={"s": "sum(qty)", "a": "avg(qty)", "m": "MAX(qty)"}
    )
    (row,) = ref.emitted
    assert row["s"] == 5 and isinstance(row["s"], int)
    assert row["a"] == 2.5 and isinstance(row["a"], float)
    assert row["m"] == 3


def test_negative_epoch_windows_floor_correctly() -> None:
    line = json.dumps({"user": "u", "ts": "1969-12-31T23:59:30.5Z", "amount": 1})
    ref = run(content(line), aggs={"c": "count(*)"})
    (row,) = ref.open_windows
    assert row["window_start"] == datetime(1969, 12, 31, 23, 59, tzinfo=UTC)
    assert row["window_end"] == datetime(1970, 1, 1, tzinfo=UTC)


def test_tumbling_window_size_other_than_a_minute() -> None:
    ref = run(content(rec("00:00:09.999"), rec("00:00:10"), rec("00:01:00")), size=10)
    assert [(r["window_start"], r["clicks"]) for r in ref.emitted] == [
        (t("00:00:00"), 1),
        (t("00:00:10"), 1),
    ]


# --------------------------------------------------------------------------- dead letters


def test_each_dead_letter_category() -> None:
    ts = "2026-01-01T00:00:01Z"
    lines = [
        '{"user": "u03", "url": "/p',  # 1 truncated
        "[1, 2]",  # 2 array
        '"just a string"',  # 3 scalar
        "NaN",  # 4 not strict JSON
        json.dumps({"user": "u1", "amount": 1}),  # 5 no ts
        json.dumps({"user": "u1", "ts": None}),  # 6 null ts
        json.dumps({"ts": "not-a-time"}),  # 7
        json.dumps({"ts": ts, "amount": "abc"}),  # 8
        json.dumps({"ts": ts, "user": {"a": 1}}),  # 9 object for a string
        json.dumps({"ts": 12345}),  # 10 number for a timestamp
        json.dumps({"amount": "abc"}),  # 11 event time checked before other fields
        json.dumps({"ts": ts, "amount": [1]}),  # 12
        json.dumps({"ts": "2026-13-01T00:00:00Z"}),  # 13 impossible date
        json.dumps({"ts": ts, "amount": True}),  # 14 boolean is not a number
    ]
    ref = run(content(*lines))
    assert ref.dead == [
        ("a.jsonl", 1, "malformed"),
        ("a.jsonl", 2, "malformed"),
        ("a.jsonl", 3, "malformed"),
        ("a.jsonl", 4, "malformed"),
        ("a.jsonl", 5, "missing_event_time"),
        ("a.jsonl", 6, "missing_event_time"),
        ("a.jsonl", 7, "wrong_type"),
        ("a.jsonl", 8, "wrong_type"),
        ("a.jsonl", 9, "wrong_type"),
        ("a.jsonl", 10, "wrong_type"),
        ("a.jsonl", 11, "missing_event_time"),
        ("a.jsonl", 12, "wrong_type"),
        ("a.jsonl", 13, "wrong_type"),
        ("a.jsonl", 14, "wrong_type"),
    ]
    assert ref.records_read == 14 and ref.accepted_count == 0
    assert ref.final_watermark is None
    assert ref.emitted == [] and ref.open_windows == []
    assert ref.dead_by_category == {"malformed": 4, "missing_event_time": 3, "wrong_type": 7}


def test_coercions_that_are_accepted() -> None:
    lines = [
        json.dumps({"user": "u", "ts": "2026-01-01T00:00:01Z", "amount": "12.5"}),
        json.dumps({"user": "u", "ts": "2026-01-01 00:00:02", "amount": 3}),
        json.dumps({"user": "u", "ts": "2026-01-01T01:00:03+01:00", "amount": 1e1}),
        json.dumps({"user": "u", "ts": "2026-01-01T00:00:04.1234567Z", "extra": [1]}),
    ]
    ref = run(content(*lines), aggs={"c": "count(*)", "s": "sum(amount)", "n": "count(amount)"})
    assert ref.dead == []
    assert ref.open_windows == [win("00:00:00", user="u", c=4, s=25.5, n=3)]
    assert ref.final_watermark == t("00:00:04.123456") - timedelta(seconds=5)


def test_parse_timestamp_forms() -> None:
    assert parse_timestamp("2026-01-01T00:00:00Z") == DAY
    assert parse_timestamp("2026-01-01 00:00:00") == DAY
    assert parse_timestamp("2026-01-01T05:30:00.5+05:30") == DAY + timedelta(milliseconds=500)
    assert parse_timestamp("2025-12-31T19:00:00-05:00") == DAY
    for bad in ("not-a-time", "2026-01-01", "2026-01-01T00:00Z", "2026-02-30T00:00:00Z", ""):
        assert parse_timestamp(bad) is None, bad


def test_blank_lines_are_not_records_but_keep_line_numbers() -> None:
    data = b"\n" + rec("00:00:01").encode() + b"\n   \n\t\r\n" + b"[1]\n" + rec("00:00:02").encode()
    ref = run(data)
    assert ref.records_read == 3
    assert ref.dead == [("a.jsonl", 5, "malformed")]
    assert ref.accepted_count == 2
    assert run(b"").records_read == 0
    assert run(b"\n\n  \n").final_watermark is None


# --------------------------------------------------------------------------- compare_rows


def test_compare_rows_normalises_and_reports() -> None:
    pd = pytest.importorskip("pandas")
    expected = [
        win("00:00:00", user="u1", clicks=2, total=0.3),
        win("00:01:00", user="u1", clicks=1, total=None),
    ]
    actual = [
        {
            "user": "u1",
            "window_start": datetime(2026, 1, 1, 0, 0),  # naive UTC
            "window_end": pd.Timestamp("2026-01-01T00:01:00Z"),
            "clicks": 2,
            "total": 0.1 + 0.2,
            "extra": "ignored",
        },
        {
            "user": "u1",
            "window_start": pd.Timestamp("2026-01-01T01:01:00+01:00"),
            "window_end": t("00:02:00"),
            "clicks": 1,
            "total": float("nan"),
        },
    ]
    assert compare_rows(actual, expected, keys=KEYS) == []
    df = pd.DataFrame(actual)
    assert compare_rows(df.to_dict("records"), expected, keys=KEYS) == []

    wrong = [dict(actual[0], clicks=3), actual[1], actual[1], dict(actual[0], user="u9")]
    diffs = compare_rows(wrong, expected, keys=KEYS)
    text = "\n".join(diffs)
    assert "clicks = 3, expected 2" in text
    assert "duplicate actual row" in text
    assert "unexpected row" in text and "'u9'" in text
    missing = compare_rows(actual[:1], expected, keys=KEYS)
    assert len(missing) == 1 and missing[0].startswith("missing row")
    assert compare_rows([dict(actual[0], total=0.31)], expected[:1], keys=KEYS) != []


# --------------------------------------------------------------------------- demo input

DEMO_KW: dict[str, Any] = {
    "schema": SCHEMA,
    "event_time": "ts",
    "max_out_of_orderness_s": 5.0,
    "allowed_lateness_s": 0.0,
    "window_size_s": 60.0,
    "key_by": ["user"],
    "aggregates": AGGS,
}
TS_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.fixture(scope="module")
def demo() -> list[tuple[str, bytes]]:
    return render_click_files()


@pytest.fixture(scope="module")
def demo_ref(demo: list[tuple[str, bytes]]) -> Reference:
    return compute_reference(demo, **DEMO_KW)


def test_demo_is_deterministic(demo: list[tuple[str, bytes]]) -> None:
    assert render_click_files() == demo
    assert render_click_files(seed=8) != demo
    assert [name for name, _ in demo] == [click_file_name(i) for i in range(20)]
    assert demo[0][0] == "clicks-00000.jsonl"
    assert [name for name, _ in demo] == sorted(name for name, _ in demo)


def test_demo_line_shapes(demo: list[tuple[str, bytes]]) -> None:
    users: set[str] = set()
    for i, (_, data) in enumerate(demo):
        text = data.decode()
        assert text.endswith("\n")
        lines = text[:-1].split("\n")
        assert len(lines) == 150
        lo, hi = DAY + timedelta(seconds=30 * i), DAY + timedelta(seconds=30 * (i + 1))
        for line in lines:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if not isinstance(obj, dict) or not isinstance(obj.get("ts"), str):
                continue
            if obj["ts"] == "not-a-time":
                continue
            assert list(obj) == ["user", "url", "ts", "amount"]
            assert TS_RE.fullmatch(obj["ts"]), obj["ts"]
            users.add(obj["user"])
            amount = obj["amount"]
            assert amount is None or amount == "abc" or round(amount, 2) == amount
            ts = parse_timestamp(obj["ts"])
            assert ts is not None and ts < hi
            assert ts >= lo or ts < hi - timedelta(seconds=70)  # in range, or a late record
    assert 10 <= len(users) <= 14


def test_demo_contains_every_malformed_kind(demo: list[tuple[str, bytes]]) -> None:
    lines = [ln for _, data in demo for ln in data.decode()[:-1].split("\n")]
    assert any(ln.startswith('{"user": "u') and ln.endswith('"url": "/p') for ln in lines)
    assert "[1, 2]" in lines
    assert "" in lines
    assert any('"ts": "not-a-time"' in ln for ln in lines)
    assert any('"amount": "abc"' in ln for ln in lines)
    assert any('"ts": null' in ln for ln in lines)
    assert any(ln.startswith("{") and ln.endswith("}") and '"ts"' not in ln for ln in lines)
    assert any('"amount": null' in ln for ln in lines)
    stats = demo_stats()
    assert set(stats.malformed) == set(MALFORMED_KINDS)
    assert sum(stats.malformed.values()) == 50


def test_demo_reference_counts_match_generator(demo_ref: Reference) -> None:
    stats = demo_stats()
    ref = demo_ref
    assert ref.records_read == stats.records == 3000 - stats.blank_lines
    cats = Counter(c for _, _, c in ref.dead)
    assert set(cats) == {"malformed", "missing_event_time", "wrong_type"}
    assert cats["malformed"] == stats.malformed["truncated_json"] + stats.malformed["json_array"]
    assert cats["missing_event_time"] == stats.malformed["missing_ts"] + stats.malformed["null_ts"]
    assert cats["wrong_type"] == stats.malformed["bad_ts"] + stats.malformed["bad_amount"]
    assert len(ref.late) == stats.late > 0
    assert ref.accepted_count == stats.valid - stats.late
    assert ref.emitted and ref.open_windows
    assert ref.final_watermark is not None
    # the last 10-minute file range [09:30, 10:00) leaves windows 09:xx open
    assert all(r["window_start"] >= t("00:09:00") for r in ref.open_windows)
    assert sum(r["clicks"] for r in ref.emitted + ref.open_windows) == ref.accepted_count


def test_demo_is_out_of_order_but_only_late_records_exceed_the_bound(
    demo: list[tuple[str, bytes]], demo_ref: Reference
) -> None:
    late = set(demo_ref.late)
    dead = {(f, n) for f, n, _ in demo_ref.dead}
    running: datetime | None = None
    disorder = 0
    for name, data in demo:
        for n, line in enumerate(data.decode().split("\n"), start=1):
            if not line or (name, n) in dead:
                continue
            ts = parse_timestamp(json.loads(line)["ts"])
            assert ts is not None
            if (name, n) in late:
                assert running is not None and running - ts >= timedelta(seconds=70)
                assert running - ts <= timedelta(seconds=150)
                continue
            if running is not None:
                assert running - ts <= timedelta(seconds=4)
                disorder += ts < running
                running = max(running, ts)
            else:
                running = ts
    assert disorder > 100


def test_demo_parameters(tmp_path: Path) -> None:
    small = render_click_files(files=2, events_per_file=10, late_every=0, malformed_every=0)
    assert [n for n, _ in small] == ["clicks-00000.jsonl", "clicks-00001.jsonl"]
    ref = compute_reference(small, **DEMO_KW)
    assert ref.dead == [] and ref.late == [] and ref.records_read == 20
    start = datetime(2030, 5, 1, tzinfo=UTC)
    shifted = render_click_files(files=1, events_per_file=5, start=start)
    assert b'"ts": "2030-05-01T00:00:' in shifted[0][1]
    paths = write_click_files(tmp_path / "in", files=3, events_per_file=7)
    assert [p.name for p in paths] == [click_file_name(i) for i in range(3)]
    assert [p.read_bytes() for p in paths] == [
        c for _, c in render_click_files(files=3, events_per_file=7)
    ]
