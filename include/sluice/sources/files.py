"""The ``files`` source: JSON lines, CSV, Parquet, Avro or ORC objects under a local or S3
prefix, read exactly once each, whatever their names and whenever they land.

An epoch's plan is the files listed now minus the files already read (the offsets hold that
set, stored compactly: :mod:`sluice.sources.files_read`), in a deterministic order: by
modification time, then name (``order: modified``, the default), or by name
(``order: name``; with ``partition_by: directory`` the name inside the partition, then the
partition, so time-named files of several partitions interleave). The plan stores its exact
file list, so a retry reads the same files. A file that changes after it was read (same name,
other size or content) is not read again: it is reported as a ``changed_file`` dead letter
(``changed_files: report``) or stops the plan (``fail``).

What a plan lists is bounded by the spec: ``include`` / ``exclude`` patterns, a time
``layout`` (only the recent partitions are listed; :mod:`sluice.sources.file_listing`), and
``max_file_age`` (files older than that before the newest file read are not read, and leave
the set). docs/files-source-and-sink.md has the whole picture.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.bulk import paused_gc
from sluice.contracts.sources import Source, SourceRange
from sluice.jvm.context import context_cache
from sluice.sources.exceptions import ChangedFiles, PlannedFilesGone, UnreadableFileNames
from sluice.sources.file_listing import FileFilter
from sluice.sources.files_offsets import ChangedFile, FilesOffset, FilesRange
from sluice.sources.files_read import FileEntry, ReadLog, Stored, entry_of, same_content
from sluice.spec.components.files_source import FilesSourceConfig
from sluice.storage import ObjectInfo, ObjectStore, key_problem, to_spark_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["FilesOffset", "FilesRange", "FilesSource"]


@dataclass(frozen=True)
class Survey:
    """What a listing (or the store's events) holds beyond an offset: the files read (the
    whole set after a listing, the entries of the events' files otherwise), the new files in
    read order, the files found changed since they were read, and how they were found:
    ``listed`` (a listing), ``events`` (the notifications topic's end offsets taken before
    looking; None without notifications)."""

    read: dict[str, Stored]
    new: list[ObjectInfo]
    changed: list[ChangedFile]
    listed: bool = True
    events: dict[int, int] | None = None


class FilesSource(Source[FilesOffset, FilesRange]):
    """Files under ``config.path``; hidden names (``_x`` / ``.x`` segments) are ignored.

    ``log`` stores the sets of files read (the pipeline's checkpoint store, under the
    source's folder); :meth:`planning` names what a plan writes there by its epoch.
    """

    offset_type = FilesOffset
    range_type = FilesRange

    def __init__(
        self,
        config: FilesSourceConfig,
        store: ObjectStore,
        *,
        log: ReadLog,
        required: tuple[str, ...] = (),
        read: tuple[str, ...] | None = None,
        archive: ObjectStore | None = None,
        events: Any = None,
    ) -> None:
        self.config = config
        self.store = store
        self.log = log
        self.archive = archive  # clean_source: archive's folder
        self.events = events  # notifications: a StoreEvents (sluice.sources.store_events)
        self.required = required
        self.read_columns = read  # the schema columns the pipeline reads (None: all: parsing)
        self.filter = FileFilter(config)
        self.epoch = 0  # the epoch being planned (planning())
        self._footers: dict[tuple[str, ...], list[Any]] = {}  # the last range's (read once)

    @property
    def location(self) -> str:
        return self.store.uri()

    def initial_offset(self) -> FilesOffset:
        return FilesOffset()

    def planning(self, epoch: int) -> FilesSource:
        planner = copy.copy(self)
        planner.epoch = epoch
        return planner

    def list_keys(self) -> list[str]:
        """Every file the source would read, read or not (the listing, filtered)."""
        return [i.key for i in self.filter.listing(self.store, None)]

    # -- planning -----------------------------------------------------------------------

    def plan_range(
        self, start: FilesOffset, max_units: int | None, max_records: int | None = None
    ) -> FilesRange | None:
        survey = self.survey(start)
        fresh = survey.new
        limit = max_units or self.config.max_files_per_epoch
        if limit:
            fresh = fresh[:limit]
        self._check_names([i.key for i in fresh])
        if max_records is not None and fresh:
            fresh = self._cap_records(fresh, max_records)
        if survey.changed and self.config.changed_files == "fail":
            changes = [f"was {c.was.describe()}, now {c.now.describe()}" for c in survey.changed]
            raise ChangedFiles(self.store.uri(), [c.key for c in survey.changed], changes)
        if not fresh and not survey.changed:
            return None
        waiting: tuple[str, ...] = ()
        if self.config.partition_by == "directory":
            left = survey.new[len(fresh) :]
            waiting = tuple(sorted({i.key.split("/", 1)[0] for i in left if "/" in i.key}))
        end = self._end(start, survey, fresh)
        keys = tuple(i.key for i in fresh)
        return FilesRange(start, keys, end, tuple(survey.changed), waiting)

    def survey(self, start: FilesOffset, *, planning: bool = True) -> Survey:
        """The files listed now (or named by the store's events since ``start``) that
        ``start`` has not read, and those changed since. Not ``planning`` (a watcher asking
        whether input waits), the events are enough even when a plan would list."""
        found, listed, events = self._discover(start, planning)
        if listed:
            read = self.log.load(start.read)
        else:  # the events' few names: the set's entries for them, the base seldom loaded
            read = self.log.lookup(start.read, [info.key for info in found])
        with paused_gc():
            return self._compare(start, read, found, listed, events)

    def _compare(
        self,
        start: FilesOffset,
        read: dict[str, Stored],
        found: list[ObjectInfo],
        listed: bool,
        events: dict[int, int] | None,
    ) -> Survey:
        """What in ``found`` is new to ``read`` (and not too old), and what changed."""
        age_cutoff = self._age_cutoff(start.newest_modified_ns)
        lowest = self._lowest_time(start.newest_time)
        new: list[ObjectInfo] = []
        changed: list[ChangedFile] = []
        for info in found:
            if self._below_floor(start, info.key):
                continue
            was = read.get(info.key)
            if was is not None:
                now = entry_of(info)
                if not same_content(was, now):
                    changed.append(ChangedFile(info.key, FileEntry._make(was), now))
                continue
            if age_cutoff is not None and info.modified_ns < age_cutoff:
                continue  # older than max_file_age before the newest file read
            if lowest is not None and (self._time_of(info.key) or 0) < lowest:
                continue  # in a partition the layout no longer lists
            new.append(info)
        new.sort(key=self._read_order)
        return Survey(read, new, sorted(changed, key=lambda c: c.key), listed, events)

    def _discover(
        self, start: FilesOffset, planning: bool = True
    ) -> tuple[list[ObjectInfo], bool, dict[int, int] | None]:
        """The candidate files: the listing (from the layout's start key), or, with
        notifications, the files the events since ``start`` name — a full listing when the
        events cannot tell (the first plan, the events retention deleted) and every
        ``full_listing_every`` plans, for an event lost on the way. The topic's end offsets
        are taken before either: a file landing meanwhile is in both or in the next events."""
        if self.events is None:
            return self.filter.listing(self.store, start.newest_time), True, None
        from sluice.sources.store_events import StoreEventsGone

        end = self.events.end_offsets()
        every = self.config.notifications.full_listing_every  # type: ignore[union-attr]
        due = planning and start.since_listing + 1 >= every
        if start.events is not None and not due:
            try:
                happened = self.events.read(dict(start.events), end)
            except StoreEventsGone:
                pass  # a listing finds what the deleted events told
            else:
                return self._event_files(happened), False, end
        return self.filter.listing(self.store, start.newest_time), True, end

    def _event_files(self, happened: list[Any]) -> list[ObjectInfo]:
        """The files the events name, each as its last event left it (deleted: none)."""
        last: dict[str, Any] = {}
        for event in happened:
            last[event.key] = event
        return [
            ObjectInfo(e.key, e.size, e.modified_ns, e.etag)
            for key, e in sorted(last.items())
            if not e.deleted and self.filter.wanted(key)
        ]

    def _end(self, start: FilesOffset, survey: Survey, fresh: list[ObjectInfo]) -> FilesOffset:
        """The offset once ``fresh`` is read: ``start``'s set plus ``fresh`` (and the changed
        files as they are now), stored by this plan."""
        newest = max([i.modified_ns for i in fresh], default=None)
        if start.newest_modified_ns is not None:
            newest = max(newest or 0, start.newest_modified_ns)
        times = [t for i in fresh if (t := self._time_of(i.key)) is not None]
        newest_time = max(
            [*times, *([start.newest_time] if start.newest_time else [])], default=None
        )
        added = {i.key: entry_of(i) for i in fresh} | {c.key: c.now for c in survey.changed}
        age_cutoff = self._age_cutoff(newest)
        lowest = self._lowest_time(newest_time)

        def keep(key: str, entry: Stored) -> bool:
            if age_cutoff is not None and entry[1] < age_cutoff:
                return False
            return lowest is None or (self._time_of(key) or 0) >= lowest

        ref = self.log.write(self.epoch, start.read, survey.read, added, keep)
        events, since = start.events, 0
        if survey.events is not None:
            # events are read again until every file they named is taken (a cap left some)
            complete = len(fresh) == len(survey.new)
            events = tuple(sorted(survey.events.items())) if complete or survey.listed else events
            since = 0 if survey.listed else start.since_listing + 1
            if survey.listed and not complete:
                since = self.config.notifications.full_listing_every  # type: ignore[union-attr]
        return FilesOffset(ref, start.after_key, newest, newest_time, events, since)

    def _age_cutoff(self, newest: int | None) -> int | None:
        age = self.config.max_file_age
        return None if age is None or newest is None else newest - age * 1000

    def _lowest_time(self, newest_time: int | None) -> int | None:
        layout = self.filter.layout
        return None if layout is None else layout.lowest(newest_time)

    def _time_of(self, key: str) -> int | None:
        layout = self.filter.layout
        return None if layout is None else layout.time_of(key)

    def _below_floor(self, start: FilesOffset, key: str) -> bool:
        return start.after_key is not None and self.order(key) <= self.order(start.after_key)

    def _read_order(self, info: ObjectInfo) -> tuple[Any, ...]:
        if self.config.order == "name":
            return self.order(info.key)
        return (info.modified_ns, info.key.encode("utf-8", "surrogateescape"))

    unit_name = "files"

    def pending_units(self, start: FilesOffset) -> int | None:
        survey = self.survey(start, planning=False)
        return len(survey.new) + len(survey.changed)

    def units_of(self, range_data: dict[str, Any]) -> tuple[str, ...]:
        return tuple(range_data.get("files", ()))

    def remarks(self, range_data: dict[str, Any]) -> tuple[str, ...]:
        changed = [ChangedFile.from_dict(c) for c in range_data.get("changed", ())]
        return tuple(
            f"changed after it was read, not read again: {c.key} "
            f"(was {c.was.describe()}, now {c.now.describe()})"
            for c in changed
        )

    def missing_units(self, rng: FilesRange) -> list[str]:
        if len(rng.files) <= 100:
            return [k for k in rng.files if not self.store.exists(k)]
        existing = {i.key for i in self.store.list()}
        return [k for k in rng.files if k not in existing]

    def waiting_partitions(self, rng: FilesRange) -> tuple[str, ...]:
        return rng.waiting

    def forget(self, kept: list[dict[str, Any]], through: int) -> int:
        refs = [FilesOffset.from_dict(offset).read for offset in kept]
        return self.log.forget(refs, through)

    @property
    def releases_input(self) -> bool:
        return self.config.clean_source is not None

    def release(self, units: list[str], latest: dict[str, Any] | None) -> int:
        """``clean_source``: move each file under the archive folder (same key) or delete it;
        a file that changed since it was read (not as ``latest``'s set has it) stays, to be
        reported. A file already moved (a crash after the move) counts as released."""
        clean = self.config.clean_source
        if clean is None:
            return 0
        entries = self.log.lookup(FilesOffset.from_dict(latest).read, units) if latest else {}
        released = 0
        for key in units:
            now = self.store.info(key)
            if now is None:
                archived = clean.mode == "archive" and self._archive().exists(key)
                released += int(archived)
                continue
            was = entries.get(key)
            if was is not None and not same_content(was, entry_of(now)):
                continue
            if clean.mode == "archive":
                self.store.move_to(key, self._archive(), key)
            else:
                self.store.delete(key)
            released += 1
        return released

    def _archive(self) -> ObjectStore:
        assert self.archive is not None, "clean_source: archive opens its folder"
        return self.archive

    def _check_names(self, keys: list[str]) -> None:
        """Raise :class:`UnreadableFileNames` for the keys no reader can open."""
        unreadable = [(k, why) for k in keys if (why := unreadable_name(k)) is not None]
        if unreadable:
            files, reasons = (list(t) for t in zip(*unreadable, strict=True))
            raise UnreadableFileNames(self.store.uri(), files, reasons)

    def _cap_records(self, infos: list[ObjectInfo], max_records: int) -> list[ObjectInfo]:
        """The longest prefix of ``infos`` holding at most ``max_records`` records (whole
        files only, at least one). Counting reads each candidate file once, on the planner."""
        taken: list[ObjectInfo] = []
        total = 0
        for info in infos:
            total += self.count_records(info.key)
            if taken and total > max_records:
                break
            taken.append(info)
        return taken

    def count_records(self, key: str) -> int:
        """Records in one file as the reader sees them (non-blank lines after decompression,
        minus a CSV header; rows of a columnar file), counted on the planner."""
        from sluice.sources.file_formats import count_records

        return count_records(self.store, key, self.config)

    # -- offsets ------------------------------------------------------------------------

    def offset_from_user(self, data: dict[str, Any]) -> FilesOffset:
        """``{"after_key": "<key>"}``: every file whose key sorts at or before it counts as
        read, and nothing else (``null``: from the beginning). A stored offset (with
        ``read``) is taken as it is."""
        if data.get("type", "files") != "files":
            raise ValueError(f"type {data['type']!r} is not 'files' (this pipeline reads files)")
        if "read" in data:
            return FilesOffset.from_dict({"type": "files", **data})
        unknown = sorted(set(data) - {"type", "after_key", "files_consumed", "consumed_digest"})
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}; a files offset is {{'after_key': KEY}}")
        after = data.get("after_key")
        if after is not None and (not isinstance(after, str) or not after):
            raise ValueError(f"after_key must be a file key (a string) or null, not {after!r}")
        return FilesOffset(after_key=after)

    def order(self, key: str) -> tuple[str, str]:
        """A key's place in name order: (name inside its partition, partition)."""
        if self.config.partition_by == "directory" and "/" in key:
            partition, rest = key.split("/", 1)
            return (rest, partition)
        return (key, "")

    def is_before(self, a: FilesOffset, b: FilesOffset) -> bool:
        """Whether ``b`` counts as read a file that ``a`` does not: in ``b``'s set, or, by
        ``b``'s ``after_key``, among the files listed now."""
        ours = self.log.load(a.read)

        def read_by_a(key: str) -> bool:
            return key in ours or self._below_floor(a, key)

        theirs = set(self.log.load(b.read))
        if any(not read_by_a(k) for k in theirs):
            return True
        if b.after_key is None or (
            a.after_key is not None and self.order(b.after_key) <= self.order(a.after_key)
        ):
            return False
        return any(self._below_floor(b, k) and not read_by_a(k) for k in self.list_keys())

    def read(self, spark: SparkSession, rng: SourceRange) -> DataFrame:
        # Spark and pyarrow load here, in process: plan and commit (Airflow's light tasks) and
        # DAG parsing use this class without either.
        from pyspark.sql import functions as F

        assert isinstance(rng, FilesRange)
        frame = self._changed_rows(spark, rng) if rng.changed else None
        if rng.files:
            files = self._read_files(spark, rng)
            frame = files if frame is None else files.unionByName(frame)
        assert frame is not None, "a range reads files or reports changed ones"
        if self.config.partition_by == "directory":
            folder = F.when(F.instr("_file", "/") > 0, F.substring_index("_file", "/", 1))
            frame = frame.withColumn("_partition", F.coalesce(folder, F.lit("")))
        return frame

    def _read_files(self, spark: SparkSession, rng: FilesRange) -> DataFrame:
        from sluice.sources.file_formats import parse_files
        from sluice.sources.parsing import IndexedFile

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
        return frame

    def _changed_rows(self, spark: SparkSession, rng: FilesRange) -> DataFrame:
        """One dead-letter record per changed file (``changed_file``: line 0, the file as
        read and as listed now in ``_raw``), placed after the epoch's files."""
        import json

        from sluice.contracts.sources import SPARK_TYPES
        from sluice.operators.sqltext import quote

        rows = [
            (
                self.partition_of(c.key),
                c.key,
                len(rng.files) + i,
                0,
                json.dumps({"file": c.key, "was": c.was._asdict(), "now": c.now._asdict()}),
                c.reason(),
                *[None for _ in self.config.schema],
            )
            for i, c in enumerate(rng.changed)
        ]
        columns = ["_partition STRING", "_file STRING", "_major INT", "_line BIGINT",
                   "_raw STRING", "_error STRING"]  # fmt: skip
        columns += [f"{quote(c)} {SPARK_TYPES[kind].upper()}" for c, kind in self.config.schema]
        return spark.createDataFrame(rows, ", ".join(columns))

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
