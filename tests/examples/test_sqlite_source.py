"""The worked example of a user-defined source: offsets and planning caps on a real SQLite file
(no Spark), then reads through Spark — the same range gives the same records every time, an
old range can be read again after later ones (rewind), bad rows become dead letters."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sluice.examples import SqliteOffset, SqliteRange, SqliteSource
from sluice.examples.exceptions import InvalidOptions, RangeChanged, SqliteSourceError
from sluice.sources import RECORD_COLUMNS
from sluice.spec import PluginSourceConfig

SCHEMA = (("user", "string"), ("ts", "timestamp"), ("amount", "double"), ("ok", "boolean"))
SPEC = PluginSourceConfig(type="sluice.examples:SqliteSource", schema=SCHEMA)


def make_table(path: Path, rows: list[tuple[Any, ...]]) -> None:
    """``clicks`` with an AUTOINCREMENT id, the discipline the source relies on."""
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS clicks (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "user TEXT, ts TEXT, amount REAL, ok INTEGER)"
        )
        conn.executemany("INSERT INTO clicks (user, ts, amount, ok) VALUES (?, ?, ?, ?)", rows)


def source(path: Path, **options: Any) -> SqliteSource:
    return SqliteSource(SPEC, {"path": str(path), "table": "clicks", **options}, "ts")


ROWS = [
    ("alice", "2026-01-01T00:00:05Z", 1.5, 1),
    ("bob", "2026-01-01 00:00:10", 2.0, 0),
    ("carol", "2026-01-01T00:00:20Z", None, None),
    ("dave", "2026-01-01T00:00:30Z", 4.0, 1),
    ("erin", "2026-01-01T00:00:40Z", 5.0, 0),
]


# -- offsets and planning (no Spark) --------------------------------------------------------


def test_offsets_and_ranges_round_trip(tmp_path: Path) -> None:
    src = source(tmp_path / "in.db")
    assert src.initial_offset() == SqliteOffset(0)
    offset = SqliteOffset(7)
    assert offset.to_dict() == {"type": "sqlite", "next_id": 7}
    assert src.decode_offset(offset.to_dict()) == offset and offset.describe() == "id 7"
    rng = SqliteRange(offset, 12, 4)
    assert (rng.end, rng.units) == (SqliteOffset(12), 4)
    assert rng.to_dict() == {"type": "sqlite", "start": offset.to_dict(), "stop": 12, "rows": 4}
    assert src.decode_range(rng.to_dict()) == rng
    with pytest.raises(ValueError, match="not a sqlite offset"):
        src.decode_offset({"type": "files", "after_key": None})
    assert src.is_before(SqliteOffset(3), SqliteOffset(4))
    assert not src.is_before(SqliteOffset(4), SqliteOffset(4))
    assert src.location == f"sqlite://{tmp_path / 'in.db'}#clicks"


def test_planning_caps_rows_per_epoch_and_follows_the_offset(tmp_path: Path) -> None:
    db = tmp_path / "in.db"
    make_table(db, ROWS)
    src = source(db, rows_per_epoch=2)
    first = src.plan_range(src.initial_offset(), None)
    assert first == SqliteRange(SqliteOffset(0), 3, 2)  # ids 1, 2
    assert src.pending_units(first.start) == 5 and src.pending_units(first.end) == 3
    assert src.plan_range(first.end, max_units=1) == SqliteRange(SqliteOffset(3), 4, 1)
    assert src.plan_range(first.end, None, max_records=0) == SqliteRange(SqliteOffset(3), 4, 1)
    assert src.plan_range(first.end, max_units=10) == SqliteRange(SqliteOffset(3), 5, 2)
    assert source(db).plan_range(first.end, None) == SqliteRange(SqliteOffset(3), 6, 3)
    assert src.plan_range(SqliteOffset(6), None) is None  # drained
    make_table(db, ROWS[:1])  # id 6 arrives
    assert src.plan_range(SqliteOffset(6), None) == SqliteRange(SqliteOffset(6), 7, 1)


def test_ids_with_gaps_end_the_range_after_the_last_row_read(tmp_path: Path) -> None:
    db = tmp_path / "in.db"
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE clicks (id INTEGER PRIMARY KEY, user TEXT, ts TEXT)")
        conn.executemany("INSERT INTO clicks VALUES (?, 'u', '2026-01-01T00:00:00Z')",
                         [(10,), (20,), (35,)])  # fmt: skip
    src = source(db, rows_per_epoch=2)
    assert src.plan_range(SqliteOffset(0), None) == SqliteRange(SqliteOffset(0), 21, 2)
    assert src.plan_range(SqliteOffset(21), None) == SqliteRange(SqliteOffset(21), 36, 1)


def test_offsets_typed_by_a_user(tmp_path: Path) -> None:
    src = source(tmp_path / "in.db")
    assert src.offset_from_user({"next_id": 42}) == SqliteOffset(42)
    assert src.offset_from_user({"type": "sqlite", "next_id": 0}) == SqliteOffset(0)
    for bad, message in [
        ({"next_id": -1}, "next_id must be a row id >= 0"),
        ({"next_id": "3"}, "next_id must be a row id >= 0, not '3'"),
        ({"after_key": "x"}, r"unknown field\(s\) \['after_key'\]"),
        ({"type": "files", "next_id": 1}, "type 'files' is not 'sqlite'"),
    ]:
        with pytest.raises(ValueError, match=message):
            src.offset_from_user(bad)


def test_bad_options_and_a_missing_database_are_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptions, match=r"sqlite source: options\.table: 'a b' is not a name"):
        source(tmp_path / "in.db", table="a b")
    with pytest.raises(InvalidOptions, match=r"options\.rows_per_epoch: 0 is not a whole number"):
        source(tmp_path / "in.db", rows_per_epoch=0)
    with pytest.raises(InvalidOptions, match=r"options\.limit: unknown setting"):
        source(tmp_path / "in.db", limit=3)
    missing = tmp_path / "missing.db"
    with pytest.raises(SqliteSourceError, match=f"sqlite://{missing}#clicks: .*unable to open"):
        source(missing).plan_range(SqliteOffset(0), None)
    assert not missing.exists()  # read-only: never creates an empty database


def test_a_non_integer_id_stops_planning(tmp_path: Path) -> None:
    db = tmp_path / "in.db"
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE clicks (id, user TEXT, ts TEXT)")
        conn.execute("INSERT INTO clicks VALUES ('x7', 'u', '2026-01-01T00:00:00Z')")
    with pytest.raises(SqliteSourceError, match="column id holds 'x7', not an integer id"):
        source(db).plan_range(SqliteOffset(0), None)


# -- reading (Spark) -------------------------------------------------------------------------


def collect(src: SqliteSource, spark: Any, rng: SqliteRange) -> list[dict[str, Any]]:
    frame = src.read(spark, rng)
    assert frame.columns == [*RECORD_COLUMNS, "user", "ts", "amount", "ok"]
    return [r.asDict() for r in frame.orderBy("_line").collect()]


def test_a_range_reads_the_same_records_every_time_also_after_later_ranges(
    spark: Any, tmp_path: Path
) -> None:
    from datetime import datetime

    db = tmp_path / "in.db"
    make_table(db, ROWS)
    src = source(db, rows_per_epoch=3)
    first = src.plan_range(src.initial_offset(), None)
    assert first is not None
    records = collect(src, spark, first)
    assert [(r["_partition"], r["_file"], r["_major"], r["_line"]) for r in records] == [
        ("0", "clicks", 0, 1), ("0", "clicks", 0, 2), ("0", "clicks", 0, 3)]  # fmt: skip
    assert [(r["user"], r["ts"], r["amount"], r["ok"], r["_error"]) for r in records] == [
        ("alice", datetime(2026, 1, 1, 0, 0, 5), 1.5, True, None),
        ("bob", datetime(2026, 1, 1, 0, 0, 10), 2.0, False, None),
        ("carol", datetime(2026, 1, 1, 0, 0, 20), None, None, None),
    ]
    assert records[0]["_raw"] == (
        '{"id": 1, "user": "alice", "ts": "2026-01-01T00:00:05Z", "amount": 1.5, "ok": 1}'
    )
    second = src.plan_range(first.end, None)
    assert second == SqliteRange(SqliteOffset(4), 6, 2)
    make_table(db, ROWS)  # more rows arrive after both ranges were planned
    assert [r["_line"] for r in collect(src, spark, second)] == [4, 5]
    assert collect(src, spark, first) == records  # rewind: the old range again, identical
    assert collect(source(db), spark, first) == records  # from a new instance too


def test_bad_rows_become_dead_letters_and_a_changed_range_stops_the_read(
    spark: Any, tmp_path: Path
) -> None:
    db = tmp_path / "in.db"
    make_table(db, [
        ("alice", None, 1.0, 1),                      # no event time
        ("bob", "yesterday", 2.0, 1),                 # not a timestamp
        ("carol", "2026-01-01T00:00:00Z", "lots", 1),  # SQLite stores text in a REAL column
        ("dave", "2026-01-01T00:00:00Z", 3.0, 7),     # not a boolean
    ])  # fmt: skip
    src = source(db)
    rng = src.plan_range(src.initial_offset(), None)
    assert rng == SqliteRange(SqliteOffset(0), 5, 4)
    errors = [(r["_line"], r["_error"]) for r in collect(src, spark, rng)]
    assert errors == [
        (1, "missing_event_time: field 'ts' is absent or null"),
        (2, "wrong_type: field 'ts' = yesterday is not a timestamp"),
        (3, "wrong_type: field 'amount' = lots is not a double"),
        (4, "wrong_type: field 'ok' = 7 is not a boolean"),
    ]
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("DELETE FROM clicks WHERE id = 2")
    with pytest.raises(RangeChanged, match=r"ids \[0, 5\) held 4 row\(s\) when planned and hold 3"):
        src.read(spark, rng)
