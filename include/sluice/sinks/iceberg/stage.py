"""The iceberg sink's stage: each attempt's rows as Parquet in the warehouse, under
``_sluice_staging/<pipeline>/<sink>/<epoch:012d>-<attempt>/`` (no catalog knows these files,
so no reader sees them), the handle that records it, and the stage read back with pyarrow by
the commit (no Spark there)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.sinks.staging import FieldsHandle
from sluice.storage import ObjectStore

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CHANGELOG_COLUMNS", "STAGING", "IcebergStaged", "read_stage"]

STAGING = "_sluice_staging"
CHANGELOG_COLUMNS = ("_op", "_epoch")


@dataclass(frozen=True)
class IcebergStaged(FieldsHandle):
    """An iceberg sink's handle: the table and the epoch's staged Parquet prefix in the
    warehouse (None: no rows staged; both None in the bare Prepared recovery aborts with)."""

    table: str | None = None
    staging: str | None = None


def read_stage(store: ObjectStore, prefix: str) -> pa.Table:
    """The staged rows (Spark's INT96 timestamps read as UTC microseconds)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for item in sorted(store.list(prefix), key=lambda i: i.key):
        if not item.key.endswith(".parquet"):
            continue
        data = io.BytesIO(store.get(item.key))
        parquet = pq.ParquetFile(data, coerce_int96_timestamp_unit="us")
        int96 = {c.name for c in parquet.schema if c.physical_type == "INT96"}
        table = parquet.read()
        for name in int96:  # Spark's TimestampType: an instant
            i = table.schema.get_field_index(name)
            table = table.set_column(i, name, table.column(i).cast(pa.timestamp("us", tz="UTC")))
        tables.append(table)
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="default")
