"""Small hand-made inputs, one file per epoch, whose changelog tells the story.

Two sessions that an allowed-late record in a later epoch merges into one (``emit:
on_update``): the two sessions are emitted separately first, then the epoch of the bridging
record deletes both and upserts the merged one. Session pieces that move under
``max_duration``, and a hopping record that misses only some of its windows. (Sessions growing
over 3+ epochs, against the reference, are in tests/integration/test_windows.py.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sluice.protocol import run_until_drained
from sluice.sinks.files import read_rows, read_upsert
from sluice.spec import parse_spec
from sluice.storage import open_store

from tests.fixtures.pipelines import runtime
from tests.integration.test_windows import _body
from tests.windows.reference import compare, compute

KEYS = ["user", "window_start", "window_end"]


def _line(user: str, second: int) -> str:
    ts = f"2024-01-01T00:00:{second:02d}" if second < 60 else f"2024-01-01T00:01:{second - 60:02d}"
    return json.dumps({"user": user, "url": f"/{user}/{second}", "ts": ts, "amount": 1.0})


def _run_file_per_epoch(
    spark: Any,
    tmp_path: Path,
    files: dict[str, str],
    window: dict[str, Any],
    emit: str,
    lateness: str = "30s",
) -> tuple[Any, dict[str, Any]]:
    """One partition, bound 5 s, one file per epoch; returns (spec, spec dict)."""
    for name, text in files.items():
        (tmp_path / "in" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "in" / name).write_text(text + "\n")
    body = _body(tmp_path, "session", emit)
    body["source"]["partition_by"] = "none"
    body.pop("filter")
    body["window"] = window
    body["event_time"] = {"column": "ts", "max_out_of_orderness": "5s"}
    body["event_time"]["allowed_lateness"] = lateness
    spec = parse_spec(body)
    run_until_drained(runtime(spec), spark, max_units=1)
    return spec, body


def _story(spec: Any, user: str) -> list[tuple[Any, ...]]:
    """The user's changelog rows: (epoch, op, start second, end second, n)."""
    sink = spec.sinks[0]
    return sorted(
        (r["_epoch"], r["_op"], r["window_start"].second, r["window_end"].second, r["n"])
        for r in read_rows(open_store(sink.path), sink.format)
        if r["user"] == user
    )


def test_an_allowed_late_record_in_a_later_epoch_merges_two_sessions(
    spark: Any, tmp_path: Path
) -> None:
    """gap 10 s, bound 5 s, allowed lateness 30 s. Epoch 1: b at 0, 2, 4 -> [0, 14).
    Epoch 2: b at 20, 22 -> [20, 32), a second session (20 >= 14); x moves the watermark to
    25. Epoch 3: b at 12 — behind the watermark (12 < 25) but allowed (12 + 30 > 25) — overlaps
    both ([12, 22)), so the sessions merge into [0, 32) with 6 records."""
    files = {
        "0001.jsonl": "\n".join([_line("b", 0), _line("b", 2), _line("b", 4), _line("x", 5)]),
        "0002.jsonl": "\n".join([_line("b", 20), _line("b", 22), _line("x", 30)]),
        "0003.jsonl": "\n".join([_line("b", 12), _line("x", 31)]),
    }
    spec, body = _run_file_per_epoch(
        spark, tmp_path, files, {"type": "session", "gap": "10s"}, "on_update"
    )
    sink = spec.sinks[0]
    story = _story(spec, "b")
    assert story == [
        (1, "upsert", 0, 14, 3),
        (2, "upsert", 20, 32, 2),
        (3, "delete", 0, 14, None),
        (3, "delete", 20, 32, None),
        (3, "upsert", 0, 32, 6),
    ], story
    table = read_upsert(open_store(sink.path), sink.format, KEYS)
    merged = [r for r in table if r["user"] == "b"]
    assert [(r["window_start"].second, r["window_end"].second, r["n"]) for r in merged] == [
        (0, 32, 6)
    ]
    assert merged[0]["first_url"] == "/b/0" and merged[0]["last_url"] == "/b/22"
    ref = compute(body, files)
    assert compare(table, ref.emitted, KEYS, approx={"approx_pages": 0.05}) == []
    assert read_rows(open_store(spec.late_records.path), "parquet") == []


