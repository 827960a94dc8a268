"""What every window epoch shares: the state's columns, result rows, late rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from sluice.contracts.operators import POSITION
from sluice.operators.base import quoted
from sluice.operators.records import with_records
from sluice.windows.aggregates import empty_partials, finalize_sql, partial_names

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sluice.spec.model import PipelineSpec

__all__ = [
    "COUNTER",
    "align_window_state",
    "late_rows",
    "operator_columns",
    "result_rows",
    "state_columns",
    "window_keys",
]

COUNTER = -1  # count windows: the state row holding how many records a key has had


def window_keys(spec: PipelineSpec) -> list[str]:
    """The columns that identify one window of one key."""
    if spec.windowing.counted:
        return [*spec.key_by, "_wi"]
    return [*spec.key_by, "_ws", "_we"]


def state_columns(spec: PipelineSpec) -> list[str]:
    """The columns of a state row, in order."""
    extra = ["_ws", "_we", "_cnt"] if spec.windowing.counted else []
    if spec.windowing.capped:
        extra = ["_cell", "_stub"]
    return [*window_keys(spec), *extra, *partial_names(spec)]


def operator_columns(spec: PipelineSpec) -> tuple[str, ...]:
    """The record columns the windows read: keys and aggregated columns (the event time and
    positions are always kept)."""
    aggregated = [a.column for a in spec.aggregates if a.column]
    return tuple(dict.fromkeys((*spec.key_by, *aggregated)))


def align_window_state(
    spec: PipelineSpec, frame: DataFrame, reset_aggregates: tuple[str, ...]
) -> DataFrame:
    """A stored state in :func:`state_columns` order under the spec now: columns of removed
    aggregates are left out; an aggregate that is new, or in ``reset_aggregates``, starts
    empty (sluice.protocol.upgrade)."""
    empty: dict[str, Any] = {}
    zeros = empty_partials(spec)
    for agg in spec.aggregates:
        for column, zero in zeros[agg.name].items():
            if agg.name in reset_aggregates or column not in frame.columns:
                empty[column] = zero
    return frame.select(*[
        empty[c].alias(c) if c in empty else F.col(quoted(c)) for c in state_columns(spec)
    ])  # fmt: skip


def _window_sql(spec: PipelineSpec) -> list[str]:
    cols = ["timestamp_micros(_ws) AS window_start", "timestamp_micros(_we) AS window_end"]
    if spec.windowing.counted:
        cols.append("_wi AS window_index")
    return cols


def result_rows(
    spec: PipelineSpec,
    windows: DataFrame,
    types: dict[str, str],
    epoch: int,
    deletes: DataFrame | None = None,
) -> DataFrame:
    """Result rows of ``windows`` (merged partials): keys, window bounds, aggregates, ``_op``
    and ``_epoch`` (dropped by append sinks); on_update ``deletes`` (keys, ``_ws``, ``_we``)
    become ``delete`` rows."""
    keys = [quoted(k) for k in spec.key_by]
    rows = windows.selectExpr(
        *keys, *_window_sql(spec), *finalize_sql(spec, types),
        "'upsert' AS _op", f"{epoch}L AS _epoch",
    )  # fmt: skip
    if deletes is None:
        return rows
    names = {a.name for a in spec.aggregates}
    nulls = [f"CAST(NULL AS {t}) AS {quoted(n)}" for n, t in rows.dtypes if n in names]
    gone = deletes.selectExpr(
        *keys, *_window_sql(spec), *nulls, "'delete' AS _op", f"{epoch}L AS _epoch"
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
