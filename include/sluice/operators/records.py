"""One epoch's records, classified in the pass that reads them: the part every operator shares.

1. derive the ``select:`` columns and ``filter:`` (an expression that raises makes the record a
   dead letter, see :mod:`sluice.operators.expressions`);
2. take each valid record's event time ``_ts_us`` and its watermark at its position ``_wm``:
   ``PositionMax`` keeps the running maximum of the run a task reads (no sort), on top of a
   lower bound for what came before the run (:mod:`sluice.operators.watermarks`);
3. classify — dead letter, filtered, late (by the operator's :class:`Lateness`) or accepted —
   and count each class per run as the rows go by (``ClassTally``).

Nothing runs here: the operator's own action runs the pass, then :meth:`Classification.facts`
reads the two ledgers (counts, per-partition maxima) and checks that the bounds the pass took
could not have changed a class (:func:`~sluice.operators.watermarks.verify_runs`); when they
could have, the operator classifies again with :data:`EXACT` watermarks: the first pass's runs
give the exact maximum before each file (major position) of a partition, and a window function
over each file in line order the rest (slower, always right). The files run in parallel: a
window over a whole partition would put all of a files source's epoch in one task (its
``_partition`` is a literal, which Spark drops from the window's partitioning).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pyspark.errors import AnalysisException
from pyspark.sql import Column
from pyspark.sql import functions as F

from sluice.contracts.operators import (
    ACCEPTED,
    DEAD,
    FILTERED,
    LATE,
    POSITION,
    EpochCounts,
    EpochInput,
)
from sluice.contracts.records import WatermarkState
from sluice.jvm.context import context_cache
from sluice.jvm.udfs import Ledger, SqlFunctions, select, where_not_pushed
from sluice.operators.base import InvalidExpression, quoted
from sluice.operators.expressions import failure_reason, guarded
from sluice.operators.lookup import join_lookups
from sluice.operators.sqltext import Sql, when
from sluice.operators.watermarks import Run, verify_runs

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pyspark.sql import DataFrame, SparkSession

    from sluice.spec.model import PipelineSpec

__all__ = [
    "EXACT",
    "SCAN",
    "Classification",
    "Lateness",
    "PassFacts",
    "classify",
    "dead_rows",
    "derive",
    "with_records",
]

SCAN, EXACT = "scan", "exact"


class Lateness(Protocol):
    """An operator's lateness rule, one definition for every path: the pass's Spark columns
    and the driver's integer check both come from it."""

    def late(self, ts: Sql, wm: Sql) -> Sql:
        """True for a record every window of which closed at its position."""
        ...

    def missed(self, ts: Sql, wm: Sql) -> Sql:
        """How many late-records rows the record gives (the windows it missed)."""
        ...

    def first_close(self, ts: int) -> int:
        """The smallest position watermark at which a window of a record at ``ts`` closes
        for it; monotone in ``ts``."""
        ...


@dataclass(frozen=True)
class PassFacts:
    counts: EpochCounts
    watermark: WatermarkState  # W_{k+1} per partition
    after_us: int | None  # the global watermark after the epoch (idle rule applied)
    exact: bool  # False: some record may have its class from a too-low bound (classify again)
    runs: tuple[Run, ...] = ()  # what each task read (the EXACT pass's bounds per file)


@dataclass
class Classification:
    """The epoch's records with ``_class``, ``_ts_us``, ``_wm`` and ``_epoch`` (lazy).

    ``frame`` holds only the columns the operator asked for; ``records`` is every record with
    every column (lazy, never cached: read again only for the rows that go to the late and
    dead-letter sinks, when there are any)."""

    frame: DataFrame
    records: DataFrame
    types: dict[str, str]  # column -> Spark type of the derived records
    mode: str
    carried: WatermarkState
    spec: PipelineSpec
    waiting: tuple[str, ...]
    before_us: int | None  # the global watermark the epoch started from
    used: Callable[[str, int], int | None]  # the bound the pass took before each run
    lateness: Lateness | None
    positions: Ledger
    tally: Ledger

    def facts(self) -> PassFacts:
        """Counts and watermarks from the ledgers: call after an action ran the pass."""
        runs = [
            Run(r.partition, r.major, r.split, r.slots[0], r.slots[1],
                r.slots[2] if r.slots[4] else None, r.slots[3] if r.slots[4] else None)
            for r in self.positions.rows()
        ]  # fmt: skip
        et = self.spec.event_time
        maxima = [(r.partition, r.high) for r in runs if r.high is not None]
        watermark = self.carried.advanced(maxima, self.waiting)
        after = watermark.watermark_us(et.max_out_of_orderness_us, et.idle_timeout_us)
        exact = self.mode == EXACT or not verify_runs(
            self.carried, runs, self.used, et.max_out_of_orderness_us, self.before_us,
            None if self.lateness is None else self.lateness.first_close,
        )  # fmt: skip
        return PassFacts(self._counts(), watermark, after, exact, tuple(runs))

    def _counts(self) -> EpochCounts:
        slots = [0] * 6
        for row in self.tally.rows():
            slots = [a + b for a, b in zip(slots, row.slots, strict=True)]
        accepted, late, dead, filtered = (slots[c] for c in (ACCEPTED, LATE, DEAD, FILTERED))
        read = accepted + late + dead + filtered
        return EpochCounts(read, accepted, late, dead, filtered, slots[5])


