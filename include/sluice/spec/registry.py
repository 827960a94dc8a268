"""The component types: each ``type`` a spec may name, mapped to its config class.

One line registers a type; a ``type`` with a colon (``module:Class``) is a class of your own,
checked by the plugin config of its registry (docs/extending.md). Validation is pydantic's,
over the union of a registry's classes discriminated on ``type``; its errors become
:class:`~sluice.spec.exceptions.SpecProblem` (field, problem, fix).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Generic, TypeVar, Union

from pydantic import Discriminator, Tag, TypeAdapter, ValidationError

from sluice.spec.components.base import (
    SPEC,
    ComponentConfig,
    SinkConfig,
    SourceConfig,
    WindowConfig,
)
from sluice.spec.components.delta_sink import DeltaSinkConfig
from sluice.spec.components.files_sink import FilesSinkConfig
from sluice.spec.components.files_source import FilesSourceConfig
from sluice.spec.components.iceberg_sink import IcebergSinkConfig
from sluice.spec.components.kafka_sink import KafkaSinkConfig
from sluice.spec.components.kafka_source import KafkaSourceConfig
from sluice.spec.components.nexmark_source import NexmarkSourceConfig
from sluice.spec.components.plugins import PLUGIN_HINT, PluginSinkConfig, PluginSourceConfig
from sluice.spec.components.postgres_sink import PostgresSinkConfig
from sluice.spec.components.sqlite_source import SqliteSourceConfig
from sluice.spec.components.windows import CountWindow, HoppingWindow, SessionWindow, TumblingWindow
from sluice.spec.exceptions import SpecProblem
from sluice.spec.problems import spec_problems

__all__ = ["SINKS", "SOURCES", "WINDOWS", "Registry"]

C = TypeVar("C", bound=ComponentConfig)
_PLUGIN = "module:Class"  # the tag of a class reference


class Registry(Generic[C]):
    """The config class of each ``type`` of one kind of component (``what``)."""

    def __init__(self, what: str, plugin: type[C] | None = None) -> None:
        self.what = what
        self.plugin = plugin
        self.types: dict[str, type[C]] = {}
        self._adapter: TypeAdapter[Any] | None = None

    def add(self, cls: type[C]) -> type[C]:
        """Register ``cls`` under the default of its ``type`` field."""
        self.types[cls.model_fields["type"].default] = cls
        self._adapter = None
        return cls

    def config_class(self, tag: str) -> type[C]:
        return self.plugin if tag == _PLUGIN and self.plugin else self.types[tag]

    def validate(
        self, value: Any, field: str, extra: Mapping[str, Any] | None = None
    ) -> tuple[C | None, list[SpecProblem]]:
        """The config ``value`` (a spec's mapping, plus ``extra`` settings) describes, or
        None and every problem found."""
        if not isinstance(value, dict):
            got = "nothing" if value is None else type(value).__name__
            return None, [SpecProblem(field, f"expected a mapping, got {got}", "see README 'Spec'")]
        tag = self._tag(value)
        if tag is None:
            return None, [self._type_problem(value.get("type"), field)]
        try:
            data = {**value, **(extra or {})}
            config = self.adapter().validate_python(data, by_name=False, context={SPEC: True})
        except ValidationError as exc:
            return None, spec_problems(exc, field, self.config_class(tag), tagged=True)
        return config, []

    def adapter(self) -> TypeAdapter[Any]:
        if self._adapter is None:
            tags = {**self.types, **({_PLUGIN: self.plugin} if self.plugin else {})}
            union = Union[tuple(Annotated[cls, Tag(t)] for t, cls in tags.items())]  # type: ignore[valid-type]  # noqa: UP007
            self._adapter = TypeAdapter(Annotated[union, Discriminator(self._tag)])  # type: ignore[arg-type]
        return self._adapter

    def _tag(self, value: Any) -> str | None:
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        if self.plugin is not None and isinstance(kind, str) and ":" in kind:
            return _PLUGIN
        return kind if isinstance(kind, str) and kind in self.types else None

    def _type_problem(self, kind: Any, field: str) -> SpecProblem:
        hint = f" {PLUGIN_HINT}" if self.plugin else ""
        if kind is None:
            return SpecProblem(f"{field}.type", "is required", f"one of {list(self.types)}{hint}")
        return SpecProblem(f"{field}.type", f"{kind!r} is not valid",
                           f"use one of {list(self.types)}{hint}")  # fmt: skip


SOURCES: Registry[SourceConfig] = Registry("source", plugin=PluginSourceConfig)
SOURCES.add(FilesSourceConfig)
SOURCES.add(NexmarkSourceConfig)
SOURCES.add(KafkaSourceConfig)
SOURCES.add(SqliteSourceConfig)

SINKS: Registry[SinkConfig] = Registry("sink", plugin=PluginSinkConfig)
SINKS.add(FilesSinkConfig)
SINKS.add(PostgresSinkConfig)
SINKS.add(DeltaSinkConfig)
SINKS.add(IcebergSinkConfig)
SINKS.add(KafkaSinkConfig)

WINDOWS: Registry[WindowConfig] = Registry("window")
WINDOWS.add(TumblingWindow)
WINDOWS.add(HoppingWindow)
WINDOWS.add(SessionWindow)
WINDOWS.add(CountWindow)
