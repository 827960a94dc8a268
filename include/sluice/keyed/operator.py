"""One epoch of a keyed process function, inside Spark.

1. classify the records (dead letters, ``filter:``; nothing is late: the function sees every
   valid record and decides with ``ctx.watermark``) and compute each record's position
   watermark ``_wm``;
2. split the state ``S_k`` into the keys this epoch touches — keys with records, or with a
   timer the epoch's final watermark reaches — and the rest, which is carried over as it is
   (no Python runs for it);
3. put the records and the touched state rows in one frame, partition and sort it by key
   and run the function over many keys per Arrow batch (``mapInArrow``,
   :mod:`sluice.keyed.batches`; per key :class:`~sluice.keyed.runner.KeyedProgram`): one
   result row per key with its new state, timers and emitted rows;
4. ``S_{k+1}`` = the touched keys that still hold state or timers + the untouched keys; the
   results are the emitted rows (columns of ``process.output``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark import StorageLevel
from pyspark.sql import functions as F

from sluice.contracts.operators import ACCEPTED, EpochFacts, EpochInput, StateUpdate
from sluice.keyed.batches import RECORD, SIDE, STATE, KeyBatches
from sluice.keyed.exceptions import ERROR_MARK, ProcessFunctionFailed
from sluice.keyed.functions import resolve
from sluice.keyed.runner import (
    NO_WATERMARK,
    TIMERS,
    KeyedProgram,
    stamp_column,
    state_column,
)
from sluice.operators.base import null_safe_join, where_keys
from sluice.operators.records import EXACT, Classification, PassFacts, classify, dead_rows
from sluice.operators.sqltext import Sql
from sluice.operators.stateless import no_late_rows
from sluice.spec.types import arrow_type, spark_ddl

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

    from sluice.contracts.records import StatePart
    from sluice.spec.model import PipelineSpec, ProcessSpec

__all__ = [
    "KEYLESS",
    "KeyedOperator",
    "ProcessFunctionFailed",
    "align_keyed_state",
    "stamp_types",
    "state_columns",
    "state_types",
]

KEYLESS = "_key"  # the constant key column of a pipeline without key_by
_ORDER = ("_major", "_line", "_partition")


def key_columns(spec: PipelineSpec) -> list[str]:
    return list(spec.key_by) or [KEYLESS]


def state_columns(spec: PipelineSpec) -> list[str]:
    assert spec.process is not None
    columns = key_columns(spec)
    for s in spec.process.state:
        columns.append(state_column(s.name))
        if s.ttl_us is not None:
            columns.append(stamp_column(s.name))
    return [*columns, TIMERS]


def _state_types(process: ProcessSpec) -> list[tuple[str, str]]:
    """(column, canonical type) of the state columns after the keys."""
    types = []
    for s in process.state:
        value = {"value": s.type, "reducing": s.type, "list": f"array<{s.type}>"}.get(
            s.kind, f"map<{s.key_type},{s.type}>"
        )
        types.append((state_column(s.name), value))
        if s.ttl_us is not None:
            stamp = {"value": "long", "reducing": "long", "list": "array<long>"}.get(
                s.kind, f"map<{s.key_type},long>"
            )
            types.append((stamp_column(s.name), stamp))
    return [*types, (TIMERS, "array<long>")]


def state_types(spec: PipelineSpec) -> dict[str, str]:
    """Spark DDL of the declared state columns (without TTL stamps and timers)."""
    assert spec.process is not None
    names = {state_column(s.name) for s in spec.process.state}
    return {c: spark_ddl(t) for c, t in _state_types(spec.process) if c in names}


def stamp_types(spec: PipelineSpec) -> dict[str, str]:
    """Spark DDL of the TTL stamp columns (states with a ``ttl``)."""
    assert spec.process is not None
    stamps = {stamp_column(s.name) for s in spec.process.state if s.ttl_us is not None}
    return {c: spark_ddl(t) for c, t in _state_types(spec.process) if c in stamps}


class KeyedOperator:
    """The ``process`` operator (:func:`sluice.pipeline.operator_for`)."""

    def __init__(self, spec: PipelineSpec) -> None:
        self.spec = spec

    def state_columns(self) -> list[str]:
        return state_columns(self.spec)

    def key_columns(self) -> list[str]:
        return key_columns(self.spec)

    def view(self, frame: DataFrame, keys: Mapping[str, str] | None = None) -> DataFrame:
        """One row per key (``sluice state``): each declared state (lists and maps as JSON),
        its TTL stamp where it has a TTL, and the pending timers (event times)."""
        from pyspark.sql import functions as F

        from sluice.keyed.runner import TIMERS

        columns = key_columns(self.spec)
        frame = where_keys(frame, keys)
        shown = [F.col(f"`{k}`") for k in columns]
        for name, dtype in frame.dtypes:
            if name in columns or name == TIMERS:
                continue
            label = name[3:] if name.startswith(("_s_", "_t_")) else name
            if name.startswith("_t_"):
                label = f"{label} (ttl stamp)"
            value = F.col(f"`{name}`")
            complex_type = dtype.startswith(("array", "map", "struct"))
            shown.append((F.to_json(value) if complex_type else value).alias(label))
        timers = F.transform(F.col(TIMERS), lambda t: F.timestamp_micros(t).cast("string"))
        pending = F.when(F.col(TIMERS).isNull(), F.lit("[]")).otherwise(F.to_json(timers))
        shown.append(pending.alias("timers"))
        return frame.select(*shown).orderBy(*columns)

    def align_state(
        self, frame: DataFrame, reset_aggregates: tuple[str, ...], reset_states: tuple[str, ...]
    ) -> DataFrame:
        return align_keyed_state(self.spec, frame, reset_states)

    def current_state(self, state: Any) -> DataFrame | None:
        """The state's rows as one snapshot (``sluice state``)."""
        return state.frame()

    def run(self, inp: EpochInput) -> KeyedEpoch:
        epoch = KeyedEpoch.start(inp, classify(inp, EXACT_WATERMARKS))
        if not epoch.facts.exact:
            epoch.release()
            runs = epoch.facts.runs
            epoch = KeyedEpoch.start(inp, classify(inp, EXACT_WATERMARKS, mode=EXACT, runs=runs))
        return epoch


