"""Turn the raw text of input files into typed records plus a per-record error.

Every format produces the columns of :data:`sluice.contracts.sources.RECORD_COLUMNS` followed by
the schema columns. ``_error`` is ``"<code>: <message>"`` with code ``malformed``,
``missing_event_time`` or ``wrong_type``; the first problem found wins, checked in the order
malformed, required columns (the event time), then the other columns in schema order.

JSON lines and CSV are read with Spark's line reader (splittable: a big file is read by several
tasks), every line numbered in file order, blank ones too, by the helper jar's ``LineInfo``
(:mod:`sluice.jvm`), which also flags blank lines and lines that are not valid UTF-8. JSON lines
are parsed once with the schema's types where Spark's typed parsing cannot disagree with the
text rules below (``JsonBytes``, which also refuses text after the object); a row that this
fast parse does not accept cleanly is parsed again, as text, by those rules, which give the
record or the exact reason it is a dead letter.

A ``double`` / ``float`` field must hold a finite number in every format: ``NaN``,
``Infinity`` (bare or as a string) and numbers beyond the type's range are ``wrong_type``.

``read`` (every parser): the schema columns the pipeline reads (None: all). Only those are
type-checked, as Spark's and Flink's readers check only the columns a query requires; another
column is converted by the same rules, null where its value does not convert, and never makes
a record a dead letter. Every line is still checked whole (UTF-8, one JSON object, its syntax).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sluice.contracts.sources import SPARK_TYPES
from sluice.jvm.context import context_cache
from sluice.jvm.udfs import SqlFunctions, columns_array, select, select_columns
from sluice.operators.sqltext import lit, quote
from sluice.sources.compression import needs_codec_reader
from sluice.sources.exact_files import read_exact
from sluice.storage.footers import ddl

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "cast_sql",
    "parse_csv_lines",
    "parse_json_frame",
    "parse_json_lines",
    "parse_parquet",
    "rows_before",
    "typed_rows",
    "valid_utf8",
    "wrong_type_sql",
]


class IndexedFile(NamedTuple):
    """One input file of an epoch."""

    reported: str  # its path as Spark reports it in ``_metadata.file_path`` (URI-escaped)
    key: str  # its object key
    major: int  # its position in the epoch
    read: str  # its path as Spark's readers take it (not escaped: a space is a space)


Index = list[IndexedFile]
Schema = tuple[tuple[str, str], ...]

_TIMESTAMP_SHAPE = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$"
_CORRUPT = "_corrupt"
_LINES = {"lineSep": "\n"}
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}

# Types Spark's typed JSON parsing may take as they come: for these it accepts only what the
# text rules accept too, with the same value (a string as itself, an integer literal that
# fits, a number literal as the nearest double, true / false), and fails the row otherwise (a
# number written as a string, ``1.0`` for a long...), which then goes the text way. Not here:
# ``float`` (Jackson may round through a double first), ``timestamp`` and ``date`` (Spark
# accepts more shapes than the text rules do).
_TYPED_IN_JSON = {
    "string": T.StringType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
}
_FINITE_KINDS = ("double", "float")

# LineInfo's result: the 1-based line number in the low 48 bits, flags above.
_LINE_BITS = 48
_INVALID_UTF8 = 1
_BLANK = 4
NOT_UTF8 = "malformed: not valid UTF-8"
NOT_AN_OBJECT = "malformed: not a JSON object"
TRAILING_TEXT = "malformed: text after the JSON object"


def parse_json_lines(
    spark: SparkSession,
    index: Index,
    schema: Schema,
    required: tuple[str, ...],
    read: tuple[str, ...] | None = None,
    compression: str = "auto",
) -> DataFrame:
    """JSON lines: one object per line; blank lines are not records (``compression``: the
    source's, :mod:`sluice.sources.compression`).

    One typed parse of the read columns for every line; a line it does not accept cleanly (a
    corrupt record, a non-finite double, a LineInfo flag, a value the typed parse refuses such
    as a number written as a string) is parsed again as text, in the same projection and only
    for those lines, giving today's record or the exact dead-letter reason. The columns not
    read come from a parse of their own, which Spark leaves out of any plan that does not
    select them (the epoch's pass; the late records' rows select them)."""
    plan = _json_plan(spark, schema, required, read)
    lines = select_columns(_text_lines(spark, index, compression), plan.fast)
    lines = select_columns(select_columns(lines, plan.first), plan.second)
    return select_columns(select_columns(lines, plan.text), plan.last)


@dataclass(frozen=True)
class _JsonPlan:
    """The columns :func:`parse_json_lines` selects, in its four steps. They depend on the
    schema alone: built once per Spark context and schema (about a thousand Py4J calls),
    not once per epoch."""

    # each a select list kept as one Java array (sluice.jvm.udfs.select_columns)
    fast: Any  # the lines and _j: the typed parse
    first: Any  # the fast values and whether the line parsed cleanly
    second: Any  # ... and the fast errors
    text: Any  # _j again: the text parse, only for lines not clean
    last: Any  # the record columns


def _json_plan(
    spark: SparkSession, schema: Schema, required: tuple[str, ...], read: tuple[str, ...] | None
) -> _JsonPlan:
    zone = spark.conf.get("spark.sql.session.timeZone")
    plans = context_cache(spark, "json plans")
    key = (schema, required, read, zone)
    plan = plans.get(key)
    if plan is None:
        plan = plans[key] = _build_json_plan(spark, schema, required, read)
    return plan


def _build_json_plan(
    spark: SparkSession, whole: Schema, required: tuple[str, ...], read: tuple[str, ...] | None
) -> _JsonPlan:
    schema, lenient = _checked(whole, read)
    kinds = dict(schema)
    typed = {c for c, kind in schema if kind in _TYPED_IN_JSON}
    fast_schema = T.StructType(
        [T.StructField(c, _TYPED_IN_JSON[k] if c in typed else T.StringType()) for c, k in schema]
    )
    fast = {c: F.col(f"_j.`{c}`") for c, _ in schema}
    clean = F.col("_j").isNotNull() & (F.col("_flags") == 0)
    for column in typed:
        if kinds[column] in _FINITE_KINDS:
            clean = clean & F.coalesce(_finite(fast[column]), F.lit(True))
    # the fast values: typed columns as parsed, the others cast from their text
    values = {c: fast[c] if c in typed else _cast(fast[c], kind) for c, kind in schema}
    names = {c: f"_v{i}" for i, (c, _) in enumerate(schema)}
    first = (
        *[F.col(c) for c in ("_file", "_major", "_line", "_raw", "_flags", "_j")],
        clean.alias("_clean"),
        *[values[c].alias(names[c]) for c, _ in schema],
    )
    # the fast errors: a required field absent or null, a text-cast field that does not cast
    clean_checks = []
    for column in (*required, *[c for c, _ in schema if c not in required]):
        if column in required:
            clean_checks.append(_null_check(column, fast[column]))
        if column not in typed:
            kind = kinds[column]
            clean_checks.append(_wrong_type(column, kind, fast[column], F.col(names[column])))
    clean_error = F.coalesce(*clean_checks) if clean_checks else F.lit(None).cast("string")
    second_names = ("_file", "_major", "_line", "_raw", "_flags", "_clean", "_fast_error",
                    *names.values())  # fmt: skip
    second = tuple(clean_error.alias(n) if n == "_fast_error" else F.col(n) for n in second_names)
    # the text way, only for the lines the fast parse did not accept
    text = F.when(~F.col("_clean"), _from_json(spark, F.col("_raw"), _text_schema(schema)))
    malformed = [
        F.when(F.col("_flags").bitwiseAND(_INVALID_UTF8) != 0, F.lit(NOT_UTF8)),
        F.when(F.col("_j").isNull() | F.col(f"_j.{_CORRUPT}").isNotNull(), F.lit(NOT_AN_OBJECT)),
        F.when(_json_trailing(spark, F.col("_raw")), F.lit(TRAILING_TEXT)),
    ]
    slow_values, slow_error = _typed_columns(schema, required, malformed)
    is_clean = F.col("_clean")
    values = {c: F.when(is_clean, F.col(names[c])).otherwise(slow_values[c]) for c, _ in schema}
    if lenient:  # one text parse for the columns not read, converted without a check
        unread = _from_json(spark, F.col("_raw"), _text_schema(lenient))
        values.update({c: _cast(unread.getField(c), kind) for c, kind in lenient})
    last = (
        F.lit("0").alias("_partition"),
        *[F.col(c) for c in ("_file", "_major", "_line", "_raw")],
        F.when(is_clean, F.col("_fast_error")).otherwise(slow_error).alias("_error"),
        *[values[c].alias(c) for c, _ in whole],
    )
    line = [F.col(c) for c in ("_file", "_major", "_line", "_raw", "_flags")]
    fast_parse = (*line, _json_bytes(spark, F.col("_raw"), fast_schema).alias("_j"))
    text_parse = (*[F.col(c) for c in second_names], text.alias("_j"))
    steps = (fast_parse, first, second, text_parse, last)
    return _JsonPlan(*[columns_array(spark, c) for c in steps])


def parse_json_frame(
    frame: DataFrame,
    schema: Schema,
    required: tuple[str, ...],
    overrides: dict[str, Column] | None = None,
    keep: tuple[str, ...] = ("_kp",),
    parse: bool = True,
    valid_utf8: str | None = None,
    read: tuple[str, ...] | None = None,
) -> DataFrame:
    """JSON records already in a frame (``_file``, ``_major``, ``_line``, ``_raw``; e.g. Kafka
    values), by the text rules of JSON lines: one JSON object, nothing after it but whitespace
    (``malformed: text after the JSON object``), and, with ``valid_utf8`` (a boolean column of
    ``frame``: were the record's bytes valid UTF-8, by :func:`valid_utf8`), valid UTF-8 first
    (``malformed: not valid UTF-8``; ``_raw`` should then hold the text with its bad bytes
    replaced). ``overrides`` give some schema columns as text from elsewhere (a Kafka key or
    timestamp) instead of the JSON; ``keep`` columns of ``frame`` are passed through. Without
    ``parse`` the value is not JSON and every column comes from ``overrides``."""
    text_schema = _text_schema(schema)
    parsed = F.from_json(
        "_raw", text_schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    )
    malformed: list[Column] = []
    if parse:
        lines = frame.withColumn("_j", parsed)
        if valid_utf8 is not None:
            malformed.append(F.when(~F.col(valid_utf8), F.lit(NOT_UTF8)))
        bad = F.col("_j").isNull() | F.col(f"_j.{_CORRUPT}").isNotNull()
        lines = lines.withColumn("_bad", bad)  # before ``overrides`` replace ``_j``
        malformed.append(F.when(F.col("_bad"), F.lit(NOT_AN_OBJECT)))
        trailing = _json_trailing(frame.sparkSession, F.col("_raw"))
        malformed.append(F.when(trailing, F.lit(TRAILING_TEXT)))
    else:  # every column comes from ``overrides``: nothing to parse, nothing malformed
        lines = frame.withColumn("_j", F.struct(F.lit(None).alias(_CORRUPT)))
    if overrides:
        fields = [
            overrides[c].alias(c) if c in overrides else F.col(f"_j.`{c}`").alias(c)
            for c, _ in schema
        ]
        lines = lines.withColumn("_j", F.struct(*fields))
    keep = tuple(c for c in keep if c in frame.columns)
    return _typed(lines, schema, required, malformed, keep, read)


def valid_utf8(spark: SparkSession, data: Column) -> Column:
    """Whether the bytes ``data`` are well-formed UTF-8, by the rule the files source applies
    to every line (the helper jar's ``LineInfo``); null for null."""
    jvm: Any = spark.sparkContext._jvm
    return _column(jvm.io.sluice.spark.JsonBytes.validUtf8Column(_java(data)))


def parse_csv_lines(
    spark: SparkSession,
    index: Index,
    schema: Schema,
    required: tuple[str, ...],
    header: bool,
    read: tuple[str, ...] | None = None,
    compression: str = "auto",
) -> DataFrame:
    """CSV, one record per line, columns in schema order; optional header line per file
    (``compression``: the source's, :mod:`sluice.sources.compression`)."""
    ddl = ", ".join(f"`{c}` STRING" for c, _ in schema) + f", `{_CORRUPT}` STRING"
    lines = _text_lines(spark, index, compression)
    if header:
        lines = lines.filter(F.col("_line") > 1)
    parsed = F.from_csv("_raw", ddl, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT})
    lines = lines.withColumn("_j", parsed)
    malformed = [
        F.when(F.col("_flags").bitwiseAND(_INVALID_UTF8) != 0, F.lit(NOT_UTF8)),
        F.when(
            F.col("_j").isNull() | F.col(f"_j.{_CORRUPT}").isNotNull(),
            F.lit(f"malformed: expected {len(schema)} CSV fields"),
        ),
    ]
    values, error = _typed_columns(schema, required, malformed, read)
    return lines.select(
        F.lit("0").alias("_partition"), "_file", "_major", "_line", "_raw", error.alias("_error"),
        *[values[c].alias(c) for c, _ in schema],
    )  # fmt: skip


def parse_parquet(
    spark: SparkSession,
    index: Index,
    schema: Schema,
    required: tuple[str, ...],
    stored: dict[str, str] | None = None,
    read: tuple[str, ...] | None = None,
) -> DataFrame:
    """Parquet rows; position = row index inside the file. Columns are matched by name.

    A column stored with the schema's type is taken as it is (no conversion, never a type
    error); any other is read as text and cast like JSON's, so a value that does not fit is a
    ``wrong_type`` dead letter. ``_raw`` (every column of the row as JSON) is only built for
    rows with such an error: the dead-letter sink rebuilds the others from the schema columns
    (:func:`sluice.operators.records.dead_rows`), so well-typed rows never pay for it.

    ``stored``: the files' column types when known (:mod:`sluice.storage.footers`); else
    Spark infers them, merging every file's schema."""
    paths = [f.read for f in index]
    if stored is None:
        frame = read_exact(spark, "parquet", paths, {"mergeSchema": "true"})
    else:
        frame = read_exact(spark, "parquet", paths, schema=ddl(stored))
    return typed_rows(frame, index, schema, required, read, "_metadata.row_index + 1")


def typed_rows(
    frame: DataFrame,
    index: Index,
    schema: Schema,
    required: tuple[str, ...],
    read: tuple[str, ...] | None,
    line: str,
) -> DataFrame:
    """The records of the rows of a columnar scan ``frame`` (Parquet, ORC, Avro): its columns
    matched by name, one taken as it is where stored with the schema's type, else read as
    text and cast (a value that does not fit is ``wrong_type``); ``_raw`` (every stored
    column as JSON) only for rows with an error. ``line``: SQL for the row's 1-based position
    in its file, evaluated in the one projection over the scan."""
    stored = dict(frame.dtypes)
    columns: dict[str, tuple[str | None, str]] = {}  # name -> (text or None, typed), as SQL
    for column, kind in schema:
        if stored.get(column) == SPARK_TYPES[kind]:
            columns[column] = (None, quote(column))
            continue
        stored_text = f"CAST({quote(column) if column in stored else 'NULL'} AS STRING)"
        columns[column] = (stored_text, cast_sql(stored_text, kind))
    checks = []
    checked, _ = _checked(schema, read)
    for column in (*required, *[c for c, _ in checked if c not in required]):
        text, typed = columns[column]
        if column in required:
            message = lit(f"missing_event_time: field '{column}' is absent or null")
            checks.append(
                f"CASE WHEN ({typed if text is None else text}) IS NULL THEN {message} END"
            )
        if text is not None:
            checks.append(wrong_type_sql(column, dict(schema)[column], text, typed))
    error = f"coalesce({', '.join(checks)})" if checks else "CAST(NULL AS STRING)"
    everything = f"to_json(struct({', '.join(quote(c) for c in frame.columns)}))"
    rows = select(
        frame,
        "_metadata.file_path AS _path",
        f"{line} AS _line",
        f"CASE WHEN ({error}) IS NOT NULL THEN {everything} END AS _raw",
        f"{error} AS _error",
        *[f"{typed} AS {quote(c)}" for c, (_, typed) in columns.items()],
    )
    rows = _with_file(rows, index)
    return select(
        rows, "'0' AS _partition", "_file", "_major", "_line", "_raw", "_error",
        *[quote(c) for c, _ in schema],
    )  # fmt: skip


def cast_sql(text: str, kind: str) -> str:
    """:func:`_cast` as SQL text (the same rules: the timestamp shape, finite numbers)."""
    if kind == "string":
        return text
    if kind == "boolean":
        lowered = f"lower({text})"
        return f"CASE WHEN {lowered} = 'true' THEN true WHEN {lowered} = 'false' THEN false END"
    if kind == "timestamp":
        return (
            f"CASE WHEN {text} RLIKE {lit(_TIMESTAMP_SHAPE)} THEN try_cast({text} AS TIMESTAMP) END"
        )
    number = f"try_cast({text} AS {SPARK_TYPES[kind].upper()})"
    if kind in _FINITE_KINDS:
        return f"CASE WHEN NOT isnan({number}) AND abs({number}) != double('inf') THEN {number} END"
    return number


def wrong_type_sql(column: str, kind: str, text: str, typed: str, what: str = "field") -> str:
    """:func:`_wrong_type` as SQL text (``what``: ``field``, or ``partition`` for a folder's
    value)."""
    prefix = f"wrong_type: {what} '{column}' = %s is not a "
    message = f"format_string({lit(prefix + kind)}, {text})"
    if kind in _FINITE_KINDS:  # a number, but not a finite one (NaN, Infinity, 1e400)
        number = f"try_cast({text} AS {SPARK_TYPES[kind].upper()})"
        finite = f"format_string({lit(prefix + 'finite ' + kind)}, {text})"
        message = f"CASE WHEN {number} IS NOT NULL THEN {finite} ELSE {message} END"
    return f"CASE WHEN {text} IS NOT NULL AND ({typed}) IS NULL THEN {message} END"


def _text_schema(schema: Schema) -> T.StructType:
    fields = [T.StructField(c, T.StringType()) for c, _ in schema]
    return T.StructType([*fields, T.StructField(_CORRUPT, T.StringType())])


def _with_file(frame: DataFrame, index: Index) -> DataFrame:
    """``_file`` and ``_major`` of each row from its ``_path``, by a lookup in a literal map:
    no join (a broadcast join runs a Spark job of its own to build the table)."""
    paths = ", ".join(f"{lit(f.reported)}, {f.major}" for f in index)
    major = f"CAST(try_element_at(map({paths}), _path) AS INT)"
    with_major = select(frame, "*", f"{major} AS _major")
    if [f.major for f in index] == list(range(len(index))):
        keys = ", ".join(lit(f.key) for f in index)
        file = f"element_at(array({keys}), _major + 1)"
    else:  # some of an epoch's files (one scan of several)
        file = f"element_at(map({', '.join(f'{f.major}, {lit(f.key)}' for f in index)}), _major)"
    return select(with_major, "*", f"{file} AS _file").drop("_path")


def _text_lines(spark: SparkSession, index: Index, compression: str = "auto") -> DataFrame:
    """Every non-blank line of every file: ``_file``, ``_major``, ``_line`` (1-based, blank
    lines counted), ``_flags`` (LineInfo's) and ``_raw`` (one trailing CR removed; a line that
    is not valid UTF-8 with its bad bytes replaced by U+FFFD, so it can be written as text).

    ``compression`` (the source's): files to decompress are read by the helper jar's
    ``CompressedLines`` (:mod:`sluice.sources.compression`), the others by Spark's own line
    reader, as before."""
    fmt, options = _line_reader(index, compression)
    texts = read_exact(spark, fmt, [f.read for f in index], options)
    path = "_metadata.file_path"
    before = rows_before(spark, texts, index, fmt, options)  # a job when Spark splits a file
    with SqlFunctions(spark) as fns:  # as SQL text: one Py4J call a step
        info = fns.line_info(before)
        li = f"{info}({path}, _metadata.file_block_start, CAST(value AS BINARY)) AS _li"
        numbered = select(texts, f"{path} AS _path", li, "value")
    # a line of ASCII whitespace only is not a record (LineInfo tells, in its one pass)
    numbered = numbered.where(f"(_li & {_BLANK << _LINE_BITS}) = 0")
    numbered = _with_file(numbered, index)
    # one trailing CR goes (CRLF files). Plain string functions, not regular expressions:
    # they run once per line.
    no_cr = "substr(value, 1, length(value) - 1)"
    raw = f"CASE WHEN endswith(value, char(13)) THEN {no_cr} ELSE value END"
    invalid = f"(_li & {_INVALID_UTF8 << _LINE_BITS}) != 0"
    return select(
        numbered,
        "_file",
        "_major",
        f"_li & {(1 << _LINE_BITS) - 1} AS _line",
        f"CAST(shiftright(_li, {_LINE_BITS}) AS INT) AS _flags",
        f"CASE WHEN {invalid} THEN make_valid_utf8({raw}) ELSE {raw} END AS _raw",
    )


def _line_reader(index: Index, compression: str) -> tuple[str, dict[str, str]]:
    """The reader format and options of :func:`_text_lines`: Spark's text format when no file
    needs a codec of Sluice's choosing, else ``lines`` (``CompressedLines``)."""
    if not needs_codec_reader([f.key for f in index], compression):
        return "text", _LINES
    return "lines", {**_LINES, "sluice.compression": compression}


def _json_bytes(spark: SparkSession, text: Column, schema: T.StructType) -> Column:
    """The struct ``from_json(text, schema, _JSON_OPTIONS)`` gives when ``text`` is exactly one
    JSON object whose fields all convert, else null; Jackson reads the UTF-8 bytes directly
    (the helper jar's ``JsonBytes``), at about half the cost. Not for rows LineInfo flags as
    invalid UTF-8."""
    jvm: Any = spark.sparkContext._jvm
    zone = spark.conf.get("spark.sql.session.timeZone")
    return _column(jvm.io.sluice.spark.JsonBytes.column(_java(text), schema.json(), zone))


def _from_json(spark: SparkSession, text: Column, schema: T.StructType) -> Column:
    """``from_json(text, schema, _JSON_OPTIONS)``, compiled with its stage (``JsonBytes.fromJson``:
    Spark's own evaluator; ``from_json`` itself keeps its projection out of whole-stage code
    generation)."""
    jvm: Any = spark.sparkContext._jvm
    zone = spark.conf.get("spark.sql.session.timeZone")
    java = jvm.io.sluice.spark.JsonBytes.fromJson(_java(text), schema.json(), _CORRUPT, zone)
    return _column(java)


def _json_trailing(spark: SparkSession, text: Column) -> Column:
    """Whether ``text`` holds something after its first JSON value (``JsonBytes.trailing``)."""
    jvm: Any = spark.sparkContext._jvm
    zone = spark.conf.get("spark.sql.session.timeZone")
    return _column(jvm.io.sluice.spark.JsonBytes.trailingColumn(_java(text), zone))


def _java(column: Column) -> Any:
    from pyspark.sql.classic.column import _to_java_column

    return _to_java_column(column)


def _column(java: Any) -> Column:
    from pyspark.sql.classic.column import Column as ClassicColumn

    return ClassicColumn(java)


def rows_before(
    spark: SparkSession,
    frame: DataFrame,
    index: Index,
    fmt: str,
    options: dict[str, str],
    schema: str | None = None,
) -> dict[str, dict[int, int]]:
    """For each file Spark will read in several splits, the lines (rows) before each split
    start: ``frame`` is ``read_exact(spark, fmt, paths, options, schema)``.

    The splits are Spark's own, taken from the scan's physical plan (they depend on the
    session's settings, the input's size and the cluster's cores). The files it splits are
    counted in one job, in a clone of the session whose split size is pinned to the same
    value, so that job's splits start at the same bytes and its reader gives each split the
    same lines (rows: Avro's blocks after the split's first sync marker, ORC's stripes that
    start in it)."""
    jvm: Any = spark.sparkContext._jvm
    plan = frame._jdf.queryExecution().executedPlan()
    described = jvm.io.sluice.spark.TextSplits.describe(plan)
    splits = [line.split("\t") for line in described.splitlines()]
    starts: dict[str, set[int]] = {}
    for path, start, _ in splits:
        starts.setdefault(path, set()).add(int(start))
    split = {path: s for path, s in starts.items() if len(s) > 1 or min(s) > 0}
    if not split:
        return {}
    size = {int(length) for path, start, length in splits if path in split and int(start) == 0}
    if len(size) != 1 or any(s % next(iter(size)) for ss in split.values() for s in ss):
        raise RuntimeError(f"sluice: Spark split the input at uneven offsets: {sorted(split)}")
    pinned = next(iter(size))
    readable = {f.reported: f.read for f in index}
    counting = _counting_session(spark)
    with _COUNTING_LOCK:  # one pinned split size at a time on the shared clone
        counting.conf.set("spark.sql.files.maxPartitionBytes", str(pinned))
        counting.conf.set("spark.sql.files.openCostInBytes", str(pinned))
        blocks = (
            read_exact(counting, fmt, sorted(readable.get(p, p) for p in split), options, schema)
            .groupBy(
                F.col("_metadata.file_path").alias("path"),
                F.col("_metadata.file_block_start").alias("start"),
            )
            .count()
            .collect()
        )
    counts: dict[str, list[tuple[int, int]]] = {}
    for row in blocks:
        counts.setdefault(row["path"], []).append((int(row["start"]), int(row["count"])))
    return {
        path: {s: sum(n for b, n in counts.get(path, []) if b < s) for s in ss if s > 0}
        for path, ss in split.items()
    }


_COUNTING_LOCK = threading.Lock()


def _counting_session(spark: SparkSession) -> SparkSession:
    """A clone of ``spark`` (its settings, its own SQL conf) for the line-counting jobs, made
    once per session: a new session per read might leave per-session state behind in a
    long-running process."""
    from pyspark.sql import SparkSession as Session

    with _COUNTING_LOCK:
        clone: SparkSession | None = getattr(spark, "_sluice_counting", None)
        if clone is None:
            clone = Session(spark.sparkContext, spark._jsparkSession.cloneSession())
            spark._sluice_counting = clone  # type: ignore[attr-defined]
        return clone


def _typed(
    frame: DataFrame,
    schema: Schema,
    required: tuple[str, ...],
    malformed: list[Column],
    keep: tuple[str, ...] = (),
    read: tuple[str, ...] | None = None,
) -> DataFrame:
    """Cast the text columns in ``_j`` to the schema and derive ``_error`` (``malformed``:
    the reasons, in order, as in :func:`_typed_columns`)."""
    values, error = _typed_columns(schema, required, malformed, read)
    return frame.select(
        F.lit("0").alias("_partition"),
        "_file",
        "_major",
        "_line",
        "_raw",
        error.alias("_error"),
        *[values[c].alias(c) for c, _ in schema],
        *keep,
    )


def _typed_columns(
    schema: Schema,
    required: tuple[str, ...],
    malformed: list[Column],
    read: tuple[str, ...] | None = None,
) -> tuple[dict[str, Column], Column]:
    """The schema columns cast from the text struct ``_j``, and the first problem found:
    ``malformed`` (in order), then required fields, then the other read columns in schema
    order."""
    typed = {c: _cast(F.col(f"_j.`{c}`"), kind) for c, kind in schema}
    checks = list(malformed)
    kinds = dict(schema)
    for column in required:
        checks.append(_null_check(column, F.col(f"_j.`{column}`")))
        checks.append(_type_check(column, kinds[column], typed[column]))
    for column, kind in _checked(schema, read)[0]:
        if column not in required:
            checks.append(_type_check(column, kind, typed[column]))
    return typed, F.coalesce(*checks) if checks else F.lit(None).cast("string")


def _checked(schema: Schema, read: tuple[str, ...] | None) -> tuple[Schema, Schema]:
    """``schema`` split into the columns type-checked (``read``; None: all) and the rest."""
    if read is None:
        return schema, ()
    return (
        tuple((c, k) for c, k in schema if c in read),
        tuple((c, k) for c, k in schema if c not in read),
    )


def _null_check(column: str, raw: Column) -> Column:
    return F.when(raw.isNull(), F.lit(f"missing_event_time: field '{column}' is absent or null"))


def _type_check(column: str, kind: str, typed: Column) -> Column:
    return _wrong_type(column, kind, F.col(f"_j.`{column}`"), typed)


def _wrong_type(column: str, kind: str, text: Column, typed: Column) -> Column:
    prefix = f"wrong_type: field '{column}' = %s is not a "
    message = F.format_string(f"{prefix}{kind}", text)
    if kind in _FINITE_KINDS:  # a number, but not a finite one (NaN, Infinity, 1e400)
        number = text.try_cast(SPARK_TYPES[kind])
        finite = F.format_string(f"{prefix}finite {kind}", text)
        message = F.when(number.isNotNull(), finite).otherwise(message)
    return F.when(text.isNotNull() & typed.isNull(), message)


def _timestamp_shape(text: Column) -> Column:
    """``text.rlike(_TIMESTAMP_SHAPE)``, by the helper jar's ``TimestampShape`` (the same
    answer off the UTF-8 bytes, without a regular expression)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    assert context is not None and context._jvm is not None
    return _column(context._jvm.io.sluice.spark.TimestampShape.column(_java(text)))


def _finite(number: Column) -> Column:
    """False for NaN and ±Infinity, null for null."""
    return ~F.isnan(number) & (F.abs(number) != F.lit(float("inf")))


def _cast(raw: Column, kind: str) -> Column:
    if kind == "string":
        return raw
    if kind == "boolean":
        lowered = F.lower(raw)
        return F.when(lowered == "true", True).when(lowered == "false", False)
    if kind == "timestamp":
        return F.when(_timestamp_shape(raw), raw.try_cast("timestamp"))
    number = raw.try_cast(SPARK_TYPES[kind])
    if kind in _FINITE_KINDS:
        return F.when(_finite(number), number)
    return number
