"""The ``iceberg`` sink: an Apache Iceberg table in a SQL or REST catalog, exactly once with
one snapshot per epoch (docs/iceberg.md).

Layout under the spec's ``warehouse``::

    <ns>/<table>/...                                     a SQL catalog's new tables
    _sluice_staging/<pipeline>/<sink>/<epoch:012d>-<attempt>/part-*.parquet
                                                         prepared, invisible (no catalog
                                                         knows these files)

1. *prepare* (Spark) writes the epoch's rows as Parquet under the attempt's staging prefix;
   upsert sinks keep ``_op`` / ``_epoch`` and refuse a key twice in one epoch.
2. *commit* (no Spark: pyarrow and pyiceberg) loads the table and looks for the epoch: the
   table property ``sluice.epoch.<pipeline>.<sink>`` (the highest epoch published, kept
   through snapshot expiry) and the snapshot summaries (``sluice.pipeline``, ``sluice.sink``,
   ``sluice.epoch``). An epoch at or below either is published already: nothing to do.
   Otherwise it reads the stage and commits **one transaction** holding the schema change if
   any (union by name), the property, and **one snapshot** carrying the summary:

   * append: a fast append of new data files;
   * upsert: an overwrite that removes the data files holding a changed key and adds them
     back without those rows (copy-on-write, keys null-safe), plus the epoch's upserted rows;
   * a rewind's first epoch: an overwrite of every current data file by the table as it was
     at the snapshot that held ``retract_after`` (time travel), with this epoch's changes.

   The catalog accepts the commit only if the table's ``main`` branch is still where it was
   loaded (optimistic concurrency: the SQL catalog's conditional UPDATE, the REST catalog's
   ``assert-ref-snapshot-id``). A refused commit (another writer, or a racing commit of the
   same epoch) is redone from a fresh load, which finds the epoch if the racer published it;
   pyiceberg's own retry, which rebases an append without that check, is switched off.
3. The staging is deleted after the epoch is in the table; abort and recovery delete the
   stages of other attempts.
"""

from __future__ import annotations

import io
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from sluice.contracts.records import Prepared
from sluice.contracts.sinks import Sink
from sluice.sinks.exceptions import IcebergSinkError
from sluice.sinks.iceberg.catalog import open_catalog
from sluice.spec.components.iceberg_sink import IcebergSinkConfig
from sluice.storage import ObjectStore, S3Options, to_spark_uri

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.snapshots import Snapshot
    from pyspark.sql import DataFrame

__all__ = [
    "CHANGELOG_COLUMNS",
    "COMMIT_ATTEMPTS",
    "STAGING",
    "IcebergSink",
    "IcebergStaged",
    "epoch_property",
]

STAGING = "_sluice_staging"
CHANGELOG_COLUMNS = ("_op", "_epoch")
COMMIT_ATTEMPTS = 8  # commits refused by the catalog (concurrent writers) before giving up
PIPELINE_KEY, SINK_KEY, EPOCH_KEY = "sluice.pipeline", "sluice.sink", "sluice.epoch"
# Iceberg allows these type promotions; a column staged narrower is cast to the table's type
_WIDER = {("int", "long"), ("float", "double")}


def epoch_property(pipeline: str, sink: str) -> str:
    """The table property holding the highest epoch ``pipeline``'s ``sink`` published."""
    return f"sluice.epoch.{pipeline}.{sink}"


@dataclass(frozen=True)
class IcebergStaged:
    """An iceberg sink's handle: the table and the epoch's staged Parquet prefix in the
    warehouse (None: no rows staged; both None in the bare Prepared recovery aborts with)."""

    table: str | None = None
    staging: str | None = None

    def to_dict(self) -> dict[str, str | int | None]:
        return {"table": self.table, "staging": self.staging}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IcebergStaged:
        return cls(data.get("table"), data.get("staging"))


