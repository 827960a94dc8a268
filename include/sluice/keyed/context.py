"""What a keyed process function is called with: the key, its state, its timers, the time.

```python
def flat_map(ctx: KeyedContext, records: pandas.DataFrame):
    total = ctx.state("sum")                  # the ValueState declared as `sum`
    for record in ctx.each(records):          # per record: its event time and watermark
        current = total.value() or {"count": 0, "sum": 0}
        ...
        yield {"key": ctx.key, "average": current["sum"] // current["count"]}
```
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from sluice.keyed.state import StateHandle

__all__ = ["NO_WATERMARK", "KeyedContext", "Timers", "row_tuples", "to_micros"]

NO_WATERMARK = -(2**62)  # stands for "no watermark yet" in the int64 _wm column


def to_micros(when: Any) -> int:
    """Event time as integer microseconds since the Unix epoch (UTC): from a pandas
    Timestamp, a datetime (naive means UTC) or an int already in microseconds."""
    if isinstance(when, bool):
        raise TypeError(f"{when!r} is not a time")
    if isinstance(when, int):
        return when
    if hasattr(when, "value") and hasattr(when, "tz_localize"):  # pandas.Timestamp (ns)
        return int(when.value) // 1000
    if isinstance(when, datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        delta = when - datetime(1970, 1, 1, tzinfo=when.tzinfo)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    raise TypeError(f"{when!r} is not a time (use a datetime, a pandas.Timestamp or microseconds)")


def _timestamp(us: int | None) -> Any:
    if us is None:
        return None
    import pandas as pd

    return pd.Timestamp(us * 1000, tz=UTC)  # a tz object: a string is parsed every time


@lru_cache(maxsize=64)
def _row_type(columns: tuple[str, ...]) -> Any:
    """The namedtuple ``DataFrame.itertuples(index=False)`` makes for ``columns`` (made once:
    building the class is most of what itertuples costs for a few rows)."""
    from collections import namedtuple

    return namedtuple("Pandas", columns, rename=True)


def _itertuples(records: Any) -> Iterator[Any]:
    """``records.itertuples(index=False)``, the same values, without its per-call costs."""
    columns = tuple(records.columns)
    return row_tuples(columns, [records._ixs(k, axis=1) for k in range(len(columns))])


def row_tuples(columns: tuple[str, ...], arrays: list[Any]) -> Iterator[Any]:
    """The rows ``itertuples(index=False)`` makes of a frame with these columns, whose
    values (iterated, or ``Series.tolist()``: the same Python values) are ``arrays``."""
    if len(columns) >= 255:  # itertuples' own rule (index=False): plain tuples
        return zip(*arrays, strict=True)
    return map(_row_type(columns)._make, zip(*arrays, strict=True))


class Timers:
    """The key's event-time timers: ``register(t)``, ``delete(t)``, ``registered()``.

    A timer fires once, when the watermark reaches it: ``on_timer(ctx, t)`` is called with
    the key's state, in the epoch where that happens. Registering an existing time is a
    no-op (one timer per key and time, as in Flink)."""

    def __init__(self, times: list[int], enabled: bool) -> None:
        self._times = sorted(set(times))
        self._enabled = enabled

    def register(self, when: Any) -> None:
        if not self._enabled:
            raise RuntimeError("timers need an on_timer function: add process.on_timer to the spec")
        us = to_micros(when)
        at = bisect.bisect_left(self._times, us)
        if at == len(self._times) or self._times[at] != us:
            self._times.insert(at, us)

    def delete(self, when: Any) -> None:
        us = to_micros(when)
        at = bisect.bisect_left(self._times, us)
        if at < len(self._times) and self._times[at] == us:
            del self._times[at]

    def registered(self) -> list[Any]:
        return [_timestamp(t) for t in self._times]

    # -- engine side --------------------------------------------------------------------

    def next_due(self, watermark_us: int | None) -> int | None:
        """The earliest timer at or before ``watermark_us`` (removed), else None."""
        if watermark_us is None or not self._times or self._times[0] > watermark_us:
            return None
        return self._times.pop(0)

    def earliest(self) -> int | None:
        return self._times[0] if self._times else None

    def snapshot(self) -> list[int]:
        return list(self._times)


class KeyedContext:
    """One key's view while its function runs.

    ``key``: the key value (a tuple when ``key_by`` names several columns, None without
    keys); ``state(name)``: a declared state; ``timers``; ``timestamp``: the event time
    writes are stamped with (the current record in :meth:`each`, else the newest record of
    the batch, or the firing timer's time); ``watermark``: the watermark TTL expiry is
    checked against (the current record's position watermark in :meth:`each`, else the
    batch's first; a firing timer's own time; None before any)."""

    def __init__(
        self,
        key: Any,
        states: dict[str, StateHandle],
        timers: Timers,
        pipeline: str,
        epoch: int,
    ) -> None:
        self.key = key
        self._states = states
        self.timers = timers
        self.pipeline = pipeline
        self.epoch = epoch
        self.now_us = 0
        self.watermark_us: int | None = None
        # set by the engine around each call: the batch's event times and position
        # watermarks, and how to fire the timers a watermark reaches
        self._times: tuple[Any, Any] = ((), ())
        self._fire: Callable[[int | None], None] | None = None
        # the frame the function was called with and its rows as ``each`` yields them,
        # made by the engine from the whole batch (None: from the frame itself)
        self._tuples: tuple[Any, Callable[[], list[Any]]] | None = None

    def each(self, records: Any) -> Iterator[Any]:
        """The batch's records one by one (namedtuples), in source order. While a record is
        current, ``timestamp`` is its event time and ``watermark`` the watermark at its
        position, and timers that watermark reaches fire before it — exactly as if the
        function were called once per record, so the output does not depend on where
        epochs end."""
        times, marks = self._times
        if len(records) != len(times):
            raise ValueError("ctx.each() takes the records the function was called with")
        given = self._tuples
        rows = given[1]() if given is not None and records is given[0] else _itertuples(records)
        for n, row in enumerate(rows):
            mark = int(marks[n])
            watermark = None if mark == NO_WATERMARK else mark
            if self._fire is not None:
                self._fire(watermark)
            self.now_us, self.watermark_us = int(times[n]), watermark
            yield row

    def state(self, name: str) -> Any:
        try:
            return self._states[name]
        except KeyError:
            declared = sorted(self._states) or "none"
            raise KeyError(
                f"pipeline {self.pipeline}: no state named {name!r} (declared: {declared}); "
                "declare it under process.state in the spec"
            ) from None

    @property
    def timestamp(self) -> Any:
        return _timestamp(self.now_us)

    @property
    def watermark(self) -> Any:
        return _timestamp(self.watermark_us)
