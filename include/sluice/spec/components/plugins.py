"""``type: module:Class``: a source or sink class of your own (docs/extending.md).

The spec names the class and hands it ``options`` (JSON values); nothing is imported while
the spec loads: the class is looked up (next to the spec first, as process functions are)
when a run builds it, and whatever its constructor raises names the field.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BeforeValidator, Field

from sluice.spec.components.base import (
    ComponentConfig,
    Schema,
    SinkConfig,
    SourceConfig,
    problem,
    several,
)

if TYPE_CHECKING:
    pass

__all__ = ["PLUGIN_HINT", "PluginSinkConfig", "PluginSourceConfig", "names_class"]

CLASS_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*\Z")
PLUGIN_HINT = "or a class of your own, module:Class (docs/extending.md)"
Options = tuple[tuple[str, Any], ...]


def names_class(value: Any) -> bool:
    """A ``type`` with a colon means a class reference."""
    return isinstance(value, str) and ":" in value


def _reference(value: Any) -> Any:
    if not isinstance(value, str) or not CLASS_RE.match(value):
        raise problem(
            f"{value!r} is not a class reference",
            "write module:Class, e.g. mypkg.sources:MySource (docs/extending.md)",
        )
    return value


def _json_problems(value: Any, where: str) -> list[tuple[str, str]]:
    """(field, problem) for every part of ``value`` that is not a JSON value."""
    if value is None or isinstance(value, str | bool | int):
        return []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [(where, f"{value!r} is not a JSON number")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _json_problems(v, f"{where}[{i}]")]
    if isinstance(value, dict):
        keys = [(f"{where}.{k}", "is not a text key") for k in value if not isinstance(k, str)]
        return keys + [p for k, v in value.items() for p in _json_problems(v, f"{where}.{k}")]
    return [(where, f"{value!r} ({type(value).__name__}) is not a JSON value")]


def _options(value: Any) -> Any:
    """A mapping of JSON values, kept as sorted (name, value)."""
    if isinstance(value, tuple):
        return value
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise problem(f"expected a mapping, got {type(value).__name__}", "e.g. {table: clicks}")
    found = [p for k, v in value.items() for p in _json_problems(v, str(k))]
    found += [(str(k), "is not a text key") for k in value if not isinstance(k, str)]
    fix = "use strings, numbers, booleans, null, lists and mappings (quote dates and times)"
    if found:
        raise several([(field, text, fix) for field, text in found])
    return tuple(sorted(value.items()))


Reference = Annotated[str, BeforeValidator(_reference)]
JsonOptions = Annotated[Options, BeforeValidator(_options)]


class _Plugin(ComponentConfig):
    """What a plugin source and sink share: the class reference and its options."""

    type: Reference
    options: JsonOptions = ()

    def __hash__(self) -> int:  # options hold lists and mappings: not hashable
        return hash((type(self), self.type))

    @property
    def plugin(self) -> bool:
        return True

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)


class PluginSourceConfig(_Plugin, SourceConfig):
    """The engine needs the record columns (``schema``); the class gets ``(config, options,
    event time column)``."""

    type: Reference
    columns: Schema = Field(alias="schema")

    @classmethod
    def unknown(cls, key: str) -> tuple[str, str]:
        return ("is not a setting of a plugin source",
                "put the source's own settings under source.options")  # fmt: skip

    @classmethod
    def required(cls, key: str) -> tuple[str, str]:
        if key == "schema":
            return ("is required for a plugin source (the engine needs the record columns)",
                    "e.g. {user: string, ts: timestamp}")  # fmt: skip
        return super().required(key)


class PluginSinkConfig(_Plugin, SinkConfig):
    """The class gets ``(config, options, pipeline name)`` and keeps ``config.name``."""

    type: Reference

    @classmethod
    def unknown(cls, key: str) -> tuple[str, str]:
        return "is not a setting of a plugin sink", "put the sink's own settings under options"
