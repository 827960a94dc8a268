"""Stream–stream join specs (#36 item 2, docs/joins.md "Stream–stream joins: the design"): what
a valid ``sources:`` + ``join:`` spec parses to, and every refusal with the field it names."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sluice.spec import SpecError, load_spec, parse_spec
from sluice.spec.model import EventTimeSpec

AUCTIONS = {
    "id": "long",
    "seller": "long",
    "item_name": "string",
    "category": "int",
    "date_time": "timestamp",
}


def body(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    """Nexmark q8 as a window join: persons (nexmark) and auctions (files), on id = seller."""
    data: dict[str, Any] = {
        "name": "q8",
        "sources": {
            "persons": {"type": "nexmark", "events": "person", "max_events": 1000},
            "auctions": {
                "type": "files",
                "path": str(tmp_path / "auctions"),
                "format": "jsonl",
                "schema": dict(AUCTIONS),
            },
        },
        "event_time": {
            "persons": {"column": "date_time", "max_out_of_orderness": "5s"},
            "auctions": {"column": "date_time", "max_out_of_orderness": "2s", "idle_timeout": "1m"},
        },
        "filter": {"persons": "state IN ('OR', 'ID', 'CA')"},
        "join": {
            "type": "window",
            "left": "persons",
            "right": "auctions",
            "on": {"id": "seller"},
            "window": {"type": "tumbling", "size": "10s"},
        },
        "output": {"person": "persons.id", "name": "persons.name", "auction": "auctions.id"},
        "sinks": [{"name": "out", "type": "files", "path": str(tmp_path / "out")}],
        "checkpoint": {"storage": str(tmp_path / "ckpt")},
    }
    data.update(overrides)
    return data


def join(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    """The spec with ``join:`` settings replaced (a value None: left out)."""
    section = {**body(tmp_path)["join"], **overrides}
    return body(tmp_path, join={k: v for k, v in section.items() if v is not None})


def problems(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return [(p.field, p.problem, p.fix) for p in info.value.problems]


def fields(data: dict[str, Any]) -> list[str]:
    return [field for field, _, _ in problems(data)]


# -- what a valid spec parses to ----------------------------------------------------------------


def test_a_window_join_has_both_sides_their_event_times_and_filters(tmp_path: Path) -> None:
    spec = parse_spec(body(tmp_path))
    join = spec.join
    assert join is not None and spec.operator == "join"
    assert (join.type, join.how, join.on) == ("window", "inner", (("id", "seller"),))
    assert (join.left.name, join.right.name) == ("persons", "auctions")
    assert (join.left.source.type, join.right.source.type) == ("nexmark", "files")
    assert join.left.event_time == EventTimeSpec("date_time", 5_000_000)
    assert join.right.event_time == EventTimeSpec("date_time", 2_000_000, 0, 60_000_000)
    assert (join.left.filter, join.right.filter) == ("state IN ('OR', 'ID', 'CA')", None)
    assert join.window is not None and join.window.shape() == {
        "type": "tumbling",
        "size_us": 10_000_000,
    }
    assert (join.lower_us, join.upper_us, join.ttl_us) == (None, None, None)
    assert join.output == (
        ("person", "persons.id"),
        ("name", "persons.name"),
        ("auction", "auctions.id"),
    )


def test_the_pipeline_reads_as_its_left_side_and_writes_the_join_output(tmp_path: Path) -> None:
    spec = parse_spec(body(tmp_path))
    assert spec.join is not None
    assert (spec.source, spec.event_time) == (spec.join.left.source, spec.join.left.event_time)
    assert (spec.filter, spec.window, spec.process, spec.aggregates, spec.key_by) == (
        None,
        None,
        None,
        (),
        (),
    )
    assert (spec.select, spec.lookup, spec.output) == ((), (), ())
    assert not spec.stateless
    assert spec.output_columns() == ("person", "name", "auction")
    assert spec.state_shape()["operator"] == "join"


def test_an_interval_join_takes_signed_bounds(tmp_path: Path) -> None:
    data = join(
        tmp_path,
        type="interval",
        window=None,
        how="left",
        interval={"lower": "-5s", "upper": "10s"},
    )
    spec = parse_spec(data)
    assert spec.join is not None
    assert (spec.join.type, spec.join.how) == ("interval", "left")
    assert (spec.join.lower_us, spec.join.upper_us) == (-5_000_000, 10_000_000)
    assert (spec.join.window, spec.join.ttl_us) == (None, None)


def test_a_regular_join_takes_a_ttl(tmp_path: Path) -> None:
    spec = parse_spec(join(tmp_path, type="regular", window=None, ttl="1h"))
    assert spec.join is not None
    assert (spec.join.type, spec.join.ttl_us) == ("regular", 3_600_000_000)
    assert (spec.join.window, spec.join.lower_us, spec.join.upper_us) == (None, None, None)


def test_a_hopping_window_numeric_keys_of_two_types_and_window_bounds_in_output(
    tmp_path: Path,
) -> None:
    hopping = {"type": "hopping", "size": "10s", "slide": "5s"}
    data = join(tmp_path, on={"id": "category"}, window=hopping)
    data["output"] = {
        "start": "window_start",
        "end": "date_format(window_end, 'HH:mm')",
        "n": "persons.id + auctions.category",
        "note": "concat(persons.name, ' x.y', 1.5)",
    }
    spec = parse_spec(data)
    assert spec.join is not None
    assert spec.join.on == (("id", "category"),)  # long and int: both numeric
    assert spec.output_columns() == ("start", "end", "n", "note")


def test_the_yaml_form_loads_from_a_file_on_included(tmp_path: Path) -> None:
    """YAML 1.1 reads a plain ``on`` as true: a spec's keys are read as text (a lookup's
    ``on:`` too), its values as before."""
    path = tmp_path / "q8.yaml"
    path.write_text(
        f"""
