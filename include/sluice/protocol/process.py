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

The steps are the protocol's whatever runs the epoch; reading, computing and writing rows is
a :class:`Compute`'s: :class:`SparkCompute` for pipelines, plain Python for the protocol's
fast tests (:mod:`sluice.testing.memory`, through :func:`process_attempt`).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol, TypeVar

from sluice.contracts.operators import EpochFacts, EpochInput, EpochOutput, Frame
from sluice.contracts.records import (
    AttemptRecord,
    AttemptStatus,
    EngineInfo,
    EpochResult,
    EpochStats,
    Plan,
    Prepared,
    StateMigration,
    StatePart,
    StateRef,
)
from sluice.exceptions import SourceError
from sluice.jvm.udfs import counted, counting
from sluice.operators.base import DEAD_DDL, late_ddl
from sluice.operators.lookup import lookup_tables
from sluice.protocol.commit import write_checkpoint
from sluice.protocol.exceptions import EpochAlreadyCommitted, EpochBeyondNext, NoPlan
from sluice.protocol.inputs import source_inputs
from sluice.protocol.recovery import abort_attempt, finish_commit, recover
from sluice.protocol.repository import advance
from sluice.protocol.runtime import Runtime, SinkRole
from sluice.spark import epoch_session
from sluice.state import StoredState, state_input, state_parts, verify_parts, write_part

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sluice.contracts.operators import StateUpdate
    from sluice.protocol.repository import Repository
    from sluice.storage import ObjectStore

__all__ = [
    "Compute",
    "SparkCompute",
    "process_attempt",
    "process_epoch",
    "read_state",
    "refuse_beyond_next",
    "verify_state",
]


def process_epoch(
    rt: Runtime,
    spark: SparkSession,
    epoch: int | None = None,
    *,
    engine: EngineInfo | None = None,
) -> AttemptRecord:
    """Run one attempt of the next uncommitted epoch (or of ``epoch``, which must be it: an
    earlier one raises :class:`EpochAlreadyCommitted`, a later one :class:`EpochBeyondNext`).

    ``engine`` adds to what the attempt record says about where it ran.
    """
    return process_attempt(rt, SparkCompute(spark), epoch, engine=engine)


def process_attempt(
    rt: Runtime,
    compute: Compute,
    epoch: int | None = None,
    *,
    engine: EngineInfo | None = None,
) -> AttemptRecord:
    """:func:`process_epoch` with the epoch's rows read, computed and written by ``compute``."""
    latest = recover(rt)
    next_epoch = (latest.epoch if latest else 0) + 1
    if epoch is not None and epoch < next_epoch:
        winner = rt.repo.checkpoint(epoch)
        raise EpochAlreadyCommitted(rt.name, epoch, winner.attempt if winner else "?", "-")
    if epoch is not None and epoch > next_epoch:
        raise EpochBeyondNext(rt.name, epoch, next_epoch)
    epoch = next_epoch
    plan = rt.repo.plan(epoch)
    if plan is None:
        raise NoPlan(rt.name, epoch)
    now = rt.clock()
    engine = {**compute.describe(), **(engine or {})}
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
    held: list[DataFrame] = []
    try:
        frames = compute.compute(rt, plan)
        result = _stage(rt, compute, frames, plan, record.attempt, held, started=now)
    except Exception as exc:
        _release(frames, held)
        error = f"{type(exc).__name__}: {exc}"
        failed = advance(record, AttemptStatus.FAILED, rt.clock(), error=error)
        rt.repo.update_attempt(failed)
        abort_attempt(rt, epoch, record.attempt)
        named = exc.in_epoch(rt.name, epoch) if isinstance(exc, SourceError) else None
        if named is not None:
            raise named from None
        raise
    try:
        record = advance(record, AttemptStatus.PREPARED, rt.clock(), result=result)
        rt.repo.update_attempt(record)
        rt.faults.hit("process.after_attempt", epoch)
        if rt.spec.qos == 0:
            _checkpoint_then_publish(rt, epoch, record.attempt)
    finally:
        _release(frames, held)
    return record


