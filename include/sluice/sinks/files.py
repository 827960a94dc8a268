"""The ``files`` sink: Parquet or JSON lines on a local or S3 path, committed atomically per file.

Layout under the sink path::

    part-<epoch:012d>-<n:05d>.parquet        committed rows (what readers see)
    <col>=<value>/.../part-<epoch:012d>-<n:05d>.parquet
                                             the same with ``partition_by`` (Hive folders)
    _staging/<epoch:012d>-<attempt>/...      prepared, invisible (Spark, pyarrow and the Hive
                                             convention skip names starting with '_')

Commit moves each staged file to its final, deterministic name (``n`` counts the epoch's
files in sorted staged-key order, partition folder kept); a re-run after a crash skips files
already moved, so commit is idempotent. :mod:`sluice.sinks.compaction` merges the small files
of past epochs.

With ``mode: upsert`` the committed files are a changelog: every row has ``_op`` (``upsert`` /
``delete``) and ``_epoch``; :func:`read_upsert` resolves it to the current table (per key, the
row of the highest epoch, unless that row is a delete).

Retraction (a rewind, docs/rewind.md) deletes the committed files of the rewound epochs: their
names carry the epoch (``part-<first>-<last>-c<n>`` for compacted files), so a re-run deletes
nothing more. An upsert sink's changelog then resolves to the table as it was. A compacted
file that holds epochs on both sides of the rewind cannot be split: the rewind is refused.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from sluice.contracts.records import NoHandle, Prepared, StagedFile
from sluice.contracts.sinks import Sink
from sluice.spec.components.files_sink import FilesSinkConfig
from sluice.storage import ObjectStore, to_spark_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "FilesSink",
    "committed_keys",
    "is_hidden",
    "partition_values",
    "read_rows",
    "read_upsert",
]

STAGING = "_staging"
ROWS_PER_FILE = 1_000_000
# An output of at least this many rows a core is written by every core (a file each): one
# task would also run alone whatever computes the rows before the write (e.g. a stateless
# pipeline's parsing), as coalesce does not shuffle.
ROWS_PER_CORE = 100_000
EXTENSIONS = {"parquet": (".parquet", ".parquet"), "jsonl": (".json", ".jsonl")}
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # the folder value Spark writes for a null
# part-<epoch>-<n>.<ext>, or a compacted part-<first>-<last>-c<n>.<ext>
_PART = re.compile(r"(?:^|/)part-(\d{12})-(?:(\d{12})-c)?\d{5}\.[a-z]+$")


class FilesSink(Sink[NoHandle]):
    supports_retraction = True
    handle_type = NoHandle
    counts_rows = True

    def __init__(self, config: FilesSinkConfig, store: ObjectStore) -> None:
        self.name = config.name
        self.config = config
        self.store = store

    def staging_prefix(self, epoch: int, attempt: str) -> str:
        return f"{STAGING}/{epoch:012d}-{attempt}/"

    def prepare(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """Write the rows under the attempt's staging prefix (nothing at all for no rows;
        ``rows`` None: counted as they are written)."""
        if rows == 0:
            return Prepared(self.name, self.store.uri(), epoch, attempt, 0)
        if self.config.mode == "append":  # the changelog columns belong to upsert sinks only
            df = df.drop("_op", "_epoch")
        prefix = self.staging_prefix(epoch, attempt)
        if rows is None:
            from sluice.jvm.udfs import counted, counting

            df, ledger = counting(df.sparkSession, df, f"sink:{self.name}")
            self._write(df, None, prefix)
            rows = counted(ledger)
            if rows == 0:
                self.store.delete_prefix(prefix)
                return Prepared(self.name, self.store.uri(), epoch, attempt, 0)
        else:
            self._write(df, rows, prefix)
        staged_ext, final_ext = EXTENSIONS[self.config.format]
        staged = [
            i
            for i in self.store.list(prefix)
            if i.key.endswith(staged_ext) and not is_hidden(i.key[len(prefix) :])
        ]
        files = tuple(
            StagedFile(i.key, _final_key(i.key[len(prefix) :], epoch, n, final_ext), i.size)
            for n, i in enumerate(staged)
        )
        return Prepared(self.name, self.store.uri(), epoch, attempt, rows, files)

    def _write(self, df: DataFrame, rows: int | None, prefix: str) -> None:
        """Spark writes ``df`` under ``prefix``: about ``ROWS_PER_FILE`` rows a file (one a core
        for large outputs, see ``ROWS_PER_CORE``), and with
        ``partition_by`` one folder per value whose rows sit in one task (so one file per
        folder and epoch unless it has more than ``ROWS_PER_FILE`` rows)."""
        target = to_spark_uri(self.store.uri(prefix.rstrip("/")))
        cores = df.sparkSession.sparkContext.defaultParallelism
        columns = list(self.config.partition_by)
        # not counted (rows None): as many files as the frame has partitions
        tasks = (
            0
            if rows is None
            else max(1, -(-rows // ROWS_PER_FILE), min(cores, rows // ROWS_PER_CORE))
        )
        if columns:
            spread = df.repartition(tasks, *columns) if tasks else df.repartition(*columns)
            writer = (
                spread.write.mode("errorifexists")
                .option("maxRecordsPerFile", ROWS_PER_FILE)
                .partitionBy(*columns)
            )
        elif tasks:
            writer = df.coalesce(tasks).write.mode("errorifexists")
        else:
            writer = df.write.mode("errorifexists").option("maxRecordsPerFile", ROWS_PER_FILE)
        if self.config.format == "parquet":
            writer.parquet(target)
        else:
            writer.option("timestampFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX").option(
                "ignoreNullFields", "false"
            ).option("compression", "none").json(target)

    def commit(self, prepared: Prepared) -> None:
        if prepared.retract_after is not None:
            self.retract(prepared.retract_after, prepared.epoch)
        for staged in prepared.files:
            self.store.move(staged.staged_key, staged.final_key)
        self.store.delete_prefix(self.staging_prefix(prepared.epoch, prepared.attempt))

    def abort(self, prepared: Prepared) -> None:
        self.store.delete_prefix(self.staging_prefix(prepared.epoch, prepared.attempt))

    def abort_others(self, epoch: int, keep: str | None) -> int:
        """Delete staged output of every attempt of ``epoch`` except ``keep``: whole attempt
        folders, so the hidden files Spark writes beside its output (``.crc``) go too."""
        epoch_prefix = f"{STAGING}/{epoch:012d}-"
        if keep is None:
            return self.store.delete_prefix(epoch_prefix)
        mine = self.staging_prefix(epoch, keep)
        attempts = {
            i.key[: i.key.index("/", len(STAGING) + 1) + 1]
            for i in self.store.list(epoch_prefix)
            if not i.key.startswith(mine)
        }
        return sum(self.store.delete_prefix(prefix) for prefix in sorted(attempts))

    def committed_keys(self) -> list[str]:
        """Keys of the committed files (what a reader of the sink path sees)."""
        return committed_keys(self.store)

    def retract(self, after: int, before: int) -> None:
        """Delete the committed files of the epochs between ``after`` and ``before``."""
        for key, first, last in _epoch_files(self.store):
            if after < first and last < before:
                self.store.delete(key)

    def retraction_problem(self, after: int) -> str | None:
        spanning = sorted(k for k, first, last in _epoch_files(self.store) if first <= after < last)
        if spanning:
            return (
                f"sink {self.name!r}: the compacted file {spanning[0]} holds epochs on both "
                f"sides of {after}, so their output cannot be retracted apart "
                "(rewind to an epoch outside the compacted ranges)"
            )
        return None


def _epoch_files(store: ObjectStore) -> list[tuple[str, int, int]]:
    """(key, first epoch, last epoch) of every committed part file."""
    found = []
    for key in committed_keys(store):
        match = _PART.search(key)
        if match:
            first = int(match.group(1))
            found.append((key, first, int(match.group(2) or first)))
    return found


def _final_key(relative: str, epoch: int, n: int, ext: str) -> str:
    """``part-<epoch>-<n>.<ext>`` in the staged file's partition folder (if any)."""
    folder, _, _ = relative.rpartition("/")
    name = f"part-{epoch:012d}-{n:05d}{ext}"
    return f"{folder}/{name}" if folder else name


