"""Avro and ORC files as records, like Parquet's (:func:`sluice.sources.parsing.typed_rows`).

Columns are matched by name; a column stored with the schema's type is taken as it is, any
other is read as text and cast by the text rules (a value that does not fit is a
``wrong_type`` dead letter); ``_raw`` is the row as JSON, only for rows with an error.

Spark's readers give neither format a row index (``_metadata.row_index`` is Parquet's only),
and both are splittable: a big file is read by several tasks, an Avro split from the first
sync marker after its start, an ORC split by the stripes that start in it. So each row is
numbered in read order by the helper jar's ``LineInfo`` (per split, from the rows before the
split), and the rows before each split of a file Spark splits are counted in one extra job
over the same split boundaries (:func:`sluice.sources.parsing.rows_before`), as for text.

Each file is read with the schema stored in it (its Avro header, its ORC footer, read on the
driver): files with different stored schemas are read by one scan each, the scans' records
put together (usually there is one).
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING

from sluice.jvm.udfs import SqlFunctions
from sluice.sources.exact_files import file_schemas, read_exact
from sluice.sources.parsing import Index, Schema, rows_before, typed_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["COLUMNAR_FORMATS", "parse_columnar"]

COLUMNAR_FORMATS = ("avro", "orc")
_LINE_MASK = (1 << 48) - 1  # LineInfo's line number (its flags above: none without bytes)
# Avro: read every file whatever its name (a Hadoop setting may otherwise skip names
# without .avro: avro.mapred.ignore.inputs.without.extension)
_OPTIONS = {"avro": {"ignoreExtension": "true"}, "orc": {}}
_NO_COLUMNS = '{"type":"struct","fields":[]}'


def parse_columnar(
    spark: SparkSession,
    fmt: str,
    index: Index,
    schema: Schema,
    required: tuple[str, ...],
    read: tuple[str, ...] | None = None,
) -> DataFrame:
    """The records of the Avro or ORC files ``index`` names; ``_line`` is the 1-based row in
    the file, exact however Spark splits it."""
    if fmt not in COLUMNAR_FORMATS:
        raise ValueError(f"not a columnar format here: {fmt!r}")
    options = _OPTIONS[fmt]
    stored = file_schemas(spark, fmt, [f.read for f in index], options)
    groups: dict[str | None, Index] = {}
    for file, found in zip(index, stored, strict=True):
        groups.setdefault(found, []).append(file)
    frames = []
    for found, files in groups.items():
        # no schema (an empty ORC file): no columns, and no rows to expect
        data_schema = found or _NO_COLUMNS
        frame = read_exact(spark, fmt, [f.read for f in files], options, data_schema)
        before = rows_before(spark, frame, files, fmt, options, data_schema)
        with SqlFunctions(spark) as fns:
            info = fns.line_info(before)
            line = (
                f"({info}(_metadata.file_path, _metadata.file_block_start, CAST(NULL AS BINARY))"
                f" & {_LINE_MASK})"
            )
            frames.append(typed_rows(frame, index, schema, required, read, line))
    return reduce(lambda a, b: a.union(b), frames)
