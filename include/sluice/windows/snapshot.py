"""Count windows and sessions with ``max_duration``: a full snapshot of the state each epoch.

Both need every state row of a touched key to place a record (a count window's sequence
number, a capped session's cut points), so their state is folded whole each epoch and
written as a new base. The pass, the results and the snapshot are three jobs: the merged
windows are cached once and counted per fate (:data:`FATES`) as they are built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from pyspark import StorageLevel
from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from sluice.contracts.operators import ACCEPTED, EpochFacts, EpochInput, StateUpdate
from sluice.jvm.udfs import Ledger, counted, counting
from sluice.operators.base import null_safe_join, quoted
from sluice.operators.records import EXACT, Classification, PassFacts, classify, dead_rows
from sluice.windows.aggregates import merge_columns, partial_columns, partial_names
from sluice.windows.common import COUNTER, late_rows, operator_columns, result_rows, state_columns
from sluice.windows.kinds import WindowKind, gap_groups

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sluice.spec.components.windows import CountWindow, SessionWindow
    from sluice.spec.model import PipelineSpec

__all__ = ["snapshot_epoch"]

# a merged window's fate: stays open; is emitted and leaves; leaves silently; is emitted and
# stays open (on_update: touched, not closed)
OPEN, EMIT, QUIET, UPDATED = 0, 1, 2, 3


def snapshot_epoch(spec: PipelineSpec, kind: WindowKind, inp: EpochInput) -> SnapshotEpoch:
    lateness = kind.lateness()
    columns = operator_columns(spec)
    epoch = SnapshotEpoch.start(kind, inp, classify(inp, lateness, columns))
    if not epoch.facts.exact:
        epoch.release()
        epoch = SnapshotEpoch.start(kind, inp, classify(inp, lateness, columns, mode=EXACT))
    return epoch


@dataclass
class SnapshotEpoch:
    kind: WindowKind
    inp: EpochInput
    cls: Classification
    facts: PassFacts
    merged: DataFrame  # every window with _fate, cached
    fates: Ledger
    next_state: DataFrame
    deletes: DataFrame | None
    cached: list[DataFrame] = field(default_factory=list)
    emitted: int | None = None

    @property
    def horizon(self) -> int | None:
        """The state is folded whole each epoch: no bound to skip by."""
        return None

    @classmethod
    def start(cls, kind: WindowKind, inp: EpochInput, classified: Classification) -> SnapshotEpoch:
        spec = inp.spec
        state = inp.state.frame()
        cached: list[DataFrame] = []
        if spec.windowing.counted:
            merged, next_state, deletes = _count_windows(spec, classified, state)
        else:  # the cut points need the watermark after the epoch: the pass runs first
            partials = _capped_partials(spec, classified).persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(partials)
            partials.count()
            after = classified.facts().after_us
            merged, next_state, deletes = _capped(spec, classified.types, partials, state, after)
        merged, ledger = counting(inp.spark, merged, "windows", F.col("_fate"))
        merged = merged.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(merged)
        if deletes is not None:
            deletes = deletes.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(deletes)
        merged.count()  # the windows merged with the state, cached (count windows: the pass)
        epoch = cls(kind, inp, classified, classified.facts(), merged, ledger, next_state,
                    deletes, cached)  # fmt: skip
        epoch.emitted = counted(ledger, EMIT) + counted(ledger, UPDATED)
        if deletes is not None:
            epoch.emitted += deletes.count()
        return epoch

    @property
    def results(self) -> DataFrame:
        spec = self.inp.spec
        emitted = self.merged.where(F.col("_fate").isin(EMIT, UPDATED))
        return result_rows(spec, emitted, self.cls.types, self.inp.epoch, self.deletes)

    def state_update(self) -> StateUpdate | None:
        return StateUpdate("base", self.next_state.select(*state_columns(self.inp.spec)), None)

    def finish(self, emitted: int | None, state_rows: int | None = None) -> EpochFacts:
        still_open = counted(self.fates, OPEN) + counted(self.fates, UPDATED)
        facts = self.facts
        return EpochFacts(facts.counts, facts.watermark, facts.after_us,
                          emitted if emitted is not None else self.emitted or 0, still_open,
                          state_rows if state_rows is not None else still_open)  # fmt: skip

    def late(self) -> DataFrame:
        spec = self.inp.spec
        frame = self.cls.frame
        if spec.windowing.counted:  # never late, but keep the schema
            missed = frame.where(F.lit(False)).withColumn("_ws", F.lit(None).cast("long"))
            missed = missed.withColumn("_we", F.lit(None).cast("long"))
        else:
            missed = frame.where(F.col("_class") == F.lit(1)).withColumn("_ws", F.col("_ts_us"))
            missed = missed.withColumn(
                "_we", F.col("_ts_us") + F.lit(cast("SessionWindow", spec.windowing).gap_us)
            )
        return late_rows(missed, self.cls.records, spec, self.inp.epoch)

    def dead(self) -> DataFrame:
        return dead_rows(self.cls.records, self.inp.spec, self.inp.epoch, self.inp.source_uri)

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()
        self.cached.clear()


def _flag(frame: DataFrame, new: bool) -> DataFrame:
    return frame.withColumn("_new", F.lit(new))


def _emit(spec: PipelineSpec, closed: Column) -> Column:
    """A merged window's fate: emitted when closed (on_close) or touched (on_update)."""
    if spec.emit == "on_close":
        return F.when(closed, F.lit(EMIT)).otherwise(F.lit(OPEN))
    touched = F.col("_new")
    return (
        F.when(closed, F.when(touched, F.lit(EMIT)).otherwise(F.lit(QUIET)))
        .when(touched, F.lit(UPDATED))
        .otherwise(F.lit(OPEN))
    )


