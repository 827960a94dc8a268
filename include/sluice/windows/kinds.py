"""One strategy per window kind (bytewax's ``Windower`` → logic pattern): the frozen
:mod:`~sluice.spec.components.windows` config builds one of these classes; the class knows its
kind's lateness rule, how an epoch's accepted records become partials, and how partials merge.

The lateness rule of each kind is written once, in integer arithmetic that works on Python
ints (the driver's checks) and on Spark columns (the pass) alike (:func:`fmod`).

================  ==========================================  ==============================
kind              a record at ``t`` belongs to                late (at position watermark W)
================  ==========================================  ==============================
tumbling/hopping  ``[s, s + size)``, ``s mod slide = 0``,      every window missed:
                  ``s <= t < s + size``                       ``last end + lateness <= W``
session           ``[t, t + gap)``, merged per key with every  ``t + lateness <= W``
                  window it overlaps or touches
count             by position (never late)                    never
================  ==========================================  ==============================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from pyspark.sql import functions as F

from sluice.contracts.operators import ACCEPTED
from sluice.operators.base import quoted
from sluice.operators.sqltext import Sql, call, col, when
from sluice.windows.aggregates import merge_columns, partial_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sluice.spec.components.windows import HoppingWindow, SessionWindow, TumblingWindow
    from sluice.spec.model import PipelineSpec

__all__ = ["Counted", "Session", "Sliding", "WindowKind", "fmod", "kind_of"]

N = TypeVar("N", int, Sql)


def fmod(value: N, step: int) -> N:
    """``value mod step`` rounded toward -inf (``pmod``), for ints and SQL alike."""
    if isinstance(value, Sql):
        return call("pmod", value, step)
    return value % step


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
    return frame.selectExpr("*", starts).selectExpr("*", f"{running} AS _gid").drop("_starts")


class WindowKind:
    """What every kind provides; the spec's window config builds one (``build``)."""

    name: ClassVar[str]
    time_based: ClassVar[bool] = True

    def __init__(self, spec: PipelineSpec) -> None:
        self.spec = spec
        self.keys = list(spec.key_by)
        self.lateness_us = spec.event_time.allowed_lateness_us

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

    # -- partials ---------------------------------------------------------------------------

    def window_keys(self) -> list[str]:
        return [*self.keys, "_ws", "_we"]

    def epoch_partials(self, classified: DataFrame, types: dict[str, str]) -> DataFrame:
        """The accepted records folded into partials, one row per state key."""
        raise NotImplementedError

    def missed_windows(self, classified: DataFrame) -> DataFrame:
        """One row per (record, window it missed): position, ``_ws``, ``_we``, ``_wm``."""
        raise NotImplementedError

    def merge(self, rows: DataFrame, types: dict[str, str]) -> DataFrame:
        """Rows of the state and the epoch folded per window (``_new``: the epoch touched it;
        ``_old``: the state had it)."""
        return rows.groupBy(*[quoted(k) for k in self.window_keys()]).agg(
            *merge_columns(self.spec, types),
            F.expr("max(_new) AS _new"),
            F.expr("max(_old) AS _old"),
        )


