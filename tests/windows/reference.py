"""Independent reference for Sluice's windowing semantics (DuckDB SQL + a little Python).

This module is the oracle the Spark engine's committed output is checked against. It must not
import ``sluice`` (and was written without reading ``include/sluice/windows/``): it implements
``docs/windows-and-watermarks.md`` literally, over the whole input processed as ONE epoch.
Python parses the lines; DuckDB does the rest (derived columns, filter, per-partition watermark
with a window function, window assignment with ``range``, sessions from gaps, count windows
with ``row_number``, aggregation).

Input and positions
    ``files`` maps keys (relative to ``source.path``) to their text. Keys with a path segment
    starting with ``_`` or ``.`` are ignored (as the files source does). With
    ``source.partition_by: directory`` the partition is the first path segment and files are
    read in the order (name inside the partition, partition); otherwise there is one partition
    and files are read in key order. A file is split on ``"\\n"`` (a trailing ``"\\r"`` is
    dropped); lines without a non-whitespace character are not records; a record's line number
    is the 1-based index of its line in the file (blank lines count). A record's *position* is
    (rank of its file in the read order, line), which is also how ties are broken below.

Dead letters (``reason_code``, the first problem wins, checked in this order)
    ``malformed``: the line is not strict JSON (Python's ``json``; ``NaN``/``Infinity`` tokens
    are accepted) or not an object. ``missing_event_time``: the event-time field is absent or
    null. ``wrong_type``: a present, non-null value does not convert to its schema type, the
    event-time column first, then the others in schema order. Every JSON value is first turned
    into its text (strings as they are, numbers as written, ``true``/``false``, nested values as
    compact JSON) and that text is converted: ``string`` any text; ``int``/``long``
    ``[+-]?digits`` in range; ``double``/``float`` a decimal number or ``nan``/``inf``/
    ``infinity`` (any case, optional sign); ``boolean`` ``true``/``false`` (any case);
    ``timestamp`` ``YYYY-MM-DD[T ]HH:MM[:SS[.fraction]][Z|±HH:MM|±HHMM]`` (no zone = UTC,
    fraction truncated to microseconds); ``date`` ``YYYY-MM-DD``. Leading/trailing ASCII
    whitespace is ignored for numbers. Dead letters take no part in anything else.

Derived columns and filter
    ``select`` expressions are evaluated by DuckDB in order (a later one may use an earlier
    one); ``filter`` is a DuckDB predicate, a record is *filtered* unless it is TRUE. The
    expressions used in tests must therefore mean the same in DuckDB and in Spark SQL.
    The filter is applied before lateness is judged: a filtered record counts as ``filtered``
    (never ``late``), but, like every valid record, it advances the watermark.

Watermarks
    ``W(r) = max(event time of valid records before r in its partition) - max_out_of_orderness``
    (None for a partition's first valid record). "Valid" = not dead: filtered and late records
    count. In one epoch ``W'(r) = W(r)``. The final global watermark is
    ``min(M_p over non-idle p) - max_out_of_orderness`` where ``M_p`` is the newest valid event
    time of partition ``p`` and ``p`` is idle when ``max_q M_q - M_p > idle_timeout`` (strictly);
    a partition without any valid record has no ``M_p`` and plays no part; no valid record at
    all gives ``None``.

Windows (bounds are microseconds since the Unix epoch, UTC; windows align to the epoch)
    tumbling ``[t - t mod size, + size)``; hopping every ``[s, s + size)`` with
    ``s mod slide = 0`` and ``s <= t < s + size``; session ``[t, t + gap)`` merged per key with
    every window it *overlaps or touches* into ``[first, last + gap)``: as in Flink
    (``TimeWindow.intersects``), a record exactly ``gap`` after the last one (``t == last +
    gap``) joins its session. Count: per
    key, the i-th accepted record (from 0, in position order) belongs to every window
    ``j >= 0`` with ``j*slide <= i < j*slide + count``; its ``window_start``/``window_end`` are
    the smallest/largest event time of its records (``window_end`` inclusive) and
    ``window_index`` is ``j``. Null key values form a key of their own.

Lateness
    tumbling/hopping: a window of ``r`` is missed when ``end + allowed_lateness <= W(r)``; ``r``
    is late when all its windows are missed, otherwise it is accepted into the others. Every
    missed window gives one late row, also for an accepted hopping record (so ``late`` may have
    more rows than ``counts["late"]``, which counts records). session: ``r`` is late when
    ``t + allowed_lateness <= W(r)``, its row reports ``[t, t + gap)``. count: never late.
    Late rows carry the *schema* columns (not derived ones), ``window_start``, ``window_end``,
    ``watermark``, ``source_file``, ``source_line`` (the ``epoch`` column of the engine has no
    meaning here and is not produced).

Emission
    on_close: time windows with ``end + allowed_lateness <= final watermark``; count windows
    that hold ``count`` records (whatever the watermark). on_update: the final upsert table =
    every window that received an accepted record, closed or open, with its final value
    (sessions after all merges; partial count windows included).

Aggregates (nulls ignored unless said otherwise)
    ``count(*)`` rows; ``count(c)`` non-null values; ``sum(c)`` for floating-point columns the
    sum of the values cast to DECIMAL(38,12) (the documented partial), returned as float, null
    when there is no value (integer columns: exact int); ``avg`` = that sum / non-null count;
    ``min``/``max`` the extreme; ``count_distinct`` and ``approx_count_distinct`` the EXACT
    number of distinct non-null values (compare the latter with a tolerance);
    ``first(c)``/``last(c)`` the value of ``c`` (possibly null: nulls are NOT skipped) of the
    record with the smallest/largest event time, ties going to the earlier/later position.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import duckdb
import pyarrow as pa

__all__ = [
    "AGGREGATE_FUNCTIONS",
    "Reference",
    "compare",
    "compute",
    "parse_duration_us",
    "parse_line",
    "read_order",
]

AGGREGATE_FUNCTIONS = (
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "count_distinct",
    "approx_count_distinct",
    "first",
    "last",
)
EPOCH = datetime(1970, 1, 1)
_ARROW_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "int": pa.int32(),
    "long": pa.int64(),
    "double": pa.float64(),
    "float": pa.float32(),
    "boolean": pa.bool_(),
    "timestamp": pa.timestamp("us"),
    "date": pa.date32(),
}
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_UNITS_US = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000}
_UNITS_US["d"] = 24 * _UNITS_US["h"]
_DURATION_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h|d)\s*")
_AGG_RE = re.compile(r"\s*([A-Za-z_]+)\s*\(\s*(\*|[A-Za-z_][A-Za-z0-9_]*)\s*\)\s*")
_ASCII_WS = " \t\n\x0b\f\r"
_NON_BLANK_RE = re.compile(r"[^ \t\n\x0b\f\r]")
_INT_TEXT_RE = re.compile(r"[+-]?\d+")
_FLOAT_TEXT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_FLOAT_SPECIAL = {
    "nan": math.nan,
    "+nan": math.nan,
    "-nan": math.nan,
    "inf": math.inf,
    "+inf": math.inf,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-inf": -math.inf,
    "-infinity": -math.inf,
}
_TS_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?"
    r"(Z|[+-]\d{2}:?\d{2})?"
)
_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")


# --------------------------------------------------------------------------- small helpers


def parse_duration_us(value: object) -> int:
    """Microseconds in ``"500ms"``, ``"5s"``, ``"1m"``, ``"2h"``, ``"1d"`` (or a number of s)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        return round(value * 1_000_000)
    match = _DURATION_RE.fullmatch(str(value))
    if match is None:
        raise ValueError(f"{value!r} is not a duration like 500ms, 5s, 1m, 2h or 1d")
    return round(float(match.group(1)) * _UNITS_US[match.group(2)])


