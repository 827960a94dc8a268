"""Independent reference for keyed event-time tumbling-window aggregation.

Pure Python (standard library only; pandas/numpy are used, if installed, only to normalise
values handed to :func:`compare_rows`). It must not import ``sluice``: it is the oracle the
engine's committed output is checked against. It processes the whole input in one go, record
by record, implementing the semantics literally:

* Records are the non-blank lines of each file (split on ``"\\n"``, 1-based line numbers), in
  (file key, line number) order.
* A line that is not a JSON object is dead (``malformed``). A missing/null event time is dead
  (``missing_event_time``); a present value of any schema field that cannot be coerced to its
  type is dead (``wrong_type``). The first problem (malformed, event time, then schema order)
  decides the category.
* For valid record ``i``: ``W_i = max(event time of valid records before i) - bound``. The
  record is LATE iff ``W_i`` exists and ``window_end + allowed_lateness <= W_i``; else it is
  accepted into its (key, window).
* Final watermark ``W = max(all valid event times) - bound``. A window is emitted iff
  ``window_end + allowed_lateness <= W``; the others are open.
* SQL aggregate semantics (nulls ignored; empty sum/min/max/avg is null).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

__all__ = [
    "AggSpec",
    "Reference",
    "compare_rows",
    "compute_reference",
    "parse_aggregate",
    "parse_timestamp",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)

SCALAR_TYPES = ("string", "int", "long", "double", "float", "boolean", "timestamp")
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}

_TS_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})?"
)
_INT_STR_RE = re.compile(r"[+-]?\d+")
_NUM_STR_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_AGG_RE = re.compile(
    r"\s*(count|sum|min|max|avg)\s*\(\s*(\*|[A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", re.IGNORECASE
)


class _Dead(Exception):
    def __init__(self, category: str) -> None:
        super().__init__(category)
        self.category = category


# --------------------------------------------------------------------------- parsing


def parse_timestamp(text: str) -> datetime | None:
    """``YYYY-MM-DD[T ]HH:MM:SS[.fraction][Z|±HH:MM]`` -> aware UTC datetime, else None.

    No zone means UTC; the fraction is truncated to microseconds.
    """
    m = _TS_RE.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(m.group(k)) for k in range(1, 7))
    frac = m.group(7) or ""
    micros = int((frac + "000000")[:6])
    zone = m.group(8)
    try:
        if zone is None or zone == "Z":
            offset = timedelta(0)
        else:
            sign = -1 if zone[0] == "-" else 1
            hh, mm = int(zone[1:3]), int(zone[4:6])
            if hh > 23 or mm > 59:
                return None
            offset = sign * timedelta(hours=hh, minutes=mm)
        local = datetime(year, month, day, hour, minute, second, micros, tzinfo=UTC)
        return local - offset
    except (ValueError, OverflowError):
        return None


def _coerce(value: Any, typ: str) -> Any:
    """Coerce a present, non-null JSON value to ``typ``; raise ``_Dead('wrong_type')``."""
    wrong = _Dead("wrong_type")
    if isinstance(value, dict | list):
        raise wrong
    if typ == "string":
        if isinstance(value, str):
            return value
        return json.dumps(value)  # bool -> true/false, numbers -> their JSON text
    if typ in ("int", "long"):
        if isinstance(value, bool):
            raise wrong
        if isinstance(value, int):
            n = value
        elif isinstance(value, str) and _INT_STR_RE.fullmatch(value):
            n = int(value)
        else:
            raise wrong
        lo, hi = _INT_RANGE[typ]
        if not lo <= n <= hi:
            raise wrong
        return n
    if typ in ("double", "float"):
        if isinstance(value, bool):
            raise wrong
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str) and _NUM_STR_RE.fullmatch(value):
            return float(value)
        raise wrong
    if typ == "boolean":
        if isinstance(value, bool):
            return value
        if value == "true":
            return True
        if value == "false":
            return False
        raise wrong
    if typ == "timestamp":
        if not isinstance(value, str):
            raise wrong
        ts = parse_timestamp(value)
        if ts is None:
            raise wrong
        return ts
    raise ValueError(f"unsupported schema type {typ!r}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")


def _parse_record(line: str, schema: dict[str, str], event_time: str) -> dict[str, Any]:
    """Return the typed row, or raise ``_Dead(category)``."""
    try:
        obj = json.loads(line, parse_constant=_reject_constant)
    except ValueError:
        raise _Dead("malformed") from None
    if not isinstance(obj, dict):
        raise _Dead("malformed")
    row: dict[str, Any] = {}
    raw_ts = obj.get(event_time)
    if raw_ts is None:
        raise _Dead("missing_event_time")
    row[event_time] = _coerce(raw_ts, "timestamp")
    for name, typ in schema.items():
        if name == event_time:
            continue
        raw = obj.get(name)
        row[name] = None if raw is None else _coerce(raw, typ)
    return row


# --------------------------------------------------------------------------- aggregates


@dataclass(frozen=True)
class AggSpec:
    """A parsed aggregate: ``func`` in count/sum/min/max/avg, ``column`` None for ``*``."""

    func: str
    column: str | None


def parse_aggregate(expr: str) -> AggSpec:
    """Parse ``count(*)``, ``sum(col)``, ... (function names case-insensitive)."""
    m = _AGG_RE.fullmatch(expr)
    if m is None:
        raise ValueError(f"cannot parse aggregate {expr!r}")
    func, col = m.group(1).lower(), m.group(2)
    if col == "*":
        if func != "count":
            raise ValueError(f"only count accepts '*': {expr!r}")
        return AggSpec(func, None)
    return AggSpec(func, col)


def _aggregate(spec: AggSpec, rows: list[dict[str, Any]], schema: dict[str, str]) -> Any:
    if spec.column is None:
        return len(rows)
    values = [r[spec.column] for r in rows if r[spec.column] is not None]
    if spec.func == "count":
        return len(values)
    if not values:
        return None
    if spec.func == "min":
        return min(values)
    if spec.func == "max":
        return max(values)
    typ = schema[spec.column]
    if typ in ("int", "long"):
        total: int | float = sum(values)
    elif typ in ("double", "float"):
        total = math.fsum(values)
    else:
        raise ValueError(f"{spec.func}({spec.column}) needs a numeric column, not {typ}")
    if spec.func == "sum":
        return total
    return total / len(values)  # avg, always float


# --------------------------------------------------------------------------- reference


@dataclass(frozen=True)
class Reference:
    """What the engine must have produced after consuming the whole input."""

    emitted: list[dict[str, Any]]
    open_windows: list[dict[str, Any]]
    late: list[tuple[str, int]]
    dead: list[tuple[str, int, str]]
    accepted_count: int
    records_read: int
    final_watermark: datetime | None
    dead_by_category: dict[str, int] = field(default_factory=dict)


def _to_micros(ts: datetime) -> int:
    return (ts - EPOCH) // _MICRO


def _from_micros(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def _seconds_to_micros(s: float) -> int:
    return round(s * 1_000_000)


def _sort_key(values: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    return tuple((v is not None, v) for v in values)


def _sorted_keys(keys: set[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    try:
        return sorted(keys, key=_sort_key)
    except TypeError:  # mixed types in a column: any stable order will do
        return sorted(keys, key=repr)


def compute_reference(
    files: list[tuple[str, bytes]],
    *,
    schema: dict[str, str],
    event_time: str,
    max_out_of_orderness_s: float,
    allowed_lateness_s: float,
    window_size_s: float,
    key_by: list[str],
    aggregates: dict[str, str],
    read_order: bool = False,
) -> Reference:
    """Compute the expected result of the whole input in one pass (see module docstring).

    ``files`` are ``(file key, content)`` in ascending key order, or, with ``read_order``,
    in the order the source read them (files landing in any name order). Row dicts hold the
    ``key_by`` columns, ``window_start``, ``window_end`` (aware UTC) and one column per
    aggregate; they are sorted by (window_start, key).
    """
    for name, typ in schema.items():
        if typ not in SCALAR_TYPES:
            raise ValueError(f"unsupported type {typ!r} for column {name!r}")
    for col in key_by:
        if col not in schema:
            raise ValueError(f"key column {col!r} not in schema")
    specs = {out: parse_aggregate(expr) for out, expr in aggregates.items()}
    for agg_name, spec in specs.items():
        if spec.column is not None and spec.column not in schema:
            raise ValueError(f"aggregate {agg_name!r} reads unknown column {spec.column!r}")
    size = _seconds_to_micros(window_size_s)
    bound = _seconds_to_micros(max_out_of_orderness_s)
    lateness = _seconds_to_micros(allowed_lateness_s)
    if size <= 0:
        raise ValueError("window size must be positive")
    if not read_order and list(files) != sorted(files, key=lambda f: f[0]):
        raise ValueError("files must be in ascending key order")

    late: list[tuple[str, int]] = []
    dead: list[tuple[str, int, str]] = []
    groups: dict[tuple[tuple[Any, ...], int], list[dict[str, Any]]] = {}
    records_read = 0
    max_ts: int | None = None

    for file_key, content in files:
        for line_no, raw in enumerate(content.split(b"\n"), start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = None
            if line is not None and not line.strip():
                continue  # blank lines are not records
            records_read += 1
            try:
                if line is None:
                    raise _Dead("malformed")
                row = _parse_record(line, schema, event_time)
            except _Dead as d:
                dead.append((file_key, line_no, d.category))
                continue
            ts = _to_micros(row[event_time])
            start = (ts // size) * size
            end = start + size
            wm = None if max_ts is None else max_ts - bound
            if wm is not None and end + lateness <= wm:
                late.append((file_key, line_no))
            else:
                key = tuple(row[c] for c in key_by)
                groups.setdefault((key, start), []).append(row)
            max_ts = ts if max_ts is None else max(max_ts, ts)

    final_wm = None if max_ts is None else max_ts - bound
    emitted: list[dict[str, Any]] = []
    open_windows: list[dict[str, Any]] = []
    for (key, start), rows in sorted(
        groups.items(), key=lambda kv: (kv[0][1], _sort_key(kv[0][0]))
    ):
        end = start + size
        out: dict[str, Any] = dict(zip(key_by, key, strict=True))
        out["window_start"] = _from_micros(start)
        out["window_end"] = _from_micros(end)
        for name, spec in specs.items():
            out[name] = _aggregate(spec, rows, schema)
        closed = final_wm is not None and end + lateness <= final_wm
        (emitted if closed else open_windows).append(out)

    accepted = sum(len(rows) for rows in groups.values())
    assert accepted + len(late) + len(dead) == records_read
    return Reference(
        emitted=emitted,
        open_windows=open_windows,
        late=late,
        dead=dead,
        accepted_count=accepted,
        records_read=records_read,
        final_watermark=None if final_wm is None else _from_micros(final_wm),
        dead_by_category=dict(Counter(c for _, _, c in dead)),
    )


# --------------------------------------------------------------------------- comparison


def _normalise(value: Any) -> Any:
    """Plain Python value: None for NaN/NaT/NA, aware-UTC datetimes, floats for Decimals."""
    if value is None:
        return None
    try:  # optional: pandas / numpy scalars
        import numpy as np
        import pandas as pd

        if value is pd.NaT or value is pd.NA:
            return None
        if isinstance(value, np.datetime64):
            value = pd.Timestamp(value)
        if isinstance(value, pd.Timestamp):
            if pd.isna(value):
                return None
            value = value.to_pydatetime(warn=False)
        elif isinstance(value, np.generic):
            value = value.item()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
    return value


def _equal(a: Any, b: Any, float_rel: float, float_abs: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b and isinstance(a, bool) == isinstance(b, bool)
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, int | float) and isinstance(b, int | float):
            return math.isclose(a, b, rel_tol=float_rel, abs_tol=float_abs)
        return False
    return bool(a == b)


def row_key(row: dict[str, Any], keys: list[str] | tuple[str, ...]) -> tuple[Any, ...]:
    """``row``'s values of ``keys``, normalised as :func:`compare_rows` matches them."""
    return tuple(_normalise(row[k]) for k in keys)


