"""A process function for the many-keys tests (copied next to a test spec, so the engine finds
it as ``many:process`` and ships it to the executors by value).

Per record: the key's running count and the values so far, and the dtype pandas gave the
``value`` column of the key's records (int64 unless the key has a null value in the epoch).
Each record registers a timer at 500 s into its 1000 s period, which only the next epoch's
watermark reaches: keys without records there run on their state row alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

PERIOD_US = 1_000_000_000
TIMER_AT_US = 500_000_000


def process(ctx: Any, records: Any) -> Iterator[dict[str, Any]]:
    count, values = ctx.state("count"), ctx.state("values")
    dtype = str(records["value"].dtype)
    for r in ctx.each(records):
        value = None if pd.isna(r.value) else int(r.value)
        seen = (count.value() or 0) + 1
        count.update(seen)
        if value is not None:
            values.add(value)
        us = ctx.timestamp.value // 1000
        ctx.timers.register(us // PERIOD_US * PERIOD_US + TIMER_AT_US)
        yield {
            "key": repr(ctx.key), "kind": "record", "value": value, "count": seen,
            "values": ",".join(map(str, values.get())),
            "dtype": f"{dtype}/{type(r.value).__name__}",  # the frame's and the row's
            "at": None,
        }  # fmt: skip


def on_timer(ctx: Any, when: Any) -> Iterator[dict[str, Any]]:
    yield {"key": repr(ctx.key), "kind": "timer", "value": None, "count": None,
           "values": None, "dtype": None, "at": when}  # fmt: skip
