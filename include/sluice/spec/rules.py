"""Rules across sections of a spec, each a small function that records what it finds in
the :class:`Checker`: operators and their sinks, upsert keys, and locations kept apart."""

from __future__ import annotations

from typing import Any

from sluice.spec.checker import Checker
from sluice.spec.components.base import SinkConfig, SourceConfig, WindowConfig
from sluice.spec.model import AggregateSpec, CheckpointSpec
from sluice.storage import ACCEPTED_FORMS, normalized_uri, storage_uri_problem

__all__ = [
    "append_sinks",
    "no_keys_when_stateless",
    "not_with_process",
    "on_update_sinks",
    "paths_apart",
    "side_sinks_append",
    "sink_keys",
]


def not_with_process(checker: Checker, top: dict[str, Any]) -> None:
    for key in ("window", "aggregates", "emit"):
        if key in top:
            fix = "remove it: the function decides what to emit (docs/keyed-state.md)"
            checker.add(key, "does not apply to a pipeline with a process function", fix)


def no_keys_when_stateless(checker: Checker, key_by: tuple[str, ...]) -> None:
    if key_by:
        checker.add("key_by", "has no meaning in a stateless pipeline (no window, no process "
                 "function): every accepted record is one output row",
                 "remove key_by, or add a window and aggregates (or a process function) "
                 "to group by it")  # fmt: skip


def on_update_sinks(checker: Checker, sinks: tuple[SinkConfig, ...]) -> None:
    """``emit: on_update`` rewrites windows: every sink must upsert."""
    for sink in sinks:
        if sink.mode != "upsert":
            checker.add(f"sinks.{sink.name}.mode",
                        "emit: on_update rewrites windows, so every sink must be an upsert sink",
                        "add mode: upsert to the sink (or use emit: on_close)")  # fmt: skip


def side_sinks_append(checker: Checker, *sides: SinkConfig | None) -> None:
    for side in sides:
        if side is not None and side.mode == "upsert":
            checker.add(f"{side.name}.mode",
                        "late records and dead letters are appended, never upserted",
                        "remove mode: upsert")  # fmt: skip


def append_sinks(
    checker: Checker, sinks: tuple[SinkConfig, ...], columns: list[str], whose: str
) -> None:
    """Sinks of an operator whose rows are only ever appended (a process function, a
    stateless pipeline): no upsert, partition columns among the output columns."""
    for sink in sinks:
        if sink.mode == "upsert":
            checker.add(f"sinks.{sink.name}.mode", f"{whose} output is appended",
                     "remove mode: upsert")  # fmt: skip
        for column in sink.partitioned_by():
            if column not in columns:
                where = f"sinks.{sink.name}.partition_by"
                checker.add(where, f"{column!r} is not an output column", f"use {columns}")


def sink_keys(
    checker: Checker,
    sinks: tuple[SinkConfig, ...],
    key_by: tuple[str, ...],
    window: WindowConfig | None,
    aggregates: tuple[AggregateSpec, ...],
) -> tuple[SinkConfig, ...]:
    """Upsert sinks identify a row by the pipeline's keys and its window; partition
    columns must be result columns."""
    if window is None:
        return sinks
    bounds = ("window_index",) if window.counted else ("window_start", "window_end")
    keys = (*key_by, *bounds)
    columns = {*keys, *(a.name for a in aggregates)}
    if window.counted:
        columns |= {"window_start", "window_end"}
    for sink in sinks:
        for column in sink.partitioned_by():
            if column not in columns:
                checker.add(
                    f"sinks.{sink.name}.partition_by",
                    f"{column!r} is not a result column",
                    f"use one of {sorted(columns)}",
                )
    return tuple(s.model_copy(update={"keys": keys}) if s.mode == "upsert" else s for s in sinks)


def paths_apart(
    checker: Checker,
    source: SourceConfig | None,
    sinks: tuple[SinkConfig, ...],
    late: SinkConfig | None,
    dead: SinkConfig | None,
    checkpoint: CheckpointSpec | None,
    name: str | None,
) -> None:
    """Every location is a storage URI Sluice can open, and no two overlap where one
    writer could read or delete another's objects (docs/storage.md, "Where things go"):

    * no output equal to, inside or around the source (a later epoch would read it back);
    * no output inside or around the checkpoint storage, except a side sink at its own
      default place ``<storage>/<name>/late_records`` or ``.../dead_letters``;
    * no two outputs at, inside or around the same path (or the same PostgreSQL table);
    * the checkpoint storage neither inside nor around the source.
    """
    outputs = [(f"sinks.{s.name}", s) for s in sinks]
    outputs += [(s.name, s) for s in (late, dead) if s is not None]
    located = [(f"{f}.path", p) for f, s in outputs if (p := s.storage_path()) is not None]
    read = source.storage_path() if source is not None else None
    src = location(checker, "source.path", read) if read is not None else None
    ckpt = location(checker, "checkpoint.storage", checkpoint.storage) if checkpoint else None
    seen: list[tuple[str, str]] = []
    for field, path in located:
        where = location(checker, field, path)
        if where is None:
            continue
        if src is not None and _overlap(where, src):
            what = "is inside" if _inside(where, src) else "overlaps"
            checker.add(field, f"{path!r} {what} the source path",
                     "write outputs outside source.path")  # fmt: skip
        own = f"{ckpt}/{name}/{field.removesuffix('.path')}"
        if ckpt is not None and name and _overlap(where, ckpt) and where != own:
            checker.add(field, f"{path!r} overlaps checkpoint.storage ({ckpt})",
                         "write outputs outside the checkpoint storage (or leave out "
                         "late_records / dead_letters to use their default place)")  # fmt: skip
        for other, there in seen:
            if _overlap(where, there):
                checker.add(field, f"{path!r} overlaps {other} ({there})",
                         "give every sink a path of its own")  # fmt: skip
        seen.append((field, where))
    same_tables(checker, outputs)
    if src is not None and ckpt is not None and _overlap(ckpt, src):
        checker.add("checkpoint.storage", "is inside the source path" if _inside(ckpt, src)
                 else "overlaps the source path", "move it elsewhere")  # fmt: skip


def same_tables(checker: Checker, outputs: list[tuple[str, SinkConfig]]) -> None:
    tables: dict[tuple[str, str], str] = {}
    for field, sink in outputs:
        ref = sink.table_ref()
        if ref is None:
            continue
        connection, schema, table = ref
        key = (connection.lower(), f"{schema}.{table}".lower())
        if key in tables:
            checker.add(f"{field}.table", f"'{schema}.{table}' is also written by {tables[key]}",
                     "give every sink a table of its own")  # fmt: skip
        tables.setdefault(key, field)


def location(checker: Checker, field: str, path: str) -> str | None:
    """``path`` as a normalised URI (file:///abs or s3://bucket/prefix), or None with a
    problem recorded when Sluice cannot open it."""
    problem = storage_uri_problem(path)
    if problem is not None:
        checker.add(field, f"{path!r}: {problem}", f"write one of {ACCEPTED_FORMS}")
        return None
    return normalized_uri(path)


def _inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer + "/")


def _overlap(a: str, b: str) -> bool:
    """One location holds the other (or they are the same)."""
    return _inside(a, b) or _inside(b, a)
