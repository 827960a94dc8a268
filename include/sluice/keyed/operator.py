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

from typing import TYPE_CHECKING, Any

from pyspark import StorageLevel
from pyspark.sql import functions as F

from sluice.exceptions import SluiceError
from sluice.keyed.batches import RECORD, SIDE, STATE, KeyBatches
from sluice.keyed.functions import resolve
from sluice.keyed.runner import (
    ERROR_MARK,
    NO_WATERMARK,
    TIMERS,
    KeyedProgram,
    stamp_column,
    state_column,
)
from sluice.spec.types import arrow_type, spark_ddl
from sluice.windows.records import (
    ACCEPTED,
    classify_epoch,
    count_classes,
    dead_rows,
    null_safe_join,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from sluice.operator import EpochOutput
    from sluice.spec.model import PipelineSpec, ProcessSpec
    from sluice.windows.watermarks import WatermarkState

__all__ = [
    "KEYLESS",
    "ProcessFunctionFailed",
    "compute_keyed",
    "stamp_types",
    "state_columns",
    "state_types",
]

KEYLESS = "_key"  # the constant key column of a pipeline without key_by
_ORDER = ("_major", "_line", "_partition")


class ProcessFunctionFailed(SluiceError):
    """The epoch stopped because a process function raised (the message names the key)."""


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


def compute_keyed(
    spark: SparkSession,
    records: DataFrame,
    spec: PipelineSpec,
    carried: WatermarkState,
    state: DataFrame | None,
    *,
    epoch: int,
    source_uri: str,
    waiting: tuple[str, ...] = (),
) -> EpochOutput:
    from sluice.operator import EpochOutput, no_late_rows

    assert spec.process is not None
    prepared = classify_epoch(
        spark, records, spec, carried, epoch=epoch, waiting=waiting, lateness=None
    )
    classified = prepared.classified
    cached = list(prepared.cached)
    keys = key_columns(spec)
    accepted = _accepted(classified, spec)
    key_ddl = {k: t for k, t in accepted.dtypes if k in keys}
    state = state if state is not None else _empty_state(spark, spec, key_ddl)
    marked = _mark_touched(state, accepted, keys, prepared.after_us).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    cached.append(marked)
    touched = marked.where("_touch").select(*state_columns(spec))
    untouched = marked.where("not _touch").select(*state_columns(spec))
    program = _program(spec, epoch, prepared.after_us, accepted.columns)
    result = _run(accepted, touched, spec, program, key_ddl).persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(result)
    emitted, alive = _totals(result, spec, epoch)
    carried_keys = untouched.count()
    return EpochOutput(
        counts=count_classes(classified),
        watermark=prepared.watermark,
        watermark_us=prepared.after_us,
        results=_results(result, epoch),
        emitted=emitted,
        state=result.where("_alive").select(*state_columns(spec)).unionByName(untouched),
        state_rows=alive + carried_keys,
        still_open=alive + carried_keys,
        late=lambda: no_late_rows(prepared.records, spec, epoch),
        dead=lambda: dead_rows(prepared.records, spec, epoch, source_uri),
        cached=tuple(cached),
    )


def _accepted(classified: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Keys, the columns the function sees, event time, position watermark and order."""
    frame = classified.where(F.col("_class") == ACCEPTED)
    if not spec.key_by:
        frame = frame.withColumn(KEYLESS, F.lit(0))
    visible = [c for c, _ in spec.source.schema] + [n for n, _ in spec.select]
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
    visible = [c for c, _ in spec.source.schema] + [n for n, _ in spec.select]
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
        raise ProcessFunctionFailed(message) from None
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
