"""The ``files`` sink: Parquet or JSON lines on a local or S3 path, committed atomically per file.

Layout under the sink path::

    part-<epoch:012d>-<n:05d>.parquet        committed rows (what readers see)
    _staging/<epoch:012d>-<attempt>/...      prepared, invisible (Spark, pyarrow and the Hive
                                             convention skip names starting with '_')

Commit moves each staged file to its final, deterministic name; a re-run after a crash skips
files already moved, so commit is idempotent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.sinks.base import Prepared, Sink, StagedFile
from sluice.spec.model import SinkSpec
from sluice.storage import ObjectStore, to_spark_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["FilesSink"]

STAGING = "_staging"
ROWS_PER_FILE = 1_000_000
_EXTENSIONS = {"parquet": (".parquet", ".parquet"), "jsonl": (".json", ".jsonl")}


class FilesSink(Sink):
    def __init__(self, spec: SinkSpec, store: ObjectStore) -> None:
        self.name = spec.name
        self.spec = spec
        self.store = store

    def staging_prefix(self, epoch: int, attempt: str) -> str:
        return f"{STAGING}/{epoch:012d}-{attempt}/"

    def prepare(self, epoch: int, attempt: str, df: DataFrame, rows: int) -> Prepared:
        """Write the rows under the attempt's staging prefix (nothing at all for no rows)."""
        if rows == 0:
            return Prepared(self.name, self.store.uri(), epoch, attempt, 0)
        prefix = self.staging_prefix(epoch, attempt)
        self._write(df.coalesce(max(1, -(-rows // ROWS_PER_FILE))), prefix)
        staged_ext, final_ext = _EXTENSIONS[self.spec.format]
        staged = [
            i
            for i in self.store.list(prefix)
            if i.key.endswith(staged_ext) and not i.key.rsplit("/", 1)[-1].startswith(("_", "."))
        ]
        files = tuple(
            StagedFile(i.key, f"part-{epoch:012d}-{n:05d}{final_ext}", i.size)
            for n, i in enumerate(staged)
        )
        return Prepared(self.name, self.store.uri(), epoch, attempt, rows, files)

    def _write(self, df: DataFrame, prefix: str) -> None:
        target = to_spark_uri(self.store.uri(prefix.rstrip("/")))
        writer = df.write.mode("errorifexists")
        if self.spec.format == "parquet":
            writer.parquet(target)
        else:
            writer.option("timestampFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX").option(
                "ignoreNullFields", "false"
            ).option("compression", "none").json(target)

    def commit(self, prepared: Prepared) -> None:
        for staged in prepared.files:
            self.store.move(staged.staged_key, staged.final_key)
        self.store.delete_prefix(self.staging_prefix(prepared.epoch, prepared.attempt))

    def abort(self, prepared: Prepared) -> None:
        self.store.delete_prefix(self.staging_prefix(prepared.epoch, prepared.attempt))

    def abort_others(self, epoch: int, keep: str | None) -> int:
        """Delete staged output of every attempt of ``epoch`` except ``keep``."""
        mine = self.staging_prefix(epoch, keep) if keep else None
        doomed = [
            i.key
            for i in self.store.list(f"{STAGING}/{epoch:012d}-")
            if mine is None or not i.key.startswith(mine)
        ]
        for key in doomed:
            self.store.delete(key)
        return len(doomed)

    def committed_keys(self) -> list[str]:
        """Keys of the committed files (what a reader of the sink path sees)."""
        return [i.key for i in self.store.list() if not i.key.startswith((STAGING, "_", "."))]
