"""The multi source (a join's two named sources as one): offsets and ranges through storage,
planning with an empty side, caps per source, user offsets, units and history per source
(no Spark), and reads of files and Nexmark sides with Spark, as the process step reads each
source and the join names its partitions: prefixed partitions, an empty side typed as a real
read, footer hints per side."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sluice.joins.operator import side_input
from sluice.protocol import plan_epoch
from sluice.protocol.inputs import source_inputs
from sluice.sources import RECORD_COLUMNS, FilesOffset, FilesRange, FilesSource
from sluice.sources.multi import MultiOffset, MultiRange, MultiSource
from sluice.sources.nexmark import NexmarkOffset, NexmarkRange, NexmarkSource, nexmark_source_spec
from sluice.spec import FilesSourceConfig, PipelineSpec
from sluice.spec.model import EventTimeSpec, JoinSide, JoinSpec

from tests.fixtures.pipelines import Workspace, click_spec, runtime

PERSONS = (("id", "long"), ("name", "string"), ("ts", "timestamp"))
AUCTIONS = (("id", "long"), ("seller", "long"), ("price", "double"), ("date_time", "timestamp"))


def person(i: int, second: int = 0) -> bytes:
    return json.dumps({"id": i, "name": f"p{i}", "ts": f"2026-01-01T00:00:{second:02d}Z"}).encode()


def auction(i: int, seller: int, second: int = 0) -> bytes:
    return json.dumps(
        {"id": i, "seller": seller, "price": 1.5, "date_time": f"2026-01-01T00:00:{second:02d}Z"}
    ).encode()


def files_config(ws: Workspace, side: str, schema: Any, **options: Any) -> FilesSourceConfig:
    return FilesSourceConfig(path=ws.uri(side), schema=schema, **{"format": "jsonl", **options})


def files_multi(ws: Workspace, **options: Any) -> MultiSource:
    """persons (event time ts) and auctions (date_time) as files under ``persons/`` and
    ``auctions/``, each side's sets of files read under ``ckpt/sources/<side>/``."""
    sides = {"persons": (PERSONS, "ts"), "auctions": (AUCTIONS, "date_time")}
    sources: dict[str, Any] = {
        name: ws.files_source(files_config(ws, name, schema, **options), name, required=(time,))
        for name, (schema, time) in sides.items()
    }
    return MultiSource(sources)


def nexmark_multi(persons: dict[str, Any], auctions: dict[str, Any]) -> MultiSource:
    parts = {"persons": ("person", persons), "auctions": ("auction", auctions)}
    configs = {name: nexmark_source_spec(kind, **opts) for name, (kind, opts) in parts.items()}
    sources: dict[str, Any] = {name: NexmarkSource(c) for name, c in configs.items()}
    return MultiSource(sources)


