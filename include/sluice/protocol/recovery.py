"""Recovery, run at the start of every step, and the shared second half of a commit.

* A committed checkpoint whose sinks are not marked committed gets its sink commit re-run
  (Flink's recover-and-commit): sink commits are idempotent.
* Staged output and state snapshots left by dead or losing attempts of the latest committed
  epoch are removed.
* A plan without a checkpoint needs nothing here: the process step re-runs it verbatim.
"""

from __future__ import annotations

from sluice.contracts import layout
from sluice.contracts.records import AttemptStatus, Checkpoint, OutputFate, Prepared, SinksCommitted
from sluice.protocol.repository import advance
from sluice.protocol.retention import apply_retention
from sluice.protocol.runtime import Runtime

__all__ = ["abort_attempt", "finish_commit", "recover"]


def recover(rt: Runtime) -> Checkpoint | None:
    """The latest committed checkpoint, with its sink commit completed and losers swept."""
    latest = rt.repo.latest_checkpoint()
    if latest is None:
        return None
    if rt.repo.sinks_committed(latest.epoch) is None:
        finish_commit(rt, latest, started=rt.clock())
    else:
        _settle_attempts(rt, latest)  # a crash after the marker skipped this
        _sweep(rt, latest)
    return latest


def finish_commit(
    rt: Runtime,
    checkpoint: Checkpoint,
    *,
    started: float,
    publish: bool = False,
) -> None:
    """Publish every sink's output of ``checkpoint``, mark the sinks committed, clean up.

    qos 2 commits what the attempt staged (idempotent). qos 1 wrote its output before the
    checkpoint: nothing is left to do. qos 0 staged its output too; only the process that
    won the checkpoint publishes it, right after (``publish``); any other process finding the
    marker missing records the output as lost and drops the stage (at-most-once: never
    written twice).
    """
    epoch = checkpoint.epoch
    prepared = {p.sink: p for p in checkpoint.result.prepared}
    qos = rt.spec.qos
    published: dict[str, str] = {}
    for i, role in enumerate(rt.sinks):
        staged = prepared.get(role.sink.name)
        receipt = None
        if staged is not None and qos == 2:
            receipt = role.sink.commit(staged)
        elif staged is not None and qos == 0 and publish:
            receipt = role.sink.publish(staged)
        if receipt:
            published[role.sink.name] = receipt
        if i == 0:
            rt.faults.hit("commit.mid_sinks", epoch)
    rt.faults.hit("commit.after_sinks", epoch)
    now = rt.clock()
    if qos == 1:
        output = OutputFate.WRITTEN
    else:  # qos 0 without a publisher: the process died between the checkpoint and the output
        output = OutputFate.COMMITTED if qos == 2 or publish else OutputFate.LOST
    rt.repo.mark_sinks_committed(
        SinksCommitted(epoch, checkpoint.attempt, now, round(now - started, 6), output, published)
    )
    rt.faults.hit("commit.after_marker", epoch)
    _settle_attempts(rt, checkpoint)
    _sweep(rt, checkpoint)
    apply_retention(rt, epoch)


def abort_attempt(rt: Runtime, epoch: int, attempt: str) -> None:
    """Remove everything ``attempt`` staged for ``epoch`` and record it as aborted."""
    for role in rt.sinks:
        role.sink.abort(Prepared(role.sink.name, "", epoch, attempt, 0))
    rt.repo.store.delete_prefix(layout.state_prefix(epoch, attempt))
    record = rt.repo.attempt(epoch, attempt)
    if record and record.status in (AttemptStatus.STARTED, AttemptStatus.PREPARED):
        rt.repo.update_attempt(advance(record, AttemptStatus.ABORTED, rt.clock()))


def _settle_attempts(rt: Runtime, checkpoint: Checkpoint) -> None:
    """Winner -> COMMITTED; every other live attempt of the epoch -> ABORTED."""
    for record in rt.repo.attempts(checkpoint.epoch):
        if record.attempt == checkpoint.attempt and record.status == AttemptStatus.PREPARED:
            rt.repo.update_attempt(advance(record, AttemptStatus.COMMITTED, rt.clock()))
        elif record.attempt != checkpoint.attempt and record.status in (
            AttemptStatus.STARTED,
            AttemptStatus.PREPARED,
        ):
            rt.repo.update_attempt(advance(record, AttemptStatus.ABORTED, rt.clock()))


def _sweep(rt: Runtime, checkpoint: Checkpoint) -> None:
    """Delete staged sink output and state snapshots of the epoch's losing attempts."""
    for role in rt.sinks:
        role.sink.abort_others(checkpoint.epoch, keep=None)
    winner = layout.state_prefix(checkpoint.epoch, checkpoint.attempt)
    prefix = f"{layout.STATE}{checkpoint.epoch:012d}-"
    losers = {
        info.key[: info.key.index("/", len(layout.STATE)) + 1]
        for info in rt.repo.store.list(prefix)
        if not info.key.startswith(winner)
    }
    for folder in sorted(losers):  # whole folders: Spark's hidden .crc files go too
        rt.repo.store.delete_prefix(folder)