def refuse_beyond_next(pipeline: str, repo: Repository, epoch: int) -> None:
    """Raise :class:`EpochBeyondNext` when ``epoch`` comes after the next epoch, reading only
    the checkpoint store: what ``sluice process --epoch`` and ``sluice serve`` check before
    they start Spark work (the attempt checks it again)."""
    following = repo.latest_epoch() + 1
    if epoch > following:
        raise EpochBeyondNext(pipeline, epoch, following)


def _release(frames: EpochOutput | None, held: list[DataFrame]) -> None:
    if frames is not None:
        frames.release()
    for frame in held:
        frame.unpersist()
    held.clear()


Outputs = dict[str, tuple["DataFrame", int | None]]
T = TypeVar("T")


class Compute(Protocol):
    """What an attempt runs on: it reads the planned rows, computes the epoch and writes rows;
    the steps around that, their order and fault points are the protocol's (module doc).
    Frames are the engine's rows (DataFrames for :class:`SparkCompute`)."""

    def describe(self) -> EngineInfo:
        """Where the attempt runs (its record's ``engine``)."""
        ...

    def compute(self, rt: Runtime, plan: Plan) -> EpochOutput:
        """Read the plan's range and ``S_k``, run the operator."""
        ...

    def write_state(
        self, store: ObjectStore, update: StateUpdate, epoch: int, attempt: str
    ) -> StatePart:
        """``update`` as a new part under ``state/<epoch>-<attempt>`` of ``store``."""
        ...

    def materialized(
        self, frame: DataFrame, rows: int | None, held: list[DataFrame]
    ) -> tuple[DataFrame, int]: ...

    def count(self, frame: DataFrame) -> int: ...

    def side(self, like: DataFrame, build: Frame, rows: int, ddl: str) -> DataFrame:
        """A side output (late, dead): ``build()`` when it has rows, else an empty frame of
        ``ddl``'s columns, of ``like``'s engine."""
        ...

    def beside(self, work: Callable[[], T]) -> Future[T]:
        """``work()`` run beside the caller's next writes; its result or error in the future."""
        ...


@dataclass(frozen=True)
class SparkCompute:
    """The process step on a Spark session (every pipeline's)."""

    spark: SparkSession

    def describe(self) -> EngineInfo:
        context = self.spark.sparkContext
        return {"spark_master": context.master, "spark_application_id": context.applicationId}

    def compute(self, rt: Runtime, plan: Plan) -> EpochOutput:
        return _compute(rt, self.spark, plan)

    def write_state(
        self, store: ObjectStore, update: StateUpdate, epoch: int, attempt: str
    ) -> StatePart:
        """Rows counted by the write when the operator did not know them."""
        spark = update.frame.sparkSession
        frame, ledger = update.frame, None
        if update.rows is None:
            frame, ledger = counting(spark, frame, "state")
        part = write_part(
            store, frame, epoch=epoch, attempt=attempt, kind=update.kind,
            rows=update.rows or 0, bounds=update.bounds,
        )  # fmt: skip
        if ledger is not None:  # counted as Spark wrote them
            part = replace(part, rows=counted(ledger))
        return part

    def materialized(
        self, frame: DataFrame, rows: int | None, held: list[DataFrame]
    ) -> tuple[DataFrame, int]:
        return _materialized(frame, rows, held)

    def count(self, frame: DataFrame) -> int:
        return frame.count()

    def side(self, like: DataFrame, build: Frame, rows: int, ddl: str) -> DataFrame:
        return _side(like.sparkSession, build, rows, ddl)

    def beside(self, work: Callable[[], T]) -> Future[T]:
        return _beside(work)


def _compute(rt: Runtime, spark: SparkSession, plan: Plan) -> EpochOutput:
    session = epoch_session(spark)
    migration = plan.state_migration or StateMigration()
    state = read_state(session, rt, plan.state, migration)
    spec = rt.spec
    inp = EpochInput(
        spark=session,
        inputs=source_inputs(session, rt.source, plan.source_range, spec),
        spec=spec,
        carried=plan.watermark,
        state=state,
        epoch=plan.epoch,
        compact=state.needs_compaction() or (migration.changed and not state.empty),
        tables=(
            lookup_tables(session, spec, dict(plan.tables), plan.epoch, rt.lookup_kinds)
            if spec.lookup
            else {}
        ),
    )
    return rt.operator().run(inp)