def classify(
    inp: EpochInput,
    lateness: Lateness | None,
    columns: tuple[str, ...] | None = None,
    *,
    mode: str = SCAN,
    runs: tuple[Run, ...] = (),
    floor_us: int | None = None,
) -> Classification:
    """Derive, time and classify one epoch's records (see the module docstring).

    ``lateness`` None: no record is late. ``columns``: the record columns the operator reads
    (None: all but ``_raw`` / ``_file``); Spark then reads and shuffles only those. ``runs``
    (EXACT): what a SCAN pass over the same input read (:attr:`PassFacts.runs`).
    ``floor_us``: a watermark no record's may be below, besides the one the epoch starts from
    (a join side's: the pipeline's, :mod:`sluice.joins.operator`)."""
    spark, spec = inp.spark, inp.spec
    et = spec.event_time
    # a record whose expression raised moves no watermark
    derived = derive(inp.records, spec, inp.tables)
    if columns is None:
        dropped = (*POSITION, "_raw", "_error", "_file")
        columns = tuple(c for c in derived.columns if c not in dropped)
    wanted = list(dict.fromkeys((*POSITION, "_error", et.column, *columns, "_keep")))
    kept = [quoted(c) for c in wanted]
    ts = f"CASE WHEN _error IS NULL THEN unix_micros({quoted(et.column)}) END AS _ts_us"
    before_us = inp.carried.watermark_us(et.max_out_of_orderness_us, et.idle_timeout_us)
    if floor_us is not None:
        before_us = floor_us if before_us is None else max(before_us, floor_us)
    used = _bounds(inp)
    carried = inp.carried.max_event_time_us
    # every step as SQL text (one Py4J call each); the helper UDFs as SQL functions, dropped
    # once the plan is analysed
    with SqlFunctions(spark) as fns:
        positions, tally = fns.ledger("PositionMax"), fns.ledger("ClassTally")
        frame = select(derived, *kept, ts)
        # the running maximum of the run; in EXACT mode only its ledger is used (the new
        # maximum of each partition), and the tally below anchors it so Spark cannot drop it
        steps = [f"{fns.position_max(positions)}(_partition, _major, _line, _ts_us) AS _pm"]
        if carried:  # the carried maxima per partition, as _p_bound (see _per_partition)
            steps.append(f"{fns.partition_value(carried)}(_partition) AS _p_bound")
        frame = select(frame, "*", *steps)
        if mode == SCAN:
            prefix = f"greatest({_bound_sql(inp, used)}, _pm)"
        else:
            prefix = _exact_prefix(inp.carried, runs)
        wm = f"{prefix} - {et.max_out_of_orderness_us}"
        if before_us is not None:  # a function, not a literal: the same code each epoch
            wm = f"greatest({wm}, {fns.constant(before_us, 'before')})"
        frame = select(frame, *kept, "_ts_us", "_pm", f"{wm} AS _wm")
        branches = [(Sql("_error IS NOT NULL"), DEAD), (Sql("NOT _keep"), FILTERED)]
        missed: Sql | int = 0
        if lateness is not None:
            branches.append((WM.not_null() & lateness.late(TS, WM), LATE))
            missed = Sql(f"CAST(coalesce({lateness.missed(TS, WM)}, 0) AS INT)")
        kind = when(*branches, otherwise=ACCEPTED)
        extra = when((Sql(f"_kind <= {LATE}"), missed), otherwise=0)
        frame = select(frame, "*", f"{kind} AS _kind", f"{extra} AS _extra")
        tallied = f"{fns.class_tally(tally)}(_partition, _major, _line, _kind, _extra, _pm)"
        frame = select(
            frame, *kept, "_ts_us", "_wm", f"{tallied} AS _class", f"{inp.epoch}L AS _epoch"
        )
    types = dict(frame.dtypes)
    return Classification(
        frame, derived, types, mode, inp.carried, spec, inp.waiting, before_us, used,
        lateness, positions, tally,
    )  # fmt: skip