name: q8
sources:
  persons: {{type: nexmark, events: person, max_events: 1000}}
  auctions:
    type: files
    path: {tmp_path / "auctions"}
    format: csv
    header: yes
    schema: {{id: long, seller: long, date_time: timestamp}}
event_time:
  persons: {{column: date_time, max_out_of_orderness: 5s}}
  auctions: {{column: date_time, max_out_of_orderness: 5s}}
join:
  type: interval
  left: persons
  right: auctions
  on: {{id: seller}}
  interval: {{lower: -5s, upper: 10s}}
output: {{person: persons.id, auction: auctions.id}}
sinks: [{{name: out, type: files, path: {tmp_path / "out"}, partition_by: [person]}}]
checkpoint: {{storage: {tmp_path / "ckpt"}}}
""",
        encoding="utf-8",
    )
    spec = load_spec(path)
    assert spec.join is not None and spec.join.on == (("id", "seller"),)
    assert spec.join.right.source.header is True  # type: ignore[attr-defined]


def test_a_lookup_on_loads_from_a_file_too(tmp_path: Path) -> None:
    path = tmp_path / "enrich.yaml"
    path.write_text(
        f"""
name: enrich
source:
  type: files
  path: {tmp_path / "in"}
  format: jsonl
  schema: {{user: string, ts: timestamp}}
event_time: {{column: ts}}
lookup:
  - name: users
    table: {{type: files, path: {tmp_path / "users"}, format: parquet}}
    on: {{user: user_id}}
    columns: {{country: string}}
sinks: [{{name: out, type: files, path: {tmp_path / "out"}}}]
checkpoint: {{storage: {tmp_path / "ckpt"}}}
""",
        encoding="utf-8",
    )
    assert load_spec(path).lookup[0].on == (("user", "user_id"),)


# -- refusals: each names its field -------------------------------------------------------------


def _set(key: str, value: Any) -> Callable[[Path], dict[str, Any]]:
    return lambda tmp_path: body(tmp_path, **{key: value})


def _without(*keys: str) -> Callable[[Path], dict[str, Any]]:
    return lambda tmp_path: {k: v for k, v in body(tmp_path).items() if k not in keys}


def _join(**overrides: Any) -> Callable[[Path], dict[str, Any]]:
    return lambda tmp_path: join(tmp_path, **overrides)


def _section(key: str, **entries: Any) -> Callable[[Path], dict[str, Any]]:
    """``key``'s mapping with ``entries`` replaced (None: left out)."""

    def make(tmp_path: Path) -> dict[str, Any]:
        section = {**body(tmp_path)[key], **entries}
        return body(tmp_path, **{key: {k: v for k, v in section.items() if v is not None}})

    return make


def _auctions(**settings: Any) -> Callable[[Path], dict[str, Any]]:
    def make(tmp_path: Path) -> dict[str, Any]:
        data = body(tmp_path)
        data["sources"]["auctions"].update(settings)
        return data

    return make


def _sink(**settings: Any) -> Callable[[Path], dict[str, Any]]:
    def make(tmp_path: Path) -> dict[str, Any]:
        data = body(tmp_path)
        data["sinks"][0].update(settings)
        return data

    return make