class IcebergSink(Sink[IcebergStaged]):
    """Writes the Iceberg table ``config.table`` of the catalog ``url`` names (see the module
    docstring); ``store`` is the warehouse (where the stages are)."""

    supports_retraction = True
    handle_type = IcebergStaged

    def __init__(
        self,
        config: IcebergSinkConfig,
        url: str,
        store: ObjectStore,
        pipeline: str,
        s3: S3Options | None = None,
    ) -> None:
        if config.mode == "upsert" and not config.keys:
            raise IcebergSinkError(
                f"pipeline {pipeline}, sink {config.name}: upsert needs keys",
                pipeline=pipeline,
                sink=config.name,
                table=config.table,
            )
        self.name = config.name
        self.config = config
        self.url = url
        self.store = store
        self.pipeline = pipeline
        self.s3 = s3
        self.identifier = config.identifier()
        self._catalog: Catalog | None = None

    def __repr__(self) -> str:
        return f"IcebergSink({self.pipeline}/{self.name} -> {self.config.table})"

    # -- names ----------------------------------------------------------------------------------

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = open_catalog(
                self.url, self.store.uri(), self.s3, self.config.catalog_name
            )
        return self._catalog

    def _stages(self) -> str:
        return f"{STAGING}/{self.pipeline}/{self.name}/"

    def staging_prefix(self, epoch: int, attempt: str) -> str:
        return f"{self._stages()}{epoch:012d}-{attempt}/"

    def _where(self, epoch: int, attempt: str | None = None) -> str:
        tried = f", attempt {attempt}" if attempt else ""
        return (
            f"pipeline {self.pipeline}, sink {self.name}, epoch {epoch}{tried}, "
            f"table {self.config.table}"
        )

    def _error(self, message: str, epoch: int | None, attempt: str | None) -> IcebergSinkError:
        return IcebergSinkError(
            message,
            pipeline=self.pipeline,
            sink=self.name,
            epoch=epoch,
            attempt=attempt,
            table=self.config.table,
        )

    def _prepared(self, epoch: int, attempt: str, rows: int, staging: str | None) -> Prepared:
        staged = IcebergStaged(self.config.table, staging)
        uri = self.store.uri(staging) if staging else self.store.uri()
        return Prepared.of(self.name, uri, epoch, attempt, rows, staged)

    # -- prepare --------------------------------------------------------------------------------

    def prepare(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """Stage the rows as Parquet under the attempt's prefix (nothing for no rows)."""
        if rows is None:  # not counted by the engine: count first
            rows = df.count()
        if rows == 0:
            return self._prepared(epoch, attempt, 0, None)
        if self.config.mode == "append":  # the changelog columns belong to upsert sinks only
            df = df.drop(*CHANGELOG_COLUMNS)
        else:
            missing = [c for c in (*self.config.keys, *CHANGELOG_COLUMNS) if c not in df.columns]
            if missing:
                raise self._error(
                    f"{self._where(epoch, attempt)}: the upsert's columns {missing} are not in "
                    f"the output columns {df.columns}",
                    epoch,
                    attempt,
                )
        prefix = self.staging_prefix(epoch, attempt)
        df.write.mode("errorifexists").parquet(to_spark_uri(self.store.uri(prefix.rstrip("/"))))
        if self.config.mode == "upsert":
            self._refuse_repeated_keys(df, prefix, epoch, attempt)
        return self._prepared(epoch, attempt, rows, prefix)

    def _refuse_repeated_keys(self, df: DataFrame, prefix: str, epoch: int, attempt: str) -> None:
        """A key twice in one epoch's changelog has no single last value: fail before the
        checkpoint, not in every retry of the commit (one Spark job over the stage; nulls
        group together, as the commit matches them)."""
        uri = to_spark_uri(self.store.uri(prefix.rstrip("/")))
        keys = list(self.config.keys)
        staged = df.sparkSession.read.parquet(uri)
        repeated = staged.groupBy(*keys).count().where("count > 1").limit(1).collect()
        if repeated:
            self.store.delete_prefix(prefix)
            key = {k: repeated[0][k] for k in keys}
            raise self._error(
                f"{self._where(epoch, attempt)}: key {key} appears more than once in the "
                "epoch's changelog",
                epoch,
                attempt,
            )

    def read_stage(self, prefix: str) -> pa.Table:
        """The staged rows (Spark's INT96 timestamps read as UTC microseconds)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = []
        for item in sorted(self.store.list(prefix), key=lambda i: i.key):
            if not item.key.endswith(".parquet"):
                continue
            data = io.BytesIO(self.store.get(item.key))
            parquet = pq.ParquetFile(data, coerce_int96_timestamp_unit="us")
            int96 = {c.name for c in parquet.schema if c.physical_type == "INT96"}
            table = parquet.read()
            for name in int96:  # Spark's TimestampType: an instant
                i = table.schema.get_field_index(name)
                table = table.set_column(
                    i, name, table.column(i).cast(pa.timestamp("us", tz="UTC"))
                )
            tables.append(table)
        if not tables:
            return pa.table({})
        return pa.concat_tables(tables, promote_options="default")

    # -- what the table holds -------------------------------------------------------------------

    def load(self) -> Table | None:
        """The table, freshly loaded (None: it does not exist yet)."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.config.table)
        except NoSuchTableError:
            return None

    def _epoch_of(self, snapshot: Snapshot) -> int | None:
        summary = snapshot.summary
        if summary is None or summary.get(PIPELINE_KEY) != self.pipeline:
            return None
        epoch = summary.get(EPOCH_KEY)
        if summary.get(SINK_KEY) != self.name or epoch is None:
            return None
        return int(epoch)

    def snapshots(self, table: Table | None = None) -> dict[int, int]:
        """Epoch -> the id of the snapshot that published it (those still in the metadata)."""
        table = table if table is not None else self.load()
        if table is None:
            return {}
        found = {}
        for snapshot in table.metadata.snapshots:
            epoch = self._epoch_of(snapshot)
            if epoch is not None:
                found[epoch] = snapshot.snapshot_id
        return found

    def published(self, table: Table | None) -> int | None:
        """The highest epoch this sink published into ``table`` (None: none)."""
        if table is None:
            return None
        marks = list(self.snapshots(table))
        fence = table.metadata.properties.get(epoch_property(self.pipeline, self.name))
        if fence is not None:
            marks.append(int(fence))
        return max(marks, default=None)

    def committed(self, epoch: int) -> bool:
        found = self.published(self.load())
        return found is not None and found >= epoch

    # -- commit ---------------------------------------------------------------------------------

    def commit(self, prepared: Prepared) -> str | None:
        """1. skip if the table holds the epoch (or a later one), 2. publish the staged rows in
        one snapshot, redone from a fresh load when the catalog refuses it, 3. delete the
        staging. Idempotent. Returns the receipt ``sluice checkpoints`` shows: the snapshot
        that holds the epoch (None: an epoch without rows publishes none)."""
        if prepared.rows == 0 and prepared.retract_after is None:
            return None  # an epoch without rows staged nothing and publishes nothing
        staging = self._staging_of(prepared)
        self._publish(prepared, staging)
        if prepared.rows:
            self.store.delete_prefix(staging)
        snapshot = self.snapshots().get(prepared.epoch)
        return None if snapshot is None else f"{self.config.table} snapshot {snapshot}"

    def _publish(self, prepared: Prepared, staging: str) -> None:
        from pyiceberg.exceptions import CommitFailedException

        epoch, attempt = prepared.epoch, prepared.attempt
        data: pa.Table | None = None
        refusals: list[str] = []
        for _ in range(COMMIT_ATTEMPTS):
            table = self.load()
            done = self.published(table)
            if done is not None and done >= epoch:
                return
            if prepared.rows and data is None:
                data = self._stage_or_published(staging, epoch, attempt)
                if data is None:
                    return  # a racing commit published the epoch and deleted the stage
            if table is None:
                if data is None:
                    return  # a rewind of a table never created: nothing to retract
                table = self._create(data, epoch, attempt)
                done = self.published(table)  # a racing commit may have created it, and
                if done is not None and done >= epoch:  # published the epoch, meanwhile
                    return
            try:
                self._commit_once(table, prepared, data)
                return
            except CommitFailedException as exc:
                refusals.append(str(exc) or type(exc).__name__)
                time.sleep(0.05 * len(refusals))
        raise self._error(
            f"{self._where(epoch, attempt)}: the catalog refused all {COMMIT_ATTEMPTS} commit "
            f"attempts (concurrent writers); the last said: {refusals[-1]}",
            epoch,
            attempt,
        )

    def _stage_or_published(self, staging: str, epoch: int, attempt: str) -> pa.Table | None:
        """The staged rows; None if they are gone because another commit published them
        (it deletes the stage after), an error if they are gone and the epoch is not in the
        table (committing would lose them)."""
        try:
            if self.store.list(staging):
                return self.read_stage(staging)
        except Exception:
            if not self.committed(epoch):
                raise
            return None
        if self.committed(epoch):
            return None
        raise self._error(
            f"{self._where(epoch, attempt)}: the epoch is not in the table and its staged rows "
            f"at {self.store.uri(staging)} are gone; they would be lost",
            epoch,
            attempt,
        )

    def _commit_once(self, table: Table, prepared: Prepared, data: pa.Table | None) -> None:
        """One transaction: schema change, epoch property, one snapshot with the summary."""
        from pyiceberg.table import TableProperties

        epoch, attempt = prepared.epoch, prepared.attempt
        # one try per load: a refused commit comes back to _publish, which looks again
        no_retry = {**table.metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
        table.metadata = table.metadata.model_copy(update={"properties": no_retry})
        tx = table.transaction()
        if data is not None:
            data = self._evolve(tx, data, epoch, attempt)
        tx.set_properties({epoch_property(self.pipeline, self.name): str(epoch)})
        summary = {PIPELINE_KEY: self.pipeline, SINK_KEY: self.name, EPOCH_KEY: str(epoch)}
        if prepared.retract_after is not None:
            base = self.base_snapshot(table, prepared.retract_after)
            if base is not False:
                self._replace(tx, table, base, data, summary)
                self._commit_transaction(tx)
                return
        if self.config.mode == "upsert" and data is not None:
            self._upsert(tx, table, data, summary)
        else:
            rows = self._conform(tx, data) if data is not None else None
            with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
                for file in self._data_files(tx, rows, append.commit_uuid, itertools.count()):
                    append.append_data_file(file)
        self._commit_transaction(tx)

    def _commit_transaction(self, tx: Transaction) -> None:
        """The commit point (a seam for tests that commit something else in between)."""
        tx.commit_transaction()

    def _data_files(
        self, tx: Transaction, data: pa.Table | None, uuid: Any, counter: Iterator[int]
    ) -> Iterator[Any]:
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

    # -- upsert (copy-on-write) -----------------------------------------------------------------

    def _upsert(
        self, tx: Transaction, table: Table, changes: pa.Table, summary: dict[str, str]
    ) -> None:
        """One overwrite snapshot: the files holding a changed key, rewritten without those
        rows, plus the epoch's upserted rows."""
        import pyarrow.compute as pc

        keys = list(self.config.keys)
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
                    kept = self._conform(tx, kept)
                    for file in self._data_files(tx, kept, overwrite.commit_uuid, counter):
                        overwrite.append_data_file(file)
            for file in self._data_files(
                tx, self._conform(tx, upserts), overwrite.commit_uuid, counter
            ):
                overwrite.append_data_file(file)

    # -- schema ---------------------------------------------------------------------------------

    def _create(self, data: pa.Table, epoch: int, attempt: str) -> Table:
        """Create the table from the staged schema and ``partition_by`` (identity); losing a
        creation race to another commit is fine."""
        schema = _table_schema(data.schema)
        missing = [c for c in self.config.partition_by if c not in schema.names]
        if missing:
            raise self._error(
                f"{self._where(epoch, attempt)}: partition_by names {missing}, which are not "
                f"output columns {schema.names}",
                epoch,
                attempt,
            )
        namespace, _ = self.identifier
        try:
            self.catalog.create_namespace(namespace)
        except Exception:  # exists (a REST server may say so with a 500 when racing): fine
            if not self._namespace_exists(namespace):
                raise
        try:
            with self.catalog.create_table_transaction(self.config.table, schema) as tx:
                if self.config.partition_by:
                    with tx.update_spec() as spec:
                        for column in self.config.partition_by:
                            spec.add_identity(column)
        except Exception:  # another commit created it first: fine
            if self.load() is None:
                raise
        table = self.load()
        if table is None:
            raise self._error(
                f"{self._where(epoch, attempt)}: the table was created but cannot be loaded",
                epoch,
                attempt,
            )
        return table

    def _namespace_exists(self, namespace: str) -> bool:
        from pyiceberg.exceptions import NoSuchNamespaceError

        try:
            self.catalog.load_namespace_properties(namespace)
        except NoSuchNamespaceError:
            return False
        return True

    def _evolve(self, tx: Transaction, data: pa.Table, epoch: int, attempt: str) -> pa.Table:
        """Add the staged columns the table lacks (union by name, in the commit's transaction)
        and widen int/float columns; refuse any other type change, naming the column. Returns
        the staged rows in the table's column types."""
        from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids

        current = {f.name: f.field_type for f in tx.table_metadata.schema().fields}
        staged = _pyarrow_to_schema_without_ids(_plain(data).schema)
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
            raise self._error(
                f"{self._where(epoch, attempt)}: column {field.name!r} is {field.field_type} in "
                f"the output but {old} in the table; Iceberg cannot change that type (add a "
                "new column, or write to a new table)",
                epoch,
                attempt,
            )
        if changed:
            with tx.update_schema() as update:
                update.union_by_name(_table_schema(data.schema))
        return data

    def _conform(self, tx: Transaction, data: pa.Table) -> pa.Table:
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

    # -- retraction (rewinds) -------------------------------------------------------------------

    def base_snapshot(self, table: Table, after: int) -> int | bool | None:
        """The snapshot that held what was published when ``after`` was the last epoch: walk
        ``main`` back to the first snapshot of ours with an epoch ``<= after``; the table
        then was the parent of the oldest later one of ours (None: empty). False: nothing of
        ours after ``after`` (nothing to retract). Raises when that snapshot is expired."""
        snapshot = table.current_snapshot()
        oldest_later: Snapshot | None = None
        while snapshot is not None:
            epoch = self._epoch_of(snapshot)
            if epoch is not None and epoch <= after:
                break
            if epoch is not None:
                oldest_later = snapshot
            parent = snapshot.parent_snapshot_id
            snapshot = table.metadata.snapshot_by_id(parent) if parent is not None else None
        if oldest_later is None:
            return False
        base = oldest_later.parent_snapshot_id
        # a v2 table's first snapshot has sequence number 1: a later one without a parent had
        # its history expired (expiry drops the parent link)
        if base is None and (oldest_later.sequence_number or 0) <= 1:
            return None
        if base is None or table.metadata.snapshot_by_id(base) is None:
            later = self._epoch_of(oldest_later)
            raise self._error(
                f"pipeline {self.pipeline}, sink {self.name}, table {self.config.table}: the "
                f"snapshot before epoch {later}'s (snapshot {oldest_later.snapshot_id}) is "
                f"expired, so the table as of epoch {after} cannot be restored nor the output "
                f"of the epochs after it retracted (keep snapshots as long as checkpoints: "
                "docs/iceberg.md)",
                after,
                None,
            )
        return base

    def _replace(
        self,
        tx: Transaction,
        table: Table,
        base: int | bool | None,
        changes: pa.Table | None,
        summary: dict[str, str],
    ) -> None:
        """One overwrite snapshot: every current data file out; the table as of ``base`` plus
        this epoch's rows (upserts: its changed keys replaced) in."""
        import pyarrow.compute as pc

        counter = itertools.count()
        rows = None
        if isinstance(base, int) and not isinstance(base, bool):
            rows = self._conform(tx, table.scan(snapshot_id=base).to_arrow())
        if changes is not None:
            if self.config.mode == "upsert":
                keys = list(self.config.keys)
                if rows is not None:
                    rows = _without_keys(rows, changes, keys)
                changes = changes.filter(pc.equal(changes.column("_op"), "upsert"))
            added = self._conform(tx, changes)
            rows = added if rows is None else _concat(rows, added)
        with tx.update_snapshot(snapshot_properties=summary).overwrite() as overwrite:
            if table.current_snapshot() is not None:
                for task in table.scan().plan_files():
                    overwrite.delete_data_file(task.file)
            for file in self._data_files(tx, rows, overwrite.commit_uuid, counter):
                overwrite.append_data_file(file)

    def retraction_problem(self, after: int) -> str | None:
        try:
            table = self.load()
            if table is not None:
                self.base_snapshot(table, after)
        except IcebergSinkError as exc:
            return str(exc)
        return None

    # -- abort / recovery -----------------------------------------------------------------------

    def _staging_of(self, prepared: Prepared) -> str:
        staging = self.handle(prepared).staging
        return staging or self.staging_prefix(prepared.epoch, prepared.attempt)

    def abort(self, prepared: Prepared) -> None:
        self.store.delete_prefix(self._staging_of(prepared))

    def abort_others(self, epoch: int, keep: str | None) -> int:
        """Delete the staging of every attempt of ``epoch`` except ``keep``."""
        mine = self.staging_prefix(epoch, keep) if keep else None
        depth = self._stages().count("/") + 1
        doomed = sorted(
            {
                "/".join(i.key.split("/")[:depth]) + "/"
                for i in self.store.list(f"{self._stages()}{epoch:012d}-")
            }
            - {mine}
        )
        return sum(self.store.delete_prefix(prefix) for prefix in doomed)


# -- Arrow helpers ------------------------------------------------------------------------------


def _plain(data: pa.Table) -> pa.Table:
    """``data`` without the changelog columns."""
    return data.drop_columns([c for c in CHANGELOG_COLUMNS if c in data.column_names])


def _table_schema(schema: pa.Schema) -> pa.Schema:
    """The table's columns for staged ``schema``: every column optional (a later epoch may
    hold a null where Spark knew none; Iceberg cannot make a required column optional in
    the same way it adds one)."""
    import pyarrow as pa

    return pa.schema([f.with_nullable(True) for f in schema if f.name not in CHANGELOG_COLUMNS])


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