class _ExactWatermarks:
    """No record is late under a process function, but each sees its exact watermark
    (``ctx.watermark``): any bound below the exact one could change what a function sees."""

    def late(self, ts: Sql, wm: Sql) -> Sql:
        return Sql("false")

    def missed(self, ts: Sql, wm: Sql) -> Sql:
        return Sql("0")

    def first_close(self, ts: int) -> int:
        return -(2**62)


EXACT_WATERMARKS = _ExactWatermarks()


@dataclass
class KeyedEpoch:
    inp: EpochInput
    cls: Classification
    facts: PassFacts
    result: DataFrame  # one row per key run: state, output rows, _alive (cached)
    untouched: DataFrame
    emitted: int
    alive: int
    carried_keys: int
    cached: list[DataFrame]

    @property
    def horizon(self) -> int | None:
        """Keys hold no windows: no emitted-window bound."""
        return None

    def state_written(self, part: StatePart) -> None:
        """Nothing kept about the parts."""

    @classmethod
    def start(cls, inp: EpochInput, classified: Classification) -> KeyedEpoch:
        """Run the functions (the pass), then read the ledgers."""
        spec, spark = inp.spec, inp.spark
        keys = key_columns(spec)
        accepted = _accepted(classified.frame, spec)
        key_ddl = {k: t for k, t in accepted.dtypes if k in keys}
        state = inp.state.frame()
        state = state if state is not None else _empty_state(spark, spec, key_ddl)
        # the final watermark decides which timers fire: the pass must know it first. It is
        # the new maximum per partition, which the ledgers give after any action over the
        # records; the function runs in the same job when the bounds are exact.
        facts_before = _watermark_pass(classified)
        marked = _mark_touched(state, accepted, keys, facts_before.after_us).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        touched = marked.where("_touch").select(*state_columns(spec))
        untouched = marked.where("not _touch").select(*state_columns(spec))
        program = _program(spec, inp.epoch, facts_before.after_us, accepted.columns)
        result = _run(accepted, touched, spec, program, key_ddl).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        emitted, alive = _totals(result, spec, inp.epoch)
        carried_keys = untouched.count()
        return cls(inp, classified, classified.facts(), result, untouched, emitted, alive,
                   carried_keys, [marked, result])  # fmt: skip

    @property
    def results(self) -> DataFrame:
        return _results(self.result, self.inp.epoch)

    def state_update(self) -> StateUpdate | None:
        spec = self.inp.spec
        rows = self.alive + self.carried_keys
        if rows == 0:
            return None
        alive = self.result.where("_alive").select(*state_columns(spec))
        return StateUpdate("base", alive.unionByName(self.untouched), rows)

    def finish(self, emitted: int | None, state_rows: int | None = None) -> EpochFacts:
        facts = self.facts
        holding = self.alive + self.carried_keys
        return EpochFacts(facts.counts, facts.watermark, facts.after_us, self.emitted,
                          holding, holding)  # fmt: skip

    def late(self) -> DataFrame:
        return no_late_rows(self.cls.records, self.inp.spec, self.inp.epoch)

    def dead(self) -> DataFrame:
        return dead_rows(self.cls.records, self.inp.spec, self.inp.epoch, self.inp.source_uri)

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()
        self.cached.clear()


