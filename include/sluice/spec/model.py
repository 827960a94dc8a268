"""The pipeline spec as frozen config objects (validated by :mod:`sluice.spec.loader`); its
source, sinks and window are component configs (:mod:`sluice.spec.components`).

Times are integer microseconds so window arithmetic is exact.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Literal

from sluice.contracts.sources import ONE_SOURCE, SPARK_TYPES
from sluice.spec.components.base import SCHEMA_TYPES, SinkConfig, SourceConfig, WindowConfig
from sluice.spec.components.windows import HoppingWindow, TumblingWindow
from sluice.spec.durations import format_duration
from sluice.storage.s3options import S3Options

__all__ = [
    "AGGREGATE_FUNCTIONS",
    "EMIT_MODES",
    "EXECUTION_MODES",
    "SCHEMA_TYPES",
    "AggregateSpec",
    "CheckpointSpec",
    "EventTimeSpec",
    "JoinSide",
    "JoinSpec",
    "LookupSpec",
    "NamedSource",
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
# a lookup table's type and the fields its ``table:`` takes: one line per type; its kind's line
# is sluice.pipeline.LOOKUP_KINDS (docs/extending.md, "A new lookup kind")
LOOKUP_TABLES: dict[str, tuple[str, ...]] = {
    "files": ("type", "path", "format"),
    "delta": ("type", "path"),
    "postgres": ("type", "connection", "table"),
    "iceberg": ("type", "connection", "table"),
}
STATE_KINDS = ("value", "list", "reducing", "map")
JOIN_TYPES = ("window", "interval", "regular")  # a stream-stream join's ``type``
JOIN_HOWS = ("inner", "left")
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
    table_type: str = "files"  # a type of LOOKUP_TABLES
    connection: str | None = None  # postgres, iceberg: the database's or catalog's connection
    table: str | None = None  # postgres: [schema.]table; iceberg: namespace.table

    def describe(self) -> str:
        """Where the table is, in a line: a table a connection reaches, a table at a path, or
        a folder of ``format`` files (its path alone), as its type's fields say."""
        if "table" in LOOKUP_TABLES.get(self.table_type, ()):
            return f"{self.table_type} table {self.table} via {self.connection}"
        if "format" in LOOKUP_TABLES.get(self.table_type, ()):
            return self.path
        return f"{self.table_type} table {self.path}"


@dataclass(frozen=True)
class NamedSource:
    """One of a pipeline's sources, by name (:attr:`PipelineSpec.sources`): a joining
    pipeline's ``sources.<name>``, with its own event time (``event_time.<name>``) and its own
    filter (``filter.<name>``, applied before the join); or a pipeline's one ``source:``,
    named ``source`` (``declared`` False: the spec names it by its field alone)."""

    name: str
    source: SourceSpec
    event_time: EventTimeSpec
    filter: str | None = None
    declared: bool = True

    @property
    def field(self) -> str:
        """Where the spec declares it: ``sources.<name>``, or ``source``."""
        return f"sources.{self.name}" if self.declared else "source"


JoinSide = NamedSource  # a join's two sides are its two named sources


