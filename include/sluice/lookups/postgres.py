"""``type: postgres``: a PostgreSQL table a connection reaches; a version is a copy of the
table's key and declared columns, taken when pinned into the checkpoint store
(``lookups/<lookup>/<epoch>-<digest>.parquet``); when its bytes equal the copy the plan the new
one starts from pinned, that copy is pinned again. Retention deletes the copies no kept plan
pins."""

from __future__ import annotations

import contextlib
import hashlib
import io
from typing import TYPE_CHECKING, Any

from sluice.contracts import layout
from sluice.contracts.lookups import LookupTable, PinRequest
from sluice.contracts.records import TablePin
from sluice.exceptions import TableUnavailable
from sluice.lookups.common import connection_url, pinned_now
from sluice.spec.types import arrow_type
from sluice.storage import ObjectAlreadyExists, open_store, to_spark_uri

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["PostgresTable"]

_BATCH_ROWS = 50_000  # rows of a database table fetched and written at a time
# the PostgreSQL type each declared type is read as (the copy then holds exactly that type)
_SQL_TYPES = {
    "string": "text",
    "int": "integer",
    "long": "bigint",
    "double": "double precision",
    "float": "real",
    "boolean": "boolean",
    "timestamp": "timestamptz",
    "date": "date",
}


class PostgresTable(LookupTable):
    type = "postgres"
    copies = True

    def pin(self, request: PinRequest) -> TablePin:
        """Copy the table's key and declared columns into the checkpoint store (or pin the
        copy ``request.before`` when the bytes are the same)."""
        data = _copy_bytes(request)
        digest = hashlib.sha256(data).hexdigest()
        store, before = request.copies, request.before
        if before is not None and before.kind == self.type and before.uri == store.root_uri:
            [(key, _)] = before.files
            if key.endswith(f"-{digest[:16]}.parquet"):
                return before  # an unchanged table: the copy the last plan pinned
        key = layout.lookup_copy_name(request.epoch, digest)
        # an earlier try of this plan may have written the same bytes under the same key
        with contextlib.suppress(ObjectAlreadyExists):
            store.put_if_absent(key, data)
        print_ = store.fingerprint(key)
        assert print_ is not None, key  # just written (or found written)
        return TablePin(store.root_uri, ((key, print_),), self.type)

    def check(self, pin: TablePin, s3: Any) -> Mapping[str, str]:
        return pinned_now(pin, s3)

    def read(self, spark: Any, pin: TablePin, s3: Any) -> Any:
        store = open_store(pin.uri, s3=s3)
        return spark.read.parquet(*[to_spark_uri(store.uri(k)) for k, _ in pin.files])

    def label(self, pin: TablePin) -> str:
        key = pin.files[-1][0].rsplit("/", 1)[-1] if pin.files else ""
        return f"copy of epoch {int(key.split('-', 1)[0])}"


def _copy_bytes(request: PinRequest) -> bytes:
    """The table's rows as Parquet: the ``on`` table columns (as the record columns' types),
    then the declared columns (as declared), ordered by the key."""
    import psycopg2
    import pyarrow as pa
    import pyarrow.parquet as pq
    from psycopg2 import sql

    lookup = request.lookup
    url = connection_url(request, "postgresql://user:password@host:5432/db")
    record_types = request.record_types
    wanted = _unique(
        [(t, record_types.get(r, "derived")) for r, t in lookup.on] + list(lookup.columns)
    )
    columns = []
    for name, kind in wanted:
        value: Any = sql.Identifier(name)
        if kind in _SQL_TYPES:
            value = sql.SQL("CAST({} AS {})").format(value, sql.SQL(_SQL_TYPES[kind]))
        columns.append(sql.SQL("{} AS {}").format(value, sql.Identifier(name)))
    keys = sql.SQL(", ").join(sql.Identifier(t) for _, t in lookup.on)
    table = sql.SQL(".").join(sql.Identifier(p) for p in str(lookup.table).split("."))
    query = sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
        sql.SQL(", ").join(columns), table, keys
    )
    arrow = {name: arrow_type(kind) if kind in _SQL_TYPES else None for name, kind in wanted}
    schema = None
    sink = io.BytesIO()
    writer = None
    try:
        conn = psycopg2.connect(url, connect_timeout=30)
        try:
            # a server-side cursor: the planner holds one batch of rows at a time, not the table
            with conn.cursor(name="sluice_lookup_copy") as cur:
                cur.itersize = _BATCH_ROWS
                cur.execute(query)
                while rows := cur.fetchmany(_BATCH_ROWS):
                    batch = pa.table(
                        {
                            name: pa.array([row[i] for row in rows], arrow[name])
                            for i, (name, _) in enumerate(wanted)
                        },
                        schema=schema,
                    )
                    if writer is None:
                        schema = batch.schema
                        writer = pq.ParquetWriter(sink, schema, compression="zstd")
                    writer.write_table(batch)
        finally:
            conn.close()
    except psycopg2.Error as exc:
        lines = str(exc).strip().splitlines()
        detail = lines[0] if lines else type(exc).__name__
        raise TableUnavailable(
            f"reading it failed: {detail}", "check the table and its columns", lookup.describe()
        ) from None
    if writer is None:  # an empty table: its columns, no row
        empty = {name: pa.array([], arrow[name] or pa.null()) for name, _ in wanted}
        pq.write_table(pa.table(empty), sink, compression="zstd")
    else:
        writer.close()
    return sink.getvalue()


def _unique(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for name, kind in pairs:
        seen.setdefault(name, kind)
    return list(seen.items())
