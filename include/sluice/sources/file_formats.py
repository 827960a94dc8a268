"""The files source's readers, by ``format``: an epoch's files as records (docs/file-formats.md).

:func:`parse_files` turns the planned files of one epoch (an :data:`~sluice.sources.parsing.Index`,
in read order) into the columns of :data:`sluice.contracts.sources.RECORD_COLUMNS` followed by
the source's schema columns, with a per-record ``_error`` (docs/dead-letters.md). Positions:
``_major`` is the file's place in the epoch, ``_line`` the 1-based line (text formats, blank
lines counted, after decompression) or row (columnar formats) inside the file, exact however
Spark splits the file.

Formats: ``jsonl`` and ``csv`` (:mod:`sluice.sources.parsing`, compressed as
``compression`` says: :mod:`sluice.sources.compression`), ``parquet``, ``avro`` and ``orc``
(:mod:`sluice.sources.columnar`). ``partition_columns`` come from each file's Hive-style
folders (:mod:`sluice.sources.partition_columns`); the files are parsed with
``config.file_columns``.

:func:`count_records` counts a file's records as the reader sees them, on the planner (no
Spark): the ``max_records`` cap.
"""

from __future__ import annotations

import io
from functools import reduce
from typing import TYPE_CHECKING, Any

from sluice.sources.compression import codec_of, decompressed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sluice.sources.parsing import IndexedFile
    from sluice.spec.components.files_source import FilesSourceConfig
    from sluice.storage import ObjectStore

__all__ = ["avro_rows", "count_lines", "count_records", "parse_files"]

_BLANK = b" \t\r\n\x0b\x0c"  # LineInfo's blank: nothing but ASCII whitespace
_BOM = b"\xef\xbb\xbf"


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
    from sluice.sources.parsing import parse_csv_lines, parse_json_lines, parse_parquet
    from sluice.storage.footers import footers

    columns = config.file_columns
    names = {c for c, _ in columns}
    inside = tuple(c for c in required if c in names)
    read_inside = None if read is None else tuple(c for c in read if c in names)
    metas = None
    if config.format == "parquet":
        metas = footers(store, [f.key for f in index])
        frames = [
            parse_parquet(spark, files, columns, inside, types, read_inside)
            for types, files in _parquet_scans(index, metas)
        ]
        frame = reduce(lambda a, b: a.union(b), frames)
    elif config.format == "csv":
        frame = parse_csv_lines(
            spark, index, columns, inside, config.header, read_inside, config.compression
        )
    elif config.format == "jsonl":
        frame = parse_json_lines(spark, index, columns, inside, read_inside, config.compression)
    else:
        from sluice.sources.columnar import parse_columnar

        frame = parse_columnar(spark, config.format, index, columns, inside, read_inside)
    if config.partition_columns:
        from sluice.sources.partition_columns import with_partition_columns

        partitions = tuple((c, t) for c, t in config.schema if c not in names)
        frame = with_partition_columns(frame, index, config.schema, partitions, required, read)
    return frame, metas


def _parquet_scans(
    index: list[IndexedFile], metas: list[Any]
) -> list[tuple[dict[str, str] | None, list[IndexedFile]]]:
    """The Parquet scans of ``index``: one over every file with their merged column types
    (None: Spark merges them), or, when files store a column with different types (a merge
    Spark refuses), one per stored schema, as for Avro and ORC."""
    from sluice.storage.footers import types_of

    merged = types_of(metas)
    each = [types_of([meta]) for meta in metas]
    if merged is not None or any(types is None for types in each):
        return [(merged, list(index))]
    scans: dict[tuple[tuple[str, str], ...], list[IndexedFile]] = {}
    for file, types in zip(index, each, strict=True):
        assert types is not None
        scans.setdefault(tuple(types.items()), []).append(file)
    return [(dict(types), files) for types, files in scans.items()]


def count_records(store: ObjectStore, key: str, config: FilesSourceConfig) -> int:
    """How many records the file ``key`` holds as the reader sees them: its non-blank lines
    after decompression (minus a CSV header's line 1), or its rows (Parquet and ORC from the
    footer, Avro from its blocks' counts). A truncated or corrupt compressed file counts the
    lines before the damage (the reader fails the epoch on it, naming the file)."""
    fmt = config.format
    if fmt == "parquet":
        from sluice.storage.footers import footers

        (meta,) = footers(store, [key])
        if meta is not None:
            return int(meta.num_rows)
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(io.BytesIO(store.get(key))).metadata.num_rows)
    if fmt == "orc":
        import pyarrow.orc as orc

        return int(orc.ORCFile(io.BytesIO(store.get(key))).nrows)
    if fmt == "avro":
        return avro_rows(store.get(key))
    data = decompressed(store.get(key), codec_of(key, config.compression))
    return count_lines(data, skip_first=fmt == "csv" and config.header)


def count_lines(data: bytes, skip_first: bool = False) -> int:
    """The records of a text file: its lines (split at ``\\n``) that hold more than ASCII
    whitespace, a UTF-8 byte-order mark before the first dropped (as Spark's reader does),
    line 1 left out with ``skip_first`` (a CSV header, whatever it holds)."""
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    lines = data.split(b"\n")
    if skip_first:
        lines = lines[1:]
    return sum(1 for line in lines if line.strip(_BLANK))


def avro_rows(data: bytes) -> int:
    """The rows of an Avro object container file: the sum of its blocks' counts (no block is
    decompressed). A block cut short or not followed by the file's sync marker ends the count
    (Spark's reader fails on such a file)."""
    if data[:4] != b"Obj\x01":
        raise ValueError("not an Avro object container file (no 'Obj\\x01' magic)")
    pos = 4
    while True:  # the header's metadata map: blocks of (key, value) pairs, 0 ends it
        count, pos = _zigzag(data, pos)
        if count == 0:
            break
        if count < 0:
            count = -count
            _, pos = _zigzag(data, pos)  # the block's size in bytes
        for _ in range(2 * count):
            size, pos = _zigzag(data, pos)
            pos += size
    sync = data[pos : pos + 16]
    pos += 16
    rows = 0
    while pos < len(data):
        try:
            count, pos = _zigzag(data, pos)
            size, pos = _zigzag(data, pos)
        except IndexError:
            break
        pos += size
        if data[pos : pos + 16] != sync:
            break
        pos += 16
        rows += count
    return rows


def _zigzag(data: bytes, pos: int) -> tuple[int, int]:
    """Avro's variable-length zig-zag ``long`` at ``pos``, and the position after it."""
    shift = 0
    value = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
