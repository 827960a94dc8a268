"""``type: module:Class``: a source or sink class of your own (docs/extending.md).

The spec names the class and hands it ``options`` (JSON values); nothing is imported while
the spec loads: the class is looked up (next to the spec first, as process functions are)
when a run builds it, and whatever its constructor raises names the field.
"""

from __future__ import annotations

import builtins
import copy
import inspect
import math
import os
import re
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BeforeValidator, Field

from sluice.spec.components.base import (
    BuildContext,
    ComponentConfig,
    Schema,
    SinkConfig,
    SourceConfig,
    problem,
    several,
)

if TYPE_CHECKING:
    from sluice.spec.model import PipelineSpec

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

    def _class(self, spec: PipelineSpec, field: str, base: builtins.type) -> builtins.type:
        """The class ``type`` names, imported from the spec's folder first, checked to be a
        ``base``."""
        from sluice.keyed.functions import load_reference
        from sluice.protocol.exceptions import PluginError

        def fail(reason: str) -> PluginError:
            return PluginError(spec.name, f"{field}.type", self.type, reason)

        origin = spec.origin
        folder = None if origin == "<memory>" else os.path.dirname(os.path.abspath(origin))
        cls: builtins.type = load_reference(
            self.type, folder, fail, what="class", accept=inspect.isclass
        )
        if not issubclass(cls, base):
            wanted = f"{base.__module__}.{base.__qualname__}"
            raise fail(f"{cls.__module__}.{cls.__qualname__} is not a subclass of {wanted}")
        return cls

    def _construct(self, spec: PipelineSpec, field: str, cls: builtins.type, *args: Any) -> Any:
        """``cls(self, options, *args)``; whatever it raises (options it refuses, an abstract
        method left out) becomes a :class:`PluginError` naming the field."""
        from sluice.protocol.exceptions import PluginError

        try:
            return cls(self, copy.deepcopy(dict(self.options)), *args)
        except Exception as exc:
            reason = f"{cls.__qualname__}(...) raised {type(exc).__name__}: {exc}"
            raise PluginError(spec.name, f"{field}.options", self.type, reason) from exc


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

    def build(self, spec: PipelineSpec, ctx: BuildContext) -> Any:
        from sluice.sources import Source

        cls = self._class(spec, "source", Source)
        return self._construct(spec, "source", cls, spec.event_time.column)


class PluginSinkConfig(_Plugin, SinkConfig):
    """The class gets ``(config, options, pipeline name)`` and keeps ``config.name``."""

    type: Reference

    @classmethod
    def unknown(cls, key: str) -> tuple[str, str]:
        return "is not a setting of a plugin sink", "put the sink's own settings under options"

    def build(self, spec: PipelineSpec, ctx: BuildContext, field: str) -> Any:
        from sluice.protocol.exceptions import PluginError
        from sluice.sinks import Sink

        built = self._construct(spec, field, self._class(spec, field, Sink), spec.name)
        if getattr(built, "name", None) != self.name:
            reason = f"its name is {getattr(built, 'name', None)!r}; set self.name = spec.name"
            raise PluginError(spec.name, f"{field}.type", self.type, reason)
        return built
