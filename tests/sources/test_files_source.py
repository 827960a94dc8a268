"""The files source: planning (read order, cap, hidden keys, the set of files read, new
files in any name order, changed files) on both backends without Spark, and parsing of
jsonl / csv / parquet with Spark."""

from __future__ import annotations

import io
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sluice.protocol import plan_epoch, run_epoch
from sluice.sources import RECORD_COLUMNS, ChangedFiles, FilesOffset, FilesRange, FilesSource
from sluice.spec import FilesSourceConfig

from tests.fixtures.pipelines import Workspace, click_spec, runtime

SCHEMA = (("user", "string"), ("url", "string"), ("ts", "timestamp"), ("amount", "double"))
LINE = b'{"user": "u1", "url": "/", "ts": "2026-01-01T00:00:01Z", "amount": 1.0}\n'


def source(ws: Workspace, *, fmt: str = "jsonl", cap: int | None = None, header: bool = True,
           **options: Any) -> FilesSource:  # fmt: skip
    spec = FilesSourceConfig(path=ws.uri("in"), format=fmt, schema=SCHEMA,  # type: ignore[arg-type]
                             max_files_per_epoch=cap, header=header, **options)  # fmt: skip
    planner: FilesSource = ws.files_source(spec, required=("ts",))
    return planner


def touch(ws: Workspace, key: str, seconds: int) -> None:
    """Set a local file's modification time (S3 sets it on upload, to the second)."""
    path = Path(ws.store("in").root, *key.split("/"))  # type: ignore[attr-defined]
    os.utime(path, ns=(seconds * 10**9, seconds * 10**9))


# -- planning (no Spark) --------------------------------------------------------------------


def test_plans_in_name_order_with_the_per_epoch_cap(workspace: Workspace) -> None:
    workspace.put_files([(k, LINE) for k in ("c.jsonl", "a.jsonl", "d.jsonl", "b.jsonl",
                                             "sub/e.jsonl")])  # fmt: skip
    src = source(workspace, cap=2, order="name")
    first = src.plan_range(src.initial_offset(), None)
    assert first is not None
    assert first.files == ("a.jsonl", "b.jsonl")
    assert first.units == 2
    second = src.plan_range(first.end, None)
    assert second is not None and second.files == ("c.jsonl", "d.jsonl")
    assert second.start == first.end
    third = src.plan_range(second.end, None)
    assert third is not None and third.files == ("sub/e.jsonl",)
    assert src.plan_range(third.end, None) is None


def test_plans_by_modification_time_then_name(local_workspace: Workspace) -> None:
    ws = local_workspace
    ws.put_files([(k, LINE) for k in ("a.jsonl", "b.jsonl", "c.jsonl", "d.jsonl")])
    for key, seconds in (("a.jsonl", 300), ("b.jsonl", 100), ("c.jsonl", 200), ("d.jsonl", 100)):
        touch(ws, key, 1_800_000_000 + seconds)
    src = source(ws, cap=3)
    first = src.plan_range(src.initial_offset(), None)
    assert first is not None and first.files == ("b.jsonl", "d.jsonl", "c.jsonl")
    second = src.plan_range(first.end, None)
    assert second is not None and second.files == ("a.jsonl",)
    assert second.end.newest_modified_ns == (1_800_000_000 + 300) * 10**9


def test_max_units_overrides_the_spec_cap(workspace: Workspace) -> None:
    workspace.put_files([(f"f{i}.jsonl", LINE) for i in range(5)])
    src = source(workspace, cap=2)
    rng = src.plan_range(src.initial_offset(), 3)
    assert rng is not None and rng.files == ("f0.jsonl", "f1.jsonl", "f2.jsonl")
    uncapped = source(workspace).plan_range(FilesOffset(), None)
    assert uncapped is not None and len(uncapped.files) == 5


