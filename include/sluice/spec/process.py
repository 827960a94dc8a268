"""The ``process:`` section: a keyed process function, its declared state and its output.

```yaml
process:
  function: count_window_average:flat_map    # module:function, or a registered name
  on_timer: sessions:on_timer                # optional: called for each timer that fires
  state:
    sum: {kind: value, type: "struct<count: long, sum: long>"}
    seen: {kind: map, key_type: string, type: long, ttl: 1h}
    total: {kind: reducing, type: double, reduce: functions:add}
    events: {kind: list, type: long}
  output: {key: long, average: long}
```

Validated (:class:`ProcessSection`) without importing anything: names, kinds, types and TTLs;
the functions are resolved when a run starts (``sluice validate`` does that too).
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from sluice.spec.exceptions import SpecProblem
from sluice.spec.model import STATE_KINDS, ProcessSpec, StateSpec
from sluice.spec.problems import at, spec_problems
from sluice.spec.sections import Section, duration, text
from sluice.spec.types import InvalidType, parse_type

__all__ = ["FUNCTION_RE", "ProcessSection", "StateSection"]

FUNCTION_RE = re.compile(r"^[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?$")
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
RESERVED_OUTPUT = ("_op", "_epoch")
_TYPE_EXAMPLE = "e.g. long, string, array<double>, struct<count: long, sum: long>"


def _function(value: Any, where: str, *, required: bool) -> SpecProblem | None:
    """What is wrong with a function reference at ``where`` (None: nothing)."""
    if value is None:
        if required:
            return SpecProblem(where, "is required", "name a Python function: module:function")
        return None
    if not isinstance(value, str) or not FUNCTION_RE.match(value):
        return SpecProblem(
            where,
            f"{value!r} is not a function reference",
            "write module:function (the module next to the spec or importable), "
            "or the name a function was registered under",
        )
    return None


def _type(value: Any, where: str) -> str | SpecProblem:
    """The canonical form of the type at ``where``, or what is wrong with it."""
    if not isinstance(value, str):
        return SpecProblem(
            where, "is required" if value is None else f"{value!r} is not a type", _TYPE_EXAMPLE
        )
    try:
        return parse_type(value)
    except InvalidType as exc:
        return SpecProblem(
            where, str(exc), "write a Spark type, e.g. struct<count: long, sum: long>"
        )


def _where(info: ValidationInfo) -> str:
    """The field being validated, whole (``process.state.sum.type``); the models pass their
    own place as the validation context."""
    return f"{(info.context or {}).get('at', 'process')}.{info.field_name}"


def _raise(found: SpecProblem | None) -> None:
    if found is not None:
        raise at([found])


def _typed(value: Any, where: str) -> str:
    """The canonical Spark type ``value`` names, else its problem raised."""
    canonical = _type(value, where)
    if isinstance(canonical, SpecProblem):
        raise at([canonical])
    return canonical


def _applies(wanted: str, value: Any, info: ValidationInfo) -> bool:
    """Whether a setting of ``wanted`` state applies to this state's kind; set for another
    kind, it is refused."""
    kind = info.data.get("kind")
    if kind == wanted:
        return True
    if value is not None and kind is not None:
        raise at([SpecProblem(_where(info), f"does not apply to {kind} state", "remove it")])
    return False


class StateSection(Section):
    """One declared piece of keyed state (``process.state.<name>``); what applies depends
    on its kind."""

    kind: Annotated[Literal["value", "list", "reducing", "map"], text(STATE_KINDS)] = Field(
        None, validate_default=True
    )
    type: str = Field(None, validate_default=True)
    key_type: str | None = Field(None, validate_default=True)
    reduce: str | None = Field(None, validate_default=True)
    ttl: Annotated[int | None, duration(positive=True, optional=True)] = None

    @field_validator("type", mode="plain")
    @classmethod
    def _element(cls, value: Any, info: ValidationInfo) -> str:
        return _typed(value, _where(info))

    @field_validator("key_type", mode="plain")
    @classmethod
    def _key_type(cls, value: Any, info: ValidationInfo) -> str | None:
        if not _applies("map", value, info):
            return None
        where = _where(info)
        canonical = _typed(value, where)
        if canonical[:5] in ("array", "map<", "struc"):
            raise at([SpecProblem(where, "map keys must be a simple type", "e.g. string")])
        return canonical

    @field_validator("reduce", mode="plain")
    @classmethod
    def _reduce(cls, value: Any, info: ValidationInfo) -> str | None:
        if not _applies("reducing", value, info):
            return None
        _raise(_function(value, _where(info), required=True))
        return str(value)

    def spec(self, name: str) -> StateSpec:
        return StateSpec(name, self.kind, self.type, self.key_type, self.reduce, self.ttl)


class ProcessSection(Section):
    """``process:``: the function, its state and its output columns."""

    function: str = Field(None, validate_default=True)
    on_timer: str | None = None
    state: tuple[StateSpec, ...] = ()
    output: tuple[tuple[str, str], ...] = Field(None, validate_default=True)

    @field_validator("function", "on_timer", mode="plain")
    @classmethod
    def _functions(cls, value: Any, info: ValidationInfo) -> str | None:
        _raise(_function(value, _where(info), required=info.field_name == "function"))
        return value

    @field_validator("state", mode="plain")
    @classmethod
    def _states(cls, value: Any) -> tuple[StateSpec, ...]:
        if value is None:
            return ()
        if not isinstance(value, dict):
            raise at(
                [
                    SpecProblem(
                        "process.state",
                        "must map state names to declarations",
                        "e.g. {sum: {kind: value, type: long}}",
                    )
                ]
            )
        found: list[SpecProblem] = []
        states = []
        for name, decl in value.items():
            where = f"process.state.{name}"
            if not isinstance(name, str) or not _NAME_RE.match(name):
                found.append(
                    SpecProblem(where, "is not a valid state name", "use letters, digits and '_'")
                )
                continue
            try:
                section = StateSection.model_validate(decl, context={"at": where})
            except ValidationError as exc:
                found += spec_problems(exc, where, StateSection)
                continue
            states.append(section.spec(name))
        if found:
            raise at(found)
        return tuple(states)

    @field_validator("output", mode="plain")
    @classmethod
    def _output(cls, value: Any) -> tuple[tuple[str, str], ...]:
        if not isinstance(value, dict) or not value:
            raise at(
                [
                    SpecProblem(
                        "process.output",
                        "must map each output column to a type",
                        "e.g. {key: long, average: double}",
                    )
                ]
            )
        found: list[SpecProblem] = []
        columns = []
        for name, kind in value.items():
            where = f"process.output.{name}"
            if not isinstance(name, str) or not _NAME_RE.match(name) or name in RESERVED_OUTPUT:
                found.append(
                    SpecProblem(
                        where,
                        "is not a valid output column name",
                        "use letters, digits and '_', not starting with '_'",
                    )
                )
                continue
            canonical = _type(kind, where)
            if isinstance(canonical, SpecProblem):
                found.append(canonical)
            else:
                columns.append((name, canonical))
        if found:
            raise at(found)
        return tuple(columns)

    def spec(self, origin: str) -> ProcessSpec:
        """The process spec of a spec read from ``origin`` (``module:function`` is looked up
        next to it)."""
        base = os.path.dirname(os.path.abspath(origin)) if origin != "<memory>" else None
        return ProcessSpec(self.function, self.state, self.output, self.on_timer, base)
