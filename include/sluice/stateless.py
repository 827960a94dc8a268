"""One epoch of a stateless pipeline (no window, no process function): select, filter, append.

1. classify the records (:func:`~sluice.windows.records.classify_epoch`): dead letters,
   filtered, accepted — nothing is late, as no window can have closed; the watermark is still
   advanced and checkpointed. Only the output columns (and what the classification itself
   needs) are read and cached;
2. the results are the accepted records' output columns (``PipelineSpec.output_columns``),
   each epoch's rows appended once; there is no state, so ``S_{k+1}`` is empty.

Spark runs two actions before the sinks write: the event-time extremes per partition (which
cache the narrow records) and the count per class; ``emitted`` is the accepted count, and the
late sink gets an empty frame without a job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from sluice.windows.records import ACCEPTED, classify_epoch, count_classes, dead_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sluice.operator import EpochOutput
    from sluice.spec.model import PipelineSpec
    from sluice.windows.watermarks import WatermarkState

__all__ = ["compute_stateless"]


def compute_stateless(
    spark: SparkSession,
    records: DataFrame,
    spec: PipelineSpec,
    carried: WatermarkState,
    *,
    epoch: int,
    source_uri: str,
    waiting: tuple[str, ...] = (),
) -> EpochOutput:
    from sluice.operator import EpochOutput, no_late_rows

    columns = spec.output_columns()
    prepared = classify_epoch(
        spark, records, spec, carried, epoch=epoch, waiting=waiting, lateness=None,
        positions=False, columns=columns,
    )  # fmt: skip
    late = no_late_rows(prepared.records, spec, epoch)
    try:
        counts = count_classes(prepared.classified, late, hopping=False)
    except BaseException:
        for frame in prepared.cached:
            frame.unpersist()
        raise
    return EpochOutput(
        counts=counts,
        watermark=prepared.watermark,
        watermark_us=prepared.after_us,
        results=_results(prepared.classified, columns),
        emitted=counts.accepted,
        state=None,
        state_rows=0,
        still_open=0,
        late=late,
        dead=dead_rows(prepared.records, spec, epoch, source_uri),
        cached=prepared.cached,
    )


def _results(classified: DataFrame, columns: tuple[str, ...]) -> DataFrame:
    """The accepted records' output columns, plus ``_op`` and ``_epoch`` (which append
    sinks drop)."""
    return classified.where(F.col("_class") == ACCEPTED).select(
        *[F.col(f"`{c}`") for c in columns],
        F.lit("upsert").alias("_op"),
        F.col("_epoch"),
    )
