"""Rules across sections of a spec: operators and their sinks, upsert keys, and locations
kept apart. Each is a small function of the sections it spans (those that are valid: a rule
skips what it cannot know) that returns what it finds; the pipeline model
(:mod:`sluice.spec.loader`) runs them as it validates the fields they report on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sluice.spec.components.base import SinkConfig, SourceConfig, WindowConfig
from sluice.spec.exceptions import SpecProblem
from sluice.spec.join_sections import not_a_source
from sluice.spec.model import NUMERIC_TYPES, AggregateSpec, CheckpointSpec
from sluice.storage import ACCEPTED_FORMS, normalized_uri, storage_uri_problem

__all__ = [
    "append_sinks",
    "join_required",
    "join_sides",
    "no_keys_when_stateless",
    "not_in_join",
    "not_with_process",
    "on_update_sinks",
    "paths_apart",
    "side_sink_appends",
    "sink_keys",
    "sources_without_join",
]

_AFTER_JOIN = "windowed aggregation of a join's output is a second pipeline reading it"
# why a section of a single-source pipeline is refused in a join pipeline, by section
_NOT_IN_JOIN = {
    "source": "name the join's two sources under sources: (and remove source:)",
    "key_by": "remove it: the join's key is join.on",
    "process": "remove it: a join pipeline's result columns are output:; a process function "
    "of a join's output is a second pipeline reading it",
    "lookup": "remove it: a join pipeline's result columns are output:; enrich a join's output "
    "in a second pipeline reading it",
}


def not_with_process(key: str) -> SpecProblem:
    """``window``, ``aggregates`` or ``emit`` beside a process function."""
    fix = "remove it: the function decides what to emit (docs/keyed-state.md)"
    return SpecProblem(key, "does not apply to a pipeline with a process function", fix)


def not_in_join(key: str) -> SpecProblem:
    """A section of single-source pipelines (``source``, ``window``, ``select``...) in a join
    pipeline."""
    fix = _NOT_IN_JOIN.get(
        key, f"remove it: a join pipeline's result columns are output:; {_AFTER_JOIN}"
    )
    return SpecProblem(key, "does not apply to a join pipeline", fix)


def sources_without_join() -> SpecProblem:
    """``sources:`` beside ``source:``, without ``join:``."""
    return SpecProblem(
        "sources",
        "is written beside source:, without a join:",
        "a pipeline of one source reads source: alone; a join names its two sources under "
        "sources: and joins them with join: (docs/joins.md)",
    )


def join_required(names: Iterable[str]) -> SpecProblem:
    """``sources:`` without ``join:``."""
    left, right = ([*names, "persons", "auctions"])[:2]
    return SpecProblem(
        "join",
        "is required: sources: names the two sides of a join",
        f"e.g. {{type: window, left: {left}, right: {right}, on: {{id: seller}}, "
        "window: {type: tumbling, size: 10s}} (docs/joins.md); or read one source with source:",
    )


def join_sides(join: Any, sources: Mapping[str, Mapping[str, str]]) -> list[SpecProblem]:
    """``join.left`` and ``join.right``: two different sources; ``join.on``: each a left
    column and a right one, of comparable types (the same, or both numeric). ``join`` is
    the section as written, ``sources`` each source's columns by name (empty: unknown)."""
    if not isinstance(join, dict) or not sources:
        return []
    found = []
    left, right = join.get("left"), join.get("right")
    for field, name in (("left", left), ("right", right)):
        if isinstance(name, str) and name.strip() and name not in sources:
            found.append(not_a_source(f"join.{field}", name, sources))
    if isinstance(left, str) and left == right:
        other = [n for n in sources if n != left]
        fix = f"join the other source: right: {other[0]}" if other else "join two sources"
        found.append(SpecProblem("join.right", "is join.left's source too", fix))
    on = join.get("on")
    sides = (left, right) if isinstance(left, str) and isinstance(right, str) else None
    if sides and left != right and set(sides) <= set(sources) and isinstance(on, dict):
        for column, other_column in on.items():
            found += _on_pair(str(column), other_column, sides, sources)
    return found


