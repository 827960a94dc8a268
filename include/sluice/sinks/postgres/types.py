"""The PostgreSQL column types the postgres sink creates a target with, from Spark's types."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.sinks.exceptions import PostgresSinkError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

__all__ = ["pg_type"]


def pg_type(column: str, dtype: DataType) -> str:
    """The PostgreSQL column type of a Spark type (the target table's, not staging's)."""
    from pyspark.sql import types as T

    simple: list[tuple[type, str]] = [
        (T.StringType, "text"),
        (T.IntegerType, "integer"),
        (T.LongType, "bigint"),
        (T.ShortType, "smallint"),
        (T.ByteType, "smallint"),
        (T.DoubleType, "double precision"),
        (T.FloatType, "real"),
        (T.BooleanType, "boolean"),
        (T.TimestampNTZType, "timestamp"),
        (T.TimestampType, "timestamptz"),
        (T.DateType, "date"),
        (T.BinaryType, "bytea"),
    ]
    for spark_type, pg in simple:
        if isinstance(dtype, spark_type):
            return pg
    if isinstance(dtype, T.DecimalType):
        return f"numeric({dtype.precision},{dtype.scale})"
    raise PostgresSinkError(
        f"column {column!r} has Spark type {dtype.simpleString()}, which the postgres sink "
        "cannot store; cast it (e.g. to string) in the pipeline"
    )
