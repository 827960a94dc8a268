"""Each join type's rules (a spec's ``join.type``): when a record is late, when a row waiting
in the state expires, which rows of the two sides pair. The join operator
(:mod:`sluice.joins.operator`) asks its type and never switches on it; a new type is a class
here and its line in :data:`JOIN_TYPES` (and its spec section).

Windows are assigned by the window operator's own assigner
(:class:`~sluice.operators.assigners.SlidingAssigner`): a window join's windows are exactly
the windows a windowed aggregate of the same size and slide has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sluice.operators.assigners import SlidingAssigner
from sluice.operators.sqltext import Sql

if TYPE_CHECKING:
    from sluice.spec.model import JoinSpec

__all__ = ["JOIN_TYPES", "IntervalJoin", "JoinType", "RegularJoin", "WindowJoin", "join_type"]

LEFT, RIGHT = 0, 1  # a state row's side (``_side``)


class JoinType:
    """A join type's rules. The default lateness: a record behind its side's watermark is late
    (a row it could match may have left the state); the lateness rule of every operator's pass
    (:class:`~sluice.operators.records.Lateness`)."""

    # the windows rows are joined in (None: no windows, the rows' own event times)
    assigner: SlidingAssigner | None = None

    def late(self, ts: Sql, wm: Sql) -> Sql:
        return Sql(f"({ts} < {wm})")

    def missed(self, ts: Sql, wm: Sql) -> Sql:
        return Sql(f"CASE WHEN {self.late(ts, wm)} THEN 1 ELSE 0 END")

    def first_close(self, ts: int) -> int:
        return ts + 1

    def expiry(self, ws: str, side: int) -> str:
        """SQL of the watermark past which no row of the other side can match a row of
        ``side`` (``_exp``), over ``_ts_us`` and the row's window start ``ws``."""
        raise NotImplementedError

    def condition(self) -> str:
        """SQL of the time term two rows ``l`` and ``r`` (their ``_ts``, ``_ws``) pair by,
        besides equal keys."""
        raise NotImplementedError


class WindowJoin(JoinType):
    """Rows in the same tumbling / hopping window; late once every window of it closed."""

    def __init__(self, join: JoinSpec) -> None:
        assert join.window is not None
        self.assigner = SlidingAssigner(join.window.size_us, join.window.slide_us)

    def late(self, ts: Sql, wm: Sql) -> Sql:
        assert self.assigner is not None
        last_end = self.assigner.last_start(ts) + self.assigner.size
        return Sql(f"({last_end} <= {wm})")  # every window of it closed

    def first_close(self, ts: int) -> int:
        assert self.assigner is not None
        return self.assigner.first_start(ts) + self.assigner.size

    def expiry(self, ws: str, side: int) -> str:
        assert self.assigner is not None
        return f"{ws} + {self.assigner.size}L - 1"

    def condition(self) -> str:
        return "l._ws = r._ws"


class IntervalJoin(JoinType):
    """``r.ts`` within ``[l.ts + lower, l.ts + upper]``."""

    def __init__(self, join: JoinSpec) -> None:
        assert join.lower_us is not None and join.upper_us is not None
        self.lower, self.upper = join.lower_us, join.upper_us

    def expiry(self, ws: str, side: int) -> str:
        return f"_ts_us + {self.upper}L" if side == LEFT else f"_ts_us - ({self.lower}L)"

    def condition(self) -> str:
        return f"r._ts BETWEEN l._ts + ({self.lower}L) AND l._ts + ({self.upper}L)"


class RegularJoin(JoinType):
    """Any two rows at most ``ttl`` apart in event time (the state's time to live)."""

    def __init__(self, join: JoinSpec) -> None:
        assert join.ttl_us is not None
        self.ttl = join.ttl_us

    def expiry(self, ws: str, side: int) -> str:
        return f"_ts_us + {self.ttl}L"

    def condition(self) -> str:
        return f"abs(l._ts - r._ts) <= {self.ttl}L"


# Each ``join.type`` of a spec, and the rules it joins by.
JOIN_TYPES: dict[str, Callable[[JoinSpec], JoinType]] = {
    "window": WindowJoin,
    "interval": IntervalJoin,
    "regular": RegularJoin,
}


def join_type(join: JoinSpec) -> JoinType:
    """The rules of ``join``'s type."""
    return JOIN_TYPES[join.type](join)