def _watermark_pass(classified: Classification) -> PassFacts:
    """Run the classification once (counting is all it does) so the ledgers know the new
    watermark before the functions run: their timers fire at it."""
    classified.frame.agg(F.max("_class")).collect()
    return classified.facts()


def align_keyed_state(
    spec: PipelineSpec, frame: DataFrame, reset_states: tuple[str, ...] = ()
) -> DataFrame:
    """A stored state in :func:`state_columns` order under the spec now: states removed are
    left out; a state that is new, or in ``reset_states``, starts empty; a TTL column added
    since starts null (written before, never expires)."""
    typed = {**state_types(spec), **stamp_types(spec)}
    empty: dict[str, Column] = {}
    for name in reset_states:
        for column in (state_column(name), stamp_column(name)):
            if column in typed:
                empty[column] = F.lit(None).cast(typed[column])
    for column, ddl in typed.items():
        if column not in frame.columns:
            empty[column] = F.lit(None).cast(ddl)
    return frame.select(*[
        empty[c].alias(c) if c in empty else F.col(f"`{c}`") for c in state_columns(spec)
    ])  # fmt: skip


def _accepted(classified: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Keys, the columns the function sees, event time, position watermark and order."""
    frame = classified.where(F.col("_class") == ACCEPTED)
    if not spec.key_by:
        frame = frame.withColumn(KEYLESS, F.lit(0))
    visible = list(spec.record_types())  # the source's, select's and lookups' columns
    extra = [k for k in key_columns(spec) if k not in visible]
    return frame.select(
        *[F.col(f"`{c}`") for c in (*extra, *visible)],
        "_ts_us",
        F.coalesce(F.col("_wm"), F.lit(NO_WATERMARK)).alias("_wm"),
        *_ORDER,
    )


def _empty_state(spark: SparkSession, spec: PipelineSpec, key_ddl: dict[str, str]) -> DataFrame:
    assert spec.process is not None
    fields = [f"`{k}` {key_ddl[k]}" for k in key_columns(spec)]
    fields += [f"`{c}` {spark_ddl(t)}" for c, t in _state_types(spec.process)]
    return spark.createDataFrame([], ", ".join(fields))


def _mark_touched(
    state: DataFrame, accepted: DataFrame, keys: list[str], after_us: int | None
) -> DataFrame:
    """``_touch``: the key has records this epoch, or a timer the final watermark reaches."""
    hits = accepted.select(*[F.col(f"`{k}`") for k in keys]).distinct()
    hits = hits.withColumn("_hit", F.lit(True))
    due = F.lit(False)
    if after_us is not None:
        due = F.coalesce(F.exists(TIMERS, lambda t: t <= F.lit(after_us)), F.lit(False))
    joined = null_safe_join(state, hits, keys)
    return joined.withColumn("_touch", F.coalesce(F.col("_hit"), F.lit(False)) | due)


def _program(
    spec: PipelineSpec, epoch: int, end_watermark: int | None, columns: list[str]
) -> KeyedProgram:
    process = spec.process
    assert process is not None
    where = process.base_dir

    def find(reference: str, field: str) -> Any:
        return resolve(reference, where, spec.name, field)

    reducers = tuple(
        (s.name, find(s.reduce, f"process.state.{s.name}.reduce"))
        for s in process.state
        if s.reduce is not None
    )
    visible = list(spec.record_types())  # the source's, select's and lookups' columns
    return KeyedProgram(
        pipeline=spec.name,
        epoch=epoch,
        function=find(process.function, "process.function"),
        function_ref=process.function,
        on_timer=find(process.on_timer, "process.on_timer") if process.on_timer else None,
        on_timer_ref=process.on_timer,
        states=process.state,
        reducers=reducers,
        output=tuple(c for c, _ in process.output),
        columns=tuple(c for c in visible if c in columns),
        end_watermark_us=end_watermark,
    )


def _result_types(spec: PipelineSpec, key_ddl: dict[str, str]) -> list[tuple[str, str]]:
    """(column, Spark DDL) of the rows the per-key function returns."""
    assert spec.process is not None
    output = ",".join(f"{c}:{t}" for c, t in spec.process.output)
    return [
        *[(k, key_ddl[k]) for k in key_columns(spec)],
        *[(c, spark_ddl(t)) for c, t in _state_types(spec.process)],
        ("_out", spark_ddl(f"array<struct<{output}>>")),
        ("_alive", "boolean"),
        ("_fired", "bigint"),
    ]


def _run(
    accepted: DataFrame,
    touched: DataFrame,
    spec: PipelineSpec,
    program: KeyedProgram,
    key_ddl: dict[str, str],
) -> DataFrame:
    """One row per key with records or touched state (columns of :func:`_result_types`):
    the records and the state rows in one frame, partitioned and sorted by key, the
    function run over many keys per Arrow batch (:mod:`sluice.keyed.batches`)."""
    assert spec.process is not None
    keys = key_columns(spec)
    types = _result_types(spec, key_ddl)
    state_arrow = {c: arrow_type(t) for c, t in _state_types(spec.process)}
    output = ",".join(f"{c}:{t}" for c, t in spec.process.output)
    out_arrow = arrow_type(f"array<struct<{output}>>")
    run = KeyBatches(program, keys, bool(spec.key_by), state_arrow, out_arrow)

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return run(batches)

    key_cols = [F.col(f"`{k}`") for k in keys]
    state = touched.select(
        *[F.col(f"`{k}`").cast(key_ddl[k]).alias(k) for k in keys],
        *[c for c in touched.columns if c not in keys],
        F.lit(STATE).alias(SIDE),
    )
    both = accepted.withColumn(SIDE, F.lit(RECORD)).unionByName(state, allowMissingColumns=True)
    # Partitions: the Python function is the epoch's work, so every core should run it.
    # The session's shuffle partitions (4 in Sluice's sessions: two per core of local[2])
    # let a core that finishes early take the next partition; a cluster with more cores than
    # that gets one per core. The number is fixed here, not left to adaptive execution,
    # which would merge the partitions of a small shuffle into one (one core) because it
    # sizes them by bytes, not by the Python work they hold. Each partition costs one
    # Python task, so not more than that.
    spark = accepted.sparkSession
    partitions = max(
        int(spark.conf.get("spark.sql.shuffle.partitions") or 1),
        spark.sparkContext.defaultParallelism,
    )
    ordered = both.repartition(partitions, *key_cols).sortWithinPartitions(*key_cols, SIDE, *_ORDER)
    schema = ", ".join(f"`{c}` {t}" for c, t in types)
    return ordered.mapInArrow(apply, schema)


def _totals(result: DataFrame, spec: PipelineSpec, epoch: int) -> tuple[int, int]:
    """(rows emitted, keys left holding state); runs the functions."""
    try:
        row = result.agg(
            F.coalesce(F.sum(F.size("_out")), F.lit(0)).alias("emitted"),
            F.coalesce(F.sum(F.col("_alive").cast("long")), F.lit(0)).alias("alive"),
        ).collect()[0]
    except Exception as exc:
        message = _failure(str(exc))
        if message is None:
            raise
        raise ProcessFunctionFailed(message, pipeline=spec.name, epoch=epoch) from None
    return int(row["emitted"]), int(row["alive"])


def _failure(text: str) -> str | None:
    """The KeyedFunctionError line of a Spark error raised on an executor, if any."""
    for line in text.splitlines():
        at = line.find(ERROR_MARK)
        if at >= 0:
            return line[at + len(ERROR_MARK) :].strip()
    return None


def _results(result: DataFrame, epoch: int) -> DataFrame:
    return result.select(F.explode("_out").alias("o")).select(
        "o.*",
        F.lit("upsert").alias("_op"),
        F.lit(epoch).cast("long").alias("_epoch"),
    )
