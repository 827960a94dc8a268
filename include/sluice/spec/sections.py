"""The sections of a spec besides its components, as pydantic models (event time,
checkpoint, restart, S3 settings, a join) and as the checks of single values (name, select,
filter, keys, aggregates, output, qos, emit, execution; a join pipeline's sources, event
times, filters and output, by source). The pipeline model
(:mod:`sluice.spec.loader`) validates each section with these; what spans several sections
is in :mod:`sluice.spec.rules`.

A problem is raised as :func:`~sluice.spec.components.base.problem` (a model's field) or
appended to a list of :class:`SpecProblem` (a value checked against other sections); either way
it names the field, the problem and the fix.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from sluice.spec.components.base import NAME_RE, problem, several
from sluice.spec.durations import parse_duration_us
from sluice.spec.exceptions import SpecProblem
from sluice.spec.model import (
    AGGREGATE_FUNCTIONS,
    EXECUTION_MODES,
    LOOKUP_FORMATS,
    LOOKUP_JOINS,
    LOOKUP_TABLES,
    NUMERIC_TYPES,
    SCHEMA_TYPES,
    AggregateSpec,
    CheckpointSpec,
    EventTimeSpec,
    LookupSpec,
    RestartSpec,
)
from sluice.spec.problems import spec_problems
from sluice.storage.s3options import S3Options

__all__ = [
    "COLUMN_RE",
    "CheckpointSection",
    "EventTimeSection",
    "Execution",
    "PipelineName",
    "Predicate",
    "Qos",
    "RestartSection",
    "S3Section",
    "Section",
    "SignedDuration",
    "aggregates",
    "checked_duration",
    "checked_text",
    "duration",
    "event_time",
    "key_by",
    "kind",
    "lookups",
    "output",
    "predicate",
    "select",
    "text",
]

_AGG_RE = re.compile(r"^\s*([a-z_]+)\s*\(\s*(\*|[A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")
COLUMN_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*\Z")
_RESERVED_OUTPUT = ("window_start", "window_end", "window_index", "_op", "_epoch")


def kind(value: Any) -> str:
    """What a value is, for a message: ``nothing``, ``int``, ``list``..."""
    return "nothing" if value is None else type(value).__name__


# -- the field types of the section models ------------------------------------------------------


def text(choices: tuple[str, ...] = (), hint: str = "") -> BeforeValidator:
    """A required, non-empty text (among ``choices`` when given; ``hint`` follows them)."""
    return BeforeValidator(checked_text(choices, hint))


def checked_text(choices: tuple[str, ...] = (), hint: str = "") -> Callable[[Any], Any]:
    """The check of :func:`text`, to call."""
    more = f" {hint}" if hint else ""

    def check(value: Any) -> Any:
        if value is None:
            raise problem("is required", f"one of {list(choices)}{more}" if choices else "add it")
        if not isinstance(value, str) or (choices and value not in choices):
            raise problem(f"{value!r} is not valid", f"use one of {list(choices)}{more}")
        if not value.strip():
            raise problem("is empty", "give it a value")
        return value

    return check


def duration(*, positive: bool = False, optional: bool = False) -> BeforeValidator:
    """A duration as a spec writes it (``5s``, ``1m``) in microseconds; ``optional``: null
    is None (else it is required)."""
    return BeforeValidator(checked_duration(positive=positive, optional=optional))


def checked_duration(
    *, positive: bool = False, optional: bool = False
) -> Callable[[Any], int | None]:
    """The check of :func:`duration`, to call."""

    def check(value: Any) -> int | None:
        if value is None:
            if optional:
                return None
            raise problem("is required", "write a duration like 5s or 1m")
        try:
            us = parse_duration_us(value)
        except ValueError as exc:
            raise problem(str(exc), "write a duration like 500ms, 5s, 1m, 2h or 1d") from exc
        if positive and us <= 0:
            raise problem("must be greater than zero", "write a duration like 1m")
        return us

    return check


def _signed_duration(value: Any) -> int:
    """A duration that may be negative (``-5s``: before), in microseconds."""
    if value is None:
        raise problem("is required", "write a duration like -5s, 0s or 10s")
    text = value.strip() if isinstance(value, str) else value
    negative = isinstance(text, str) and text.startswith("-")
    if isinstance(text, int | float) and not isinstance(text, bool) and text < 0:
        negative, text = True, -text
    try:
        us = parse_duration_us(text[1:] if isinstance(text, str) and negative else text)
    except ValueError as exc:
        raise problem(str(exc), "write a duration like -5s, 0s or 10s") from exc
    return -us if negative else us


def _positive_int(default: int) -> BeforeValidator:
    """A whole number > 0; null is ``default``."""

    def check(value: Any) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise problem(f"{value!r} is not a positive whole number", "e.g. 10")
        return value

    return BeforeValidator(check)


def _attempts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise problem(f"{value!r} is not a whole number >= 0", "e.g. 3")
    return value


def _multiplier(value: Any) -> float:
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if not numeric or value < 1:
        raise problem(f"{value!r} is not a number >= 1", "e.g. 2")
    return float(value)


def _name(value: Any) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise problem(
            f"{value!r} is not a valid pipeline name",
            "use lower-case letters, digits and '_' only, e.g. clicks_per_minute",
        )
    return value


def predicate(value: Any) -> str | None:
    """A ``filter:`` (a Spark SQL predicate), or None."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise problem("must be a Spark SQL predicate", "e.g. amount > 0 AND url > ''")
    return value


