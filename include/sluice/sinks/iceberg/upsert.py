"""The iceberg sink's copy-on-write overwrites: an upsert epoch (the data files holding a
changed key rewritten without those rows, plus the epoch's upserted rows) and a rewind's first
epoch (every current data file replaced by the table as of an older snapshot, with the
epoch's changes). Each is one ``overwrite`` snapshot in the commit's transaction; keys match
null-safe (a null key matches a null key)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, cast

from sluice.sinks.iceberg.schema import conform, data_files

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table, Transaction

__all__ = ["replace", "upsert"]


def upsert(
    tx: Transaction, table: Table, changes: pa.Table, keys: list[str], summary: dict[str, str]
) -> None:
    """One overwrite snapshot: the files holding a changed key, rewritten without those
    rows, plus the epoch's upserted rows."""
    import pyarrow.compute as pc

    upserts = changes.filter(pc.equal(changes.column("_op"), "upsert"))
    counter = itertools.count()
    with tx.update_snapshot(snapshot_properties=summary).overwrite() as overwrite:
        if table.current_snapshot() is not None:
            for task in table.scan(row_filter=_key_filter(changes, keys)).plan_files():
                rows = _read_task(table, task)
                kept = _without_keys(rows, changes, keys)
                if kept.num_rows == rows.num_rows:
                    continue
                overwrite.delete_data_file(task.file)
                kept = conform(tx, kept)
                for file in data_files(tx, kept, overwrite.commit_uuid, counter):
                    overwrite.append_data_file(file)
        for file in data_files(tx, conform(tx, upserts), overwrite.commit_uuid, counter):
            overwrite.append_data_file(file)


def replace(
    tx: Transaction,
    table: Table,
    base: int | bool | None,
    changes: pa.Table | None,
    keys: list[str] | None,
    summary: dict[str, str],
) -> None:
    """One overwrite snapshot: every current data file out; the table as of snapshot
    ``base`` (None or False: empty) plus this epoch's rows in (``keys``, an upsert's: its
    changed keys replaced, its deletes dropped)."""
    import pyarrow.compute as pc

    counter = itertools.count()
    rows = None
    if isinstance(base, int) and not isinstance(base, bool):
        rows = conform(tx, table.scan(snapshot_id=base).to_arrow())
    if changes is not None:
        if keys is not None:
            if rows is not None:
                rows = _without_keys(rows, changes, keys)
            changes = changes.filter(pc.equal(changes.column("_op"), "upsert"))
        added = conform(tx, changes)
        rows = added if rows is None else _concat(rows, added)
    with tx.update_snapshot(snapshot_properties=summary).overwrite() as overwrite:
        if table.current_snapshot() is not None:
            for task in table.scan().plan_files():
                overwrite.delete_data_file(task.file)
        for file in data_files(tx, rows, overwrite.commit_uuid, counter):
            overwrite.append_data_file(file)


def _concat(a: pa.Table, b: pa.Table) -> pa.Table:
    import pyarrow as pa

    return pa.concat_tables([a, b.select(a.column_names).cast(a.schema)])


def _read_task(table: Table, task: Any) -> pa.Table:
    """One planned data file's rows in the table's current schema."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    return scan.to_table([task])


def _key_filter(changes: pa.Table, keys: list[str]) -> Any:
    """A filter that prunes data files by their column bounds: ``key IN (values)`` for the
    key with the fewest distinct changed values (nulls: ``OR key IS NULL``)."""
    import pyarrow.compute as pc
    from pyiceberg.expressions import AlwaysTrue, In, IsNull, Or

    best: tuple[int, str, list[Any], bool] | None = None
    for key in keys:
        column = changes.column(key)
        values = pc.unique(pc.drop_null(column)).to_pylist()
        if best is None or len(values) < best[0]:
            best = (len(values), key, values, column.null_count > 0)
    if best is None or best[0] > 1000:
        return AlwaysTrue()
    _, key, values, nulls = best
    # (pyiceberg's predicates take the term positionally; its pydantic types say otherwise)
    in_, is_null = cast(Any, In), cast(Any, IsNull)
    expr: Any = in_(key, values) if values else None
    if nulls:
        expr = is_null(key) if expr is None else Or(expr, is_null(key))
    return expr if expr is not None else AlwaysTrue()


def _without_keys(rows: pa.Table, changes: pa.Table, keys: list[str]) -> pa.Table:
    """``rows`` minus those whose key (null-safe: a null matches a null) is in ``changes``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if rows.num_rows == 0 or changes.num_rows == 0:
        return rows
    left: dict[str, Any] = {"__row": pa.array(range(rows.num_rows), pa.int64())}
    right: dict[str, Any] = {}
    on = []
    for i, key in enumerate(keys):
        a, b = rows.column(key), changes.column(key).cast(rows.column(key).type)
        left[f"__n{i}"], right[f"__n{i}"] = pc.is_null(a), pc.is_null(b)
        on.append(f"__n{i}")
        sample = pc.drop_null(pa.chunked_array([*a.chunks, *b.chunks], type=a.type))
        if len(sample):  # nulls filled with a value of the column: the flag tells them apart
            left[f"__v{i}"] = pc.fill_null(a, sample[0])
            right[f"__v{i}"] = pc.fill_null(b, sample[0])
            on.append(f"__v{i}")
    matched = pa.table(left).join(pa.table(right), keys=on, join_type="left semi")
    drop = pc.is_in(pa.array(range(rows.num_rows), pa.int64()), matched.column("__row"))
    return rows.filter(pc.invert(drop))
