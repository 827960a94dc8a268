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

from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.spec.model import AggregateSpec

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


def empty_partials(aggregates: Sequence[AggregateSpec]) -> dict[str, dict[str, str]]:
    """Per aggregate, the partials of "no record yet" (an aggregate added by an upgrade
    starts from these in windows already open). Merges are SQL aggregates that skip nulls,
    so an untyped null is empty for sums, extremes, sketches and first/last; counts are 0
    and distinct sets empty, so a window with no record for the new aggregate finalises to
    0 (count, count_distinct) or null (the others), as for a window of its own."""
    zeros: dict[str, dict[str, str]] = {}  # as SQL text
    for agg in aggregates:
        columns: dict[str, str] = {}
        for suffix in _suffixes(agg):
            if suffix == "n":
                columns[_p(agg, suffix)] = "CAST(0 AS BIGINT)"
            elif suffix == "d":
                columns[_p(agg, suffix)] = "array()"
            else:
                columns[_p(agg, suffix)] = "NULL"
        zeros[agg.name] = columns
    return zeros


def partial_names(aggregates: Sequence[AggregateSpec]) -> list[str]:
    """The partial columns, in state order."""
    return [_p(a, s) for a in aggregates for s in _suffixes(a)]


def _sum_type(types: dict[str, str], agg: AggregateSpec) -> str:
    """The exact type of a sum's partial: from its input column, or (folding stored partials)
    from the partial itself."""
    assert agg.column
    kind = types.get(agg.column) or types.get(_p(agg, "s"), EXACT_SUM)
    return "bigint" if kind in _INTEGRAL else EXACT_SUM


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def partial_columns(aggregates: Sequence[AggregateSpec], types: dict[str, str]) -> list[Column]:
    """Aggregations of one epoch's accepted rows into partials.

    The rows carry ``_ts_us`` (event time), ``_epoch``, ``_major`` and ``_line`` (position).
    ``types`` maps each input column to its Spark type (``DataFrame.dtypes``). Built as SQL
    text: one Py4J call each (sluice.operators.sqltext)."""
    return [F.expr(text) for text in partial_sql(aggregates, types)]


def partial_sql(aggregates: Sequence[AggregateSpec], types: dict[str, str]) -> list[str]:
    cols: list[str] = []
    for agg in aggregates:
        value = _q(agg.column) if agg.column else None
        func = agg.func
        if func == "count":
            cols.append(f"count({value or 1}) AS {_q(_p(agg, 'n'))}")
            continue
        assert value is not None and agg.column
        if func in ("sum", "avg"):
            cols.append(f"sum(CAST({value} AS {_sum_type(types, agg)})) AS {_q(_p(agg, 's'))}")
            cols.append(f"count({value}) AS {_q(_p(agg, 'n'))}")
        elif func in ("min", "max"):
            cols.append(f"{func}({value}) AS {_q(_p(agg, 'm'))}")
        elif func == "count_distinct":
            cols.append(f"array_sort(collect_set({value})) AS {_q(_p(agg, 'd'))}")
        elif func == "approx_count_distinct":
            native = types[agg.column] in _HLL_NATIVE
            arg = value if native else f"CAST({value} AS STRING)"
            cols.append(f"hll_sketch_agg({arg}, {HLL_LG_K}) AS {_q(_p(agg, 'h'))}")
        else:  # first / last
            ranked = (
                f"named_struct('t', _ts_us, 'e', _epoch, 'f', _major, 'l', _line, 'v', {value})"
            )
            pick = "min" if func == "first" else "max"
            cols.append(f"{pick}({ranked}) AS {_q(_p(agg, 'r'))}")
    return cols


def merge_columns(aggregates: Sequence[AggregateSpec], types: dict[str, str]) -> list[Column]:
    """Aggregations that merge partial rows (from state and from the epoch) into one."""
    return [F.expr(text) for text in merge_sql(aggregates, types)]


def merge_sql(aggregates: Sequence[AggregateSpec], types: dict[str, str]) -> list[str]:
    cols: list[str] = []
    for agg in aggregates:
        func = agg.func
        if func in ("count", "sum", "avg"):
            name = _q(_p(agg, "n"))
            cols.append(f"sum({name}) AS {name}")
        if func in ("sum", "avg"):
            name = _q(_p(agg, "s"))
            cols.append(f"CAST(sum({name}) AS {_sum_type(types, agg)}) AS {name}")
        elif func in ("min", "first"):
            name = _q(_p(agg, "m" if func == "min" else "r"))
            cols.append(f"min({name}) AS {name}")
        elif func in ("max", "last"):
            name = _q(_p(agg, "m" if func == "max" else "r"))
            cols.append(f"max({name}) AS {name}")
        elif func == "count_distinct":
            name = _q(_p(agg, "d"))
            cols.append(f"array_sort(array_distinct(flatten(collect_list({name})))) AS {name}")
        elif func == "approx_count_distinct":
            name = _q(_p(agg, "h"))
            cols.append(f"hll_union_agg({name}) AS {name}")
    return cols


def finalize_columns(aggregates: Sequence[AggregateSpec], types: dict[str, str]) -> list[Column]:
    """The user-facing aggregate columns, named as in the spec (SQL null semantics)."""
    return [F.expr(text) for text in finalize_sql(aggregates, types)]


def finalize_sql(aggregates: Sequence[AggregateSpec], types: dict[str, str]) -> list[str]:
    cols: list[str] = []
    for agg in aggregates:
        func = agg.func
        n, s = _q(_p(agg, "n")), _q(_p(agg, "s"))
        if func == "count":
            out = n
        elif func == "avg":
            out = f"CASE WHEN {n} > 0 THEN CAST({s} AS DOUBLE) / {n} END"
        elif func == "sum":
            integral = _sum_type(types, agg) == "bigint"
            out = f"CASE WHEN {n} > 0 THEN CAST({s} AS {'BIGINT' if integral else 'DOUBLE'}) END"
        elif func in ("min", "max"):
            out = _q(_p(agg, "m"))
        elif func == "count_distinct":
            out = f"CAST(size({_q(_p(agg, 'd'))}) AS BIGINT)"
        elif func == "approx_count_distinct":
            out = f"CAST(coalesce(hll_sketch_estimate({_q(_p(agg, 'h'))}), 0) AS BIGINT)"
        else:
            out = f"{_q(_p(agg, 'r'))}.v"
        cols.append(f"{out} AS {_q(agg.name)}")
    return cols