def _stage(
    rt: Runtime,
    compute: Compute,
    out: EpochOutput,
    plan: Plan,
    attempt: str,
    held: list[DataFrame],
    *,
    started: float,
) -> EpochResult:
    """Write ``S_{k+1}``, then the output as the pipeline's qos asks: staged (2 and 0: qos 0
    publishes the stage right after the checkpoint) or written (1); the epoch's facts come
    from those writes. ``process_seconds`` counts from ``started`` (the attempt's start: the
    computation's reads and its pass are part of it)."""
    retract = retract_after(plan)
    results = [r for r in rt.sinks if r.role == "results"]
    frame, rows = out.results, out.emitted
    if len(results) > 1:  # one computation for every writer
        part = _write_state(rt, compute, out, plan.epoch, attempt)
        rt.faults.hit("process.after_state", plan.epoch)
        frame, rows = compute.materialized(frame, rows, held)
        prepared = [_output(rt, compute, role, plan, attempt, frame, rows, retract)
                    for role in results]  # fmt: skip
    else:
        # the state and the one result sink are written at once: two jobs reading the same
        # cached rows, one's driver work (planning, the commit's renames, fingerprints)
        # overlapping the other's tasks
        state = compute.beside(lambda: _write_state(rt, compute, out, plan.epoch, attempt))
        try:
            prepared = [_output(rt, compute, role, plan, attempt, frame, rows, retract)
                        for role in results]  # fmt: skip
        finally:
            part = state.result()
        rt.faults.hit("process.after_state", plan.epoch)
    emitted = rows if rows is not None else (prepared[0].rows if prepared else None)
    facts = out.finish(emitted, part.rows if part is not None else None)
    counts = facts.counts
    outputs: Outputs = {
        "results": (frame, facts.emitted),
        "late": (compute.side(frame, out.late, counts.late_rows, late_ddl(rt.spec)),
                 counts.late_rows),
        "dead": (compute.side(frame, out.dead, counts.dead, DEAD_DDL), counts.dead),
    }  # fmt: skip
    for role in rt.sinks:
        if role.role != "results":
            df, n = outputs[role.role]
            prepared.append(_output(rt, compute, role, plan, attempt, df, n, retract))
    rt.faults.hit("process.after_prepare", plan.epoch)
    rng = rt.source.decode_range(plan.source_range)
    stats = EpochStats(
        counts.records_read,
        counts.accepted,
        counts.late,
        counts.dead,
        facts.emitted,
        facts.still_open,
        rng.units,
        counts.filtered,
        counts.late_rows,
    )
    result = EpochResult(
        stats=stats,
        watermark=facts.watermark,
        watermark_us=facts.watermark_us,
        state=_state_ref(rt, plan, out, part, facts),
        prepared=tuple(prepared),
        process_seconds=round(rt.clock() - started, 6),
    )
    return result


def _beside(work: Callable[[], T]) -> Future[T]:
    """``work()`` run in a thread of its own (Spark runs the jobs of two threads at once;
    the thread inherits the caller's Spark job properties), its result or error in the
    future."""
    from pyspark.util import InheritableThread

    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to the waiting thread
            future.set_exception(exc)

    InheritableThread(target=run, name="sluice-state-write", daemon=True).start()
    return future


def _materialized(
    frame: DataFrame, rows: int | None, held: list[DataFrame]
) -> tuple[DataFrame, int]:
    """The results cached and counted once (several sinks, or qos 0, which writes them only
    after the checkpoint recorded the facts)."""
    from pyspark import StorageLevel

    cached = frame.persist(StorageLevel.MEMORY_AND_DISK)
    held.append(cached)
    return cached, cached.count() if rows is None else rows


def _output(
    rt: Runtime,
    compute: Compute,
    role: SinkRole,
    plan: Plan,
    attempt: str,
    df: DataFrame,
    rows: int | None,
    retract: int | None,
) -> Prepared:
    """Stage (qos 2 and 0) or write (qos 1) one output."""
    if rows is None and not role.sink.counts_rows:  # a plugin that wants the count first
        rows = compute.count(df)
    if rt.spec.qos != 1:
        staged = role.sink.prepare(plan.epoch, attempt, df, rows)
        return replace(staged, retract_after=retract)
    return _write(role, plan.epoch, attempt, df, rows, retract)


