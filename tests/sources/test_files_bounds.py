"""What bounds a files source's plan: a time ``layout`` (only the partitions within the
lookback are listed, and the set of files read forgets the older ones), ``max_file_age``
(files older than that before the newest file read are not read, and leave the set), and
``include`` / ``exclude`` patterns; their interplay with a rewind (a restored offset decides
by its own newest file). No Spark."""

from __future__ import annotations

import calendar
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sluice.sources.file_listing import TimePrefix, glob_regex
from sluice.sources.files import FilesSource
from sluice.sources.files_read import DELTAS_PER_BASE
from sluice.spec import FilesSourceConfig
from sluice.spec.components.files_source import LayoutConfig

from tests.fixtures.pipelines import Workspace

SCHEMA = (("user", "string"), ("ts", "timestamp"))
LINE = b'{"user": "u", "ts": "2026-12-07T00:00:00Z"}\n'
HOUR = 3600


def source(ws: Workspace, **options: Any) -> FilesSource:
    fields = {"path": ws.uri("in"), "format": "jsonl", "schema": dict(SCHEMA), **options}
    config = FilesSourceConfig.model_validate(fields, context={"spec": True})  # "1h" as YAML
    planner: FilesSource = ws.files_source(config, required=("ts",))
    return planner


def at(text: str) -> int:
    return calendar.timegm(datetime.fromisoformat(text).timetuple())


def put(ws: Workspace, key: str, modified: int | None = None) -> None:
    ws.put_files([(key, LINE)])
    if modified is not None:  # local disk: the modification time a landing system left
        path = Path(ws.store("in").root, *key.split("/"))  # type: ignore[attr-defined]
        os.utime(path, ns=(modified * 10**9, modified * 10**9))


def drain(src: FilesSource, start: Any, epoch: int = 1) -> tuple[Any, list[str]]:
    """Plan until nothing is new; the last end offset and every file read, in order."""
    read: list[str] = []
    while (rng := src.planning(epoch).plan_range(start, None)) is not None:
        read += rng.files
        start, epoch = rng.end, epoch + 1
    return start, read


# -- layout -----------------------------------------------------------------------------------


def test_a_time_prefix_reads_times_and_starts_listings_at_the_lookback() -> None:
    prefix = TimePrefix(LayoutConfig(time_prefix="dt=%Y-%m-%d/hour=%H/", lookback=2 * HOUR * 10**6))
    assert prefix.time_of("dt=2026-12-07/hour=10/part-1.json") == at("2026-12-07T10:00:00")
    assert prefix.time_of("dt=2026-12-07/part-1.json") is None
    assert prefix.time_of("README.txt") is None
    newest = at("2026-12-07T10:20:00")
    assert prefix.lowest(newest) == at("2026-12-07T08:00:00")  # the partition holding 08:20
    start = prefix.start_after(newest)
    assert start is not None and start.startswith("dt=2026-12-07/hour=07")
    assert "dt=2026-12-07/hour=07/z" < start < "dt=2026-12-07/hour=08/a"  # code point order
    assert prefix.start_after(None) is None
    day = TimePrefix(LayoutConfig(time_prefix="%Y/%m/%d/", lookback=24 * HOUR * 10**6))
    assert day.start_after(at("2026-12-01T05:00:00")).startswith("2026/11/29")  # type: ignore[union-attr]


def test_a_layout_lists_only_the_partitions_within_the_lookback(workspace: Workspace) -> None:
    ws = workspace
    for day in range(1, 8):
        put(ws, f"dt=2026-12-0{day}/part-{day}.jsonl")
    put(ws, "notes.txt")  # not in the layout: not read
    layout = {"time_prefix": "dt=%Y-%m-%d/", "lookback": "1d"}
    src = source(ws, layout=layout)
    end, read = drain(src, src.initial_offset())
    assert read == [f"dt=2026-12-0{d}/part-{d}.jsonl" for d in range(1, 8)]
    assert end.newest_time == at("2026-12-07T00:00:00")
    # the listing now starts at the lookback's partition: older ones are not even listed
    assert [i.key for i in src.filter.listing(src.store, end.newest_time)] == [
        "dt=2026-12-06/part-6.jsonl", "dt=2026-12-07/part-7.jsonl"]  # fmt: skip
    put(ws, "dt=2026-12-03/late.jsonl")  # a partition the layout no longer lists
    put(ws, "dt=2026-12-06/late.jsonl")
    put(ws, "dt=2026-12-08/part-8.jsonl")
    _, later = drain(src, end, epoch=9)
    assert sorted(later) == ["dt=2026-12-06/late.jsonl", "dt=2026-12-08/part-8.jsonl"]