BID = {"type": "nexmark", "events": "bid"}
ONE_EVENT_TIME = {"column": "date_time", "max_out_of_orderness": "5s"}

REFUSED = {
    # sources: and source:
    "source and sources": (_set("source", BID), "source", "does not apply to a join pipeline"),
    "join without sources": (_without("sources"), "sources", "is required"),
    "sources without join": (_without("join"), "join", "is required"),
    "three sources": (_section("sources", bids=BID), "sources", "a join reads two"),
    "one source": (_section("sources", auctions=None), "sources", "a join reads two"),
    "a source name": (_section("sources", Bids=BID), "sources.Bids", "is not a source name"),
    "a source as source: is": (_auctions(format="xml"), "sources.auctions.format", "not valid"),
    # the single-source pipelines' sections
    "window": (_set("window", {"type": "tumbling", "size": "1m"}), "window", "join pipeline"),
    "aggregates": (_set("aggregates", {"n": "count(*)"}), "aggregates", "join pipeline"),
    "emit": (_set("emit", "on_update"), "emit", "join pipeline"),
    "process": (_set("process", {"function": "m:f"}), "process", "join pipeline"),
    "key_by": (_set("key_by", ["id"]), "key_by", "join pipeline"),
    "select": (_set("select", {"x": "1"}), "select", "join pipeline"),
    "lookup": (_set("lookup", []), "lookup", "join pipeline"),
    # event_time:
    "one event time": (_set("event_time", ONE_EVENT_TIME), "event_time", "one per source"),
    "a side's event time missing": (
        _section("event_time", auctions=None),
        "event_time.auctions",
        "is required",
    ),
    "an event time of no source": (
        _section("event_time", people=ONE_EVENT_TIME),
        "event_time.people",
        "is not a source",
    ),
    "a side's column not a timestamp": (
        _section("event_time", persons={"column": "name"}),
        "event_time.persons.column",
        "is not a timestamp column",
    ),
    "allowed lateness": (
        _section("event_time", auctions={**ONE_EVENT_TIME, "allowed_lateness": "1m"}),
        "event_time.auctions.allowed_lateness",
        "not supported by joins yet",
    ),
    # filter:
    "one filter": (_set("filter", "amount > 0"), "filter", "maps sources to predicates"),
    "a filter of no source": (_section("filter", people="x > 0"), "filter.people", "not a source"),
    "an empty filter": (_section("filter", persons=" "), "filter.persons", "predicate"),
    # join:
    "no join type": (_join(type=None), "join.type", "is required"),
    "a join type": (_join(type="outer"), "join.type", "is not valid"),
    "a join how": (_join(how="full"), "join.how", "is not valid"),
    "an unknown join field": (_join(windw={}), "join.windw", "unknown field"),
    "left not a source": (_join(left="people"), "join.left", "is not a source"),
    "left missing": (_join(left=None), "join.left", "is required"),
    "right is left": (_join(right="persons"), "join.right", "join.left's source too"),
    "on missing": (_join(on=None), "join.on", "is required"),
    "on a left column": (_join(on={"idd": "seller"}), "join.on.idd", "of source persons"),
    "on a right column": (_join(on={"id": "sellr"}), "join.on.id", "of source auctions"),
    "on types": (
        _join(on={"name": "seller"}),
        "join.on.name",
        "compares persons.name (string) with auctions.seller (long)",
    ),
    "window missing": (_join(window=None), "join.window", "is required for a window join"),
    "a session window": (
        _join(window={"type": "session", "gap": "1s"}),
        "join.window.type",
        "session windows do not join",
    ),
    "a window's size": (
        _join(window={"type": "tumbling", "size": "0s"}),
        "join.window.size",
        "greater than zero",
    ),
    "window in an interval join": (
        _join(type="interval", interval={"lower": "0s", "upper": "1s"}),
        "join.window",
        "does not apply to an interval join",
    ),
    "interval missing": (_join(type="interval", window=None), "join.interval", "is required"),
    "interval upside down": (
        _join(type="interval", window=None, interval={"lower": "5s", "upper": "-5s"}),
        "join.interval.lower",
        "is after join.interval.upper",
    ),
    "interval bound": (
        _join(type="interval", window=None, interval={"lower": "-5", "upper": "x"}),
        "join.interval.upper",
        "is not a duration",
    ),
    "ttl missing": (_join(type="regular", window=None), "join.ttl", "is required for a regular"),
    "ttl zero": (_join(type="regular", window=None, ttl="0s"), "join.ttl", "greater than zero"),
    "ttl in a window join": (_join(ttl="1h"), "join.ttl", "does not apply to a window join"),
    # output:
    "output missing": (_without("output"), "output", "is required in a join pipeline"),
    "output empty": (_set("output", {}), "output", "must map result columns"),
    "output a list": (_set("output", ["id"]), "output", "must map result columns"),
    "output of no source": (
        _section("output", person="people.id"),
        "output.person",
        "unknown source people",
    ),
    "output of no column": (
        _section("output", person="upper(persons.nam)"),
        "output.person",
        "'nam' is not a column of source persons",
    ),
    "output window bound": (
        lambda tmp_path: {
            **join(tmp_path, type="regular", window=None, ttl="1h"),
            "output": {"start": "window_start"},
        },
        "output.start",
        "a column of window joins only",
    ),
    "output name": (_section("output", **{"2x": "persons.id"}), "output.2x", "column name"),
    # sinks: the join's output is appended
    "an upsert sink": (_sink(mode="upsert"), "sinks.out.mode", "a join's output is appended"),
    "a partition column": (
        _sink(partition_by=["seller"]),
        "sinks.out.partition_by",
        "'seller' is not an output column",
    ),
    "a sink in a source": (
        lambda tmp_path: body(
            tmp_path,
            sinks=[{"name": "out", "type": "files", "path": str(tmp_path / "auctions" / "out")}],
        ),
        "sinks.out.path",
        "is inside the path of sources.auctions",
    ),
}


