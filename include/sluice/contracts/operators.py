"""The operator contract: what the process step hands an operator and gets back (the ground
floor: imports nothing else from sluice). :mod:`sluice.operators` holds what implementations
share; windows, keyed functions and the stateless operator implement :class:`Operator`.

The process step (:mod:`sluice.protocol.process`) gives an operator an :class:`EpochInput` and
gets back an :class:`EpochOutput`; the order it then drives it in is the contract:

1. ``state_update()`` — the rows of ``S_{k+1}`` to write (a delta or a full base), then
   ``state_written(part)`` once they are written;
2. ``results`` — written to every result sink (``emitted`` rows; None: the write counts them);
3. ``finish(emitted, state_rows)`` — the epoch's facts (counts, watermark, open windows),
   some of which Spark only knows once the writes above ran (they come from the writes, not
   from extra jobs);
4. ``late()`` / ``dead()`` — built and written only when the facts say there are such rows;
5. ``release()`` — drop what was cached.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeVar

from sluice.contracts.records import StatePart, WatermarkState
from sluice.contracts.sources import ONE_SOURCE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "ACCEPTED",
    "CLASS_NAMES",
    "DEAD",
    "FILTERED",
    "LATE",
    "POSITION",
    "EpochCounts",
    "EpochFacts",
    "EpochInput",
    "EpochOutput",
    "Frame",
    "Operator",
    "SourceInput",
    "StateInput",
    "StateUpdate",
    "one_source",
]

# A record's class, as the small integers the pass counts per run (io.sluice.spark.ClassTally).
ACCEPTED, LATE, DEAD, FILTERED = 0, 1, 2, 3
CLASS_NAMES = {ACCEPTED: "accepted", LATE: "late", DEAD: "dead", FILTERED: "filtered"}

# A record's position in its source partition (sluice.contracts.sources).
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


class StateInput(Protocol):
    """``S_k`` as an operator reads it: lazily, only the parts it asks for
    (:class:`sluice.state.StoredState` reads them from the checkpoint store)."""

    @property
    def parts(self) -> tuple[StatePart, ...]: ...

    @property
    def rows(self) -> int:
        """Live rows (windows open, keys holding state)."""
        ...

    @property
    def horizon_us(self) -> int | None:
        """Windows that closed at or before it are gone (:class:`StateRef`)."""
        ...

    @property
    def location(self) -> str | None:
        """The URI of the store the parts are under (None: no store, an empty state)."""
        ...

    @property
    def empty(self) -> bool: ...

    def frame(
        self,
        keep: Callable[[StatePart], bool] | None = None,
        where: Column | str | None = None,
    ) -> DataFrame | None:
        """The rows of the parts ``keep`` selects (all by default), in the operator's column
        order, filtered by ``where``. None: no part left."""
        ...

    def needs_compaction(self) -> bool: ...


@dataclass(frozen=True)
class SourceInput:
    """One source's part of an epoch: its rows (RECORD_COLUMNS then its schema's columns)
    and what the protocol knows of them without reading them."""

    records: DataFrame
    source_uri: str  # where it reads from (named in dead letters)
    waiting: tuple[str, ...] = ()  # partitions with unread input after this epoch
    # lower bounds of the largest event time before each (partition, major) in this epoch,
    # known without reading the records (Parquet footers): {(partition, major): µs or None}
    before_hints: dict[tuple[str, int], int | None] = field(default_factory=dict)


def one_source(records: DataFrame, source_uri: str) -> dict[str, SourceInput]:
    """The inputs of an epoch of a pipeline's one source (named ``source``), read whole."""
    return {ONE_SOURCE: SourceInput(records, source_uri)}


S = TypeVar("S")  # the pipeline spec (the contracts do not know its type: sluice.spec does)


@dataclass(frozen=True)
class EpochInput(Generic[S]):
    """Everything an operator needs for one epoch: one :class:`SourceInput` per source the
    pipeline reads, by the spec's names (``sources.<name>``; a pipeline's one ``source:`` is
    ``source``), in the spec's order."""

    spark: SparkSession
    inputs: Mapping[str, SourceInput]
    spec: S
    carried: WatermarkState  # W_k per partition
    state: StateInput  # S_k
    epoch: int
    compact: bool = False  # write S_{k+1} as a full base
    # each lookup's table as the plan pinned it, by lookup name (sluice.operators.lookup)
    tables: dict[str, DataFrame] = field(default_factory=dict)

    @property
    def only(self) -> SourceInput:
        """The input of a pipeline that reads one source; an operator of several sources
        (a join) asks :attr:`inputs` by name instead."""
        if len(self.inputs) != 1:
            raise TypeError(
                f"this epoch reads {len(self.inputs)} sources ({', '.join(self.inputs)}): "
                "take each one's input from EpochInput.inputs by name"
            )
        return next(iter(self.inputs.values()))

    @property
    def records(self) -> DataFrame:
        """The one source's rows (:attr:`only`)."""
        return self.only.records

    @property
    def source_uri(self) -> str:
        return self.only.source_uri

    @property
    def waiting(self) -> tuple[str, ...]:
        return self.only.waiting

    @property
    def before_hints(self) -> dict[tuple[str, int], int | None]:
        return self.only.before_hints


class EpochOutput(Protocol):
    """An epoch's computed output; the process step drives it in the module's order."""

    @property
    def results(self) -> DataFrame:
        """The result columns plus ``_op`` and ``_epoch``."""
        ...

    @property
    def emitted(self) -> int | None:
        """Rows in ``results`` (None: counted by the write)."""
        ...

    @property
    def horizon(self) -> int | None:
        """Every window whose end plus the allowed lateness is at or before it has been
        emitted (the checkpoint's ``StateRef.horizon_us``); None: no such bound."""
        ...

    def state_update(self) -> StateUpdate | None: ...

    def state_written(self, part: StatePart) -> None:
        """The state update was written as ``part`` (an operator may keep facts about it in
        memory: the window operator indexes a delta's windows)."""
        ...

    def finish(self, emitted: int | None, state_rows: int | None) -> EpochFacts:
        """``emitted``: rows the result sinks wrote; ``state_rows``: rows the state update
        wrote (None: none written)."""
        ...

    def late(self) -> DataFrame: ...

    def dead(self) -> DataFrame: ...

    def release(self) -> None: ...


class Operator(Protocol[S]):
    """An epoch's computation over records and state (one per spec ``operator``)."""

    def run(self, inp: EpochInput[S], /) -> EpochOutput: ...

    def state_columns(self) -> list[str]: ...

    def current_state(self, state: StateInput) -> DataFrame | None:
        """The state's rows as one snapshot, every part folded (``sluice state``)."""
        ...

    def key_columns(self) -> list[str]:
        """The columns ``sluice state --key COLUMN=VALUE`` may filter on."""
        ...

    def view(self, frame: DataFrame, keys: Mapping[str, str] | None = None) -> DataFrame:
        """:meth:`current_state`'s rows as people read them (``sluice state``), only those
        whose key columns equal ``keys`` (compared as text): the operator alone knows its
        state's columns."""
        ...

    def align_state(
        self, frame: DataFrame, reset_aggregates: tuple[str, ...], reset_states: tuple[str, ...]
    ) -> DataFrame: ...