def _to_us(ts: datetime) -> int:
    return (ts - EPOCH) // timedelta(microseconds=1)


def _from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def _q(name: str) -> str:
    """A DuckDB-quoted identifier."""
    return '"' + name.replace('"', '""') + '"'


def _partition_of(key: str, partition_by: str) -> str:
    if partition_by != "directory":
        return ""
    if "/" not in key:
        raise ValueError(f"{key!r}: with partition_by: directory files live in <partition>/")
    return key.split("/", 1)[0]


def read_order(keys: Iterable[str], partition_by: str = "directory") -> list[str]:
    """``keys`` in the order the files source reads them (hidden keys dropped).

    ``directory``: by (name inside the partition, partition), so partitions interleave;
    otherwise by key.
    """
    visible = [k for k in keys if not any(seg[:1] in ("_", ".") for seg in k.split("/"))]
    if partition_by != "directory":
        return sorted(visible)
    return sorted(visible, key=lambda k: (k.split("/", 1)[1], k.split("/", 1)[0]))


# --------------------------------------------------------------------------- line parsing


class _Token(str):
    """A JSON number or constant, kept exactly as written."""

    __slots__ = ()


class Dead(Exception):
    """A line that is a dead letter; ``code`` is the reason code."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


def _compact(value: Any) -> str:
    """Compact JSON text of a parsed value, numbers as written."""
    if isinstance(value, _Token):
        return str(value)
    if isinstance(value, dict):
        items = ",".join(f"{json.dumps(k)}:{_compact(v)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, list):
        return "[" + ",".join(_compact(v) for v in value) + "]"
    return json.dumps(value)


def _text(value: Any) -> str:
    if isinstance(value, _Token | str):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return _compact(value)


def _timestamp(text: str) -> datetime | None:
    m = _TS_RE.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute = (int(m.group(i)) for i in range(1, 6))
    second = int(m.group(6) or 0)
    micros = int(((m.group(7) or "") + "000000")[:6])
    zone = m.group(8)
    try:
        ts = datetime(year, month, day, hour, minute, second, micros)
        if zone and zone != "Z":
            digits = zone[1:].replace(":", "")
            hh, mm = int(digits[:2]), int(digits[2:])
            if hh > 18 or mm > 59:
                return None
            offset = timedelta(hours=hh, minutes=mm)
            ts = ts - offset if zone[0] == "+" else ts + offset
    except (ValueError, OverflowError):
        return None
    return ts


def _convert(text: str, kind: str) -> Any:
    """The value of ``text`` as ``kind``, or raise ValueError."""
    if kind == "string":
        return text
    if kind in _INT_RANGE:
        stripped = text.strip(_ASCII_WS)
        if not _INT_TEXT_RE.fullmatch(stripped):
            raise ValueError(text)
        number = int(stripped)
        lo, hi = _INT_RANGE[kind]
        if not lo <= number <= hi:
            raise ValueError(text)
        return number
    if kind in ("double", "float"):
        stripped = text.strip(_ASCII_WS)
        if stripped.lower() in _FLOAT_SPECIAL:
            return _FLOAT_SPECIAL[stripped.lower()]
        if not _FLOAT_TEXT_RE.fullmatch(stripped):
            raise ValueError(text)
        return float(stripped)
    if kind == "boolean":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ValueError(text)
    if kind == "timestamp":
        ts = _timestamp(text)
        if ts is None:
            raise ValueError(text)
        return ts
    if kind == "date":
        m = _DATE_RE.fullmatch(text.strip(_ASCII_WS))
        if m is None:
            raise ValueError(text)
        return date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    raise ValueError(f"unsupported schema type {kind!r}")


def parse_line(line: str, schema: Mapping[str, str], event_time: str) -> dict[str, Any]:
    """The typed record of one JSON line, or raise :class:`Dead` (see the module docstring)."""
    try:
        obj = json.loads(line, parse_int=_Token, parse_float=_Token, parse_constant=_Token)
    except ValueError:
        raise Dead("malformed", "not a JSON object") from None
    if not isinstance(obj, dict):
        raise Dead("malformed", "not a JSON object")
    if obj.get(event_time) is None:
        raise Dead("missing_event_time", f"field {event_time!r} is absent or null")
    row: dict[str, Any] = {}
    for column in [event_time, *[c for c in schema if c != event_time]]:
        raw = obj.get(column)
        if raw is None:
            row[column] = None
            continue
        try:
            row[column] = _convert(_text(raw), schema[column])
        except ValueError:
            raise Dead(
                "wrong_type", f"field {column!r} = {_text(raw)} is not a {schema[column]}"
            ) from None
    return {c: row[c] for c in schema}


def _lines(content: str | bytes) -> Iterable[tuple[int, str]]:
    """(1-based line number, line) of every non-blank line."""
    text = content.decode("utf-8", errors="replace") if isinstance(content, bytes) else content
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if _NON_BLANK_RE.search(line):
            yield number, line


# --------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class _Agg:
    name: str
    func: str
    column: str | None  # None for count(*)


@dataclass(frozen=True)
class _Spec:
    schema: dict[str, str]
    partition_by: str
    event_time: str
    bound_us: int
    lateness_us: int
    idle_us: int | None
    key_by: tuple[str, ...]
    window: dict[str, Any]
    aggregates: tuple[_Agg, ...]
    emit: str
    select: tuple[tuple[str, str], ...]
    filter: str | None

    @staticmethod
    def of(spec: Mapping[str, Any]) -> _Spec:
        source = spec.get("source") or {}
        schema = dict(source.get("schema") or {})
        if not schema:
            raise ValueError("spec.source.schema is required")
        event = spec["event_time"]
        column = event["column"]
        if schema.get(column) != "timestamp":
            raise ValueError(f"event_time.column {column!r} must be a timestamp schema column")
        idle = event.get("idle_timeout")
        window = dict(spec["window"])
        kind = window.get("type")
        if kind == "tumbling":
            size = parse_duration_us(window["size"])
            shape: dict[str, Any] = {"type": kind, "size": size, "slide": size}
        elif kind == "hopping":
            shape = {
                "type": kind,
                "size": parse_duration_us(window["size"]),
                "slide": parse_duration_us(window["slide"]),
            }
            if not 0 < shape["slide"] <= shape["size"]:
                raise ValueError("hopping windows need 0 < slide <= size")
        elif kind == "session":
            shape = {"type": kind, "gap": parse_duration_us(window["gap"])}
            if window.get("max_duration") is not None:
                shape["max_duration"] = parse_duration_us(window["max_duration"])
        elif kind == "count":
            count = int(window["count"])
            shape = {"type": kind, "count": count, "slide": int(window.get("slide") or count)}
            if not 0 < shape["slide"] <= count:
                raise ValueError("count windows need 0 < slide <= count")
        else:
            raise ValueError(f"unknown window type {kind!r}")
        if shape.get("size", 1) <= 0 or shape.get("gap", 1) <= 0:
            raise ValueError("window size and gap must be positive")
        aggs = []
        for name, expression in (spec.get("aggregates") or {}).items():
            m = _AGG_RE.fullmatch(str(expression))
            if m is None or m.group(1).lower() not in AGGREGATE_FUNCTIONS:
                raise ValueError(f"unsupported aggregate {name}: {expression!r}")
            func, col = m.group(1).lower(), m.group(2)
            if col == "*" and func != "count":
                raise ValueError(f"{func}(*) is not defined")
            aggs.append(_Agg(str(name), func, None if col == "*" else col))
        emit = spec.get("emit", "on_close")
        if emit not in ("on_close", "on_update"):
            raise ValueError(f"unknown emit mode {emit!r}")
        return _Spec(
            schema=schema,
            partition_by=source.get("partition_by", "none") or "none",
            event_time=column,
            bound_us=parse_duration_us(event.get("max_out_of_orderness", "0s")),
            lateness_us=parse_duration_us(event.get("allowed_lateness", "0s")),
            idle_us=None if idle is None else parse_duration_us(idle),
            key_by=tuple(spec.get("key_by") or ()),
            window=shape,
            aggregates=tuple(aggs),
            emit=emit,
            select=tuple((str(k), str(v)) for k, v in (spec.get("select") or {}).items()),
            filter=spec.get("filter"),
        )


# --------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class Reference:
    """What the engine must have committed after consuming ``files`` (any epoch cut).

    ``emitted``: output rows (key columns, ``window_start``, ``window_end``, ``window_index``
    for count windows, the aggregates), sorted by window then key. ``late``: one row per (late
    record, missed window), in position order. ``counts``: ``records_read``, ``accepted``,
    ``late``, ``dead``, ``filtered`` (records, so ``read = accepted + late + dead + filtered``).
    ``final_watermark``: the global watermark after all input (naive UTC) or None.

    Extras for tests and debugging: ``dead`` (``source_file``, ``source_line``,
    ``reason_code``, ``reason``), ``records`` (every valid record: ``source_file``,
    ``source_line``, ``partition``, ``event_time``, ``watermark`` = W(r), ``status`` one of
    accepted/late/filtered), ``partition_max`` (M_p) and ``idle_partitions``.
    """

    emitted: list[dict[str, Any]]
    late: list[dict[str, Any]]
    counts: dict[str, int]
    final_watermark: datetime | None
    dead: list[dict[str, Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    partition_max: dict[str, datetime] = field(default_factory=dict)
    idle_partitions: tuple[str, ...] = ()


def _records_table(
    spec: _Spec, files: Mapping[str, str | bytes]
) -> tuple[pa.Table, list[dict[str, Any]], int]:
    """Parse every line: (valid records as an Arrow table, dead letters, records read)."""
    columns: dict[str, list[Any]] = {c: [] for c in spec.schema}
    internal: dict[str, list[Any]] = {"_part": [], "_file": [], "_line": [], "_pos": [], "_t": []}
    dead: list[dict[str, Any]] = []
    read = 0
    for key in read_order(files, spec.partition_by):
        partition = _partition_of(key, spec.partition_by)
        for number, line in _lines(files[key]):
            read += 1
            try:
                row = parse_line(line, spec.schema, spec.event_time)
            except Dead as d:
                dead.append(
                    {
                        "source_file": key,
                        "source_line": number,
                        "reason_code": d.code,
                        "reason": d.reason,
                    }
                )
                continue
            for column in spec.schema:
                columns[column].append(row[column])
            internal["_part"].append(partition)
            internal["_file"].append(key)
            internal["_line"].append(number)
            internal["_pos"].append(read)
            internal["_t"].append(_to_us(row[spec.event_time]))
    arrays = {c: pa.array(v, type=_ARROW_TYPES[spec.schema[c]]) for c, v in columns.items()}
    arrays["_part"] = pa.array(internal["_part"], type=pa.string())
    arrays["_file"] = pa.array(internal["_file"], type=pa.string())
    for name in ("_line", "_pos", "_t"):
        arrays[name] = pa.array(internal[name], type=pa.int64())
    return pa.table(arrays), dead, read


def _over(keys: Sequence[str], order: str) -> str:
    partition = f"PARTITION BY {', '.join(_q(k) for k in keys)} " if keys else ""
    return f"({partition}ORDER BY {order})"


def _aggregate_sql(agg: _Agg, types: Mapping[str, str]) -> str:
    if agg.column is None:
        return "count(*)"
    col = _q(agg.column)
    if agg.column not in types:
        raise ValueError(f"aggregate {agg.name!r} reads unknown column {agg.column!r}")
    kind = types[agg.column].upper()
    floating = kind in ("DOUBLE", "FLOAT", "REAL") or kind.startswith("DECIMAL")
    decimal_sum = f"CAST(sum(CAST({col} AS DECIMAL(38,12))) AS DOUBLE)"
    return {
        "count": f"count({col})",
        "sum": decimal_sum if floating else f"sum({col})",
        "avg": f"{decimal_sum} / count({col})" if floating else f"avg({col})",
        "min": f"min({col})",
        "max": f"max({col})",
        "count_distinct": f"count(DISTINCT {col})",
        "approx_count_distinct": f"count(DISTINCT {col})",
        "first": f"first({col} ORDER BY _t ASC, _pos ASC)",
        "last": f"first({col} ORDER BY _t DESC, _pos DESC)",
    }[agg.func]


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def _fetch(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description or ()]
    return [{n: _plain(v) for n, v in zip(names, row, strict=True)} for row in cursor.fetchall()]


def _null_safe(value: Any) -> tuple[int, Any]:
    return (0, 0) if value is None else (1, value)


def compute(spec: Mapping[str, Any], files: Mapping[str, str | bytes]) -> Reference:
    """The expected outcome of running pipeline ``spec`` over ``files`` (see module docstring).

    ``spec`` is the YAML pipeline as a dict; used: ``source.schema``, ``source.partition_by``,
    ``select``, ``filter``, ``event_time``, ``key_by``, ``window``, ``aggregates``, ``emit``.
    ``files`` maps keys relative to ``source.path`` (``"<partition>/<name>.jsonl"``) to text.
    """
    s = _Spec.of(spec)
    table, dead, read = _records_table(s, files)
    con = duckdb.connect()
    try:
        con.register("parsed", table)
        return _compute(con, s, dead, read)
    finally:
        con.close()


def _compute(
    con: duckdb.DuckDBPyConnection, s: _Spec, dead: list[dict[str, Any]], read: int
) -> Reference:
    # Derived columns, in order; then the filter flag and W(r) over the partition's history.
    source = "parsed"
    for i, (name, expression) in enumerate(s.select):
        con.execute(
            f"CREATE TEMP TABLE derived_{i} AS SELECT *, ({expression}) AS {_q(name)} FROM {source}"
        )
        source = f"derived_{i}"
    keep = f"COALESCE(({s.filter}), FALSE)" if s.filter else "TRUE"
    con.execute(f"""
        CREATE TEMP TABLE rec AS
        SELECT *, {keep} AS _keep,
               max(_t) OVER (PARTITION BY _part ORDER BY _pos
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                 - {s.bound_us} AS _w
        FROM {source}
    """)
    types = {row[0]: str(row[1]) for row in con.execute("DESCRIBE rec").fetchall()}
    for key in s.key_by:
        if key not in types:
            raise ValueError(f"key_by column {key!r} is neither a schema nor a derived column")

    # The final global watermark with the idle rule.
    maxima = {
        p: t for p, t in con.execute("SELECT _part, max(_t) FROM rec GROUP BY _part").fetchall()
    }
    idle: tuple[str, ...] = ()
    final_wm: int | None = None
    if maxima:
        newest = max(maxima.values())
        if s.idle_us is not None:
            idle = tuple(sorted(p for p, m in maxima.items() if newest - m > s.idle_us))
        final_wm = min(m for p, m in maxima.items() if p not in idle) - s.bound_us

    keys = ", ".join(_q(k) for k in s.key_by)
    keys_comma = keys + ", " if keys else ""
    aggs = ", ".join(f"{_aggregate_sql(a, types)} AS {_q(a.name)}" for a in s.aggregates)
    aggs_comma = ", " + aggs if aggs else ""
    kind = s.window["type"]
    lateness = s.lateness_us

    if kind == "count":
        count, slide = s.window["count"], s.window["slide"]
        con.execute(f"""
            CREATE TEMP TABLE acc AS
            SELECT *, row_number() OVER {_over(s.key_by, "_pos")} - 1 AS _i
            FROM rec WHERE _keep
        """)
        con.execute(f"""
            CREATE TEMP TABLE asg AS
            SELECT acc.*, _i // {slide} - r.k AS _j
            FROM acc CROSS JOIN range({-(-count // slide)}) AS r(k)
            WHERE _i // {slide} - r.k >= 0 AND (_i // {slide} - r.k) * {slide} + {count} > _i
        """)
        con.execute(
            "CREATE TEMP TABLE late_pairs AS SELECT *, 0 AS _ws, 0 AS _we FROM rec WHERE FALSE"
        )
        rows = _fetch(
            con,
            f"""
            SELECT {keys_comma}min({_q(s.event_time)}) AS window_start,
                   max({_q(s.event_time)}) AS window_end, _j AS window_index,
                   count(*) AS _n{aggs_comma}
            FROM asg GROUP BY {keys_comma}_j
        """,
        )
        if s.emit == "on_close":
            rows = [r for r in rows if r["_n"] == count]
        for r in rows:
            del r["_n"]
        rows.sort(key=lambda r: (r["window_index"], *(_null_safe(r[k]) for k in s.key_by)))
    else:
        # Every (record, window) pair of the kept records, and whether the window is missed.
        if kind in ("tumbling", "hopping"):
            size, slide = s.window["size"], s.window["slide"]
            last_start = f"(_t - ((_t % {slide}) + {slide}) % {slide})"
            con.execute(f"""
                CREATE TEMP TABLE pairs AS
                SELECT *, _ws + {size} AS _we,
                       (_w IS NOT NULL AND _ws + {size} + {lateness} <= _w) AS _missed
                FROM (SELECT rec.*, {last_start} - r.k * {slide} AS _ws
                      FROM rec CROSS JOIN range({-(-size // slide)}) AS r(k)
                      WHERE _keep)
                WHERE _ws + {size} > _t
            """)
        else:
            gap = s.window["gap"]
            con.execute(f"""
                CREATE TEMP TABLE pairs AS
                SELECT *, _t AS _ws, _t + {gap} AS _we,
                       (_w IS NOT NULL AND _t + {lateness} <= _w) AS _missed
                FROM rec WHERE _keep
            """)
        con.execute("""
            CREATE TEMP TABLE late_pos AS
            SELECT _pos FROM pairs GROUP BY _pos HAVING bool_and(_missed)
        """)
        con.execute("CREATE TEMP TABLE late_pairs AS SELECT * FROM pairs WHERE _missed")
        if kind == "session":
            gap = s.window["gap"]
            con.execute(f"""
                CREATE TEMP TABLE acc AS
                SELECT *, sum(_new) OVER {_over(s.key_by, "_t, _pos")} AS _sid
                FROM (SELECT *, CASE WHEN lag(_t) OVER {_over(s.key_by, "_t, _pos")} IS NULL
                                       OR _t > lag(_t) OVER {_over(s.key_by, "_t, _pos")}
                                                + {gap}
                                     THEN 1 ELSE 0 END AS _new
                      FROM pairs WHERE NOT _missed)
            """)
            cap = s.window.get("max_duration")
            if cap:
                # Check points every `cap` (aligned): a session starting at s is cut at the
                # first multiple c of cap with c - s >= cap, then at every multiple after it.
                # A record's piece is max(t // cap, ceil(s / cap)); pieces start at s (the
                # first) or at their check point, and end at last + gap or the next check point.
                con.execute(f"""
                    CREATE TEMP TABLE acc2 AS
                    SELECT *, greatest(_t // {cap}, (_s + {cap} - 1) // {cap}) AS _piece
                    FROM (SELECT *, min(_t) OVER (PARTITION BY {keys_comma}_sid) AS _s FROM acc)
                """)
                rows = _fetch(
                    con,
                    f"""
                    SELECT {keys_comma}
                           CASE WHEN _piece = (min(_s) + {cap} - 1) // {cap} THEN min(_s)
                                ELSE _piece * {cap} END AS _ws,
                           least(max(_t) + {gap}, (_piece + 1) * {cap}) AS _we{aggs_comma}
                    FROM acc2 GROUP BY {keys_comma}_sid, _piece
                """,
                )
            else:
                rows = _fetch(
                    con,
                    f"""
                    SELECT {keys_comma}min(_t) AS _ws, max(_t) + {gap} AS _we{aggs_comma}
                    FROM acc GROUP BY {keys_comma}_sid
                """,
                )
        else:
            rows = _fetch(
                con,
                f"""
                SELECT {keys_comma}_ws, _we{aggs_comma}
                FROM pairs WHERE NOT _missed GROUP BY {keys_comma}_ws, _we
            """,
            )
        if s.emit == "on_close":
            rows = [r for r in rows if final_wm is not None and r["_we"] + lateness <= final_wm]
        rows.sort(key=lambda r: (r["_ws"], r["_we"], *(_null_safe(r[k]) for k in s.key_by)))
        for r in rows:
            start, end = r.pop("_ws"), r.pop("_we")
            aggregates = {a.name: r.pop(a.name) for a in s.aggregates}
            r.update(window_start=_from_us(start), window_end=_from_us(end), **aggregates)

    # Late rows, per-record status and counts.
    schema_cols = ", ".join(_q(c) for c in s.schema)
    late = _fetch(
        con,
        f"""
        SELECT {schema_cols}, _ws, _we, _w, _file AS source_file, _line AS source_line
        FROM late_pairs ORDER BY _pos, _ws
    """,
    )
    for r in late:
        r["window_start"] = _from_us(r.pop("_ws"))
        r["window_end"] = _from_us(r.pop("_we"))
        r["watermark"] = _from_us(r.pop("_w"))
        r["source_file"], r["source_line"] = r.pop("source_file"), r.pop("source_line")
    late_records = "(SELECT _pos FROM late_pos)" if kind != "count" else "(SELECT 0 WHERE FALSE)"
    records = _fetch(
        con,
        f"""
        SELECT _file AS source_file, _line AS source_line, _part AS partition, _t, _w,
               CASE WHEN NOT _keep THEN 'filtered'
                    WHEN _pos IN {late_records} THEN 'late'
                    ELSE 'accepted' END AS status
        FROM rec ORDER BY _pos
    """,
    )
    for r in records:
        r["event_time"] = _from_us(r.pop("_t"))
        w = r.pop("_w")
        r["watermark"] = None if w is None else _from_us(w)
    status = [r["status"] for r in records]
    counts = {
        "records_read": read,
        "accepted": status.count("accepted"),
        "late": status.count("late"),
        "dead": len(dead),
        "filtered": status.count("filtered"),
    }
    if counts["accepted"] + counts["late"] + counts["dead"] + counts["filtered"] != read:
        raise AssertionError(f"reference bug: counts do not add up: {counts}")
    return Reference(
        emitted=rows,
        late=late,
        counts=counts,
        final_watermark=None if final_wm is None else _from_us(final_wm),
        dead=dead,
        records=records,
        partition_max={p: _from_us(m) for p, m in sorted(maxima.items())},
        idle_partitions=idle,
    )


# --------------------------------------------------------------------------- comparison


def _normalise(value: Any) -> Any:
    """Python scalars: numpy/pandas values unwrapped, NaN/NaT/NA -> None, aware -> naive UTC."""
    if value is None:
        return None
    module = type(value).__module__
    if module.startswith(("pandas", "numpy")):
        import pandas as pd

        if value is pd.NaT or value is pd.NA:
            return None
        if isinstance(value, pd.Timestamp):
            value = value.to_pydatetime()
        elif module.startswith("numpy"):
            import numpy as np

            if isinstance(value, np.datetime64):
                value = None if np.isnat(value) else pd.Timestamp(value).to_pydatetime()
            elif hasattr(value, "item"):
                value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def _equal(actual: Any, expected: Any, tol: float, approx: float | None) -> bool:
    if actual is None or expected is None:
        return actual is None and expected is None
    numeric = (int, float)
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected or actual == expected
    if isinstance(actual, numeric) and isinstance(expected, numeric):
        if approx is not None:
            return abs(actual - expected) <= approx * max(abs(expected), 1)
        if isinstance(actual, int) and isinstance(expected, int):
            return actual == expected
        return math.isclose(actual, expected, rel_tol=tol, abs_tol=tol)
    return bool(actual == expected)


def _describe(key: tuple[Any, ...], names: Sequence[str]) -> str:
    return ", ".join(f"{n}={v!r}" for n, v in zip(names, key, strict=True))


def compare(
    actual: Iterable[Mapping[str, Any]],
    expected: Iterable[Mapping[str, Any]],
    keys: Sequence[str],
    *,
    float_tol: float = 1e-9,
    approx: Mapping[str, float] | None = None,
) -> list[str]:
    """Human-readable differences between two row sets matched on ``keys``; [] when equal.

    Values are normalised first (numpy/pandas scalars unwrapped, NaN/NaT/NA = null, aware
    datetimes to naive UTC, Decimal to float). Every column of an expected row must be in the
    matching actual row; extra actual columns (``_op``, ``_epoch``, ``epoch`` ...) are ignored.
    Two ints must be equal; other numbers agree within ``float_tol`` (relative or absolute);
    a column named in ``approx`` agrees when ``|a - e| <= tol * max(|e|, 1)``.
    """
    tolerances = dict(approx or {})
    problems: list[str] = []

    def index(rows: Iterable[Mapping[str, Any]], side: str) -> dict[tuple[Any, ...], dict]:
        out: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in rows:
            norm = {k: _normalise(v) for k, v in row.items()}
            missing = [k for k in keys if k not in norm]
            if missing:
                problems.append(f"{side} row without key column(s) {missing}: {norm}")
                continue
            key = tuple(norm[k] for k in keys)
            if key in out:
                problems.append(f"duplicate {side} row for {_describe(key, keys)}")
            out[key] = norm
        return out

    got = index(actual, "actual")
    want = index(expected, "expected")

    def order(key: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple((v is not None, str(type(v)), str(v)) for v in key)

    for key in sorted(want.keys() - got.keys(), key=order):
        problems.append(f"missing row {_describe(key, keys)}: expected {want[key]}")
    for key in sorted(got.keys() - want.keys(), key=order):
        problems.append(f"extra row {_describe(key, keys)}: {got[key]}")
    for key in sorted(want.keys() & got.keys(), key=order):
        a_row, e_row = got[key], want[key]
        for column, e_value in e_row.items():
            if column in keys:
                continue
            if column not in a_row:
                problems.append(f"row {_describe(key, keys)}: column {column!r} is missing")
                continue
            a_value = a_row[column]
            if not _equal(a_value, e_value, float_tol, tolerances.get(column)):
                problems.append(
                    f"row {_describe(key, keys)}: {column} = {a_value!r}, expected {e_value!r}"
                )
    return problems
