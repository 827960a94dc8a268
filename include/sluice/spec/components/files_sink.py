"""``type: files``: Parquet or JSON lines files under a path (docs/sinks.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BeforeValidator

from sluice.spec.components.base import Text, one_of
from sluice.spec.components.sinks import BuiltinSink, partition_columns, sink_name

if TYPE_CHECKING:
    pass

__all__ = ["FilesSinkConfig"]


class FilesSinkConfig(BuiltinSink):
    name: Annotated[str, BeforeValidator(sink_name)]
    type: Literal["files"] = "files"
    path: Text
    format: Annotated[Literal["parquet", "jsonl"], one_of(("parquet", "jsonl"))] = "parquet"
    partition_by: Annotated[tuple[str, ...], BeforeValidator(partition_columns)] = ()

    def partitioned_by(self) -> tuple[str, ...]:
        return self.partition_by

    def storage_path(self) -> str:
        return self.path

    def describe(self) -> str:
        return f"files {self.format} at {self.path}"
