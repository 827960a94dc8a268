"""The nexmark source: offsets and ranges, planning caps (no Spark), spec validation, and reads
through Spark that equal ``generate()`` whatever the range split."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sluice.nexmark import SPEC_SCHEMAS, EventKind, NexmarkConfig, event_kind, generate
from sluice.pipeline import open_runtime
from sluice.sources import RECORD_COLUMNS
from sluice.sources import nexmark as nexmark_source
from sluice.sources.nexmark import (
    NexmarkOffset,
    NexmarkRange,
    NexmarkSource,
    count_events,
    nexmark_source_spec,
)
from sluice.spec import NexmarkSourceConfig, SpecError, parse_spec


def source(events: str = "bid", **options: Any) -> NexmarkSource:
    return NexmarkSource(nexmark_source_spec(events, **options))


# -- offsets and ranges ---------------------------------------------------------------------


def test_offsets_and_ranges_round_trip() -> None:
    src = source(first_event=7)
    offset = src.initial_offset()
    assert offset == NexmarkOffset(7)
    assert offset.to_dict() == {"type": "nexmark", "next_event": 7}
    assert src.decode_offset(offset.to_dict()) == offset
    assert offset.describe() == "event 7"
    rng = NexmarkRange(offset, 107)
    assert rng.units == 100 and rng.end == NexmarkOffset(107)
    assert rng.to_dict() == {"type": "nexmark", "start": offset.to_dict(), "stop": 107}
    assert src.decode_range(rng.to_dict()) == rng
    with pytest.raises(ValueError, match="not a nexmark offset"):
        src.decode_offset({"type": "files", "after_key": None})
    with pytest.raises(ValueError, match="not a nexmark range"):
        src.decode_range({"type": "files", "start": {}, "files": []})


def test_offset_from_user_and_is_before() -> None:
    src = source(first_event=10, max_events=100)
    assert src.offset_from_user({"next_event": 50}) == NexmarkOffset(50)
    assert src.offset_from_user({"type": "nexmark", "next_event": 110}) == NexmarkOffset(110)
    bad: list[tuple[dict[str, Any], str]] = [
        ({"after_key": "x"}, "unknown field.*'next_event'"),
        ({"type": "files", "next_event": 3}, "is not 'nexmark'"),
        ({}, "next_event must be an event number >= 10"),
        ({"next_event": "12"}, "next_event must be"),
        ({"next_event": True}, "next_event must be"),
        ({"next_event": 9}, r"out of range.*>= 10 \(first_event\) and <= 110"),
        ({"next_event": 111}, "out of range"),
    ]
    for data, message in bad:
        with pytest.raises(ValueError, match=message):
            src.offset_from_user(data)
    assert src.is_before(NexmarkOffset(3), NexmarkOffset(4))
    assert not src.is_before(NexmarkOffset(4), NexmarkOffset(4))
    assert not src.is_before(NexmarkOffset(5), NexmarkOffset(4))


# -- planning ------------------------------------------------------------------------------


@pytest.mark.parametrize("first_event_id", [0, 17])
@pytest.mark.parametrize("kind", list(EventKind))
def test_count_events_matches_the_generator(kind: EventKind, first_event_id: int) -> None:
    config = NexmarkConfig(first_event_id=first_event_id)
    kinds = [event_kind(n, config) for n in range(400)]
    for start, stop in [(0, 400), (3, 4), (49, 51), (10, 10), (123, 377), (0, 1)]:
        expected = sum(1 for k in kinds[start:stop] if k == kind)
        assert count_events(kind, start, stop, config) == expected


def test_plan_caps_by_events_per_epoch_max_units_and_max_events() -> None:
    src = source(events_per_epoch=1000, max_events=2500, first_event=100)
    first = src.plan_range(src.initial_offset(), None)
    assert first == NexmarkRange(NexmarkOffset(100), 1100)
    assert src.plan_range(first.end, 300) == NexmarkRange(NexmarkOffset(1100), 1400)
    assert src.plan_range(first.end, 5000) == NexmarkRange(NexmarkOffset(1100), 2100)
    last = src.plan_range(NexmarkOffset(2100), None)
    assert last == NexmarkRange(NexmarkOffset(2100), 2600)  # max_events ends the stream
    assert src.plan_range(last.end, None) is None
    unbounded = source(events_per_epoch=10)
    assert unbounded.plan_range(NexmarkOffset(10**12), None) == NexmarkRange(
        NexmarkOffset(10**12), 10**12 + 10
    )


@pytest.mark.parametrize("kind", list(EventKind))
def test_plan_caps_records_of_the_kind_exactly(kind: EventKind) -> None:
    src = source(kind.value, events_per_epoch=100_000, generator={"first_event_id": 5})
    for start, max_records in [(0, 1), (7, 2), (30, 100), (1234, 777)]:
        rng = src.plan_range(NexmarkOffset(start), None, max_records)
        assert rng is not None
        held = count_events(kind, start, rng.stop, src.generator)
        assert held <= max_records
        # maximal: one more event would be one record too many
        assert count_events(kind, start, rng.stop + 1, src.generator) > max_records
    # the per-epoch cap still applies when the records would allow more
    rng = src.plan_range(NexmarkOffset(0), None, 10**9)
    assert rng is not None and rng.stop == 100_000


def test_plan_takes_one_event_when_it_alone_is_too_many_records() -> None:
    src = source("person")  # event 0 is a person
    assert src.plan_range(NexmarkOffset(0), None, 0) == NexmarkRange(NexmarkOffset(0), 1)


# -- the spec --------------------------------------------------------------------------------


def spec_dict(tmp_path: Path, **source_fields: Any) -> dict[str, Any]:
    return {
        "name": "bids",
        "source": {"type": "nexmark", "events": "bid", **source_fields},
        "event_time": {"column": "date_time", "max_out_of_orderness": "0s"},
        "key_by": ["auction"],
        "window": {"type": "tumbling", "size": "10s"},
        "aggregates": {"bids": "count(*)", "top": "max(price)"},
        "sinks": [{"name": "out", "type": "files", "path": str(tmp_path / "out")}],
        "checkpoint": {"storage": str(tmp_path / "ckpt")},
    }


def problems(data: dict[str, Any]) -> dict[str, tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    found = {p.field: (p.problem, p.fix) for p in info.value.problems}
    assert all(fix for _, fix in found.values()), found
    return found


def test_spec_builds_the_source(tmp_path: Path) -> None:
    data = spec_dict(tmp_path, max_events=1000, events_per_epoch=300, partitions=4,
                     first_event=50, generator={"seed": 3, "events_per_second": 100})  # fmt: skip
    spec = parse_spec(data)
    assert spec.source.type == "nexmark"
    assert isinstance(spec.source, NexmarkSourceConfig)
    assert spec.source.location == "nexmark://bid" and not hasattr(spec.source, "path")
    assert spec.source.schema == tuple(SPEC_SCHEMAS[EventKind.BID].items())
    rt = open_runtime(spec, clock=time.time, new_attempt_id=lambda: "a1")
    src = rt.source
    assert isinstance(src, NexmarkSource)
    assert (src.kind, src.first_event, src.stop) == (EventKind.BID, 50, 1050)
    assert (src.events_per_epoch, src.partitions) == (300, 4)
    assert src.generator == NexmarkConfig(seed=3, events_per_second=100)
    defaults = NexmarkSource(parse_spec(spec_dict(tmp_path)).source)
    assert (defaults.stop, defaults.events_per_epoch, defaults.partitions) == (None, 100_000, 1)


def test_spec_errors_name_the_field_and_the_fix(tmp_path: Path) -> None:
    found = problems(spec_dict(tmp_path, event_per_epoch=10, schema={"price": "long"},
                               path="data/bids", partitions=0))  # fmt: skip
    assert found["source.event_per_epoch"] == ("unknown field", "did you mean 'events_per_epoch'?")
    assert "set by the generator" in found["source.schema"][0]
    assert "does not apply to a nexmark source" in found["source.path"][0]
    assert "not a positive whole number" in found["source.partitions"][0]
    data = spec_dict(tmp_path, events="bids", first_event=-1)
    found = problems(data)
    assert found["source.events"] == (
        "'bids' is not valid",
        "use one of ['person', 'auction', 'bid']",
    )
    assert "whole number >= 0" in found["source.first_event"][0]
    found = problems(spec_dict(tmp_path, generator={"sed": 1, "hot_auction_ratio": 0}))
    assert found["source.generator.sed"] == ("unknown field", "did you mean 'seed'?")
    assert "outside [1," in found["source.generator.hot_auction_ratio"][0]
    found = problems(spec_dict(tmp_path, max_events=2**62 + 1))
    assert "cannot produce events" in found["source.max_events"][0]
    data = spec_dict(tmp_path, events="person")
    found = problems(data)  # the bid columns the rest of the spec names are not persons'
    assert "'auction' is not a schema column" in found["key_by"][0]


# -- reading (Spark) -------------------------------------------------------------------------


@pytest.fixture
def nexmark_spark(spark: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The test session, with Python workers on this interpreter (the venv's: pyarrow, sluice)
    even when ``PYSPARK_PYTHON`` was unset when the session started, and small slices."""
    monkeypatch.setattr(spark.sparkContext, "pythonExec", sys.executable)
    # slices of at most 1,000 events: every read below spans several generator calls
    monkeypatch.setattr(nexmark_source, "_MIN_SLICE", 700)
    monkeypatch.setattr(nexmark_source, "chunk_size", lambda config: 1000)
    return spark


