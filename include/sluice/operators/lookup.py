"""Lookup joins (docs/joins.md): each record enriched from the row of a table whose key
columns equal the record's, the table read exactly as the epoch's plan pinned it.

The plan pins each table's files with their fingerprints (:class:`TablePin`); the process
step reads that version only, as the pin's kind reads it (:mod:`sluice.lookups`), checks its
files are unchanged before and after reading them (a retry joins what the first attempt
joined, or refuses to run), checks the declared columns
and types and that no key is in two rows, and keeps the rows in memory for the Spark
context (a warm process reads an unchanged table once). The join is a broadcast hash join
of the records with the table: it streams each task's records in their order, which the
watermarks' running maxima rely on (:mod:`sluice.operators.records`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.sql import functions as F

from sluice.contracts.sources import SPARK_TYPES
from sluice.jvm.context import context_cache
from sluice.operators.base import quoted
from sluice.operators.exceptions import LookupTableError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pyspark.sql import DataFrame, SparkSession

    from sluice.contracts.lookups import LookupTable
    from sluice.contracts.records import TablePin
    from sluice.spec.model import LookupSpec, PipelineSpec

__all__ = ["check_pin", "join_lookups", "lookup_tables"]


def _key(lookup: LookupSpec, i: int) -> str:
    """The table's ``i``-th key column as the join sees it (named apart per lookup)."""
    return f"_lk_{lookup.name}_{i}"


def _matched(lookup: LookupSpec) -> str:
    """The table row's marker: null after the join where no row matched."""
    return f"_lm_{lookup.name}"


# Spark's type names (DataType.simpleString) each declared type accepts, the first as is,
# the others widened by a cast that cannot fail
_ACCEPTS = {
    "string": ("string",),
    "int": ("int", "smallint", "tinyint"),
    "long": ("bigint", "int", "smallint", "tinyint"),
    "double": ("double", "float", "bigint", "int", "smallint", "tinyint"),
    "float": ("float", "smallint", "tinyint"),
    "boolean": ("boolean",),
    "timestamp": ("timestamp", "timestamp_ntz"),
    "date": ("date",),
}


def lookup_tables(
    spark: SparkSession,
    spec: PipelineSpec,
    pins: Mapping[str, TablePin],
    epoch: int,
    kinds: Mapping[str, LookupTable],
) -> dict[str, DataFrame]:
    """Each lookup's table as pinned (cached per Spark context and version), read by the
    pin's kind (``kinds``, by type): its key columns ``_lk_<lookup>_0..``, the declared
    columns, and ``_lm_<lookup>`` (true)."""
    cache = context_cache(spark, "lookup tables")
    tables = {}
    for lookup in spec.lookup:
        pin = pins.get(lookup.name)
        if pin is None:
            raise LookupTableError(
                spec.name,
                epoch,
                lookup.name,
                lookup.path or lookup.describe(),
                "the epoch's plan pins no version of it (planned before the lookup was added)",
                "let this epoch commit under the spec it was planned with, then add the lookup",
            )
        key = (spec.name, lookup, pin.version)
        frame = cache.get(key)
        if frame is None:
            # a version no epoch reads again (``sluice serve`` runs other pipelines' epochs
            # beside this one: a snapshot of the keys, each popped once)
            for old in [k for k in list(cache) if k[:2] == key[:2]]:
                stale = cache.pop(old, None)
                if stale is not None:
                    stale.unpersist()
            frame = cache[key] = _read(spark, spec, lookup, pin, epoch, kinds)
        tables[lookup.name] = frame
    return tables


