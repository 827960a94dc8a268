"""The pipeline spec as frozen config objects (validated by :mod:`sluice.spec.loader`).

Times are integer microseconds so window arithmetic is exact.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from sluice.storage.s3options import S3Options

__all__ = [
    "AGGREGATE_FUNCTIONS",
    "SCHEMA_TYPES",
    "AggregateSpec",
    "CheckpointSpec",
    "EventTimeSpec",
    "PipelineSpec",
    "SinkSpec",
    "SourceSpec",
    "WindowSpec",
]

SCHEMA_TYPES = ("string", "int", "long", "double", "float", "boolean", "timestamp", "date")
NUMERIC_TYPES = ("int", "long", "double", "float")
AGGREGATE_FUNCTIONS = ("count", "sum", "min", "max", "avg")
SourceFormat = Literal["jsonl", "csv", "parquet"]
SinkFormat = Literal["parquet", "jsonl"]


@dataclass(frozen=True)
class SourceSpec:
    type: Literal["files"]
    path: str
    format: SourceFormat
    schema: tuple[tuple[str, str], ...]
    max_files_per_epoch: int | None = None
    header: bool = True  # csv only: the first line of every file is a header

    def column_type(self, name: str) -> str:
        return dict(self.schema)[name]


@dataclass(frozen=True)
class EventTimeSpec:
    column: str
    max_out_of_orderness_us: int
    allowed_lateness_us: int = 0


@dataclass(frozen=True)
class WindowSpec:
    type: Literal["tumbling"]
    size_us: int


@dataclass(frozen=True)
class AggregateSpec:
    """``name: func(column)``; ``column`` is None for ``count(*)``."""

    name: str
    func: str
    column: str | None

    @property
    def expression(self) -> str:
        return f"{self.func}({self.column or '*'})"


@dataclass(frozen=True)
class SinkSpec:
    name: str
    type: Literal["files"]
    path: str
    format: SinkFormat


@dataclass(frozen=True)
class CheckpointSpec:
    storage: str
    interval_us: int = 60_000_000
    timeout_us: int = 600_000_000
    retained: int = 10


@dataclass(frozen=True)
class RestartSpec:
    """Restart strategy (Flink's exponential-delay): Airflow retries with backoff.

    ``attempts`` counts retries after the first try; the n-th retry waits
    ``min(delay * multiplier**(n-1), max_delay)``.
    """

    attempts: int = 3
    delay_us: int = 10_000_000
    max_delay_us: int = 300_000_000
    multiplier: float = 2.0


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    source: SourceSpec
    event_time: EventTimeSpec
    key_by: tuple[str, ...]
    window: WindowSpec
    aggregates: tuple[AggregateSpec, ...]
    sinks: tuple[SinkSpec, ...]
    late_records: SinkSpec
    dead_letters: SinkSpec
    checkpoint: CheckpointSpec
    emit: Literal["on_close"] = "on_close"
    qos: int = 2
    s3: S3Options | None = None
    restart: RestartSpec = field(default_factory=RestartSpec)
    origin: str = field(default="<memory>", compare=False)

    def state_shape(self) -> dict[str, Any]:
        """What the keyed window state depends on: a checkpoint restored under a spec with a
        different shape would be misread, so the shape is stored and compared."""
        return {
            "key_by": {k: self.source.column_type(k) for k in self.key_by},
            "event_time": self.event_time.column,
            "window": {"type": self.window.type, "size_us": self.window.size_us},
            "aggregates": {a.name: a.expression for a in self.aggregates},
        }

    def fingerprint(self) -> str:
        """A short stable hash of :meth:`state_shape`."""
        canonical = json.dumps(self.state_shape(), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()[:16]