TS, WM = Sql("_ts_us"), Sql("_wm")


def _bounds(inp: EpochInput) -> Callable[[str, int], int | None]:
    """The lower bound the pass takes for the largest event time before a run of
    ``(partition, major)``: the checkpoint's maximum, or a hint (Parquet footers) when one
    is larger."""
    carried, hints = inp.carried.max_event_time_us, inp.before_hints

    def used(partition: str, major: int) -> int | None:
        values = [
            v for v in (carried.get(partition), hints.get((partition, major))) if v is not None
        ]
        return max(values) if values else None

    return used


def _bound_sql(inp: EpochInput, used: Callable[[str, int], int | None]) -> str:
    """:func:`_bounds` as SQL: per major when the hints name every major of the epoch
    (files), else per partition."""
    carried = inp.carried.max_event_time_us
    partition_of = {m: p for p, m in inp.before_hints}
    if partition_of and sorted(partition_of) == list(range(len(partition_of))):
        return _by_major([used(partition_of[m], m) for m in range(len(partition_of))])
    return _per_partition(carried)


def _per_partition(values: dict[str, int]) -> str:
    """The carried maximum of each record's partition: the column ``_p_bound`` that
    :func:`classify` adds. Not a literal map: a files source's ``_partition`` is a literal,
    Spark would fold the lookup into a literal and compile the pass anew every epoch."""
    return "_p_bound" if values else "CAST(NULL AS BIGINT)"


def _exact_prefix(carried: WatermarkState, runs: tuple[Run, ...]) -> str:
    """The largest valid event time before each record in its partition (the always-exact
    path): the largest before its file (major position), from ``runs``, and a window function
    over the file in line order. Without runs, or with files of several partitions, a window
    function over the whole partition in position order."""
    before = _before_majors(carried, runs)
    if before is None:
        within = (
            "max(_ts_us) OVER (PARTITION BY _partition ORDER BY _major, _line "
            "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
        )
        if not carried.max_event_time_us:
            return within
        return f"greatest({_per_partition(carried.max_event_time_us)}, {within})"
    within = (
        "max(_ts_us) OVER (PARTITION BY _partition, _major ORDER BY _line "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
    )
    return f"greatest({before}, {within})"


def _before_majors(carried: WatermarkState, runs: tuple[Run, ...]) -> str | None:
    """SQL for the largest valid event time before each record's major position in its
    partition, from a SCAN pass's ``runs`` (every run of the epoch: together they cover
    every file): ``_p_bound`` where every major is 0 (one file or stream per partition), an
    array indexed by ``_major`` for the files of one partition (majors from 0); None
    otherwise (no runs, or several partitions with several majors)."""
    if not runs:
        return None
    majors = {r.major for r in runs}
    if majors == {0}:
        return _per_partition(carried.max_event_time_us)
    partitions = {r.partition for r in runs}
    if len(partitions) != 1 or min(majors) < 0:
        return None
    (partition,) = partitions
    highs: dict[int, int] = {}
    for run in runs:
        if run.high is not None:
            highs[run.major] = max(highs.get(run.major, run.high), run.high)
    running = carried.max_event_time_us.get(partition)
    values: list[int | None] = []
    for major in range(max(majors) + 1):  # a major without runs has no records
        values.append(running)
        high = highs.get(major)
        if high is not None:
            running = high if running is None else max(running, high)
    return _by_major(values)


def _by_major(values: list[int | None]) -> str:
    """SQL for ``values[_major]`` (a literal array indexed by the record's major position)."""
    table = ", ".join("CAST(NULL AS BIGINT)" if v is None else f"{v}L" for v in values)
    return f"element_at(array({table}), _major + 1)"


