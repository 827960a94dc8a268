"""The files source's readers, by ``format``: an epoch's files as records.

:func:`parse_files` turns the planned files of one epoch (an :data:`~sluice.sources.parsing.Index`,
in read order) into the columns of :data:`sluice.contracts.sources.RECORD_COLUMNS` followed by
the source's schema columns, with a per-record ``_error`` (docs/dead-letters.md). Positions:
``_major`` is the file's place in the epoch, ``_line`` the 1-based line (text formats, blank
lines counted) or row (columnar formats) inside the file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.sources.parsing import (
    IndexedFile,
    parse_csv_lines,
    parse_json_lines,
    parse_parquet,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sluice.spec.components.files_source import FilesSourceConfig
    from sluice.storage import ObjectStore

__all__ = ["parse_files"]


def parse_files(
    spark: SparkSession,
    config: FilesSourceConfig,
    store: ObjectStore,
    index: list[IndexedFile],
    required: tuple[str, ...],
    read: tuple[str, ...] | None,
) -> tuple[DataFrame, list[Any] | None]:
    """The records of the files ``index`` names, and the Parquet footers read on the way
    (None for other formats: :meth:`FilesSource.before_hints` uses them)."""
    from sluice.storage.footers import footers, types_of

    schema = config.schema
    if config.format == "parquet":
        metas = footers(store, [f.key for f in index])
        frame = parse_parquet(spark, index, schema, required, types_of(metas), read)
        return frame, metas
    if config.format == "csv":
        return parse_csv_lines(spark, index, schema, required, config.header, read), None
    return parse_json_lines(spark, index, schema, required, read), None
