"""Every file name a file system or object store allows is read exactly once by the files
source, on local disk and on S3: names Hadoop would take as glob patterns (``a*.jsonl`` beside
``ab.jsonl``), names with a colon (ISO times), spaces, ``%``, ``#``, ``+``, non-ASCII, in any
format, and the records' positions name each file as its key."""

from __future__ import annotations

import io
import json
import os
import urllib.parse
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from sluice.cli import main as cli_main
from sluice.contracts.records import AttemptStatus
from sluice.protocol import plan_epoch, process_epoch, run_epoch
from sluice.sources import FilesSource, UnreadableFileNames
from sluice.sources.exact_files import read_exact
from sluice.sources.exceptions import PlannedFilesGone
from sluice.spec import FilesSourceConfig, parse_spec
from sluice.storage import to_spark_uri

from tests.fixtures.pipelines import (
    Workspace,
    assert_click_output_exact,
    click_reference,
    click_spec,
    click_spec_dict,
    runtime,
)

SCHEMA = (("user", "string"), ("url", "string"), ("ts", "timestamp"), ("amount", "double"))

# Names that glob-match each other sit side by side: a pattern reading of the first of each
# group would read the others too (or, for a set or a group, read them instead of itself).
AWKWARD = [
    "a*.jsonl", "ab.jsonl", "a?.jsonl", "ac.jsonl", "a**b.jsonl",
    "[x].jsonl", "x.jsonl", "[!x].jsonl", "y.jsonl", "[a-c]1.jsonl", "b1.jsonl",
    "{p,q}.jsonl", "p.jsonl", "q.jsonl", "br{a}ce.jsonl",
    "bc.jsonl",
    "2026-03-01T12:00:00.jsonl", "2026-03-01T12:00:00Z/part:1.jsonl", "c:d*.jsonl",
    "sp ace.jsonl", " lead.jsonl", "pct%41.jsonl", "pctA.jsonl", "%2F.jsonl",
    "hash#1.jsonl", "plus+1.jsonl", "semi;colon.jsonl", "quote'.jsonl", "amp&at@.jsonl",
    "\u00e9t\u00e9.jsonl", "\u65e5\u672c.jsonl", "tab\tname.jsonl",
    "d*/in.jsonl", "dx/in.jsonl", "d?/[1].jsonl", "k=v/x.jsonl",
]  # fmt: skip
# A backslash is one more character on local disks and AWS S3; SeaweedFS's S3 gateway stores
# ``b\c`` as ``b/c``, so these are local only here.
BACKSLASHED = ["b\\c.jsonl", "back\\*.jsonl", "b\\*\\[c].jsonl"]


def awkward(ws: Workspace) -> list[str]:
    return AWKWARD + (BACKSLASHED if ws.backend == "local" else [])


def _name(key: str, fmt: str) -> str:
    return key.removesuffix(".jsonl") + "." + fmt


def _records(n: int) -> list[dict[str, Any]]:
    """File ``n``'s two records (``user`` says which file and which line)."""
    ts = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n)
    return [
        {"user": f"u{n}-{line}", "url": f"/{n}", "ts": ts.isoformat(), "amount": float(n)}
        for line in (1, 2)
    ]


def _body(n: int, fmt: str) -> bytes:
    records = _records(n)
    if fmt == "jsonl":
        return b"".join(json.dumps(r).encode() + b"\n" for r in records)
    if fmt == "csv":
        rows = [f"{r['user']},{r['url']},{r['ts']},{r['amount']}" for r in records]
        return ("user,url,ts,amount\n" + "\n".join(rows) + "\n").encode()
    ts = pa.array([datetime.fromisoformat(r["ts"]) for r in records], pa.timestamp("us", "UTC"))
    table = pa.table({
        "user": [r["user"] for r in records], "url": [r["url"] for r in records], "ts": ts,
        "amount": [r["amount"] for r in records],
    })  # fmt: skip
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_every_name_is_read_exactly_once(spark: Any, workspace: Workspace, fmt: str) -> None:
    names = [_name(k, fmt) for k in awkward(workspace)]
    workspace.put_files([(k, _body(n, fmt)) for n, k in enumerate(names)])
    spec = FilesSourceConfig(path=workspace.uri("in"), format=fmt, schema=SCHEMA)  # type: ignore[arg-type]
    src: FilesSource = workspace.files_source(spec, required=("ts",))
    rng = src.plan_range(src.initial_offset(), None)
    assert rng is not None and sorted(rng.files) == sorted(names)

    rows = src.read(spark, rng).collect()

    major = {k: i for i, k in enumerate(rng.files)}
    first = 2 if fmt == "csv" else 1  # the CSV header is line 1
    expected = Counter(
        (k, major[k], first + i, f"u{n}-{i + 1}", None) for n, k in enumerate(names) for i in (0, 1)
    )
    got = Counter((r["_file"], r["_major"], r["_line"], r["user"], r["_error"]) for r in rows)
    assert got == expected


def test_awkward_names_through_a_pipeline(spark: Any, workspace: Workspace) -> None:
    """Two epochs over the awkward names; windows, late records and dead letters exactly the
    reference's, the dead letters' and late records' ``file`` the key as written."""
    files = []
    for n, key in enumerate(sorted(awkward(workspace))):
        lines = [json.dumps(r).encode() for r in _records(n % 7)]
        if n % 5 == 0:
            lines.append(b'{"user": "bad", "url": ')  # a dead letter in this file
        if n % 6 == 0:
            lines.append(b'{"user": "old", "url": "/", "ts": "2025-12-31T00:00:00Z"}')  # late
        files.append((key, b"\n".join(lines) + b"\n"))
    workspace.put_files(files)
    spec = click_spec(workspace, source={
        "type": "files", "path": workspace.uri("in"), "format": "jsonl",
        "schema": {"user": "string", "url": "string", "ts": "timestamp", "amount": "double"},
        "max_files_per_epoch": len(files) // 2 + 1,
    })  # fmt: skip
    assert run_epoch(runtime(spec), spark) is not None
    assert run_epoch(runtime(spec), spark) is not None
    assert run_epoch(runtime(spec), spark) is None
    reference = click_reference(files)
    assert reference.dead and reference.late
    assert_click_output_exact(spec, reference)


