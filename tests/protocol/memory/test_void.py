"""``sluice restore`` after damage (sluice.protocol.restore): the epochs above the target that
cannot commit get a void checkpoint (read nothing, published nothing, fence a late attempt),
and the rewind to the target replays to the output of a run that was never damaged."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sluice.contracts.layout import checkpoint_key
from sluice.contracts.records import AttemptStatus
from sluice.protocol import Faults, ProtocolError, Runtime, commit_epoch, plan_epoch
from sluice.protocol.process import process_attempt, retract_after
from sluice.protocol.restore import QUARANTINE, is_void, restore_after_damage
from sluice.storage import CorruptObject
from sluice.testing.memory import MemoryCompute, run_until_drained, sink_of

from tests.protocol.memory.conftest import PER_EPOCH, assert_exact

Pipeline = Callable[..., Runtime]


def test_a_damaged_checkpoint_is_quarantined_voided_and_replayed(pipeline: Pipeline) -> None:
    rt = pipeline()
    run_until_drained(rt, max_units=PER_EPOCH, max_epochs=4)
    key = checkpoint_key(4)
    rt.repo.store.put(key, b'{"truncated')
    with pytest.raises(CorruptObject):
        plan_epoch(rt, max_units=PER_EPOCH)  # nothing guesses around a damaged checkpoint

    report = restore_after_damage(rt, 2, max_units=PER_EPOCH)

    assert (report.epoch, report.voided, report.quarantined) == (2, [4], [key])
    assert rt.repo.store.get(QUARANTINE + key) == b'{"truncated'  # the evidence is kept
    void = rt.repo.checkpoint(4)
    assert void is not None and is_void(void) and void.result.stats.records_read == 0
    marker = rt.repo.sinks_committed(4)  # its output was published: the rewind retracts it
    assert marker is not None and marker.output == "committed"
    assert report.plan is not None and (report.plan.epoch, retract_after(report.plan)) == (5, 2)
    run_until_drained(rt, max_units=PER_EPOCH)
    # epoch 3 (committed) and 4 (its output was published before the damage) are retracted
    assert sink_of(rt).epochs() == [1, 2, 5, 6, 7, 8]
    assert_exact(rt)


def test_a_planned_epoch_is_voided_and_its_late_attempt_fenced(pipeline: Pipeline) -> None:
    rt = pipeline()
    run_until_drained(rt, max_units=PER_EPOCH, max_epochs=3)
    assert plan_epoch(rt, max_units=PER_EPOCH) is not None
    late = process_attempt(rt, MemoryCompute(), 4)  # prepared, not committed

    report = restore_after_damage(rt, 3, max_units=PER_EPOCH)
    assert report.voided == [4]
    marker = rt.repo.sinks_committed(4)
    assert marker is not None and marker.output == "void"
    winner = commit_epoch(rt, 4, late.attempt)  # the late attempt wakes and tries to commit

    assert winner.attempt == "void" and is_void(winner)
    attempt = rt.repo.attempt(4, late.attempt)
    assert attempt is not None and attempt.status == AttemptStatus.ABORTED
    assert sink_of(rt).staged() == []
    run_until_drained(rt, max_units=PER_EPOCH)
    assert sink_of(rt).epochs() == [1, 2, 3, 5, 6, 7]  # epoch 4 published nothing
    assert_exact(rt)


class _Stop(Exception):
    pass


class _StopAt(Faults):
    """Raise at ``point`` (the process stops there; nothing after it runs)."""

    def hit(self, point: str, epoch: int) -> None:
        if point == self.point:
            raise _Stop(point)


def test_a_restore_stopped_before_its_rewind_is_finished_by_running_it_again(
    pipeline: Pipeline,
) -> None:
    rt = pipeline()
    run_until_drained(rt, max_units=PER_EPOCH, max_epochs=3)
    assert plan_epoch(rt, max_units=PER_EPOCH) is not None
    with pytest.raises(_Stop):  # epoch 4 voided, the rewind not planned yet
        restore_after_damage(pipeline(faults=_StopAt("plan.before_write")), 2)
    checkpoint = rt.repo.checkpoint(4)
    assert checkpoint is not None and is_void(checkpoint)
    with pytest.raises(ProtocolError, match="voided by `sluice restore`"):
        plan_epoch(rt, max_units=PER_EPOCH)  # no epoch continues from a void checkpoint

    report = restore_after_damage(rt, 2, max_units=PER_EPOCH)  # idempotent: finishes it
    assert report.voided == [] and report.plan is not None and report.plan.epoch == 5
    run_until_drained(rt, max_units=PER_EPOCH)
    assert sink_of(rt).epochs() == [1, 2, 5, 6, 7, 8]
    assert_exact(rt)
