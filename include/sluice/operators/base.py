"""What every operator implementation shares besides the contract
(:mod:`sluice.contracts.operators`): SQL quoting, the null-safe join and the side outputs'
columns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sluice.operators.exceptions import InvalidExpression

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from sluice.spec.model import PipelineSpec

__all__ = [
    "DEAD_DDL",
    "JOIN_LATE_DDL",
    "InvalidExpression",
    "late_ddl",
    "null_safe_join",
    "quoted",
    "where_keys",
]


def quoted(name: str) -> str:
    """A column name as Spark SQL text."""
    return "`" + name.replace("`", "``") + "`"


def null_safe_join(left: DataFrame, right: DataFrame, keys: list[str]) -> DataFrame:
    """Left join on ``keys`` where null equals null (a null key is a key like any other)."""
    from pyspark.sql import functions as F

    if not keys:
        return left.join(right, F.lit(True), "left")
    renamed = right.select(*[F.col(quoted(k)).alias(f"_r_{k}") for k in keys], *[
        c for c in right.columns if c not in keys
    ])  # fmt: skip
    cond: Column | Any = None
    for k in keys:
        term = F.col(quoted(k)).eqNullSafe(F.col(quoted(f"_r_{k}")))
        cond = term if cond is None else cond & term
    joined = left.join(renamed, cond, "left")
    return joined.drop(*[f"_r_{k}" for k in keys])


DEAD_DDL = (
    "pipeline string, epoch bigint, source string, file string, line bigint, raw string, "
    "reason_code string, reason string"
)


# A join pipeline's late records: its sides' records differ, so a late record is its side
# and its columns as JSON (sluice.joins.operator); every other pipeline's is a source record.
JOIN_LATE_DDL = (
    "side string, record string, window_start timestamp, window_end timestamp, "
    "watermark timestamp, source_file string, source_line bigint, epoch bigint"
)


def late_ddl(spec: PipelineSpec) -> str:
    """The late-records sink's columns (every operator's late frame has these): a late
    record's own columns (:attr:`PipelineSpec.late_record`), then where and when."""
    record = ", ".join(f"{quoted(c)} {t}" for c, t in spec.late_record)
    return (
        f"{record}, window_start timestamp, window_end timestamp, watermark timestamp, "
        "source_file string, source_line bigint, epoch bigint"
    )


def where_keys(frame: DataFrame, keys: Mapping[str, str] | None) -> DataFrame:
    """The rows whose columns equal ``keys`` (compared as text): ``sluice state --key``."""
    from pyspark.sql import functions as F

    for column, value in (keys or {}).items():
        frame = frame.where(F.col(quoted(column)).cast("string") == F.lit(value))
    return frame
