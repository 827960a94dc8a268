"""The sections of a spec besides its components: name, event time, select, filter, keys,
aggregates, output, checkpoint, qos, restart, execution and S3 settings. Each function checks
one section, records what is wrong in the :class:`Checker` and returns the value to build the
spec from (a neutral one when invalid)."""

from __future__ import annotations

import re
from typing import Any

from sluice.spec.checker import Checker, kind
from sluice.spec.components.base import NAME_RE
from sluice.spec.model import (
    AGGREGATE_FUNCTIONS,
    EXECUTION_MODES,
    NUMERIC_TYPES,
    AggregateSpec,
    CheckpointSpec,
    EventTimeSpec,
    RestartSpec,
)
from sluice.storage.s3options import S3Options

__all__ = [
    "aggregates",
    "checkpoint",
    "event_time",
    "execution",
    "filter",
    "key_by",
    "name",
    "output",
    "qos",
    "restart",
    "s3",
    "select",
]

_AGG_RE = re.compile(r"^\s*([a-z_]+)\s*\(\s*(\*|[A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")
_RESERVED_OUTPUT = ("window_start", "window_end", "window_index", "_op", "_epoch")
_EVENT_TIME = {"column", "max_out_of_orderness", "allowed_lateness", "idle_timeout"}
_CHECKPOINT = {"storage", "interval", "timeout", "retained", "compact_every"}
_S3 = {"endpoint_url", "region"}
_RESTART = {"attempts", "delay", "max_delay", "multiplier"}


def name(checker: Checker, value: Any) -> str | None:
    if not isinstance(value, str) or not NAME_RE.match(value):
        checker.add(
            "name",
            f"{value!r} is not a valid pipeline name",
            "use lower-case letters, digits and '_' only, e.g. clicks_per_minute",
        )
        return None
    return value


def event_time(checker: Checker, value: Any, schema: dict[str, str]) -> EventTimeSpec | None:
    data = checker.mapping(value, "event_time", _EVENT_TIME) if value is not None else None
    if data is None:
        if value is None:
            checker.add("event_time", "is required", "e.g. {column: ts, max_out_of_orderness: 5s}")
        return None
    column = checker.string(data, "column", "event_time")
    if column and schema and schema.get(column) != "timestamp":
        checker.add(
            "event_time.column",
            f"{column!r} is not a timestamp column of the schema",
            "name a schema column of type timestamp",
        )
    bound = checker.duration(data, "max_out_of_orderness", "event_time", default="0s")
    lateness = checker.duration(data, "allowed_lateness", "event_time", default="0s")
    idle = None
    if data.get("idle_timeout") is not None:
        idle = checker.duration(data, "idle_timeout", "event_time", positive=True)
    return EventTimeSpec(column, bound, lateness, idle) if column else None


def select(checker: Checker, value: Any, schema: dict[str, str]) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        checker.add(
            "select",
            f"expected a mapping of new column names to SQL expressions, got {kind(value)}",
            "e.g. {amount_eur: amount * 0.92, domain: parse_url(url, 'HOST')}",
        )
        return ()
    result = []
    for name, expression in value.items():
        where = f"select.{name}"
        if not isinstance(name, str) or not re.match(r"^[A-Za-z][A-Za-z0-9_]*\Z", name):
            checker.add(where, "is not a valid column name", "use letters, digits and '_'")
            continue
        if name in schema:
            checker.add(where, "clashes with a source column", "choose another name")
        if not isinstance(expression, str | int | float) or not str(expression).strip():
            checker.add(where, "must be a Spark SQL expression", "e.g. amount * 0.92")
            continue
        result.append((name, str(expression)))
    return tuple(result)


