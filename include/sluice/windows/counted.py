"""Count windows: per key, the i-th accepted record (in position order) belongs to the windows
j with ``j*slide <= i < j*slide + count``; never late. The state is a snapshot
(:mod:`sluice.windows.snapshot`): each key's windows plus one :data:`COUNTER` row (records
seen, which decides the next record's windows)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import Window
from pyspark.sql import functions as F

from sluice.contracts.operators import ACCEPTED
from sluice.operators.base import null_safe_join, quoted
from sluice.spec.components.windows import CountWindow
from sluice.windows.aggregates import merge_columns, partial_columns
from sluice.windows.snapshot import OPEN, UPDATED, fate, flag
from sluice.windows.strategy import WindowKind

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from sluice.operators.records import Classification

__all__ = ["COUNTER", "Counted"]

COUNTER = -1  # the state row holding how many records a key has had


class Counted(WindowKind[CountWindow]):
    """Count windows: per key, the i-th accepted record (in position order) belongs to the
    windows j with ``j*slide <= i < j*slide + count``; never late."""

    name = "count"
    incremental = False
    # the window's first and last record times, and its records so far
    extra_state_columns = ("_ws", "_we", "_cnt")
    extra_result_sql = ("_wi AS window_index",)

    def lateness(self) -> Any:
        return None

    def window_keys(self) -> list[str]:
        return [*self.keys, "_wi"]

    def missed_windows(self, classified: DataFrame) -> DataFrame:
        """Never late: no rows, but the schema of the late rows."""
        missed = classified.where(F.lit(False)).withColumn("_ws", F.lit(None).cast("long"))
        return missed.withColumn("_we", F.lit(None).cast("long"))

    def snapshot(
        self, classified: Classification, state: DataFrame | None, cached: list[DataFrame]
    ) -> tuple[DataFrame, DataFrame, None]:
        """Partials numbered per key after the state's counter, merged with the state's
        windows. A window leaves the state when full (emitted then, on_close)."""
        w = self.window
        keys = self.keys
        key_cols = [F.col(quoted(k)) for k in keys]
        accepted = classified.frame.where(F.col("_class") == F.lit(ACCEPTED))
        if state is not None:
            seen = state.where(F.col("_wi") == COUNTER).select(
                *key_cols, F.col("_cnt").alias("_seen")
            )
        else:
            seen = accepted.sparkSession.createDataFrame(
                [], accepted.select(*key_cols, F.lit(0).cast("long").alias("_seen")).schema
            )
        order = Window.partitionBy(*key_cols).orderBy("_epoch", "_major", "_line")
        seq = F.row_number().over(order) - 1 + F.coalesce(F.col("_seen"), F.lit(0))
        numbered = null_safe_join(accepted, seen, keys).withColumn("_seq", seq.cast("long"))
        lo = F.greatest(F.lit(0), F.ceil((F.col("_seq") - w.count + 1) / F.lit(w.count_slide)))
        hi = F.floor(F.col("_seq") / F.lit(w.count_slide))
        assigned = numbered.withColumn(
            "_wi", F.explode(F.sequence(lo.cast("long"), hi.cast("long")))
        )
        partials = assigned.groupBy(*key_cols, "_wi").agg(
            F.min("_ts_us").alias("_ws"), F.max("_ts_us").alias("_we"), F.count("*").alias("_cnt"),
            *partial_columns(self.aggregates, classified.types),
        )  # fmt: skip
        counts = numbered.groupBy(*key_cols).agg((F.max("_seq") + 1).alias("_cnt"))
        counters = (
            seen.select(*key_cols, F.col("_seen").alias("_cnt"))
            .unionByName(counts)
            .groupBy(*key_cols)
            .agg(F.max("_cnt").alias("_cnt"))
        )
        windows = flag(partials, True)
        if state is not None:
            old = state.where(F.col("_wi") != COUNTER).select(*self.state_columns())
            windows = flag(old, False).unionByName(windows)
        merged = windows.groupBy(*key_cols, "_wi").agg(
            F.min("_ws").alias("_ws"), F.max("_we").alias("_we"), F.sum("_cnt").alias("_cnt"),
            *merge_columns(self.aggregates, classified.types), F.max("_new").alias("_new"),
        )  # fmt: skip
        merged = merged.withColumn("_fate", fate(self.emit, F.col("_cnt") >= F.lit(w.count)))
        stay = merged.where(F.col("_fate").isin(OPEN, UPDATED)).select(*self.state_columns())
        counter_rows = counters.select(
            *key_cols, F.lit(COUNTER).cast("long").alias("_wi"),
            F.lit(None).cast("long").alias("_ws"), F.lit(None).cast("long").alias("_we"),
            F.col("_cnt").cast("long").alias("_cnt"),
        )  # fmt: skip
        return merged, stay.unionByName(counter_rows, allowMissingColumns=True), None

    def view(self, frame: DataFrame, aggregates: list[Column]) -> DataFrame:
        """Each open window with its index and records so far, and one ``counter`` row per
        key (records seen)."""
        keys = [F.col(f"`{k}`") for k in self.keys]
        names = {a.name for a in self.aggregates}
        windows = frame.where(F.col("_wi") != COUNTER).select(
            F.lit("window").alias("kind"),
            *keys,
            F.col("_wi").alias("window_index"),
            F.timestamp_micros("_ws").alias("window_start"),
            F.timestamp_micros("_we").alias("window_end"),
            F.col("_cnt").alias("records"),
            *aggregates,
        )
        counters = frame.where(F.col("_wi") == COUNTER).select(
            F.lit("counter").alias("kind"),
            *keys,
            F.lit(None).cast("long").alias("window_index"),
            F.lit(None).cast("timestamp").alias("window_start"),
            F.lit(None).cast("timestamp").alias("window_end"),
            F.col("_cnt").alias("records"),
            *[F.lit(None).cast(t).alias(n) for n, t in windows.dtypes if n in names],
        )
        return windows.unionByName(counters).orderBy("kind", *self.keys, "window_index")
