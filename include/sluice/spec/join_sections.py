"""A join pipeline's sections (docs/joins.md): ``sources``, the per-source ``event_time`` and
``filter``, ``join`` and ``output`` — checked as :mod:`sluice.spec.sections` checks the others."""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BeforeValidator,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sluice.spec.components.base import SourceConfig, WindowConfig, problem, several
from sluice.spec.components.windows import HoppingWindow, TumblingWindow
from sluice.spec.exceptions import SpecProblem
from sluice.spec.model import (
    JOIN_HOWS,
    JOIN_TYPES,
    EventTimeSpec,
    JoinSide,
    JoinSpec,
)
from sluice.spec.problems import at, spec_problems
from sluice.spec.registry import SOURCES, WINDOWS
from sluice.spec.sections import (
    COLUMN_RE,
    Section,
    SignedDuration,
    checked_duration,
    event_time,
    kind,
    text,
)

__all__ = [
    "IntervalSection",
    "JoinSection",
    "join_output",
    "join_sources",
    "not_a_source",
    "side_event_times",
    "side_filters",
]

# -- a join pipeline's sections (docs/joins.md) -------------------------------------------------
# ``sources`` below: each source's columns and their types, by name (empty: not a valid
# source, so its columns are unknown). A check skips what it cannot know.

_SOURCE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*\Z")  # it prefixes the source's columns in SQL
_SOURCES_EXAMPLE = (
    "e.g. {persons: {type: nexmark, events: person}, "
    "auctions: {type: files, path: data/auctions, format: jsonl, schema: {...}}}"
)
_OUTPUT_EXAMPLE = "e.g. {person: persons.id, name: persons.name, auction: auctions.id}"
_JOIN_WINDOWS = ("tumbling", "hopping")
_WINDOW_BOUNDS = ("window_start", "window_end")  # a window join's result columns
_A_JOIN = {"window": "a window join", "interval": "an interval join", "regular": "a regular join"}
# the words of a Spark SQL expression, past comments, string literals, back-quoted names and
# numbers: a dotted chain, its first two words in groups 1 and 2 (``persons.id``)
_CHAIN = re.compile(
    r"""--[^\n]*
      | /\*.*?(?:\*/|\Z)
      | '(?:\\.|[^'\\])*(?:'|\Z)
      | "(?:\\.|[^"\\])*(?:"|\Z)
      | `(?:``|[^`])*(?:`|\Z)
      | \d[\w.]*
      | ([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?(?:\.\w+)*
    """,
    re.VERBOSE | re.DOTALL,
)


def not_a_source(field: str, name: Any, names: Collection[str]) -> SpecProblem:
    """``field`` names ``name``, which is none of the sources ``names``."""
    close = difflib.get_close_matches(str(name), list(names), n=1)
    fix = f"did you mean {close[0]!r}?" if close else f"name one of the sources: {list(names)}"
    return SpecProblem(field, f"{name!r} is not a source of sources:", fix)


def _per_source(names: Collection[str], entry: str) -> str:
    """An example of a section with an entry per source."""
    shown = list(names) or ["persons", "auctions"]
    return "e.g. {" + ", ".join(f"{name}: {entry}" for name in shown) + "}"


def join_sources(value: Any, found: list[SpecProblem]) -> dict[str, SourceConfig | None]:
    """``sources:``: a join's two sources, by name, each validated as ``source:`` is (None:
    not valid; its name is still known)."""
    if not isinstance(value, dict) or not value:
        got = "an empty mapping" if value == {} else kind(value)
        found.append(
            SpecProblem(
                "sources",
                f"expected a mapping of source names to sources, got {got}",
                _SOURCES_EXAMPLE,
            )
        )
        return {}
    if len(value) != 2:
        found.append(
            SpecProblem(
                "sources",
                f"names {len(value)} source{'s' if len(value) != 1 else ''}; a join reads two",
                "name exactly two: the join's left and right sides",
            )
        )
    sources: dict[str, SourceConfig | None] = {}
    for name, item in value.items():
        where = f"sources.{name}"
        if not isinstance(name, str) or not _SOURCE_NAME_RE.match(name):
            fix = "lower-case letters, digits and '_', starting with a letter, e.g. persons"
            found.append(SpecProblem(where, "is not a source name", fix))
            continue
        source, problems = SOURCES.validate(item, where)
        found += problems
        sources[name] = source
    return sources