def filter(checker: Checker, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        checker.add("filter", "must be a Spark SQL predicate", "e.g. amount > 0 AND url > ''")
        return None
    return value


def key_by(checker: Checker, value: Any, schema: dict[str, str]) -> tuple[str, ...]:
    if value is None:
        return ()
    keys = [value] if isinstance(value, str) else value
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        checker.add("key_by", f"{value!r} is not a list of column names", "e.g. [user]")
        return ()
    for key in keys:
        if schema and key not in schema:
            checker.add("key_by", f"{key!r} is not a schema column", f"use one of {list(schema)}")
    if len(set(keys)) != len(keys):
        checker.add("key_by", "names a column twice", "list each key column once")
    return tuple(keys)


def aggregates(checker: Checker, value: Any, schema: dict[str, str]) -> tuple[AggregateSpec, ...]:
    if not isinstance(value, dict) or not value:
        checker.add(
            "aggregates",
            "must map output names to expressions",
            "e.g. {clicks: count(*), total: sum(amount)}",
        )
        return ()
    result = []
    for name, expression in value.items():
        agg = aggregate(checker, str(name), expression, schema)
        if agg:
            result.append(agg)
    return tuple(result)


def aggregate(
    checker: Checker, name: str, expression: Any, schema: dict[str, str]
) -> AggregateSpec | None:
    where = f"aggregates.{name}"
    if not NAME_RE.match(name) and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", name):
        checker.add(where, "is not a valid column name", "use letters, digits and '_'")
    match = _AGG_RE.match(str(expression))
    if not match or match.group(1) not in AGGREGATE_FUNCTIONS:
        checker.add(
            where,
            f"{expression!r} is not a supported aggregate",
            f"write func(column) with func in {list(AGGREGATE_FUNCTIONS)}, or count(*)",
        )
        return None
    func, column = match.group(1), match.group(2)
    if column == "*":
        if func != "count":
            checker.add(where, f"{func}(*) is not defined", "name a column, e.g. sum(amount)")
        return AggregateSpec(name, func, None)
    if schema and column not in schema:
        checker.add(where, f"{column!r} is not a schema column", f"use one of {list(schema)}")
    elif func in ("sum", "avg") and schema.get(column, "derived") not in (
        *NUMERIC_TYPES,
        "derived",
    ):
        checker.add(
            where,
            f"{func} needs a numeric column; {column!r} is {schema[column]}",
            f"use a column of type {list(NUMERIC_TYPES)}",
        )
    elif func in ("min", "max") and schema and schema[column] == "boolean":
        checker.add(where, f"{func} of a boolean column is not supported", "use count")
    if name in schema or name in _RESERVED_OUTPUT:
        checker.add(where, "clashes with an input or window column name", "choose another name")
    return AggregateSpec(name, func, column)


def output(checker: Checker, value: Any, columns: list[str], stateless: bool) -> tuple[str, ...]:
    """A stateless pipeline's ``output:``: some of the source and ``select`` columns, in
    the order written (``columns``: those available; empty when the source is invalid)."""
    if value is None:
        return ()
    if not stateless:
        checker.add("output", "only applies to a stateless pipeline (no window, no process)",
                 "remove it: windows emit keys, window bounds and aggregates; a process "
                 "function declares process.output")  # fmt: skip
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        checker.add("output", f"{value!r} is not a list of column names",
                 f"e.g. {columns[:2] or ['user', 'ts']}")  # fmt: skip
        return ()
    for i, name in enumerate(names):
        if columns and name not in columns:
            checker.add(f"output[{i}]", f"{name!r} is not a source or select column",
                     f"use some of {columns}")  # fmt: skip
    for dup in sorted({n for n in names if names.count(n) > 1}):
        checker.add("output", f"names {dup!r} twice", "list each column once")
    return tuple(names)


def checkpoint(checker: Checker, value: Any) -> CheckpointSpec | None:
    data = checker.mapping(value, "checkpoint", _CHECKPOINT) if value is not None else None
    if data is None:
        if value is None:
            checker.add("checkpoint", "is required", "e.g. {storage: data/ckpt, interval: 1m}")
        return None
    storage = checker.string(data, "storage", "checkpoint")
    interval = checker.duration(data, "interval", "checkpoint", default="1m", positive=True)
    timeout = checker.duration(data, "timeout", "checkpoint", default="10m", positive=True)
    retained = checker.positive_int(data, "retained", "checkpoint", 10) or 10
    every = checker.positive_int(data, "compact_every", "checkpoint", 10) or 10
    return CheckpointSpec(storage, interval, timeout, retained, every) if storage else None


def qos(checker: Checker, value: Any) -> int:
    if value not in (0, 1, 2) or isinstance(value, bool):
        checker.add("qos", f"{value!r} is not a qos level", "use 0, 1 or 2")
        return 2
    return int(value)


def restart(checker: Checker, value: Any) -> RestartSpec:
    if value is None:
        return RestartSpec()
    data = checker.mapping(value, "restart", _RESTART)
    if data is None:
        return RestartSpec()
    attempts = data.get("attempts", 3)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        checker.add("restart.attempts", f"{attempts!r} is not a whole number >= 0", "e.g. 3")
        attempts = 3
    delay = checker.duration(data, "delay", "restart", default="10s")
    max_delay = checker.duration(data, "max_delay", "restart", default="5m")
    if max_delay < delay:
        checker.add("restart.max_delay", "is shorter than restart.delay", "raise it, e.g. 5m")
    multiplier = data.get("multiplier", 2.0)
    numeric = isinstance(multiplier, int | float) and not isinstance(multiplier, bool)
    if not numeric or multiplier < 1:
        checker.add("restart.multiplier", f"{multiplier!r} is not a number >= 1", "e.g. 2")
        multiplier = 2.0
    return RestartSpec(attempts, delay, max_delay, float(multiplier))


def execution(checker: Checker, top: dict[str, Any]) -> str | None:
    """Optional: ``cold`` (spark-submit) or ``warm`` (``sluice serve``); absent, the
    deployment's ``SLUICE_EXECUTION`` decides (docs/warm-execution.md)."""
    if top.get("execution") is None:
        return None
    hint = "(absent: the deployment's SLUICE_EXECUTION; docs/warm-execution.md)"
    return checker.string(top, "execution", "", EXECUTION_MODES, hint=hint)


def s3(checker: Checker, value: Any) -> S3Options | None:
    if value is None:
        return None
    data = checker.mapping(value, "s3", _S3)
    if data is None:
        return None
    return S3Options(endpoint_url=data.get("endpoint_url"), region=data.get("region"))
