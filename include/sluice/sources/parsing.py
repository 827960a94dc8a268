"""Turn the raw text of input files into typed records plus a per-record error.

Every format produces the columns of :data:`sluice.sources.base.RECORD_COLUMNS` followed by
the schema columns. ``_error`` is ``"<code>: <message>"`` with code ``malformed``,
``missing_event_time`` or ``wrong_type``; the first problem found wins, checked in the order
malformed, required columns (the event time), then the other columns in schema order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sluice.operators.sqltext import lit, quote
from sluice.sources.footers import ddl

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["parse_csv_lines", "parse_json_frame", "parse_json_lines", "parse_parquet"]

Index = list[tuple[str, str, int]]  # (path as Spark reports it, file key, position)
Schema = tuple[tuple[str, str], ...]

SPARK_TYPES = {
    "string": "string",
    "int": "int",
    "long": "bigint",
    "double": "double",
    "float": "float",
    "boolean": "boolean",
    "timestamp": "timestamp",
    "date": "date",
}
_TIMESTAMP_SHAPE = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$"
_CORRUPT = "_corrupt"


def parse_json_lines(
    spark: SparkSession, index: Index, schema: Schema, required: tuple[str, ...]
) -> DataFrame:
    """JSON lines: one object per line; blank lines are not records."""
    text_schema = _text_schema(schema)
    parsed = F.from_json(
        "_raw", text_schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    )
    lines = _lines(spark, index).withColumn("_j", parsed)
    malformed = F.col("_j").isNull() | F.col(f"_j.{_CORRUPT}").isNotNull()
    return _typed(lines, schema, required, malformed, "not a JSON object")


def parse_json_frame(
    frame: DataFrame,
    schema: Schema,
    required: tuple[str, ...],
    overrides: dict[str, Column] | None = None,
    keep: tuple[str, ...] = ("_kp",),
    parse: bool = True,
) -> DataFrame:
    """JSON records already in a frame (``_file``, ``_major``, ``_line``, ``_raw``; e.g. Kafka
    values). ``overrides`` give some schema columns as text from elsewhere (a Kafka key or
    timestamp) instead of the JSON; ``keep`` columns of ``frame`` are passed through. Without
    ``parse`` the value is not JSON and every column comes from ``overrides``."""
    text_schema = _text_schema(schema)
    parsed = F.from_json(
        "_raw", text_schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    )
    if parse:
        lines = frame.withColumn("_j", parsed)
        bad = F.col("_j").isNull() | F.col(f"_j.{_CORRUPT}").isNotNull()
        lines = lines.withColumn("_bad", bad)
    else:  # every column comes from ``overrides``: nothing to parse, nothing malformed
        lines = frame.withColumn("_j", F.struct(F.lit(None).alias(_CORRUPT)))
        lines = lines.withColumn("_bad", F.lit(False))
    if overrides:
        fields = [
            overrides[c].alias(c) if c in overrides else F.col(f"_j.`{c}`").alias(c)
            for c, _ in schema
        ]
        lines = lines.withColumn("_j", F.struct(*fields))
    keep = tuple(c for c in keep if c in frame.columns)
    return _typed(lines, schema, required, F.col("_bad"), "not a JSON object", keep)


def parse_csv_lines(
    spark: SparkSession, index: Index, schema: Schema, required: tuple[str, ...], header: bool
) -> DataFrame:
    """CSV, one record per line, columns in schema order; optional header line per file."""
    ddl = ", ".join(f"`{c}` STRING" for c, _ in schema) + f", `{_CORRUPT}` STRING"
    lines = _lines(spark, index)
    if header:
        lines = lines.filter(F.col("_line") > 1)
    parsed = F.from_csv("_raw", ddl, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT})
    lines = lines.withColumn("_j", parsed)
    malformed = F.col("_j").isNull() | F.col(f"_j.{_CORRUPT}").isNotNull()
    return _typed(lines, schema, required, malformed, f"expected {len(schema)} CSV fields")


def parse_parquet(
    spark: SparkSession,
    index: Index,
    schema: Schema,
    required: tuple[str, ...],
    stored: dict[str, str] | None = None,
) -> DataFrame:
    """Parquet rows; position = row index inside the file. Columns are matched by name.

    A column stored with the schema's type is taken as it is (no conversion, never a type
    error); any other is read as text and cast like JSON's, so a value that does not fit is a
    ``wrong_type`` dead letter. ``_raw`` (every column of the row as JSON) is only built for
    rows with such an error: the dead-letter sink rebuilds the others from the schema columns
    (:func:`sluice.operators.records.dead_rows`), so well-typed rows never pay for it.

    ``stored``: the files' column types when known (:mod:`sluice.sources.footers`); else
    Spark infers them, merging every file's schema."""
    paths = [p for p, _, _ in index]
    if stored is None:
        frame = spark.read.option("mergeSchema", "true").parquet(*paths)
    else:
        frame = spark.read.schema(ddl(stored)).parquet(*paths)
    stored = dict(frame.dtypes)
    columns: dict[str, tuple[str | None, str]] = {}  # name -> (text or None, typed), as SQL
    for column, kind in schema:
        if stored.get(column) == SPARK_TYPES[kind]:
            columns[column] = (None, quote(column))
            continue
        stored_text = f"CAST({quote(column) if column in stored else 'NULL'} AS STRING)"
        columns[column] = (stored_text, _cast_sql(stored_text, kind))
    checks = []
    for column in (*required, *[c for c, _ in schema if c not in required]):
        text, typed = columns[column]
        if column in required:
            message = lit(f"missing_event_time: field '{column}' is absent or null")
            checks.append(f"CASE WHEN ({typed if text is None else text}) IS NULL THEN {message} END")
        if text is not None:
            checks.append(_wrong_type_sql(column, dict(schema)[column], text, typed))
    error = f"coalesce({', '.join(checks)})" if checks else "CAST(NULL AS STRING)"
    everything = f"to_json(struct({', '.join(quote(c) for c in frame.columns)}))"
    rows = frame.selectExpr(
        "_metadata.file_path AS _path",
        "_metadata.row_index + 1 AS _line",
        f"CASE WHEN ({error}) IS NOT NULL THEN {everything} END AS _raw",
        f"{error} AS _error",
        *[f"{typed} AS {quote(c)}" for c, (_, typed) in columns.items()],
    )
    rows = _with_file(rows, index)
    return rows.selectExpr(
        "'0' AS _partition", "_file", "_major", "_line", "_raw", "_error",
        *[quote(c) for c, _ in schema],
    )  # fmt: skip


