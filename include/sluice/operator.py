"""What every operator (windows, keyed process functions, stateless) gives the protocol for
one epoch.

The process step (:mod:`sluice.protocol.process`) reads the planned records and the state
``S_k``, asks the pipeline's operator for an :class:`EpochOutput`, writes its ``state`` as
``S_{k+1}`` and hands ``results``, ``late`` and ``dead`` to the sinks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.windows.records import EpochCounts
from sluice.windows.watermarks import WatermarkState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sluice.spec.model import PipelineSpec

__all__ = ["EpochOutput", "align_state", "compute_output", "no_late_rows", "state_columns"]


@dataclass(frozen=True)
class EpochOutput:
    counts: EpochCounts
    watermark: WatermarkState
    watermark_us: int | None  # the global watermark after the epoch (idle rule applied)
    results: DataFrame  # result columns plus _op and _epoch
    emitted: int  # rows in results
    state: DataFrame | None  # S_{k+1} rows (None or state_rows == 0: empty)
    state_rows: int
    still_open: int  # windows still open, or keys holding state
    late: DataFrame
    dead: DataFrame
    cached: tuple[DataFrame, ...]

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()


def state_columns(spec: PipelineSpec) -> list[str]:
    """The columns of a state snapshot row of ``spec``'s operator, in order (a stateless
    pipeline has none)."""
    if spec.stateless:
        return []
    if spec.process is not None:
        from sluice.keyed.operator import state_columns as keyed_columns

        return keyed_columns(spec)
    from sluice.windows import state_columns as window_columns

    return window_columns(spec)


def align_state(
    spec: PipelineSpec,
    frame: DataFrame,
    reset_aggregates: tuple[str, ...] = (),
    reset_states: tuple[str, ...] = (),
) -> DataFrame:
    """A stored snapshot in the column order of :func:`state_columns`, under the spec now
    (:mod:`sluice.protocol.upgrade`): columns of removed aggregates or states are left out;
    an aggregate or state that is new, or in ``reset_*``, starts empty. A keyed function's
    state gains a TTL column when a TTL was added since (null: written before, never
    expires)."""
    from pyspark.sql import functions as F

    empty: dict[str, Any] = {}
    if spec.stateless:  # its plans carry none (a stateful one's is dropped on the switch)
        return frame
    if spec.process is not None:
        from sluice.keyed.operator import stamp_types, state_types
        from sluice.keyed.runner import stamp_column, state_column

        typed = {**state_types(spec), **stamp_types(spec)}
        for name in reset_states:
            for column in (state_column(name), stamp_column(name)):
                if column in typed:
                    empty[column] = F.lit(None).cast(typed[column])
        for column, ddl in typed.items():
            if column not in frame.columns:
                empty[column] = F.lit(None).cast(ddl)
    else:
        from sluice.windows.aggregates import empty_partials

        zeros = empty_partials(spec)
        for agg in spec.aggregates:
            for column, zero in zeros[agg.name].items():
                if agg.name in reset_aggregates or column not in frame.columns:
                    empty[column] = zero
    return frame.select(*[
        empty[c].alias(c) if c in empty else F.col(f"`{c}`") for c in state_columns(spec)
    ])  # fmt: skip


def compute_output(
    spark: SparkSession,
    records: DataFrame,
    spec: PipelineSpec,
    carried: WatermarkState,
    state: DataFrame | None,
    *,
    epoch: int,
    source_uri: str,
    waiting: tuple[str, ...] = (),
) -> EpochOutput:
    """One epoch of ``spec``'s operator over ``records`` and the state ``S_k``."""
    if spec.stateless:
        from sluice.stateless import compute_stateless

        return compute_stateless(
            spark, records, spec, carried, epoch=epoch, source_uri=source_uri, waiting=waiting
        )
    if spec.process is not None:
        from sluice.keyed.operator import compute_keyed

        return compute_keyed(
            spark, records, spec, carried, state, epoch=epoch, source_uri=source_uri,
            waiting=waiting,
        )  # fmt: skip
    from sluice.windows import compute_epoch, window_output

    frames = compute_epoch(
        spark, records, spec, carried, state, epoch=epoch, source_uri=source_uri, waiting=waiting
    )
    try:
        return window_output(frames, spec, epoch)
    except BaseException:
        frames.release()
        raise


def no_late_rows(records: DataFrame, spec: PipelineSpec, epoch: int) -> DataFrame:
    """The late sink's frame of an operator under which no record is late (a process function
    sees every valid record; a stateless pipeline has no window to miss): empty, with the
    late-records columns, so every sink keeps one schema. No Spark job runs for it."""
    from pyspark.sql import functions as F

    none = records.where(F.lit(False))
    return none.select(
        *[F.col(f"`{c}`") for c, _ in spec.source.schema],
        F.lit(None).cast("timestamp").alias("window_start"),
        F.lit(None).cast("timestamp").alias("window_end"),
        F.lit(None).cast("timestamp").alias("watermark"),
        F.col("_file").alias("source_file"),
        F.col("_line").alias("source_line"),
        F.lit(epoch).cast("long").alias("epoch"),
    )