def compare_rows(
    actual: list[dict[str, Any]],
    expected: list[dict[str, Any]],
    *,
    keys: list[str],
    float_rel: float = 1e-9,
    float_abs: float = 1e-9,
) -> list[str]:
    """Human-readable differences between two row lists; ``[]`` means equal.

    Rows are matched on ``keys`` (e.g. key columns + ``window_start``). Every column of an
    expected row is compared (extra columns in actual rows are ignored). Floats use
    ``math.isclose``; timestamps may be naive UTC, aware, or pandas Timestamps; NaN/NaT/NA
    count as null.
    """

    def index(
        rows: list[dict[str, Any]], label: str
    ) -> tuple[dict[Any, dict[str, Any]], list[str]]:
        out: dict[Any, dict[str, Any]] = {}
        problems: list[str] = []
        for row in rows:
            norm = {k: _normalise(v) for k, v in row.items()}
            missing = [k for k in keys if k not in norm]
            if missing:
                problems.append(f"{label} row lacks key column(s) {missing}: {norm}")
                continue
            k = tuple(norm[c] for c in keys)
            if k in out:
                problems.append(f"duplicate {label} row for {dict(zip(keys, k, strict=True))}")
                continue
            out[k] = norm
        return out, problems

    act, diffs = index(actual, "actual")
    exp, exp_problems = index(expected, "expected")
    diffs += exp_problems
    for k in _sorted_keys(exp.keys() - act.keys()):
        diffs.append(f"missing row: {exp[k]}")
    for k in _sorted_keys(act.keys() - exp.keys()):
        diffs.append(f"unexpected row: {act[k]}")
    for k in _sorted_keys(exp.keys() & act.keys()):
        e, a = exp[k], act[k]
        label = dict(zip(keys, k, strict=True))
        for col, ev in e.items():
            if col not in a:
                diffs.append(f"{label}: column {col!r} missing (expected {ev!r})")
            elif not _equal(a[col], ev, float_rel, float_abs):
                diffs.append(f"{label}: {col} = {a[col]!r}, expected {ev!r}")
    return diffs
