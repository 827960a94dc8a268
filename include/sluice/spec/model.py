"""The pipeline spec as frozen config objects (validated by :mod:`sluice.spec.loader`); its
source, sinks and window are component configs (:mod:`sluice.spec.components`).

Times are integer microseconds so window arithmetic is exact.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Literal

from sluice.spec.components.base import SCHEMA_TYPES, SinkConfig, SourceConfig, WindowConfig
from sluice.storage.s3options import S3Options

__all__ = [
    "AGGREGATE_FUNCTIONS",
    "EMIT_MODES",
    "EXECUTION_MODES",
    "SCHEMA_TYPES",
    "AggregateSpec",
    "CheckpointSpec",
    "EventTimeSpec",
    "LookupSpec",
    "PipelineSpec",
    "ProcessSpec",
    "SinkSpec",
    "SourceSpec",
    "StateSpec",
    "WindowSpec",
]

NUMERIC_TYPES = ("int", "long", "double", "float")
AGGREGATE_FUNCTIONS = (
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "count_distinct",
    "approx_count_distinct",
    "first",
    "last",
)
EMIT_MODES = ("on_close", "on_update")
EXECUTION_MODES = ("cold", "warm")  # the process step: spark-submit, or ``sluice serve``
LOOKUP_JOINS = ("left", "inner")  # a lookup join's ``how``
LOOKUP_FORMATS = ("parquet",)  # a lookup table's files
LOOKUP_TABLES = ("files", "delta", "postgres", "iceberg")  # a lookup table's type
STATE_KINDS = ("value", "list", "reducing", "map")
# the state shape of every stateless pipeline: it keeps no state (sluice.protocol.upgrade)
STATELESS_SHAPE: dict[str, object] = {"operator": "stateless"}
# The component configs (:mod:`sluice.spec.registry` maps each ``type`` to its class).
SourceSpec = SourceConfig
SinkSpec = SinkConfig
WindowSpec = WindowConfig


@dataclass(frozen=True)
class EventTimeSpec:
    column: str
    max_out_of_orderness_us: int
    allowed_lateness_us: int = 0
    # a partition whose newest event time is this far behind the newest of all partitions
    # stops holding the global watermark back (None: never)
    idle_timeout_us: int | None = None


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
class StateSpec:
    """One declared piece of keyed state of a process function (docs/keyed-state.md).

    ``type`` is the (element) type in canonical form (:mod:`sluice.spec.types`); ``key_type``
    the key type of a map; ``reduce`` the reduce function of a reducing state; ``ttl_us`` the
    event-time TTL (None: never expires)."""

    name: str
    kind: Literal["value", "list", "reducing", "map"]
    type: str
    key_type: str | None = None
    reduce: str | None = None
    ttl_us: int | None = None

    def shape(self) -> str:
        """What a snapshot of this state depends on (the TTL is not part of it)."""
        if self.kind == "map":
            return f"map<{self.key_type},{self.type}>"
        return f"{self.kind}<{self.type}>"


@dataclass(frozen=True)
class ProcessSpec:
    """A keyed process function instead of windows: ``function`` (``module:function`` or a
    registered name) gets each key's records of an epoch and its state; ``on_timer`` is
    called for each event-time timer the watermark passes."""

    function: str
    state: tuple[StateSpec, ...] = ()
    output: tuple[tuple[str, str], ...] = ()  # column -> canonical type
    on_timer: str | None = None
    base_dir: str | None = field(default=None, compare=False)  # where module:function is looked up

    def state_named(self, name: str) -> StateSpec:
        return next(s for s in self.state if s.name == name)


@dataclass(frozen=True)
class LookupSpec:
    """A lookup (stream–table) join, docs/joins.md: each record gets ``columns`` from the
    table's row whose ``on`` table columns equal the record's; without one (or with a null
    key) they are null (``how: left``) or the record is filtered out (``inner``). The table
    is a folder of ``format`` files at ``path`` (``table_type`` files), the Delta table
    there (delta), the PostgreSQL table ``table`` of connection ``connection`` (postgres,
    copied at plan time) or the Iceberg table ``table`` of the catalog ``connection`` names
    (iceberg), read as the epoch's plan pinned it."""

    name: str
    path: str
    on: tuple[tuple[str, str], ...]  # (record column, table column)
    columns: tuple[tuple[str, str], ...]  # (table column, type) each record gets
    how: Literal["left", "inner"] = "left"
    format: Literal["parquet"] = "parquet"
    table_type: Literal["files", "delta", "postgres", "iceberg"] = "files"
    connection: str | None = None  # postgres, iceberg: the database's or catalog's connection
    table: str | None = None  # postgres: [schema.]table; iceberg: namespace.table

    def describe(self) -> str:
        """Where the table is, in a line."""
        if self.table_type in ("postgres", "iceberg"):
            return f"{self.table_type} table {self.table} via {self.connection}"
        return f"delta table {self.path}" if self.table_type == "delta" else self.path


