"""What every window kind's strategy answers (bytewax's ``Windower`` → logic pattern): the
lateness rule, how an epoch's accepted records become partials, how partials merge, which
path an epoch takes and what the state keeps. The epoch code (:mod:`sluice.windows.operator`,
:mod:`sluice.windows.snapshot`) asks the strategy and never switches on the kind.

A strategy is given its window config (plain data, :mod:`sluice.spec.components.windows`) and
the few pipeline values it needs (:class:`Pipeline`), never the whole spec; the registry in
:mod:`sluice.windows.kinds` maps each config class to its strategy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar

from pyspark.sql import functions as F

from sluice.jvm.udfs import aggregate, select
from sluice.operators.assigners import N, fmod
from sluice.operators.base import quoted
from sluice.operators.sqltext import Sql, col, when
from sluice.spec.components.base import WindowConfig
from sluice.windows.aggregates import merge_sql, partial_names

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from sluice.operators.records import Classification
    from sluice.spec.model import AggregateSpec

__all__ = ["Pipeline", "WindowKind", "fmod", "gap_groups"]

W = TypeVar("W", bound=WindowConfig)


TS, WM = col("_ts_us"), col("_wm")


def gap_groups(frame: DataFrame, keys: list[str]) -> DataFrame:
    """``_gid``: per key, rows whose ``[_ws, _we)`` intervals overlap or touch (transitively)
    share it — Flink's session merging (``TimeWindow.intersects``: ``[a, b)`` and ``[b, c)``
    merge)."""
    by = f"PARTITION BY {', '.join(quoted(k) for k in keys)} " if keys else ""
    order = f"{by}ORDER BY _ws, _we"
    before = f"max(_we) OVER ({order} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
    starts = f"CASE WHEN {before} IS NULL OR _ws > {before} THEN 1 ELSE 0 END AS _starts"
    running = f"sum(_starts) OVER ({order} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
    columns = [quoted(c) for c in frame.columns]
    return select(select(frame, "*", starts), *columns, f"{running} AS _gid")


@dataclass(frozen=True)
class Pipeline:
    """The pipeline values a window kind needs: the key columns, the allowed lateness, the
    emit mode and the aggregates (whose partials the state keeps)."""

    keys: tuple[str, ...]
    lateness_us: int
    emit: Literal["on_close", "on_update"]
    aggregates: tuple[AggregateSpec, ...]


class WindowKind(Generic[W]):
    """What every kind provides. ``window``: its config; ``pipeline``: the pipeline values
    it needs."""

    name: ClassVar[str]
    # The state takes deltas: an epoch folds only the windows it touched (the incremental
    # epoch, sluice.windows.operator). False: the state is folded whole each epoch and
    # written as a new base (sluice.windows.snapshot): the kind needs every stored row of a
    # touched key to place a record (a count window's sequence number, a cut point).
    incremental: ClassVar[bool] = True
    # A window's bounds may change in a later epoch (sessions): the stored fragments of a key
    # are merged with the epoch's every time, so a window's fate is known only after merging.
    merges_across_epochs: ClassVar[bool] = False
    # State columns between the window's keys and the partials.
    extra_state_columns: ClassVar[tuple[str, ...]] = ()
    # Result columns after window_start and window_end (SQL over a merged window).
    extra_result_sql: ClassVar[tuple[str, ...]] = ()

    def __init__(self, window: W, pipeline: Pipeline) -> None:
        self.window = window
        self.keys = list(pipeline.keys)
        self.lateness_us = pipeline.lateness_us
        self.emit = pipeline.emit
        self.aggregates = pipeline.aggregates

    @classmethod
    def of(cls, window: W, pipeline: Pipeline) -> WindowKind[Any]:
        """The strategy for ``window`` (a kind may pick a variant from its config)."""
        return cls(window, pipeline)

    # -- the lateness rule (None: never late) ---------------------------------------------

    def lateness(self) -> Any:
        return self

    def late(self, ts: Sql, wm: Sql) -> Sql:
        return self.last_close(ts) <= wm

    def missed(self, ts: Sql, wm: Sql) -> Sql:
        return when((self.late(ts, wm), 1), otherwise=0)

    def first_close(self, ts: N) -> N:
        raise NotImplementedError

    def last_close(self, ts: N) -> N:
        raise NotImplementedError

    # -- what the epoch does -------------------------------------------------------------------

    @property
    def deletes_replaced(self) -> bool:
        """on_update windows that merge across epochs: a window emitted before that a merge
        replaced gets a ``delete`` row."""
        return self.emit == "on_update" and self.merges_across_epochs

    @property
    def reads_only_closing_state(self) -> bool:
        """Incremental on_close windows whose bounds never change: an epoch's results need
        only the state's rows of the windows that close now, not the whole state folded."""
        return self.incremental and self.emit == "on_close" and not self.merges_across_epochs

    @property
    def uses_window_index(self) -> bool:
        """The epoch's open windows are matched against the stored ones by identity, so a
        process that ran the pipeline before counts them from the windows indexes
        (:mod:`sluice.windows.index`) — on_close windows whose bounds never change."""
        return self.reads_only_closing_state

    # -- state and results -----------------------------------------------------------------------

    def window_keys(self) -> list[str]:
        """The columns that identify one window of one key."""
        return [*self.keys, "_ws", "_we"]

    def state_columns(self) -> list[str]:
        """The columns of a state row, in order."""
        return [*self.window_keys(), *self.extra_state_columns, *partial_names(self.aggregates)]

    def window_sql(self) -> list[str]:
        """A result row's window columns, as SQL over a merged window."""
        bounds = ["timestamp_micros(_ws) AS window_start", "timestamp_micros(_we) AS window_end"]
        return [*bounds, *self.extra_result_sql]

    # -- partials ---------------------------------------------------------------------------

    def epoch_partials(self, classified: DataFrame, types: dict[str, str]) -> DataFrame:
        """The accepted records folded into partials, one row per state key (incremental
        kinds)."""
        raise NotImplementedError

    def missed_windows(self, classified: DataFrame) -> DataFrame:
        """One row per (record, window it missed): position, ``_ws``, ``_we``, ``_wm``."""
        raise NotImplementedError

    def merge(self, rows: DataFrame, types: dict[str, str]) -> DataFrame:
        """Rows of the state and the epoch folded per window (``_new``: the epoch touched it;
        ``_old``: the state had it)."""
        return aggregate(
            rows,
            [quoted(k) for k in self.window_keys()],
            [*merge_sql(self.aggregates, types), "max(_new) AS _new", "max(_old) AS _old"],
        )

    def snapshot(
        self, classified: Classification, state: DataFrame | None, cached: list[DataFrame]
    ) -> tuple[DataFrame, DataFrame, DataFrame | None]:
        """Kinds that are not :attr:`incremental`: the epoch's records folded with the whole
        ``state`` — (every window with ``_fate`` (:mod:`sluice.windows.snapshot`), the next
        state, on_update deletes or None). Frames it caches go to ``cached``."""
        raise NotImplementedError

    # -- ``sluice state`` ------------------------------------------------------------------------

    def view(self, frame: DataFrame, aggregates: list[Column]) -> DataFrame:
        """The state's rows as people read them (``aggregates``: the finalised aggregates)."""
        keys = [F.col(f"`{k}`") for k in self.keys]
        return frame.select(
            *keys,
            F.timestamp_micros("_ws").alias("window_start"),
            F.timestamp_micros("_we").alias("window_end"),
            *self.view_columns(),
            *aggregates,
        ).orderBy("window_start", *self.keys)

    def view_columns(self) -> list[Column]:
        """Columns the state view shows after the window bounds."""
        return []