class Sliding(WindowKind):
    """Tumbling (``slide == size``) and hopping windows."""

    name = "sliding"

    def __init__(self, spec: PipelineSpec) -> None:
        super().__init__(spec)
        window = cast("TumblingWindow | HoppingWindow", spec.windowing)
        self.size = window.size_us
        self.slide = window.slide_us or self.size

    def last_start(self, ts: N) -> N:
        return ts - fmod(ts, self.slide)

    def first_start(self, ts: N) -> N:
        base = ts - self.size
        return base - fmod(base, self.slide) + self.slide

    def first_close(self, ts: N) -> N:
        return self.first_start(ts) + self.size + self.lateness_us

    def last_close(self, ts: N) -> N:
        return self.last_start(ts) + self.size + self.lateness_us

    @property
    def tumbling(self) -> bool:
        return self.slide == self.size

    def _last_missed_start(self, wm: Sql) -> Sql:
        """The latest start whose window closed at ``wm`` (any multiple of slide)."""
        t = wm - (self.size + self.lateness_us)
        return t - fmod(t, self.slide)

    def missed(self, ts: Sql, wm: Sql) -> Sql:
        if self.tumbling:
            return super().missed(ts, wm)
        first, last = self.first_start(ts), self.last_start(ts)
        upper = call("least", last, self._last_missed_start(wm))
        count = Sql(f"CAST(floor({upper - first} / {self.slide}) AS INT) + 1")
        return when((wm.not_null() & (upper >= first), count), otherwise=0)

    def _starts(self, classified: DataFrame, missed: bool) -> DataFrame:
        """Each record with ``_ws`` for every window it missed (``missed``) or entered."""
        if self.tumbling:
            frame = classified.selectExpr("*", self.last_start(TS).alias("_ws"))
        else:
            starts = call("sequence", self.first_start(TS), self.last_start(TS), self.slide)
            frame = classified.selectExpr("*", f"explode({starts}) AS _ws")
        closed = WM.not_null() & (col("_ws") + (self.size + self.lateness_us) <= WM)
        return frame.where(str(closed if missed else ~closed))

    def epoch_partials(self, classified: DataFrame, types: dict[str, str]) -> DataFrame:
        accepted = classified.where(f"_class = {ACCEPTED}")
        windows = self._starts(accepted, missed=False)
        partials = windows.groupBy(*[quoted(k) for k in self.keys], "_ws").agg(
            *partial_columns(self.spec, types)
        )
        return partials.selectExpr("*", f"_ws + {self.size} AS _we")

    def missed_windows(self, classified: DataFrame) -> DataFrame:
        exposed = classified.where("_class <= 1 AND _wm IS NOT NULL")
        rows = self._starts(exposed, missed=True)
        return rows.selectExpr("*", f"_ws + {self.size} AS _we")


class Session(WindowKind):
    """Gap sessions, merged per key (``max_duration`` cuts: :class:`CappedSession`)."""

    name = "session"

    def __init__(self, spec: PipelineSpec) -> None:
        super().__init__(spec)
        self.gap = cast("SessionWindow", spec.windowing).gap_us

    def first_close(self, ts: N) -> N:
        return ts + self.lateness_us

    def last_close(self, ts: N) -> N:
        return ts + self.lateness_us

    def _records(self, classified: DataFrame) -> DataFrame:
        accepted = classified.where(f"_class = {ACCEPTED}")
        return accepted.selectExpr("*", "_ts_us AS _ws", f"_ts_us + {self.gap} AS _we")

    def epoch_partials(self, classified: DataFrame, types: dict[str, str]) -> DataFrame:
        """The epoch's sessions (fragments of the final ones): the accepted records of each
        key merged by gap, one row each."""
        grouped = gap_groups(self._records(classified), self.keys)
        return grouped.groupBy(*[quoted(k) for k in self.keys], "_gid").agg(
            F.expr("min(_ws) AS _ws"), F.expr("max(_we) AS _we"),
            *partial_columns(self.spec, types),
        ).drop("_gid")  # fmt: skip

    def missed_windows(self, classified: DataFrame) -> DataFrame:
        late = classified.where("_class = 1")
        return late.selectExpr("*", "_ts_us AS _ws", f"_ts_us + {self.gap} AS _we")

    def merge(self, rows: DataFrame, types: dict[str, str]) -> DataFrame:
        """Every session of a key that overlaps or touches another merges into one."""
        return (
            gap_groups(rows, self.keys)
            .groupBy(*[quoted(k) for k in self.keys], "_gid")
            .agg(
                F.expr("min(_ws) AS _ws"), F.expr("max(_we) AS _we"),
                *merge_columns(self.spec, types),
                F.expr("max(_new) AS _new"), F.expr("max(_old) AS _old"),
            )
            .drop("_gid")
        )  # fmt: skip


class Counted(WindowKind):
    """Count windows: per key, the i-th accepted record (in position order) belongs to the
    windows j with ``j*slide <= i < j*slide + count``; never late."""

    name = "count"
    time_based = False

    def lateness(self) -> Any:
        return None

    def window_keys(self) -> list[str]:
        return [*self.keys, "_wi"]


def kind_of(spec: PipelineSpec) -> WindowKind:
    kind: WindowKind = spec.windowing.build(spec)
    return kind
