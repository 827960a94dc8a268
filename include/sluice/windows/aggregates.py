"""Mergeable partial aggregates: what the window state stores between epochs.

Each spec aggregate becomes one or more partial columns that merge with built-in Spark
functions (sum / min / max), so merging state with a new epoch is one ``groupBy``.
Sums of floating-point columns are kept as DECIMAL(38, 12): decimal addition is associative,
so a window's sum does not depend on how the input was cut into epochs (split invariance).
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from sluice.sources.parsing import SPARK_TYPES
from sluice.spec.model import AggregateSpec, PipelineSpec

__all__ = ["finalize_columns", "merge_columns", "partial_columns", "partial_schema"]

EXACT_SUM = "decimal(38,12)"


def _n(agg: AggregateSpec) -> str:
    return f"_p_{agg.name}_n"


def _s(agg: AggregateSpec) -> str:
    return f"_p_{agg.name}_s"


def _m(agg: AggregateSpec) -> str:
    return f"_p_{agg.name}_m"


def _sum_type(spec: PipelineSpec, agg: AggregateSpec) -> str:
    assert agg.column
    kind = spec.source.column_type(agg.column)
    return "bigint" if kind in ("int", "long") else EXACT_SUM


def partial_columns(spec: PipelineSpec) -> list[Column]:
    """Aggregations of one epoch's accepted records into partials."""
    cols: list[Column] = []
    for agg in spec.aggregates:
        value = F.col(f"`{agg.column}`") if agg.column else None
        if agg.func == "count":
            cols.append((F.count(value) if value is not None else F.count("*")).alias(_n(agg)))
        elif agg.func in ("sum", "avg"):
            assert value is not None
            cols.append(F.sum(value.cast(_sum_type(spec, agg))).alias(_s(agg)))
            cols.append(F.count(value).alias(_n(agg)))
        else:
            assert value is not None
            fn = F.min if agg.func == "min" else F.max
            cols.append(fn(value).alias(_m(agg)))
    return cols


def merge_columns(spec: PipelineSpec) -> list[Column]:
    """Aggregations that merge partials (from state and from the epoch) into one row."""
    cols: list[Column] = []
    for agg in spec.aggregates:
        if agg.func in ("count", "sum", "avg"):
            cols.append(F.sum(_n(agg)).alias(_n(agg)))
        if agg.func in ("sum", "avg"):
            cols.append(F.sum(_s(agg)).cast(_sum_type(spec, agg)).alias(_s(agg)))
        if agg.func in ("min", "max"):
            fn = F.min if agg.func == "min" else F.max
            cols.append(fn(_m(agg)).alias(_m(agg)))
    return cols


def finalize_columns(spec: PipelineSpec) -> list[Column]:
    """The user-facing aggregate columns, named as in the spec (SQL null semantics)."""
    cols: list[Column] = []
    for agg in spec.aggregates:
        n, s = F.col(_n(agg)), F.col(_s(agg))
        if agg.func == "count":
            out = n
        elif agg.func == "sum":
            kind = "bigint" if _sum_type(spec, agg) == "bigint" else "double"
            out = F.when(n > 0, s.cast(kind))
        elif agg.func == "avg":
            out = F.when(n > 0, s.cast("double") / n)
        else:
            out = F.col(_m(agg))
        cols.append(out.alias(agg.name))
    return cols


def partial_schema(spec: PipelineSpec) -> list[tuple[str, str]]:
    """(column, Spark SQL type) of the partial columns, in state order."""
    fields: list[tuple[str, str]] = []
    for agg in spec.aggregates:
        if agg.func in ("count", "sum", "avg"):
            fields.append((_n(agg), "bigint"))
        if agg.func in ("sum", "avg"):
            fields.append((_s(agg), _sum_type(spec, agg)))
        if agg.func in ("min", "max"):
            assert agg.column
            fields.append((_m(agg), SPARK_TYPES[spec.source.column_type(agg.column)]))
    return fields