def test_max_records_takes_whole_files_up_to_the_cap(workspace: Workspace) -> None:
    import gzip

    workspace.put_files([("a.jsonl", LINE * 3), ("b.jsonl.gz", gzip.compress(LINE * 2 + b"\n")),
                         ("c.jsonl", LINE * 4)])  # fmt: skip
    src = source(workspace, order="name")
    first = src.plan_range(src.initial_offset(), None, max_records=5)
    assert first is not None and first.files == ("a.jsonl", "b.jsonl.gz")  # 3 + 2 records
    second = src.plan_range(first.end, None, max_records=1)
    assert second is not None and second.files == ("c.jsonl",)  # at least one file


def test_nothing_to_read(workspace: Workspace) -> None:
    src = source(workspace)
    assert src.plan_range(src.initial_offset(), None) is None


def put_raw(ws: Workspace, key: str, data: bytes) -> None:
    """Write a key the store API refuses (names starting with '.'), as other tools would."""
    store: Any = ws.store("in")
    if ws.backend == "local":
        path = store.root.joinpath(*key.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    else:
        store._client.put_object(Bucket=store.bucket, Key=store._full_raw(key), Body=data)


def test_hidden_keys_are_ignored(workspace: Workspace) -> None:
    workspace.put_files([(k, LINE) for k in (
        "a.jsonl", "_SUCCESS", "_tmp/x.jsonl", "sub/_z.jsonl", "sub/ok.jsonl")])  # fmt: skip
    for key in (".hidden.jsonl", "sub/.y.jsonl", ".dir/w.jsonl"):
        put_raw(workspace, key, LINE)
    src = source(workspace)
    assert src.list_keys() == ["a.jsonl", "sub/ok.jsonl"]
    rng = src.plan_range(src.initial_offset(), None)
    assert rng is not None and rng.files == ("a.jsonl", "sub/ok.jsonl")


def test_the_end_offset_names_the_set_of_files_read(workspace: Workspace) -> None:
    workspace.put_files([(f"f{i}.jsonl", LINE) for i in range(5)])
    src = source(workspace, cap=2)
    first = src.plan_range(src.initial_offset(), None)
    assert first is not None
    end = first.end
    assert set(src.log.load(end.read)) == {"f0.jsonl", "f1.jsonl"}
    assert end.read.files == 2 and end.read.base is not None and not end.read.deltas
    second = src.plan_range(end, None)
    assert second is not None
    end2 = second.end
    assert set(src.log.load(end2.read)) == {f"f{i}.jsonl" for i in range(4)}
    assert end2.read.base == end.read.base and len(end2.read.deltas) == 1  # a delta over it
    assert end2.describe() == "4 files read"
    # the set's objects live in the checkpoint store, not among the input files
    assert src.list_keys() == [f"f{i}.jsonl" for i in range(5)]
    assert all(k.startswith("sources/in/files-read/") for k in end2.read.objects)
    # offsets and ranges survive their stored form
    assert FilesOffset.from_dict(end2.to_dict()) == end2
    assert src.decode_range(second.to_dict()) == second
    with pytest.raises(ValueError):
        FilesOffset.from_dict({"type": "kafka"})


def test_a_new_file_is_read_whatever_its_name_sorts_like(workspace: Workspace) -> None:
    workspace.put_files([(k, LINE) for k in ("part-c1f2.jsonl", "part-f7a0.jsonl")])
    src = source(workspace)
    first = src.plan_range(src.initial_offset(), None)
    assert first is not None and set(first.files) == {"part-c1f2.jsonl", "part-f7a0.jsonl"}
    workspace.put_files([("part-0b9e.jsonl", LINE), ("part-zzzz.jsonl", LINE)])
    second = src.plan_range(first.end, None)
    assert second is not None and set(second.files) == {"part-0b9e.jsonl", "part-zzzz.jsonl"}
    assert src.plan_range(second.end, None) is None
    assert second.end.read.files == 4


def test_deleting_already_read_files_is_accepted(workspace: Workspace) -> None:
    workspace.put_files([(f"f{i}.jsonl", LINE) for i in range(4)])
    src = source(workspace, cap=2)
    first = src.plan_range(src.initial_offset(), None)
    assert first is not None
    workspace.store("in").delete("f0.jsonl")
    second = src.plan_range(first.end, None)
    assert second is not None and second.files == ("f2.jsonl", "f3.jsonl")
    assert FilesRange.from_dict(second.to_dict()) == second
    assert src.plan_range(second.end, None) is None


def test_a_changed_file_is_reported_once_and_not_read_again(workspace: Workspace) -> None:
    workspace.put_files([("a.jsonl", LINE), ("b.jsonl", LINE)])
    src = source(workspace)
    first = src.plan_range(src.initial_offset(), None)
    assert first is not None and not first.changed
    workspace.put_files([("a.jsonl", LINE * 2), ("c.jsonl", LINE)])  # a grows, c is new
    second = src.plan_range(first.end, None)
    assert second is not None and second.files == ("c.jsonl",)
    (changed,) = second.changed
    assert changed.key == "a.jsonl"
    assert (changed.was.size, changed.now.size) == (len(LINE), 2 * len(LINE))
    assert changed.reason().startswith("changed_file: the file changed after it was read")
    assert FilesRange.from_dict(second.to_dict()) == second
    assert src.plan_range(second.end, None) is None  # reported once
    assert src.pending_units(second.end) == 0
    # a change alone makes an epoch (its report), and changed_files: fail stops the plan
    workspace.put_files([("b.jsonl", b"")])
    third = src.plan_range(second.end, None)
    assert third is not None and third.files == () and [c.key for c in third.changed] == ["b.jsonl"]
    with pytest.raises(ChangedFiles, match=r"b\.jsonl"):
        source(workspace, changed_files="fail").plan_range(second.end, None)


def test_an_offset_stored_before_sets_reads_as_its_key_order(workspace: Workspace) -> None:
    workspace.put_files([(k, LINE) for k in ("a.jsonl", "b.jsonl", "c.jsonl", "d.jsonl")])
    legacy = {"type": "files", "after_key": "b.jsonl", "files_consumed": 2,
              "consumed_digest": "0" * 64}  # fmt: skip
    src = source(workspace)
    start = src.decode_offset(legacy)
    assert start == FilesOffset(after_key="b.jsonl")
    rng = src.plan_range(start, None)
    assert rng is not None and rng.files == ("c.jsonl", "d.jsonl")
    assert rng.end.after_key == "b.jsonl" and rng.end.read.files == 2
    old_range = {"type": "files", "start": legacy, "files": ["c.jsonl"], "behind": None}
    assert src.decode_range(old_range).end == FilesOffset(after_key="c.jsonl")


def test_new_files_land_between_epochs_of_a_real_pipeline(
    spark: Any, local_workspace: Workspace
) -> None:
    local_workspace.put_files([("clicks-2.jsonl", LINE), ("clicks-3.jsonl", LINE)])
    spec = click_spec(local_workspace)
    outcome = run_epoch(runtime(spec), spark)
    assert outcome is not None and outcome.checkpoint.epoch == 1
    local_workspace.put_files([("clicks-1.jsonl", LINE), ("clicks-4.jsonl", LINE)])
    plan = plan_epoch(runtime(spec))
    assert plan is not None and sorted(plan.source_range["files"]) == [
        "clicks-1.jsonl", "clicks-4.jsonl"]  # fmt: skip
    # deleting a read file changes nothing
    local_workspace.store("in").delete("clicks-2.jsonl")
    assert plan_epoch(runtime(spec)) == plan  # the stored plan, reused


def test_a_changed_file_is_a_dead_letter_and_a_remark_in_the_history(
    spark: Any, workspace: Workspace
) -> None:
    from sluice.report import checkpoint_rows, checkpoint_table
    from sluice.sinks.files import read_rows
    from sluice.storage import open_store

    workspace.put_files([("a.jsonl", LINE)])
    spec = click_spec(workspace)
    assert run_epoch(runtime(spec), spark) is not None
    workspace.put_files([("a.jsonl", LINE + LINE), ("b.jsonl", LINE)])
    outcome = run_epoch(runtime(spec), spark)
    assert outcome is not None
    stats = outcome.checkpoint.result.stats
    assert (stats.records_read, stats.accepted, stats.dead) == (2, 1, 1)  # b's line, a's report
    dead = read_rows(open_store(spec.dead_letters.path), spec.dead_letters.format)
    (letter,) = dead
    assert (letter["file"], letter["line"], letter["reason_code"]) == ("a.jsonl", 0, "changed_file")
    assert letter["reason"].startswith(f"the file changed after it was read (was {len(LINE)} bytes")
    assert '"file": "a.jsonl"' in letter["raw"]
    rt = runtime(spec)
    rows = checkpoint_rows(rt)
    detail = letter["reason"].split("(", 1)[1].split(")")[0]  # was ..., now ...
    assert rows[1]["input_remarks"] == [
        f"changed after it was read, not read again: a.jsonl ({detail})"
    ]
    assert "changed after it was read" in str(checkpoint_table(rt, rows).columns[1]._cells[1])
    assert run_epoch(runtime(spec), spark) is None  # reported once


# -- parsing (Spark) ------------------------------------------------------------------------


def read_all(spark: Any, src: FilesSource) -> list[dict[str, Any]]:
    rng = src.plan_range(src.initial_offset(), None)
    assert rng is not None
    frame = src.read(spark, rng)
    assert tuple(frame.columns) == RECORD_COLUMNS + tuple(c for c, _ in SCHEMA)
    rows = [r.asDict() for r in frame.collect()]
    return sorted(rows, key=lambda r: (r["_major"], r["_line"]))


def code(row: dict[str, Any]) -> str | None:
    return row["_error"].split(":", 1)[0] if row["_error"] else None


JSONL = (
    b'{"user": "u1", "url": "/a", "ts": "2026-01-01T00:00:01Z", "amount": 1.5}\n'  # 1 ok
    b"\n"  # 2 blank: not a record
    b'{"user": "u2", "url": "/b", "ts": "2026-01-01T00:00:0\n'  # 3 truncated
    b'{"user": "u3", "url": "/c", "amount": 2}\n'  # 4 no ts
    b'{"user": "u4", "url": "/d", "ts": null, "amount": 2}\n'  # 5 null ts
    b'{"user": "u5", "url": "/e", "ts": "not-a-time", "amount": 2}\n'  # 6 bad ts
    b'{"user": "u6", "url": "/f", "ts": "2026-01-01T00:00:02Z", "amount": "abc"}\n'  # 7 bad amount
    b"[1, 2]\n"  # 8 array
    b"   \t \n"  # 9 whitespace only: not a record
    b'{"user": "u7", "url": "/g", "ts": "2026-01-01T00:00:03.250Z", "amount": null}\n'  # 10 ok
)


def test_jsonl_dead_letter_codes_and_reasons(spark: Any, workspace: Workspace) -> None:
    workspace.put_files([("a.jsonl", JSONL)])
    rows = read_all(spark, source(workspace))
    assert [r["_line"] for r in rows] == [1, 3, 4, 5, 6, 7, 8, 10]  # blank lines skipped
    by_line = {r["_line"]: r for r in rows}
    assert {r["_partition"] for r in rows} == {"0"}
    assert {r["_file"] for r in rows} == {"a.jsonl"}
    assert {r["_major"] for r in rows} == {0}

    ok = by_line[1]
    assert ok["_error"] is None
    assert (ok["user"], ok["url"], ok["amount"]) == ("u1", "/a", 1.5)
    assert ok["ts"].replace(tzinfo=UTC) == datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert ok["_raw"] == JSONL.split(b"\n")[0].decode()

    assert by_line[3]["_error"] == "malformed: not a JSON object"
    assert by_line[4]["_error"] == "missing_event_time: field 'ts' is absent or null"
    assert by_line[5]["_error"] == "missing_event_time: field 'ts' is absent or null"
    assert by_line[6]["_error"] == "wrong_type: field 'ts' = not-a-time is not a timestamp"
    assert by_line[6]["ts"] is None
    assert by_line[7]["_error"] == "wrong_type: field 'amount' = abc is not a double"
    assert by_line[7]["amount"] is None and by_line[7]["ts"] is not None
    assert code(by_line[8]) == "malformed"

    late_ok = by_line[10]
    assert late_ok["_error"] is None and late_ok["amount"] is None
    assert late_ok["ts"].replace(tzinfo=UTC) == datetime(2026, 1, 1, 0, 0, 3, 250000, tzinfo=UTC)


def test_jsonl_crlf_lines_and_positions_across_files(spark: Any, workspace: Workspace) -> None:
    crlf = (
        b'{"user": "u1", "url": "/", "ts": "2026-01-01T00:00:01Z", "amount": 1}\r\n'
        b"\r\n"
        b'{"user": "u2", "url": "/", "ts": "2026-01-01T00:00:02Z", "amount": 2}\r\n'
    )
    workspace.put_files([("b.jsonl", crlf), ("a.jsonl", LINE)])
    rows = read_all(spark, source(workspace, order="name"))  # b lands first, a reads first
    assert [(r["_file"], r["_major"], r["_line"]) for r in rows] == [
        ("a.jsonl", 0, 1), ("b.jsonl", 1, 1), ("b.jsonl", 1, 3)]  # fmt: skip
    assert all(r["_error"] is None for r in rows)
    assert not any(r["_raw"].endswith("\r") for r in rows)
    assert [r["user"] for r in rows] == ["u1", "u1", "u2"]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_keys_a_uri_escapes_map_to_their_files(spark: Any, workspace: Workspace, fmt: str) -> None:
    """Plain keys are appended to the folder as Spark reports it; a key with a space, a
    percent sign or a non-ASCII letter is qualified on its own (Spark percent-escapes it)."""
    keys = ["a plain.x", "b%25 and space.x", "c-ok/d_ok=1.x", "\u00e9t\u00e9.x"]

    def body(n: int) -> bytes:
        line = LINE.replace(b'"u1"', f'"u{n}"'.encode())
        if fmt == "jsonl":
            return line
        ts = pa.array([datetime(2026, 1, 1, tzinfo=UTC)], pa.timestamp("us"))
        table = pa.table({"user": [f"u{n}"], "url": ["/"], "amount": [1.0], "ts": ts})
        out = io.BytesIO()
        pq.write_table(table, out)
        return out.getvalue()

    names = [k.replace(".x", f".{fmt}") for k in keys]
    workspace.put_files([(k, body(n)) for n, k in enumerate(names)])
    rows = read_all(spark, source(workspace, fmt=fmt))
    got = sorted((r["_file"], r["_major"], r["user"], r["_error"]) for r in rows)
    assert got == [(k, n, f"u{n}", None) for n, k in enumerate(sorted(names))]


def test_read_is_deterministic(spark: Any, workspace: Workspace) -> None:
    workspace.put_files([("a.jsonl", JSONL), ("b.jsonl", LINE * 3)])
    src = source(workspace)
    assert read_all(spark, src) == read_all(spark, src)


CSV = (
    b"user,url,ts,amount\r\n"  # 1 header
    b"u1,/a,2026-01-01T00:00:01Z,1.5\r\n"  # 2 ok
    b"\r\n"  # 3 blank
    b"u2,/b,2026-01-01T00:00:02Z\n"  # 4 too few fields
    b"u3,/c,,2\n"  # 5 no ts
    b"u4,/d,yesterday,2\n"  # 6 bad ts
    b"u5,/e,2026-01-01T00:00:03Z,lots\n"  # 7 bad amount
    b'u6,"/f,g",2026-01-01 00:00:04,3\n'  # 8 ok, quoted comma
)


def test_csv_header_skipped_and_dead_letter_codes(spark: Any, workspace: Workspace) -> None:
    workspace.put_files([("a.csv", CSV)])
    rows = read_all(spark, source(workspace, fmt="csv"))
    assert [r["_line"] for r in rows] == [2, 4, 5, 6, 7, 8]
    by_line = {r["_line"]: r for r in rows}
    assert by_line[2]["_error"] is None
    assert (by_line[2]["user"], by_line[2]["amount"]) == ("u1", 1.5)
    assert not by_line[2]["_raw"].endswith("\r")
    assert by_line[4]["_error"] == "malformed: expected 4 CSV fields"
    assert by_line[5]["_error"] == "missing_event_time: field 'ts' is absent or null"
    assert by_line[6]["_error"] == "wrong_type: field 'ts' = yesterday is not a timestamp"
    assert by_line[7]["_error"] == "wrong_type: field 'amount' = lots is not a double"
    assert by_line[8]["_error"] is None and by_line[8]["url"] == "/f,g"
    assert not any(r["user"] == "user" for r in rows)


def test_csv_without_header_reads_the_first_line(spark: Any, workspace: Workspace) -> None:
    workspace.put_files(
        [("a.csv", b"u1,/a,2026-01-01T00:00:01Z,1.5\nu2,/b,2026-01-01T00:00:02Z,2\n")]
    )
    rows = read_all(spark, source(workspace, fmt="csv", header=False))
    assert [(r["_line"], r["user"], r["_error"]) for r in rows] == [
        (1, "u1", None),
        (2, "u2", None),
    ]


def parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def test_parquet_row_positions_and_codes(spark: Any, workspace: Workspace) -> None:
    t = [datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in range(4)]
    first = pa.table({
        "user": ["u1", "u2", "u3"], "url": ["/a", "/b", "/c"],
        "ts": pa.array([t[0], None, t[2]], pa.timestamp("us", tz="UTC")),
        "amount": [1.0, 2.0, None],
    })  # fmt: skip
    second = pa.table({
        "user": ["u4", "u5"], "url": ["/d", "/e"],
        "ts": pa.array([t[3], t[1]], pa.timestamp("us", tz="UTC")),
        "amount": [4.5, 5.0],
    })  # fmt: skip
    workspace.put_files([("b.parquet", parquet_bytes(second)), ("a.parquet", parquet_bytes(first))])
    rows = read_all(spark, source(workspace, fmt="parquet", order="name"))  # b lands first
    got = [(r["_file"], r["_major"], r["_line"], r["user"], code(r)) for r in rows]
    assert got == [
        ("a.parquet", 0, 1, "u1", None),
        ("a.parquet", 0, 2, "u2", "missing_event_time"),
        ("a.parquet", 0, 3, "u3", None),
        ("b.parquet", 1, 1, "u4", None),
        ("b.parquet", 1, 2, "u5", None),
    ]
    by_user = {r["user"]: r for r in rows}
    assert by_user["u1"]["ts"].replace(tzinfo=UTC) == t[0]
    assert by_user["u2"]["_error"] == "missing_event_time: field 'ts' is absent or null"
    assert by_user["u4"]["amount"] == 4.5
    assert by_user["u3"]["amount"] is None
    assert by_user["u1"]["_raw"] is None  # well-typed: rebuilt from the columns if it dies
    assert '"user":"u2"' in by_user["u2"]["_raw"].replace(" ", "")  # a dead letter keeps its row


def test_parquet_wrong_type(spark: Any, workspace: Workspace) -> None:
    table = pa.table({  # amount stored as text (castable or not), ts as text
        "user": ["u1", "u2", "u3"], "url": ["/a", "/b", "/c"],
        "ts": ["2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z", "someday"],
        "amount": ["4.5", "abc", "1"],
    })  # fmt: skip
    workspace.put_files([("a.parquet", parquet_bytes(table))])
    rows = read_all(spark, source(workspace, fmt="parquet"))
    assert [(r["_line"], r["_error"]) for r in rows] == [
        (1, None),
        (2, "wrong_type: field 'amount' = abc is not a double"),
        (3, "wrong_type: field 'ts' = someday is not a timestamp"),
    ]
    assert rows[0]["amount"] == 4.5
    assert rows[0]["_raw"] is None
    assert '"amount":"abc"' in rows[1]["_raw"]  # the value as stored, not the cast


def test_parquet_missing_column_is_null(spark: Any, workspace: Workspace) -> None:
    table = pa.table({"user": ["u1"], "ts": pa.array([datetime(2026, 1, 1, tzinfo=UTC)],
                                                     pa.timestamp("us", tz="UTC"))})  # fmt: skip
    workspace.put_files([("a.parquet", parquet_bytes(table))])
    (row,) = read_all(spark, source(workspace, fmt="parquet"))
    assert row["_error"] is None
    assert row["url"] is None and row["amount"] is None