def _cast_sql(text: str, kind: str) -> str:
    """:func:`_cast` as SQL text."""
    if kind == "string":
        return text
    if kind == "boolean":
        return f"CASE WHEN lower({text}) = 'true' THEN true WHEN lower({text}) = 'false' THEN false END"
    if kind == "timestamp":
        return f"CASE WHEN {text} RLIKE {lit(_TIMESTAMP_SHAPE)} THEN try_cast({text} AS TIMESTAMP) END"
    return f"try_cast({text} AS {SPARK_TYPES[kind].upper()})"


def _wrong_type_sql(column: str, kind: str, text: str, typed: str) -> str:
    """:func:`_wrong_type` as SQL text."""
    message = lit(f"wrong_type: field '{column}' = %s is not a {kind}")
    return f"CASE WHEN {text} IS NOT NULL AND ({typed}) IS NULL THEN format_string({message}, {text}) END"


def _text_schema(schema: Schema) -> T.StructType:
    fields = [T.StructField(c, T.StringType()) for c, _ in schema]
    return T.StructType([*fields, T.StructField(_CORRUPT, T.StringType())])


def _with_file(frame: DataFrame, index: Index) -> DataFrame:
    """``_file`` and ``_major`` of each row from its ``_path``, by a lookup in a literal map:
    no join (a broadcast join runs a Spark job of its own to build the table)."""
    paths = ", ".join(f"{lit(path)}, {major}" for path, _, major in index)
    keys = ", ".join(lit(key) for _, key, _ in index)
    major = f"CAST(try_element_at(map({paths}), _path) AS INT)"
    return frame.selectExpr("*", f"{major} AS _major").selectExpr(
        "*", f"element_at(array({keys}), _major + 1) AS _file"
    ).drop("_path")


