"""Which windows an event time belongs to, shared by the window operator
(:mod:`sluice.windows.sliding`) and the window join (:mod:`sluice.joins.types`), so the two can
never disagree on a window's bounds.

Tumbling (``slide == size``) and hopping windows are ``[s, s + size)`` with ``s mod slide = 0``
and ``s <= t < s + size``. The arithmetic works on ints (the driver's checks) and on SQL text
(the pass) alike: :func:`fmod` is ``pmod`` in SQL.
"""

from __future__ import annotations

from typing import TypeVar

from sluice.operators.sqltext import Sql, call

__all__ = ["N", "SlidingAssigner", "fmod"]

N = TypeVar("N", int, Sql)


def fmod(value: N, step: int) -> N:
    """``value mod step`` rounded toward -inf (``pmod``), for ints and SQL alike."""
    if isinstance(value, Sql):
        return call("pmod", value, step)
    return value % step


class SlidingAssigner:
    """Tumbling and hopping windows of ``size`` microseconds every ``slide`` (None: tumbling)."""

    def __init__(self, size: int, slide: int | None = None) -> None:
        self.size = size
        self.slide = slide or size

    @property
    def tumbling(self) -> bool:
        return self.slide == self.size

    def last_start(self, ts: N) -> N:
        """The start of the latest window ``ts`` is in."""
        return ts - fmod(ts, self.slide)

    def first_start(self, ts: N) -> N:
        """The start of the earliest window ``ts`` is in."""
        base = ts - self.size
        return base - fmod(base, self.slide) + self.slide

    def starts(self, ts: Sql) -> str:
        """A select expression of every window start of ``ts``: one value (tumbling), or
        ``explode(...)``, a row per window (hopping)."""
        if self.tumbling:
            return str(self.last_start(ts))
        return f"explode({call('sequence', self.first_start(ts), self.last_start(ts), self.slide)})"
