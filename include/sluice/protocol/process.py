"""Step 2 — process: read exactly the planned range, compute, stage everything.

1. recover, load ``plan(k)`` and record a new attempt as STARTED;
2. read ``[start, end)`` and compute the epoch (classify, aggregate, merge with ``S_k``);
3. write ``S_{k+1}`` under an attempt-scoped key;
4. prepare every sink under attempt-scoped locations (invisible until commit);
5. record the attempt as PREPARED with its result (counts, staged files, watermark).
A failure records the attempt as FAILED and removes what it staged; it is never reused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from sluice.protocol import layout
from sluice.protocol.exceptions import EpochAlreadyCommitted, NoPlan
from sluice.protocol.model import (
    AttemptRecord,
    AttemptStatus,
    EpochResult,
    EpochStats,
    Plan,
    StateRef,
)
from sluice.protocol.recovery import abort_attempt, recover
from sluice.protocol.runtime import Runtime
from sluice.sinks.base import Prepared
from sluice.storage import to_spark_uri
from sluice.windows import EpochFrames, compute_epoch, emitted_rows, open_state, state_columns

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
    try:
        result = _run(rt, spark, plan, record.attempt)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        failed = record.moved_to(AttemptStatus.FAILED, rt.clock(), error=error)
        rt.repo.update_attempt(failed)
        abort_attempt(rt, epoch, record.attempt)
        raise
    record = record.moved_to(AttemptStatus.PREPARED, rt.clock(), result=result)
    rt.repo.update_attempt(record)
    rt.faults.hit("process.after_attempt", epoch)
    return record


def _run(rt: Runtime, spark: SparkSession, plan: Plan, attempt: str) -> EpochResult:
    started = rt.clock()
    rng = rt.source.decode_range(plan.source_range)
    records = rt.source.read(spark, rng)
    frames = compute_epoch(
        spark,
        records,
        rt.spec,
        plan.watermark,
        read_state(spark, rt, plan.state),
        epoch=plan.epoch,
        source_uri=rt.source.location,
        waiting=rt.source.waiting_partitions(rng),
    )
    try:
        emitted, still_open = _window_counts(rt, frames)
        state = _write_state(rt, frames, still_open, plan.epoch, attempt)
        rt.faults.hit("process.after_state", plan.epoch)
        prepared = _prepare_sinks(rt, frames, emitted, plan.epoch, attempt)
        rt.faults.hit("process.after_prepare", plan.epoch)
    finally:
        frames.release()
    counts = frames.counts
    stats = EpochStats(
        counts.records_read,
        counts.accepted,
        counts.late,
        counts.dead,
        emitted,
        still_open,
        rng.units,
        counts.filtered,
        counts.late_rows,
    )
    return EpochResult(
        stats=stats,
        watermark=frames.watermark,
        watermark_us=frames.watermark_us,
        state=state,
        prepared=prepared,
        process_seconds=round(rt.clock() - started, 6),
    )


def _window_counts(rt: Runtime, frames: EpochFrames) -> tuple[int, int]:
    """(result rows this epoch emits, windows left open)."""
    rows = frames.merged.groupBy("_closed", "_new").count().collect()
    by_flags = {(bool(r["_closed"]), bool(r["_new"])): int(r["count"]) for r in rows}
    still_open = sum(n for (closed, _), n in by_flags.items() if not closed)
    if rt.spec.emit == "on_update":
        emitted = sum(n for (_, new), n in by_flags.items() if new)
        if frames.deletes is not None:
            emitted += frames.deletes.count()
    else:
        emitted = sum(n for (closed, _), n in by_flags.items() if closed)
    return emitted, still_open


def _write_state(rt: Runtime, frames: EpochFrames, rows: int, epoch: int, attempt: str) -> StateRef:
    if frames.next_state is not None:
        rows = frames.next_state.count()
    if frames.counters is not None:
        rows += frames.counters.count()
    if rows == 0:
        return StateRef()
    uri = rt.repo.store.uri(layout.state_prefix(epoch, attempt).rstrip("/"))
    open_state(frames, rt.spec).write.mode("errorifexists").parquet(to_spark_uri(uri))
    return StateRef(uri, rows)


def _prepare_sinks(
    rt: Runtime, frames: EpochFrames, emitted: int, epoch: int, attempt: str
) -> tuple[Prepared, ...]:
    outputs: dict[str, tuple[DataFrame, int]] = {
        "results": (emitted_rows(frames, rt.spec, epoch), emitted),
        "late": (frames.late, frames.counts.late_rows),
        "dead": (frames.dead, frames.counts.dead),
    }
    prepared = []
    for role in rt.sinks:
        df, rows = outputs[role.role]
        prepared.append(role.sink.prepare(epoch, attempt, df, rows))
    return tuple(prepared)


def read_state(spark: SparkSession, rt: Runtime, ref: StateRef) -> DataFrame | None:
    """The window state ``S_k`` a plan starts from (None when empty). Parquet carries its own
    schema (derived key columns have no declared type); the columns are put in state order."""
    if ref.uri is None or ref.rows == 0:
        return None
    frame = spark.read.parquet(to_spark_uri(ref.uri))
    return frame.select(*[F.col(f"`{c}`") for c in state_columns(rt.spec)])