def test_sessions_that_touch_merge_as_in_flink(spark: Any, tmp_path: Path) -> None:
    """gap 10 s: b at 0 gives [0, 10); b at 10 — exactly the gap later, in the next epoch —
    gives [10, 20), which touches the first. Flink merges windows that touch
    (``TimeWindow.intersects``), and so does Sluice: one session [0, 20) of 2 records (until
    2026-11 Sluice kept them apart). c at 0 and 11 stays two sessions: they do not touch."""
    files = {
        "0001.jsonl": "\n".join([_line("b", 0), _line("c", 0), _line("x", 1)]),
        "0002.jsonl": "\n".join([_line("b", 10), _line("c", 11), _line("x", 12)]),
        "0003.jsonl": _line("x", 59),
    }
    spec, body = _run_file_per_epoch(
        spark, tmp_path, files, {"type": "session", "gap": "10s"}, "on_update", lateness="0s"
    )
    assert _story(spec, "b") == [
        (1, "upsert", 0, 10, 1),
        (2, "delete", 0, 10, None),
        (2, "upsert", 0, 20, 2),
    ], _story(spec, "b")
    assert _story(spec, "c") == [(1, "upsert", 0, 10, 1), (2, "upsert", 11, 21, 1)]
    sink = spec.sinks[0]
    table = read_upsert(open_store(sink.path), sink.format, KEYS)
    assert compare(table, compute(body, files).emitted, KEYS, approx={"approx_pages": 0.05}) == []


def test_max_duration_pieces_move_when_an_allowed_late_record_moves_the_session_start(
    spark: Any, tmp_path: Path
) -> None:
    """gap 10 s, max_duration 20 s (check points 0, 20, 40, 60 ...), bound 5 s, lateness 30 s.
    Epoch 1: b at 21 … 49 is one session starting at 21, cut first at 60: one piece [21, 59).
    Epoch 2: b at 19 (allowed-late: W = 45) moves the start to 19, so the first cut is 40: the
    pieces become [19, 40) and [40, 59). The second holds no new record but is a new row; the
    old [21, 59) is deleted."""
    files = {
        "0001.jsonl": "\n".join([_line("b", t) for t in (21, 28, 35, 42, 49)] + [_line("x", 50)]),
        "0002.jsonl": "\n".join([_line("b", 19), _line("x", 52)]),
    }
    window = {"type": "session", "gap": "10s", "max_duration": "20s"}
    spec, body = _run_file_per_epoch(spark, tmp_path, files, window, "on_update")
    sink = spec.sinks[0]
    story = _story(spec, "b")
    assert story == [
        (1, "upsert", 21, 59, 5),
        (2, "delete", 21, 59, None),
        (2, "upsert", 19, 40, 4),
        (2, "upsert", 40, 59, 2),
    ], story
    table = read_upsert(open_store(sink.path), sink.format, KEYS)
    assert compare(table, compute(body, files).emitted, KEYS, approx={"approx_pages": 0.05}) == []


def test_a_hopping_record_that_misses_only_some_windows_still_reports_them(
    spark: Any, tmp_path: Path
) -> None:
    """Hopping 1 min every 20 s, lateness 0 here. Epoch 1 moves the watermark to 75 s. Epoch 2:
    b at 50 s belongs to [0, 60), [20, 80) and [40, 100); only the first has closed (60 <= 75),
    so the record is accepted into two windows and reports the one it missed — in an epoch
    with no fully late record."""
    files = {
        "0001.jsonl": "\n".join([_line("x", 10), _line("x", 80)]),
        "0002.jsonl": _line("b", 50),
    }
    hopping = {"type": "hopping", "size": "1m", "slide": "20s"}
    spec, _ = _run_file_per_epoch(spark, tmp_path, files, hopping, "on_close", lateness="0s")
    late = read_rows(open_store(spec.late_records.path), "parquet")
    assert [(r["user"], r["window_start"].second, r["window_end"].minute) for r in late] == [
        ("b", 0, 1)
    ]
    rt = runtime(spec)
    stats = [rt.repo.checkpoint(e).result.stats for e in (1, 2)]  # type: ignore[union-attr]
    assert (stats[1].accepted, stats[1].late, stats[1].late_rows) == (1, 0, 1)