@dataclass(frozen=True)
class JoinSpec:
    """A stream–stream join of two sources in event time (docs/joins.md).

    ``window``: rows of both sides in the same tumbling / hopping ``window`` whose ``on``
    columns are equal; ``interval``: ``right.ts`` within ``[left.ts + lower_us,
    left.ts + upper_us]``; ``regular``: any two rows whose event times are at most
    ``ttl_us`` apart (the state's time to live). ``how: left`` also emits each left row
    that never matched, with nulls, once no match is possible any more. ``output``: each
    result column as a Spark SQL expression over ``<left>.<column>`` / ``<right>.<column>``
    (and ``window_start`` / ``window_end`` for a window join)."""

    type: Literal["window", "interval", "regular"]
    left: JoinSide
    right: JoinSide
    on: tuple[tuple[str, str], ...]  # (left column, right column)
    output: tuple[tuple[str, str], ...]  # (result column, SQL expression)
    how: Literal["inner", "left"] = "inner"
    window: TumblingWindow | HoppingWindow | None = None  # type window
    lower_us: int | None = None  # type interval
    upper_us: int | None = None
    ttl_us: int | None = None  # type regular

    @property
    def sides(self) -> tuple[JoinSide, JoinSide]:
        return (self.left, self.right)

    def side(self, name: str) -> JoinSide:
        return next(s for s in self.sides if s.name == name)

    def kept(self, side: JoinSide) -> list[tuple[str, str]]:
        """The columns of a side's records its rows in the state keep: those ``output:``
        names as ``<side>.<column>`` (every column when an expression names the side
        otherwise, e.g. ``to_json(persons)``); a row waiting for a match needs nothing else."""
        text = " ".join(expression for _, expression in self.output)
        name = re.escape(side.name)
        used = {m.lower() for m in re.findall(rf"(?i)\b{name}\s*\.\s*`?(\w+)", text)}
        bare = re.search(rf"(?i)\b{name}\b(?!\s*\.)", text)
        schema = list(side.source.schema)
        return schema if bare else [(c, t) for c, t in schema if c.lower() in used]

    def describe(self) -> str:
        """What the join does, in a line."""
        on = " and ".join(f"{self.left.name}.{a} = {self.right.name}.{b}" for a, b in self.on)
        if self.window is not None:
            what = f"window join ({self.window.describe()})"
        elif self.type == "interval":
            lower, upper = (format_duration(v or 0) for v in (self.lower_us, self.upper_us))
            what = (
                f"interval join ({self.right.name} within [{lower}, {upper}] of {self.left.name})"
            )
        else:
            what = f"regular join (ttl {format_duration(self.ttl_us or 0)})"
        return f"{self.how} {what} on {on}"

    def shape(self) -> dict[str, object]:
        """What the join's state depends on (a change refuses the stored state)."""
        shape: dict[str, object] = {
            "type": self.type,
            "how": self.how,
            "on": [list(p) for p in self.on],
            "sides": {
                s.name: {"kept": dict(self.kept(s)), "event_time": s.event_time.column}
                for s in self.sides
            },
        }
        if self.window is not None:
            shape["window"] = self.window.shape()
        if self.type == "interval":
            shape["interval"] = [self.lower_us, self.upper_us]
        if self.ttl_us is not None:
            shape["ttl_us"] = self.ttl_us
        return shape


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
    # a stream-stream join of two sources: ``source`` and ``event_time`` are then its left
    # side's (docs/joins.md)
    join: JoinSpec | None = None
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
    def joining(self) -> JoinSpec:
        """The join of a joining pipeline (the join operator's view of the spec)."""
        if self.join is None:
            raise TypeError(f"pipeline {self.name} reads one source: it joins nothing")
        return self.join

    @property
    def stateless(self) -> bool:
        """Neither a window, a process function nor a join: select, filter, append
        (docs/stateless.md)."""
        return self.window is None and self.process is None and self.join is None

    @property
    def operator(self) -> Literal["windows", "process", "stateless", "join"]:
        """Which operator runs each epoch (:func:`sluice.pipeline.operator_for`)."""
        if self.window is not None:
            return "windows"
        if self.join is not None:
            return "join"
        return "process" if self.process is not None else "stateless"

    @property
    def sources(self) -> dict[str, NamedSource]:
        """Every source the pipeline reads, by name, in the spec's order: a join's two, or
        the one ``source:`` (named ``source``)."""
        if self.join is not None:
            return {side.name: side for side in self.join.sides}
        one = NamedSource(ONE_SOURCE, self.source, self.event_time, declared=False)
        return {ONE_SOURCE: one}

    @property
    def late_record(self) -> tuple[tuple[str, str], ...]:
        """A late record's own columns with their Spark types, before where and when it came
        (:func:`sluice.operators.base.late_ddl`): the source schema's; a join's sides' records
        differ, so its late record is its side and its columns as JSON."""
        if self.join is not None:
            return (("side", "string"), ("record", "string"))
        return tuple((c, SPARK_TYPES[kind]) for c, kind in self.source.schema)

    @property
    def output_noun(self) -> str:
        """What an epoch emits, counted (``words.noun``): windows, or rows."""
        return "rows" if self.stateless or self.join is not None else "windows"

    def describe_operator(self) -> str:
        """What the pipeline computes, in a few words."""
        keys = ", ".join(f"`{k}`" for k in self.key_by) or "no key"
        if self.stateless:
            return "stateless (select / filter, every accepted record appended; no state)"
        if self.process is not None:
            return f"process function `{self.process.function}` by {keys}"
        if self.join is not None:
            return self.join.describe()
        return f"{self.windowing.describe()} windows by {keys}, emit {self.emit}"

    def source_spec(self, source: NamedSource) -> PipelineSpec:
        """The spec ``source`` is read and classified by: the pipeline's own for its one
        source, a join side's (:meth:`side_spec`) for a named one."""
        return self.side_spec(source) if source.declared else self

    def side_spec(self, side: JoinSide) -> PipelineSpec:
        """The spec one side of a join reads and classifies its records by: that source, its
        event time and filter, every column read (the join's output may name any)."""
        return replace(
            self, source=side.source, event_time=side.event_time, filter=side.filter,
            join=None, select=(), lookup=(), output=(), key_by=(),
        )  # fmt: skip

    def output_columns(self) -> tuple[str, ...]:
        """A stateless pipeline's result columns: ``output``, else every record column (the
        source schema's, ``select``'s, the lookups')."""
        if self.join is not None:
            return tuple(c for c, _ in self.join.output)
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
        if self.join is not None:
            return {"operator": "join", "join": self.join.shape()}
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
