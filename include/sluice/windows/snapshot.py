"""Window kinds that are not incremental (count windows, sessions with ``max_duration``): a
full snapshot of the state each epoch.

They need every state row of a touched key to place a record (a count window's sequence
number, a capped session's cut points), so their state is folded whole each epoch (the
kind's :meth:`~sluice.windows.strategy.WindowKind.snapshot`) and written as a new base. The
pass, the results and the snapshot are three jobs: the merged windows are cached once and
counted per fate (:data:`OPEN`, :data:`EMIT`, :data:`QUIET`, :data:`UPDATED`) as they are
built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark import StorageLevel
from pyspark.sql import Column
from pyspark.sql import functions as F

from sluice.contracts.operators import EpochFacts, EpochInput, StateUpdate
from sluice.jvm.udfs import Ledger, counted, counting
from sluice.operators.records import EXACT, Classification, PassFacts, classify, dead_rows
from sluice.windows.common import late_rows, operator_columns, result_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sluice.contracts.records import StatePart
    from sluice.spec.model import PipelineSpec
    from sluice.windows.strategy import WindowKind

__all__ = ["EMIT", "OPEN", "QUIET", "UPDATED", "fate", "flag", "snapshot_epoch"]

# a merged window's fate: stays open; is emitted and leaves; leaves silently; is emitted and
# stays open (on_update: touched, not closed)
OPEN, EMIT, QUIET, UPDATED = 0, 1, 2, 3


def snapshot_epoch(spec: PipelineSpec, kind: WindowKind[Any], inp: EpochInput) -> SnapshotEpoch:
    lateness = kind.lateness()
    columns = operator_columns(spec)
    epoch = SnapshotEpoch.start(kind, inp, classify(inp, lateness, columns))
    if not epoch.facts.exact:
        epoch.release()
        exact = classify(inp, lateness, columns, mode=EXACT, runs=epoch.facts.runs)
        epoch = SnapshotEpoch.start(kind, inp, exact)
    return epoch


@dataclass
class SnapshotEpoch:
    kind: WindowKind[Any]
    inp: EpochInput
    cls: Classification
    facts: PassFacts
    merged: DataFrame  # every window with _fate, cached
    fates: Ledger
    next_state: DataFrame
    deletes: DataFrame | None
    cached: list[DataFrame] = field(default_factory=list)
    emitted: int | None = None

    @property
    def horizon(self) -> int | None:
        """The state is folded whole each epoch: no bound to skip by."""
        return None

    def state_written(self, part: StatePart) -> None:
        """Nothing kept about the parts."""

    @classmethod
    def start(
        cls, kind: WindowKind[Any], inp: EpochInput, classified: Classification
    ) -> SnapshotEpoch:
        cached: list[DataFrame] = []
        merged, next_state, deletes = kind.snapshot(classified, inp.state.frame(), cached)
        merged, ledger = counting(inp.spark, merged, "windows", "_fate")
        merged = merged.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(merged)
        if deletes is not None:
            deletes = deletes.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(deletes)
        merged.count()  # the windows merged with the state, cached (count windows: the pass)
        epoch = cls(kind, inp, classified, classified.facts(), merged, ledger, next_state,
                    deletes, cached)  # fmt: skip
        epoch.emitted = counted(ledger, EMIT) + counted(ledger, UPDATED)
        if deletes is not None:
            epoch.emitted += deletes.count()
        return epoch

    @property
    def results(self) -> DataFrame:
        emitted = self.merged.where(F.col("_fate").isin(EMIT, UPDATED))
        return result_rows(self.kind, emitted, self.cls.types, self.inp.epoch, self.deletes)

    def state_update(self) -> StateUpdate | None:
        return StateUpdate("base", self.next_state.select(*self.kind.state_columns()), None)

    def finish(self, emitted: int | None, state_rows: int | None = None) -> EpochFacts:
        still_open = counted(self.fates, OPEN) + counted(self.fates, UPDATED)
        facts = self.facts
        return EpochFacts(facts.counts, facts.watermark, facts.after_us,
                          emitted if emitted is not None else self.emitted or 0, still_open,
                          state_rows if state_rows is not None else still_open)  # fmt: skip

    def late(self) -> DataFrame:
        missed = self.kind.missed_windows(self.cls.frame)
        return late_rows(missed, self.cls.records, self.inp.spec, self.inp.epoch)

    def dead(self) -> DataFrame:
        return dead_rows(self.cls.records, self.inp.spec, self.inp.epoch, self.inp.source_uri)

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()
        self.cached.clear()


def flag(frame: DataFrame, new: bool) -> DataFrame:
    return frame.withColumn("_new", F.lit(new))


def fate(emit: str, closed: Column) -> Column:
    """A merged window's fate: emitted when closed (on_close) or touched (on_update)."""
    if emit == "on_close":
        return F.when(closed, F.lit(EMIT)).otherwise(F.lit(OPEN))
    touched = F.col("_new")
    return (
        F.when(closed, F.when(touched, F.lit(EMIT)).otherwise(F.lit(QUIET)))
        .when(touched, F.lit(UPDATED))
        .otherwise(F.lit(OPEN))
    )
