"""Retention and savepoints: keep the last ``checkpoint.retained`` checkpoints, and every
checkpoint a savepoint points to; delete the rest safely.

Retention runs at the end of every commit (after the sinks-committed marker), in the process
that finished the commit. With ``L`` the epoch just committed and ``R`` = ``retained``, every
epoch below ``F = L - R + 1`` is retired:

1. hand the source the input no restorable checkpoint can replay any more (a files source's
   ``clean_source``: :mod:`sluice.protocol.release`), keeping aside the input of the plans
   about to be deleted that a savepoint may still replay;
2. write the mark ``retired/<F>.json`` (put-if-absent; the highest mark counts, so two
   concurrent passes cannot lower it) — **from here on, no attempt may commit an epoch below
   F**: :func:`sluice.protocol.commit.write_checkpoint` reads the mark after its own
   put-if-absent and backs out when its epoch is retired, so a zombie that wakes after its
   checkpoint was deleted cannot bring it back;
3. delete, for every epoch below ``F`` that no savepoint points to: its sink leftovers
   (``abort_others``), its state parts that no kept checkpoint reads (a kept checkpoint's
   base and deltas may be older than ``F``: sluice.state), each part's folder whole (hidden
   files too), then its documents (plan, attempts, checkpoint, marker), the checkpoint last;
4. delete the database lookup table copies no kept plan pins (:mod:`sluice.protocol.lookups`),
   and what the source stored at plan time that no kept offset names (its sets of files
   read: ``Source.forget``);
5. delete the marks lower than ``F``.

Never deleted: the latest checkpoint (``R >= 1``), the ``R - 1`` before it (so the next epoch,
in flight or not, has the state and plan it starts from), and any checkpoint a savepoint
names. A crash anywhere leaves documents that the next pass deletes (it always lists all of
``epochs/`` and ``state/`` below the mark); readers skip retired epochs meanwhile.

Savepoints (``savepoints/<name>.json``) are named pointers, taken by hand, never expired. Taking
one writes the pointer (put-if-absent), then re-reads the checkpoint and the mark: if retention
deleted the checkpoint in between, the pointer is removed again and the call fails, so a
savepoint never points at nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sluice.contracts import layout
from sluice.contracts.records import Checkpoint, RetiredMark, Savepoint
from sluice.protocol.exceptions import SavepointError
from sluice.protocol.release import Released, release_input
from sluice.protocol.runtime import Runtime
from sluice.storage import ObjectAlreadyExists

__all__ = [
    "RetentionReport",
    "SavepointError",
    "apply_retention",
    "delete_savepoint",
    "take_savepoint",
]


@dataclass
class RetentionReport:
    below: int = 0  # the mark after this pass (0: nothing retired yet)
    epochs_deleted: list[int] = field(default_factory=list)
    objects_deleted: int = 0
    kept_for_savepoints: list[int] = field(default_factory=list)
    released: Released = field(default_factory=Released)  # input handed back (clean_source)


def apply_retention(rt: Runtime, latest: int) -> RetentionReport:
    """Retire every epoch below ``latest - retained + 1`` (see the module docstring)."""
    retained = rt.spec.checkpoint.retained if rt.spec.checkpoint else 10
    below = latest - max(retained, 1) + 1
    report = RetentionReport(below=rt.repo.retired_below())
    if rt.source.releases_input:  # epoch 1's input may go before anything is retired
        listed = rt.repo.epochs(include_retired=True)
        kept = {s.epoch for s in rt.repo.savepoints()}
        report.released = release_input(rt, listed, max(below, report.below), kept, latest)
    if below <= 1:
        return report
    listed = rt.repo.epochs(include_retired=True)
    kept = {s.epoch for s in rt.repo.savepoints()}
    if below > report.below:
        rt.repo.put_retired_mark(RetiredMark(below, rt.clock()))
        report.below = below
        rt.faults.hit("retention.after_mark", latest)
    below = report.below
    report.kept_for_savepoints = sorted(e for e in kept if e < below)
    doomed = sorted(e for e in listed if e < below and e not in kept)
    # every kept checkpoint, read once: the state parts and lookup table copies it uses
    still = sorted({e for e in listed if e >= below} | kept)
    checkpoints = {e: rt.repo.checkpoint(e) for e in still}
    # state parts a kept checkpoint reads (its base and deltas may be older than the mark)
    needed = _referenced_parts(rt, checkpoints.values())
    state_folders = sorted(
        {
            _folder_of(i.key)
            for i in rt.repo.store.list(layout.STATE)
            if not _in_parts(i.key, needed)
        }
    )
    for i, epoch in enumerate(doomed):
        for role in rt.sinks:
            report.objects_deleted += role.sink.abort_others(epoch, keep=None)
        for folder in state_folders:
            if layout.state_epoch_of(folder) == epoch:
                report.objects_deleted += _delete_state(rt, folder)
        report.objects_deleted += _delete_epoch_documents(rt, epoch, listed[epoch])
        report.epochs_deleted.append(epoch)
        if i == 0:
            rt.faults.hit("retention.mid_delete", latest)
    # state snapshots of retired epochs whose documents were already gone (a crash above)
    for folder in state_folders:
        owner = layout.state_epoch_of(folder)
        if owner is not None and owner < below and owner not in kept and owner not in listed:
            report.objects_deleted += _delete_state(rt, folder)
    if _keeps_copies(rt):
        report.objects_deleted += _delete_stale_copies(rt, below, latest, checkpoints)
    report.objects_deleted += rt.source.forget(_kept_offsets(rt, latest, checkpoints), latest)
    for mark in rt.repo.retired_marks():
        if mark < below:
            rt.repo.delete_retired_mark(mark)
    # no rewind can go below the oldest checkpoint kept: history kept for retraction can go
    for role in rt.sinks:
        role.sink.forget_through(min([below, *kept]))
    return report


def _keeps_copies(rt: Runtime) -> bool:
    from sluice.protocol.lookups import keeps_copies

    return keeps_copies(rt)


def _delete_stale_copies(
    rt: Runtime, below: int, latest: int, checkpoints: Mapping[int, Checkpoint | None]
) -> int:
    """Delete the database lookup table copies no plan that may still run pins: the kept
    checkpoints' (``checkpoints``, by epoch: None where the epoch has no checkpoint, whose
    plan is read) and the next epoch's (planned, or being planned: a copy it takes is named
    by its epoch, above ``below``)."""
    from sluice.protocol.lookups import stale_copies

    plans = [c.plan for c in checkpoints.values() if c is not None]
    unread = sorted({e for e, c in checkpoints.items() if c is None} | {latest + 1})
    plans += [plan for epoch in unread if (plan := rt.repo.plan(epoch)) is not None]
    doomed = stale_copies(rt, below, plans)
    for key in doomed:
        rt.repo.store.delete(key)
    return len(doomed)


def _kept_offsets(
    rt: Runtime, latest: int, checkpoints: Mapping[int, Checkpoint | None]
) -> list[dict[str, Any]]:
    """The stored offsets a kept checkpoint, savepoint or the plan not yet committed may
    start from: what the source may still need of what it stored (``Source.forget``)."""
    kept = [c.end_offset for c in checkpoints.values() if c is not None]
    unread = sorted({e for e, c in checkpoints.items() if c is None} | {latest + 1})
    for epoch in unread:
        plan = rt.repo.plan(epoch)
        if plan is not None:
            kept += [plan.start_offset, plan.end_offset]
    return kept


def _referenced_parts(rt: Runtime, checkpoints: Iterable[Checkpoint | None]) -> set[str]:
    """The state part folders (``state/<epoch>-<attempt>``) ``checkpoints`` read."""
    from sluice.state import state_parts

    found: set[str] = set()
    for checkpoint in checkpoints:
        if checkpoint is not None:
            found.update(p.key for p in state_parts(rt.repo.store, checkpoint.result.state))
    return found


def _in_parts(key: str, parts: set[str]) -> bool:
    return any(key.startswith(part + "/") for part in parts)


def _folder_of(key: str) -> str:
    """The part folder ``state/<epoch>-<attempt>/`` holding ``key`` (``key`` itself if it
    sits directly under ``state/``)."""
    end = key.find("/", len(layout.STATE))
    return key if end < 0 else key[: end + 1]


def _delete_state(rt: Runtime, folder: str) -> int:
    """Delete a part folder whole: its objects, and on a local disk its hidden files (Spark's
    ``.crc``, the fingerprint memo) and the directory itself."""
    if not folder.endswith("/"):
        rt.repo.store.delete(folder)
        return 1
    return rt.repo.store.delete_prefix(folder)


def _delete_epoch_documents(rt: Runtime, epoch: int, names: set[str]) -> int:
    """The checkpoint goes last: until then the epoch still reads as committed."""
    prefix = layout.EPOCHS + f"{epoch:012d}/"
    ordered = sorted(names, key=lambda n: (n == "checkpoint.json", n))
    for name in ordered:
        rt.repo.store.delete(prefix + name)
    return len(ordered)


# -- savepoints ---------------------------------------------------------------------------


def take_savepoint(rt: Runtime, name: str, epoch: int | None = None, note: str = "") -> Savepoint:
    """Point ``name`` at committed checkpoint ``epoch`` (default: the latest)."""
    _check_name(rt, name)
    epoch = epoch if epoch is not None else rt.repo.latest_epoch()
    if epoch == 0:
        raise SavepointError(rt.name, name, "nothing is committed yet")
    checkpoint = rt.repo.checkpoint(epoch) if not rt.repo.is_retired(epoch) else None
    if checkpoint is None:
        raise SavepointError(rt.name, name, _no_checkpoint(rt, epoch))
    existing = rt.repo.savepoint(name)
    if existing is not None:
        raise SavepointError(
            rt.name, name, f"already exists (epoch {existing.epoch}); delete it first"
        )
    savepoint = Savepoint(
        name=name,
        pipeline=rt.name,
        epoch=epoch,
        attempt=checkpoint.attempt,
        fingerprint=checkpoint.plan.fingerprint,
        state_shape=checkpoint.plan.state_shape,
        created_at=rt.clock(),
        run_id=rt.run_id,
        note=note,
    )
    try:
        rt.repo.put_savepoint_if_absent(savepoint)
    except ObjectAlreadyExists:
        raise SavepointError(rt.name, name, "already exists; delete it first") from None
    # retention may have retired the epoch between the check above and the pointer
    if rt.repo.checkpoint(epoch) is None:
        rt.repo.delete_savepoint(name)
        raise SavepointError(rt.name, name, _no_checkpoint(rt, epoch))
    return savepoint


def delete_savepoint(rt: Runtime, name: str) -> Savepoint:
    """Remove the pointer; the checkpoint it protected is retired by the next commit if it is
    older than the retained ones."""
    _check_name(rt, name)
    savepoint = rt.repo.savepoint(name)
    if savepoint is None:
        have = ", ".join(s.name for s in rt.repo.savepoints()) or "none"
        raise SavepointError(rt.name, name, f"no such savepoint (savepoints: {have})")
    rt.repo.delete_savepoint(name)
    return savepoint


def _check_name(rt: Runtime, name: str) -> None:
    """A savepoint name is one object-key segment: nothing that could leave savepoints/."""
    if not isinstance(name, str) or not layout.SAVEPOINT_NAME.match(name):
        raise SavepointError(
            rt.name,
            name,
            "a name is 1-100 letters, digits, '_', '.' or '-', starting with a letter or digit",
        )


def _no_checkpoint(rt: Runtime, epoch: int) -> str:
    committed = rt.repo.committed_epochs()
    have = ", ".join(map(str, committed)) or "none"
    return f"no committed checkpoint {epoch} (retained checkpoints: {have})"
