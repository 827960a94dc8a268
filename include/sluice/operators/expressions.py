"""User expressions (``select:`` / ``filter:``) evaluated record by record, failures caught.

Spark 4 runs with ANSI SQL semantics: ``cast('abc' AS INT)``, ``1 / 0``, an overflow or
``raise_error(...)`` throws, and one such record would fail the whole epoch. A record whose
expression throws is a dead letter instead (reason ``expression_failed``), like a record that
does not parse; the rest of the epoch goes on.

:func:`guarded` wraps an expression as ``transform(array(0), _ -> TryEval(struct(expr)))[0]``:

* ``TryEval`` (the Catalyst expression behind Spark's own ``try_*`` functions) turns an
  exception into NULL; wrapping the value in a struct first makes that NULL mean *failed*,
  never *the value was NULL*;
* the higher-order function around it is evaluated without code generation, so Spark's
  common-subexpression elimination cannot hoist a shared part of the expression (say
  ``cast(s AS INT)`` used in two ``select`` columns) out of the ``try`` — it does not look
  inside such expressions.

``TryEval`` has no SQL name, so it is built through the JVM gateway of a classic (non
Connect) session; :class:`ExpressionGuardUnavailable` says so if there is none.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from sluice.operators.exceptions import ExpressionGuardUnavailable

__all__ = ["ExpressionGuardUnavailable", "failure_reason", "guarded"]

EXPRESSION_FAILED = "expression_failed"


def guarded(spark: SparkSession, expression: Column, pipeline: str) -> Column:
    """A struct column ``{v: expression}`` that is NULL exactly when evaluating
    ``expression`` on that record raised."""
    try:
        jvm: Any = spark._jvm
        utils = jvm.org.apache.spark.sql.classic.ExpressionUtils
        inner = utils.expression(F.struct(expression.alias("v"))._jc)
        tried = Column(utils.column(jvm.org.apache.spark.sql.catalyst.expressions.TryEval(inner)))
    except (AttributeError, TypeError) as exc:
        raise ExpressionGuardUnavailable(pipeline, f"{type(exc).__name__}: {exc}") from exc
    return F.transform(F.array(F.lit(0)), lambda _: tried)[0]


def failure_reason(field: str, expression: str) -> str:
    """The dead letter's ``_error`` for a record whose ``field`` expression raised."""
    return (
        f"{EXPRESSION_FAILED}: {field} = {expression!r} raised an error for this record "
        "(e.g. an invalid cast, a division by zero or an overflow; Spark SQL is ANSI)"
    )