def side_event_times(
    value: Any, sources: Mapping[str, Mapping[str, str]], found: list[SpecProblem]
) -> dict[str, EventTimeSpec]:
    """A join pipeline's ``event_time:``: one section per source, by name, checked as
    ``event_time:`` is against that source's columns; no ``allowed_lateness`` (joins do not
    take it yet)."""
    example = _per_source(sources, "{column: date_time, max_out_of_orderness: 5s}")
    if not isinstance(value, dict) or not value or ("column" in value and "column" not in sources):
        if value is None:
            problem_ = "is required: each source's event time"
        elif isinstance(value, dict) and value:
            problem_ = "gives one event time; a join pipeline gives one per source"
        else:
            problem_ = f"expected a mapping of each source to its event time, got {kind(value)}"
        found.append(SpecProblem("event_time", problem_, example))
        return {}
    found += [not_a_source(f"event_time.{n}", n, sources) for n in value if n not in sources]
    times = {}
    for name in sources or value:  # the sources unknown: each entry written
        where = f"event_time.{name}"
        item = value.get(name)
        if item is None:
            fix = f"source {name}'s event time, e.g. {{column: ts, max_out_of_orderness: 5s}}"
            found.append(SpecProblem(where, "is required", fix))
            continue
        if isinstance(item, dict) and "allowed_lateness" in item:
            found.append(
                SpecProblem(
                    f"{where}.allowed_lateness",
                    "is not supported by joins yet",
                    "remove it; to wait longer for late rows, raise max_out_of_orderness",
                )
            )
            item = {k: v for k, v in item.items() if k != "allowed_lateness"}
        spec = event_time(item, where, sources.get(name, {}), found)
        if spec is not None:
            times[str(name)] = spec
    return times