def _on_pair(
    column: str, other: Any, sides: tuple[str, str], sources: Mapping[str, Mapping[str, str]]
) -> list[SpecProblem]:
    """``join.on.<column>: <other>``: a column of the left source and one of the right."""
    where = f"join.on.{column}"
    found = []
    types = []
    for name, side in ((column, sides[0]), (other, sides[1])):
        schema = sources[side]
        if isinstance(name, str) and schema and name not in schema:
            found.append(
                SpecProblem(
                    where,
                    f"{name!r} is not a column of source {side}",
                    f"use one of {list(schema)}",
                )
            )
        types.append(schema.get(name) if isinstance(name, str) else None)
    kinds = (types[0], types[1])
    if None not in kinds and kinds[0] != kinds[1] and not set(kinds) <= set(NUMERIC_TYPES):
        found.append(
            SpecProblem(
                where,
                f"compares {sides[0]}.{column} ({kinds[0]}) with {sides[1]}.{other} ({kinds[1]})",
                "join columns of the same type, or both numeric",
            )
        )
    return found


def no_keys_when_stateless(key_by: tuple[str, ...]) -> list[SpecProblem]:
    if not key_by:
        return []
    return [
        SpecProblem(
            "key_by",
            "has no meaning in a stateless pipeline (no window, no process "
            "function): every accepted record is one output row",
            "remove key_by, or add a window and aggregates (or a process function) to group by it",
        )
    ]


def on_update_sinks(sinks: Iterable[SinkConfig]) -> list[SpecProblem]:
    """``emit: on_update`` rewrites windows: every sink must upsert."""
    return [
        SpecProblem(
            f"sinks.{sink.name}.mode",
            "emit: on_update rewrites windows, so every sink must be an upsert sink",
            "add mode: upsert to the sink (or use emit: on_close)",
        )
        for sink in sinks
        if sink.mode != "upsert"
    ]


def side_sink_appends(side: SinkConfig) -> list[SpecProblem]:
    """Late records and dead letters are appended."""
    if side.mode != "upsert":
        return []
    return [
        SpecProblem(
            f"{side.name}.mode",
            "late records and dead letters are appended, never upserted",
            "remove mode: upsert",
        )
    ]


def append_sinks(sinks: Iterable[SinkConfig], columns: list[str], whose: str) -> list[SpecProblem]:
    """Sinks of an operator whose rows are only ever appended (a process function, a
    stateless pipeline): no upsert, partition columns among the output columns."""
    found = []
    for sink in sinks:
        if sink.mode == "upsert":
            found.append(
                SpecProblem(
                    f"sinks.{sink.name}.mode", f"{whose} output is appended", "remove mode: upsert"
                )
            )
        for column in sink.partitioned_by():
            if column not in columns:
                found.append(
                    SpecProblem(
                        f"sinks.{sink.name}.partition_by",
                        f"{column!r} is not an output column",
                        f"use {columns}",
                    )
                )
    return found


def sink_keys(
    sinks: tuple[SinkConfig, ...],
    key_by: tuple[str, ...],
    window: WindowConfig,
    aggregates: tuple[AggregateSpec, ...],
) -> tuple[tuple[SinkConfig, ...], list[SpecProblem]]:
    """Upsert sinks identify a row by the pipeline's keys and its window (``sinks`` with
    their keys filled in); partition columns must be result columns."""
    bounds = ("window_index",) if window.counted else ("window_start", "window_end")
    keys = (*key_by, *bounds)
    columns = {*keys, *(a.name for a in aggregates)}
    if window.counted:
        columns |= {"window_start", "window_end"}
    found = []
    for sink in sinks:
        for column in sink.partitioned_by():
            if column not in columns:
                found.append(
                    SpecProblem(
                        f"sinks.{sink.name}.partition_by",
                        f"{column!r} is not a result column",
                        f"use one of {sorted(columns)}",
                    )
                )
    keyed = tuple(s.model_copy(update={"keys": keys}) if s.mode == "upsert" else s for s in sinks)
    return keyed, found


