"""The ``files`` source: JSON lines / CSV / Parquet objects under a local or S3 prefix.

Offsets are positions in the key order of the objects: an epoch reads the next files whose
keys sort after the committed ``after_key``. By default the source is one partition ordered
by ``(file key, line)``. With ``partition_by: directory`` every first-level folder is a
partition, and files are read in the order (name inside the partition, partition), so
time-named files of several partitions interleave as concurrent streams do. A new file that
sorts at or before the committed offset
is an error (:class:`FileBehindOffset`), never skipped silently.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.contracts.sources import Offset, Source, SourceRange
from sluice.jvm.context import context_cache
from sluice.sources.exceptions import FileBehindOffset, PlannedFilesGone, UnreadableFileNames
from sluice.spec.components.files_source import FilesSourceConfig
from sluice.storage import ObjectStore, key_problem, to_spark_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["FilesOffset", "FilesRange", "FilesSource", "key_digest"]

_EMPTY_DIGEST = "0" * 64


def key_digest(keys: Iterable[str], start: str = _EMPTY_DIGEST) -> str:
    """Order-free digest of a set of keys (XOR of their SHA-256), updatable incrementally."""
    value = int(start, 16)
    for key in keys:
        # a local name that is not UTF-8 digests as its bytes (it is refused when planned)
        raw = key.encode("utf-8", "surrogateescape")
        value ^= int.from_bytes(hashlib.sha256(raw).digest(), "big")
    return f"{value:064x}"


@dataclass(frozen=True)
class FilesOffset(Offset):
    """Every file whose key sorts at or before ``after_key`` has been read.

    ``files_consumed`` and ``consumed_digest`` describe that set so a planner can tell,
    cheaply, whether a file has since appeared behind the offset.
    """

    after_key: str | None = None
    files_consumed: int = 0
    consumed_digest: str = _EMPTY_DIGEST

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "files",
            "after_key": self.after_key,
            "files_consumed": self.files_consumed,
            "consumed_digest": self.consumed_digest,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FilesOffset:
        if data.get("type") != "files":
            raise ValueError(f"not a files offset: {data!r}")
        return cls(data["after_key"], int(data["files_consumed"]), data["consumed_digest"])

    def describe(self) -> str:
        return f"{self.after_key} (#{self.files_consumed})" if self.after_key else "-"


@dataclass(frozen=True)
class FilesRange(SourceRange):
    """The files one epoch reads, in key order, and the offset it starts from."""

    start: FilesOffset
    files: tuple[str, ...]
    behind: tuple[int, str] | None = None  # (count, digest) of files behind start, if changed
    waiting: tuple[str, ...] = ()  # partitions with files listed after this range

    @property
    def end(self) -> FilesOffset:
        count, digest = self.behind or (self.start.files_consumed, self.start.consumed_digest)
        return FilesOffset(self.files[-1], count + len(self.files), key_digest(self.files, digest))

    @property
    def units(self) -> int:
        return len(self.files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "files",
            "start": self.start.to_dict(),
            "files": list(self.files),
            "behind": list(self.behind) if self.behind else None,
            **({"waiting": list(self.waiting)} if self.waiting else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FilesRange:
        behind = data.get("behind")
        return cls(
            FilesOffset.from_dict(data["start"]),
            tuple(data["files"]),
            (int(behind[0]), str(behind[1])) if behind else None,
            tuple(str(p) for p in data.get("waiting", ())),
        )


class FilesSource(Source[FilesOffset, FilesRange]):
    """Files under ``config.path``; hidden names (``_x`` / ``.x`` segments) are ignored.

    ``history`` returns every file key earlier epochs planned, given how to read the keys out
    of a stored range (:meth:`units_of`: the protocol never looks inside a range); it is only
    consulted when the cheap count/digest check says the files behind the offset changed.
    """

    offset_type = FilesOffset
    range_type = FilesRange

    def __init__(
        self,
        config: FilesSourceConfig,
        store: ObjectStore,
        *,
        required: tuple[str, ...] = (),
        read: tuple[str, ...] | None = None,
        history: Callable[[Callable[[dict[str, Any]], Iterable[str]]], set[str]] = (
            lambda _units: set()
        ),
    ) -> None:
        self.config = config
        self.store = store
        self.required = required
        self.read_columns = read  # the schema columns the pipeline reads (None: all: parsing)
        self.history = history
        self._footers: dict[tuple[str, ...], list[Any]] = {}  # the last range's (read once)

    @property
    def location(self) -> str:
        return self.store.uri()

    def initial_offset(self) -> FilesOffset:
        return FilesOffset()

    def list_keys(self) -> list[str]:
        return [i.key for i in self.store.list() if not _hidden(i.key)]

    def plan_range(
        self, start: Offset, max_units: int | None, max_records: int | None = None
    ) -> FilesRange | None:
        assert isinstance(start, FilesOffset)
        keys = sorted(self.list_keys(), key=self.order)
        after = None if start.after_key is None else self.order(start.after_key)
        behind = [k for k in keys if after is not None and self.order(k) <= after]
        changed = self._check_behind(start, behind)
        unread = [k for k in keys if after is None or self.order(k) > after]
        fresh = unread
        limit = max_units or self.config.max_files_per_epoch
        if limit:
            fresh = fresh[:limit]
        self._check_names(fresh)
        if max_records is not None:
            fresh = self._cap_records(fresh, max_records)
        if not fresh:
            return None
        waiting: tuple[str, ...] = ()
        if self.config.partition_by == "directory":
            waiting = tuple(sorted({k.split("/", 1)[0] for k in unread[len(fresh) :] if "/" in k}))
        return FilesRange(start, tuple(fresh), changed, waiting)

    unit_name = "files"

    def pending_units(self, start: Offset) -> int | None:
        assert isinstance(start, FilesOffset)
        after = None if start.after_key is None else self.order(start.after_key)
        return sum(1 for k in self.list_keys() if after is None or self.order(k) > after)

    def units_of(self, range_data: dict[str, Any]) -> tuple[str, ...]:
        return tuple(range_data.get("files", ()))

    def missing_units(self, rng: SourceRange) -> list[str]:
        assert isinstance(rng, FilesRange)
        existing = set(self.list_keys())
        return [k for k in rng.files if k not in existing]

    def waiting_partitions(self, rng: SourceRange) -> tuple[str, ...]:
        assert isinstance(rng, FilesRange)
        return rng.waiting

    def _check_names(self, keys: list[str]) -> None:
        """Raise :class:`UnreadableFileNames` for the keys no reader can open."""
        unreadable = [(k, why) for k in keys if (why := unreadable_name(k)) is not None]
        if unreadable:
            files, reasons = (list(t) for t in zip(*unreadable, strict=True))
            raise UnreadableFileNames(self.store.uri(), files, reasons)

    def _cap_records(self, keys: list[str], max_records: int) -> list[str]:
        """The longest prefix of ``keys`` holding at most ``max_records`` records (whole files
        only, at least one). Counting reads each candidate file once, on the planner."""
        taken: list[str] = []
        total = 0
        for key in keys:
            total += self.count_records(key)
            if taken and total > max_records:
                break
            taken.append(key)
        return taken

    def count_records(self, key: str) -> int:
        """Records in one file as the reader sees them: non-blank lines (minus a CSV header),
        or the Parquet row count from the footer."""
        data = self.store.get(key)
        if self.config.format == "parquet":
            import pyarrow.parquet as pq  # Parquet sources only (DAG parsing never counts)

            return int(pq.ParquetFile(io.BytesIO(data)).metadata.num_rows)
        lines = sum(1 for line in data.split(b"\n") if line.strip())
        if self.config.format == "csv" and self.config.header and lines:
            lines -= 1
        return lines

    def offset_from_user(self, data: dict[str, Any]) -> FilesOffset:
        """``{"after_key": "<key>"}``: start after that file (``null``: from the beginning).

        Count and digest are computed from the files now under the path, so a file added
        behind the offset later is still caught.
        """
        unknown = sorted(set(data) - {"type", "after_key", "files_consumed", "consumed_digest"})
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}; a files offset is {{'after_key': KEY}}")
        if data.get("type", "files") != "files":
            raise ValueError(f"type {data['type']!r} is not 'files' (this pipeline reads files)")
        after = data.get("after_key")
        if after is not None and (not isinstance(after, str) or not after):
            raise ValueError(f"after_key must be a file key (a string) or null, not {after!r}")
        limit = None if after is None else self.order(after)
        behind = [k for k in self.list_keys() if limit is not None and self.order(k) <= limit]
        return FilesOffset(after, len(behind), key_digest(behind))

    def order(self, key: str) -> tuple[str, str]:
        """The read order of a key: (name inside its partition, partition)."""
        if self.config.partition_by == "directory" and "/" in key:
            partition, rest = key.split("/", 1)
            return (rest, partition)
        return (key, "")

    def is_before(self, a: Offset, b: Offset) -> bool:
        assert isinstance(a, FilesOffset) and isinstance(b, FilesOffset)
        if b.after_key is None:
            return False
        return a.after_key is None or self.order(a.after_key) < self.order(b.after_key)

    def _check_behind(self, start: FilesOffset, behind: list[str]) -> tuple[int, str] | None:
        """None when the files behind the offset are exactly those consumed; otherwise the new
        (count, digest) after deletions; raises if any file there was never read."""
        digest = key_digest(behind)
        if len(behind) == start.files_consumed and digest == start.consumed_digest:
            return None
        known = self.history(self.units_of)
        unread = [k for k in behind if k not in known]
        if unread:
            raise FileBehindOffset(self.store.uri(), unread, start.after_key or "")
        return (len(behind), digest)  # only deletions of already-read files: fine

    def read(self, spark: SparkSession, rng: SourceRange) -> DataFrame:
        # Spark and pyarrow load here, in process: plan and commit (Airflow's light tasks) and
        # DAG parsing use this class without either.
        from pyspark.sql import functions as F

        from sluice.sources.file_formats import parse_files
        from sluice.sources.parsing import IndexedFile

        assert isinstance(rng, FilesRange)
        index = [
            IndexedFile(self._qualified(spark, k), k, i, to_spark_uri(self.store.uri(k)))
            for i, k in enumerate(rng.files)
        ]
        try:
            frame, metas = parse_files(
                spark, self.config, self.store, index, self.required, self.read_columns
            )
        except Exception:
            gone = [k for k in rng.files if not self.store.exists(k)]  # asked only on failure
            if gone:
                raise PlannedFilesGone(self.store.uri(), gone) from None
            raise
        if metas is not None:
            self._footers = {rng.files: metas}
        if self.config.partition_by == "directory":
            folder = F.when(F.instr("_file", "/") > 0, F.substring_index("_file", "/", 1))
            frame = frame.withColumn("_partition", F.coalesce(folder, F.lit("")))
        return frame

    def before_hints(self, rng: SourceRange, column: str) -> dict[tuple[str, int], int | None]:
        """From the Parquet footers :meth:`read` fetched: for each file, the largest event
        time of the earlier files of its partition in the range (None: none before it)."""
        assert isinstance(rng, FilesRange)
        metas = self._footers.get(rng.files)
        if self.config.format != "parquet" or metas is None:
            return {}
        from sluice.storage.footers import column_maxima

        hints: dict[tuple[str, int], int | None] = {}
        running: dict[str, int] = {}
        for major, (key, high) in enumerate(
            zip(rng.files, column_maxima(metas, column), strict=True)
        ):
            partition = self.partition_of(key)
            hints[(partition, major)] = running.get(partition)
            if high is not None:
                running[partition] = max(high, running.get(partition, high))
        return hints

    def partition_of(self, key: str) -> str:
        """The source partition of a file (``_partition`` of its records)."""
        if self.config.partition_by == "directory" and "/" in key:
            return key.split("/", 1)[0]
        return "0" if self.config.partition_by != "directory" else ""

    def _qualified(self, spark: SparkSession, key: str) -> str:
        """The path exactly as Spark reports it in ``_metadata.file_path``. A key of plain
        characters (nothing a URI would escape) is appended to the qualified folder, found
        once per Spark context; any other is qualified on its own (six Py4J calls)."""
        if not _PLAIN_KEY.fullmatch(key):
            return self._qualify(spark, key)
        roots = context_cache(spark, "qualified roots")
        base = self.store.uri()
        root = roots.get(base)
        if root is None:
            root = roots[base] = self._qualify(spark, "x")[:-1]
        return root + key

    def _qualify(self, spark: SparkSession, key: str) -> str:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        path = jvm.org.apache.hadoop.fs.Path(to_spark_uri(self.store.uri(key)))
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        uri = str(path.getFileSystem(conf).makeQualified(path).toUri().toString())
        # Spark reports local files without the empty authority: file:/abs, not file:///abs.
        return "file:/" + uri[len("file:///") :] if uri.startswith("file:///") else uri


# Characters a file key may hold that a URI keeps as they are (no percent-escape).
_PLAIN_KEY = re.compile(r"[A-Za-z0-9._\-=/]+")


def unreadable_name(key: str) -> str | None:
    """Why no reader can open the listed file ``key``, or None. Any name of Unicode text is
    read (glob characters, colons, spaces, ``%``, ``#``...: :mod:`sluice.sources.exact_files`);
    a local name whose bytes are not UTF-8 is not (Hadoop's paths are Java strings), nor one
    the store itself refuses (``a\\..\\b``: :func:`sluice.storage.key_problem`)."""
    try:
        key.encode()
    except UnicodeEncodeError:
        return "the name is not valid UTF-8"
    return key_problem(key)


def _hidden(key: str) -> bool:
    return any(part.startswith(("_", ".")) for part in key.split("/"))