def derive(
    records: DataFrame, spec: PipelineSpec, tables: Mapping[str, DataFrame] | None = None
) -> DataFrame:
    """The ``select:`` columns, the lookups' columns (``tables``: each lookup's table as the
    plan pinned it, :mod:`sluice.operators.lookup`), then ``_keep`` from ``filter:`` and the
    inner lookups' matches. Each expression runs only on records without an ``_error`` so
    far; one that raises gives the record its ``_error`` (a dead letter naming the field)
    instead of failing the epoch."""
    frame = records
    for name, expression in spec.select:
        frame = _evaluate(frame, spec, f"select.{name}", expression, name)
    if spec.lookup:
        frame = join_lookups(frame, spec, tables or {})
    if not spec.filter:
        if spec.lookup:  # the inner lookups' matches
            return select(frame, "*", "_lookup AS _keep").drop("_lookup")
        return select(frame, "*", "true AS _keep")
    frame = _evaluate(frame, spec, "filter", spec.filter, "_keep")
    if spec.lookup:
        keep = F.expr("coalesce(_keep, false) AND _lookup")
        return frame.withColumn("_keep", keep).drop("_lookup")
    return frame.withColumn("_keep", F.expr("coalesce(_keep, false)"))


def _evaluate(
    frame: DataFrame, spec: PipelineSpec, field: str, expression: str, into: str
) -> DataFrame:
    """``into`` = ``expression`` on the records without an ``_error``; a record whose
    evaluation raised gets the ``_error`` naming ``field``. The three columns are built once
    per Spark context (:func:`_guarded_columns`): each epoch only adds them (3 Py4J calls
    and the drop's 6, where building them again cost about 245)."""
    try:  # ParseException is an AnalysisException too
        guard, error, value = _guarded_columns(frame.sparkSession, spec.name, field, expression)
        frame = frame.withColumn("_g", guard)
    except AnalysisException as exc:
        raise InvalidExpression(spec.name, field, expression, str(exc)) from exc
    return frame.withColumn("_error", error).withColumn(into, value).drop("_g")


_GUARDED_KEPT = 512  # expressions whose columns a context keeps (the oldest go first)


def _guarded_columns(
    spark: SparkSession, pipeline: str, field: str, expression: str
) -> tuple[Column, Column, Column]:
    """The columns of :func:`_evaluate`, once per context: ``_g`` (``{v: expression}``,
    NULL when it raised, only for records without an ``_error``), the new ``_error`` and the
    value. A column is an unresolved expression (names, not a frame's attributes), so every
    epoch's frame can take the same one; a Column built through PySpark costs 10-60 Py4J
    calls (``F.col`` 13, ``isNull`` 11), SQL text 3."""
    cache = context_cache(spark, "guarded expressions")
    key = (pipeline, field, expression)
    found = cache.get(key)
    if found is None:
        if len(cache) >= _GUARDED_KEPT:  # a served context outlives many specs' edits
            del cache[next(iter(cache))]
        tried = guarded(spark, F.expr(expression), pipeline)
        guard = F.when(F.expr("_error IS NULL"), tried)
        raised = F.expr("_error IS NULL AND _g IS NULL")
        error = F.when(raised, F.lit(failure_reason(field, expression))).otherwise(F.expr("_error"))
        found = cache[key] = (guard, error, F.expr("_g.v"))
    return found


def dead_rows(records: DataFrame, spec: PipelineSpec, epoch: int, source: str) -> DataFrame:
    """The dead-letter rows of ``records`` (every column): those with an ``_error``, which
    are dead before anything else."""
    code_and_reason = F.split(F.col("_error"), ": ", 2)
    return where_not_pushed(records, F.col("_error").isNotNull()).select(
        F.lit(spec.name).alias("pipeline"),
        F.lit(epoch).cast("long").alias("epoch"),
        F.lit(source).alias("source"),
        F.col("_file").alias("file"),
        F.col("_line").alias("line"),
        F.coalesce("_raw", _row_json(spec)).alias("raw"),
        code_and_reason.getItem(0).alias("reason_code"),
        code_and_reason.getItem(1).alias("reason"),
    )


def _row_json(spec: PipelineSpec) -> Column:
    """A record's schema columns as JSON: the ``raw`` of a dead letter whose source gave no
    text (a well-typed Parquet row, a generated event)."""
    return F.to_json(F.struct(*[F.col(quoted(c)) for c, _ in spec.source.schema]))


def with_records(rows: DataFrame, records: DataFrame) -> DataFrame:
    """``rows`` (with :data:`POSITION`) joined with every column of their records."""
    extra = [c for c in records.columns if c not in rows.columns or c in POSITION]
    return rows.join(records.select(*[F.col(quoted(c)) for c in extra]), list(POSITION))