def _read(
    spark: SparkSession,
    spec: PipelineSpec,
    lookup: LookupSpec,
    pin: TablePin,
    epoch: int,
    kinds: Mapping[str, LookupTable],
) -> DataFrame:
    refuse = _refusal(spec, lookup, pin, epoch)
    check_pin(spec, lookup, pin, epoch, kinds)
    frame = kinds[pin.kind].read(spark, pin, spec.s3)
    found = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    record_types = spec.record_types()
    columns = []
    for i, (record_column, table_column) in enumerate(lookup.on):
        if table_column not in found:
            raise refuse(
                f"the table has no column {table_column!r} (lookup.on)",
                f"its columns: {sorted(found)}",
            )
        kind = record_types.get(record_column, "derived")
        cast = SPARK_TYPES.get(kind) if kind in _ACCEPTS else None
        if cast is not None and found[table_column] not in _ACCEPTS[kind]:
            raise refuse(
                f"key column {table_column!r} is {found[table_column]}, the record's "
                f"{record_column!r} is {kind}",
                "store the key with the record column's type",
            )
        value = f"CAST({quoted(table_column)} AS {cast})" if cast else quoted(table_column)
        columns.append(f"{value} AS {_key(lookup, i)}")
    for column, kind in lookup.columns:
        if column not in found:
            raise refuse(
                f"the table has no column {column!r} (lookup.columns)",
                f"its columns: {sorted(found)}",
            )
        if found[column] not in _ACCEPTS[kind]:
            raise refuse(
                f"column {column!r} is {found[column]}, declared {kind}",
                "declare the table's type in lookup.columns",
            )
        columns.append(f"CAST({quoted(column)} AS {SPARK_TYPES[kind]}) AS {quoted(column)}")
    table = frame.selectExpr(*columns, f"true AS {_matched(lookup)}")
    table = table.persist(StorageLevel.MEMORY_AND_DISK)
    keys = [_key(lookup, i) for i in range(len(lookup.on))]
    # one Spark job per table version and Spark context (a warm process: once; a cold
    # epoch: each time), not per epoch's records: it also fills the cache the broadcast reads
    twice = table.groupBy(*keys).count().where("count > 1").limit(1).collect()
    if twice:
        shown = ", ".join(f"{t}={twice[0][i]!r}" for i, (_, t) in enumerate(lookup.on))
        table.unpersist()
        raise refuse(
            f"the key {shown} is in {twice[0]['count']} rows",
            "a lookup table holds one row per key",
        )
    check_pin(spec, lookup, pin, epoch, kinds)  # what was read is what the plan pinned
    return table


def _refusal(
    spec: PipelineSpec, lookup: LookupSpec, pin: TablePin, epoch: int
) -> Callable[[str, str], LookupTableError]:
    def refuse(problem: str, fix: str) -> LookupTableError:
        return LookupTableError(spec.name, epoch, lookup.name, pin.uri, problem, fix)

    return refuse


def check_pin(
    spec: PipelineSpec,
    lookup: LookupSpec,
    pin: TablePin,
    epoch: int,
    kinds: Mapping[str, LookupTable],
) -> None:
    """Refuse (:class:`LookupTableError`) a pin of another kind than the spec's table, or
    whose pinned files changed or are gone (as the pin's kind sees them now)."""
    refuse = _refusal(spec, lookup, pin, epoch)
    if pin.kind != lookup.table_type:
        raise refuse(
            f"the epoch's plan pinned a {pin.kind} table, the spec names a {lookup.table_type} one",
            "let this epoch commit under the spec it was planned with, then change the table",
        )
    now = kinds[pin.kind].check(pin, spec.s3)
    for key, print_ in pin.files:
        if key not in now:
            raise refuse(
                f"pinned file {key} is gone",
                "restore it; a rewind can join the tables as they are now instead (run "
                "request lookup_versions: current)",
            )
        if now[key] != print_:
            raise refuse(
                f"pinned file {key} changed since the epoch was planned ({print_} -> {now[key]})",
                "write a new table version as new files instead of rewriting them in place",
            )


def join_lookups(
    frame: DataFrame, spec: PipelineSpec, tables: Mapping[str, DataFrame]
) -> DataFrame:
    """``frame`` (the records after ``select:``) with every lookup's columns, and ``_lookup``:
    false where an inner lookup found no row (the record is then filtered out). The join
    conditions are SQL text: a few Py4J calls per lookup, not one per column reference."""
    matched, helpers = [], []
    for lookup in spec.lookup:
        keys = [_key(lookup, i) for i in range(len(lookup.on))]
        condition = " AND ".join(
            f"{quoted(column)} = {_key(lookup, i)}" for i, (column, _) in enumerate(lookup.on)
        )
        frame = frame.join(F.broadcast(tables[lookup.name]), F.expr(condition), "left")
        helpers += [*keys, _matched(lookup)]
        if lookup.how == "inner":
            matched.append(f"{_matched(lookup)} IS NOT NULL")
    inner = " AND ".join(matched) or "true"
    return frame.selectExpr("*", f"{inner} AS _lookup").drop(*helpers)
