"""``type: iceberg``: an Apache Iceberg table in a catalog reached through a connection id
(docs/iceberg.md)."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator

from sluice.spec.components.base import NAME_RE, Text, problem
from sluice.spec.components.sinks import BuiltinSink, partition_columns, sink_name
from sluice.storage import storage_uri_problem

__all__ = ["DEFAULT_CATALOG_NAME", "IcebergSinkConfig"]

# The name a SQL catalog files the sink's tables under (its ``catalog_name`` column): a reader
# of the same catalog database must open the catalog under this name to see them.
DEFAULT_CATALOG_NAME = "sluice"
_PART = r"[A-Za-z_][A-Za-z0-9_]*"
_CATALOG_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+\Z")
_TABLE_RE = re.compile(rf"^{_PART}(\.{_PART})*\.{_PART}\Z")


def _table(value: Any) -> Any:
    if isinstance(value, str) and value.strip() and not _TABLE_RE.match(value):
        raise problem(
            f"{value!r} is not an Iceberg table name", "namespace.table, e.g. lake.clicks"
        )
    return value


def _connection(value: Any) -> Any:
    if isinstance(value, str) and value.strip() and not NAME_RE.match(value.lower()):
        raise problem(
            f"{value!r} is not a connection id",
            "letters, digits and '_', e.g. iceberg_catalog (see docs/iceberg.md)",
        )
    return value


def _catalog_name(value: Any) -> Any:
    if not isinstance(value, str) or not _CATALOG_NAME_RE.match(value):
        raise problem(
            f"{value!r} is not a catalog name",
            "letters, digits, '_', '.' and '-': the name your readers give the catalog, "
            f"e.g. catalog_name: {DEFAULT_CATALOG_NAME} (see docs/iceberg.md)",
        )
    return value


def _warehouse(value: Any) -> Any:
    if isinstance(value, str) and value.strip():
        reason = storage_uri_problem(value)
        if reason is not None:
            raise problem(f"{value!r}: {reason}", "a local path or s3://bucket/prefix")
    return value


class IcebergSinkConfig(BuiltinSink):
    name: Annotated[str, BeforeValidator(sink_name)]
    type: Literal["iceberg"] = "iceberg"
    table: Annotated[Text, BeforeValidator(_table)]  # namespace.table
    connection: Annotated[Text, BeforeValidator(_connection)]  # the catalog's connection id
    # where a SQL catalog puts new tables, and where every catalog's staged epochs wait
    warehouse: Annotated[Text, BeforeValidator(_warehouse)]
    partition_by: Annotated[tuple[str, ...], BeforeValidator(partition_columns)] = ()
    # the catalog's name as its readers open it (a SQL catalog keeps it with every table)
    catalog_name: Annotated[str, BeforeValidator(_catalog_name)] = DEFAULT_CATALOG_NAME

    REQUIRED_FIX: ClassVar = {
        "table": "add it: namespace.table, e.g. lake.clicks",
        "connection": "add it: a connection id whose URI is the catalog, e.g. iceberg_catalog",
        "warehouse": "add it: a local path or s3://bucket/prefix, e.g. s3://lake/warehouse",
    }

    def identifier(self) -> tuple[str, str]:
        """(namespace, table); the namespace may hold dots (nested namespaces)."""
        namespace, _, table = self.table.rpartition(".")
        return namespace, table

    def table_ref(self) -> tuple[str, str, str]:
        return self.connection, *self.identifier()

    def output_ref(self) -> str:
        namespace, table = self.identifier()
        return f"sluice-iceberg://{self.connection.lower()}/{namespace}/{table}"

    def partitioned_by(self) -> tuple[str, ...]:
        return self.partition_by

    def connection_ids(self) -> tuple[str, ...]:
        return (self.connection,)

    def describe(self) -> str:
        return f"iceberg table {self.table} via {self.connection}"