def _qos(value: Any) -> int:
    if value not in (0, 1, 2) or isinstance(value, bool):
        raise problem(f"{value!r} is not a qos level", "use 0, 1 or 2")
    return int(value)


def _execution(value: Any) -> str | None:
    """Optional: ``cold`` (spark-submit) or ``warm`` (``sluice serve``); absent, the
    deployment's ``SLUICE_EXECUTION`` decides (docs/warm-execution.md)."""
    return None if value is None else _EXECUTION(value)


_EXECUTION = checked_text(
    EXECUTION_MODES, "(absent: the deployment's SLUICE_EXECUTION; docs/warm-execution.md)"
)
Text = Annotated[str, text()]
PipelineName = Annotated[str, BeforeValidator(_name)]
Predicate = Annotated[str | None, BeforeValidator(predicate)]
Qos = Annotated[int, BeforeValidator(_qos)]
Execution = Annotated[Literal["cold", "warm"] | None, BeforeValidator(_execution)]
Duration = Annotated[int, duration()]
PositiveDuration = Annotated[int, duration(positive=True)]
SignedDuration = Annotated[int, BeforeValidator(_signed_duration)]


# -- the section models -------------------------------------------------------------------------


class Section(BaseModel):
    """A frozen section of a spec: unknown fields refused (with the close one named),
    every problem collected."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def unknown(cls, key: str) -> tuple[str, str]:
        """(problem, fix) for a field the section does not take."""
        allowed = sorted(cls.model_fields)
        close = difflib.get_close_matches(key, allowed, n=1)
        return "unknown field", f"did you mean '{close[0]}'?" if close else f"allowed: {allowed}"

    @classmethod
    def required(cls, key: str) -> tuple[str, str]:
        """(problem, fix) for a required field left out (the fields of the sections default
        to None, and their validators say what a missing one needs)."""
        return "is required", "add it"


class EventTimeSection(Section):
    """``event_time:`` (the column is checked against the source schema by the pipeline)."""

    column: Text = Field(None, validate_default=True)
    max_out_of_orderness: Duration = 0
    allowed_lateness: Duration = 0
    # a partition whose newest event time is this far behind the newest of all partitions
    # stops holding the global watermark back (None: never)
    idle_timeout: Annotated[int | None, duration(positive=True, optional=True)] = None

    def spec(self) -> EventTimeSpec:
        return EventTimeSpec(
            self.column, self.max_out_of_orderness, self.allowed_lateness, self.idle_timeout
        )


class CheckpointSection(Section):
    """``checkpoint:``."""

    storage: Text = Field(None, validate_default=True)
    interval: PositiveDuration = 60_000_000
    timeout: PositiveDuration = 600_000_000
    retained: Annotated[int, _positive_int(10)] = 10
    # keyed state: a full base every this many deltas (sluice.state)
    compact_every: Annotated[int, _positive_int(10)] = 10

    def spec(self) -> CheckpointSpec:
        return CheckpointSpec(
            self.storage, self.interval, self.timeout, self.retained, self.compact_every
        )


class RestartSection(Section):
    """``restart:`` (Flink's exponential-delay strategy: :class:`RestartSpec`)."""

    attempts: Annotated[int, BeforeValidator(_attempts)] = 3
    delay: Duration = 10_000_000
    max_delay: Duration = 300_000_000
    multiplier: Annotated[float, BeforeValidator(_multiplier)] = 2.0

    @model_validator(mode="after")
    def _delays_in_order(self) -> Self:
        if self.max_delay < self.delay:
            raise several([("max_delay", "is shorter than restart.delay", "raise it, e.g. 5m")])
        return self

    def spec(self) -> RestartSpec:
        return RestartSpec(self.attempts, self.delay, self.max_delay, self.multiplier)


class S3Section(Section):
    """``s3:``: where to reach S3 (credentials never come from a spec)."""

    endpoint_url: str | None = None
    region: str | None = None

    def spec(self) -> S3Options:
        return S3Options(endpoint_url=self.endpoint_url, region=self.region)


# -- values checked against other sections ------------------------------------------------------
# Each appends what is wrong to ``found`` and returns the value to build the spec from.


def event_time(
    value: Any, field: str, schema: Mapping[str, str], found: list[SpecProblem]
) -> EventTimeSpec | None:
    """An ``event_time:`` section (at ``field``) whose column is a timestamp column of
    ``schema`` (when known)."""
    spec = None
    try:
        spec = EventTimeSection.model_validate(value).spec()
    except ValidationError as exc:
        found += spec_problems(exc, field, EventTimeSection)
    column = value.get("column") if isinstance(value, dict) else None
    named = isinstance(column, str) and column.strip() != ""  # else a problem of its own
    if named and schema and schema.get(str(column)) != "timestamp":
        found.append(
            SpecProblem(
                f"{field}.column",
                f"{column!r} is not a timestamp column of the schema",
                "name a schema column of type timestamp",
            )
        )
    return spec


def select(
    value: Any, schema: Mapping[str, str], found: list[SpecProblem]
) -> tuple[tuple[str, str], ...]:
    """Derived columns, (name, Spark SQL expression); none may shadow a ``schema`` column."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        found.append(
            SpecProblem(
                "select",
                f"expected a mapping of new column names to SQL expressions, got {kind(value)}",
                "e.g. {amount_eur: amount * 0.92, domain: parse_url(url, 'HOST')}",
            )
        )
        return ()
    result = []
    for column, expression in value.items():
        where = f"select.{column}"
        if not isinstance(column, str) or not COLUMN_RE.match(column):
            found.append(
                SpecProblem(where, "is not a valid column name", "use letters, digits and '_'")
            )
            continue
        if column in schema:
            found.append(SpecProblem(where, "clashes with a source column", "choose another name"))
        if not isinstance(expression, str | int | float) or not str(expression).strip():
            found.append(SpecProblem(where, "must be a Spark SQL expression", "e.g. amount * 0.92"))
            continue
        result.append((column, str(expression)))
    return tuple(result)


_LOOKUP_FIELDS = ("name", "table", "on", "columns", "how")
_LOOKUP_EXAMPLE = (
    "e.g. - {name: users, table: {type: files, path: data/users, format: parquet}, "
    "on: {user: user_id}, columns: {country: string}, how: left}"
)


def lookups(
    value: Any, columns: Mapping[str, str], found: list[SpecProblem]
) -> tuple[LookupSpec, ...]:
    """Lookup joins (docs/joins.md), each keyed on record ``columns`` (the source's,
    ``select``'s, an earlier lookup's), adding columns no record has yet."""
    if value is None:
        return ()
    if not isinstance(value, list):
        found.append(
            SpecProblem("lookup", f"expected a list of lookups, got {kind(value)}", _LOOKUP_EXAMPLE)
        )
        return ()
    known, names, result = dict(columns), set(), []
    for i, item in enumerate(value):
        where = f"lookup[{i}]"
        before = len(found)
        if not isinstance(item, dict):
            found.append(
                SpecProblem(where, f"expected a mapping, got {kind(item)}", _LOOKUP_EXAMPLE)
            )
            continue
        for key in item:
            if key not in _LOOKUP_FIELDS:
                close = difflib.get_close_matches(str(key), _LOOKUP_FIELDS, n=1)
                fix = f"did you mean {close[0]!r}?" if close else f"fields: {list(_LOOKUP_FIELDS)}"
                found.append(SpecProblem(f"{where}.{key}", "is not a lookup field", fix))
        name = item.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            problem = "is required: a name for the table" if name is None else "is not a name"
            found.append(
                SpecProblem(
                    f"{where}.name", problem, "lower-case letters, digits and '_', e.g. users"
                )
            )
        elif name in names:
            found.append(
                SpecProblem(
                    f"{where}.name", f"{name!r} names another lookup too", "name each lookup apart"
                )
            )
        names.add(name)
        path, form, table_type, db = _lookup_table(item.get("table"), f"{where}.table", found)
        on = _lookup_on(item.get("on"), known, f"{where}.on", found)
        added = _lookup_columns(item.get("columns"), known, f"{where}.columns", found)
        how = item.get("how", "left")
        if how not in LOOKUP_JOINS:
            found.append(
                SpecProblem(
                    f"{where}.how",
                    f"{how!r} is not a lookup join",
                    f"use one of {list(LOOKUP_JOINS)}",
                )
            )
        known.update(added)
        if len(found) == before:
            result.append(
                LookupSpec(str(name), path, on, tuple(added.items()), how, form, table_type, *db)
            )
    return tuple(result)


_PART = r"[A-Za-z_][A-Za-z0-9_]*"
# a database table name, and its example, by table type
_TABLE_NAMES = {
    "postgres": (re.compile(rf"^{_PART}(\.{_PART})?\Z"), "[schema.]table, e.g. public.users"),
    "iceberg": (
        re.compile(rf"^{_PART}(\.{_PART})*\.{_PART}\Z"),
        "namespace.table, e.g. lake.users",
    ),
}


def _lookup_table(
    value: Any, where: str, found: list[SpecProblem]
) -> tuple[str, Any, Any, tuple[str | None, str | None]]:
    from sluice.storage import storage_uri_problem

    example = "e.g. {type: files, path: data/users, format: parquet} or {type: delta, path: ...}"
    if not isinstance(value, dict):
        found.append(SpecProblem(where, "is required: the table to look up in", example))
        return "", "parquet", "files", (None, None)
    table_type = value.get("type", "files")
    fields = LOOKUP_TABLES.get(table_type, ("type", "path", "format"))
    for key in value:
        if key not in fields:
            fix = f"fields: {list(fields)}"
            if key == "format" and table_type == "delta":
                fix = "a delta table's files are Parquet: remove format"
            found.append(SpecProblem(f"{where}.{key}", "is not a field of this table type", fix))
    if table_type not in LOOKUP_TABLES:
        found.append(
            SpecProblem(
                f"{where}.type",
                f"{table_type!r} is not a lookup table type",
                "use files (a folder of Parquet files), delta (a Delta Lake table's path), "
                "postgres (a table a connection reaches) or iceberg (a table of a catalog)",
            )
        )
    if table_type in _TABLE_NAMES:
        return "", "parquet", table_type, _database_table(value, table_type, where, found)
    path = value.get("path")
    problem = storage_uri_problem(path) if isinstance(path, str) and path.strip() else "is required"
    if problem is not None:
        found.append(SpecProblem(f"{where}.path", problem, "a folder or s3://bucket/prefix"))
    form = value.get("format", "parquet")
    if form not in LOOKUP_FORMATS:
        found.append(
            SpecProblem(
                f"{where}.format",
                f"{form!r} is not a lookup table format",
                f"use one of {list(LOOKUP_FORMATS)}",
            )
        )
    return str(path or ""), form, table_type, (None, None)


def _database_table(
    value: dict[str, Any], table_type: str, where: str, found: list[SpecProblem]
) -> tuple[str | None, str | None]:
    connection, table = value.get("connection"), value.get("table")
    pattern, example = _TABLE_NAMES[table_type]
    if not isinstance(connection, str) or not NAME_RE.match(connection.lower()):
        problem = "is required" if connection is None else f"{connection!r} is not a connection id"
        found.append(
            SpecProblem(
                f"{where}.connection",
                problem,
                "a connection id whose URI is the database (postgres) or catalog (iceberg), "
                "e.g. app_db",
            )
        )
    if not isinstance(table, str) or not pattern.match(table):
        problem = "is required" if table is None else f"{table!r} is not a table name"
        found.append(SpecProblem(f"{where}.table", problem, example))
    return (
        connection.lower() if isinstance(connection, str) else None,
        table if isinstance(table, str) else None,
    )


def _lookup_on(
    value: Any, known: Mapping[str, str], where: str, found: list[SpecProblem]
) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not value:
        found.append(
            SpecProblem(where, "is required: record column -> table column", "e.g. {user: user_id}")
        )
        return ()
    pairs = []
    for column, table_column in value.items():
        if known and column not in known:
            close = difflib.get_close_matches(str(column), list(known), n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"columns: {list(known)}"
            found.append(SpecProblem(f"{where}.{column}", "is not a record column", fix))
        if not isinstance(table_column, str) or not COLUMN_RE.match(table_column):
            found.append(
                SpecProblem(f"{where}.{column}", "must name a column of the table", "e.g. user_id")
            )
            continue
        pairs.append((str(column), table_column))
    return tuple(pairs)


def _lookup_columns(
    value: Any, known: Mapping[str, str], where: str, found: list[SpecProblem]
) -> dict[str, str]:
    if not isinstance(value, dict) or not value:
        found.append(
            SpecProblem(
                where,
                "is required: the table columns each record gets",
                f"e.g. {{country: string}}; types: {list(SCHEMA_TYPES)}",
            )
        )
        return {}
    added = {}
    for column, kind_ in value.items():
        if not isinstance(column, str) or not COLUMN_RE.match(column):
            found.append(
                SpecProblem(
                    f"{where}.{column}", "is not a valid column name", "use letters, digits and '_'"
                )
            )
            continue
        if column in known:
            found.append(
                SpecProblem(
                    f"{where}.{column}",
                    "clashes with a record column",
                    "a lookup adds columns no record has yet",
                )
            )
        if kind_ not in SCHEMA_TYPES:
            found.append(
                SpecProblem(
                    f"{where}.{column}",
                    f"unknown type {kind_!r}",
                    f"use one of {list(SCHEMA_TYPES)}",
                )
            )
            continue
        added[column] = str(kind_)
    return added


def key_by(value: Any, columns: Mapping[str, str], found: list[SpecProblem]) -> tuple[str, ...]:
    """The key columns, each among ``columns`` (when known)."""
    if value is None:
        return ()
    keys = [value] if isinstance(value, str) else value
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        found.append(
            SpecProblem("key_by", f"{value!r} is not a list of column names", "e.g. [user]")
        )
        return ()
    for key in keys:
        if columns and key not in columns:
            found.append(
                SpecProblem(
                    "key_by", f"{key!r} is not a schema column", f"use one of {list(columns)}"
                )
            )
    if len(set(keys)) != len(keys):
        found.append(SpecProblem("key_by", "names a column twice", "list each key column once"))
    return tuple(keys)


def aggregates(
    value: Any, columns: Mapping[str, str], found: list[SpecProblem]
) -> tuple[AggregateSpec, ...]:
    """``name: func(column)`` each, of ``columns`` (their types; ``derived`` for a select
    column)."""
    if not isinstance(value, dict) or not value:
        found.append(
            SpecProblem(
                "aggregates",
                "must map output names to expressions",
                "e.g. {clicks: count(*), total: sum(amount)}",
            )
        )
        return ()
    result = []
    for output, expression in value.items():
        agg = _aggregate(str(output), expression, columns, found.append)
        if agg:
            result.append(agg)
    return tuple(result)


def _aggregate(
    name: str, expression: Any, schema: Mapping[str, str], add: Callable[[SpecProblem], None]
) -> AggregateSpec | None:
    where = f"aggregates.{name}"
    if not NAME_RE.match(name) and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", name):
        add(SpecProblem(where, "is not a valid column name", "use letters, digits and '_'"))
    match = _AGG_RE.match(str(expression))
    if not match or match.group(1) not in AGGREGATE_FUNCTIONS:
        add(
            SpecProblem(
                where,
                f"{expression!r} is not a supported aggregate",
                f"write func(column) with func in {list(AGGREGATE_FUNCTIONS)}, or count(*)",
            )
        )
        return None
    func, column = match.group(1), match.group(2)
    if column == "*":
        if func != "count":
            add(SpecProblem(where, f"{func}(*) is not defined", "name a column, e.g. sum(amount)"))
        return AggregateSpec(name, func, None)
    if schema and column not in schema:
        add(SpecProblem(where, f"{column!r} is not a schema column", f"use one of {list(schema)}"))
    elif func in ("sum", "avg") and schema.get(column, "derived") not in (
        *NUMERIC_TYPES,
        "derived",
    ):
        add(
            SpecProblem(
                where,
                f"{func} needs a numeric column; {column!r} is {schema[column]}",
                f"use a column of type {list(NUMERIC_TYPES)}",
            )
        )
    elif func in ("min", "max") and schema and schema[column] == "boolean":
        add(SpecProblem(where, f"{func} of a boolean column is not supported", "use count"))
    if name in schema or name in _RESERVED_OUTPUT:
        add(
            SpecProblem(where, "clashes with an input or window column name", "choose another name")
        )
    return AggregateSpec(name, func, column)


def output(
    value: Any, columns: list[str], stateless: bool, found: list[SpecProblem]
) -> tuple[str, ...]:
    """A stateless pipeline's ``output:``: some of the source and ``select`` columns, in
    the order written (``columns``: those available; empty when the source is invalid)."""
    if value is None:
        return ()
    if not stateless:
        found.append(
            SpecProblem(
                "output",
                "only applies to a stateless pipeline (no window, no process)",
                "remove it: windows emit keys, window bounds "
                "and aggregates; a process function declares "
                "process.output",
            )
        )
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        found.append(
            SpecProblem(
                "output",
                f"{value!r} is not a list of column names",
                f"e.g. {columns[:2] or ['user', 'ts']}",
            )
        )
        return ()
    for i, column in enumerate(names):
        if columns and column not in columns:
            found.append(
                SpecProblem(
                    f"output[{i}]",
                    f"{column!r} is not a source or select column",
                    f"use some of {columns}",
                )
            )
    for dup in sorted({n for n in names if names.count(n) > 1}):
        found.append(SpecProblem("output", f"names {dup!r} twice", "list each column once"))
    return tuple(names)
