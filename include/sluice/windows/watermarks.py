"""Bounded out-of-orderness watermarks, tracked per source partition.

The watermark *at a record's position* is the running maximum of the event times of the
records before it in its partition, minus the bound. It depends only on the input order, never
on where epochs are cut — which is what makes the lateness decision split-invariant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CHUNK_LINES", "Chunk", "WatermarkState", "chunk_bounds", "prefix_maxima"]

# Positions are cut into chunks of this many lines (per partition and major) to decide, on the
# driver, which records need their exact watermark (see chunk_bounds).
CHUNK_LINES = 1024


@dataclass(frozen=True)
class WatermarkState:
    """Largest event time seen so far in each partition (microseconds since the epoch)."""

    max_event_time_us: dict[str, int] = field(default_factory=dict)
    # Partitions the source lists with input still unread that have never shown an event
    # time: they hold the global watermark back (a partition is not overtaken before it
    # starts), so results do not depend on which epoch a partition's first file falls in.
    pending: tuple[str, ...] = ()

    def watermark_us(self, bound_us: int, idle_timeout_us: int | None = None) -> int | None:
        """Global watermark: min over the active partitions of (max event time - bound).

        With ``idle_timeout_us``, a partition whose max event time is more than that behind
        the max of all partitions is idle and does not hold the watermark back.
        """
        if not self.max_event_time_us or self.pending:
            return None
        newest = max(self.max_event_time_us.values())
        active = [
            v
            for v in self.max_event_time_us.values()
            if idle_timeout_us is None or newest - v <= idle_timeout_us
        ]
        return min(active) - bound_us

    def advanced(
        self, maxima: Iterable[tuple[str, int]], waiting: Iterable[str] = ()
    ) -> WatermarkState:
        """After an epoch: the new per-partition maxima, and ``waiting`` — the partitions the
        source still has unread input for — of which those never seen become pending."""
        merged = dict(self.max_event_time_us)
        for partition, value in maxima:
            merged[partition] = max(value, merged.get(partition, value))
        pending = tuple(sorted({p for p in waiting if p not in merged}))
        return WatermarkState(merged, pending)

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"max_event_time_us": dict(sorted(self.max_event_time_us.items()))}
        if self.pending:
            body["pending"] = list(self.pending)
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WatermarkState:
        maxima = {str(k): int(v) for k, v in data.get("max_event_time_us", {}).items()}
        return cls(maxima, tuple(str(p) for p in data.get("pending", ())))


def prefix_maxima(
    carried: WatermarkState, maxima: list[tuple[str, int, int]]
) -> list[tuple[str, int, int | None]]:
    """For each (partition, major, max) in the epoch, the largest event time *before* that
    major position: the carried maximum and the maxima of earlier majors in the partition."""
    result: list[tuple[str, int, int | None]] = []
    running: dict[str, int | None] = dict(carried.max_event_time_us)
    for partition, major, value in sorted(maxima):
        before = running.get(partition)
        result.append((partition, major, before))
        running[partition] = value if before is None else max(before, value)
    return result


@dataclass(frozen=True)
class Chunk:
    """Lines ``[chunk * CHUNK_LINES + 1, (chunk + 1) * CHUNK_LINES]`` of one major of one
    partition: the smallest and largest event time there (records without one left out)."""

    partition: str
    major: int
    chunk: int
    low: int
    high: int


def chunk_bounds(
    carried: WatermarkState,
    chunks: Iterable[Chunk],
    bound_us: int,
    floor_us: int | None,
    first_close: Callable[[int], int] | None,
) -> list[tuple[str, int, int, int | None, bool]]:
    """For each chunk: (partition, major, chunk, largest event time before it, exact).

    The watermark at any position in a chunk lies between that before-value and the one
    through the chunk's end (each minus ``bound_us``, floored by ``floor_us``). A chunk is
    *exact* — its records need their own watermark, from a window over the chunk — unless
    even the upper value stays below ``first_close(low)``: the smallest watermark at which a
    window of the chunk's earliest record closes for it (``first_close`` is monotone, so no
    record there is late or misses a window). ``first_close`` None: every chunk is exact.
    In-order input rarely crosses a window boundary inside a chunk, so most records skip the
    sort a window function needs."""
    result: list[tuple[str, int, int, int | None, bool]] = []
    running: dict[str, int] = dict(carried.max_event_time_us)
    for c in sorted(chunks, key=lambda c: (c.partition, c.major, c.chunk)):
        before = running.get(c.partition)
        through = c.high if before is None else max(before, c.high)
        upper = through - bound_us if floor_us is None else max(through - bound_us, floor_us)
        exact = first_close is None or first_close(c.low) <= upper
        result.append((c.partition, c.major, c.chunk, before, exact))
        running[c.partition] = through
    return result