def test_the_set_of_files_read_forgets_what_a_layout_no_longer_lists(
    local_workspace: Workspace,
) -> None:
    ws = local_workspace
    src = source(ws, layout={"time_prefix": "dt=%Y-%m-%d/", "lookback": "1d"})
    offset = src.initial_offset()
    for day in range(1, DELTAS_PER_BASE + 2):  # a new base after DELTAS_PER_BASE plans
        put(ws, f"dt=2026-12-{day:02d}/part.jsonl")
        rng = src.planning(day).plan_range(offset, None)
        assert rng is not None
        offset = rng.end
    assert not offset.read.deltas  # just compacted
    kept = sorted(src.log.load(offset.read))
    assert kept == [
        f"dt=2026-12-{d:02d}/part.jsonl" for d in (DELTAS_PER_BASE, DELTAS_PER_BASE + 1)
    ]
    assert offset.read.files == 2


# -- max_file_age -----------------------------------------------------------------------------


def test_max_file_age_ignores_old_files_and_forgets_them(local_workspace: Workspace) -> None:
    ws = local_workspace
    t = at("2026-12-07T12:00:00")
    put(ws, "a.jsonl", t - 5 * HOUR)
    put(ws, "b.jsonl", t)
    src = source(ws, max_file_age="1h")
    end, read = drain(src, src.initial_offset())
    assert read == ["a.jsonl", "b.jsonl"]  # the first plan reads every file (no newest yet)
    assert end.newest_modified_ns == t * 10**9
    put(ws, "old.jsonl", t - 2 * HOUR)  # older than an hour before the newest file read
    put(ws, "recent.jsonl", t - HOUR // 2)
    end2, read = drain(src, end, epoch=2)
    assert read == ["recent.jsonl"]
    assert src.pending_units(end2) == 0  # old.jsonl is not waiting: it is never read
    for n in range(DELTAS_PER_BASE):  # until a new base: a.jsonl leaves the set
        put(ws, f"n{n}.jsonl", t + n)
        end2, _ = drain(src, end2, epoch=10 + n)
    assert "a.jsonl" not in src.log.load(end2.read) and "b.jsonl" in src.log.load(end2.read)
    assert src.pending_units(end2) == 0  # ... and is still not read again


def test_a_rewind_decides_by_the_newest_file_of_the_offset_it_restores(
    local_workspace: Workspace,
) -> None:
    """A file landing late with an early time is ignored by a pipeline that has read newer
    files; replayed from an older checkpoint (whose newest file was older) it is read."""
    ws = local_workspace
    t = at("2026-12-07T12:00:00")
    put(ws, "one.jsonl", t)
    src = source(ws, max_file_age="1h")
    first, _ = drain(src, src.initial_offset())
    put(ws, "two.jsonl", t + 3 * HOUR)
    second, _ = drain(src, first, epoch=2)
    put(ws, "late.jsonl", t + HOUR // 2)
    assert drain(src, second, epoch=3)[1] == []  # 2.5 h before the newest read: too old
    _, replayed = drain(src, first, epoch=3)  # a rewind to the first checkpoint
    assert replayed == ["late.jsonl", "two.jsonl"]


# -- include / exclude --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("*.json.gz", "a.json.gz", True),
        ("*.json.gz", "d/a.json.gz", True),  # no '/': the file name
        ("*.json.gz", "a.json", False),
        ("2026/*/c-*.jsonl", "2026/12/c-1.jsonl", True),
        ("2026/*/c-*.jsonl", "2026/12/x/c-1.jsonl", False),  # '*' stays in one name
        ("2026/**/c-*.jsonl", "2026/12/x/c-1.jsonl", True),
        ("[!_]*.csv", "a.csv", True),
        ("{a,b}.*", "b.jsonl", True),
        ("p?rt", "part", True),
    ],
)
def test_glob_patterns(pattern: str, key: str, matches: bool) -> None:
    name = key.rpartition("/")[2]
    assert bool(glob_regex(pattern).match(key if "/" in pattern else name)) is matches


def test_include_and_exclude_choose_among_names_read_as_themselves(workspace: Workspace) -> None:
    ws = workspace
    for key in ("a.json.gz", "b.jsonl", "c*.json.gz", "tmp/d.json.gz", "e.json.gz.tmp"):
        put(ws, key)
    src = source(ws, include=["*.json.gz"], exclude=["tmp/*"])
    _, read = drain(src, src.initial_offset())
    assert sorted(read) == ["a.json.gz", "c*.json.gz"]
