"""One epoch's records, classified: the part every operator (windows, process functions)
shares.

1. derive the ``select:`` columns and ``filter:`` (an expression that raises makes the record
   a dead letter, see :mod:`sluice.windows.expressions`);
2. take each valid record's event time (``_ts_us``), advance the per-partition watermarks and
   compute the watermark at each record's position (``_wm``);
3. classify: dead letter, filtered, late (by the operator's rule) or accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from sluice.exceptions import SluiceError
from sluice.windows.expressions import failure_reason, guarded
from sluice.windows.watermarks import CHUNK_LINES, Chunk, WatermarkState, chunk_bounds

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sluice.spec.model import PipelineSpec

__all__ = [
    "ACCEPTED",
    "DEAD",
    "DEAD_DDL",
    "FILTERED",
    "LATE",
    "Classified",
    "EpochCounts",
    "InvalidExpression",
    "classify_epoch",
    "count_classes",
    "dead_rows",
    "derive",
    "epoch_counts",
    "late_ddl",
    "null_safe_join",
    "tally",
    "with_records",
]

DEAD, FILTERED, LATE, ACCEPTED = "dead", "filtered", "late", "accepted"


class InvalidExpression(SluiceError):
    """A ``select:`` or ``filter:`` expression Spark cannot analyse."""

    def __init__(self, pipeline: str, field: str, expression: str, reason: str) -> None:
        first = reason.strip().splitlines()[0] if reason.strip() else reason
        super().__init__(
            f"pipeline {pipeline}: {field}: Spark cannot evaluate {expression!r}: {first}. "
            "Fix the expression (Spark SQL syntax) in the spec."
        )


@dataclass(frozen=True)
class EpochCounts:
    records_read: int
    accepted: int
    late: int
    dead: int
    filtered: int = 0
    late_rows: int = 0  # rows for the late sink: one per (late record, missed window)

    def reconciles(self) -> bool:
        return self.records_read == self.accepted + self.late + self.dead + self.filtered


def _chunks(records: DataFrame) -> list[Chunk]:
    """Every chunk of lines (see :func:`chunk_bounds`) with its extreme event times."""
    rows = (
        records.where(F.col("_ts_us").isNotNull())
        .groupBy("_partition", "_major", _chunk_of().alias("_chunk"))
        .agg(F.min("_ts_us").alias("lo"), F.max("_ts_us").alias("hi"))
        .collect()
    )
    return [
        Chunk(r["_partition"], int(r["_major"]), int(r["_chunk"]), int(r["lo"]), int(r["hi"]))
        for r in rows
    ]


def _chunk_of() -> Column:
    return F.floor((F.col("_line") - 1) / F.lit(CHUNK_LINES)).cast("long")


def derive(records: DataFrame, spec: PipelineSpec) -> DataFrame:
    """The ``select:`` columns, then ``_keep`` from ``filter:``. Each expression runs only on
    records without an ``_error`` so far; one that raises gives the record its ``_error``
    (a dead letter naming the field) instead of failing the epoch."""
    frame = records
    for name, expression in spec.select:
        frame = _evaluate(frame, spec, f"select.{name}", expression, name)
    if not spec.filter:
        return frame.withColumn("_keep", F.lit(True))
    frame = _evaluate(frame, spec, "filter", spec.filter, "_keep")
    return frame.withColumn("_keep", F.coalesce(F.col("_keep"), F.lit(False)))


def _evaluate(
    frame: DataFrame, spec: PipelineSpec, field: str, expression: str, into: str
) -> DataFrame:
    try:  # ParseException is an AnalysisException too
        tried = guarded(frame.sparkSession, F.expr(expression), spec.name)
        frame = frame.withColumn("_g", F.when(F.col("_error").isNull(), tried))
    except AnalysisException as exc:
        raise InvalidExpression(spec.name, field, expression, str(exc)) from exc
    raised = F.col("_error").isNull() & F.col("_g").isNull()
    return (
        frame.withColumn(
            "_error",
            F.when(raised, F.lit(failure_reason(field, expression))).otherwise(F.col("_error")),
        )
        .withColumn(into, F.col("_g.v"))
        .drop("_g")
    )


def _position_watermark(
    spark: SparkSession,
    frame: DataFrame,
    spec: PipelineSpec,
    bounds: list[tuple[str, int, int, int | None, bool]],
    before_us: int | None,
) -> tuple[DataFrame, DataFrame | None]:
    """``_wm``: the watermark at each record's position, floored by the global watermark the
    epoch started from (see "Late records" in the docs), for the records of exact chunks
    (:func:`chunk_bounds`); null for the others, which no watermark they could have makes
    late or makes miss a window. Also returns the cached frame of the exact chunks' records
    (None: there are none)."""
    exact = [b for b in bounds if b[4]]
    if not exact:
        return frame.withColumn("_wm", F.lit(None).cast("long")), None
    table = spark.createDataFrame(
        exact, "_partition string, _major int, _chunk long, _before long, _exact boolean"
    )
    keys = ["_partition", "_major", "_chunk"]
    frame = frame.withColumn("_chunk", _chunk_of()).join(F.broadcast(table), keys, "left")
    earlier = Window.partitionBy(*keys).orderBy("_line")
    earlier = earlier.rowsBetween(Window.unboundedPreceding, -1)
    pos_max = F.greatest("_before", F.max("_ts_us").over(earlier))
    wm = pos_max - spec.event_time.max_out_of_orderness_us
    if before_us is not None:
        wm = F.greatest(wm, F.lit(before_us))
    timed = frame.where(F.col("_exact")).withColumn("_wm", wm).drop("_chunk", "_before", "_exact")
    timed = timed.persist(StorageLevel.MEMORY_AND_DISK)  # read by every output: sort once
    # the rest: records of the other chunks, and those without an event time (dead letters)
    rest = frame.where(F.col("_exact").isNull()).withColumn("_wm", F.lit(None).cast("long"))
    return timed.unionByName(rest.drop("_chunk", "_before", "_exact")), timed


def _classify(frame: DataFrame, late: Column | None) -> DataFrame:
    kind = F.when(F.col("_error").isNotNull(), DEAD).when(~F.col("_keep"), FILTERED)
    if late is not None:
        kind = kind.when(late, LATE)
    return frame.withColumn("_class", kind.otherwise(ACCEPTED))


def null_safe_join(left: DataFrame, right: DataFrame, keys: list[str]) -> DataFrame:
    """Left join on ``keys`` where null equals null (a null key is a key like any other)."""
    if not keys:
        return left.join(right, F.lit(True), "left")
    renamed = right.select(*[F.col(f"`{k}`").alias(f"_r_{k}") for k in keys], *[
        c for c in right.columns if c not in keys
    ])  # fmt: skip
    cond = [F.col(f"`{k}`").eqNullSafe(F.col(f"`_r_{k}`")) for k in keys]
    joined = left.join(renamed, cond, "left")
    return joined.drop(*[f"_r_{k}" for k in keys])


def count_classes(classified: DataFrame) -> EpochCounts:
    """Records per class (one late row per late record)."""
    parts: dict[str, tuple[DataFrame, tuple[str, ...]]] = {"classes": (classified, ("_class",))}
    counted = tally(parts)
    return epoch_counts(counted["classes"], counted.get("missed"))


def epoch_counts(
    by_class: dict[tuple[str | None, ...], int], missed: dict[tuple[str | None, ...], int] | None
) -> EpochCounts:
    """EpochCounts from :func:`tally`'s rows per ``_class`` (and per missed window: hopping
    windows give late rows to accepted records or several to one record; None: one each)."""
    accepted, late, dead, filtered = (
        by_class.get((c,), 0) for c in (ACCEPTED, LATE, DEAD, FILTERED)
    )
    late_rows = late if missed is None else sum(missed.values())
    return EpochCounts(accepted + late + dead + filtered, accepted, late, dead, filtered, late_rows)


Tally = dict[str, dict[tuple[str | None, ...], int]]


def tally(parts: dict[str, tuple[DataFrame, tuple[str, ...]]]) -> Tally:
    """Rows of several frames grouped by some of their columns, in one Spark action:
    ``{name: {(value as text, ...): rows}}`` (no entry for a group without rows). One action
    instead of one per count saves a query's planning and scheduling each (the fixed cost of
    an epoch)."""
    counts = []
    for name, (frame, by) in parts.items():
        key = F.array(*[F.col(f"`{c}`").cast("string") for c in by]) if by else F.array()
        grouped = frame.groupBy(key.cast("array<string>").alias("_key")).count()
        counts.append(grouped.select(F.lit(name).alias("_part"), "_key", "count"))
    union = counts[0]
    for more in counts[1:]:
        union = union.unionByName(more)
    out: Tally = {name: {} for name in parts}
    for row in union.collect():
        out[row["_part"]][tuple(row["_key"])] = int(row["count"])
    return out


def dead_rows(records: DataFrame, spec: PipelineSpec, epoch: int, source: str) -> DataFrame:
    """The dead-letter rows of ``records`` (every column, see :class:`Classified`): those
    with an ``_error``, which :func:`_classify` makes dead before anything else."""
    code_and_reason = F.split(F.col("_error"), ": ", 2)
    return records.where(F.col("_error").isNotNull()).select(
        F.lit(spec.name).alias("pipeline"),
        F.lit(epoch).cast("long").alias("epoch"),
        F.lit(source).alias("source"),
        F.col("_file").alias("file"),
        F.col("_line").alias("line"),
        F.coalesce("_raw", _row_json(spec)).alias("raw"),
        code_and_reason.getItem(0).alias("reason_code"),
        code_and_reason.getItem(1).alias("reason"),
    )


DEAD_DDL = (
    "pipeline string, epoch bigint, source string, file string, line bigint, raw string, "
    "reason_code string, reason string"
)


def late_ddl(spec: PipelineSpec) -> str:
    """The late-records sink's columns (every operator's late frame has these)."""
    from sluice.sources.parsing import SPARK_TYPES

    record = ", ".join(f"`{c}` {SPARK_TYPES[kind]}" for c, kind in spec.source.schema)
    return (
        f"{record}, window_start timestamp, window_end timestamp, watermark timestamp, "
        "source_file string, source_line bigint, epoch bigint"
    )


def _row_json(spec: PipelineSpec) -> Column:
    """A record's schema columns as JSON: the ``raw`` of a dead letter whose source gave no
    text (a well-typed Parquet row, a generated event)."""
    return F.to_json(F.struct(*[F.col(f"`{c}`") for c, _ in spec.source.schema]))


@dataclass(frozen=True)
class Classified:
    """The epoch's records with ``_class``, ``_ts_us``, ``_epoch`` (and ``_wm``), the
    watermarks, and the frames cached on the way (to unpersist when the epoch is done).

    ``classified`` holds only the columns the operator asked for; ``records`` is every
    record with every column (lazy, never cached: it is read again only for the rows that
    go to the late and dead-letter sinks, when there are any)."""

    classified: DataFrame
    records: DataFrame
    types: dict[str, str]  # column -> Spark type of the derived records
    watermark: WatermarkState
    after_us: int | None  # the global watermark after the epoch (idle rule applied)
    cached: tuple[DataFrame, ...]


# What ``classify_epoch`` keeps of a record besides the operator's columns: its position
# (the late sink's rows are joined back to the records on it) and why it is a dead letter.
POSITION = ("_partition", "_major", "_line")


def classify_epoch(
    spark: SparkSession,
    records: DataFrame,
    spec: PipelineSpec,
    carried: WatermarkState,
    *,
    epoch: int,
    waiting: tuple[str, ...],
    lateness: Column | None,
    positions: bool = True,
    columns: tuple[str, ...] | None = None,
    first_close: Callable[[int], int] | None = None,
) -> Classified:
    """Derive, time and classify one epoch's records. ``lateness`` is the operator's rule over
    ``_ts_us`` and ``_wm`` (None: no record is late); ``positions``: compute ``_wm``.
    ``waiting``: the partitions the source still has unread input for after this epoch.
    ``columns``: the record columns the operator reads (None: all but ``_raw`` / ``_file``);
    Spark then reads and shuffles only those. ``first_close``: the operator's earliest
    closing watermark of a record at an event time, which lets most records skip their exact
    ``_wm`` (:func:`~sluice.windows.watermarks.chunk_bounds`; None: none skip)."""
    et = spec.event_time
    # select/filter first: a record whose expression raised is dead and moves no watermark
    derived = derive(records, spec)
    if columns is None:
        dropped = (*POSITION, "_raw", "_error", "_file")
        columns = tuple(c for c in derived.columns if c not in dropped)
    wanted = list(dict.fromkeys((*POSITION, "_error", et.column, *columns, "_keep")))
    narrow = derived.select(*[F.col(f"`{c}`") for c in wanted])
    narrow = narrow.withColumn(
        "_ts_us", F.when(F.col("_error").isNull(), F.unix_micros(F.col(f"`{et.column}`")))
    )
    if not spec.source.rereads_cheaply:  # read by several actions below and by the sinks
        narrow = narrow.persist(StorageLevel.MEMORY_AND_DISK)
    chunks = _chunks(narrow)
    watermark = carried.advanced(((c.partition, c.high) for c in chunks), waiting)
    before_us = carried.watermark_us(et.max_out_of_orderness_us, et.idle_timeout_us)
    after_us = watermark.watermark_us(et.max_out_of_orderness_us, et.idle_timeout_us)
    frame = narrow.withColumn("_epoch", F.lit(epoch).cast("long"))
    types = dict(frame.dtypes)
    cached = [] if spec.source.rereads_cheaply else [narrow]
    if positions:
        ooo = et.max_out_of_orderness_us
        bounds = chunk_bounds(carried, chunks, ooo, before_us, first_close)
        frame, timed = _position_watermark(spark, frame, spec, bounds, before_us)
        cached.extend([] if timed is None else [timed])
    # not cached: classifying is a few expressions over the cached rows
    classified = _classify(frame, lateness)
    return Classified(classified, derived, types, watermark, after_us, tuple(cached))


def with_records(rows: DataFrame, records: DataFrame) -> DataFrame:
    """``rows`` (with :data:`POSITION`) joined with every column of their records."""
    extra = [c for c in records.columns if c not in rows.columns or c in POSITION]
    return rows.join(records.select(*[F.col(f"`{c}`") for c in extra]), list(POSITION))
