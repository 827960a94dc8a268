"""Bounded out-of-orderness watermarks, tracked per source partition.

The watermark *at a record's position* is the running maximum of the event times of the
records before it in its partition, minus the bound. It depends only on the input order, never
on where epochs are cut — which is what makes the lateness decision split-invariant.

An epoch computes it without sorting (:mod:`sluice.operators.records`): Spark reads each file
split front to back, and a stateful UDF keeps the running maximum of the *run* it reads (the
rows of one partition and one major position — a file — that one task reads). A run's own
prefix is exact; what came before the run in the partition is only known up to a lower bound
when the pass starts (the checkpoint's maximum, Parquet footers). :func:`verify_runs` checks,
after the pass, that the bound used for each run could not have changed any record's class;
when it could have, the epoch is classified again with the exact prefix
(:data:`sluice.operators.records.EXACT`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Run", "WatermarkState", "exact_before", "verify_runs"]


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


@dataclass(frozen=True)
class Run:
    """What one split read of one partition and major position, in read order: its first and
    last line and the extreme event times of its valid records (``low``/``high`` None: it had
    none). ``split``: the file split's byte offset, or the task for sources that are not files."""

    partition: str
    major: int
    split: int
    first_line: int
    last_line: int
    low: int | None
    high: int | None


def exact_before(carried: WatermarkState, runs: Iterable[Run]) -> dict[Run, int | None]:
    """For each run, the largest event time before it in its partition: the carried maximum
    and every earlier run's (runs ordered by position)."""
    result: dict[Run, int | None] = {}
    running: dict[str, int | None] = dict(carried.max_event_time_us)
    for run in sorted(runs, key=lambda r: (r.partition, r.major, r.first_line)):
        before = running.get(run.partition)
        result[run] = before
        if run.high is not None:
            running[run.partition] = run.high if before is None else max(before, run.high)
    return result


def verify_runs(
    carried: WatermarkState,
    runs: Iterable[Run],
    used: Callable[[str, int], int | None],
    bound_us: int,
    floor_us: int | None,
    first_close: Callable[[int], int] | None,
) -> list[Run]:
    """The runs whose records may have been classified with a watermark other than their
    exact one (empty: the pass was exact).

    ``used(partition, major)`` is the lower bound the pass took for the maximum before a run.
    A bound above the exact value is always a problem (records could be late that are not).
    One below it only matters if the exact value could close a window of the run's earliest
    record: ``first_close(low)`` — the smallest watermark at which any window of a record at
    ``low`` closes for it, monotone in the event time — at or below the exact watermark
    before the run. ``first_close`` None: the operator never calls a record late."""
    suspect: list[Run] = []
    for run, before in exact_before(carried, runs).items():
        took = used(run.partition, run.major)
        if before == took or run.low is None or first_close is None:
            continue
        if before is None or (took is not None and took > before):
            suspect.append(run)
            continue
        exact = before - bound_us
        if floor_us is not None and exact <= floor_us:
            continue  # the floor (the watermark the epoch started from) decides either way
        if first_close(run.low) <= exact:
            suspect.append(run)
    return suspect
