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
   stages of other attempts (:class:`~sluice.sinks.staging.StagingSink`).

The jobs live beside this module: the stage (:mod:`~sluice.sinks.iceberg.stage`), the epochs
a table holds (:mod:`~sluice.sinks.iceberg.epochs`), schema evolution
(:mod:`~sluice.sinks.iceberg.schema`), upserts and rewinds (:mod:`~sluice.sinks.iceberg.upsert`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import sluice.sinks.iceberg.epochs as epochs
import sluice.sinks.iceberg.schema as schema
from sluice.contracts.records import Prepared
from sluice.sinks.exceptions import IcebergSinkError
from sluice.sinks.iceberg.catalog import open_catalog
from sluice.sinks.iceberg.epochs import EPOCH_KEY, PIPELINE_KEY, SINK_KEY, epoch_property
from sluice.sinks.iceberg.stage import CHANGELOG_COLUMNS, STAGING, IcebergStaged, read_stage
from sluice.sinks.iceberg.upsert import replace, upsert
from sluice.sinks.staging import StagingSink
from sluice.spec.components.iceberg_sink import IcebergSinkConfig
from sluice.storage import ObjectStore, S3Options

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table, Transaction
    from pyspark.sql import DataFrame

__all__ = [
    "CHANGELOG_COLUMNS",
    "COMMIT_ATTEMPTS",
    "STAGING",
    "IcebergSink",
    "IcebergStaged",
    "epoch_property",
]

COMMIT_ATTEMPTS = 8  # commits refused by the catalog (concurrent writers) before giving up


class IcebergSink(StagingSink[IcebergStaged]):
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
            raise IcebergSinkError.without_keys(pipeline, config.name, table=config.table)
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

    def stages(self) -> str:
        return f"{STAGING}/{self.pipeline}/{self.name}/"

    def _where(self, epoch: int, attempt: str | None = None) -> str:
        tried = f", attempt {attempt}" if attempt else ""
        return (
            f"pipeline {self.pipeline}, sink {self.name}, epoch {epoch}{tried}, "
            f"table {self.config.table}"
        )

    def _refusal(self, epoch: int, attempt: str) -> Callable[[str], IcebergSinkError]:
        """The error of a reason, naming this epoch attempt (for the jobs' modules)."""
        return lambda reason: self._error(
            f"{self._where(epoch, attempt)}: {reason}", epoch, attempt
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
        self.stage(df, prefix)
        if self.config.mode == "upsert":
            self._refuse_repeated_keys(df, prefix, epoch, attempt)
        return self._prepared(epoch, attempt, rows, prefix)

    def _refuse_repeated_keys(self, df: DataFrame, prefix: str, epoch: int, attempt: str) -> None:
        """A key twice in one epoch's changelog has no single last value: fail before the
        checkpoint, not in every retry of the commit (one Spark job over the stage; nulls
        group together, as the commit matches them)."""
        keys = list(self.config.keys)
        staged = df.sparkSession.read.parquet(self.staging_uri(prefix))
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

    # -- what the table holds -------------------------------------------------------------------

    def load(self) -> Table | None:
        """The table, freshly loaded (None: it does not exist yet)."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.config.table)
        except NoSuchTableError:
            return None

    def snapshots(self, table: Table | None = None) -> dict[int, int]:
        """Epoch -> the id of the snapshot that published it (those still in the metadata)."""
        table = table if table is not None else self.load()
        return {} if table is None else epochs.snapshots(table, self.pipeline, self.name)

    def published(self, table: Table | None) -> int | None:
        """The highest epoch this sink published into ``table`` (None: none)."""
        return epochs.published(table, self.pipeline, self.name)

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
        staging = self.staging_of(prepared)
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
                return read_stage(self.store, staging)
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
            data = schema.evolve(tx, data, self._refusal(epoch, attempt))
        tx.set_properties({epoch_property(self.pipeline, self.name): str(epoch)})
        summary = {PIPELINE_KEY: self.pipeline, SINK_KEY: self.name, EPOCH_KEY: str(epoch)}
        if prepared.retract_after is not None:
            base = self.base_snapshot(table, prepared.retract_after)
            if base is not False:
                keys = list(self.config.keys) if self.config.mode == "upsert" else None
                replace(tx, table, base, data, keys, summary)
                self._commit_transaction(tx)
                return
        if self.config.mode == "upsert" and data is not None:
            upsert(tx, table, data, list(self.config.keys), summary)
        else:
            rows = schema.conform(tx, data) if data is not None else None
            with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
                counter = itertools.count()
                for file in schema.data_files(tx, rows, append.commit_uuid, counter):
                    append.append_data_file(file)
        self._commit_transaction(tx)

    def _commit_transaction(self, tx: Transaction) -> None:
        """The commit point (a seam for tests that commit something else in between)."""
        tx.commit_transaction()

    # -- schema ---------------------------------------------------------------------------------

    def _create(self, data: pa.Table, epoch: int, attempt: str) -> Table:
        """Create the table (:func:`~sluice.sinks.iceberg.schema.create_table`; a seam for
        tests that race another commit against the creation)."""
        refuse = self._refusal(epoch, attempt)
        return schema.create_table(self.catalog, self.config, data, self.load, refuse)

    # -- retraction (rewinds) -------------------------------------------------------------------

    def base_snapshot(self, table: Table, after: int) -> int | bool | None:
        """:func:`~sluice.sinks.iceberg.epochs.base_snapshot` of this sink."""

        def refuse(reason: str) -> IcebergSinkError:
            where = f"pipeline {self.pipeline}, sink {self.name}, table {self.config.table}"
            return self._error(f"{where}: {reason}", after, None)

        return epochs.base_snapshot(table, after, self.pipeline, self.name, refuse)

    def retraction_problem(self, after: int) -> str | None:
        try:
            table = self.load()
            if table is not None:
                self.base_snapshot(table, after)
        except IcebergSinkError as exc:
            return str(exc)
        return None