def _side(spark: SparkSession, build: Frame, rows: int, ddl: str) -> DataFrame:
    """The side output when it has rows; else an empty frame of its columns (a sink may still
    create its table from them) that costs no planning (made once per session: it never
    changes)."""
    if rows:
        return build()
    key = (id(spark), ddl)
    empty = _EMPTY.get(key)
    if empty is None or empty.sparkSession is not spark:
        empty = _EMPTY[key] = spark.createDataFrame([], ddl)
    return empty


_EMPTY: dict[tuple[int, str], DataFrame] = {}


def _checkpoint_then_publish(rt: Runtime, epoch: int, attempt: str) -> None:
    """qos 0: the checkpoint (offsets, state) commits first, then this process publishes the
    staged output once; a crash in between loses this epoch's output and never duplicates it
    (the next step's recovery records it lost and drops the stage)."""
    started = rt.clock()
    checkpoint = write_checkpoint(rt, epoch, attempt)
    if checkpoint.attempt != attempt:  # another attempt won: it publishes, not us
        abort_attempt(rt, epoch, attempt)
        return
    if rt.repo.sinks_committed(epoch) is None:
        finish_commit(rt, checkpoint, started=started, publish=True)


def retract_after(plan: Plan) -> int | None:
    """The epoch a rewind's first epoch goes back to (its sinks retract what came after)."""
    return plan.retract_after


def _write(
    role: SinkRole, epoch: int, attempt: str, df: DataFrame, rows: int | None, retract: int | None
) -> Prepared:
    """qos 0/1 direct output; a rewind's first epoch is staged and committed with its
    retraction instead (the direct writes cannot retract)."""
    if retract is None:
        return role.sink.write(epoch, attempt, df, rows)
    staged = replace(role.sink.prepare(epoch, attempt, df, rows), retract_after=retract)
    role.sink.commit(staged)
    return staged


def _write_state(
    rt: Runtime, compute: Compute, out: EpochOutput, epoch: int, attempt: str
) -> StatePart | None:
    """The operator's state update as a new part."""
    update = out.state_update()
    if update is None:
        return None
    part = compute.write_state(rt.repo.store, update, epoch, attempt)
    if update.kind == "base" and epoch > 1:
        rt.faults.hit("state.after_compaction", epoch)
    out.state_written(part)
    return part


def _state_ref(
    rt: Runtime, plan: Plan, out: EpochOutput, part: StatePart | None, facts: EpochFacts
) -> StateRef:
    """``S_{k+1}``: the parts before plus this epoch's (a base replaces them all)."""
    before = state_parts(rt.repo.store, plan.state)
    if part is not None and part.kind == "base":
        parts: tuple[StatePart, ...] = (part,)
    elif part is not None:
        parts = (*before, part)
    else:
        parts = before
    if facts.state_rows == 0:
        parts = ()
    horizon = out.horizon
    newest = parts[-1] if parts else None
    uri = rt.repo.store.uri(newest.key) if newest is not None else None
    return StateRef(uri, facts.state_rows, None, parts, horizon if parts else None)


def verify_state(rt: Runtime, ref: StateRef) -> None:
    """Raise :class:`CorruptObject` naming the first state file that is missing, extra or not
    the one its checkpoint recorded (size and digest)."""
    verify_parts(rt.repo.store, list(state_parts(rt.repo.store, ref)))


def read_state(
    spark: SparkSession,
    rt: Runtime,
    ref: StateRef,
    migration: StateMigration | None = None,
) -> StoredState:
    """The state ``S_k`` a plan starts from, as its operator reads it (in state column order
    under the spec now: see :mod:`sluice.protocol.upgrade`)."""
    migration = migration or StateMigration()
    operator = rt.operator()

    def align(frame: DataFrame) -> DataFrame:
        return operator.align_state(frame, migration.reset_aggregates, migration.reset_states)

    every = rt.spec.checkpoint.compact_every if rt.spec.checkpoint else 10
    return state_input(spark, rt.repo.store, ref, align, every)