# -- count windows ---------------------------------------------------------------------------


def _count_windows(
    spec: PipelineSpec, cls: Classification, state: DataFrame | None
) -> tuple[DataFrame, DataFrame, None]:
    """Count windows: partials numbered per key after the state's counter, merged with the
    state's windows. A window leaves the state when full (emitted then, on_close)."""
    w = cast("CountWindow", spec.windowing)
    keys = list(spec.key_by)
    key_cols = [F.col(quoted(k)) for k in keys]
    accepted = cls.frame.where(F.col("_class") == F.lit(ACCEPTED))
    if state is not None:
        seen = state.where(F.col("_wi") == COUNTER).select(*key_cols, F.col("_cnt").alias("_seen"))
    else:
        seen = accepted.sparkSession.createDataFrame(
            [], accepted.select(*key_cols, F.lit(0).cast("long").alias("_seen")).schema
        )
    order = Window.partitionBy(*key_cols).orderBy("_epoch", "_major", "_line")
    seq = F.row_number().over(order) - 1 + F.coalesce(F.col("_seen"), F.lit(0))
    numbered = null_safe_join(accepted, seen, keys).withColumn("_seq", seq.cast("long"))
    lo = F.greatest(F.lit(0), F.ceil((F.col("_seq") - w.count + 1) / F.lit(w.count_slide)))
    hi = F.floor(F.col("_seq") / F.lit(w.count_slide))
    assigned = numbered.withColumn("_wi", F.explode(F.sequence(lo.cast("long"), hi.cast("long"))))
    partials = assigned.groupBy(*key_cols, "_wi").agg(
        F.min("_ts_us").alias("_ws"), F.max("_ts_us").alias("_we"), F.count("*").alias("_cnt"),
        *partial_columns(spec, cls.types),
    )  # fmt: skip
    counts = numbered.groupBy(*key_cols).agg((F.max("_seq") + 1).alias("_cnt"))
    counters = (
        seen.select(*key_cols, F.col("_seen").alias("_cnt"))
        .unionByName(counts)
        .groupBy(*key_cols)
        .agg(F.max("_cnt").alias("_cnt"))
    )
    windows = _flag(partials, True)
    if state is not None:
        old = state.where(F.col("_wi") != COUNTER).select(*state_columns(spec))
        windows = _flag(old, False).unionByName(windows)
    merged = windows.groupBy(*key_cols, "_wi").agg(
        F.min("_ws").alias("_ws"), F.max("_we").alias("_we"), F.sum("_cnt").alias("_cnt"),
        *merge_columns(spec, cls.types), F.max("_new").alias("_new"),
    )  # fmt: skip
    merged = merged.withColumn("_fate", _emit(spec, F.col("_cnt") >= F.lit(w.count)))
    stay = merged.where(F.col("_fate").isin(OPEN, UPDATED)).select(*state_columns(spec))
    counter_rows = counters.select(
        *key_cols, F.lit(COUNTER).cast("long").alias("_wi"), F.lit(None).cast("long").alias("_ws"),
        F.lit(None).cast("long").alias("_we"), F.col("_cnt").cast("long").alias("_cnt"),
    )  # fmt: skip
    return merged, stay.unionByName(counter_rows, allowMissingColumns=True), None


