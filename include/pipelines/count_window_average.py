"""Flink's CountWindowAverage (the "State & Checkpointing" documentation) as a Sluice keyed
process function: a "poor man's counting window" that keeps (count, sum) per key in a
ValueState, emits the average every two records, then clears the state.

For key 1 with values 3, 5, 7, 4, 2 it emits (1, 4) and (1, 5) — under any split of the input
into epochs and after a crash anywhere (tests/keyed/). A reading without a value never reaches
the function: the spec's ``filter: value IS NOT NULL`` drops it first, as a Flink job filters
before ``keyBy`` (``int(None)``, or pandas' NaN for a key with a null, would fail the epoch on
every retry; tests/keyed/test_count_window_average.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def flat_map(ctx: Any, records: Any) -> Iterator[dict[str, int]]:
    """``records``: this key's records of the epoch, in source order (a pandas DataFrame)."""
    total = ctx.state("sum")  # ValueState of struct<count: long, sum: long>
    for record in ctx.each(records):
        current = total.value() or {"count": 0, "sum": 0}
        current = {"count": current["count"] + 1, "sum": current["sum"] + int(record.value)}
        total.update(current)
        if current["count"] >= 2:
            yield {"key": ctx.key, "average": current["sum"] // current["count"]}
            total.clear()