def paths_apart(
    sources: Mapping[str, SourceConfig],
    sinks: Sequence[SinkConfig],
    sides: Sequence[SinkConfig],
    checkpoint: CheckpointSpec | None,
    name: str | None,
) -> list[SpecProblem]:
    """Every location is a storage URI Sluice can open, and no two overlap where one
    writer could read or delete another's objects (docs/storage.md, "Where things go"):

    * no output equal to, inside or around a source (a later epoch would read it back);
    * no output inside or around the checkpoint storage, except a side sink (``sides``: the
      late records' and dead letters') at its own default place
      ``<storage>/<name>/late_records`` or ``.../dead_letters``;
    * no two outputs at, inside or around the same path (or the same PostgreSQL table);
    * the checkpoint storage neither inside nor around a source.

    ``sources``: the sources read, by their field (``source``, or ``sources.<name>`` of a
    join).
    """
    found: list[SpecProblem] = []
    outputs = [(f"sinks.{s.name}", s) for s in sinks] + [(s.name, s) for s in sides]
    located = [(f"{f}.path", p) for f, s in outputs if (p := s.storage_path()) is not None]
    read = [(f, p) for f, s in sources.items() if (p := s.storage_path()) is not None]
    srcs = [(f, w) for f, p in read if (w := _location(found, f"{f}.path", p)) is not None]
    ckpt = _location(found, "checkpoint.storage", checkpoint.storage) if checkpoint else None
    seen: list[tuple[str, str]] = []
    for field, path in located:
        where = _location(found, field, path)
        if where is None:
            continue
        for source, src in srcs:
            if _overlap(where, src):
                what = "is inside" if _inside(where, src) else "overlaps"
                found.append(
                    SpecProblem(
                        field,
                        f"{path!r} {what} {_source_path(source)}",
                        f"write outputs outside {source}.path",
                    )
                )
        own = f"{ckpt}/{name}/{field.removesuffix('.path')}"
        if ckpt is not None and name and _overlap(where, ckpt) and where != own:
            found.append(
                SpecProblem(
                    field,
                    f"{path!r} overlaps checkpoint.storage ({ckpt})",
                    "write outputs outside the checkpoint storage (or leave out "
                    "late_records / dead_letters to use their default place)",
                )
            )
        for other, there in seen:
            if _overlap(where, there):
                found.append(
                    SpecProblem(
                        field,
                        f"{path!r} overlaps {other} ({there})",
                        "give every sink a path of its own",
                    )
                )
        seen.append((field, where))
    found += _same_tables(outputs)
    for source, src in srcs:
        if ckpt is not None and _overlap(ckpt, src):
            what = "is inside" if _inside(ckpt, src) else "overlaps"
            found.append(
                SpecProblem(
                    "checkpoint.storage", f"{what} {_source_path(source)}", "move it elsewhere"
                )
            )
    return found


def _source_path(field: str) -> str:
    """How a message names the path of the source at ``field``."""
    return "the source path" if field == "source" else f"the path of {field}"


def _same_tables(outputs: list[tuple[str, SinkConfig]]) -> list[SpecProblem]:
    found = []
    tables: dict[tuple[str, str], str] = {}
    for field, sink in outputs:
        ref = sink.table_ref()
        if ref is None:
            continue
        connection, schema, table = ref
        key = (connection.lower(), f"{schema}.{table}".lower())
        if key in tables:
            found.append(
                SpecProblem(
                    f"{field}.table",
                    f"'{schema}.{table}' is also written by {tables[key]}",
                    "give every sink a table of its own",
                )
            )
        tables.setdefault(key, field)
    return found


def _location(found: list[SpecProblem], field: str, path: str) -> str | None:
    """``path`` as a normalised URI (file:///abs or s3://bucket/prefix), or None with a
    problem appended to ``found`` when Sluice cannot open it."""
    problem = storage_uri_problem(path)
    if problem is not None:
        found.append(SpecProblem(field, f"{path!r}: {problem}", f"write one of {ACCEPTED_FORMS}"))
        return None
    return normalized_uri(path)


def _inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer + "/")


def _overlap(a: str, b: str) -> bool:
    """One location holds the other (or they are the same)."""
    return _inside(a, b) or _inside(b, a)
