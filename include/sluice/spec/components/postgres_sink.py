"""``type: postgres``: a table written through a connection id (docs/sinks.md)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator

from sluice.spec.components.base import NAME_RE, Text, problem
from sluice.spec.components.sinks import BuiltinSink, sink_name

if TYPE_CHECKING:
    pass

__all__ = ["PostgresSinkConfig"]

_TABLE_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*\.)?[A-Za-z_][A-Za-z0-9_]*\Z")


def _table(value: Any) -> Any:
    if isinstance(value, str) and value.strip() and not _TABLE_RE.match(value):
        raise problem(f"{value!r} is not a table name", "e.g. public.clicks")
    return value


def _connection(value: Any) -> Any:
    if isinstance(value, str) and value.strip() and not NAME_RE.match(value.lower()):
        raise problem(
            f"{value!r} is not a connection id",
            "letters, digits and '_', e.g. sluice_postgres (see docs/sinks.md)",
        )
    return value


class PostgresSinkConfig(BuiltinSink):
    name: Annotated[str, BeforeValidator(sink_name)]
    type: Literal["postgres"] = "postgres"
    table: Annotated[Text, BeforeValidator(_table)]  # [schema.]table
    connection: Annotated[Text, BeforeValidator(_connection)]  # a connection id

    REQUIRED_FIX: ClassVar = {
        "table": "add it, e.g. public.clicks",
        "connection": "add it: a connection id, e.g. sluice_postgres",
    }

    def table_ref(self) -> tuple[str, str, str]:
        schema, _, table = self.table.rpartition(".")
        return self.connection, schema or "public", table

    def output_ref(self) -> str:
        connection, schema, table = self.table_ref()
        return f"sluice-postgres://{connection.lower()}/{schema.lower()}/{table.lower()}"

    def connection_ids(self) -> tuple[str, ...]:
        return (self.connection,)

    def describe(self) -> str:
        return f"postgres table {self.table} via {self.connection}"
