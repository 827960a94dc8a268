"""Compaction of a files sink: merge the small files of past epochs, crash-safely.

Every committed epoch adds at least one ``part-<epoch>-<n>`` file per partition folder.
:func:`compact` merges those of epochs ``<= up_to_epoch``, folder by folder and in epoch
order, into ``part-<first epoch:012d>-<last epoch:012d>-c<n:05d>.<ext>`` files of about
``target_rows`` rows (an input file is never split). Rows are copied exactly, changelog
columns (``_op``, ``_epoch``) included, so :func:`~sluice.sinks.files.read_upsert` gives the
same table afterwards: JSON lines byte for byte; Parquet with Spark's timestamp encoding and
schema metadata (a column required in some inputs becomes optional). Compacted files are not
rewritten by later runs.

The steps of one compaction (``<id>`` is derived from the inputs, so a re-run finds it)::

    1. write     the merged files under _compaction/<id>/...   (invisible: '_' prefix)
    2. manifest  _compaction/<id>.json: new files and the files they replace — the commit point
    3. publish   move the new files into place, delete the replaced ones, delete the manifest

Every run starts by recovering: a manifest left by a crash is published again (each move and
delete is idempotent); ``_compaction/<id>/`` without a manifest is a crash before the commit
point and is deleted. Readers may briefly see a new file *and* the files it replaces (between
the moves and the deletes of step 3): compact when no reader needs a consistent snapshot, or
use the Delta sink, whose ``OPTIMIZE`` swaps files atomically. Run one compaction per sink at a
time; the pipeline may keep committing newer epochs meanwhile.

Memory: pyarrow streams the inputs one file at a time; what is held is one input file, one
row group being assembled (≤ ``ROW_GROUP_ROWS`` rows) and the encoded output file, which is
uploaded with one ``put``.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from sluice.sinks.exceptions import CompactionConflict, CompactionError
from sluice.sinks.files import EXTENSIONS, is_hidden
from sluice.storage import ObjectAlreadyExists, ObjectInfo, ObjectNotFound, ObjectStore
from sluice.storage.manifest import read_manifest, write_manifest

__all__ = [
    "COMPACTION",
    "CompactedFile",
    "CompactionConflict",
    "CompactionError",
    "CompactionManifest",
    "CompactionReport",
    "InjectedCrash",
    "compact",
    "recover",
]

COMPACTION = "_compaction"
ROW_GROUP_ROWS = 128 * 1024
KIND = "compaction"
SPARK_SCHEMA = b"org.apache.spark.sql.parquet.row.metadata"
CrashPoint = Literal["written", "manifest", "moved", "deleted"]
_EPOCH_FILE = re.compile(r"part-(\d{12})-(\d{5})\.(parquet|jsonl)")
_MANIFEST = re.compile(rf"{COMPACTION}/([^/]+)\.json")


class InjectedCrash(Exception):  # a test fault, deliberately not a SluiceError
    """Raised by ``compact(..., crash_after=point)``: a test's simulated crash."""

    def __init__(self, point: str) -> None:
        super().__init__(f"injected crash after {point!r}")
        self.point = point


@dataclass(frozen=True)
class CompactedFile:
    """One merged file: where step 1 wrote it, where step 3 moves it, what it replaces."""

    staged_key: str
    final_key: str
    rows: int
    size: int
    replaces: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "staged_key": self.staged_key,
            "final_key": self.final_key,
            "rows": self.rows,
            "size": self.size,
            "replaces": list(self.replaces),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompactedFile:
        return cls(
            data["staged_key"],
            data["final_key"],
            int(data["rows"]),
            int(data["size"]),
            tuple(data["replaces"]),
        )


@dataclass(frozen=True)
class CompactionManifest:
    """The commit point of one compaction (stored as a ``compaction`` manifest)."""

    id: str
    format: str
    up_to_epoch: int
    files: tuple[CompactedFile, ...]
    replaced_bytes: int

    @property
    def key(self) -> str:
        return manifest_key(self.id)

    @property
    def replaced(self) -> tuple[str, ...]:
        return tuple(k for f in self.files for k in f.replaces)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "format": self.format,
            "up_to_epoch": self.up_to_epoch,
            "files": [f.to_dict() for f in self.files],
            "replaced_bytes": self.replaced_bytes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompactionManifest:
        files = tuple(CompactedFile.from_dict(f) for f in data["files"])
        return cls(
            data["id"], data["format"], int(data["up_to_epoch"]), files, int(data["replaced_bytes"])
        )


