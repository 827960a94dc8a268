"""Step 3 — commit: make one attempt's result the checkpoint, then publish its output.

1. choose the attempt (the caller's, or the prepared one);
2. write ``C(k)`` with put-if-absent — **the commit point**; losing the race means another
   attempt already committed: abort our own staged output and finish the winner's commit;
3. commit every sink (idempotent), then mark the sinks committed;
4. settle the attempts' statuses and sweep the losers' leftovers;
5. retire the checkpoints older than the retained ones (:mod:`sluice.protocol.retention`).

A stale attempt of an epoch retention already retired backs out at step 2 (after its
put-if-absent, which may succeed once the old checkpoint is deleted): see ``_refuse_retired``.
"""

from __future__ import annotations

from sluice.contracts import layout
from sluice.contracts.records import AttemptRecord, AttemptStatus, Checkpoint
from sluice.protocol.exceptions import EpochRetired, NoPlan, NoPreparedAttempt
from sluice.protocol.recovery import abort_attempt, finish_commit
from sluice.protocol.runtime import Runtime
from sluice.storage import ObjectAlreadyExists

__all__ = ["commit_epoch", "write_checkpoint"]


def commit_epoch(rt: Runtime, epoch: int, attempt: str | None = None) -> Checkpoint:
    """Commit ``epoch``; returns the checkpoint that won (compare its ``attempt``)."""
    started = rt.clock()
    checkpoint = rt.repo.checkpoint(epoch)
    if checkpoint is not None:
        _refuse_retired(rt, checkpoint, attempt, ours=False)
    else:
        checkpoint = write_checkpoint(rt, epoch, attempt)
    if attempt is not None and attempt != checkpoint.attempt:
        abort_attempt(rt, epoch, attempt)
    if rt.repo.sinks_committed(epoch) is None:
        finish_commit(rt, checkpoint, started=started)
    return checkpoint


def write_checkpoint(rt: Runtime, epoch: int, attempt: str | None) -> Checkpoint:
    """Write ``C(epoch)`` from the chosen prepared attempt (put-if-absent); the winner."""
    plan = rt.repo.plan(epoch)
    if plan is None:
        raise NoPlan(rt.name, epoch)
    try:
        record = _choose_attempt(rt, epoch, attempt)
    except NoPreparedAttempt:
        # Between our look for C(epoch) and here, another attempt committed it and aborted
        # ours: that checkpoint is the answer, as when our put-if-absent loses.
        winner = rt.repo.checkpoint(epoch)
        if winner is None or attempt is None:
            raise
        _refuse_retired(rt, winner, attempt, ours=False)
        return winner
    assert record.result is not None
    checkpoint = Checkpoint(
        pipeline=rt.name,
        epoch=epoch,
        attempt=record.attempt,
        plan=plan,
        result=record.result,
        committed_at=rt.clock(),
        run_id=rt.run_id,
    )
    rt.faults.hit("commit.before_checkpoint", epoch)
    ours = True
    try:
        rt.repo.put_checkpoint_if_absent(checkpoint)
    except ObjectAlreadyExists:
        winner = rt.repo.checkpoint(epoch)
        assert winner is not None
        checkpoint, ours = winner, False
    _refuse_retired(rt, checkpoint, record.attempt, ours=ours)
    rt.faults.hit("commit.after_checkpoint", epoch)
    return checkpoint


def _refuse_retired(rt: Runtime, checkpoint: Checkpoint, attempt: str | None, ours: bool) -> None:
    """Back out of the commit of an epoch below the retention mark (no savepoint on it).

    Retention writes its mark before deleting anything, and this check reads it after the
    put-if-absent: either the mark was there (we back out), or retention had not started on
    this epoch, so its checkpoint still existed and our put lost to it. The stale process's
    checkpoint, if it wrote one, is deleted again; the epoch's output was published long ago.
    """
    if not rt.repo.is_retired(checkpoint.epoch):
        return
    epoch = checkpoint.epoch
    if ours:
        rt.repo.store.delete(layout.checkpoint_key(epoch))
    mine = attempt or checkpoint.attempt
    for role in rt.sinks:
        role.sink.abort_others(epoch, keep=None)
    rt.repo.store.delete_prefix(layout.state_prefix(epoch, mine))
    raise EpochRetired(rt.name, epoch, mine, rt.repo.retired_below())


def _choose_attempt(rt: Runtime, epoch: int, attempt: str | None) -> AttemptRecord:
    """The named attempt if prepared, else the earliest prepared attempt of the epoch."""
    if attempt is not None:
        record = rt.repo.attempt(epoch, attempt)
        if record is None or record.status != AttemptStatus.PREPARED or record.result is None:
            raise NoPreparedAttempt(rt.name, epoch)
        return record
    prepared = [
        r
        for r in rt.repo.attempts(epoch)
        if r.status == AttemptStatus.PREPARED and r.result is not None
    ]
    if not prepared:
        raise NoPreparedAttempt(rt.name, epoch)
    return min(prepared, key=lambda r: (r.updated_at, r.attempt))
