"""Spark SQL expressions as text, built with Python operators.

PySpark builds a ``Column`` through the JVM gateway: ``F.col("a") + F.lit(1)`` alone costs
27 Py4J round trips, and an epoch's plan has hundreds of such expressions (thousands of
round trips: the driver time of a small epoch). An expression written as text costs one
(``F.expr`` / ``selectExpr``). :class:`Sql` keeps the text, and its operators let one rule be
written once for Python ints (the driver's checks) and for Spark (the pass): see
:func:`sluice.operators.assigners.fmod`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Sql", "col", "lit", "when"]


def lit(value: Any) -> str:
    """A Python value as SQL text."""
    if isinstance(value, Sql):
        return value.text
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}L" if not -(2**31) <= value < 2**31 else str(value)
    if isinstance(value, float):
        return repr(value)
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


class Sql:
    """An expression as text. Comparison operators build SQL (no ``==``: use :meth:`eq`)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Sql({self.text!r})"

    def _op(self, op: str, other: Any, reverse: bool = False) -> Sql:
        a, b = (lit(other), self.text) if reverse else (self.text, lit(other))
        return Sql(f"({a} {op} {b})")

    def __add__(self, other: Any) -> Sql:
        return self._op("+", other)

    def __radd__(self, other: Any) -> Sql:
        return self._op("+", other, reverse=True)

    def __sub__(self, other: Any) -> Sql:
        return self._op("-", other)

    def __rsub__(self, other: Any) -> Sql:
        return self._op("-", other, reverse=True)

    def __mul__(self, other: Any) -> Sql:
        return self._op("*", other)

    def __le__(self, other: Any) -> Sql:
        return self._op("<=", other)

    def __lt__(self, other: Any) -> Sql:
        return self._op("<", other)

    def __ge__(self, other: Any) -> Sql:
        return self._op(">=", other)

    def __gt__(self, other: Any) -> Sql:
        return self._op(">", other)

    def __and__(self, other: Any) -> Sql:
        return self._op("AND", other)

    def __or__(self, other: Any) -> Sql:
        return self._op("OR", other)

    def __invert__(self) -> Sql:
        return Sql(f"(NOT {self.text})")

    def eq(self, other: Any) -> Sql:
        return self._op("=", other)

    def is_null(self) -> Sql:
        return Sql(f"({self.text} IS NULL)")

    def not_null(self) -> Sql:
        return Sql(f"({self.text} IS NOT NULL)")

    def alias(self, name: str) -> str:
        return f"{self.text} AS {quote(name)}"


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def col(name: str) -> Sql:
    return Sql(quote(name))


def call(function: str, *args: Any) -> Sql:
    return Sql(f"{function}({', '.join(lit(a) for a in args)})")


def when(*branches: tuple[Any, Any], otherwise: Any = None) -> Sql:
    """``CASE WHEN c1 THEN v1 ... ELSE otherwise END``."""
    parts = " ".join(f"WHEN {lit(c)} THEN {lit(v)}" for c, v in branches)
    tail = f" ELSE {lit(otherwise)}" if otherwise is not None else ""
    return Sql(f"(CASE {parts}{tail} END)")
