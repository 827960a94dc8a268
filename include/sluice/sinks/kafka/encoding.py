"""The kafka sink's records: each staged or result row as a Kafka record (key, value,
headers) the way the spec asks, and the staged Parquet read back in the order every commit
publishes it (files by name, rows in file order), which is what lets a commit killed between
chunks resume at the first chunk not marked.

Keys: one column, its value as text; several, a JSON object of them; none, no key. Values:
the row as JSON (timestamps ISO-8601 in UTC), or one column as text or bytes; an upsert's
``_op = 'delete'`` row is a tombstone (no value)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sluice.spec.components.kafka_sink import KafkaSinkConfig
from sluice.storage import ObjectStore

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CHANGELOG_COLUMNS", "Record", "encode", "staged_records"]

CHANGELOG_COLUMNS = ("_op", "_epoch")
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]


def staged_records(
    store: ObjectStore, files: list[str], config: KafkaSinkConfig, skip: int = 0
) -> Iterator[Record]:
    """The staged rows as records, files by name, rows in file order, the first ``skip``
    left out (the chunks already published)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for key in files:
        table = pq.read_table(pa.BufferReader(store.get(key)))
        if skip >= table.num_rows:
            skip -= table.num_rows
            continue
        if skip:
            table = table.slice(skip)
            skip = 0
        yield from encode(table, config)


def encode(table: pa.Table, config: KafkaSinkConfig) -> Iterator[Record]:
    """Each row of ``table`` as a Kafka record (key, value, headers)."""
    value_columns = [c for c in table.column_names if c not in CHANGELOG_COLUMNS]
    keys = config.record_key
    upsert = config.mode == "upsert"
    for batch in _iso_columns(table).to_batches(max_chunksize=50_000):
        for row in batch.to_pylist():
            key = _key_bytes(row, keys)
            value: bytes | None
            if upsert and row.get("_op") == "delete":
                value = None  # a tombstone
            elif config.value == "json":
                body = {c: row[c] for c in value_columns}
                value = json.dumps(body, default=_json_default, separators=(",", ":")).encode()
            else:
                value = _value_bytes(row[config.value_column])
            headers = [(n, _text(row[c]).encode()) for n, c in config.headers
                       if row[c] is not None] or None  # fmt: skip
            yield key, value, headers


def _iso_columns(table: pa.Table) -> pa.Table:
    """``table`` with its timestamps, dates and times as ISO-8601 text, computed by Arrow (a
    Python ``isoformat`` per value costs more than the rest of the encoding): timestamps in
    UTC with ``+00:00`` (Spark's may come without a zone), fractions of a second only when
    there are some, as :meth:`datetime.isoformat` writes them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, field in enumerate(table.schema):
        kind = field.type
        if pa.types.is_timestamp(kind):
            utc = table.column(i).cast(pa.timestamp(kind.unit))  # zoned values are UTC inside
            text = pc.replace_substring(utc.cast(pa.string()), " ", "T", max_replacements=1)
            text = pc.replace_substring_regex(text, r"\.0+$", "")
            text = pc.binary_join_element_wise(text, pa.scalar("+00:00"), "")
        elif pa.types.is_date(kind) or pa.types.is_time(kind):
            text = table.column(i).cast(pa.string())
        else:
            continue
        table = table.set_column(i, field.name, text)
    return table


def _iso(value: dt.datetime | dt.date | dt.time) -> str:
    """ISO-8601; a timestamp in UTC (Spark's Parquet and Arrow may give it without a zone)."""
    if isinstance(value, dt.datetime):
        zoned = value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value
        return zoned.astimezone(dt.UTC).isoformat()
    return value.isoformat()


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return _iso(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return _iso(value)
    return json.dumps(value, default=_json_default)


def _key_bytes(row: Mapping[str, Any], keys: tuple[str, ...]) -> bytes | None:
    """One key column: its value as text; several: a JSON object of them; none: no key."""
    if not keys:
        return None
    if len(keys) == 1:
        value = row[keys[0]]
        return None if value is None else _text(value).encode()
    body = {k: row[k] for k in keys}
    return json.dumps(body, default=_json_default, separators=(",", ":")).encode()


def _value_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return _text(value).encode()
