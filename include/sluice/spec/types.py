"""Data types written in a spec (keyed state, function output), parsed without Spark.

The syntax is Spark's DDL for the types Sluice carries: ``string``, ``int``, ``long``,
``double``, ``float``, ``boolean``, ``timestamp``, ``date``, ``binary`` (``bigint``,
``integer`` and ``bool`` are accepted aliases), ``array<T>``, ``map<K, V>`` and
``struct<name: T, ...>``. :func:`parse_type` returns a canonical string (what the state shape
stores, so equal types compare equal however they were written); :func:`arrow_type` gives the
pyarrow type.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sluice.spec.exceptions import InvalidType

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["InvalidType", "arrow_type", "parse_type", "spark_ddl"]

PRIMITIVES = {
    "string": "string",
    "int": "int",
    "integer": "int",
    "long": "long",
    "bigint": "long",
    "double": "double",
    "float": "float",
    "boolean": "boolean",
    "bool": "boolean",
    "timestamp": "timestamp",
    "date": "date",
    "binary": "binary",
}
_TOKEN = re.compile(r"\s*(<|>|,|:|[A-Za-z_][A-Za-z0-9_]*)")


def parse_type(text: str) -> str:
    """The canonical form of ``text`` (e.g. ``struct<count:long,sum:long>``)."""
    parser = _Parser(text)
    result = parser.type()
    parser.end()
    return result


def spark_ddl(canonical: str) -> str:
    """Spark DDL for a canonical type (struct field names quoted)."""
    return re.sub(r"(?<=[<,])([A-Za-z_][A-Za-z0-9_]*):", r"`\1`:", canonical)


def arrow_type(canonical: str) -> pa.DataType:
    import pyarrow as pa

    def build(node: tuple) -> pa.DataType:
        kind = node[0]
        if kind == "array":
            return pa.list_(build(node[1]))
        if kind == "map":
            return pa.map_(build(node[1]), build(node[2]))
        if kind == "struct":
            return pa.struct([pa.field(n, build(t)) for n, t in node[1]])
        return {
            "string": pa.string(),
            "int": pa.int32(),
            "long": pa.int64(),
            "double": pa.float64(),
            "float": pa.float32(),
            "boolean": pa.bool_(),
            "timestamp": pa.timestamp("us", tz="UTC"),
            "date": pa.date32(),
            "binary": pa.binary(),
        }[kind]

    parser = _Parser(canonical)
    tree = parser.tree()
    parser.end()
    return build(tree)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = _TOKEN.match(text, pos)
            if not match:
                raise InvalidType(
                    f"unexpected {text[pos:].strip()[:10]!r} in {text!r}", text=self.text
                )
            self.tokens.append(match.group(1))
            pos = match.end()
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None:
            raise InvalidType(f"{self.text!r} ends too early", text=self.text)
        if expected is not None and token != expected:
            raise InvalidType(
                f"expected {expected!r}, found {token!r} in {self.text!r}", text=self.text
            )
        self.at += 1
        return token

    def end(self) -> None:
        if self.peek() is not None:
            raise InvalidType(
                f"unexpected {self.peek()!r} after the type in {self.text!r}", text=self.text
            )

    def tree(self) -> tuple:
        name = self.take().lower()
        if name == "array":
            self.take("<")
            element = self.tree()
            self.take(">")
            return ("array", element)
        if name == "map":
            self.take("<")
            key = self.tree()
            self.take(",")
            value = self.tree()
            self.take(">")
            if key[0] in ("array", "map", "struct"):
                raise InvalidType(
                    f"map keys must be a simple type in {self.text!r}", text=self.text
                )
            return ("map", key, value)
        if name == "struct":
            self.take("<")
            fields: list[tuple[str, tuple]] = []
            while True:
                field = self.take()
                if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", field):
                    raise InvalidType(
                        f"{field!r} is not a field name in {self.text!r}", text=self.text
                    )
                if field in {f for f, _ in fields}:
                    raise InvalidType(
                        f"field {field!r} appears twice in {self.text!r}", text=self.text
                    )
                self.take(":")
                fields.append((field, self.tree()))
                separator = self.take()
                if separator == ">":
                    break
                if separator != ",":
                    raise InvalidType(
                        f"expected ',' or '>', found {separator!r} in {self.text!r}", text=self.text
                    )
            return ("struct", tuple(fields))
        if name not in PRIMITIVES:
            raise InvalidType(
                f"unknown type {name!r} in {self.text!r}; use one of "
                f"{sorted(set(PRIMITIVES.values()))}, array<T>, map<K, V> or struct<name: T, ...>",
                text=self.text,
            )
        return (PRIMITIVES[name],)

    def type(self) -> str:
        return _render(self.tree())


def _render(node: tuple) -> str:
    if node[0] == "array":
        return f"array<{_render(node[1])}>"
    if node[0] == "map":
        return f"map<{_render(node[1])},{_render(node[2])}>"
    if node[0] == "struct":
        return "struct<" + ",".join(f"{n}:{_render(t)}" for n, t in node[1]) + ">"
    return str(node[0])
