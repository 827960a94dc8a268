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
from dataclasses import dataclass

from sluice.contracts.records import WatermarkState

__all__ = ["Run", "WatermarkState", "exact_before", "verify_runs"]  # WatermarkState: re-export


@dataclass(frozen=True)
class Run:
    """What one split read of one partition and major position, in read order: its first and
    last line and the extreme event times of its valid records (``low``/``high`` None: it had
    none). ``split``: the line it begins at (see ``io.sluice.spark.Runs``)."""

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