@dataclass(frozen=True)
class CompactionReport:
    """What one :func:`compact` call did. ``files_before`` / ``files_after`` count every
    committed file of the sink; ``rows`` and the byte counts cover the rewritten files only.
    ``recovered`` names compactions a crashed run left and this one finished or cleaned up."""

    uri: str
    up_to_epoch: int
    id: str | None = None
    files_before: int = 0
    files_after: int = 0
    replaced: int = 0
    written: int = 0
    rows: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    recovered: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "compaction-report",
            "uri": self.uri,
            "up_to_epoch": self.up_to_epoch,
            "id": self.id,
            "files_before": self.files_before,
            "files_after": self.files_after,
            "replaced": self.replaced,
            "written": self.written,
            "rows": self.rows,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "recovered": list(self.recovered),
        }


@dataclass(frozen=True)
class _Input:
    key: str
    epoch: int
    size: int


def manifest_key(compaction_id: str) -> str:
    return f"{COMPACTION}/{compaction_id}.json"


def compact(
    store: ObjectStore,
    format: str,
    *,
    up_to_epoch: int,
    target_rows: int = 1_000_000,
    crash_after: CrashPoint | None = None,
) -> CompactionReport:
    """Merge the committed ``part-<epoch>-<n>`` files of epochs ``<= up_to_epoch`` under
    ``store`` (a files sink of ``format``), per partition folder.

    First :func:`recover` what a crashed run left and plan (per folder, the single-epoch
    files; a folder with one is skipped), then the steps of the module docstring: 1. write,
    2. manifest (the commit point), 3. publish.

    Only pass epochs whose sink commit is complete (``sluice compact`` checks): a re-run of
    an epoch's commit moves its staged files to names compaction may have replaced.
    ``crash_after`` (tests) raises :class:`InjectedCrash` right after that step.
    """
    if format not in EXTENSIONS:
        raise CompactionError(store.uri(), f"unknown format {format!r}")
    if target_rows < 1:
        raise CompactionError(store.uri(), f"target_rows must be positive, got {target_rows}")
    recovered = recover(store)
    committed = [i for i in store.list() if not is_hidden(i.key)]
    count = len(committed)
    report = CompactionReport(store.uri(), up_to_epoch, None, count, count, recovered=recovered)
    groups = _plan(committed, format, up_to_epoch)
    if not groups:
        return report
    manifest = _write(store, format, up_to_epoch, groups, target_rows)
    _check_names(store, manifest, {i.key for i in committed})
    _crash(crash_after, "written")
    _commit(store, manifest)
    _crash(crash_after, "manifest")
    _publish(store, manifest, crash_after)
    return _done(report, manifest)


def recover(store: ObjectStore) -> tuple[str, ...]:
    """Publish every compaction whose manifest is stored; delete files written by ones that
    crashed before their manifest. Returns the ids it handled."""
    listing = [i.key for i in store.list(f"{COMPACTION}/")]
    committed = sorted(m.group(1) for k in listing if (m := _MANIFEST.fullmatch(k)))
    for compaction_id in committed:
        body = read_manifest(store, manifest_key(compaction_id), KIND)
        _publish(store, CompactionManifest.from_dict(body), None)
    leftovers = sorted({k.split("/")[1] for k in listing if k.count("/") >= 2} - set(committed))
    for compaction_id in leftovers:
        store.delete_prefix(f"{COMPACTION}/{compaction_id}/")
    return (*committed, *leftovers)


# -- steps -------------------------------------------------------------------------------------