def _attach_index(spark: SparkSession, frame: DataFrame, index: Index) -> DataFrame:
    files = spark.createDataFrame(index, "_path string, _file string, _major int")
    return frame.join(F.broadcast(files), "_path", "inner").drop("_path")


def _lines(spark: SparkSession, index: Index) -> DataFrame:
    """Every non-blank line of every file with its 1-based line number."""
    texts = spark.read.text([p for p, _, _ in index], wholetext=True).select(
        F.col("_metadata.file_path").alias("_path"), "value"
    )
    texts = _attach_index(spark, texts, index)
    exploded = texts.select("_file", "_major", F.posexplode(F.split("value", "\n")))
    # one trailing CR goes (CRLF files); a line of ASCII whitespace only is not a record.
    # Plain string functions, not regular expressions: they run once per line.
    text = F.col("col")
    no_cr = F.when(text.endswith("\r"), F.expr("substr(col, 1, length(col) - 1)")).otherwise(text)
    lines = exploded.select(
        "_file",
        "_major",
        (F.col("pos") + 1).cast("long").alias("_line"),
        no_cr.alias("_raw"),
    )
    return lines.filter(F.length(F.expr("btrim(_raw, ' \t\u000b\f\r')")) > 0)


def _typed(
    frame: DataFrame,
    schema: Schema,
    required: tuple[str, ...],
    malformed: Column,
    malformed_reason: str,
    keep: tuple[str, ...] = (),
) -> DataFrame:
    """Cast the text columns in ``_j`` to the schema and derive ``_error``."""
    typed = {c: _cast(F.col(f"_j.`{c}`"), kind) for c, kind in schema}
    checks = [F.when(malformed, F.lit(f"malformed: {malformed_reason}"))]
    kinds = dict(schema)
    for column in required:
        checks.append(_null_check(column, kinds[column]))
        checks.append(_type_check(column, kinds[column], typed[column]))
    for column, kind in schema:
        if column not in required:
            checks.append(_type_check(column, kind, typed[column]))
    return frame.select(
        F.lit("0").alias("_partition"),
        "_file",
        "_major",
        "_line",
        "_raw",
        F.coalesce(*checks).alias("_error"),
        *[typed[c].alias(c) for c, _ in schema],
        *keep,
    )


def _null_check(column: str, kind: str) -> Column:
    raw = F.col(f"_j.`{column}`")
    return F.when(raw.isNull(), F.lit(f"missing_event_time: field '{column}' is absent or null"))


def _type_check(column: str, kind: str, typed: Column) -> Column:
    return _wrong_type(column, kind, F.col(f"_j.`{column}`"), typed)


def _wrong_type(column: str, kind: str, text: Column, typed: Column) -> Column:
    message = F.format_string(f"wrong_type: field '{column}' = %s is not a {kind}", text)
    return F.when(text.isNotNull() & typed.isNull(), message)


def _cast(raw: Column, kind: str) -> Column:
    if kind == "string":
        return raw
    if kind == "boolean":
        lowered = F.lower(raw)
        return F.when(lowered == "true", True).when(lowered == "false", False)
    if kind == "timestamp":
        return F.when(raw.rlike(_TIMESTAMP_SHAPE), raw.try_cast("timestamp"))
    return raw.try_cast(SPARK_TYPES[kind])
