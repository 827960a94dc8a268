"""Read exactly the files named, each once, whatever characters their names hold.

Spark's ``spark.read.text(paths)`` / ``.parquet(*paths)`` take a path holding ``{}[]*?\\`` as a
Hadoop glob pattern: ``a*.jsonl`` reads ``ab.jsonl`` too, ``[x].jsonl`` reads ``x.jsonl`` (or
nothing), ``b\\c.jsonl`` reads ``bc.jsonl``, and the folder listing a glob makes fails on any
name in it with a colon (``2026-03-01T12:00:00.jsonl``). Escaping the pattern does not cure
the colon (Hadoop's globber rebuilds every path component with ``new Path(parent, name)``,
which takes ``2026-03-01T12`` for a URI scheme), and Spark's internal switch
``__globPaths__=false`` lists every path once per globbing path (Spark 4.2), reading files
several times. So the helper jar's ``ExactFiles`` builds the relation as Spark's
``DataSource`` does, minus the glob step, and checks that every path was listed exactly once.

On local disk the files are read through Hadoop's ``RawLocalFileSystem``: the default
``LocalFileSystem`` opens a ``.<name>.crc`` companion beside every file it reads, and builds
that path with the same colon-as-scheme parse, so any name with a colon failed there. Input
files have no such companions (they are hidden names, never listed), so nothing is lost.
Only reads of local files get that setting: the read's Hadoop settings also configure the
first S3A filesystem an executor JVM creates for it, whose disk buffer for uploads asks for
the ``LocalFileSystem`` and failed (``ClassCastException: RawLocalFileSystem cannot be cast
to LocalFileSystem``) when a later task of that JVM wrote to S3: every epoch of the compose
stack's demo (S3 input, standalone executors) failed so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.jvm.context import context_cache

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["NEVER_SKIP", "RAW_LOCAL_FILES", "file_schemas", "read_exact"]

# Reader options (they become Hadoop settings of the read only); the cache must be bypassed,
# or the JVM's cached LocalFileSystem for ``file:`` is handed out regardless.
RAW_LOCAL_FILES = {
    "fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "fs.file.impl.disable.cache": "true",
}


# Reader options: a file that cannot be read fails the read, whatever the session's
# spark.sql.files.ignoreCorruptFiles / ignoreMissingFiles say (with them Spark skips the rest
# of a truncated file, or a file deleted after the listing, without an error: records lost).
NEVER_SKIP = {"ignoreCorruptFiles": "false", "ignoreMissingFiles": "false"}


def read_exact(
    spark: SparkSession,
    fmt: str,
    paths: list[str],
    options: dict[str, str] | None = None,
    schema: str | None = None,
) -> DataFrame:
    """``paths`` (URIs as Spark's readers take them, not percent-escaped) read by ``fmt``
    (``text``; ``lines``: text through the helper jar's ``CompressedLines``; ``parquet``,
    ``orc``, ``avro``) with reader ``options``; ``schema`` as DDL or Spark's JSON (None: the
    text formats' ``value``, or inferred from the files)."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame

    paths_text, pairs = _joined(paths, options)
    session: Any = spark
    read = _method(spark, "readJoined")
    java = read(session._jsparkSession, fmt, paths_text, pairs, schema)
    return ClassicFrame(java, spark)


def file_schemas(
    spark: SparkSession, fmt: str, paths: list[str], options: dict[str, str] | None = None
) -> list[str | None]:
    """The schema Spark reads each file of ``paths`` with by ``fmt`` (``orc``, ``avro``), as
    Spark's JSON (None: the file has none, e.g. an empty ORC file): each file's own, from its
    footer or header, read on the driver (``ExactFiles.schemas``, one Py4J call)."""
    paths_text, pairs = _joined(paths, options)
    session: Any = spark
    schemas = _method(spark, "schemas")
    answer = str(schemas(session._jsparkSession, fmt, paths_text, pairs))
    found = answer.split("\n")[:-1]
    if len(found) != len(paths):
        raise RuntimeError(f"sluice: {len(found)} schemas for {len(paths)} files")
    return [text or None for text in found]


def _joined(paths: list[str], options: dict[str, str] | None) -> tuple[str, str]:
    """The paths and the read's settings (local files: :data:`RAW_LOCAL_FILES` first, then
    :data:`NEVER_SKIP`), each in one string for one Py4J call."""
    local = any(p.startswith("file:") or "://" not in p for p in paths)
    settings = {**(RAW_LOCAL_FILES if local else {}), **NEVER_SKIP, **(options or {})}
    joined = [*paths, *settings, *settings.values()]
    if not paths or any("\x1f" in t or "\x1e" in t for t in joined):
        raise ValueError(f"cannot read {list(paths)} with {settings}")
    pairs = "\x1f".join(f"{k}\x1e{v}" for k, v in settings.items())
    return "\x1f".join(paths), pairs


def _method(spark: SparkSession, name: str) -> Any:
    """``ExactFiles.<name>``, looked up once per Spark context (a lookup costs a Py4J call
    per name)."""
    cache = context_cache(spark, "exact files")
    method = cache.get(name)
    if method is None:
        jvm: Any = spark.sparkContext._jvm
        method = cache[name] = getattr(jvm.io.sluice.spark.ExactFiles, name)
    return method