def _plan(committed: list[ObjectInfo], format: str, up_to_epoch: int) -> dict[str, list[_Input]]:
    """Folder -> its single-epoch files of epochs ``<= up_to_epoch``, in (epoch, n) order;
    only folders with at least two such files."""
    ext = EXTENSIONS[format][1]
    groups: dict[str, list[_Input]] = {}
    for info in committed:
        folder, _, name = info.key.rpartition("/")
        match = _EPOCH_FILE.fullmatch(name)
        if match and name.endswith(ext) and int(match.group(1)) <= up_to_epoch:
            groups.setdefault(folder, []).append(_Input(info.key, int(match.group(1)), info.size))
    return {
        folder: sorted(inputs, key=lambda i: i.key)  # names sort by (epoch, n)
        for folder, inputs in sorted(groups.items())
        if len(inputs) > 1
    }


def _write(
    store: ObjectStore,
    format: str,
    up_to_epoch: int,
    groups: dict[str, list[_Input]],
    target_rows: int,
) -> CompactionManifest:
    """Step 1: merge each folder's inputs into files under ``_compaction/<id>/``."""
    inputs = [i for group in groups.values() for i in group]
    compaction_id = _compaction_id(inputs)
    merge = _merge_parquet if format == "parquet" else _merge_jsonl
    files: list[CompactedFile] = []
    for folder, group in groups.items():
        for n, (data, rows, merged) in enumerate(merge(store, group, target_rows)):
            name = (
                f"part-{merged[0].epoch:012d}-{merged[-1].epoch:012d}-c{n:05d}"
                f"{EXTENSIONS[format][1]}"
            )
            final_key = f"{folder}/{name}" if folder else name
            staged_key = f"{COMPACTION}/{compaction_id}/{final_key}"
            store.put(staged_key, data)
            replaces = tuple(i.key for i in merged)
            files.append(CompactedFile(staged_key, final_key, rows, len(data), replaces))
    replaced_bytes = sum(i.size for i in inputs)
    return CompactionManifest(compaction_id, format, up_to_epoch, tuple(files), replaced_bytes)


def _commit(store: ObjectStore, manifest: CompactionManifest) -> None:
    """Step 2, the commit point. A stored identical manifest (a concurrent run of the same
    compaction) is accepted; a different one is a conflict."""
    try:
        write_manifest(store, manifest.key, KIND, manifest.to_dict(), if_absent=True)
    except ObjectAlreadyExists as exc:
        stored = read_manifest(store, manifest.key, KIND)
        if stored != manifest.to_dict():
            raise CompactionConflict(
                store.uri(), f"{manifest.key} is already stored with other content"
            ) from exc


def _publish(
    store: ObjectStore, manifest: CompactionManifest, crash_after: CrashPoint | None
) -> None:
    """Step 3, idempotent: moves, then deletes of the replaced files, then the manifest."""
    for f in manifest.files:
        try:
            store.move(f.staged_key, f.final_key)
        except ObjectNotFound as exc:
            raise CompactionError(
                store.uri(),
                f"compaction {manifest.id}: {f.final_key} is neither staged nor in place",
            ) from exc
    _crash(crash_after, "moved")
    for key in manifest.replaced:
        store.delete(key)
    _crash(crash_after, "deleted")
    store.delete_prefix(f"{COMPACTION}/{manifest.id}/")
    store.delete(manifest.key)


# -- merging -----------------------------------------------------------------------------------

_Merged = tuple[bytes, int, list[_Input]]


def _merge_jsonl(store: ObjectStore, group: list[_Input], target_rows: int) -> Iterator[_Merged]:
    """Concatenate the files' bytes (every line kept as written), ``target_rows`` a file."""
    out, rows, merged = io.BytesIO(), 0, list[_Input]()
    for item in group:
        data = store.get(item.key)
        count = sum(1 for line in data.splitlines() if line.strip())
        if merged and rows + count > target_rows:
            yield out.getvalue(), rows, merged
            out, rows, merged = io.BytesIO(), 0, []
        out.write(data if data.endswith(b"\n") or not data else data + b"\n")
        rows += count
        merged.append(item)
    if merged:
        yield out.getvalue(), rows, merged