@dataclass(frozen=True)
class CheckpointSpec:
    storage: str
    interval_us: int = 60_000_000
    timeout_us: int = 600_000_000
    retained: int = 10
    # keyed state: a full base every this many deltas (sluice.state)
    compact_every: int = 10


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
    window: WindowSpec | None  # None: a process function (``process``), or stateless
    aggregates: tuple[AggregateSpec, ...]
    sinks: tuple[SinkSpec, ...]
    late_records: SinkSpec
    dead_letters: SinkSpec
    checkpoint: CheckpointSpec
    emit: Literal["on_close", "on_update"] = "on_close"
    select: tuple[tuple[str, str], ...] = ()  # derived columns: (name, Spark SQL expression)
    filter: str | None = None  # Spark SQL predicate applied before windowing
    output: tuple[str, ...] = ()  # stateless: the columns written, in order (empty: all)
    qos: int = 2
    s3: S3Options | None = None
    restart: RestartSpec = field(default_factory=RestartSpec)
    process: ProcessSpec | None = None
    lookup: tuple[LookupSpec, ...] = ()  # lookup joins, in order, after select and before filter
    # where Airflow runs the process step: "cold" (spark-submit), "warm" (``sluice serve``),
    # or None: the deployment's ``SLUICE_EXECUTION``. Never changes what an epoch computes.
    execution: Literal["cold", "warm"] | None = field(default=None, compare=False)
    origin: str = field(default="<memory>", compare=False)

    @property
    def windowing(self) -> WindowSpec:
        """The window of a windowed pipeline (the window operator's view of the spec)."""
        if self.window is None:
            what = "a process function" if self.process is not None else "no window (stateless)"
            raise TypeError(f"pipeline {self.name} runs {what}, not windows")
        return self.window

    @property
    def stateless(self) -> bool:
        """Neither a window nor a process function: select, filter, append (docs/stateless.md)."""
        return self.window is None and self.process is None

    @property
    def operator(self) -> Literal["windows", "process", "stateless"]:
        """Which operator runs each epoch (:func:`sluice.pipeline.operator_for`)."""
        if self.window is not None:
            return "windows"
        return "process" if self.process is not None else "stateless"

    def output_columns(self) -> tuple[str, ...]:
        """A stateless pipeline's result columns: ``output``, else every record column (the
        source schema's, ``select``'s, the lookups')."""
        if self.output:
            return self.output
        return tuple(self.record_types())

    def record_types(self) -> dict[str, str]:
        """Every column a record has before the operator: the source schema's, ``select``'s
        (type "derived") and each lookup's, in that order."""
        types = dict(self.source.schema)
        types.update({n: "derived" for n, _ in self.select})
        for lookup in self.lookup:
            types.update(lookup.columns)
        return types

    def read_columns(self) -> tuple[str, ...] | None:
        """The source schema's columns the pipeline reads, in schema order; None: all of them
        (or the source's ``strict_schema``). Read: the event time, ``key_by``, aggregated
        columns, any column a ``select:`` or ``filter:`` expression names, a stateless
        pipeline's written columns; a process function reads every column. A record whose
        only bad value is in another column is accepted, that column null
        (docs/dead-letters.md)."""
        schema = [c for c, _ in self.source.schema]
        if getattr(self.source, "strict_schema", True) or self.process is not None:
            return None
        from sluice.spec.references import referenced

        read = {self.event_time.column, *self.key_by}
        if self.stateless:
            read.update(self.output_columns())
        read.update(a.column for a in self.aggregates if a.column)
        read.update(c for lookup in self.lookup for c, _ in lookup.on)
        for expression in (*(e for _, e in self.select), *([self.filter] if self.filter else [])):
            read.update(referenced(expression, schema))
        columns = tuple(c for c in schema if c in read)
        return None if len(columns) == len(schema) else columns

    def state_shape(self) -> dict[str, object]:
        """What the keyed state depends on: a checkpoint restored under a spec with a
        different shape would be misread, so the shape is stored and compared. Each declared
        process-function state is its own entry (``state.<name>``), so a difference names it.
        A stateless pipeline keeps no state: its shape is the same whatever its select,
        filter and output (:mod:`sluice.protocol.upgrade`)."""
        if self.stateless:
            return dict(STATELESS_SHAPE)
        shape: dict[str, object] = {
            "key_by": {k: self.record_types().get(k, "derived") for k in self.key_by},
            "event_time": self.event_time.column,
        }
        if self.window is not None:
            shape["window"] = self.window.shape()
            shape["aggregates"] = {a.name: a.expression for a in self.aggregates}
        if self.process is not None:
            shape.update({f"state.{s.name}": s.shape() for s in self.process.state})
        if self.select:
            shape["select"] = dict(self.select)
        return shape

    def fingerprint(self) -> str:
        """A short stable hash of :meth:`state_shape`."""
        canonical = json.dumps(self.state_shape(), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()[:16]