def test_a_name_no_reader_can_open_stops_planning_naming_it(
    spark: Any, local_workspace: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A local name whose bytes are not UTF-8 (a Latin-1 'é'): Hadoop's paths are Java
    strings, so no reader opens it. The epoch that would read it is not planned, with one
    line naming pipeline, epoch and file (never a stack trace, never skipped)."""
    ws = local_workspace
    ws.put_files([("a.jsonl", _body(1, "jsonl"))])
    root = Path(urllib.parse.urlparse(ws.uri("in")).path)
    bad = os.fsencode(root) + b"/b-caf\xe9.jsonl"
    Path(os.fsdecode(bad)).write_bytes(_body(2, "jsonl"))  # lands second, read second
    ws.put_files([("c.jsonl", _body(3, "jsonl"))])
    body = click_spec_dict(ws)
    body["source"]["max_files_per_epoch"] = 1
    spec_file = tmp_path / "clicks.yaml"
    spec_file.write_text(yaml.safe_dump(body))
    spec = parse_spec(body)
    outcome = run_epoch(runtime(spec), spark)
    assert outcome is not None and outcome.checkpoint.plan.source_range["files"] == ["a.jsonl"]

    with pytest.raises(UnreadableFileNames) as refused:
        plan_epoch(runtime(spec))
    message = (
        f"pipeline clicks: epoch 2 cannot be planned: {ws.uri('in')}: 1 file name(s) cannot be "
        "read: 'b-caf\\xe9.jsonl' (the name is not valid UTF-8). They are not skipped: rename "
        "them (or move them out of the source path), then run again"
    )
    assert str(refused.value) == message
    error = refused.value
    assert (error.pipeline, error.epoch, error.files) == (
        "clicks",
        2,
        [os.fsdecode(b"b-caf\xe9.jsonl")],
    )
    assert runtime(spec).repo.plan(2) is None
    assert cli_main(["plan", str(spec_file)]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"

    os.rename(bad, root / "b-cafe.jsonl")  # renamed, it is read in its turn
    rt = runtime(spec)
    assert [run_epoch(rt, spark) is not None for _ in range(3)] == [True, True, False]
    files = [rt.repo.checkpoint(e).plan.source_range["files"] for e in (1, 2, 3)]  # type: ignore[union-attr]
    assert files == [["a.jsonl"], ["b-cafe.jsonl"], ["c.jsonl"]]


def test_the_exact_reader_refuses_a_missing_file_a_folder_and_a_repeat(
    spark: Any, local_workspace: Workspace
) -> None:
    """Spark's file index skips a missing root path quietly; the exact reader names it."""
    local_workspace.put_files([("a*.jsonl", b"x\n"), ("d/b.jsonl", b"y\n")])
    store = local_workspace.store("in")
    a, folder = to_spark_uri(store.uri("a*.jsonl")), to_spark_uri(store.uri("d"))
    assert [r["value"] for r in read_exact(spark, "text", [a]).collect()] == ["x"]
    for paths, times in (([a, a + "-gone"], 0), ([folder], 0), ([a, a], 2)):
        with pytest.raises(Exception, match=f"was listed {times} times instead of once"):
            read_exact(spark, "text", paths)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_planned_file_gone_before_process_is_a_clear_error(
    spark: Any, local_workspace: Workspace, fmt: str
) -> None:
    """A file the plan names is deleted before the epoch reads it: the attempt fails with one
    message naming pipeline, epoch and file (no Java stack trace), writes nothing, and runs as
    planned once the file is back."""
    ws = local_workspace
    files = [(f"{n}-2026-03-01T12:0{n}:00.{fmt}", _body(n, fmt)) for n in (1, 2)]
    ws.put_files(files)
    body = click_spec_dict(ws)
    body["source"].update(format=fmt, max_files_per_epoch=1)
    spec = parse_spec(body)
    assert run_epoch(runtime(spec), spark) is not None
    assert plan_epoch(runtime(spec)) is not None
    landed = Path(urllib.parse.urlparse(ws.uri("in")).path, files[1][0]).stat()
    ws.store("in").delete(files[1][0])

    rt = runtime(spec)
    with pytest.raises(PlannedFilesGone) as gone:
        process_epoch(rt, spark, 2)
    assert str(gone.value).startswith(
        f"pipeline clicks: epoch 2: {ws.uri('in')}: the planned input '{files[1][0]}' is gone"
    )
    assert "Traceback" not in str(gone.value) and "java" not in str(gone.value).lower()
    assert [a.status for a in rt.repo.attempts(2)] == [AttemptStatus.FAILED]
    assert rt.repo.checkpoint(2) is None

    ws.put_files(files[1:])  # put back as it was (cp -p: a new time would be a change)
    put_back = Path(urllib.parse.urlparse(ws.uri("in")).path, files[1][0])
    os.utime(put_back, ns=(landed.st_atime_ns, landed.st_mtime_ns))
    assert run_epoch(runtime(spec), spark) is not None
    assert run_epoch(runtime(spec), spark) is None
    stats = [rt.repo.checkpoint(e).result.stats for e in (1, 2)]  # type: ignore[union-attr]
    assert [s.records_read for s in stats] == [len(_records(1)), len(_records(2))]