def side_filters(value: Any, names: Collection[str], found: list[SpecProblem]) -> dict[str, str]:
    """A join pipeline's ``filter:``: a Spark SQL predicate per source (of the source
    ``names``), applied to its rows before the join."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        fix = _per_source(list(names)[:1], "\"state IN ('OR', 'CA')\"")
        found.append(SpecProblem("filter", "in a join pipeline, maps sources to predicates", fix))
        return {}
    filters = {}
    for name, predicate_ in value.items():
        where = f"filter.{name}"
        if names and name not in names:
            found.append(not_a_source(where, name, names))
        elif not isinstance(predicate_, str) or not predicate_.strip():
            fix = "over that source's columns, e.g. amount > 0"
            found.append(SpecProblem(where, "must be a Spark SQL predicate", fix))
        else:
            filters[str(name)] = predicate_
    return filters


def _join_side(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        problem_ = "is required" if value is None else f"{value!r} is not a source name"
        raise problem(problem_, "name one of sources:, e.g. persons")
    return value


def _join_on(value: Any) -> Any:
    fix = "e.g. {id: seller}: a left row's id equals a right row's seller"
    if not isinstance(value, dict) or not value:
        raise problem("is required: left column -> right column", fix)
    found = [
        (str(column), "must name a column of the right source", fix)
        for column, other in value.items()
        if not isinstance(other, str) or not other.strip()
    ]
    if found:
        raise several(found)
    return tuple((str(column), other) for column, other in value.items())


def _for_type(value: Any, info: ValidationInfo, kind_: str, example: str) -> bool:
    """Whether a setting of joins of type ``kind_`` is written: required (``example``) for
    that type, refused beside another."""
    written = info.data.get("type")  # None: not valid (a problem of its own)
    if value is None:
        if written == kind_:
            raise problem(f"is required for {_A_JOIN[kind_]}", f"e.g. {example}")
        return False
    if written is not None and written != kind_:
        fix = f"remove it, or make the join type: {kind_}"
        raise problem(f"does not apply to {_A_JOIN[written]}", fix)
    return True


class IntervalSection(Section):
    """``join.interval:`` of an interval join: a right row matches a left one whose event time
    is within ``[left + lower, left + upper]`` (``lower: -5s``: up to 5 s before it)."""

    lower: SignedDuration = Field(None, validate_default=True)
    upper: SignedDuration = Field(None, validate_default=True)

    @model_validator(mode="after")
    def _in_order(self) -> Self:
        if self.lower > self.upper:
            fix = "make lower <= upper, e.g. {lower: -5s, upper: 10s}"
            raise several([("lower", "is after join.interval.upper", fix)])
        return self


class JoinSection(Section):
    """``join:`` as written: a window join takes ``window``, an interval join ``interval``, a
    regular join ``ttl`` (each refused beside another type). Its sides and ``on`` columns are
    checked against ``sources:`` by :func:`~sluice.spec.rules.join_sides`."""

    type: Annotated[Literal["window", "interval", "regular"], text(JOIN_TYPES)] = Field(
        None, validate_default=True
    )
    left: Annotated[str, BeforeValidator(_join_side)] = Field(None, validate_default=True)
    right: Annotated[str, BeforeValidator(_join_side)] = Field(None, validate_default=True)
    on: Annotated[tuple[tuple[str, str], ...], BeforeValidator(_join_on)] = Field(
        None, validate_default=True
    )
    how: Annotated[Literal["inner", "left"], text(JOIN_HOWS)] = "inner"
    window: WindowConfig | None = Field(None, validate_default=True)
    interval: IntervalSection | None = Field(None, validate_default=True)
    ttl: int | None = Field(None, validate_default=True)

    @field_validator("window", mode="plain")
    @classmethod
    def _window(cls, value: Any, info: ValidationInfo) -> WindowConfig | None:
        """Tumbling or hopping: two rows match in each window that holds both."""
        if not _for_type(value, info, "window", "{type: tumbling, size: 10s}"):
            return None
        window, problems = WINDOWS.validate(value, "join.window")
        if window is None:
            raise at(problems)
        if window.type not in _JOIN_WINDOWS:
            fix = f"use one of {list(_JOIN_WINDOWS)}"
            raise at([SpecProblem("join.window.type", f"{window.type} windows do not join", fix)])
        return window

    @field_validator("interval", mode="plain")
    @classmethod
    def _interval(cls, value: Any, info: ValidationInfo) -> IntervalSection | None:
        example = "{lower: -5s, upper: 10s}: a right row from 5 s before a left row to 10 s after"
        if not _for_type(value, info, "interval", example):
            return None
        try:
            return IntervalSection.model_validate(value)
        except ValidationError as exc:
            raise at(spec_problems(exc, "join.interval", IntervalSection)) from exc

    @field_validator("ttl", mode="plain")
    @classmethod
    def _ttl(cls, value: Any, info: ValidationInfo) -> int | None:
        """How long a row of a regular join is kept for matches (a later match is missed)."""
        if not _for_type(value, info, "regular", "1h: rows wait that long for a match"):
            return None
        return checked_duration(positive=True)(value)

    def spec(self, sides: Mapping[str, JoinSide], output: tuple[tuple[str, str], ...]) -> JoinSpec:
        """The join of ``sides`` (each source's, by name) writing ``output``."""
        interval = self.interval
        window = self.window
        assert window is None or isinstance(window, TumblingWindow | HoppingWindow)  # checked
        return JoinSpec(
            type=self.type,
            left=sides[self.left],
            right=sides[self.right],
            on=self.on,
            output=output,
            how=self.how,
            window=window,
            lower_us=interval.lower if interval is not None else None,
            upper_us=interval.upper if interval is not None else None,
            ttl_us=self.ttl,
        )


def join_output(
    value: Any,
    sources: Mapping[str, Mapping[str, str]],
    join_type: str | None,
    found: list[SpecProblem],
) -> dict[str, str]:
    """A join pipeline's ``output:``: each result column as a Spark SQL expression over
    ``<source>.<column>`` (and ``window_start`` / ``window_end`` of a window join, whose
    ``join_type`` is None when unknown)."""
    if value is None:
        found.append(SpecProblem("output", "is required in a join pipeline", _OUTPUT_EXAMPLE))
        return {}
    if not isinstance(value, dict) or not value:
        problem_ = "must map result columns to Spark SQL expressions"
        found.append(SpecProblem("output", problem_, _OUTPUT_EXAMPLE))
        return {}
    columns = {}
    for column, expression in value.items():
        where = f"output.{column}"
        if not isinstance(column, str) or not COLUMN_RE.match(column):
            found.append(
                SpecProblem(where, "is not a valid column name", "use letters, digits and '_'")
            )
            continue
        sql = isinstance(expression, str | int | float) and not isinstance(expression, bool)
        if not sql or not str(expression).strip():
            found.append(SpecProblem(where, "must be a Spark SQL expression", _OUTPUT_EXAMPLE))
            continue
        for problem_, fix in _side_references(str(expression), sources, join_type):
            found.append(SpecProblem(where, problem_, fix))
        columns[column] = str(expression)
    return columns


def _side_references(
    expression: str, sources: Mapping[str, Mapping[str, str]], join_type: str | None
) -> list[tuple[str, str]]:
    """(problem, fix) for each name of ``expression`` no row of the join has, found from the
    text (a light check, without Spark; names compared as Spark does, case-insensitively):
    ``<source>.<column>`` where the source has no such column, ``<word>.<word>`` whose first
    word is neither a source nor a column (``address.city`` reads a struct column's field), a
    window bound outside a window join."""
    if not sources or not all(sources.values()):  # some columns unknown
        return []
    found: dict[tuple[str, str], None] = {}  # in order, once each
    for match in _CHAIN.finditer(expression):
        first, second = match.group(1), match.group(2)
        if first is not None:
            found.update(dict.fromkeys(_reference(first, second, sources, join_type)))
    return list(found)


def _reference(
    first: str,
    second: str | None,
    sources: Mapping[str, Mapping[str, str]],
    join_type: str | None,
) -> list[tuple[str, str]]:
    names = {name.casefold(): name for name in sources}
    columns = {c.casefold() for schema in sources.values() for c in schema}
    source = names.get(first.casefold())
    if source is not None and second is not None:
        if second.casefold() in {c.casefold() for c in sources[source]}:
            return []
        return [
            (
                f"{second!r} is not a column of source {source}",
                f"use one of {list(sources[source])}",
            )
        ]
    if first.casefold() in columns or source is not None:
        return []
    if second is not None:
        return [(f"unknown source {first}", f"prefix a column with a source: {list(sources)}")]
    if first.casefold() in _WINDOW_BOUNDS and join_type not in (None, "window"):
        return [
            (
                f"{first} is a column of window joins only",
                "remove it, or make the join type: window",
            )
        ]
    return []
