"""``type: files``: files under a path, in JSON lines, CSV, Parquet, Avro or ORC
(docs/files-source-and-sink.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field

from sluice.spec.components.base import (
    NAME_RE,
    SCHEMA_TYPES,
    ComponentConfig,
    Flag,
    PositiveDuration,
    PositiveInt,
    Schema,
    SourceConfig,
    Text,
    one_of,
    problem,
)

if TYPE_CHECKING:
    pass

__all__ = [
    "COMPRESSIONS",
    "FILE_FORMATS",
    "TIME_DIRECTIVES",
    "CleanSourceConfig",
    "FilesSourceConfig",
    "LayoutConfig",
    "NotificationsConfig",
]

FILE_FORMATS = ("jsonl", "csv", "parquet", "avro", "orc")
SourceFormat = Literal["jsonl", "csv", "parquet", "avro", "orc"]
# ``auto``: by the file name's extension, as Spark's codecs choose (``.gz``, ``.bz2``,
# ``.zst``, ``.lz4``; anything else is read as it is)
COMPRESSIONS = ("auto", "none", "gzip", "bzip2", "zstd", "lz4")
# The strftime directives a time prefix may use, most significant first: each is zero-padded
# and fixed-width, so keys sort in time order (what listing from a start key relies on).
TIME_DIRECTIVES = ("%Y", "%m", "%d", "%H", "%M", "%S")


def _time_prefix(value: Any) -> Any:
    """A strftime pattern the keys start with, its directives in :data:`TIME_DIRECTIVES`
    order (a prefix of it), e.g. ``dt=%Y-%m-%d/hour=%H/`` or ``%Y/%m/%d/``."""
    fix = "e.g. dt=%Y-%m-%d/hour=%H/ or %Y/%m/%d/ (directives %Y %m %d %H %M %S, in that order)"
    if not isinstance(value, str) or not value:
        raise problem(f"{value!r} is not a time prefix", fix)
    found = re.findall(r"%.", value)
    if not found or found != list(TIME_DIRECTIVES[: len(found)]):
        raise problem(
            f"{value!r}: the directives must be {' '.join(TIME_DIRECTIVES)} from the start, "
            "in that order (zero-padded fields sort as times)",
            fix,
        )
    if value.startswith("/") or "//" in value:
        raise problem(f"{value!r} is not relative to the source path", fix)
    return value


class LayoutConfig(ComponentConfig):
    """Keys that start with a time (a time-partitioned layout): a plan lists only from
    ``newest time read - lookback`` on, and forgets files older than that."""

    time_prefix: Annotated[str, BeforeValidator(_time_prefix)]
    lookback: PositiveDuration

    REQUIRED_FIX: ClassVar[Mapping[str, str]] = {
        "time_prefix": "e.g. time_prefix: dt=%Y-%m-%d/hour=%H/",
        "lookback": "how long a partition may still receive files, e.g. lookback: 2h",
    }


def _connection(value: Any) -> Any:
    if value is not None and not (isinstance(value, str) and NAME_RE.match(value.lower())):
        raise problem(f"{value!r} is not a connection id", "e.g. connection: kafka_default")
    return value.lower() if isinstance(value, str) else value


class NotificationsConfig(ComponentConfig):
    """The store's object-created events on a Kafka topic: a plan reads the new events
    instead of listing the folder, and lists it in full every ``full_listing_every`` plans
    (the safety net for an event lost on the way)."""

    topic: Text
    # seaweedfs: a SeaweedFS filer's notification.kafka (protobuf EventNotification);
    # s3: S3 event notification JSON (AWS's record format, as MinIO's Kafka target sends)
    format: Annotated[Literal["seaweedfs", "s3"], one_of(("seaweedfs", "s3"))] = "seaweedfs"
    connection: Annotated[str | None, BeforeValidator(_connection)] = None
    bootstrap_servers: Text | None = None
    # how the events name the source path: SeaweedFS's filer path (/buckets/landing/clicks/in/
    # for s3://landing/clicks/in), S3's bucket and key prefix (landing/clicks/in/). Default:
    # derived from the path.
    event_prefix: Text | None = None
    full_listing_every: PositiveInt = 10

    REQUIRED_FIX: ClassVar[Mapping[str, str]] = {
        "topic": "the Kafka topic the store sends its events to"
    }

    def problems(self) -> list[tuple[str, str, str]]:
        if not self.connection and not self.bootstrap_servers:
            fix = "e.g. connection: kafka_default, or bootstrap_servers: 127.0.0.1:9092"
            return [("connection", "the events' Kafka broker is not given", fix)]
        return []


class CleanSourceConfig(ComponentConfig):
    """What happens to a file once no retained checkpoint or savepoint can replay it."""

    mode: Annotated[Literal["archive", "delete"], one_of(("archive", "delete"))]
    archive_path: Text | None = None

    REQUIRED_FIX: ClassVar[Mapping[str, str]] = {"mode": "archive (with archive_path) or delete"}

    def problems(self) -> list[tuple[str, str, str]]:
        if self.mode == "archive" and not self.archive_path:
            return [("archive_path", "is required with mode: archive",
                     "e.g. archive_path: s3://bucket/archive/clicks/")]  # fmt: skip
        if self.mode == "delete" and self.archive_path:
            return [("archive_path", "is only used with mode: archive",
                     "remove it, or use mode: archive")]  # fmt: skip
        return []


def _globs(value: Any) -> Any:
    globs = [value] if isinstance(value, str) else value
    if not isinstance(globs, list | tuple) or not all(isinstance(g, str) and g for g in globs):
        raise problem(f"{value!r} is not a list of patterns", 'e.g. ["*.json.gz", "*.jsonl"]')
    return tuple(globs)


def _partition_columns(value: Any) -> Any:
    if isinstance(value, tuple):
        value = dict(value)
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise problem(f"expected a mapping of folder names to types, got {value!r}",
                      "e.g. partition_columns: {dt: date}")  # fmt: skip
    for column, kind in value.items():
        if not isinstance(column, str) or not NAME_RE.match(column):
            raise problem(f"{column!r} is not a column name", "lower-case letters, digits, _")
        if kind not in SCHEMA_TYPES:
            raise problem(f"{column}: unknown type {kind!r}", f"use one of {list(SCHEMA_TYPES)}")
    return tuple((str(c), str(t)) for c, t in value.items())


class FilesSourceConfig(SourceConfig):
    type: Literal["files"] = "files"
    path: Text
    columns: Schema = Field(alias="schema")
    format: Annotated[SourceFormat, one_of(FILE_FORMATS)]
    max_files_per_epoch: PositiveInt | None = None
    header: Flag = True  # csv only: the first line of every file is a header
    # "none" (one partition) or "directory" (each first-level folder is a partition)
    partition_by: Annotated[Literal["none", "directory"], one_of(("none", "directory"))] = "none"
    # type-check every schema column of every record, also those the pipeline never reads
    # (by default a bad value there is taken as null: docs/dead-letters.md)
    strict_schema: Flag = False
    # jsonl / csv: how files are compressed (auto: by extension, as Spark's codecs)
    compression: Annotated[
        Literal["auto", "none", "gzip", "bzip2", "zstd", "lz4"], one_of(COMPRESSIONS)
    ] = "auto"
    # Hive-style folders (``dt=2026-12-07/``) read as record columns, with their types
    partition_columns: Annotated[
        tuple[tuple[str, str], ...], BeforeValidator(_partition_columns)
    ] = ()
    # which listed files are read: glob patterns over the key under ``path`` (a pattern
    # without '/' matches the file name); a file matching ``exclude`` is never read
    include: Annotated[tuple[str, ...], BeforeValidator(_globs)] = ()
    exclude: Annotated[tuple[str, ...], BeforeValidator(_globs)] = ()
    # the order of an epoch's files: by modification time then name, or by name
    order: Annotated[Literal["modified", "name"], one_of(("modified", "name"))] = "modified"
    # files modified longer ago than this before the newest file read are not read (and
    # leave the set of files read); None: every file is read whenever it lands
    max_file_age: PositiveDuration | None = None
    layout: LayoutConfig | None = None
    notifications: NotificationsConfig | None = None
    clean_source: CleanSourceConfig | None = None
    # a file that changed after it was read (same name, other size or content): reported
    # as a dead letter and not read again (report), or the plan stops naming it (fail)
    changed_files: Annotated[Literal["report", "fail"], one_of(("report", "fail"))] = "report"

    @property
    def schema(self) -> tuple[tuple[str, str], ...]:  # type: ignore[override]
        """The record columns: ``schema:``'s, then each partition column it does not name."""
        named = {c for c, _ in self.columns}
        return (*self.columns, *[(c, t) for c, t in self.partition_columns if c not in named])

    @property
    def file_columns(self) -> tuple[tuple[str, str], ...]:
        """The columns read from inside the files (a partition column comes from its folder)."""
        folders = {c for c, _ in self.partition_columns}
        return tuple((c, t) for c, t in self.columns if c not in folders)

    @property
    def rereads_cheaply(self) -> bool:
        # Parquet files are immutable by the source's contract: 1M bids cost 0.85 s for four
        # column-pruned scans against 1.28 s cached (bench/nexmark.py's q7 columns)
        return self.format == "parquet"

    def storage_path(self) -> str:
        return self.path

    def connection_ids(self) -> tuple[str, ...]:
        events = self.notifications
        return (events.connection,) if events is not None and events.connection else ()

    def problems(self) -> list[tuple[str, str, str]]:
        found = []
        declared = dict(self.columns)
        for column, kind in self.partition_columns:
            if declared.get(column, kind) != kind:
                found.append((f"partition_columns.{column}",
                              f"is {kind} here but {declared[column]} in schema",
                              "give the column one type (or leave it out of schema)"))  # fmt: skip
        clean = self.clean_source
        if clean is not None and clean.archive_path and _inside(clean.archive_path, self.path):
            why = "is inside the source path, so archived files would be listed again"
            fix = "archive outside the path, or under a hidden folder: path/_archive/"
            found.append(("clean_source.archive_path", why, fix))
        return found

    def describe(self) -> str:
        limit = f", {self.max_files_per_epoch} files/epoch" if self.max_files_per_epoch else ""
        return f"files {self.format} at {self.path}{limit}"


def _inside(archive: str, path: str) -> bool:
    """Whether ``archive`` is ``path`` or a visible folder under it (a hidden one, such as
    ``path/_archive``, is never listed)."""
    root, folder = path.rstrip("/"), archive.rstrip("/")
    if folder == root:
        return True
    if not folder.startswith(root + "/"):
        return False
    return not any(p.startswith(("_", ".")) for p in folder[len(root) + 1 :].split("/") if p)