class _ParquetOut:
    """One merged Parquet file being written: the schema (every column nullable, see
    :func:`_nullable`) and timestamp encoding of its first input; row groups of up to
    ``ROW_GROUP_ROWS`` rows."""

    def __init__(self, schema: pa.Schema, int96: bool) -> None:
        self.schema, self.int96 = schema, int96
        self.buffer = io.BytesIO()
        self.writer = pq.ParquetWriter(
            self.buffer, schema, compression="snappy", use_deprecated_int96_timestamps=int96
        )
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.rows = 0
        self.merged: list[_Input] = []

    def accepts(self, table: pa.Table, int96: bool, target_rows: int) -> bool:
        fits = not self.merged or self.rows + table.num_rows <= target_rows
        return fits and int96 == self.int96 and _nullable(table.schema).equals(self.schema)

    def add(self, table: pa.Table, item: _Input) -> None:
        self.pending.append(table.cast(self.schema))  # at most widens nullability
        self.pending_rows += table.num_rows
        self.rows += table.num_rows
        self.merged.append(item)
        if self.pending_rows >= ROW_GROUP_ROWS:
            self._flush()

    def close(self) -> _Merged:
        self._flush()
        self.writer.close()
        return self.buffer.getvalue(), self.rows, self.merged

    def _flush(self) -> None:
        if self.pending:
            self.writer.write_table(pa.concat_tables(self.pending), row_group_size=ROW_GROUP_ROWS)
            self.pending, self.pending_rows = [], 0


def _merge_parquet(store: ObjectStore, group: list[_Input], target_rows: int) -> Iterator[_Merged]:
    """Append the files' tables in order, ``target_rows`` a file; a file whose columns or
    timestamp encoding differ from the current output's starts a new one."""
    out: _ParquetOut | None = None
    for item in group:
        parquet = pq.ParquetFile(io.BytesIO(store.get(item.key)), coerce_int96_timestamp_unit="us")
        int96 = any(c.physical_type == "INT96" for c in parquet.schema)
        table = parquet.read()
        if out is not None and not out.accepts(table, int96, target_rows):
            yield out.close()
            out = None
        if out is None:
            out = _ParquetOut(_nullable(table.schema), int96)
        out.add(table, item)
    if out is not None:
        yield out.close()


def _nullable(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every column nullable, in Spark's copy of it too. Spark writes a column
    as required when its plan proves it has no nulls, which can differ between epochs of one
    pipeline; widening loses nothing (Spark reads every file column as nullable anyway)."""
    metadata = dict(schema.metadata or {})
    if SPARK_SCHEMA in metadata:
        spark_schema = json.loads(metadata[SPARK_SCHEMA])
        for column in spark_schema.get("fields", []):
            column["nullable"] = True
        metadata[SPARK_SCHEMA] = json.dumps(spark_schema, separators=(",", ":")).encode()
    return pa.schema([f.with_nullable(True) for f in schema], metadata=metadata)


# -- helpers -----------------------------------------------------------------------------------


def _compaction_id(inputs: list[_Input]) -> str:
    """``<first epoch>-<last epoch>-<hash of the replaced keys>``: the same inputs give the
    same id, so a re-run after a crash before the commit point redoes the same compaction."""
    digest = hashlib.sha256("\n".join(sorted(i.key for i in inputs)).encode()).hexdigest()
    epochs = [i.epoch for i in inputs]
    return f"{min(epochs):012d}-{max(epochs):012d}-{digest[:16]}"


def _check_names(store: ObjectStore, manifest: CompactionManifest, existing: set[str]) -> None:
    """A compacted name must be new: ``move`` would silently replace a file holding rows."""
    taken = sorted(f.final_key for f in manifest.files if f.final_key in existing)
    if taken:
        store.delete_prefix(f"{COMPACTION}/{manifest.id}/")
        raise CompactionConflict(store.uri(), f"compacted file name(s) already taken: {taken}")


def _crash(crash_after: CrashPoint | None, point: CrashPoint) -> None:
    if crash_after == point:
        raise InjectedCrash(point)


def _done(report: CompactionReport, manifest: CompactionManifest) -> CompactionReport:
    replaced, written = len(manifest.replaced), len(manifest.files)
    return replace(
        report,
        id=manifest.id,
        files_after=report.files_before - replaced + written,
        replaced=replaced,
        written=written,
        rows=sum(f.rows for f in manifest.files),
        bytes_before=manifest.replaced_bytes,
        bytes_after=sum(f.size for f in manifest.files),
    )
