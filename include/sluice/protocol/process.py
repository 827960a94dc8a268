"""Step 2 — process: read exactly the planned range, compute, stage everything.

1. recover, load ``plan(k)`` and record a new attempt as STARTED;
2. read ``[start, end)`` and compute the epoch (classify, aggregate, merge with ``S_k``);
3. write ``S_{k+1}`` under an attempt-scoped key;
4. prepare every sink under attempt-scoped locations, invisible until commit (qos 2), or
   write the output directly (qos 1: before the checkpoint, so a replay may duplicate it);
5. record the attempt as PREPARED with its result (counts, staged files, watermark);
6. qos 0 only: write the checkpoint now, then the output directly (a crash in between loses
   the epoch's output, never duplicates it); the commit step then finds nothing to do.
The first epoch of a rewind is staged at every qos level, its ``Prepared`` marked
``retract_after``: its sink commit retracts the rewound epochs' output (docs/rewind.md).
A failure before 5 records the attempt as FAILED and removes what it staged; it is never
reused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.operator import EpochOutput, Frame, align_state, compute_output
from sluice.protocol import layout
from sluice.protocol.commit import write_checkpoint
from sluice.protocol.exceptions import EpochAlreadyCommitted, NoPlan
from sluice.protocol.model import (
    AttemptRecord,
    AttemptStatus,
    EpochResult,
    EpochStats,
    Plan,
    StateRef,
)
from sluice.protocol.recovery import abort_attempt, finish_commit, recover
from sluice.protocol.runtime import Runtime, SinkRole
from sluice.protocol.upgrade import StateMigration
from sluice.sinks.base import Prepared
from sluice.sources.footers import ddl, stored_types
from sluice.storage import CorruptObject, to_spark_uri
from sluice.windows.records import DEAD_DDL, late_ddl

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["process_epoch", "read_state"]


def process_epoch(
    rt: Runtime,
    spark: SparkSession,
    epoch: int | None = None,
    *,
    engine: dict[str, Any] | None = None,
) -> AttemptRecord:
    """Run one attempt of the next uncommitted epoch (or of ``epoch``, which must be it).

    ``engine`` adds to what the attempt record says about where it ran.
    """
    latest = recover(rt)
    next_epoch = (latest.epoch if latest else 0) + 1
    if epoch is not None and epoch < next_epoch:
        winner = rt.repo.checkpoint(epoch)
        raise EpochAlreadyCommitted(rt.name, epoch, winner.attempt if winner else "?", "-")
    epoch = next_epoch
    plan = rt.repo.plan(epoch)
    if plan is None:
        raise NoPlan(rt.name, epoch)
    now = rt.clock()
    context = spark.sparkContext
    engine = {
        "spark_master": context.master,
        "spark_application_id": context.applicationId,
        **(engine or {}),
    }
    record = AttemptRecord(
        rt.name,
        epoch,
        rt.new_attempt_id(),
        AttemptStatus.STARTED,
        now,
        now,
        rt.run_id,
        engine=engine,
    )
    rt.repo.start_attempt(record)
    rt.faults.hit("process.after_start", epoch)
    frames: EpochOutput | None = None
    try:
        frames = _compute(rt, spark, plan)
        result, outputs = _stage(rt, frames, plan, record.attempt)
    except Exception as exc:
        if frames is not None:
            frames.release()
        error = f"{type(exc).__name__}: {exc}"
        failed = record.moved_to(AttemptStatus.FAILED, rt.clock(), error=error)
        rt.repo.update_attempt(failed)
        abort_attempt(rt, epoch, record.attempt)
        raise
    try:
        record = record.moved_to(AttemptStatus.PREPARED, rt.clock(), result=result)
        rt.repo.update_attempt(record)
        rt.faults.hit("process.after_attempt", epoch)
        if rt.spec.qos == 0:
            _checkpoint_then_write(rt, epoch, record.attempt, outputs)
    finally:
        frames.release()
    return record


Outputs = dict[str, tuple["DataFrame", int]]


def _compute(rt: Runtime, spark: SparkSession, plan: Plan) -> EpochOutput:
    rng = rt.source.decode_range(plan.source_range)
    return compute_output(
        spark,
        rt.source.read(spark, rng),
        rt.spec,
        plan.watermark,
        read_state(spark, rt, plan.state, StateMigration.from_dict(plan.state_migration)),
        epoch=plan.epoch,
        source_uri=rt.source.location,
        waiting=rt.source.waiting_partitions(rng),
    )


def _stage(
    rt: Runtime, frames: EpochOutput, plan: Plan, attempt: str
) -> tuple[EpochResult, Outputs]:
    """Write ``S_{k+1}``, then the output as the pipeline's qos asks: staged (2), written
    (1) or kept for after the checkpoint (0)."""
    started = rt.clock()
    state = _write_state(rt, frames, plan.epoch, attempt)
    rt.faults.hit("process.after_state", plan.epoch)
    spark = frames.results.sparkSession
    counts = frames.counts
    outputs: Outputs = {
        "results": (frames.results, frames.emitted),
        "late": (_frame(spark, frames.late, counts.late_rows, late_ddl(rt.spec)), counts.late_rows),
        "dead": (_frame(spark, frames.dead, counts.dead, DEAD_DDL), counts.dead),
    }
    prepared: list[Prepared] = []
    retract = retract_after(plan)
    for role in rt.sinks:
        df, rows = outputs[role.role]
        if rt.spec.qos == 2:
            staged = role.sink.prepare(plan.epoch, attempt, df, rows)
            prepared.append(replace(staged, retract_after=retract))
        elif rt.spec.qos == 1:
            prepared.append(_write(role, plan.epoch, attempt, df, rows, retract))
    rt.faults.hit("process.after_prepare", plan.epoch)
    rng = rt.source.decode_range(plan.source_range)
    stats = EpochStats(
        counts.records_read,
        counts.accepted,
        counts.late,
        counts.dead,
        frames.emitted,
        frames.still_open,
        rng.units,
        counts.filtered,
        counts.late_rows,
    )
    result = EpochResult(
        stats=stats,
        watermark=frames.watermark,
        watermark_us=frames.watermark_us,
        state=state,
        prepared=tuple(prepared),
        process_seconds=round(rt.clock() - started, 6),
    )
    return result, outputs


def _frame(spark: SparkSession, build: Frame, rows: int, ddl: str) -> DataFrame:
    """The side output when it has rows; else an empty frame of its columns (a sink may still
    create its table from them) that costs no planning."""
    return build() if rows else spark.createDataFrame([], ddl)


def _checkpoint_then_write(rt: Runtime, epoch: int, attempt: str, outputs: Outputs) -> None:
    """qos 0: the checkpoint (offsets, state) commits first, then the output is written once,
    directly; a crash in between loses this epoch's output and never duplicates it."""
    started = rt.clock()
    checkpoint = write_checkpoint(rt, epoch, attempt)
    if checkpoint.attempt != attempt:  # another attempt won: it writes the output, not us
        abort_attempt(rt, epoch, attempt)
        return

    retract = retract_after(checkpoint.plan)

    def publish(role: SinkRole) -> None:
        df, rows = outputs[role.role]
        _write(role, epoch, attempt, df, rows, retract)

    if rt.repo.sinks_committed(epoch) is None:
        finish_commit(rt, checkpoint, started=started, publish=publish)


