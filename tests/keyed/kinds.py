"""A process function using every state kind, TTL and timers (copied next to a test spec, so
the engine finds it as ``kinds:process`` and ships it to the executors by value)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

TIMER_DELAY = pd.Timedelta(seconds=10)


def process(ctx: Any, records: Any) -> Iterator[dict[str, Any]]:
    last, history = ctx.state("last"), ctx.state("history")
    total, tags = ctx.state("total"), ctx.state("tags")
    for r in ctx.each(records):
        before = last.value()
        last.update(r.value)
        history.add(r.value)
        total.add(r.value)
        tags.put(r.tag, tags.get(r.tag, 0) + 1)
        ctx.timers.register(ctx.timestamp + TIMER_DELAY)
        if r.value % 7 == 0:
            ctx.timers.delete(ctx.timestamp + TIMER_DELAY)
        yield {
            "user": ctx.key, "kind": "record", "at": r.ts, "value": r.value, "last": before,
            "n": len(history.get()), "total": total.get(), "tag_count": tags.get(r.tag),
        }  # fmt: skip


def on_timer(ctx: Any, when: Any) -> Iterator[dict[str, Any]]:
    history = ctx.state("history")
    yield {
        "user": ctx.key, "kind": "timer", "at": when, "value": None,
        "last": ctx.state("last").value(), "n": len(history.get()),
        "total": ctx.state("total").get(), "tag_count": None,
    }  # fmt: skip
    if len(history.get()) > 5:
        history.clear()


def add(a: int, b: int) -> int:
    return a + b
