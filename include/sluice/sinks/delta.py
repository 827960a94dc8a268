"""The ``delta`` sink: a Delta Lake table on a local or S3 path, exactly once through Delta's
idempotent writes.

Every commit carries a transaction id, ``txnAppId`` = ``sluice:<pipeline>:<sink>`` and
``txnVersion`` = the epoch; Delta records it in the log (a ``txn`` action) atomically with the
rows, so "has epoch k been published?" is a question the table itself answers. Layout under
the sink path::

    _delta_log/...                                the table (what readers see)
    part-*.parquet, <col>=<value>/part-*.parquet  its data files
    _sluice_staging/<epoch:012d>-<attempt>/...    prepared, invisible (not in the Delta log;
                                                  Delta and Spark skip names starting with '_')

1. *prepare* writes the epoch's rows as Parquet under the attempt's staging prefix (nothing
   for an empty epoch); upsert sinks keep ``_op`` / ``_epoch`` there and refuse a key that
   appears twice, which no MERGE could apply.
2. *commit* asks the table for the latest ``txnVersion`` of our ``txnAppId``
   (:func:`txn_version`); when it is already ``>= epoch`` it only deletes the staging.
   Otherwise it publishes the staged rows in one Delta commit: an append with the
   ``txnAppId`` / ``txnVersion`` write options (creating the table on the first write), or,
   for ``mode: upsert``, a MERGE on the keys (null-safe) with the session settings
   ``spark.databricks.delta.write.txnAppId`` / ``txnVersion``, run in a child session so
   that threads sharing a session cannot see each other's settings. Delta itself re-checks
   the transaction id inside its optimistic transaction: a commit racing another commit of
   the same epoch fails (``ConcurrentTransactionException``; ``ProtocolChangedException``
   when both create the table) or writes nothing. A publish
   that failed is followed by a second look at the table: if the epoch is there (another
   commit won), the commit succeeded. Then the staging is deleted.

S3 caveat. Delta 4.4 picks ``S3SingleDriverLogStore`` for ``s3``/``s3a``/``s3n`` paths. It
makes writing log version N exclusive only among writers in one JVM: an in-process lock and
an existence check, then ``create(path, overwrite=false)``, which S3A 3.5 implements as a
HEAD/LIST probe followed by an unconditional PUT (S3A sends ``If-None-Match`` only for the
``createFile()`` option ``fs.option.create.conditional.overwrite``, which this log store does
not use). Delta's docs say accordingly that concurrent writes to one table on S3 must come
from a single Spark driver. Commits from threads of one process are therefore safe. Two
*processes* committing the same epoch at once (an Airflow retry racing a zombie) may both
write version N+1, the later PUT replacing the earlier: both carry the same rows and the
same ``txn``, so the table holds the epoch once and the txn check keeps every later retry
from adding it again. That is harmless only while nothing has built on the replaced N+1: a
writer stalled between its probe and its PUT, or a concurrent commit of anything else
(another epoch, another job, OPTIMIZE), can lose a commit. Keep one writer per table at a
time, or configure a multi-writer LogStore (``S3DynamoDBLogStore``) for the scheme. Local
paths use rename-based log writes, exclusive across processes.

Retraction (a rewind to epoch k, docs/rewind.md) uses the table's own history: the version
just before the first commit whose ``txnVersion`` is above k is the table as it was when k
was published (read from ``_delta_log``). The rewind's first epoch commits that version plus
its own rows (for upserts: minus the keys it changes) as **one overwrite** carrying its
transaction id, so the rewound output disappears and the replacement appears in one Delta
commit. That needs the old version's log and data files: a ``VACUUM`` or log cleanup that
removed them makes the rewind fail with that version named. Commits to the table by other
writers after k are overwritten too.

A pipeline whose checkpoints are reset while its Delta table is kept restarts at epoch 1
below the table's recorded ``txnVersion``: every commit is then skipped. Give it a new
table path (or pipeline / sink name).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.contracts.records import Prepared
from sluice.sinks.exceptions import DeltaSinkError, StagingMissing, Where
from sluice.sinks.staging import FieldsHandle, StagingSink
from sluice.spec.components.delta_sink import DeltaSinkConfig
from sluice.storage import ObjectStore, to_spark_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "CHANGELOG_COLUMNS",
    "STAGING",
    "TXN_APP_ID_CONF",
    "TXN_VERSION_CONF",
    "DeltaSink",
    "DeltaSinkError",
    "StagingMissing",
    "txn_app_id",
    "txn_version",
]

STAGING = "_sluice_staging"
CHANGELOG_COLUMNS = ("_op", "_epoch")
TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
_LOG_COMMIT = re.compile(r"^_delta_log/(\d{20})\.json$")


def txn_app_id(pipeline: str, sink: str) -> str:
    """The Delta ``txnAppId`` of one sink of one pipeline (stable across runs)."""
    return f"sluice:{pipeline}:{sink}"


@dataclass(frozen=True)
class DeltaStaged(FieldsHandle):
    """A Delta sink's handle: the transaction app id its commits carry and the epoch's staged
    Parquet prefix (None: no rows staged)."""

    txn_app_id: str | None = None  # None in the bare Prepared recovery aborts with
    staging: str | None = None


class DeltaSink(StagingSink[DeltaStaged]):
    """Writes the Delta table at ``store`` (see the module docstring for the protocol).

    ``spark`` is called only when a session is needed, so a commit can run in a process that
    has not started one yet.
    """

    supports_retraction = True
    handle_type = DeltaStaged

    def __init__(
        self,
        config: DeltaSinkConfig,
        store: ObjectStore,
        pipeline: str,
        spark: Callable[[], SparkSession],
    ) -> None:
        if config.mode == "upsert" and not config.keys:
            raise DeltaSinkError.without_keys(pipeline, config.name)
        self.name = config.name
        self.config = config
        self.store = store
        self.pipeline = pipeline
        self.app_id = txn_app_id(pipeline, config.name)
        self.table_uri = to_spark_uri(store.uri())
        self._spark = spark

    def __repr__(self) -> str:
        return f"DeltaSink({self.pipeline}/{self.name} -> {self.store.uri()})"

    def stages(self) -> str:
        return f"{STAGING}/"

    def _where(self, epoch: int, attempt: str) -> str:
        return f"pipeline {self.pipeline}, sink {self.name}, epoch {epoch}, attempt {attempt}"

    def _context(self, epoch: int, attempt: str) -> Where:
        """What :meth:`_where` names, as a :class:`SinkError`'s attributes."""
        return {"pipeline": self.pipeline, "sink": self.name, "epoch": epoch, "attempt": attempt}

    def _prepared(
        self, epoch: int, attempt: str, rows: int, staging: str | None = None
    ) -> Prepared:
        staged = DeltaStaged(self.app_id, staging)
        return Prepared.of(self.name, self.store.uri(), epoch, attempt, rows, staged)

    # -- prepare ------------------------------------------------------------------------------

    def prepare(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """Stage the rows as Parquet under the attempt's prefix (nothing for no rows)."""
        if rows is None:  # not counted by the engine: count first
            rows = df.count()
        if rows == 0:
            return self._prepared(epoch, attempt, 0)
        if self.config.mode == "append":  # the changelog columns belong to upsert sinks only
            df = df.drop(*CHANGELOG_COLUMNS)
        else:
            self._check_columns(df.columns, epoch, attempt)
        prefix = self.staging_prefix(epoch, attempt)
        self.stage(df, prefix)
        if self.config.mode == "upsert":
            self._refuse_repeated_keys(prefix, epoch, attempt)
        return self._prepared(epoch, attempt, rows, staging=prefix)

    def _check_columns(self, columns: list[str], epoch: int, attempt: str) -> None:
        missing = [c for c in (*self.config.keys, *CHANGELOG_COLUMNS) if c not in columns]
        if missing:
            raise DeltaSinkError(
                f"{self._where(epoch, attempt)}: the upsert's columns {missing} are not in the "
                f"output columns {columns}",
                **self._context(epoch, attempt),
            )

    def _refuse_repeated_keys(self, prefix: str, epoch: int, attempt: str) -> None:
        """A key twice in one epoch's changelog is a writer bug no MERGE can apply (it fails,
        or inserts the key twice): fail here, before the checkpoint, not in every retry of
        the commit."""
        staged = self._spark().read.parquet(self.staging_uri(prefix))
        keys = list(self.config.keys)
        repeated = staged.groupBy(*keys).count().where("count > 1").limit(1).collect()
        if repeated:
            self.store.delete_prefix(prefix)
            key = {k: repeated[0][k] for k in keys}
            raise DeltaSinkError(
                f"{self._where(epoch, attempt)}: key {key} appears more than once in the "
                "epoch's changelog",
                **self._context(epoch, attempt),
            )

    # -- commit -------------------------------------------------------------------------------

    def commit(self, prepared: Prepared) -> None:
        """1. skip if the table already holds the epoch, 2. publish the staged rows in one
        Delta commit with the epoch's transaction id, 3. delete the staging. Idempotent."""
        if prepared.rows == 0 and prepared.retract_after is None:
            return  # an epoch without rows staged nothing and publishes nothing
        staging = self.staging_of(prepared)
        if not self.committed(prepared.epoch):
            self._publish_once(prepared, staging)
        if prepared.rows:
            self.store.delete_prefix(staging)

    def committed(self, epoch: int) -> bool:
        """Whether the table records ``epoch`` (or a later one) for this sink."""
        version = txn_version(self._spark(), self.table_uri, self.app_id)
        return version is not None and version >= epoch

    def _publish_once(self, prepared: Prepared, staging: str) -> None:
        """Publish; a failure is fine if another commit of the epoch got there first (Delta's
        own txn check refused ours, or the winner deleted the staging while we read it)."""
        try:
            if prepared.rows and not self.store.list(staging):
                raise StagingMissing(
                    self.pipeline,
                    self.name,
                    prepared.epoch,
                    prepared.attempt,
                    self.store.uri(staging),
                )
            if prepared.retract_after is not None:
                self._replace(prepared, staging)
            elif self.config.mode == "upsert":
                self._merge(prepared.epoch, staging)
            else:
                self._append(prepared.epoch, staging)
        except Exception:
            if self.committed(prepared.epoch):
                return
            raise

    def _append(self, epoch: int, staging: str) -> None:
        staged = self._spark().read.parquet(self.staging_uri(staging))
        self._append_frame(staged, epoch)

    def _append_frame(self, df: DataFrame, epoch: int) -> None:
        """One Delta commit of ``df`` with the epoch's transaction id (Delta skips it if the
        table already records that version); creates the table on the first write."""
        writer = (
            df.write.format("delta")
            .mode("append")
            .option("txnAppId", self.app_id)
            .option("txnVersion", str(epoch))
        )
        if self.config.partition_by:
            writer = writer.partitionBy(*self.config.partition_by)
        writer.save(self.table_uri)

    def _merge(self, epoch: int, staging: str) -> None:
        """MERGE the staged changelog into the table, in a child session whose txn settings
        no other thread sees; they are unset afterwards, even on error."""
        from delta.tables import DeltaTable

        session = self._spark().newSession()
        staged = session.read.parquet(self.staging_uri(staging))
        self._ensure_table(session, staged.drop(*CHANGELOG_COLUMNS).schema)
        columns = [c for c in staged.columns if c not in CHANGELOG_COLUMNS]
        keys = list(self.config.keys)
        on = " AND ".join(f"t.{_quote(k)} <=> s.{_quote(k)}" for k in keys)
        builder = (
            DeltaTable.forPath(session, self.table_uri)
            .alias("t")
            .merge(staged.alias("s"), on)
            .whenMatchedDelete("s._op = 'delete'")
        )
        values = [c for c in columns if c not in keys]
        if values:
            builder = builder.whenMatchedUpdate(set={_quote(c): f"s.{_quote(c)}" for c in values})
        builder = builder.whenNotMatchedInsert(
            "s._op = 'upsert'", values={_quote(c): f"s.{_quote(c)}" for c in columns}
        )
        session.conf.set(TXN_APP_ID_CONF, self.app_id)
        session.conf.set(TXN_VERSION_CONF, str(epoch))
        try:
            builder.execute()
        finally:
            session.conf.unset(TXN_APP_ID_CONF)
            session.conf.unset(TXN_VERSION_CONF)

    # -- retraction (rewinds) -------------------------------------------------------------------

    def _replace(self, prepared: Prepared, staging: str) -> None:
        """The first epoch of a rewind: one overwrite commit of the table as it was when
        ``retract_after`` was published, plus this epoch's rows, with this epoch's txn id."""
        from delta.tables import DeltaTable

        assert prepared.retract_after is not None
        spark = self._spark()
        version = self.version_at(prepared.retract_after)
        if version is None:  # nothing published after the rewind's epoch: a plain commit
            if prepared.rows:
                if self.config.mode == "upsert":
                    self._merge(prepared.epoch, staging)
                else:
                    self._append(prepared.epoch, staging)
            return
        if version < 0:  # the table began after the rewind's epoch: it held nothing then
            base = None
        else:
            base = spark.read.format("delta").option("versionAsOf", version).load(self.table_uri)
        result = base
        if prepared.rows:
            staged = spark.read.parquet(self.staging_uri(staging))
            if self.config.mode == "upsert":
                keys = list(self.config.keys)
                upserts = staged.where("_op = 'upsert'").drop(*CHANGELOG_COLUMNS)
                if base is not None:
                    on = [base[k].eqNullSafe(staged[k]) for k in keys]
                    kept = base.join(staged.select(*keys), on, "left_anti")
                    upserts = kept.unionByName(upserts.select(*base.columns))
                result = upserts
            else:
                result = staged if base is None else base.unionByName(staged.select(*base.columns))
        if result is None:  # nothing before, nothing now: an empty table of the same schema
            current = DeltaTable.forPath(spark, self.table_uri).toDF()
            result = spark.createDataFrame([], current.schema)
        writer = (
            result.write.format("delta")
            .mode("overwrite")
            .option("txnAppId", self.app_id)
            .option("txnVersion", str(prepared.epoch))
        )
        if self.config.partition_by:
            writer = writer.partitionBy(*self.config.partition_by)
        writer.save(self.table_uri)

    def version_at(self, epoch: int) -> int | None:
        """The table version that held exactly what was published up to ``epoch``: the one
        before the first commit with our ``txnVersion`` above it (-1: before the table
        existed); None when no such commit exists (nothing to retract). Read from
        ``_delta_log``; raises :class:`DeltaSinkError` when that history is gone."""
        commits = sorted(
            (int(m.group(1)), i.key)
            for i in self.store.list("_delta_log/")
            if (m := _LOG_COMMIT.match(i.key))
        )
        for version, key in commits:
            for line in self.store.get(key).decode().splitlines():
                txn = json.loads(line).get("txn") if line.strip() else None
                if txn and txn.get("appId") == self.app_id and int(txn["version"]) > epoch:
                    if version > 0 and commits[0][0] > version - 1:
                        raise DeltaSinkError(
                            f"pipeline {self.pipeline}, sink {self.name}: the table's Delta "
                            f"log no longer has version {version - 1} (the table as of epoch "
                            f"{epoch}); its output cannot be retracted",
                            pipeline=self.pipeline,
                            sink=self.name,
                            epoch=epoch,
                        )
                    return version - 1
        return None

    def retraction_problem(self, after: int) -> str | None:
        try:
            self.version_at(after)
        except DeltaSinkError as exc:
            return str(exc)
        return None

    def _ensure_table(self, spark: SparkSession, schema: StructType) -> None:
        """Create the (empty) upsert table if missing; losing a creation race is fine."""
        from delta.tables import DeltaTable

        if DeltaTable.isDeltaTable(spark, self.table_uri):
            return
        empty = spark.createDataFrame([], schema)
        writer = empty.write.format("delta").mode("append")
        if self.config.partition_by:
            writer = writer.partitionBy(*self.config.partition_by)
        try:
            writer.save(self.table_uri)
        except Exception:
            if not DeltaTable.isDeltaTable(spark, self.table_uri):
                raise

    # -- direct write (qos 0 / 1) -------------------------------------------------------------

    def write(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """Append sinks: one Delta commit straight into the table, with the epoch's transaction
        id, so a replay of the epoch (qos 1 replays the same planned input) adds nothing.
        Upsert sinks stage and commit."""
        if rows is None:  # not counted by the engine: count first
            rows = df.count()
        if self.config.mode == "upsert":
            return super().write(epoch, attempt, df, rows)
        if rows > 0:
            try:
                self._append_frame(df.drop(*CHANGELOG_COLUMNS), epoch)
            except Exception:
                if not self.committed(epoch):
                    raise
        return self._prepared(epoch, attempt, rows)


def _quote(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


def txn_version(spark: SparkSession, uri: str, app_id: str) -> int | None:
    """The latest ``txnVersion`` the Delta table at ``uri`` records for ``app_id``, read
    through Delta's own log replay (checkpoints included); None when the table does not
    exist or has no transaction of ``app_id``."""
    jvm: Any = spark.sparkContext._jvm
    none = jvm.scala.Option.apply(None)
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, to_spark_uri(uri))
    snapshot = log.update(False, none, none)  # the newest version, not a cached one
    if snapshot.version() < 0:
        return None
    found = snapshot.transactions().get(app_id)
    return int(found.get()) if found.isDefined() else None
