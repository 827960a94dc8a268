"""What Sluice keeps on a Spark context: built once per context (a helper UDF, a parsed plan,
a window index) and reused by every epoch it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["context_cache"]


def context_cache(spark: SparkSession, name: str) -> dict[Any, Any]:
    """A dict kept on ``spark``'s SparkContext under ``name``: for what is built once per
    context and reused by every epoch (a new context starts empty, so nothing outlives the
    JVM objects it refers to)."""
    context: Any = spark.sparkContext
    caches: dict[str, dict[Any, Any]] | None = getattr(context, "_sluice_caches", None)
    if caches is None:
        caches = context._sluice_caches = {}
    return caches.setdefault(name, {})
