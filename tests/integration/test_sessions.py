"""Two sessions that an allowed-late record in a later epoch merges into one — one file per
epoch, ``emit: on_update``. The changelog must show the story, not just the end state: the
two sessions are emitted separately first, then the epoch of the bridging record deletes both
and upserts the merged one. (Sessions growing over 3+ epochs, against the reference, are in
tests/integration/test_windows.py.)
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
    for name, text in files.items():
        (tmp_path / "in" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "in" / name).write_text(text + "\n")
    body = _body(tmp_path, "session", "on_update")
    body["source"]["partition_by"] = "none"
    body.pop("filter")
    body["event_time"] = {"column": "ts", "max_out_of_orderness": "5s", "allowed_lateness": "30s"}
    spec = parse_spec(body)
    run_until_drained(runtime(spec), spark, max_units=1)

    sink = spec.sinks[0]
    changelog = read_rows(open_store(sink.path), sink.format)
    story = sorted(
        (r["_epoch"], r["_op"], r["window_start"].second, r["window_end"].second, r["n"])
        for r in changelog
        if r["user"] == "b"
    )
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
    for name, text in files.items():
        (tmp_path / "in" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "in" / name).write_text(text + "\n")
    body = _body(tmp_path, "session", "on_update")
    body["source"]["partition_by"] = "none"
    body.pop("filter")
    body["window"] = {"type": "session", "gap": "10s", "max_duration": "20s"}
    body["event_time"] = {"column": "ts", "max_out_of_orderness": "5s", "allowed_lateness": "30s"}
    spec = parse_spec(body)
    run_until_drained(runtime(spec), spark, max_units=1)

    sink = spec.sinks[0]
    story = sorted(
        (r["_epoch"], r["_op"], r["window_start"].second, r["window_end"].second, r["n"])
        for r in read_rows(open_store(sink.path), sink.format)
        if r["user"] == "b"
    )
    assert story == [
        (1, "upsert", 21, 59, 5),
        (2, "delete", 21, 59, None),
        (2, "upsert", 19, 40, 4),
        (2, "upsert", 40, 59, 2),
    ], story
    table = read_upsert(open_store(sink.path), sink.format, KEYS)
    assert compare(table, compute(body, files).emitted, KEYS, approx={"approx_pages": 0.05}) == []