# -- sessions with max_duration ---------------------------------------------------------------


def _floor_div(value: Column, step: int) -> Column:
    """``floor(value / step)`` in exact integer arithmetic (``value`` may be negative)."""
    return ((value - F.pmod(value, F.lit(step))) / F.lit(step)).cast("long")


def _ceil_div(value: Column, step: int) -> Column:
    return _floor_div(value, step) + F.when(F.pmod(value, F.lit(step)) > 0, 1).otherwise(0)


def _capped_partials(spec: PipelineSpec, cls: Classification) -> DataFrame:
    """The epoch's accepted records as partials per (key, record window, cell)."""
    w = cast("SessionWindow", spec.windowing)
    key_cols = [F.col(quoted(k)) for k in spec.key_by]
    accepted = cls.frame.where(F.col("_class") == F.lit(ACCEPTED))
    records = (
        accepted.withColumn("_ws", F.col("_ts_us"))
        .withColumn("_we", F.col("_ts_us") + F.lit(w.gap_us))
        .withColumn("_cell", _floor_div(F.col("_ts_us"), w.max_duration_us))
    )
    return records.groupBy(*key_cols, "_ws", "_we", "_cell").agg(*partial_columns(spec, cls.types))


def _capped(
    spec: PipelineSpec,
    types: dict[str, str],
    partials: DataFrame,
    state: DataFrame | None,
    after: int | None,
) -> tuple[DataFrame, DataFrame, DataFrame | None]:
    """Sessions with ``max_duration``: (pieces with _fate, next state, deletes of replaced
    pieces). The state keeps fragments, not pieces, so a piece can always be recomputed from
    records' partials; a closed piece leaves one stub per still-open session to keep its
    anchor."""
    key_cols = [F.col(quoted(k)) for k in spec.key_by]
    partials = partials.withColumn("_new", F.lit(True)).withColumn("_stub", F.lit(False))
    old = None if state is None else state.withColumn("_new", F.lit(False))
    frame = partials if old is None else old.unionByName(partials)
    frags, pieces = _capped_pieces(frame, spec, types, after)
    deletes = None
    if spec.emit == "on_update" and old is not None:
        # A piece whose bounds moved (its session's anchor or end changed) is a new row: it
        # is emitted even without new records, and the row it replaces is deleted.
        _, before = _capped_pieces(old, spec, types, None)
        before = before.select(*key_cols, "_ws", "_we").withColumn("_was", F.lit(True))
        keys = [*spec.key_by, "_ws", "_we"]
        pieces = null_safe_join(pieces, before, keys)
        pieces = pieces.withColumn("_new", F.col("_new") | F.col("_was").isNull()).drop("_was")
        current = pieces.select(*key_cols, "_ws", "_we").withColumn("_now", F.lit(True))
        deletes = (
            null_safe_join(before.drop("_was"), current, keys)
            .where(F.col("_now").isNull())
            .drop("_now")
        )
    closed = F.lit(False) if after is None else (
        F.col("_we") + F.lit(spec.event_time.allowed_lateness_us) <= F.lit(after)
    )  # fmt: skip
    pieces = pieces.withColumn("_fate", _emit(spec, closed))
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
    return pieces, keep.unionByName(stubs, allowMissingColumns=True), deletes


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
    m = cast("SessionWindow", spec.windowing).max_duration_us
    lateness = spec.event_time.allowed_lateness_us
    key_cols = [F.col(quoted(k)) for k in spec.key_by]
    frags = gap_groups(frags, list(spec.key_by))
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