def retract_after(plan: Plan) -> int | None:
    """The epoch a rewind's first epoch goes back to (its sinks retract what came after)."""
    after = (plan.restored_from or {}).get("retract_after")
    return int(after) if after is not None else None


def _write(
    role: SinkRole, epoch: int, attempt: str, df: DataFrame, rows: int, retract: int | None
) -> Prepared:
    """qos 0/1 direct output; a rewind's first epoch is staged and committed with its
    retraction instead (the direct writes cannot retract)."""
    if retract is None:
        return role.sink.write(epoch, attempt, df, rows)
    staged = replace(role.sink.prepare(epoch, attempt, df, rows), retract_after=retract)
    role.sink.commit(staged)
    return staged


def _write_state(rt: Runtime, frames: EpochOutput, epoch: int, attempt: str) -> StateRef:
    if frames.state is None or frames.state_rows == 0:
        return StateRef()
    prefix = layout.state_prefix(epoch, attempt)
    uri = rt.repo.store.uri(prefix.rstrip("/"))
    frames.state.write.mode("errorifexists").parquet(to_spark_uri(uri))
    found = rt.repo.store.fingerprints(prefix)
    return StateRef(uri, frames.state_rows, tuple((k[len(prefix) :], v) for k, v in found.items()))


def verify_state(rt: Runtime, ref: StateRef) -> None:
    """Raise :class:`CorruptObject` naming the first state file that is missing, extra or not
    the one its checkpoint recorded (size and digest)."""
    if ref.uri is None or ref.files is None:
        return
    store = rt.repo.store
    prefix = ref.uri[len(store.uri()) + 1 :] + "/"
    found = {k[len(prefix) :]: v for k, v in store.fingerprints(prefix).items()}
    for name, recorded in ref.files:
        now = found.pop(name, None)
        if now != recorded:
            reason = "missing" if now is None else f"is {now}, the checkpoint recorded {recorded}"
            raise CorruptObject(store.uri(prefix + name), f"state file {reason}", "state")
    if found:
        extra = min(found)
        raise CorruptObject(store.uri(prefix + extra), "not part of the recorded state", "state")


def read_state(
    spark: SparkSession,
    rt: Runtime,
    ref: StateRef,
    migration: StateMigration | None = None,
) -> DataFrame | None:
    """The state ``S_k`` a plan starts from (None when empty). Parquet carries its own
    schema (derived key columns have no declared type); the columns are put in state order."""
    if ref.uri is None or ref.rows == 0:
        return None
    verify_state(rt, ref)
    migration = migration or StateMigration()
    reader = spark.read
    # the snapshot's column types from its footers: no schema-inference job (see footers.py)
    prefix = ref.uri[len(rt.repo.store.uri()) + 1 :] + "/"
    parts = [prefix + name for name, _ in ref.files or () if name.endswith(".parquet")]
    stored = stored_types(rt.repo.store, parts)
    if stored is not None:
        reader = reader.schema(ddl(stored))
    frame = reader.parquet(to_spark_uri(ref.uri))
    return align_state(rt.spec, frame, migration.reset_aggregates, migration.reset_states)
