"""End to end: a spec YAML whose source and sinks are the worked examples, named by
``module:Class`` (the source also as the registered ``type: sqlite``), runs epoch by epoch and
its tables hold exactly the hand-computed result."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sluice.examples.sqlite_sink import read_table, staging_tables
from sluice.protocol import run_until_drained
from sluice.spec import load_spec

from tests.fixtures.pipelines import runtime

PLUGIN_SOURCE = """
  type: sluice.examples:SqliteSource
  schema: {{user: string, ts: timestamp, amount: double}}
  options: {{path: {db}, table: clicks, rows_per_epoch: 4}}"""
TYPED_SOURCE = """
  type: sqlite
  schema: {{user: string, ts: timestamp, amount: double}}
  path: {db}
  table: clicks
  rows_per_epoch: 4"""
SPEC = """
name: sqlite_clicks
source: {source}
event_time: {{column: ts, max_out_of_orderness: 0s}}
key_by: [user]
window: {{type: tumbling, size: 1m}}
aggregates: {{clicks: count(*), total: sum(amount)}}
sinks:
  - {{name: out, type: "sluice.examples:SqliteSink", mode: upsert,
     options: {{path: {out}, table: per_minute}}}}
late_records: {{type: "sluice.examples:SqliteSink", options: {{path: {out}, table: late}}}}
dead_letters: {{type: "sluice.examples:SqliteSink", options: {{path: {out}, table: dead}}}}
checkpoint: {{storage: {ckpt}}}
"""

CLICKS = [  # id: user, minute:second, amount
    ("alice", "00:05", 1.0),  # 1
    ("bob", "00:10", 2.0),  # 2
    ("alice", "00:50", 3.0),  # 3
    ("bob", "01:05", "abc"),  # 4  dead letter: not a double
    ("alice", "01:10", 4.0),  # 5
    ("bob", "00:30", 5.0),  # 6  late: the watermark is 01:10 here, window [00:00, 01:00)
    ("carol", "01:30", 6.0),  # 7
    ("alice", "02:00", 7.0),  # 8
    ("bob", None, 8.0),  # 9  dead letter: no event time
    ("carol", "03:00", 1.0),  # 10 moves the watermark to 03:00: closes [02:00, 03:00)
]


def T(minute_second: str) -> str:
    """A timestamp as the SQLite sink stores it."""
    return f"2026-01-01T00:{minute_second}.000000Z"


@pytest.mark.parametrize("source", [PLUGIN_SOURCE, TYPED_SOURCE], ids=["plugin", "type-sqlite"])
def test_a_pipeline_of_plugins_runs_to_the_hand_computed_result(
    spark: Any, tmp_path: Path, source: str
) -> None:
    db, out = tmp_path / "in.db", tmp_path / "out.db"
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE clicks (id INTEGER PRIMARY KEY AUTOINCREMENT, user TEXT, "
                     "ts TEXT, amount REAL)")  # fmt: skip
        conn.executemany(
            "INSERT INTO clicks (user, ts, amount) VALUES (?, ?, ?)",
            [(u, ts and f"2026-01-01T00:{ts}Z", a) for u, ts, a in CLICKS],
        )
    spec_path = tmp_path / "sqlite_clicks.yaml"
    spec_path.write_text(
        SPEC.format(source=source.format(db=db), db=db, out=out, ckpt=tmp_path / "ckpt")
    )
    rt = runtime(load_spec(spec_path))

    outcomes = run_until_drained(rt, spark)

    assert [o.checkpoint.plan.end_offset for o in outcomes] == [
        {"type": "sqlite", "next_id": n} for n in (5, 9, 11)
    ]
    assert run_until_drained(rt, spark) == []
    per_minute = sorted(
        (r["user"], r["window_start"], r["window_end"], r["clicks"], r["total"])
        for r in read_table(str(out), "per_minute")
    )
    assert per_minute == [
        ("alice", T("00:00"), T("01:00"), 2, 4.0),
        ("alice", T("01:00"), T("02:00"), 1, 4.0),
        ("alice", T("02:00"), T("03:00"), 1, 7.0),
        ("bob", T("00:00"), T("01:00"), 1, 2.0),
        ("carol", T("01:00"), T("02:00"), 1, 6.0),
    ]  # carol's [03:00, 04:00) is still open
    late = read_table(str(out), "late")
    assert [(r["user"], r["window_start"], r["watermark"], r["source_line"], r["epoch"])
            for r in late] == [("bob", T("00:00"), T("01:10"), 6, 2)]  # fmt: skip
    dead = sorted((r["line"], r["epoch"], r["reason_code"], r["reason"])
                  for r in read_table(str(out), "dead"))  # fmt: skip
    assert dead == [
        (4, 1, "wrong_type", "field 'amount' = abc is not a double"),
        (9, 3, "missing_event_time", "field 'ts' is absent or null"),
    ]
    assert read_table(str(out), "dead")[0]["source"] == f"sqlite://{db}#clicks"
    assert staging_tables(str(out)) == []
