"""One epoch of keyed windows — tumbling, hopping, session or count — as Spark DataFrames.

1. derive the ``select:`` columns and classify every record: dead letter (unparseable, or
   a ``select:`` / ``filter:`` expression raised on it), filtered (``filter:`` is not true),
   late (every window it belongs to closed at its position), or accepted;
2. assign accepted records to windows and fold them into per-(key, window) partial
   aggregates; merge them with the window state carried from the previous checkpoint
   (sessions: merge every overlapping session of a key into one);
3. mark the windows that closed at the new global watermark (count windows: that are full)
   and the windows this epoch changed; emit closed (``on_close``) or changed (``on_update``)
   windows; the rest is the new state.

Everything is built-in Spark expressions, window functions and joins — no Python UDFs. The
exact rules are in docs/windows-and-watermarks.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from sluice.windows.aggregates import (
    finalize_columns,
    merge_columns,
    partial_columns,
    partial_names,
)
from sluice.windows.records import (
    ACCEPTED,
    LATE,
    POSITION,
    EpochCounts,
    InvalidExpression,
    classify_epoch,
    dead_rows,
    epoch_counts,
    null_safe_join,
    tally,
    with_records,
)
from sluice.windows.watermarks import WatermarkState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sluice.operator import EpochOutput
    from sluice.spec.model import PipelineSpec

__all__ = [
    "EpochCounts",
    "EpochFrames",
    "InvalidExpression",
    "compute_epoch",
    "emitted_rows",
    "open_state",
    "state_columns",
    "window_keys",
    "window_output",
]

COUNTER = -1  # count windows: the state row holding how many records a key has had


@dataclass(frozen=True)
class EpochFrames:
    """What an epoch produces: lazy frames (cached where several outputs read them), counted
    by :func:`window_output` in one action."""

    classified: DataFrame  # the epoch's records with their _class
    missed: DataFrame | None  # hopping windows: one row per (late record, window it missed)
    watermark: WatermarkState
    watermark_us: int | None  # the global watermark after the epoch (idle rule applied)
    dead: DataFrame
    late: DataFrame
    merged: DataFrame  # every touched or carried window: partials, _closed, _new
    deletes: DataFrame | None  # sessions this epoch replaced (keys, _ws, _we)
    counters: DataFrame | None  # count windows: per-key record counts (state rows)
    types: dict[str, str]
    cached: tuple[DataFrame, ...]
    next_state: DataFrame | None = None  # capped sessions: fragments and stubs, not windows

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()


def window_keys(spec: PipelineSpec) -> list[str]:
    """The columns that identify one window of one key."""
    if spec.windowing.type == "count":
        return [*spec.key_by, "_wi"]
    return [*spec.key_by, "_ws", "_we"]


def state_columns(spec: PipelineSpec) -> list[str]:
    """The columns of a state snapshot row, in order."""
    extra = ["_ws", "_we", "_cnt"] if spec.windowing.type == "count" else []
    if spec.windowing.capped:
        extra = ["_cell", "_stub"]
    return [*window_keys(spec), *extra, *partial_names(spec)]


def _partial_keys(spec: PipelineSpec) -> list[str]:
    return [*window_keys(spec), "_cell"] if spec.windowing.capped else window_keys(spec)


def compute_epoch(
    spark: SparkSession,
    records: DataFrame,
    spec: PipelineSpec,
    carried: WatermarkState,
    state: DataFrame | None,
    *,
    epoch: int,
    source_uri: str,
    waiting: tuple[str, ...] = (),
) -> EpochFrames:
    """Classify, assign, aggregate and merge one epoch (see the module docstring).

    ``waiting``: the partitions the source still has unread input for after this epoch."""
    prepared = classify_epoch(
        spark,
        records,
        spec,
        carried,
        epoch=epoch,
        waiting=waiting,
        lateness=_lateness(spec),
        positions=spec.windowing.time_based,
        columns=operator_columns(spec),
        first_close=_first_close(spec),
    )
    classified, types, watermark, after_us = (
        prepared.classified,
        prepared.types,
        prepared.watermark,
        prepared.after_us,
    )
    cached = list(prepared.cached)

    counters = None
    if spec.windowing.type == "count":
        partials, counters = _count_partials(classified, spec, types, state)
        missed = classified.where(F.lit(False))
        late = _late_rows(missed, prepared.records, spec, epoch)
    else:
        assigned = _assign(classified, spec)
        accepted = assigned.where((F.col("_class") == ACCEPTED) & ~F.col("_missed"))
        partials = accepted.groupBy(*_partial_keys(spec)).agg(*partial_columns(spec, types))
        # Only a record with a position watermark can miss a window (records.chunk_bounds):
        # the missed windows are assigned again from those few, not kept from all of them.
        exposed = classified.where(F.col("_wm").isNotNull())
        missed = _assign(exposed, spec).where(F.col("_missed"))
        late = _late_rows(missed, prepared.records, spec, epoch)
    partials = partials.withColumn("_new", F.lit(True))

    windows = _windows_of_state(state, spec)
    next_state = None
    if spec.windowing.capped:
        partials = partials.withColumn("_stub", F.lit(False))
        merged, deletes, next_state = _merge_capped_sessions(
            partials, windows, spec, types, after_us
        )
        next_state = next_state.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(next_state)
    elif spec.windowing.type == "session":
        merged, deletes = _merge_sessions(partials, windows, spec, types)
    else:
        merged, deletes = _merge(partials, windows, spec, types), None
    merged = merged.withColumn("_closed", _closed(spec, after_us)).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    cached.append(merged)
    if counters is not None:
        counters = counters.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(counters)
    if deletes is not None:
        deletes = deletes.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(deletes)
    return EpochFrames(
        classified=classified,
        missed=missed if spec.windowing.type == "hopping" else None,
        watermark=watermark,
        watermark_us=after_us,
        dead=dead_rows(prepared.records, spec, epoch, source_uri),
        late=late,
        merged=merged,
        deletes=deletes,
        counters=counters,
        types=types,
        cached=tuple(cached),
        next_state=next_state,
    )


# -- classification -------------------------------------------------------------------------


def operator_columns(spec: PipelineSpec) -> tuple[str, ...]:
    """The record columns the windows read: keys and aggregated columns (the event time and
    positions are always kept)."""
    aggregated = [a.column for a in spec.aggregates if a.column]
    return tuple(dict.fromkeys((*spec.key_by, *aggregated)))


def _first_close(spec: PipelineSpec) -> Callable[[int], int] | None:
    """The smallest position watermark at which a record at event time ``ts`` misses a
    window (its earliest window's end, plus the allowed lateness): :func:`_lateness` and
    :func:`_assign`'s ``_missed`` in plain integers. Monotone in ``ts``."""
    w = spec.windowing
    lateness = spec.event_time.allowed_lateness_us
    if w.type == "session":
        return lambda ts: ts + lateness
    if w.type not in ("tumbling", "hopping"):
        return None

    def first_end(ts: int) -> int:
        # the earliest window holding ts starts at the first multiple of slide after ts - size
        start = (ts - w.size_us) - (ts - w.size_us) % w.slide_us + w.slide_us
        return start + w.size_us + lateness

    return first_end


def _lateness(spec: PipelineSpec) -> Column | None:
    """True for a record every window of which closed at its position (None: never late)."""
    w = spec.windowing
    lateness = spec.event_time.allowed_lateness_us
    ts, wm = F.col("_ts_us"), F.col("_wm")
    if w.type in ("tumbling", "hopping"):
        last_start = ts - F.pmod(ts, F.lit(w.slide_us))
        return wm.isNotNull() & (last_start + w.size_us + lateness <= wm)
    if w.type == "session":
        return wm.isNotNull() & (ts + lateness <= wm)
    return None


def _assign(classified: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Late and accepted records with their windows (``_ws``, ``_we``) and ``_missed``."""
    w = spec.windowing
    lateness = spec.event_time.allowed_lateness_us
    frame = classified.where(F.col("_class").isin(ACCEPTED, LATE))
    ts = F.col("_ts_us")
    if w.type == "session":
        frame = frame.withColumn("_ws", ts).withColumn("_we", ts + w.gap_us)
        if w.capped:
            frame = frame.withColumn("_cell", _floor_div(ts, w.max_duration_us))
        return frame.withColumn("_missed", F.col("_class") == LATE)
    last_start = ts - F.pmod(ts, F.lit(w.slide_us))
    if w.type == "tumbling" or w.slide_us == w.size_us:
        frame = frame.withColumn("_ws", last_start)
    else:
        back = (-(-w.size_us // w.slide_us) - 1) * w.slide_us
        starts = F.sequence(last_start - back, last_start, F.lit(w.slide_us))
        frame = frame.withColumn("_ws", F.explode(starts)).where(F.col("_ws") + w.size_us > ts)
    frame = frame.withColumn("_we", F.col("_ws") + w.size_us)
    missed = F.col("_wm").isNotNull() & (F.col("_we") + lateness <= F.col("_wm"))
    return frame.withColumn("_missed", missed)


# -- count windows -----------------------------------------------------------------------------


def _count_partials(
    classified: DataFrame, spec: PipelineSpec, types: dict[str, str], state: DataFrame | None
) -> tuple[DataFrame, DataFrame]:
    """Partials of count windows (``_wi``, ``_cnt``, min/max event time) and the new per-key
    record counters."""
    w = spec.windowing
    keys = list(spec.key_by)
    accepted = classified.where(F.col("_class") == ACCEPTED)
    key_cols = [F.col(f"`{k}`") for k in keys]
    if state is not None:
        carried = state.where(F.col("_wi") == COUNTER).select(
            *key_cols, F.col("_cnt").alias("_seen")
        )
    else:
        carried = accepted.sparkSession.createDataFrame(
            [], accepted.select(*key_cols, F.lit(0).cast("long").alias("_seen")).schema
        )
    order = Window.partitionBy(*key_cols).orderBy("_epoch", "_major", "_line")
    seq = F.row_number().over(order) - 1 + F.coalesce(F.col("_seen"), F.lit(0))
    numbered = null_safe_join(accepted, carried, keys).withColumn("_seq", seq.cast("long"))
    lo = F.greatest(F.lit(0), F.ceil((F.col("_seq") - w.count + 1) / F.lit(w.count_slide)))
    hi = F.floor(F.col("_seq") / F.lit(w.count_slide))
    assigned = numbered.withColumn("_wi", F.explode(F.sequence(lo.cast("long"), hi.cast("long"))))
    partials = assigned.groupBy(*key_cols, "_wi").agg(
        F.min("_ts_us").alias("_ws"),
        F.max("_ts_us").alias("_we"),
        F.count("*").alias("_cnt"),
        *partial_columns(spec, types),
    )
    epoch_counts = numbered.groupBy(*key_cols).agg((F.max("_seq") + 1).alias("_cnt"))
    counters = (
        carried.select(*key_cols, F.col("_seen").alias("_cnt"))
        .unionByName(epoch_counts)
        .groupBy(*key_cols)
        .agg(F.max("_cnt").alias("_cnt"))
    )
    return partials, counters


# -- merging with state ------------------------------------------------------------------------


def _windows_of_state(state: DataFrame | None, spec: PipelineSpec) -> DataFrame | None:
    if state is None:
        return None
    if spec.windowing.type == "count":
        state = state.where(F.col("_wi") != COUNTER)
    return state.select(*[F.col(f"`{c}`") for c in state_columns(spec)]).withColumn(
        "_new", F.lit(False)
    )


def _merge(
    partials: DataFrame, state: DataFrame | None, spec: PipelineSpec, types: dict[str, str]
) -> DataFrame:
    if state is None:
        return partials
    extra: list[Column] = []
    if spec.windowing.type == "count":
        extra = [F.min("_ws").alias("_ws"), F.max("_we").alias("_we"), F.sum("_cnt").alias("_cnt")]
    return (
        state.unionByName(partials)
        .groupBy(*[F.col(f"`{k}`") for k in window_keys(spec)])
        .agg(*extra, *merge_columns(spec, types), F.max("_new").alias("_new"))
    )


def _merge_sessions(
    partials: DataFrame, state: DataFrame | None, spec: PipelineSpec, types: dict[str, str]
) -> tuple[DataFrame, DataFrame]:
    """Merge every overlapping session of a key into one; returns the sessions and the old
    session rows this epoch replaced (to delete from upsert sinks)."""
    frame = partials if state is None else state.unionByName(partials)
    key_cols = [F.col(f"`{k}`") for k in spec.key_by]
    frame = _gap_groups(frame, key_cols)
    group = Window.partitionBy(*key_cols, F.col("_gid"))
    grouped = (
        frame.withColumn("_g_ws", F.min("_ws").over(group))
        .withColumn("_g_we", F.max("_we").over(group))
        .withColumn("_g_new", F.max(F.col("_new").cast("int")).over(group) == 1)
    )
    deletes = grouped.where(
        ~F.col("_new")
        & F.col("_g_new")
        & ((F.col("_ws") != F.col("_g_ws")) | (F.col("_we") != F.col("_g_we")))
    ).select(*key_cols, "_ws", "_we")
    merged = frame.groupBy(*key_cols, "_gid").agg(
        F.min("_ws").alias("_ws"),
        F.max("_we").alias("_we"),
        *merge_columns(spec, types),
        F.max("_new").alias("_new"),
    )
    return merged.drop("_gid"), deletes


def _floor_div(value: Column, step: int) -> Column:
    """``floor(value / step)`` in exact integer arithmetic (``value`` may be negative)."""
    return ((value - F.pmod(value, F.lit(step))) / F.lit(step)).cast("long")


def _ceil_div(value: Column, step: int) -> Column:
    return _floor_div(value, step) + F.when(F.pmod(value, F.lit(step)) > 0, 1).otherwise(0)


def _gap_groups(frame: DataFrame, key_cols: list[Column]) -> DataFrame:
    """``_gid``: per key, rows whose ``[_ws, _we)`` intervals overlap (transitively) share it."""
    by_start = Window.partitionBy(*key_cols).orderBy("_ws", "_we")
    prev_end = F.max("_we").over(by_start.rowsBetween(Window.unboundedPreceding, -1))
    starts = F.when(prev_end.isNull() | (F.col("_ws") >= prev_end), 1).otherwise(0)
    running = by_start.rowsBetween(Window.unboundedPreceding, 0)
    return (
        frame.withColumn("_starts", starts)
        .withColumn("_gid", F.sum("_starts").over(running))
        .drop("_starts")
    )


def _capped_pieces(
    frags: DataFrame, spec: PipelineSpec, types: dict[str, str], watermark_us: int | None
) -> tuple[DataFrame, DataFrame]:
    """Sessions cut at ``max_duration`` check points (aligned multiples ``c`` of it, where the
    open window has lasted at least ``max_duration``).

    ``frags`` are fragments: partials of one key, one gap-session and one cell
    ``floor(t / max_duration)`` (``_stub`` rows stand for pieces already closed, carrying the
    session's anchor). A gap-session starting at ``s`` has its first piece ``[s, c1)``, with
    ``c1 = (ceil(s / M) + 1) * M``, then one piece per cell; a record's piece is therefore
    ``max(cell, ceil(s / M))``. Returns (fragments with ``_p``, ``_s`` and closing flags,
    pieces as windows)."""
    m = spec.windowing.max_duration_us
    lateness = spec.event_time.allowed_lateness_us
    key_cols = [F.col(f"`{k}`") for k in spec.key_by]
    frags = _gap_groups(frags, key_cols)
    frags = frags.groupBy(*key_cols, "_gid", "_cell", "_stub").agg(
        F.min("_ws").alias("_ws"),
        F.max("_we").alias("_we"),
        *merge_columns(spec, types),
        F.max("_new").alias("_new"),
    )
    session = Window.partitionBy(*key_cols, "_gid")
    frags = frags.withColumn("_s", F.min("_ws").over(session))
    frags = frags.withColumn("_p", F.greatest(F.col("_cell"), _ceil_div(F.col("_s"), m)))
    piece = Window.partitionBy(*key_cols, "_gid", "_p")
    piece_end = F.least(F.max("_we").over(piece), (F.col("_p") + 1) * m)

    def closes(end: Column) -> Column:
        return F.lit(False) if watermark_us is None else end + lateness <= F.lit(watermark_us)

    frags = frags.withColumn("_piece_closed", closes(piece_end))
    frags = frags.withColumn("_gap_closed", closes(F.max("_we").over(session)))
    pieces = (
        frags.where(~F.col("_stub"))
        .groupBy(*key_cols, "_gid", "_p")
        .agg(
            F.min("_s").alias("_s"),
            F.max("_we").alias("_max_we"),
            *merge_columns(spec, types),
            F.max("_new").alias("_new"),
        )
    )
    first = F.col("_p") == _ceil_div(F.col("_s"), m)
    pieces = pieces.withColumn("_ws", F.when(first, F.col("_s")).otherwise(F.col("_p") * m))
    pieces = pieces.withColumn("_we", F.least(F.col("_max_we"), (F.col("_p") + 1) * m))
    return frags, pieces.drop("_gid", "_p", "_s", "_max_we")


def _merge_capped_sessions(
    partials: DataFrame,
    state: DataFrame | None,
    spec: PipelineSpec,
    types: dict[str, str],
    watermark_us: int | None,
) -> tuple[DataFrame, DataFrame | None, DataFrame]:
    """Sessions with ``max_duration``: (pieces, deletes of replaced pieces, next state).

    The state keeps fragments, not pieces, so a piece can always be recomputed from records'
    partials; a closed piece leaves one stub per still-open session to keep its anchor."""
    key_cols = [F.col(f"`{k}`") for k in spec.key_by]
    frame = partials if state is None else state.unionByName(partials)
    frags, pieces = _capped_pieces(frame, spec, types, watermark_us)
    deletes = None
    if spec.emit == "on_update" and state is not None:
        # A piece whose bounds moved (its session's anchor or end changed) is a new row: it
        # is emitted even without new records, and the row it replaces is deleted.
        _, old = _capped_pieces(state, spec, types, None)
        old = old.select(*key_cols, "_ws", "_we").withColumn("_old", F.lit(True))
        keys = [*spec.key_by, "_ws", "_we"]
        pieces = null_safe_join(pieces, old, keys)
        pieces = pieces.withColumn("_new", F.col("_new") | F.col("_old").isNull()).drop("_old")
        current = pieces.select(*key_cols, "_ws", "_we").withColumn("_now", F.lit(True))
        deletes = (
            null_safe_join(old.drop("_old"), current, keys)
            .where(F.col("_now").isNull())
            .drop("_now")
        )
    keep = frags.where(~F.col("_stub") & ~F.col("_piece_closed")).select(
        *key_cols, "_ws", "_we", "_cell", "_stub", *partial_names(spec)
    )
    stubs = (
        frags.where(~F.col("_gap_closed") & (F.col("_stub") | F.col("_piece_closed")))
        .groupBy(*key_cols, "_gid")
        .agg(F.min("_s").alias("_ws"), F.max("_we").alias("_we"), F.max("_p").alias("_cell"))
        .drop("_gid")
        .withColumn("_stub", F.lit(True))
    )
    return pieces, deletes, keep.unionByName(stubs, allowMissingColumns=True)


def _closed(spec: PipelineSpec, watermark_us: int | None) -> Column:
    if spec.windowing.type == "count":
        return F.col("_cnt") >= spec.windowing.count
    if watermark_us is None:
        return F.lit(False)
    return F.col("_we") + spec.event_time.allowed_lateness_us <= F.lit(watermark_us)


# -- outputs -----------------------------------------------------------------------------------


def _window_columns(spec: PipelineSpec) -> list[Column]:
    cols = [
        F.timestamp_micros("_ws").alias("window_start"),
        F.timestamp_micros("_we").alias("window_end"),
    ]
    if spec.windowing.type == "count":
        cols.append(F.col("_wi").alias("window_index"))
    return cols


def emitted_rows(frames: EpochFrames, spec: PipelineSpec, epoch: int) -> DataFrame:
    """The result rows of the epoch: closed windows (``on_close``) or changed windows plus the
    deletes of replaced sessions (``on_update``). Columns: keys, window bounds, aggregates,
    ``_op`` and ``_epoch`` (dropped by append sinks)."""
    keys = [F.col(f"`{k}`") for k in spec.key_by]
    if spec.emit == "on_update":
        chosen = frames.merged.where("_new")
    else:
        chosen = frames.merged.where("_closed")
    rows = chosen.select(
        *keys,
        *_window_columns(spec),
        *finalize_columns(spec, frames.types),
        F.lit("upsert").alias("_op"),
        F.lit(epoch).cast("long").alias("_epoch"),
    )
    if spec.emit == "on_update" and frames.deletes is not None:
        nulls = [
            F.lit(None).cast(dtype).alias(name)
            for name, dtype in rows.dtypes
            if name in {a.name for a in spec.aggregates}
        ]
        deletes = frames.deletes.select(
            *keys,
            *_window_columns(spec),
            *nulls,
            F.lit("delete").alias("_op"),
            F.lit(epoch).cast("long").alias("_epoch"),
        )
        rows = rows.unionByName(deletes)
    return rows


def open_state(frames: EpochFrames, spec: PipelineSpec) -> DataFrame:
    """The new state snapshot: open windows (and, for count windows, the key counters)."""
    if frames.next_state is not None:
        return frames.next_state.select(*[F.col(f"`{c}`") for c in state_columns(spec)])
    windows = frames.merged.where(~F.col("_closed")).select(
        *[F.col(f"`{c}`") for c in state_columns(spec)]
    )
    if frames.counters is None:
        return windows
    counters = frames.counters.select(
        *[F.col(f"`{k}`") for k in spec.key_by],
        F.lit(COUNTER).cast("long").alias("_wi"),
        F.lit(None).cast("long").alias("_ws"),
        F.lit(None).cast("long").alias("_we"),
        F.col("_cnt").cast("long").alias("_cnt"),
    )
    return windows.unionByName(counters, allowMissingColumns=True)


def _late_rows(missed: DataFrame, records: DataFrame, spec: PipelineSpec, epoch: int) -> DataFrame:
    """One row per (late record, window it missed), with the record's columns."""
    if "_ws" not in missed.columns:  # count windows: never late, but keep the schema
        missed = missed.withColumn("_ws", F.lit(None).cast("long"))
        missed = missed.withColumn("_we", F.lit(None).cast("long"))
        missed = missed.withColumn("_wm", F.lit(None).cast("long"))
    rows = with_records(missed.select(*POSITION, "_ws", "_we", "_wm"), records)
    return rows.select(
        *[F.col(f"`{c}`") for c, _ in spec.source.schema],
        F.timestamp_micros("_ws").alias("window_start"),
        F.timestamp_micros("_we").alias("window_end"),
        F.timestamp_micros("_wm").alias("watermark"),
        F.col("_file").alias("source_file"),
        F.col("_line").alias("source_line"),
        F.lit(epoch).cast("long").alias("epoch"),
    )


def window_output(frames: EpochFrames, spec: PipelineSpec, epoch: int) -> EpochOutput:
    """The epoch's results, counts and next state, as the protocol takes them."""
    from sluice.operator import EpochOutput

    parts = {
        "classes": (frames.classified, ("_class",)),
        "windows": (frames.merged, ("_closed", "_new")),
    }
    deletes = frames.deletes if spec.emit == "on_update" else None
    extra = {"missed": frames.missed, "next_state": frames.next_state}
    extra.update(counters=frames.counters, deletes=deletes)
    parts.update({name: (frame, ()) for name, frame in extra.items() if frame is not None})
    counted = tally(parts)
    emitted, still_open = _window_counts(counted["windows"], spec)
    emitted += sum(counted.get("deletes", {}).values())
    state_rows = still_open
    if frames.next_state is not None:
        state_rows = sum(counted["next_state"].values())
    state_rows += sum(counted.get("counters", {}).values())
    return EpochOutput(
        counts=epoch_counts(counted["classes"], counted.get("missed")),
        watermark=frames.watermark,
        watermark_us=frames.watermark_us,
        results=emitted_rows(frames, spec, epoch),
        emitted=emitted,
        state=open_state(frames, spec),
        state_rows=state_rows,
        still_open=still_open,
        late=frames.late,
        dead=frames.dead,
        cached=frames.cached,
    )


def _window_counts(
    by_flags: dict[tuple[str | None, ...], int], spec: PipelineSpec
) -> tuple[int, int]:
    """(result rows this epoch emits, windows left open) from the merged windows' rows per
    (``_closed``, ``_new``); on_update deletes are counted apart."""
    flags = {(closed == "true", new == "true"): n for (closed, new), n in by_flags.items()}
    still_open = sum(n for (closed, _), n in flags.items() if not closed)
    if spec.emit == "on_update":
        emitted = sum(n for (_, new), n in flags.items() if new)
    else:
        emitted = sum(n for (closed, _), n in flags.items() if closed)
    return emitted, still_open
