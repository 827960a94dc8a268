"""Mergeable partial aggregates: what the window state stores between epochs.

Each spec aggregate becomes one or more partial columns that merge with built-in Spark
functions, so merging state with a new epoch (or two sessions with each other) is one
``groupBy``:

=========================  ==========================================  =====================
aggregate                  partial(s)                                  merge
=========================  ==========================================  =====================
count                      ``_p_<name>_n`` count                        sum
sum, avg                   ``_p_<name>_s`` exact sum, ``_n`` count      sum, sum
min, max                   ``_p_<name>_m`` extreme                      min / max
count_distinct             ``_p_<name>_d`` array of distinct values     union (flatten+distinct)
approx_count_distinct      ``_p_<name>_h`` HLL sketch (lgK 12)          ``hll_union_agg``
first, last                ``_p_<name>_r`` struct(ts, epoch, file, line, value)  min / max
=========================  ==========================================  =====================

Sums of floating-point columns are kept as DECIMAL(38, 12): decimal addition is associative,
so a window's sum does not depend on how the input was cut into epochs (split invariance).
``first``/``last`` order records by event time, then position (epoch, file, line) — a total
order that does not depend on the cut either.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from sluice.spec.model import AggregateSpec, PipelineSpec

__all__ = [
    "HLL_LG_K",
    "empty_partials",
    "finalize_columns",
    "merge_columns",
    "partial_columns",
    "partial_names",
]

EXACT_SUM = "decimal(38,12)"
HLL_LG_K = 12
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
_HLL_NATIVE = ("int", "bigint", "string", "binary")


def _p(agg: AggregateSpec, suffix: str) -> str:
    return f"_p_{agg.name}_{suffix}"


def _suffixes(agg: AggregateSpec) -> tuple[str, ...]:
    return {
        "count": ("n",),
        "sum": ("s", "n"),
        "avg": ("s", "n"),
        "min": ("m",),
        "max": ("m",),
        "count_distinct": ("d",),
        "approx_count_distinct": ("h",),
        "first": ("r",),
        "last": ("r",),
    }[agg.func]


def empty_partials(spec: PipelineSpec) -> dict[str, dict[str, Column]]:
    """Per aggregate, the partials of "no record yet" (an aggregate added by an upgrade
    starts from these in windows already open). Merges are SQL aggregates that skip nulls,
    so an untyped null is empty for sums, extremes, sketches and first/last; counts are 0
    and distinct sets empty, so a window with no record for the new aggregate finalises to
    0 (count, count_distinct) or null (the others), as for a window of its own."""
    zeros: dict[str, dict[str, Column]] = {}
    for agg in spec.aggregates:
        columns: dict[str, Column] = {}
        for suffix in _suffixes(agg):
            if suffix == "n":
                columns[_p(agg, suffix)] = F.lit(0).cast("bigint")
            elif suffix == "d":
                columns[_p(agg, suffix)] = F.array()
            else:
                columns[_p(agg, suffix)] = F.lit(None)
        zeros[agg.name] = columns
    return zeros


def partial_names(spec: PipelineSpec) -> list[str]:
    """The partial columns, in state order."""
    return [_p(a, s) for a in spec.aggregates for s in _suffixes(a)]


def _sum_type(types: dict[str, str], agg: AggregateSpec) -> str:
    assert agg.column
    return "bigint" if types[agg.column] in _INTEGRAL else EXACT_SUM


def partial_columns(spec: PipelineSpec, types: dict[str, str]) -> list[Column]:
    """Aggregations of one epoch's accepted rows into partials.

    The rows carry ``_ts_us`` (event time), ``_epoch``, ``_major`` and ``_line`` (position).
    ``types`` maps each input column to its Spark type (``DataFrame.dtypes``).
    """
    cols: list[Column] = []
    for agg in spec.aggregates:
        value = F.col(f"`{agg.column}`") if agg.column else None
        func = agg.func
        if func == "count":
            cols.append((F.count(value) if value is not None else F.count("*")).alias(_p(agg, "n")))
            continue
        assert value is not None and agg.column
        if func in ("sum", "avg"):
            cols.append(F.sum(value.cast(_sum_type(types, agg))).alias(_p(agg, "s")))
            cols.append(F.count(value).alias(_p(agg, "n")))
        elif func in ("min", "max"):
            cols.append((F.min if func == "min" else F.max)(value).alias(_p(agg, "m")))
        elif func == "count_distinct":
            cols.append(F.array_sort(F.collect_set(value)).alias(_p(agg, "d")))
        elif func == "approx_count_distinct":
            native = types[agg.column] in _HLL_NATIVE
            cols.append(
                F.hll_sketch_agg(value if native else value.cast("string"), HLL_LG_K).alias(
                    _p(agg, "h")
                )
            )
        else:  # first / last
            ranked = F.struct(
                F.col("_ts_us").alias("t"),
                F.col("_epoch").alias("e"),
                F.col("_major").alias("f"),
                F.col("_line").alias("l"),
                value.alias("v"),
            )
            cols.append((F.min if func == "first" else F.max)(ranked).alias(_p(agg, "r")))
    return cols


def merge_columns(spec: PipelineSpec, types: dict[str, str]) -> list[Column]:
    """Aggregations that merge partial rows (from state and from the epoch) into one."""
    cols: list[Column] = []
    for agg in spec.aggregates:
        func = agg.func
        if func in ("count", "sum", "avg"):
            cols.append(F.sum(_p(agg, "n")).alias(_p(agg, "n")))
        if func in ("sum", "avg"):
            cols.append(F.sum(_p(agg, "s")).cast(_sum_type(types, agg)).alias(_p(agg, "s")))
        elif func in ("min", "first"):
            name = _p(agg, "m" if func == "min" else "r")
            cols.append(F.min(name).alias(name))
        elif func in ("max", "last"):
            name = _p(agg, "m" if func == "max" else "r")
            cols.append(F.max(name).alias(name))
        elif func == "count_distinct":
            name = _p(agg, "d")
            cols.append(F.array_sort(F.array_distinct(F.flatten(F.collect_list(name)))).alias(name))
        elif func == "approx_count_distinct":
            name = _p(agg, "h")
            cols.append(F.hll_union_agg(name).alias(name))
    return cols


def finalize_columns(spec: PipelineSpec, types: dict[str, str]) -> list[Column]:
    """The user-facing aggregate columns, named as in the spec (SQL null semantics)."""
    cols: list[Column] = []
    for agg in spec.aggregates:
        func = agg.func
        if func == "count":
            out = F.col(_p(agg, "n"))
        elif func in ("sum", "avg"):
            n, s = F.col(_p(agg, "n")), F.col(_p(agg, "s"))
            if func == "avg":
                out = F.when(n > 0, s.cast("double") / n)
            else:
                integral = _sum_type(types, agg) == "bigint"
                out = F.when(n > 0, s.cast("bigint" if integral else "double"))
        elif func in ("min", "max"):
            out = F.col(_p(agg, "m"))
        elif func == "count_distinct":
            out = F.size(_p(agg, "d")).cast("bigint")
        elif func == "approx_count_distinct":
            out = F.coalesce(F.hll_sketch_estimate(_p(agg, "h")), F.lit(0)).cast("bigint")
        else:
            out = F.col(_p(agg, "r")).getField("v")
        cols.append(out.alias(agg.name))
    return cols