@pytest.mark.parametrize(("make", "field", "says"), REFUSED.values(), ids=REFUSED.keys())
def test_refused_naming_the_field(
    tmp_path: Path, make: Callable[[Path], dict[str, Any]], field: str, says: str
) -> None:
    found = problems(make(tmp_path))
    assert field in [f for f, _, _ in found], found
    problem, fix = next((p, f) for where, p, f in found if where == field)
    assert says in problem
    assert fix  # every refusal says what to do


def test_sources_without_a_join_beside_source_name_sources(tmp_path: Path) -> None:
    data = {k: v for k, v in body(tmp_path).items() if k != "join"}
    data.update(source=BID, event_time=ONE_EVENT_TIME, filter=None, output=None)
    assert fields(data) == ["sources"]


def test_the_fix_of_a_join_pipeline_section_points_at_output_or_a_second_pipeline(
    tmp_path: Path,
) -> None:
    ((_, _, fix),) = problems(body(tmp_path, window={"type": "tumbling", "size": "1m"}))
    assert "output:" in fix and "second pipeline" in fix


def test_expressions_are_read_past_strings_and_comments_and_names_case_insensitively(
    tmp_path: Path,
) -> None:
    output = {
        "a": "concat('people.id', persons.NAME) -- people.id",
        "b": "Auctions.Seller",
        "c": "/* x.y */ persons.id",
    }
    spec = parse_spec(body(tmp_path, output=output))
    assert spec.output_columns() == ("a", "b", "c")


def test_a_source_that_is_not_valid_keeps_its_name_for_the_other_checks(tmp_path: Path) -> None:
    data = _auctions(format="xml")(tmp_path)
    data["join"]["on"] = {"idd": "seller"}
    data["output"]["auction"] = "auction.id"  # the auctions' columns are unknown: not checked
    assert fields(data) == ["sources.auctions.format", "join.on.idd"]


def test_every_problem_of_a_spec_is_reported_at_once(tmp_path: Path) -> None:
    data = body(
        tmp_path,
        source=BID,
        key_by=["id"],
        event_time={"persons": {"column": "name", "allowed_lateness": "1s"}},
        filter={"people": "x > 0"},
        join={
            "type": "interval",
            "left": "persons",
            "right": "persons",
            "on": {"id": "id"},
            "how": "outer",
            "window": {"type": "tumbling", "size": "1s"},
            "ttl": "1h",
        },
        output={"person": "people.id", "start": "window_start"},
        sinks=[{"name": "out", "type": "files", "path": str(tmp_path / "out"), "mode": "upsert"}],
    )
    assert fields(data) == [
        "source",
        "event_time.persons.allowed_lateness",
        "event_time.persons.column",
        "event_time.auctions",
        "filter.people",
        "key_by",
        "join.how",
        "join.window",
        "join.interval",
        "join.ttl",
        "join.right",
        "output.person",
        "output.start",
        "sinks.out.mode",
    ]
