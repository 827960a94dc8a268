"""The version of each lookup table a new plan joins (docs/joins.md, "Table types").

==========  ===========================================================================
files       the folder's data files now, with their fingerprints (names starting with
            ``_`` or ``.`` are not data: ``_SUCCESS``, a writer's ``_temporary``)
delta       the newest commit: ``_delta_log/<version>.json`` with its fingerprint
postgres    a copy of the table's key and declared columns, taken now into the checkpoint
            store (``lookups/<lookup>/<epoch>-<digest>.parquet``); when its bytes equal the
            copy the plan this one starts from pinned, that copy is pinned again
iceberg     the table's metadata file the catalog points to now (its current snapshot)
==========  ===========================================================================

A table without a version (an empty folder, no Delta log, no such database table) is
refused: a wrong path would otherwise join every record to nothing. Copies no kept plan pins
are deleted by retention (:func:`stale_copies`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
from typing import TYPE_CHECKING, Any

from sluice.contracts import layout
from sluice.contracts.records import Checkpoint, Plan, TablePin
from sluice.protocol.exceptions import ProtocolError
from sluice.spec.types import arrow_type
from sluice.storage import ObjectAlreadyExists, open_store

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sluice.protocol.runtime import Runtime
    from sluice.spec.model import LookupSpec

__all__ = ["stale_copies", "table_pins"]

_BATCH_ROWS = 50_000  # rows of a database table fetched and written at a time
_DELTA_COMMIT = re.compile(r"^_delta_log/\d{20}\.json$")  # a Delta version's commit file
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


def table_pins(
    rt: Runtime, epoch: int, base: Checkpoint | None
) -> tuple[tuple[str, TablePin], ...]:
    """Each lookup's pin for the new plan of ``epoch`` (``base``: the checkpoint it starts
    from, whose copies an unchanged database table reuses)."""
    before = dict(base.plan.tables) if base is not None else {}
    pins = []
    for lookup in rt.spec.lookup:
        if lookup.table_type == "postgres":
            pin = _copy(rt, lookup, epoch, before.get(lookup.name))
        elif lookup.table_type == "iceberg":
            pin = _iceberg_pin(rt, lookup, epoch)
        else:
            pin = _storage_pin(rt, lookup, epoch)
        pins.append((lookup.name, pin))
    return tuple(pins)


def _storage_pin(rt: Runtime, lookup: LookupSpec, epoch: int) -> TablePin:
    store = open_store(lookup.path, s3=rt.spec.s3)
    if lookup.table_type == "delta":
        commits = sorted(i.key for i in store.list("_delta_log/") if _DELTA_COMMIT.match(i.key))
        files = tuple(
            (key, print_) for key in commits[-1:] if (print_ := store.fingerprint(key)) is not None
        )
        what = "Delta table (no _delta_log/<version>.json)"
    else:
        suffix = f".{lookup.format}"
        files = tuple(
            sorted(
                (key, print_)
                for key, print_ in store.fingerprints("").items()
                if key.endswith(suffix) and not any(s[0] in "_." for s in key.split("/"))
            )
        )
        what = f"{lookup.format} files"
    if not files:
        raise ProtocolError(
            f"pipeline {rt.name}: epoch {epoch}: lookup {lookup.name}: no {what} under "
            f"{store.root_uri}; write the table there or fix lookup.path"
        )
    return TablePin(store.root_uri, files, lookup.table_type)


def _copy(rt: Runtime, lookup: LookupSpec, epoch: int, before: TablePin | None) -> TablePin:
    """Copy the table's key and declared columns into the checkpoint store (or pin the copy
    ``before`` when the bytes are the same)."""
    data = _copy_bytes(rt, lookup, epoch)
    digest = hashlib.sha256(data).hexdigest()
    store = rt.repo.store.child(layout.lookup_copies(lookup.name))
    if before is not None and before.kind == "postgres" and before.uri == store.root_uri:
        [(key, _)] = before.files
        if key.endswith(f"-{digest[:16]}.parquet"):
            return before  # an unchanged table: the copy the last plan pinned
    key = layout.lookup_copy_name(epoch, digest)
    # an earlier try of this plan may have written the same bytes under the same key
    with contextlib.suppress(ObjectAlreadyExists):
        store.put_if_absent(key, data)
    print_ = store.fingerprint(key)
    assert print_ is not None, key  # just written (or found written)
    return TablePin(store.root_uri, ((key, print_),), "postgres")


def _copy_bytes(rt: Runtime, lookup: LookupSpec, epoch: int) -> bytes:
    """The table's rows as Parquet: the ``on`` table columns (as the record columns' types),
    then the declared columns (as declared), ordered by the key."""
    import psycopg2
    import pyarrow as pa
    import pyarrow.parquet as pq
    from psycopg2 import sql

    refuse = _refusal(rt, lookup, epoch)
    url = _url(rt, lookup, refuse, "postgresql://user:password@host:5432/db")
    record_types = rt.spec.record_types()
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
        raise refuse(f"reading it failed: {detail}", "check the table and its columns") from None
    if writer is None:  # an empty table: its columns, no row
        empty = {name: pa.array([], arrow[name] or pa.null()) for name, _ in wanted}
        pq.write_table(pa.table(empty), sink, compression="zstd")
    else:
        writer.close()
    return sink.getvalue()


def _iceberg_pin(rt: Runtime, lookup: LookupSpec, epoch: int) -> TablePin:
    """The metadata file of the table's current snapshot (a new one each commit)."""
    from sluice.storage.catalogs import open_catalog

    refuse = _refusal(rt, lookup, epoch)
    url = _url(rt, lookup, refuse, "http://catalog:8181 or postgresql://... (docs/iceberg.md)")
    *namespace, name = str(lookup.table).split(".")
    try:
        table = open_catalog(url, None, rt.spec.s3).load_table((*namespace, name))
    except Exception as exc:  # pyiceberg's: no such table, catalog unreachable...
        lines = str(exc).strip().splitlines()
        detail = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        raise refuse(f"loading it failed: {detail}", "check the table and the catalog") from None
    if table.current_snapshot() is None:
        raise refuse("it has no snapshot (no data was ever committed)", "write the table first")
    folder, _, key = str(table.metadata_location).rpartition("/")
    store = open_store(folder, s3=rt.spec.s3)
    print_ = store.fingerprint(key)
    files = ((key, print_),) if print_ is not None else ()
    if not files:
        raise refuse(f"its metadata file {table.metadata_location} is missing", "check the table")
    return TablePin(store.root_uri, files, "iceberg")


