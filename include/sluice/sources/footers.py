"""The column types of Parquet files, from their footers, read on the driver.

Spark infers a Parquet schema with a job of its own (``mergeSchema`` reads every footer on the
executors): a Spark job and two planning rounds in every epoch, most of the fixed cost of a
small one. The footers are a few KB at the end of each file, so the files source reads them
itself (one suffix range read per file) and hands Spark the merged schema.

Only types whose Spark equivalent is certain are mapped (tests/sources/test_footers.py checks
each against Spark's own inference); anything else — an unmapped type, two files disagreeing
on a column, a footer that does not parse — returns None and Spark infers as before.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from sluice.storage import StorageError

if TYPE_CHECKING:
    from sluice.storage import ObjectStore

__all__ = ["spark_type", "stored_types"]

MAGIC = b"PAR1"
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


def stored_types(store: ObjectStore, keys: list[str]) -> dict[str, str] | None:
    """``{column: Spark type}`` over the Parquet files ``keys`` in first-seen order (as
    Spark's merged schema), or None when Spark should infer it (see the module docstring)."""
    if not keys:
        return None
    with ThreadPoolExecutor(max_workers=min(8, len(keys))) as pool:
        schemas = list(pool.map(lambda key: _footer_schema(store, key), keys))
    merged: dict[str, str] = {}
    folded: dict[str, str] = {}  # Spark matches Parquet columns case-insensitively
    for schema in schemas:
        if schema is None:
            return None
        for field in schema:
            kind = spark_type(field.type)
            if kind is None or merged.setdefault(field.name, kind) != kind:
                return None
            if folded.setdefault(field.name.lower(), field.name) != field.name:
                return None
    return merged


def _footer_schema(store: ObjectStore, key: str) -> pa.Schema | None:
    """The Arrow schema in ``key``'s footer (``... footer, 4-byte length, PAR1``)."""
    try:
        tail = store.get_tail(key, FIRST_READ)
        if len(tail) < 12 or tail[-4:] != MAGIC:
            return None  # not Parquet, or an encrypted footer ("PARE"): Spark says what
        length = int.from_bytes(tail[-8:-4], "little")
        if length + 8 > len(tail):
            tail = store.get_tail(key, length + 8)
        return pq.read_schema(pa.BufferReader(tail[-(length + 8) :]))
    except (StorageError, pa.ArrowException, OSError):
        return None  # Spark's own read reports a vanished or broken file
