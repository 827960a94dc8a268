"""Pydantic's validation errors as :class:`SpecProblem`: today's dotted field names
(``source.schema.ts``, ``sinks[0].path``), the problem, and the fix ("did you mean" included)."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from sluice.spec.components.base import PROBLEM
from sluice.spec.exceptions import SpecProblem

__all__ = ["AT", "Described", "at", "join", "spec_problems"]

# the pydantic error type of problems that already name their whole field (``sinks.out.path``
# found while validating ``dead_letters``): a rule across sections reports where it looks
AT = "sluice_at"


class Described(Protocol):
    """A model whose missing and unknown fields have spec messages (components, sections)."""

    @classmethod
    def required(cls, key: str) -> tuple[str, str]: ...

    @classmethod
    def unknown(cls, key: str) -> tuple[str, str]: ...


def at(found: list[SpecProblem]) -> PydanticCustomError:
    """A validation error carrying ``found``, each problem at its own (whole) field."""
    return PydanticCustomError(AT, "{problem}", {"problem": found[0].problem, "found": found})


def join(*parts: Any) -> str:
    """``("sinks[0]", "schema", "ts")`` -> ``sinks[0].schema.ts``; ints become ``[i]``."""
    text = ""
    for part in parts:
        if part in ("", None):
            continue
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text and not str(part).startswith("[") else str(part)
    return text


def spec_problems(
    exc: ValidationError,
    field: str,
    cls: type[Described],
    *,
    tagged: bool = False,
    unknown_first: bool = False,
) -> list[SpecProblem]:
    """Every error of ``exc`` (validating a ``cls`` at ``field``); ``tagged``: the locations
    start with a union tag, dropped; ``unknown_first``: fields ``cls`` does not take before
    the other problems (the whole spec's sections, as a reader fixes them first)."""
    found: list[SpecProblem] = []
    errors = exc.errors()
    if unknown_first:
        # a misspelt ``windw:`` explains the ``window`` found missing; pydantic reports
        # unknown fields last
        errors = sorted(errors, key=lambda e: not (e["type"] == "extra_forbidden"
                                                   and len(e["loc"]) == 1))  # fmt: skip
    for error in errors:
        loc = tuple(error["loc"][1:] if tagged else error["loc"])
        found += _convert(error, field, loc, cls)
    return found


def _nested(cls: type[Described], path: tuple[Any, ...]) -> type[Described] | None:
    """The config class at ``path`` inside ``cls`` (``cls`` itself for an empty path), when
    each step is a field holding one (None: a list, a mapping, a plain value)."""
    import typing

    current: Any = cls
    for part in path:
        fields = getattr(current, "model_fields", None)
        if not isinstance(part, str) or fields is None or part not in fields:
            return None
        candidates = [fields[part].annotation]
        found = None
        while candidates:
            kind = candidates.pop()
            if isinstance(kind, type) and hasattr(kind, "required") and hasattr(kind, "unknown"):
                found = kind
                break
            candidates += list(typing.get_args(kind))
        if found is None:
            return None
        current = found
    return current if hasattr(current, "required") else None


def _convert(
    error: Any, field: str, loc: tuple[Any, ...], cls: type[Described]
) -> list[SpecProblem]:
    where = join(field, *loc)
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == AT:
        return list(ctx["found"])
    if kind == PROBLEM and ctx.get("problems"):
        return [SpecProblem(join(where, sub) if not sub.startswith("[") else where + sub, p, f)
                for sub, p, f in ctx["problems"]]  # fmt: skip
    if kind == PROBLEM:
        return [SpecProblem(where, ctx["problem"], ctx.get("fix", ""))]
    key = str(loc[-1]) if loc else ""
    owner = _nested(cls, loc[:-1])  # a field of a config inside the config (layout.lookback)
    if kind == "missing" and owner is not None:
        return [SpecProblem(where, *owner.required(key))]
    if kind == "extra_forbidden" and owner is not None:
        return [SpecProblem(where, *owner.unknown(key))]
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        got = "nothing" if error["input"] is None else type(error["input"]).__name__
        return [SpecProblem(where, f"expected a mapping, got {got}", "see README 'Spec'")]
    message = error["msg"][0].lower() + error["msg"][1:]
    return [SpecProblem(where, f"{error['input']!r} is not valid: {message}", "see README 'Spec'")]
