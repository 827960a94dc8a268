"""write_files: names in event order, JSON lines / Parquet that read back as generate_rows."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sluice.nexmark import EventKind, InvalidEventRange, NexmarkConfig, generate, generate_rows
from sluice.nexmark.exceptions import InvalidFilesRequest
from sluice.nexmark.files import encode_jsonl, file_ranges, iso_strings, write_files
from sluice.storage import LocalObjectStore, ObjectInfo, ObjectNotFound, ObjectStore

CONFIG = NexmarkConfig(seed=5)


class MemoryStore(ObjectStore):
    """Just enough of an object store to show write_files only uses the store API."""

    def __init__(self) -> None:
        self.root_uri = "memory://nexmark"
        self.objects: dict[str, bytes] = {}

    def get(self, key: str) -> bytes:
        if key not in self.objects:
            raise ObjectNotFound(self.uri(key))
        return self.objects[key]

    def put(self, key: str, data: bytes) -> None:
        self.objects[self._check_key(key)] = data

    def put_if_absent(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        return key in self.objects

    def list(self, prefix: str = "", start_after: str | None = None) -> list[ObjectInfo]:
        return [
            ObjectInfo(k, len(v)) for k, v in sorted(self.objects.items()) if k.startswith(prefix)
        ]

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    def move(self, src: str, dst: str) -> None:
        raise NotImplementedError

    def child(self, prefix: str) -> ObjectStore:
        raise NotImplementedError


def json_rows(data: bytes) -> list[dict[str, Any]]:
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.decode().splitlines()]


def as_json(row: dict[str, Any]) -> dict[str, Any]:
    """A generate_rows row as write_files renders it in JSON."""
    return {
        k: v.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if isinstance(v, datetime) else v
        for k, v in row.items()
    }


def rows_of(kind: str, start: int, stop: int) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if k != "kind"}
        for r in generate_rows(start, stop, CONFIG)
        if r["kind"] == kind
    ]


# ---------------------------------------------------------------- names


def test_files_cover_ranges_aligned_to_events_per_file() -> None:
    store = MemoryStore()

    keys = write_files(store, 150, 420, CONFIG, events_per_file=100)

    assert keys == sorted(store.objects)
    assert [k for k in keys if k.startswith("bid/")] == [
        "bid/events-000000000150-000000000199.jsonl",
        "bid/events-000000000200-000000000299.jsonl",
        "bid/events-000000000300-000000000399.jsonl",
        "bid/events-000000000400-000000000419.jsonl",
    ]
    assert {k.split("/")[0] for k in keys} == {"person", "auction", "bid"}
    assert file_ranges(0, 250, 100) == [(0, 100), (100, 200), (200, 250)]
    assert file_ranges(100, 100, 100) == []


def test_key_order_is_event_order() -> None:
    store = MemoryStore()
    write_files(store, 0, 25_000, CONFIG, events_per_file=1_000)

    for kind in EventKind:
        ids = [
            r["event_id"] for info in store.list(f"{kind}/") for r in json_rows(store.get(info.key))
        ]
        assert (
            ids == sorted(ids) and len(ids) == {"person": 500, "auction": 1500, "bid": 23000}[kind]
        )


def test_files_of_fewer_than_50_events_skip_absent_kinds() -> None:
    keys = write_files(MemoryStore(), 0, 60, CONFIG, events_per_file=10)

    assert [k for k in keys if k.startswith("person/")] == [
        "person/events-000000000000-000000000009.jsonl",
        "person/events-000000000050-000000000059.jsonl",
    ]
    assert len([k for k in keys if k.startswith("bid/")]) == 6


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("kind", list(EventKind))
def test_jsonl_reads_back_as_generate_rows(kind: EventKind) -> None:
    store = MemoryStore()
    write_files(store, 3_000, 7_321, CONFIG, events_per_file=1_000)

    read = [r for info in store.list(f"{kind}/") for r in json_rows(store.get(info.key))]
    assert read == [as_json(r) for r in rows_of(kind, 3_000, 7_321)]


@pytest.mark.parametrize("kind", list(EventKind))
def test_parquet_reads_back_as_generate(kind: EventKind) -> None:
    store = MemoryStore()
    write_files(store, 3_000, 7_321, CONFIG, format="parquet", events_per_file=1_000)

    parts = [pq.read_table(io.BytesIO(store.get(i.key))) for i in store.list(f"{kind}/")]
    table = pa.concat_tables(parts)
    assert table.equals(generate(3_000, 7_321, CONFIG)[kind])
    assert table.to_pylist() == rows_of(kind, 3_000, 7_321)


def test_mixed_jsonl_holds_every_kind_in_event_order() -> None:
    store = MemoryStore()
    keys = write_files(store, 0, 1_234, CONFIG, events_per_file=500, split_by_kind=False)

    assert keys == [
        "events-000000000000-000000000499.jsonl",
        "events-000000000500-000000000999.jsonl",
        "events-000000001000-000000001233.jsonl",
    ]
    read = [r for k in keys for r in json_rows(store.get(k))]
    assert read == [as_json(r) for r in generate_rows(0, 1_234, CONFIG)]
    assert list(read[1]) == ["event_id", "kind", *list(rows_of("auction", 0, 50)[0])[1:]]


def test_mixed_parquet_is_the_union_of_columns_with_nulls() -> None:
    store = MemoryStore()
    (key,) = write_files(
        store, 0, 400, CONFIG, format="parquet", events_per_file=1_000, split_by_kind=False
    )

    table = pq.read_table(io.BytesIO(store.get(key)))
    assert table.column_names[:2] == ["event_id", "kind"]
    read = [{k: v for k, v in row.items() if v is not None} for row in table.to_pylist()]
    assert read == generate_rows(0, 400, CONFIG)


def test_rewriting_any_range_gives_the_same_bytes(tmp_path: Path) -> None:
    once, in_steps = tmp_path / "once", tmp_path / "steps"

    write_files(str(once), 0, 5_000, CONFIG, events_per_file=1_000, format="parquet")
    write_files(f"file://{in_steps}", 2_000, 5_000, CONFIG, events_per_file=1_000, format="parquet")
    write_files(
        LocalObjectStore(in_steps), 0, 2_000, CONFIG, events_per_file=1_000, format="parquet"
    )
    write_files(str(in_steps), 1_000, 3_000, CONFIG, events_per_file=1_000, format="parquet")

    files = sorted(p.relative_to(once) for p in once.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(in_steps) for p in in_steps.rglob("*") if p.is_file())
    assert len(files) == 15
    assert all((once / f).read_bytes() == (in_steps / f).read_bytes() for f in files)


# ---------------------------------------------------------------- encoding


@given(st.lists(st.integers(0, 253_402_300_799_999_999), max_size=50))
def test_iso_strings_match_python(micros: list[int]) -> None:
    expected = [
        (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=m)).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ"
        )
        for m in micros
    ]

    assert iso_strings(np.array(micros, dtype=np.int64)).to_pylist() == expected


def test_json_strings_are_escaped() -> None:
    table = pa.table({"event_id": [1, 2], "text": ['a "quoted" word', "back\\slash"]})

    assert json_rows(encode_jsonl(table)) == [
        {"event_id": 1, "text": 'a "quoted" word'},
        {"event_id": 2, "text": "back\\slash"},
    ]


# ---------------------------------------------------------------- bad requests


def test_bad_requests_are_refused() -> None:
    store = MemoryStore()
    with pytest.raises(InvalidFilesRequest, match="format='csv'"):
        write_files(store, 0, 10, format="csv")  # type: ignore[arg-type]
    with pytest.raises(InvalidFilesRequest, match="events_per_file=0"):
        write_files(store, 0, 10, events_per_file=0)
    with pytest.raises(InvalidEventRange, match="file names hold event numbers"):
        write_files(store, 10**12 - 1, 10**12 + 1)
    assert store.objects == {}
