"""``partition_by: directory``: name order (name inside the folder, folder), the partitions
still waiting after a range, pending units, offsets — and the partition column on read."""

from __future__ import annotations

from typing import Any

from sluice.sources.files import FilesOffset, FilesSource
from sluice.spec import FilesSourceConfig

from tests.fixtures.pipelines import Workspace

SCHEMA = (("user", "string"), ("ts", "timestamp"))
KEYS = ["a/0001.jsonl", "a/0002.jsonl", "b/0001.jsonl", "b/0002.jsonl", "c/0001.jsonl"]


def _source(ws: Workspace, partition_by: str = "directory") -> FilesSource:
    spec = FilesSourceConfig(path=ws.uri("in"), format="jsonl", schema=SCHEMA, order="name",
                             partition_by=partition_by)  # type: ignore[arg-type]  # fmt: skip
    planner: FilesSource = ws.files_source(spec, required=("ts",))
    return planner


def _put(ws: Workspace) -> None:
    ws.put_files([(k, f'{{"user": "{k[0]}", "ts": "2024-01-01T00:00:0{k[5]}"}}\n'.encode())
                  for k in KEYS])  # fmt: skip


def test_partitions_interleave_and_waiting_names_unread_folders(
    local_workspace: Workspace,
) -> None:
    _put(local_workspace)
    src = _source(local_workspace)
    start = src.initial_offset()
    assert src.pending_units(start) == 5
    first = src.plan_range(start, 2)
    assert first is not None
    assert first.files == ("a/0001.jsonl", "b/0001.jsonl")
    assert first.waiting == ("a", "b", "c")  # c/0001 and the 0002s are still unread
    second = src.plan_range(first.end, 2)
    assert second is not None
    assert second.files == ("c/0001.jsonl", "a/0002.jsonl")
    assert second.waiting == ("b",)
    assert src.pending_units(second.end) == 1
    third = src.plan_range(second.end, 2)
    assert third is not None and third.files == ("b/0002.jsonl",) and third.waiting == ()
    assert src.plan_range(third.end, 2) is None
    assert src.is_before(first.end, second.end) and not src.is_before(second.end, first.end)
    # a range round-trips with its waiting partitions (replays must agree)
    assert src.decode_range(second.to_dict()) == second


def test_an_offset_a_user_types_counts_the_files_behind_it_in_read_order(
    local_workspace: Workspace,
) -> None:
    _put(local_workspace)
    src = _source(local_workspace)
    offset = src.offset_from_user({"after_key": "b/0001.jsonl"})
    assert offset == FilesOffset(after_key="b/0001.jsonl")  # a/0001, b/0001 count as read
    rng = src.plan_range(offset, None)
    assert rng is not None
    assert rng.files == ("c/0001.jsonl", "a/0002.jsonl", "b/0002.jsonl")
    assert src.is_before(offset, rng.end) and not src.is_before(rng.end, offset)


def test_without_partitions_the_order_is_the_key_order(local_workspace: Workspace) -> None:
    _put(local_workspace)
    src = _source(local_workspace, "none")
    rng = src.plan_range(src.initial_offset(), None)
    assert rng is not None and list(rng.files) == sorted(KEYS) and rng.waiting == ()


def test_read_sets_the_partition_from_the_folder(spark: Any, local_workspace: Workspace) -> None:
    _put(local_workspace)
    src = _source(local_workspace)
    rng = src.plan_range(src.initial_offset(), None)
    assert rng is not None
    rows = src.read(spark, rng).select("_partition", "_file", "_major", "user").collect()
    assert sorted((r["_partition"], r["_file"], r["_major"]) for r in rows) == [
        ("a", "a/0001.jsonl", 0), ("a", "a/0002.jsonl", 3), ("b", "b/0001.jsonl", 1),
        ("b", "b/0002.jsonl", 4), ("c", "c/0001.jsonl", 2),
    ]  # fmt: skip
    assert all(r["_partition"] == r["user"] for r in rows)
