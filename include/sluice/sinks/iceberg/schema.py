"""The iceberg sink's schema work, inside the commit's transaction: a new table made from
the staged columns (every column optional, identity partitions), schema evolution (union by
name; int and float widened, any other type change refused) and the staged rows put into the
table's columns and types as data files."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sluice.sinks.iceberg.stage import CHANGELOG_COLUMNS
from sluice.spec.components.iceberg_sink import IcebergSinkConfig

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table, Transaction

__all__ = ["conform", "create_table", "data_files", "evolve", "plain", "table_schema"]

# Iceberg allows these type promotions; a column staged narrower is cast to the table's type
_WIDER = {("int", "long"), ("float", "double")}


def create_table(
    catalog: Catalog,
    config: IcebergSinkConfig,
    data: pa.Table,
    load: Callable[[], Table | None],
    refuse: Callable[[str], Exception],
) -> Table:
    """Create the table from the staged schema and ``partition_by`` (identity); losing a
    creation race to another commit is fine. ``load`` loads the table afresh; ``refuse``
    makes the sink's error of a message."""
    schema = table_schema(data.schema)
    missing = [c for c in config.partition_by if c not in schema.names]
    if missing:
        raise refuse(f"partition_by names {missing}, which are not output columns {schema.names}")
    namespace, _ = config.identifier()
    try:
        catalog.create_namespace(namespace)
    except Exception:  # exists (a REST server may say so with a 500 when racing): fine
        if not _namespace_exists(catalog, namespace):
            raise
    try:
        with catalog.create_table_transaction(config.table, schema) as tx:
            if config.partition_by:
                with tx.update_spec() as spec:
                    for column in config.partition_by:
                        spec.add_identity(column)
    except Exception:  # another commit created it first: fine
        if load() is None:
            raise
    table = load()
    if table is None:
        raise refuse("the table was created but cannot be loaded")
    return table


def _namespace_exists(catalog: Catalog, namespace: str) -> bool:
    from pyiceberg.exceptions import NoSuchNamespaceError

    try:
        catalog.load_namespace_properties(namespace)
    except NoSuchNamespaceError:
        return False
    return True


def evolve(tx: Transaction, data: pa.Table, refuse: Callable[[str], Exception]) -> pa.Table:
    """Add the staged columns the table lacks (union by name, in the commit's transaction)
    and widen int/float columns; refuse any other type change, naming the column. Returns
    the staged rows in the table's column types."""
    from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids

    current = {f.name: f.field_type for f in tx.table_metadata.schema().fields}
    staged = _pyarrow_to_schema_without_ids(plain(data).schema)
    changed = False
    for field in staged.fields:
        if field.name in CHANGELOG_COLUMNS:
            continue
        old = current.get(field.name)
        if old is None:
            changed = True
            continue
        if old == field.field_type or (str(field.field_type), str(old)) in _WIDER:
            continue
        if (str(old), str(field.field_type)) in _WIDER:
            changed = True
            continue
        raise refuse(
            f"column {field.name!r} is {field.field_type} in the output but {old} in the "
            "table; Iceberg cannot change that type (add a new column, or write to a new table)"
        )
    if changed:
        with tx.update_schema() as update:
            update.union_by_name(table_schema(data.schema))
    return data


def conform(tx: Transaction, data: pa.Table) -> pa.Table:
    """``data`` in the table's columns and types (missing columns null)."""
    import pyarrow as pa

    target = tx.table_metadata.schema().as_arrow()
    columns = []
    for field in target:
        if field.name in data.column_names:
            columns.append(data.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(data.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=target)


def data_files(
    tx: Transaction, data: pa.Table | None, uuid: Any, counter: Iterator[int]
) -> Iterator[Any]:
    """``data`` (in the table's schema) written as the transaction's new data files."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    if data is None or data.num_rows == 0:
        return iter(())
    return iter(
        _dataframe_to_data_files(
            table_metadata=tx.table_metadata,
            df=data,
            io=tx._table.io,
            write_uuid=uuid,
            counter=counter,  # type: ignore[arg-type]
        )
    )


def plain(data: pa.Table) -> pa.Table:
    """``data`` without the changelog columns."""
    return data.drop_columns([c for c in CHANGELOG_COLUMNS if c in data.column_names])


def table_schema(schema: pa.Schema) -> pa.Schema:
    """The table's columns for staged ``schema``: every column optional (a later epoch may
    hold a null where Spark knew none; Iceberg cannot make a required column optional in
    the same way it adds one)."""
    import pyarrow as pa

    return pa.schema([f.with_nullable(True) for f in schema if f.name not in CHANGELOG_COLUMNS])
