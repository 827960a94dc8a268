"""One epoch of a stateless pipeline (no window, no process function): select, filter, append.

The pass *is* the result sink's write: classification (dead letters, filtered, accepted —
nothing is late, as no window can have closed) happens as the sink writes the accepted
records' output columns (``PipelineSpec.output_columns``), and the ledgers read afterwards
give the counts and the new watermark. One Spark job per epoch; dead letters, when the counts
say there are some, read their records again. There is no state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from sluice.contracts.operators import ACCEPTED, EpochFacts, EpochInput, StateUpdate
from sluice.jvm.udfs import select
from sluice.operators.base import quoted
from sluice.operators.records import Classification, classify, dead_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sluice.contracts.records import StatePart
    from sluice.spec.model import PipelineSpec

__all__ = ["StatelessOperator", "no_late_rows"]


class StatelessOperator:
    def __init__(self, spec: PipelineSpec) -> None:
        self.spec = spec

    def state_columns(self) -> list[str]:
        return []

    def key_columns(self) -> list[str]:
        return list(self.spec.key_by)

    def view(self, frame: DataFrame, keys: Mapping[str, str] | None = None) -> DataFrame:
        """Never asked: a stateless pipeline keeps no state to show."""
        return frame

    def align_state(
        self, frame: DataFrame, reset_aggregates: tuple[str, ...], reset_states: tuple[str, ...]
    ) -> DataFrame:
        return frame  # its plans carry none (a stateful one's is dropped on the switch)

    def current_state(self, state: Any) -> DataFrame | None:
        """The state's rows as one snapshot (``sluice state``)."""
        return state.frame()

    def run(self, inp: EpochInput) -> StatelessEpoch:
        columns = self.spec.output_columns()
        return StatelessEpoch(inp, classify(inp, None, columns), columns)


@dataclass
class StatelessEpoch:
    inp: EpochInput
    cls: Classification
    columns: tuple[str, ...]
    emitted: int | None = None  # counted by the write

    @property
    def horizon(self) -> int | None:
        """No state, no bound."""
        return None

    def state_written(self, part: StatePart) -> None:
        """No state."""

    @property
    def results(self) -> DataFrame:
        """The accepted records' output columns, plus ``_op`` and ``_epoch`` (which append
        sinks drop)."""
        accepted = self.cls.frame.where(f"_class = {ACCEPTED}")
        return select(accepted, *[quoted(c) for c in self.columns], "'upsert' AS _op", "_epoch")

    def state_update(self) -> StateUpdate | None:
        return None

    def finish(self, emitted: int | None, state_rows: int | None = None) -> EpochFacts:
        facts = self.cls.facts()
        accepted = facts.counts.accepted
        return EpochFacts(facts.counts, facts.watermark, facts.after_us, accepted, 0, 0)

    def late(self) -> DataFrame:
        return no_late_rows(self.cls.records, self.inp.spec, self.inp.epoch)

    def dead(self) -> DataFrame:
        return dead_rows(self.cls.records, self.inp.spec, self.inp.epoch, self.inp.source_uri)

    def release(self) -> None:
        return None


def no_late_rows(records: DataFrame, spec: PipelineSpec, epoch: int) -> DataFrame:
    """The late sink's frame of an operator under which no record is late (a process function
    sees every valid record; a stateless pipeline has no window to miss): empty, with the
    late-records columns, so every sink keeps one schema. No Spark job runs for it."""
    none = records.where(F.lit(False))
    return none.select(
        *[F.col(quoted(c)) for c, _ in spec.source.schema],
        F.lit(None).cast("timestamp").alias("window_start"),
        F.lit(None).cast("timestamp").alias("window_end"),
        F.lit(None).cast("timestamp").alias("watermark"),
        F.col("_file").alias("source_file"),
        F.col("_line").alias("source_line"),
        F.lit(epoch).cast("long").alias("epoch"),
    )
