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
    "EMIT_MODES",
    "EXECUTION_MODES",
    "SCHEMA_TYPES",
    "SINK_TYPES",
    "WINDOW_TYPES",
    "AggregateSpec",
    "CheckpointSpec",
    "EventTimeSpec",
    "PipelineSpec",
    "ProcessSpec",
    "SinkSpec",
    "SourceSpec",
    "StateSpec",
    "WindowSpec",
]

SCHEMA_TYPES = ("string", "int", "long", "double", "float", "boolean", "timestamp", "date")
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
WINDOW_TYPES = ("tumbling", "hopping", "session", "count")
SINK_TYPES = ("files", "postgres", "delta")
EMIT_MODES = ("on_close", "on_update")
EXECUTION_MODES = ("cold", "warm")  # the process step: spark-submit, or ``sluice serve``
STATE_KINDS = ("value", "list", "reducing", "map")
# the state shape of every stateless pipeline: it keeps no state (sluice.protocol.upgrade)
STATELESS_SHAPE: dict[str, Any] = {"operator": "stateless"}
SourceFormat = Literal["jsonl", "csv", "parquet"]
SinkFormat = Literal["parquet", "jsonl"]


@dataclass(frozen=True)
class SourceSpec:
    """Where the input comes from: ``files``, ``nexmark`` or a plugin class ``module:Class``
    (whose ``path`` is empty and whose settings are ``options``)."""

    type: str  # "files", "nexmark" or "module:Class"
    path: str
    format: SourceFormat
    schema: tuple[tuple[str, str], ...]
    max_files_per_epoch: int | None = None
    header: bool = True  # csv only: the first line of every file is a header
    # files: "none" (one partition) or "directory" (each first-level folder is a partition)
    partition_by: Literal["none", "directory"] = "none"
    # source-type specific settings (the nexmark generator's, a plugin's), as sorted
    # (name, value); a plugin's values are JSON values (lists, dicts: not hashable)
    options: tuple[tuple[str, Any], ...] = field(default=(), hash=False)

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)

    @property
    def plugin(self) -> bool:
        """A ``module:Class`` type: a user-defined class (docs/extending.md)."""
        return ":" in self.type

    @property
    def rereads_cheaply(self) -> bool:
        """Whether Spark may read an epoch's records again instead of caching them: Parquet
        files (immutable by the files source's contract) cost a column-pruned scan, less than
        building Spark's in-memory cache (1M bids: 0.85 s for four scans against 1.28 s cached,
        bench/nexmark.py's q7 columns). Text formats parse every line, Kafka fetches: cached."""
        return self.type == "files" and self.format == "parquet"

    def column_type(self, name: str) -> str:
        return dict(self.schema)[name]


@dataclass(frozen=True)
class EventTimeSpec:
    column: str
    max_out_of_orderness_us: int
    allowed_lateness_us: int = 0
    # a partition whose newest event time is this far behind the newest of all partitions
    # stops holding the global watermark back (None: never)
    idle_timeout_us: int | None = None


@dataclass(frozen=True)
class WindowSpec:
    """``tumbling(size)``, ``hopping(size, slide)``, ``session(gap)``, ``count(count, slide)``."""

    type: Literal["tumbling", "hopping", "session", "count"]
    size_us: int = 0
    slide_us: int = 0  # hopping; equals size_us for tumbling
    gap_us: int = 0  # session
    count: int = 0  # count windows: records per window
    count_slide: int = 0  # count windows: a new window every count_slide records
    max_duration_us: int = 0  # session: cut at aligned check points (0: no cap)

    def shape(self) -> dict[str, Any]:
        fields = {
            "tumbling": ("size_us",),
            "hopping": ("size_us", "slide_us"),
            "session": ("gap_us",),
            "count": ("count", "count_slide"),
        }[self.type]
        shape = {"type": self.type, **{f: getattr(self, f) for f in fields}}
        if self.max_duration_us:
            shape["max_duration_us"] = self.max_duration_us
        return shape

    @property
    def capped(self) -> bool:
        """A session window with ``max_duration``."""
        return self.type == "session" and self.max_duration_us > 0

    @property
    def time_based(self) -> bool:
        return self.type != "count"


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
class SinkSpec:
    """Where one output goes. ``files`` and ``delta`` write under ``path``; ``postgres`` writes
    ``table`` through ``connection`` (a connection id, see docs/sinks.md); a plugin
    ``module:Class`` gets ``options`` (its ``path`` is empty)."""

    name: str
    type: str  # "files", "postgres", "delta" or "module:Class"
    path: str
    format: SinkFormat = "parquet"  # files only
    mode: Literal["append", "upsert"] = "append"
    table: str | None = None  # postgres: [schema.]table
    connection: str | None = None  # postgres: connection id
    partition_by: tuple[str, ...] = ()  # files, delta: partition columns
    # upsert sinks: the columns that identify a row (filled in from the pipeline's keys and
    # window by the loader)
    keys: tuple[str, ...] = ()
    # a plugin's settings as sorted (name, JSON value)
    options: tuple[tuple[str, Any], ...] = field(default=(), hash=False)

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)

    @property
    def plugin(self) -> bool:
        """A ``module:Class`` type: a user-defined class (docs/extending.md)."""
        return ":" in self.type


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
        """Which operator runs each epoch (:mod:`sluice.operators.registry`)."""
        if self.window is not None:
            return "windows"
        return "process" if self.process is not None else "stateless"

    def output_columns(self) -> tuple[str, ...]:
        """A stateless pipeline's result columns: ``output``, else the source schema's
        columns followed by the ``select`` columns."""
        if self.output:
            return self.output
        return (*(c for c, _ in self.source.schema), *(n for n, _ in self.select))

    def state_shape(self) -> dict[str, Any]:
        """What the keyed state depends on: a checkpoint restored under a spec with a
        different shape would be misread, so the shape is stored and compared. Each declared
        process-function state is its own entry (``state.<name>``), so a difference names it.
        A stateless pipeline keeps no state: its shape is the same whatever its select,
        filter and output (:mod:`sluice.protocol.upgrade`)."""
        if self.stateless:
            return dict(STATELESS_SHAPE)
        shape: dict[str, Any] = {
            "key_by": {k: dict(self.source.schema).get(k, "derived") for k in self.key_by},
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