def stored(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` as a manifest stores it (JSON)."""
    loaded: dict[str, Any] = json.loads(json.dumps(data))
    return loaded


# -- offsets and ranges ---------------------------------------------------------------------


def test_offsets_and_ranges_round_trip_through_storage() -> None:
    src = nexmark_multi({"first_event": 3}, {})
    offset = src.initial_offset()
    assert offset == MultiOffset((("persons", NexmarkOffset(3)), ("auctions", NexmarkOffset(0))))
    assert offset.to_dict() == {
        "type": "multi",
        "sources": {
            "persons": {"type": "nexmark", "next_event": 3},
            "auctions": {"type": "nexmark", "next_event": 0},
        },
    }
    assert src.decode_offset(stored(offset.to_dict())) == offset
    assert offset.describe() == "persons=event 3, auctions=event 0"
    rng = MultiRange(offset, (("persons", NexmarkRange(NexmarkOffset(3), 13)), ("auctions", None)))
    assert rng.to_dict() == {
        "type": "multi",
        "start": offset.to_dict(),
        "sources": {"persons": NexmarkRange(NexmarkOffset(3), 13).to_dict(), "auctions": None},
    }
    assert src.decode_range(stored(rng.to_dict())) == rng
    assert rng.units == 10
    assert rng.end == MultiOffset((("persons", NexmarkOffset(13)), ("auctions", NexmarkOffset(0))))


def test_stored_offsets_are_decoded_by_the_source_and_must_name_its_sources() -> None:
    src = nexmark_multi({}, {})
    offset = src.initial_offset()
    # without the sources, the stored form reads back as stored (each part kept verbatim)
    again = MultiOffset.from_dict(stored(offset.to_dict()))
    assert again.to_dict() == offset.to_dict() and list(again.by_name) == ["persons", "auctions"]
    rng = src.plan_range(offset, None)
    assert rng is not None
    plain = MultiRange.from_dict(stored(rng.to_dict()))
    assert plain.to_dict() == rng.to_dict()
    with pytest.raises(TypeError, match="decode_range"):  # its end is its source's to say
        _ = plain.end
    with pytest.raises(ValueError, match="not a multi range"):
        MultiRange.from_dict({"type": "multi"})
    with pytest.raises(ValueError, match="not a multi offset"):
        src.decode_offset({"type": "nexmark", "next_event": 0})
    only_persons = {"type": "multi", "sources": {"persons": {"type": "nexmark", "next_event": 0}}}
    with pytest.raises(ValueError, match="of the sources persons, but this pipeline reads "
                                         "persons and auctions"):  # fmt: skip
        src.decode_offset(only_persons)
    with pytest.raises(ValueError, match="not a multi range"):
        src.decode_range(NexmarkRange(NexmarkOffset(0), 5).to_dict())


# -- planning (no Spark) --------------------------------------------------------------------


def test_a_side_with_nothing_new_has_an_empty_slice(local_workspace: Workspace) -> None:
    ws = local_workspace
    ws.put_files([("p1.jsonl", person(1))], "persons")
    ws.put_files([("a1.jsonl", auction(1, 1)), ("a2.jsonl", auction(2, 1))], "auctions")
    src = files_multi(ws)
    first = src.plan_range(src.initial_offset(), 1)
    assert first is not None
    for name, files in (("persons", ("p1.jsonl",)), ("auctions", ("a1.jsonl",))):
        part = first.part(name)
        assert isinstance(part, FilesRange)
        assert (part.start, part.files, part.end.read.files) == (FilesOffset(), files, 1)
    second = src.plan_range(first.end, 1)
    assert second is not None and second.start == first.end
    assert second.part("persons") is None
    later = second.part("auctions")
    assert isinstance(later, FilesRange) and later.files == ("a2.jsonl",)
    # the empty side ends where it started; the other moves on
    assert second.end.by_name["persons"] == first.end.by_name["persons"]
    assert second.end.by_name["auctions"] != first.end.by_name["auctions"]
    assert src.decode_range(stored(second.to_dict())) == second
    assert src.plan_range(second.end, 1) is None


def test_nothing_new_on_either_side_plans_nothing(local_workspace: Workspace) -> None:
    src = files_multi(local_workspace)
    assert src.plan_range(src.initial_offset(), None) is None
    assert src.pending_units(src.initial_offset()) == 0


def test_caps_apply_to_each_source_on_its_own(local_workspace: Workspace) -> None:
    ws = local_workspace
    ws.put_files([(f"p{i}.jsonl", person(i)) for i in range(5)], "persons")
    two = auction(1, 1) + b"\n" + auction(2, 1)
    ws.put_files([(f"a{i}.jsonl", two) for i in range(5)], "auctions")
    src = files_multi(ws)
    by_units = src.plan_range(src.initial_offset(), 2)
    assert by_units is not None
    assert [(n, r.units if r else 0) for n, r in by_units.parts] == [
        ("persons", 2), ("auctions", 2),
    ]  # fmt: skip
    assert by_units.units == 4
    by_records = src.plan_range(
        src.initial_offset(), None, 2
    )  # 1 record a person file, 2 an auction one
    assert by_records is not None
    assert [(n, r.units if r else 0) for n, r in by_records.parts] == [
        ("persons", 2), ("auctions", 1),
    ]  # fmt: skip
    events = nexmark_multi({"events_per_epoch": 100}, {"events_per_epoch": 100})
    capped = events.plan_range(events.initial_offset(), 7)
    assert capped is not None and capped.part("persons") == NexmarkRange(NexmarkOffset(0), 7)
    assert capped.part("auctions") == NexmarkRange(NexmarkOffset(0), 7)


def test_each_part_names_its_own_waiting_partitions(local_workspace: Workspace) -> None:
    ws = local_workspace
    ws.put_files([("d1/a.jsonl", person(1)), ("d2/a.jsonl", person(2))], "persons")
    ws.put_files([("d3/a.jsonl", auction(1, 1)), ("d4/b.jsonl", auction(2, 1))], "auctions")
    src = files_multi(ws, partition_by="directory")
    rng = src.plan_range(src.initial_offset(), 1)
    assert rng is not None
    waiting = {p.name: p.source.waiting_partitions(p.range) for p in src.parts(rng.to_dict())}
    assert waiting == {"persons": ("d2",), "auctions": ("d4",)}


# -- user offsets, order, counts ------------------------------------------------------------


def test_user_offsets_name_every_source() -> None:
    src = nexmark_multi({"max_events": 100}, {"max_events": 100})
    both = {"persons": {"next_event": 5}, "auctions": {"next_event": 7}}
    want = MultiOffset((("persons", NexmarkOffset(5)), ("auctions", NexmarkOffset(7))))
    assert src.offset_from_user(both) == want
    assert src.offset_from_user(want.to_dict()) == want  # the stored form, as the monitor shows it
    refused = "no offset for auctions: the sources of a join move together.*persons and auctions"
    with pytest.raises(ValueError, match=refused):
        src.offset_from_user({"persons": {"next_event": 5}})
    with pytest.raises(ValueError, match=r"unknown source\(s\) \['bids'\]"):
        src.offset_from_user({**both, "bids": {"next_event": 1}})
    with pytest.raises(ValueError, match=r"^auctions: next_event 700 is out of range"):
        src.offset_from_user({**both, "auctions": {"next_event": 700}})
    with pytest.raises(ValueError, match=r"^persons: expected that source's offset as a mapping"):
        src.offset_from_user({**both, "persons": 5})


def test_order_counts_units_and_location() -> None:
    src = nexmark_multi({"max_events": 100}, {"max_events": 100})

    def at(persons: int, auctions: int) -> MultiOffset:
        return MultiOffset(
            (("persons", NexmarkOffset(persons)), ("auctions", NexmarkOffset(auctions)))
        )

    assert src.is_before(at(5, 9), at(5, 10)) and src.is_before(at(4, 10), at(5, 10))
    assert not src.is_before(at(5, 10), at(5, 10))
    assert not src.is_before(at(6, 10), at(5, 10))
    assert src.pending_units(at(5, 10)) == 95 + 90
    unbounded = nexmark_multi({"max_events": 100}, {})
    assert unbounded.pending_units(unbounded.initial_offset()) is None
    assert src.unit_name == "events"
    assert src.location == "persons=nexmark://person, auctions=nexmark://auction"


def test_mixed_units_are_units(local_workspace: Workspace) -> None:
    files = local_workspace.files_source(files_config(local_workspace, "persons", PERSONS))
    events = NexmarkSource(nexmark_source_spec("auction"))
    src = MultiSource({"persons": files, "auctions": events})
    assert src.unit_name == "units"
    with pytest.raises(ValueError, match="holds no '/' or ':'"):
        MultiSource({"a/b": events})


# -- units, missing input, history ----------------------------------------------------------


def test_units_and_missing_input_name_their_source(local_workspace: Workspace) -> None:
    ws = local_workspace
    ws.put_files([("a.jsonl", person(1)), ("b.jsonl", person(2))], "persons")
    ws.put_files([("a.jsonl", auction(1, 1))], "auctions")
    src = files_multi(ws)
    rng = src.plan_range(src.initial_offset(), None)
    assert rng is not None
    assert src.units_of(stored(rng.to_dict())) == (
        "persons:a.jsonl", "persons:b.jsonl", "auctions:a.jsonl",
    )  # fmt: skip
    assert src.units_of(FilesRange(FilesOffset(), ("x.jsonl",)).to_dict()) == ()
    assert src.missing_units(rng) == []
    ws.store("persons").delete("b.jsonl")
    ws.store("auctions").delete("a.jsonl")
    assert src.missing_units(rng) == ["persons: b.jsonl", "auctions: a.jsonl"]
    skipping = src.skipping_missing_input()
    assert isinstance(skipping, MultiSource) and list(skipping.sources) == ["persons", "auctions"]


def test_each_side_keeps_its_own_set_and_forgets_only_what_no_kept_offset_names(
    local_workspace: Workspace,
) -> None:
    ws = local_workspace
    ws.put_files([("a.jsonl", person(1))], "persons")
    ws.put_files([("a.jsonl", auction(1, 1))], "auctions")
    src = files_multi(ws)
    first = src.planning(1).plan_range(src.initial_offset(), None)
    assert first is not None
    ws.put_files([("b.jsonl", person(2))], "persons")
    second = src.planning(2).plan_range(first.end, None)
    assert second is not None and second.part("auctions") is None
    store = ws.store("ckpt")
    objects = sorted(i.key for i in store.list("sources/") if i.key.endswith(".json.gz"))
    assert [k.split("/")[1] for k in objects] == ["auctions", "persons", "persons"]
    kept = [stored(second.end.to_dict())]
    assert src.forget(kept, through=2) == 0  # the persons delta builds on its base
    # the two sides' epoch-1 bases and their key indexes
    assert src.forget([{"type": "multi", "sources": {}}], through=1) == 4
    assert [k.split("/")[1] for k in sorted(i.key for i in store.list("sources/"))] == ["persons"]


def join_spec(ws: Workspace) -> PipelineSpec:
    """A join of ``persons`` (event time ts) with ``auctions`` (date_time) files."""
    persons = files_config(ws, "persons", PERSONS)
    auctions = files_config(ws, "auctions", AUCTIONS)
    join = JoinSpec(
        type="regular",
        left=JoinSide("persons", persons, EventTimeSpec("ts", 0)),
        right=JoinSide("auctions", auctions, EventTimeSpec("date_time", 0)),
        on=(("id", "seller"),),
        output=(("name", "persons.name"), ("auction", "auctions.id")),
        ttl_us=60_000_000,
    )
    base = click_spec(ws, "joins")
    return replace(base, source=persons, event_time=join.left.event_time, key_by=(),
                   window=None, aggregates=(), join=join)  # fmt: skip


def test_a_join_pipeline_opens_each_side_as_its_own_source(local_workspace: Workspace) -> None:
    rt = runtime(join_spec(local_workspace))
    src = rt.source
    assert isinstance(src, MultiSource) and list(src.sources) == ["persons", "auctions"]
    persons, auctions = src.sources["persons"], src.sources["auctions"]
    assert isinstance(persons, FilesSource) and isinstance(auctions, FilesSource)
    assert persons.required == ("ts",) and auctions.required == ("date_time",)
    assert persons.location == local_workspace.store("persons").uri()
    assert {n: s.source.schema for n, s in rt.spec.sources.items()} == {
        "persons": PERSONS, "auctions": AUCTIONS,
    }  # fmt: skip


def test_a_file_one_side_read_is_new_to_the_other(local_workspace: Workspace) -> None:
    ws = local_workspace
    ws.put_files([("a.jsonl", person(1)), ("c.jsonl", person(3))], "persons")
    ws.put_files([("a.jsonl", auction(1, 1)), ("b.jsonl", auction(2, 1))], "auctions")
    rt = runtime(join_spec(ws))
    plan = plan_epoch(rt)
    assert plan is not None
    end = rt.source.decode_offset(plan.end_offset)
    # deleting files a side read changes nothing
    ws.store("persons").delete("a.jsonl")
    ws.store("auctions").delete("a.jsonl")
    assert rt.source.plan_range(end, None) is None
    # b.jsonl was read by auctions, never by persons: it is new there, and read
    ws.put_files([("b.jsonl", person(2))], "persons")
    rng = rt.source.plan_range(end, None)
    assert rng is not None and rng.part("auctions") is None
    persons = rng.part("persons")
    assert isinstance(persons, FilesRange) and persons.files == ("b.jsonl",)


# -- reads (Spark) --------------------------------------------------------------------------


def rows(frame: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in frame.collect())


def sides(spark: Any, src: MultiSource, rng: MultiRange, spec: PipelineSpec) -> dict[str, Any]:
    """Each side's records as the join reads them: the process step's inputs, partitions
    named ``<side>/`` by the join."""
    join = spec.joining
    inputs = source_inputs(spark, src, rng.to_dict(), spec)
    return {name: side_input(inp, join.side(name)) for name, inp in inputs.items()}


def test_read_each_files_side_and_an_empty_side(spark: Any, local_workspace: Workspace) -> None:
    ws = local_workspace
    ws.put_files([("p1.jsonl", person(1) + b"\n" + person(2, 5))], "persons")
    ws.put_files([("a1.jsonl", auction(1, 1)), ("a2.jsonl", auction(2, 2, 9))], "auctions")
    src, spec = files_multi(ws), join_spec(ws)
    first = src.plan_range(src.initial_offset(), 1)
    assert first is not None
    inputs = sides(spark, src, first, spec)
    assert list(inputs) == ["persons", "auctions"]
    persons = inputs["persons"].records
    assert persons.columns == [*RECORD_COLUMNS, "id", "name", "ts"]
    got = [
        (r["_partition"], r["_file"], r["_line"], r["id"], r["_error"]) for r in persons.collect()
    ]
    assert sorted(got) == [
        ("persons/0", "p1.jsonl", 1, 1, None),
        ("persons/0", "p1.jsonl", 2, 2, None),
    ]
    assert {r["_partition"] for r in inputs["auctions"].records.collect()} == {"auctions/0"}
    with pytest.raises(TypeError, match="read one at a time"):  # no one frame of both
        src.read(spark, first)
    second = src.plan_range(first.end, 1)
    assert second is not None and second.part("persons") is None
    again = sides(spark, src, second, spec)
    assert again["persons"].records.count() == 0
    assert again["persons"].records.dtypes == persons.dtypes
    assert again["auctions"].records.dtypes == inputs["auctions"].records.dtypes
    assert [r["id"] for r in again["auctions"].records.collect()] == [2]


def test_read_each_nexmark_sides_and_an_empty_side(spark: Any, local_workspace: Workspace) -> None:
    src = nexmark_multi(
        {"max_events": 200, "events_per_epoch": 200, "partitions": 3},
        {"max_events": 400, "events_per_epoch": 200},
    )
    base = join_spec(local_workspace)
    assert base.join is not None
    configs = {n: s.config for n, s in src.sources.items()}  # type: ignore[attr-defined]
    join = replace(
        base.join,
        left=JoinSide("persons", configs["persons"], EventTimeSpec("date_time", 0)),
        right=JoinSide("auctions", configs["auctions"], EventTimeSpec("date_time", 0)),
        on=(("id", "seller"),),
    )
    spec = replace(base, join=join)
    first = src.plan_range(src.initial_offset(), None)
    assert first is not None
    inputs = sides(spark, src, first, spec)
    people = inputs["persons"].records.collect()
    assert {r["_partition"] for r in people} == {"persons/0", "persons/1", "persons/2"}
    plain = src.sources["persons"].read(spark, first.part("persons"))
    assert sorted((f"persons/{r[0]}", *r[1:]) for r in plain.collect()) == sorted(
        map(tuple, people)
    )
    assert {r["_partition"] for r in inputs["auctions"].records.collect()} == {"auctions/0"}
    second = src.plan_range(first.end, None)
    assert second is not None and second.part("persons") is None
    again = sides(spark, src, second, spec)
    assert again["persons"].records.count() == 0
    assert again["persons"].records.dtypes == inputs["persons"].records.dtypes
    assert again["auctions"].records.count() > 0


def parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def test_side_hints_come_from_each_sides_footers(spark: Any, local_workspace: Workspace) -> None:
    ws = local_workspace
    t = [datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in range(4)]

    def people(ids: list[int], times: list[datetime]) -> bytes:
        return parquet_bytes(pa.table({
            "id": pa.array(ids, pa.int64()), "name": [f"p{i}" for i in ids],
            "ts": pa.array(times, pa.timestamp("us", tz="UTC")),
        }))  # fmt: skip

    first, second = people([1, 2], [t[0], t[2]]), people([3], [t[1]])
    ws.put_files([("p1.parquet", first), ("p2.parquet", second)], "persons")
    ws.put_files([("a1.jsonl", auction(1, 1))], "auctions")
    persons_config = files_config(ws, "persons", PERSONS, format="parquet")
    sources: dict[str, Any] = {
        "persons": ws.files_source(persons_config, "persons", required=("ts",)),
        "auctions": ws.files_source(files_config(ws, "auctions", AUCTIONS), "auctions",
                                    required=("date_time",)),
    }  # fmt: skip
    src = MultiSource(sources)
    base = join_spec(ws)
    assert base.join is not None
    spec = replace(base, join=replace(base.join, left=replace(base.join.left,
                                                              source=persons_config)))  # fmt: skip
    rng = src.plan_range(src.initial_offset(), None)
    assert rng is not None
    inputs = sides(spark, src, rng, spec)
    two_seconds = 1_767_225_602_000_000  # t[2] in microseconds
    want = {("persons/0", 0): None, ("persons/0", 1): two_seconds}
    assert inputs["persons"].before_hints == want
    assert inputs["auctions"].before_hints == {}  # JSON lines: no footers
    emptied = replace(rng, parts=(("persons", None), ("auctions", rng.part("auctions"))))
    assert sides(spark, src, emptied, spec)["persons"].before_hints == {}
