"""What every operator (windows, keyed process functions, stateless) shares: the leaf module of
:mod:`sluice.operators`. Implementations import it; it imports none of them.

The process step (:mod:`sluice.protocol.process`) gives an operator an :class:`EpochInput` and
gets back an :class:`EpochOutput`; the order it then drives it in is the contract:

1. ``state_update()`` — the rows of ``S_{k+1}`` to write (a delta or a full base);
2. ``results`` — written to every result sink (``emitted`` rows; None: the write counts them);
3. ``finish(emitted, state_rows)`` — the epoch's facts (counts, watermark, open windows),
   some of which Spark only knows once the writes above ran (they come from the writes, not
   from extra jobs);
4. ``late()`` / ``dead()`` — built and written only when the facts say there are such rows;
5. ``release()`` — drop what was cached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from sluice.operators.exceptions import InvalidExpression
from sluice.operators.watermarks import WatermarkState

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from sluice.spec.model import PipelineSpec
    from sluice.state import StateInput

__all__ = [
    "ACCEPTED",
    "CLASS_NAMES",
    "DEAD",
    "DEAD_DDL",
    "FILTERED",
    "LATE",
    "POSITION",
    "EpochCounts",
    "EpochFacts",
    "EpochInput",
    "EpochOutput",
    "Frame",
    "InvalidExpression",
    "Operator",
    "StateUpdate",
    "late_ddl",
    "null_safe_join",
    "quoted",
]

# A record's class, as the small integers the pass counts per run (io.sluice.spark.ClassTally).
ACCEPTED, LATE, DEAD, FILTERED = 0, 1, 2, 3
CLASS_NAMES = {ACCEPTED: "accepted", LATE: "late", DEAD: "dead", FILTERED: "filtered"}

# A record's position in its source partition (sluice.sources.base).
POSITION = ("_partition", "_major", "_line")

Frame = Callable[[], "DataFrame"]


@dataclass(frozen=True)
class EpochCounts:
    records_read: int
    accepted: int
    late: int
    dead: int
    filtered: int = 0
    late_rows: int = 0  # rows for the late sink: one per (late record, missed window)

    def reconciles(self) -> bool:
        return self.records_read == self.accepted + self.late + self.dead + self.filtered


@dataclass(frozen=True)
class EpochFacts:
    """What an epoch found out, once its writes ran."""

    counts: EpochCounts
    watermark: WatermarkState
    watermark_us: int | None  # the global watermark after the epoch (idle rule applied)
    emitted: int  # result rows
    still_open: int  # windows still open, or keys holding state
    state_rows: int  # logical rows of S_{k+1} (what a reader of the state sees)


@dataclass(frozen=True)
class StateUpdate:
    """The rows an epoch writes for ``S_{k+1}``: a ``delta`` (this epoch's changes, read
    together with the parts before it) or a ``base`` (everything; the parts before are not
    needed any more). ``rows`` None: not counted before the write."""

    kind: Literal["base", "delta"]
    frame: DataFrame
    rows: int | None = None
    # what a reader may skip without reading the rows: {column: (low, high)} over the update
    bounds: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class EpochInput:
    """Everything an operator needs for one epoch."""

    spark: SparkSession
    records: DataFrame  # the source's rows: RECORD_COLUMNS then the schema columns
    spec: PipelineSpec
    carried: WatermarkState  # W_k per partition
    state: StateInput  # S_k
    epoch: int
    source_uri: str
    waiting: tuple[str, ...] = ()  # partitions with unread input after this epoch
    # lower bounds of the largest event time before each (partition, major) in this epoch,
    # known without reading the records (Parquet footers): {(partition, major): µs or None}
    before_hints: dict[tuple[str, int], int | None] = field(default_factory=dict)
    compact: bool = False  # write S_{k+1} as a full base


class EpochOutput(Protocol):
    results: DataFrame  # result columns plus _op and _epoch
    emitted: int | None  # rows in results (None: counted by the write)

    def state_update(self) -> StateUpdate | None: ...

    def finish(self, emitted: int | None, state_rows: int | None) -> EpochFacts:
        """``emitted``: rows the result sinks wrote; ``state_rows``: rows the state update
        wrote (None: none written)."""
        ...

    def late(self) -> DataFrame: ...

    def dead(self) -> DataFrame: ...

    def release(self) -> None: ...


class Operator(Protocol):
    """An epoch's computation over records and state (one per spec ``operator``)."""

    def run(self, epoch: EpochInput) -> EpochOutput: ...

    def state_columns(self) -> list[str]: ...

    def current_state(self, state: StateInput) -> DataFrame | None:
        """The state's rows as one snapshot, every part folded (``sluice state``)."""
        ...

    def align_state(
        self, frame: DataFrame, reset_aggregates: tuple[str, ...], reset_states: tuple[str, ...]
    ) -> DataFrame: ...


def quoted(name: str) -> str:
    """A column name as Spark SQL text."""
    return "`" + name.replace("`", "``") + "`"


def null_safe_join(left: DataFrame, right: DataFrame, keys: list[str]) -> DataFrame:
    """Left join on ``keys`` where null equals null (a null key is a key like any other)."""
    from pyspark.sql import functions as F

    if not keys:
        return left.join(right, F.lit(True), "left")
    renamed = right.select(*[F.col(quoted(k)).alias(f"_r_{k}") for k in keys], *[
        c for c in right.columns if c not in keys
    ])  # fmt: skip
    cond: Column | Any = None
    for k in keys:
        term = F.col(quoted(k)).eqNullSafe(F.col(quoted(f"_r_{k}")))
        cond = term if cond is None else cond & term
    joined = left.join(renamed, cond, "left")
    return joined.drop(*[f"_r_{k}" for k in keys])


DEAD_DDL = (
    "pipeline string, epoch bigint, source string, file string, line bigint, raw string, "
    "reason_code string, reason string"
)


def late_ddl(spec: PipelineSpec) -> str:
    """The late-records sink's columns (every operator's late frame has these)."""
    from sluice.sources.base import SPARK_TYPES

    record = ", ".join(f"{quoted(c)} {SPARK_TYPES[kind]}" for c, kind in spec.source.schema)
    return (
        f"{record}, window_start timestamp, window_end timestamp, watermark timestamp, "
        "source_file string, source_line bigint, epoch bigint"
    )