def read(spark: Any, src: NexmarkSource, ranges: list[tuple[int, int]]) -> pa.Table:
    tables = []
    for start, stop in ranges:
        frame = src.read(spark, NexmarkRange(NexmarkOffset(start), stop))
        assert tuple(frame.columns) == RECORD_COLUMNS + tuple(c for c, _ in src.config.schema)
        tables.append(frame.toArrow())
    return pa.concat_tables(tables).sort_by("_line")


def same_records(got: pa.Table, expected: pa.Table) -> None:
    assert got.num_rows == expected.num_rows
    for name in expected.column_names:
        column = expected.column(name).cast(got.schema.field(name).type)
        assert got.column(name).to_pylist() == column.to_pylist(), name


def test_read_equals_the_generator_with_positions(nexmark_spark: Any) -> None:
    config = {"seed": 9, "first_event_id": 3}
    src = source("bid", partitions=3, generator=config)
    got = read(nexmark_spark, src, [(1000, 5000)])
    expected = generate(1000, 5000, NexmarkConfig(**config))[EventKind.BID]
    same_records(got, expected)
    lines = got.column("_line").to_pylist()
    assert lines == [e - 3 for e in expected.column("event_id").to_pylist()]
    assert got.column("_partition").to_pylist() == [str(n % 3) for n in lines]
    assert set(got.column("_file").to_pylist()) == {"nexmark:bid"}
    assert set(got.column("_major").to_pylist()) == {0}
    assert got.column("_raw").null_count == got.column("_error").null_count == got.num_rows


def test_read_is_split_invariant(nexmark_spark: Any) -> None:
    src = source("auction", generator={"seed": 4})
    whole = read(nexmark_spark, src, [(0, 6000)])
    parts = read(nexmark_spark, src, [(0, 1234), (1234, 1235), (1235, 6000)])
    assert whole.equals(parts)
    same_records(whole, generate(0, 6000, NexmarkConfig(seed=4))[EventKind.AUCTION])


@pytest.mark.parametrize("kind", list(EventKind))
def test_slices_cover_the_range_exactly_without_spark(kind: EventKind) -> None:
    """What each executor task runs, over tiny slices (many hold no person at all)."""
    config = NexmarkConfig(seed=2)
    slices = pa.record_batch([pa.array(range(40), pa.int64())], names=["id"])
    batches = nexmark_source._generate_slices(
        iter([slices]), first=5, stop=278, size=7, kind=kind, config=config, partitions=4
    )
    got = pa.Table.from_batches(list(batches))
    expected = generate(5, 278, config)[kind]
    same_records(got, expected)
    assert got.column("_line").to_pylist() == expected.column("event_id").to_pylist()
    assert got.column("_partition").to_pylist() == [str(n % 4) for n in got["_line"].to_pylist()]
