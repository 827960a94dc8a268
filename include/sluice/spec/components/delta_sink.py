"""``type: delta``: a Delta Lake table under a path (docs/sinks.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BeforeValidator

from sluice.spec.components.base import Text
from sluice.spec.components.sinks import BuiltinSink, partition_columns, sink_name

if TYPE_CHECKING:
    pass

__all__ = ["DeltaSinkConfig"]


class DeltaSinkConfig(BuiltinSink):
    name: Annotated[str, BeforeValidator(sink_name)]
    type: Literal["delta"] = "delta"
    path: Text
    partition_by: Annotated[tuple[str, ...], BeforeValidator(partition_columns)] = ()

    def partitioned_by(self) -> tuple[str, ...]:
        return self.partition_by

    def storage_path(self) -> str:
        return self.path

    def describe(self) -> str:
        return f"delta table at {self.path}"
