"""Rules across sections of a spec: operators and their sinks, upsert keys, and locations
kept apart. Each is a small function of the sections it spans (those that are valid: a rule
skips what it cannot know) that returns what it finds; the pipeline model
(:mod:`sluice.spec.loader`) runs them as it validates the fields they report on."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sluice.spec.components.base import SinkConfig, SourceConfig, WindowConfig
from sluice.spec.exceptions import SpecProblem
from sluice.spec.model import AggregateSpec, CheckpointSpec
from sluice.storage import ACCEPTED_FORMS, normalized_uri, storage_uri_problem

__all__ = [
    "append_sinks",
    "no_keys_when_stateless",
    "not_with_process",
    "on_update_sinks",
    "paths_apart",
    "side_sink_appends",
    "sink_keys",
]


def not_with_process(key: str) -> SpecProblem:
    """``window``, ``aggregates`` or ``emit`` beside a process function."""
    fix = "remove it: the function decides what to emit (docs/keyed-state.md)"
    return SpecProblem(key, "does not apply to a pipeline with a process function", fix)


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
    source: SourceConfig | None,
    sinks: Sequence[SinkConfig],
    sides: Sequence[SinkConfig],
    checkpoint: CheckpointSpec | None,
    name: str | None,
) -> list[SpecProblem]:
    """Every location is a storage URI Sluice can open, and no two overlap where one
    writer could read or delete another's objects (docs/storage.md, "Where things go"):

    * no output equal to, inside or around the source (a later epoch would read it back);
    * no output inside or around the checkpoint storage, except a side sink (``sides``: the
      late records' and dead letters') at its own default place
      ``<storage>/<name>/late_records`` or ``.../dead_letters``;
    * no two outputs at, inside or around the same path (or the same PostgreSQL table);
    * the checkpoint storage neither inside nor around the source.
    """
    found: list[SpecProblem] = []
    outputs = [(f"sinks.{s.name}", s) for s in sinks] + [(s.name, s) for s in sides]
    located = [(f"{f}.path", p) for f, s in outputs if (p := s.storage_path()) is not None]
    read = source.storage_path() if source is not None else None
    src = _location(found, "source.path", read) if read is not None else None
    ckpt = _location(found, "checkpoint.storage", checkpoint.storage) if checkpoint else None
    seen: list[tuple[str, str]] = []
    for field, path in located:
        where = _location(found, field, path)
        if where is None:
            continue
        if src is not None and _overlap(where, src):
            what = "is inside" if _inside(where, src) else "overlaps"
            found.append(
                SpecProblem(
                    field, f"{path!r} {what} the source path", "write outputs outside source.path"
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
    if src is not None and ckpt is not None and _overlap(ckpt, src):
        found.append(
            SpecProblem(
                "checkpoint.storage",
                "is inside the source path" if _inside(ckpt, src) else "overlaps the source path",
                "move it elsewhere",
            )
        )
    return found


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
