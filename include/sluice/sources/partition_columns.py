"""Hive-style folders as record columns (``source.partition_columns``): ``dt=2026-12-07/`` in a
file's key gives every record of that file ``dt = 2026-12-07``, in every format.

A value is the text after ``name=`` in a folder of the file's key (not its name), unescaped as
Spark's partition discovery unescapes it (``%3A`` is ``:``; ``ExternalCatalogUtils.
unescapePathName``), ``__HIVE_DEFAULT_PARTITION__`` (how Spark and Hive write a null) and an
empty value are null. Folder names match the column case aside; when a key holds the same
folder name twice, the one nearest the file wins. The text is cast to the column's type by the
rules of every other text value (:func:`sluice.sources.parsing.cast_sql`); one that does not
convert is ``wrong_type: partition 'dt' = 2026-13-45 is not a date``, and a missing or null
event time ``missing_event_time: partition 'dt' is absent or null`` — for every record of the
file. As for file columns, only the columns the pipeline reads are checked (all with
``strict_schema``); another takes null where its value does not convert.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.jvm.udfs import select
from sluice.operators.sqltext import lit, quote
from sluice.sources.parsing import Index, Schema, cast_sql, wrong_type_sql

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["DEFAULT_PARTITION", "folder_values", "unescape_path_name", "with_partition_columns"]

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
_RECORD = ("_partition", "_file", "_major", "_line", "_raw")
_HEX = frozenset("0123456789abcdefABCDEF")


def unescape_path_name(text: str) -> str:
    """Spark's ``ExternalCatalogUtils.unescapePathName`` (Spark 4.2): each ``%`` followed by
    two ASCII hex digits (``%3A``, ``%3a``) is the character of that code (0-255); any other
    ``%`` stays as it is."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "%" and i + 2 < len(text) and all(d in _HEX for d in text[i + 1 : i + 3]):
            out.append(chr(int(text[i + 1 : i + 3], 16)))
            i += 3
            continue
        out.append(c)
        i += 1
    return "".join(out)


def folder_values(key: str, columns: tuple[str, ...]) -> dict[str, str | None]:
    """The raw text of each of ``columns`` in the folders of ``key`` (None: no such folder,
    ``__HIVE_DEFAULT_PARTITION__`` or empty)."""
    wanted = set(columns)
    found: dict[str, str | None] = dict.fromkeys(columns)
    for folder in key.split("/")[:-1]:
        name, equals, raw = folder.partition("=")
        if not equals:
            continue
        column = unescape_path_name(name).lower()
        if column in wanted:
            found[column] = None if raw in ("", DEFAULT_PARTITION) else unescape_path_name(raw)
    return found


def with_partition_columns(
    frame: DataFrame,
    index: Index,
    schema: Schema,
    partitions: Schema,
    required: tuple[str, ...],
    read: tuple[str, ...] | None,
) -> DataFrame:
    """``frame`` (the records of the files, their own columns) with the ``partitions`` columns
    from each file's key, their checks in ``_error``, the columns in ``schema`` order.

    The first problem found wins as everywhere: a malformed record, then a partition column
    that is the event time, the file's own columns, then the other partition columns."""
    names = tuple(c for c, _ in partitions)
    values = [folder_values(f.key, names) for f in sorted(index, key=lambda f: f.major)]
    if [f.major for f in sorted(index, key=lambda f: f.major)] != list(range(len(index))):
        raise ValueError("sluice: the index's files are not numbered 0..n-1")
    typed: dict[str, str] = {}
    first: list[str] = []  # checks before the file's own errors (the event time)
    last: list[str] = []  # checks after them
    for column, kind in partitions:
        texts = ", ".join("CAST(NULL AS STRING)" if v[column] is None else lit(v[column])
                          for v in values)  # fmt: skip
        text = f"element_at(array({texts}), _major + 1)"
        typed[column] = cast_sql(text, kind)
        if column in required:
            message = lit(f"missing_event_time: partition '{column}' is absent or null")
            first.append(f"CASE WHEN ({text}) IS NULL THEN {message} END")
            first.append(wrong_type_sql(column, kind, text, typed[column], "partition"))
        elif read is None or column in read:
            last.append(wrong_type_sql(column, kind, text, typed[column], "partition"))
    if first:
        malformed = "CASE WHEN startswith(_error, 'malformed:') THEN _error END"
        error = f"coalesce({', '.join([malformed, *first, '_error', *last])})"
    elif last:
        error = f"coalesce({', '.join(['_error', *last])})"
    else:
        error = "_error"
    columns = [f"{typed[c]} AS {quote(c)}" if c in typed else quote(c) for c, _ in schema]
    return select(frame, *_RECORD, f"{error} AS _error", *columns)
