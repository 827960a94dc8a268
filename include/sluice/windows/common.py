"""What every window epoch shares: the record columns read, the stored state aligned to the
spec, result rows, late rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from sluice.contracts.operators import POSITION
from sluice.jvm.udfs import select
from sluice.operators.base import quoted
from sluice.operators.records import with_records
from sluice.windows.aggregates import empty_partials, finalize_sql

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sluice.spec.model import PipelineSpec
    from sluice.windows.strategy import WindowKind

__all__ = ["align_window_state", "late_rows", "operator_columns", "result_rows"]


def operator_columns(spec: PipelineSpec) -> tuple[str, ...]:
    """The record columns the windows read: keys and aggregated columns (the event time and
    positions are always kept)."""
    aggregated = [a.column for a in spec.aggregates if a.column]
    return tuple(dict.fromkeys((*spec.key_by, *aggregated)))


def align_window_state(
    kind: WindowKind[Any], frame: DataFrame, reset_aggregates: tuple[str, ...]
) -> DataFrame:
    """A stored state in the kind's state column order under the spec now: columns of removed
    aggregates are left out; an aggregate that is new, or in ``reset_aggregates``, starts
    empty (sluice.protocol.upgrade)."""
    empty: dict[str, str] = {}
    zeros = empty_partials(kind.aggregates)
    stored = set(frame.columns)
    for agg in kind.aggregates:
        for column, zero in zeros[agg.name].items():
            if agg.name in reset_aggregates or column not in stored:
                empty[column] = zero
    return select(frame, *[
        f"{empty[c]} AS {quoted(c)}" if c in empty else quoted(c) for c in kind.state_columns()
    ])  # fmt: skip


def result_rows(
    kind: WindowKind[Any],
    windows: DataFrame,
    types: dict[str, str],
    epoch: int,
    deletes: DataFrame | None = None,
) -> DataFrame:
    """Result rows of ``windows`` (merged partials): keys, window bounds, aggregates, ``_op``
    and ``_epoch`` (dropped by append sinks); on_update ``deletes`` (keys, ``_ws``, ``_we``)
    become ``delete`` rows."""
    keys = [quoted(k) for k in kind.keys]
    rows = select(
        windows, *keys, *kind.window_sql(), *finalize_sql(kind.aggregates, types),
        "'upsert' AS _op", f"{epoch}L AS _epoch",
    )  # fmt: skip
    if deletes is None:
        return rows
    names = {a.name for a in kind.aggregates}
    nulls = [f"CAST(NULL AS {t}) AS {quoted(n)}" for n, t in rows.dtypes if n in names]
    gone = deletes.selectExpr(
        *keys, *kind.window_sql(), *nulls, "'delete' AS _op", f"{epoch}L AS _epoch"
    )
    return rows.unionByName(gone)


def late_rows(missed: DataFrame, records: DataFrame, spec: PipelineSpec, epoch: int) -> DataFrame:
    """One row per (late record, window it missed), with the record's columns."""
    rows = with_records(missed.select(*POSITION, "_ws", "_we", "_wm"), records)
    return rows.select(
        *[F.col(quoted(c)) for c, _ in spec.source.schema],
        F.timestamp_micros("_ws").alias("window_start"),
        F.timestamp_micros("_we").alias("window_end"),
        F.timestamp_micros("_wm").alias("watermark"),
        F.col("_file").alias("source_file"),
        F.col("_line").alias("source_line"),
        F.lit(epoch).cast("long").alias("epoch"),
    )