def _refusal(rt: Runtime, lookup: LookupSpec, epoch: int) -> Callable[[str, str], ProtocolError]:
    def refuse(problem: str, fix: str) -> ProtocolError:
        return ProtocolError(
            f"pipeline {rt.name}: epoch {epoch}: lookup {lookup.name} "
            f"({lookup.describe()}): {problem}; {fix}"
        )

    return refuse


def _url(
    rt: Runtime, lookup: LookupSpec, refuse: Callable[[str, str], ProtocolError], example: str
) -> str:
    url = rt.connections.get(lookup.connection or "")
    if url is None:
        raise refuse(
            f"connection {lookup.connection!r} is not defined",
            f"define it (an Airflow connection, or SLUICE_CONN_{str(lookup.connection).upper()}"
            f"={example})",
        )
    return url


def _unique(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for name, kind in pairs:
        seen.setdefault(name, kind)
    return list(seen.items())


def stale_copies(rt: Runtime, below: int, plans: Iterable[Plan]) -> list[str]:
    """The table copies (keys under the checkpoint store) taken by plans below ``below`` that
    none of ``plans`` (every plan that may still run or be replayed) pins."""
    pinned = {
        layout.lookup_copies(name) + key
        for plan in plans
        for name, pin in plan.tables
        if pin.kind == "postgres"
        for key, _ in pin.files
    }
    return [
        info.key
        for info in rt.repo.store.list(layout.LOOKUPS)
        if (owner := layout.lookup_copy_epoch(info.key)) is not None
        and owner < below
        and info.key not in pinned
    ]