def is_hidden(key: str) -> bool:
    """Spark's rule, per path segment: a name starting with '.', or with '_' and holding no
    '=' (``_staging``, ``_SUCCESS``; a partition folder ``_col=v`` is visible)."""
    return any(s.startswith(".") or (s.startswith("_") and "=" not in s) for s in key.split("/"))


def committed_keys(store: ObjectStore) -> list[str]:
    """Keys of the committed files under a files sink's store, partition folders included."""
    return [i.key for i in store.list() if not is_hidden(i.key)]


def partition_values(key: str) -> dict[str, str | None]:
    """The Hive partition columns of ``key`` as strings (``None`` for Spark's null folder):
    ``partition_values("day=2026-01-01/user=a%2Fb/part-1.parquet")`` is
    ``{"day": "2026-01-01", "user": "a/b"}``."""
    values: dict[str, str | None] = {}
    for segment in key.split("/")[:-1]:
        column, equals, raw = segment.partition("=")
        if equals:
            values[unquote(column)] = None if raw == HIVE_NULL else unquote(raw)
    return values


def read_rows(store: ObjectStore, format: str) -> list[dict[str, Any]]:
    """Every committed row under a files sink (what a reader of the path sees).

    Partition columns (``col=value`` folders) are added back from the path, after the
    file's columns, **as strings** (``None`` for a null): unlike Spark's reader, which infers
    their types, this does not guess (a timestamp comes back as ``"2026-01-01 00:01:00"``).
    """
    import pyarrow.parquet as pq  # readers only: the sink itself writes through Spark

    rows: list[dict[str, Any]] = []
    for key in committed_keys(store):
        data = store.get(key)
        if format == "parquet":
            found = pq.read_table(io.BytesIO(data)).to_pylist()
        else:
            found = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        parts = partition_values(key)
        rows.extend({**row, **parts} for row in found)
    return rows


def read_upsert(store: ObjectStore, format: str, keys: Sequence[str]) -> list[dict[str, Any]]:
    """The current table of an upsert sink: per ``keys``, the row with the highest ``_epoch``
    unless it is a ``delete``; ``_op`` and ``_epoch`` are dropped. A key written twice in one
    epoch is a bug in the writer and raises."""
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in read_rows(store, format):
        key = tuple(row.get(k) for k in keys)
        seen = latest.get(key)
        if seen is not None and seen["_epoch"] == row["_epoch"]:
            raise ValueError(f"upsert sink {store.uri()}: key {key} written twice in epoch "
                             f"{row['_epoch']}")  # fmt: skip
        if seen is None or row["_epoch"] > seen["_epoch"]:
            latest[key] = row
    return [
        {k: v for k, v in row.items() if k not in ("_op", "_epoch")}
        for row in latest.values()
        if row["_op"] != "delete"
    ]
