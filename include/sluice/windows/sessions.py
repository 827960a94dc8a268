"""Gap sessions: a record at ``t`` opens ``[t, t + gap)``, merged per key with every window it
overlaps or touches, in the epoch and across epochs; late when ``t + lateness <= W``. With
``max_duration`` (:class:`CappedSession`) a session is cut at aligned check points, and the
state is a snapshot (:mod:`sluice.windows.snapshot`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark import StorageLevel
from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from sluice.contracts.operators import ACCEPTED
from sluice.jvm.udfs import aggregate, select
from sluice.operators.base import null_safe_join, quoted
from sluice.spec.components.windows import SessionWindow
from sluice.windows.aggregates import (
    merge_columns,
    merge_sql,
    partial_columns,
    partial_names,
    partial_sql,
)
from sluice.windows.snapshot import fate
from sluice.windows.strategy import N, Pipeline, WindowKind, gap_groups

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sluice.operators.records import Classification

__all__ = ["CappedSession", "Session"]


class Session(WindowKind[SessionWindow]):
    """Gap sessions, merged per key (``max_duration`` cuts: :class:`CappedSession`)."""

    name = "session"
    merges_across_epochs = True

    def __init__(self, window: SessionWindow, pipeline: Pipeline) -> None:
        super().__init__(window, pipeline)
        self.gap = window.gap_us

    @classmethod
    def of(cls, window: SessionWindow, pipeline: Pipeline) -> WindowKind[Any]:
        return CappedSession(window, pipeline) if window.capped else cls(window, pipeline)

    def first_close(self, ts: N) -> N:
        return ts + self.lateness_us

    def last_close(self, ts: N) -> N:
        return ts + self.lateness_us

    def _records(self, classified: DataFrame) -> DataFrame:
        accepted = classified.where(f"_class = {ACCEPTED}")
        return select(accepted, "*", "_ts_us AS _ws", f"_ts_us + {self.gap} AS _we")

    def epoch_partials(self, classified: DataFrame, types: dict[str, str]) -> DataFrame:
        """The epoch's sessions (fragments of the final ones): the accepted records of each
        key merged by gap, one row each."""
        grouped = gap_groups(self._records(classified), self.keys)
        keys = [quoted(k) for k in self.keys]
        partials = aggregate(
            grouped, [*keys, "_gid"],
            ["min(_ws) AS _ws", "max(_we) AS _we", *partial_sql(self.aggregates, types)],
        )  # fmt: skip
        return select(partials, *keys, "_ws", "_we", *self._partials())

    def missed_windows(self, classified: DataFrame) -> DataFrame:
        late = classified.where("_class = 1")
        return select(late, "*", "_ts_us AS _ws", f"_ts_us + {self.gap} AS _we")

    def merge(self, rows: DataFrame, types: dict[str, str]) -> DataFrame:
        """Every session of a key that overlaps or touches another merges into one."""
        keys = [quoted(k) for k in self.keys]
        merged = aggregate(
            gap_groups(rows, self.keys), [*keys, "_gid"],
            ["min(_ws) AS _ws", "max(_we) AS _we", *merge_sql(self.aggregates, types),
             "max(_new) AS _new", "max(_old) AS _old"],
        )  # fmt: skip
        return select(merged, *keys, "_ws", "_we", *self._partials(), "_new", "_old")

    def _partials(self) -> list[str]:
        return [quoted(c) for c in partial_names(self.aggregates)]


def _floor_div(value: Column, step: int) -> Column:
    """``floor(value / step)`` in exact integer arithmetic (``value`` may be negative)."""
    return ((value - F.pmod(value, F.lit(step))) / F.lit(step)).cast("long")


def _ceil_div(value: Column, step: int) -> Column:
    return _floor_div(value, step) + F.when(F.pmod(value, F.lit(step)) > 0, 1).otherwise(0)


class CappedSession(Session):
    """Sessions with ``max_duration``: pieces cut at aligned check points. Placing a record
    needs its session's anchor, so the state (fragments per cell, and stubs of closed pieces)
    is folded whole each epoch."""

    incremental = False
    # the record's cell ``floor(t / max_duration)``; a stub stands for a closed piece
    extra_state_columns = ("_cell", "_stub")

    def __init__(self, window: SessionWindow, pipeline: Pipeline) -> None:
        super().__init__(window, pipeline)
        self.max_duration = window.max_duration_us

    def view_columns(self) -> list[Column]:
        return [F.col("_stub").alias("stub")]

    def snapshot(
        self, classified: Classification, state: DataFrame | None, cached: list[DataFrame]
    ) -> tuple[DataFrame, DataFrame, DataFrame | None]:
        # the cut points need the watermark after the epoch: the pass runs first
        partials = self._record_partials(classified).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(partials)
        partials.count()
        after = classified.facts().after_us
        return self._capped(classified.types, partials, state, after)

    def _record_partials(self, cls: Classification) -> DataFrame:
        """The epoch's accepted records as partials per (key, record window, cell). (Not
        ``_partials``: that is :class:`Session`'s list of partial columns, which its
        incremental path calls; this kind folds its state whole instead.)"""
        key_cols = [F.col(quoted(k)) for k in self.keys]
        accepted = cls.frame.where(F.col("_class") == F.lit(ACCEPTED))
        records = (
            accepted.withColumn("_ws", F.col("_ts_us"))
            .withColumn("_we", F.col("_ts_us") + F.lit(self.gap))
            .withColumn("_cell", _floor_div(F.col("_ts_us"), self.max_duration))
        )
        return records.groupBy(*key_cols, "_ws", "_we", "_cell").agg(
            *partial_columns(self.aggregates, cls.types)
        )

    def _capped(
        self,
        types: dict[str, str],
        partials: DataFrame,
        state: DataFrame | None,
        after: int | None,
    ) -> tuple[DataFrame, DataFrame, DataFrame | None]:
        """(pieces with _fate, next state, deletes of replaced pieces). The state keeps
        fragments, not pieces, so a piece can always be recomputed from records' partials; a
        closed piece leaves one stub per still-open session to keep its anchor."""
        key_cols = [F.col(quoted(k)) for k in self.keys]
        partials = partials.withColumn("_new", F.lit(True)).withColumn("_stub", F.lit(False))
        old = None if state is None else state.withColumn("_new", F.lit(False))
        frame = partials if old is None else old.unionByName(partials)
        frags, pieces = self._pieces(frame, types, after)
        deletes = None
        if self.deletes_replaced and old is not None:
            # A piece whose bounds moved (its session's anchor or end changed) is a new row:
            # it is emitted even without new records, and the row it replaces is deleted.
            _, before = self._pieces(old, types, None)
            before = before.select(*key_cols, "_ws", "_we").withColumn("_was", F.lit(True))
            keys = self.window_keys()
            pieces = null_safe_join(pieces, before, keys)
            pieces = pieces.withColumn("_new", F.col("_new") | F.col("_was").isNull())
            pieces = pieces.drop("_was")
            current = pieces.select(*key_cols, "_ws", "_we").withColumn("_now", F.lit(True))
            deletes = (
                null_safe_join(before.drop("_was"), current, keys)
                .where(F.col("_now").isNull())
                .drop("_now")
            )
        closed = F.lit(False) if after is None else (
            F.col("_we") + F.lit(self.lateness_us) <= F.lit(after)
        )  # fmt: skip
        pieces = pieces.withColumn("_fate", fate(self.emit, closed))
        keep = frags.where(~F.col("_stub") & ~F.col("_piece_closed")).select(
            *key_cols, "_ws", "_we", "_cell", "_stub", *partial_names(self.aggregates)
        )
        stubs = (
            frags.where(~F.col("_gap_closed") & (F.col("_stub") | F.col("_piece_closed")))
            .groupBy(*key_cols, "_gid")
            .agg(F.min("_s").alias("_ws"), F.max("_we").alias("_we"), F.max("_p").alias("_cell"))
            .drop("_gid")
            .withColumn("_stub", F.lit(True))
        )
        return pieces, keep.unionByName(stubs, allowMissingColumns=True), deletes

    def _pieces(
        self, frags: DataFrame, types: dict[str, str], watermark_us: int | None
    ) -> tuple[DataFrame, DataFrame]:
        """Sessions cut at ``max_duration`` check points (aligned multiples ``c`` of it, where
        the open window has lasted at least ``max_duration``).

        ``frags`` are fragments: partials of one key, one gap-session and one cell
        ``floor(t / max_duration)`` (``_stub`` rows stand for pieces already closed, carrying
        the session's anchor). A gap-session starting at ``s`` has its first piece ``[s, c1)``,
        with ``c1 = (ceil(s / M) + 1) * M``, then one piece per cell; a record's piece is
        therefore ``max(cell, ceil(s / M))``. Returns (fragments with ``_p``, ``_s`` and
        closing flags, pieces as windows)."""
        m = self.max_duration
        lateness = self.lateness_us
        key_cols = [F.col(quoted(k)) for k in self.keys]
        frags = gap_groups(frags, self.keys)
        frags = frags.groupBy(*key_cols, "_gid", "_cell", "_stub").agg(
            F.min("_ws").alias("_ws"),
            F.max("_we").alias("_we"),
            *merge_columns(self.aggregates, types),
            F.max("_new").alias("_new"),
        )
        session = Window.partitionBy(*key_cols, "_gid")
        frags = frags.withColumn("_s", F.min("_ws").over(session))
        frags = frags.withColumn("_p", F.greatest(F.col("_cell"), _ceil_div(F.col("_s"), m)))
        piece = Window.partitionBy(*key_cols, "_gid", "_p")
        piece_end = F.least(F.max("_we").over(piece), (F.col("_p") + 1) * m)

        def closes(end: Column) -> Column:
            if watermark_us is None:
                return F.lit(False)
            return end + lateness <= F.lit(watermark_us)

        frags = frags.withColumn("_piece_closed", closes(piece_end))
        frags = frags.withColumn("_gap_closed", closes(F.max("_we").over(session)))
        pieces = (
            frags.where(~F.col("_stub"))
            .groupBy(*key_cols, "_gid", "_p")
            .agg(
                F.min("_s").alias("_s"),
                F.max("_we").alias("_max_we"),
                *merge_columns(self.aggregates, types),
                F.max("_new").alias("_new"),
            )
        )
        first = F.col("_p") == _ceil_div(F.col("_s"), m)
        pieces = pieces.withColumn("_ws", F.when(first, F.col("_s")).otherwise(F.col("_p") * m))
        pieces = pieces.withColumn("_we", F.least(F.col("_max_we"), (F.col("_p") + 1) * m))
        return frags, pieces.drop("_gid", "_p", "_s", "_max_we")
