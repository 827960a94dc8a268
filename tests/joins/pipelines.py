"""The stream-stream join pipelines the join tests run (tests/joins/data.py's input, persons
and auctions as two files sources): their spec, their committed output as reference rows, and
the check that a run committed what the reference says (pairs, late records per side, dead
letters)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from sluice.spec import PipelineSpec, parse_spec

from tests.fixtures.pipelines import Workspace, committed_rows
from tests.joins.data import (
    AUCTION_SCHEMA,
    BOUND_S,
    PERSON_SCHEMA,
    SECOND_US,
    connect,
    make_input,
    reference,
)

INPUT = make_input()
CON = connect(INPUT)

JOINS: dict[str, dict[str, Any]] = {
    "window": {"type": "window", "window": {"type": "tumbling", "size": "2s"}},
    "hopping": {"type": "window", "window": {"type": "hopping", "size": "2s", "slide": "1s"}},
    "interval": {"type": "interval", "interval": {"lower": "0s", "upper": "3s"}},
    "regular": {"type": "regular", "ttl": "5s"},
}


def join_spec_dict(ws: Workspace, kind: str, how: str = "inner", **extra: Any) -> dict[str, Any]:
    output = {"person": "persons.id", "auction": "auctions.id"}
    if JOINS[kind]["type"] == "window":
        output["window_start"] = "window_start"
    return {
        "name": f"join_{kind}_{how}",
        "sources": {
            "persons": {
                "type": "files",
                "path": ws.uri("persons"),
                "format": "jsonl",
                "schema": dict(PERSON_SCHEMA),
            },
            "auctions": {
                "type": "files",
                "path": ws.uri("auctions"),
                "format": "jsonl",
                "schema": dict(AUCTION_SCHEMA),
            },
        },
        "event_time": {
            "persons": {"column": "date_time", "max_out_of_orderness": f"{BOUND_S}s"},
            "auctions": {"column": "date_time", "max_out_of_orderness": f"{BOUND_S}s"},
        },
        "join": {
            "left": "persons",
            "right": "auctions",
            "on": {"id": "seller"},
            "how": how,
            **JOINS[kind],
        },
        "output": output,
        "sinks": [{"name": "out", "type": "files", "path": ws.uri("out"), "format": "parquet"}],
        "late_records": {"type": "files", "path": ws.uri("late"), "format": "jsonl"},
        "dead_letters": {"type": "files", "path": ws.uri("dead"), "format": "jsonl"},
        "checkpoint": {"storage": ws.uri("ckpt")},
        **extra,
    }


def join_spec(ws: Workspace, kind: str, how: str = "inner", **extra: Any) -> PipelineSpec:
    ws.put_files(INPUT.persons, "persons")
    ws.put_files(INPUT.auctions, "auctions")
    return parse_spec(join_spec_dict(ws, kind, how, **extra))


def output_rows(spec: PipelineSpec) -> list[tuple[Any, ...]]:
    rows = []
    for r in committed_rows(spec, "out"):
        ws = r.get("window_start")
        micros = None if ws is None else int(ws.timestamp()) * SECOND_US + ws.microsecond
        rows.append((r["person"], r["auction"], micros))
    return sorted(rows, key=lambda r: tuple((x is None, x) for x in r))


def capped_join_dict(ws: Workspace, name: str, files_per_epoch: int) -> dict[str, Any]:
    """The left interval join over :data:`INPUT` (put in ``ws``) as ``name``, reading
    ``files_per_epoch`` files of each side an epoch."""
    ws.put_files(INPUT.persons, "persons")
    ws.put_files(INPUT.auctions, "auctions")
    body = join_spec_dict(ws, "interval", "left")
    body["name"] = name
    for source in body["sources"].values():
        source["max_files_per_epoch"] = files_per_epoch
    return body


def assert_committed_reference(spec: PipelineSpec, kind: str, how: str) -> list[tuple[Any, ...]]:
    """The run of ``spec`` committed the reference's pairs, the 4 late records of each side
    and the 2 dead letters of :data:`INPUT`; its output rows."""
    rows = output_rows(spec)
    assert Counter(rows) == Counter(reference(CON, kind, how=how))
    late = committed_rows(spec, "late_records")
    assert Counter(r["side"] for r in late) == {"persons": 4, "auctions": 4}
    assert len(committed_rows(spec, "dead_letters")) == 2
    return rows
