"""Tumbling (``slide == size``) and hopping windows: ``[s, s + size)`` with ``s mod slide = 0``
and ``s <= t < s + size``; a record is late once every window it belongs to closed
(``last end + lateness <= W``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.contracts.operators import ACCEPTED
from sluice.jvm.udfs import aggregate, select
from sluice.operators.assigners import SlidingAssigner, fmod
from sluice.operators.base import quoted
from sluice.operators.sqltext import Sql, call, col, when
from sluice.spec.components.windows import HoppingWindow, TumblingWindow
from sluice.windows.aggregates import partial_sql
from sluice.windows.strategy import TS, WM, N, Pipeline, WindowKind

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Sliding"]


class Sliding(WindowKind[TumblingWindow | HoppingWindow]):
    """Tumbling (``slide == size``) and hopping windows."""

    name = "sliding"

    def __init__(self, window: TumblingWindow | HoppingWindow, pipeline: Pipeline) -> None:
        super().__init__(window, pipeline)
        self.assigner = SlidingAssigner(window.size_us, window.slide_us)
        self.size, self.slide = self.assigner.size, self.assigner.slide

    def last_start(self, ts: N) -> N:
        return self.assigner.last_start(ts)

    def first_start(self, ts: N) -> N:
        return self.assigner.first_start(ts)

    def first_close(self, ts: N) -> N:
        return self.first_start(ts) + self.size + self.lateness_us

    def last_close(self, ts: N) -> N:
        return self.last_start(ts) + self.size + self.lateness_us

    @property
    def tumbling(self) -> bool:
        return self.assigner.tumbling

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
        frame = select(classified, "*", f"{self.assigner.starts(TS)} AS _ws")
        closed = WM.not_null() & (col("_ws") + (self.size + self.lateness_us) <= WM)
        return frame.where(str(closed if missed else ~closed))

    def epoch_partials(self, classified: DataFrame, types: dict[str, str]) -> DataFrame:
        accepted = classified.where(f"_class = {ACCEPTED}")
        windows = self._starts(accepted, missed=False)
        partials = aggregate(
            windows, [*[quoted(k) for k in self.keys], "_ws"], partial_sql(self.aggregates, types)
        )
        return select(partials, "*", f"_ws + {self.size} AS _we")

    def missed_windows(self, classified: DataFrame) -> DataFrame:
        exposed = classified.where("_class <= 1 AND _wm IS NOT NULL")
        rows = self._starts(exposed, missed=True)
        return select(rows, "*", f"_ws + {self.size} AS _we")
