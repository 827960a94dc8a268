"""The column types of Parquet files, from their footers, read on the driver.

Spark infers a Parquet schema with a job of its own (``mergeSchema`` reads every footer on the
executors): a Spark job and two planning rounds in every epoch, most of the fixed cost of a
small one. The footers are a few KB at the end of each file, so the files source reads them
itself (one suffix range read per file) and hands Spark the merged schema.

A file Spark wrote carries Spark's own schema in its footer (what Spark reads back too); for
other files only types whose Spark equivalent is certain are mapped (tests/storage/test_footers.py
checks each against Spark's own inference); anything else — an unmapped type, two files disagreeing
on a column, a footer that does not parse — returns None and Spark infers as before.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from sluice.storage import StorageError

if TYPE_CHECKING:
    from sluice.storage import ObjectStore

__all__ = ["column_maxima", "ddl", "footers", "spark_type", "stored_types", "types_of"]

MAGIC = b"PAR1"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"  # what Spark reads back first
FIRST_READ = 64 * 1024  # most footers fit: one read per file
_SIMPLE = {
    pa.int8(): "tinyint",
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.bool_(): "boolean",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "binary",
    pa.large_binary(): "binary",
    pa.date32(): "date",
}


def spark_type(arrow: pa.DataType) -> str | None:
    """The type Spark reads a Parquet column of ``arrow`` type as (``DataFrame.dtypes``
    spelling), or None when not mapped here."""
    if pa.types.is_dictionary(arrow):
        arrow = arrow.value_type
    if arrow in _SIMPLE:
        return _SIMPLE[arrow]
    if pa.types.is_timestamp(arrow) and arrow.unit in ("ms", "us"):
        # isAdjustedToUTC (a zone) is Spark's TIMESTAMP, a local time its TIMESTAMP_NTZ
        return "timestamp" if arrow.tz is not None else "timestamp_ntz"
    return None


def footers(store: ObjectStore, keys: list[str]) -> list[pq.FileMetaData | None]:
    """The footer of each Parquet file (None where it cannot be read: Spark says why)."""
    if not keys:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(keys))) as pool:
        return list(pool.map(lambda key: _footer(store, key), keys))


def stored_types(store: ObjectStore, keys: list[str]) -> dict[str, str] | None:
    """``{column: Spark type}`` over the Parquet files ``keys`` in first-seen order (as
    Spark's merged schema), or None when Spark should infer it (see the module docstring)."""
    return types_of(footers(store, keys)) if keys else None


def types_of(metas: list[pq.FileMetaData | None]) -> dict[str, str] | None:
    """:func:`stored_types` of footers already read."""
    if not metas:
        return None
    found = [None if m is None else _schema_types(_arrow_schema(m)) for m in metas]
    merged: dict[str, str] = {}
    folded: dict[str, str] = {}  # Spark matches Parquet columns case-insensitively
    for types in found:
        if types is None:
            return None
        for name, kind in types.items():
            if merged.setdefault(name, kind) != kind:
                return None
            if folded.setdefault(name.lower(), name) != name:
                return None
    return merged


def ddl(types: dict[str, str]) -> str:
    """A reader schema (Spark DDL) of :func:`stored_types`' answer."""
    return ", ".join(f"`{name}` {kind}" for name, kind in types.items())


_UNIT_US = {"milliseconds": 1000, "microseconds": 1}


def column_maxima(metas: list[pq.FileMetaData | None], column: str) -> list[int | None]:
    """The largest value of timestamp ``column`` in each file, in microseconds, from the
    row groups' statistics (None: a file without usable statistics for it)."""
    return [None if m is None else _column_max(m, column) for m in metas]


def _arrow_schema(meta: pq.FileMetaData) -> pa.Schema:
    return meta.schema.to_arrow_schema().with_metadata(meta.metadata or {})


def _column_max(meta: pq.FileMetaData, column: str) -> int | None:
    schema = meta.schema
    index = next((i for i in range(len(schema)) if schema.column(i).path == column), None)
    if index is None or meta.num_row_groups == 0:
        return None
    logical = schema.column(index).logical_type
    if logical.type != "TIMESTAMP" or schema.column(index).physical_type != "INT64":
        return None
    unit = _UNIT_US.get(json.loads(logical.to_json()).get("timeUnit", ""))
    if unit is None:  # nanoseconds would be rounded: not a bound Spark agrees with
        return None
    best: int | None = None
    for group in range(meta.num_row_groups):
        chunk = meta.row_group(group).column(index)
        stats = chunk.statistics
        if stats is None or not stats.has_min_max:
            if chunk.num_values == 0:
                continue
            return None
        value = int.from_bytes(stats.max_raw, "little", signed=True) if isinstance(
            stats.max_raw, bytes) else int(stats.max_raw)  # fmt: skip
        best = value if best is None else max(best, value)
    return None if best is None else best * unit


def _schema_types(schema: pa.Schema) -> dict[str, str] | None:
    """Spark types of the columns of a footer's schema: the schema Spark wrote there itself
    (its row metadata, exact for any type: state snapshots), else mapped from Parquet's."""
    written = (schema.metadata or {}).get(SPARK_SCHEMA_KEY)
    if written is not None:
        from pyspark.sql.types import StructType, _parse_datatype_json_string

        struct = _parse_datatype_json_string(written.decode())
        if isinstance(struct, StructType) and all(map(_plain_names, struct.fields)):
            return {f.name: f.dataType.simpleString() for f in struct.fields}
        return None  # a nested name DDL would need quoted: let Spark read the footer
    types = {field.name: spark_type(field.type) for field in schema}
    return None if None in types.values() else types  # type: ignore[return-value]


def _plain_names(field: object) -> bool:
    """Whether every struct field nested in ``field``'s type has a name DDL takes unquoted."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    kind = getattr(field, "dataType", field)
    if isinstance(kind, StructType):
        return all(_IDENT.fullmatch(f.name) and _plain_names(f) for f in kind.fields)
    if isinstance(kind, ArrayType):
        return _plain_names(kind.elementType)
    if isinstance(kind, MapType):
        return _plain_names(kind.keyType) and _plain_names(kind.valueType)
    return True


def _footer(store: ObjectStore, key: str) -> pq.FileMetaData | None:
    """``key``'s footer (``... footer, 4-byte length, PAR1``)."""
    try:
        tail = store.get_tail(key, FIRST_READ)
        if len(tail) < 12 or tail[-4:] != MAGIC:
            return None  # not Parquet, or an encrypted footer ("PARE"): Spark says what
        length = int.from_bytes(tail[-8:-4], "little")
        if length + 8 > len(tail):
            tail = store.get_tail(key, length + 8)
        return pq.read_metadata(pa.BufferReader(tail[-(length + 8) :]))
    except (StorageError, pa.ArrowException, OSError):
        return None  # Spark's own read reports a vanished or broken file
