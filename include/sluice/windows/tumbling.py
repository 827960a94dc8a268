"""One epoch of keyed tumbling event-time windows, as Spark DataFrames.

1. classify every record: dead letter (unparseable), late (its window closed at its
   position), or accepted;
2. fold the accepted records into per-(key, window) partial aggregates and merge them with
   the window state carried from the previous checkpoint;
3. split the merged windows into closed ones (emitted, final) and open ones (the new state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.sql import Window
from pyspark.sql import functions as F

from sluice.windows.aggregates import finalize_columns, merge_columns, partial_columns
from sluice.windows.watermarks import WatermarkState, prefix_maxima

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sluice.spec.model import PipelineSpec

__all__ = ["EpochCounts", "EpochFrames", "compute_epoch", "window_keys"]

DEAD, LATE, ACCEPTED = "dead", "late", "accepted"


@dataclass(frozen=True)
class EpochCounts:
    records_read: int
    accepted: int
    late: int
    dead: int

    def reconciles(self) -> bool:
        return self.records_read == self.accepted + self.late + self.dead


@dataclass(frozen=True)
class EpochFrames:
    """What an epoch produces; the frames are lazy except where counts were taken."""

    counts: EpochCounts
    watermark: WatermarkState
    dead: DataFrame
    late: DataFrame
    merged: DataFrame  # every touched or carried window with partials and a _closed flag
    cached: tuple[DataFrame, ...]

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()


def window_keys(spec: PipelineSpec) -> list[str]:
    return [*spec.key_by, "_ws", "_we"]


def compute_epoch(
    spark: SparkSession,
    records: DataFrame,
    spec: PipelineSpec,
    carried: WatermarkState,
    state: DataFrame | None,
    *,
    epoch: int,
    source_uri: str,
) -> EpochFrames:
    """Classify, aggregate and merge one epoch (see the module docstring)."""
    records = records.persist(StorageLevel.MEMORY_AND_DISK)
    ts = spec.event_time.column
    records = records.withColumn(
        "_ts_us", F.when(F.col("_error").isNull(), F.unix_micros(F.col(f"`{ts}`")))
    )
    maxima = _maxima(records)
    watermark = carried.advanced((p, v) for p, _, v in maxima)
    classified = _classify(spark, records, spec, carried, maxima).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    counts = _counts(classified)
    new_wm = watermark.watermark_us(spec.event_time.max_out_of_orderness_us)
    merged = _merge(classified, spec, state, new_wm).persist(StorageLevel.MEMORY_AND_DISK)
    return EpochFrames(
        counts=counts,
        watermark=watermark,
        dead=_dead_rows(classified, spec, epoch, source_uri),
        late=_late_rows(classified, spec, epoch),
        merged=merged,
        cached=(records, classified, merged),
    )


def _maxima(records: DataFrame) -> list[tuple[str, int, int]]:
    rows = (
        records.where(F.col("_ts_us").isNotNull())
        .groupBy("_partition", "_major")
        .agg(F.max("_ts_us").alias("m"))
        .collect()
    )
    return [(r["_partition"], int(r["_major"]), int(r["m"])) for r in rows]


def _classify(
    spark: SparkSession,
    records: DataFrame,
    spec: PipelineSpec,
    carried: WatermarkState,
    maxima: list[tuple[str, int, int]],
) -> DataFrame:
    """Adds _ws/_we (the record's window), _wm (watermark at its position) and _class."""
    prefixes = spark.createDataFrame(
        prefix_maxima(carried, maxima), "_partition string, _major int, _before long"
    )
    in_file = Window.partitionBy("_partition", "_major").orderBy("_line")
    earlier = in_file.rowsBetween(Window.unboundedPreceding, -1)
    size = spec.window.size_us
    frame = records.join(F.broadcast(prefixes), ["_partition", "_major"], "left")
    frame = frame.withColumn("_pos_max", F.greatest("_before", F.max("_ts_us").over(earlier)))
    frame = frame.withColumn("_wm", F.col("_pos_max") - spec.event_time.max_out_of_orderness_us)
    frame = frame.withColumn("_ws", F.col("_ts_us") - F.pmod(F.col("_ts_us"), F.lit(size)))
    frame = frame.withColumn("_we", F.col("_ws") + size)
    closes = F.col("_we") + spec.event_time.allowed_lateness_us
    return frame.withColumn(
        "_class",
        F.when(F.col("_error").isNotNull(), DEAD)
        .when(F.col("_wm").isNotNull() & (closes <= F.col("_wm")), LATE)
        .otherwise(ACCEPTED),
    )


def _counts(classified: DataFrame) -> EpochCounts:
    by_class = {
        r["_class"]: int(r["count"]) for r in classified.groupBy("_class").count().collect()
    }
    accepted, late, dead = (by_class.get(c, 0) for c in (ACCEPTED, LATE, DEAD))
    return EpochCounts(accepted + late + dead, accepted, late, dead)


def _merge(
    classified: DataFrame, spec: PipelineSpec, state: DataFrame | None, watermark_us: int | None
) -> DataFrame:
    keys = window_keys(spec)
    partials = (
        classified.where(F.col("_class") == ACCEPTED).groupBy(*keys).agg(*partial_columns(spec))
    )
    if state is not None:
        partials = state.unionByName(partials)
        partials = partials.groupBy(*keys).agg(*merge_columns(spec))
    closes = F.col("_we") + spec.event_time.allowed_lateness_us
    closed = F.lit(False) if watermark_us is None else closes <= F.lit(watermark_us)
    return partials.withColumn("_closed", closed)


def emitted_rows(merged: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Closed windows as result rows: keys, window_start, window_end, aggregates."""
    return merged.where("_closed").select(
        *[F.col(f"`{k}`") for k in spec.key_by],
        F.timestamp_micros("_ws").alias("window_start"),
        F.timestamp_micros("_we").alias("window_end"),
        *finalize_columns(spec),
    )


def open_state(merged: DataFrame) -> DataFrame:
    return merged.where(~F.col("_closed")).drop("_closed")


def _dead_rows(classified: DataFrame, spec: PipelineSpec, epoch: int, source: str) -> DataFrame:
    code_and_reason = F.split(F.col("_error"), ": ", 2)
    return classified.where(F.col("_class") == DEAD).select(
        F.lit(spec.name).alias("pipeline"),
        F.lit(epoch).cast("long").alias("epoch"),
        F.lit(source).alias("source"),
        F.col("_file").alias("file"),
        F.col("_line").alias("line"),
        F.col("_raw").alias("raw"),
        code_and_reason.getItem(0).alias("reason_code"),
        code_and_reason.getItem(1).alias("reason"),
    )


def _late_rows(classified: DataFrame, spec: PipelineSpec, epoch: int) -> DataFrame:
    return classified.where(F.col("_class") == LATE).select(
        *[F.col(f"`{c}`") for c, _ in spec.source.schema],
        F.timestamp_micros("_ws").alias("window_start"),
        F.timestamp_micros("_we").alias("window_end"),
        F.timestamp_micros("_wm").alias("watermark"),
        F.col("_file").alias("source_file"),
        F.col("_line").alias("source_line"),
        F.lit(epoch).cast("long").alias("epoch"),
    )
