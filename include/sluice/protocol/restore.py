"""The operator's way out of damaged checkpoint storage: ``sluice restore SPEC --epoch N``.

A corrupt manifest or state file stops the pipeline (:class:`CorruptObject`, naming the key)
and nothing guesses around it. ``restore_after_damage(rt, N)`` then continues from the older
retained checkpoint ``N``, which must read cleanly (manifest and state files):

1. every epoch above ``N`` is settled: a damaged manifest (plan, checkpoint, sinks marker) is
   copied to ``quarantine/<key>`` (the evidence is kept) and replaced; an epoch without a
   checkpoint (a plan that can never commit, its input or state being damaged) gets a
   **void checkpoint**, written with put-if-absent like any commit, so an attempt still
   running on it is fenced exactly as a losing attempt is. A void epoch read nothing and
   published nothing;
2. the next epoch is planned as a rewind to ``N`` (:mod:`sluice.protocol.resolve`): it replays
   from ``N``'s offsets, watermark and state, and its commit retracts the output of every
   epoch after ``N`` from every sink.

Re-running the command after a crash finishes it (each write is idempotent). Until the rewind
is planned, no epoch continues from a void checkpoint.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sluice.contracts import layout
from sluice.contracts.records import (
    Checkpoint,
    EpochResult,
    EpochStats,
    OutputFate,
    Plan,
    Restore,
    SinksCommitted,
    StateRef,
    Void,
)
from sluice.protocol.exceptions import ProtocolError
from sluice.protocol.process import verify_state
from sluice.protocol.recovery import finish_commit
from sluice.protocol.request import RunRequest
from sluice.protocol.runtime import Runtime
from sluice.storage import CorruptObject, ObjectAlreadyExists, ObjectNotFound
from sluice.storage.manifest import read_manifest, write_manifest

__all__ = ["QUARANTINE", "RestoreReport", "is_void", "restore_after_damage"]

QUARANTINE = "quarantine/"
VOID_ATTEMPT = "void"


@dataclass
class RestoreReport:
    epoch: int  # the checkpoint restored from
    quarantined: list[str] = field(default_factory=list)  # keys copied to quarantine/
    voided: list[int] = field(default_factory=list)
    plan: Plan | None = None  # the rewind's first epoch


def is_void(checkpoint: Checkpoint) -> bool:
    return checkpoint.void is not None


def restore_after_damage(rt: Runtime, epoch: int, *, max_units: int | None = None) -> RestoreReport:
    """Settle every epoch above ``epoch`` and plan the rewind to it (see the module doc)."""
    _check_target(rt, epoch)
    report = RestoreReport(epoch)
    target = rt.repo.checkpoint(epoch)
    assert target is not None
    for later in _epochs_above(rt, epoch):
        _settle(rt, later, target, report)
    if report.voided or rt.repo.latest_epoch() > epoch:
        options = RunRequest.from_conf(
            rt.name, {"restore_from": "checkpoint", "epoch": epoch}
        ).resolve(rt)
        report.plan = options.plan(rt, max_units=max_units)
    return report


def _check_target(rt: Runtime, epoch: int) -> None:
    try:
        checkpoint = rt.repo.checkpoint(epoch)
        if checkpoint is None or rt.repo.is_retired(epoch) or is_void(checkpoint):
            kept = rt.repo.committed_epochs()
            raise ProtocolError(
                f"pipeline {rt.name}: no retained committed checkpoint {epoch} to restore from "
                f"(retained: {kept})"
            )
        verify_state(rt, checkpoint.result.state)
    except CorruptObject as exc:
        raise ProtocolError(
            f"pipeline {rt.name}: checkpoint {epoch} is damaged too ({exc}); restore from an "
            "older one"
        ) from exc


def _epochs_above(rt: Runtime, epoch: int) -> list[int]:
    """Every epoch with any object above ``epoch`` (committed or not), ascending."""
    found = {layout.epoch_of(info.key) for info in rt.repo.store.list(layout.EPOCHS)}
    return sorted(e for e in found if e is not None and e > epoch)


def _settle(rt: Runtime, epoch: int, target: Checkpoint, report: RestoreReport) -> None:
    plan = _readable(rt, layout.plan_key(epoch), "plan", report)
    checkpoint = _readable(rt, layout.checkpoint_key(epoch), "checkpoint", report)
    marker = _readable(rt, layout.sinks_committed_key(epoch), "sinks-committed", report)
    if checkpoint is not None:
        if marker is None:  # committed, sinks not published: finish (the rewind retracts it)
            if layout.sinks_committed_key(epoch) in report.quarantined:
                rt.repo.store.delete(layout.sinks_committed_key(epoch))
            finish_commit(rt, Checkpoint.from_dict(checkpoint), started=rt.clock())
        return
    restored = Restore.from_dict(plan.get("restored_from")) if plan is not None else None
    if restored is not None and restored.retract_after == target.epoch:
        return  # the rewind this command planned before: a retry reuses it
    if plan is None:  # damaged or missing: a readable stand-in at its key
        plan = _put(rt, layout.plan_key(epoch), "plan", report, dataclasses.replace(
            target.plan, epoch=epoch, run_id=rt.run_id, restored_from=None,
            state_migration=None, created_at=rt.clock(),
        ).to_dict())  # fmt: skip
    void = Checkpoint(
        pipeline=rt.name,
        epoch=epoch,
        attempt=VOID_ATTEMPT,
        plan=Plan.from_dict(plan),
        result=EpochResult(EpochStats(), target.result.watermark, None, StateRef(), (), 0.0),
        committed_at=rt.clock(),
        run_id=rt.run_id,
        extra={"void": Void(target.epoch, tuple(report.quarantined)).to_dict()},
    )
    stored = _put(rt, layout.checkpoint_key(epoch), "checkpoint", report, void.to_dict())
    if stored == void.to_dict():
        report.voided.append(epoch)
    # else an attempt committed it after all: a real epoch, which the rewind retracts
    marker_body = SinksCommitted(epoch, str(stored["attempt"]), rt.clock(), 0.0, OutputFate.VOID)
    _put(rt, layout.sinks_committed_key(epoch), "sinks-committed", report, marker_body.to_dict())


def _put(
    rt: Runtime, key: str, kind: str, report: RestoreReport, body: dict[str, Any]
) -> dict[str, Any]:
    """Write ``body`` at ``key``: over a quarantined (damaged) object, else put-if-absent.
    Returns what is stored there now."""
    store = rt.repo.store
    try:
        write_manifest(store, key, kind, body, if_absent=key not in report.quarantined)
    except ObjectAlreadyExists:
        return read_manifest(store, key, kind)
    return body


def _readable(rt: Runtime, key: str, kind: str, report: RestoreReport) -> dict[str, Any] | None:
    """The manifest at ``key``; a damaged one is copied to quarantine/ and counts as absent
    (its key is then overwritten, never left empty for a late writer to claim)."""
    store = rt.repo.store
    try:
        return read_manifest(store, key, kind)
    except ObjectNotFound:
        return None
    except CorruptObject:
        store.put(QUARANTINE + key, store.get(key))
        report.quarantined.append(key)
        return None
