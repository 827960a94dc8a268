"""A run request resolved against the checkpoint store: read-only checks of what the request
names (does that checkpoint or savepoint exist, was its output retracted, can every sink retract
what a rewind retracts, does the source still have the input the rewound epochs read, do those
offsets re-read committed input), and the plan options it becomes (docs/rewind.md).

The request itself, and its shape checks, are :mod:`sluice.protocol.request`'s;
:meth:`RunRequest.resolve <sluice.protocol.request.RunRequest.resolve>` calls
:func:`resolve_request`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.contracts.records import Restore
from sluice.protocol.exceptions import InvalidRunRequest

if TYPE_CHECKING:
    from sluice.contracts.records import Plan
    from sluice.contracts.sources import Offset
    from sluice.protocol.request import RunRequest
    from sluice.protocol.runtime import Runtime

__all__ = ["PlanOptions", "epoch_ranges", "resolve_request"]


@dataclass(frozen=True)
class PlanOptions:
    """Keyword arguments for :func:`sluice.protocol.plan_epoch` derived from a request."""

    max_records: int | None = None
    start: Offset | None = None
    restored_from: Restore | None = None
    allow_state_drop: bool = False
    rewind_to: int | None = None  # the next epoch starts from this older checkpoint
    on_missing_offsets: str = "fail"  # earliest: plan past input the source no longer has
    lookup_versions: str = "pinned"  # current: a replay joins the lookup tables as they are

    def plan(self, rt: Runtime, *, max_units: int | None = None) -> Plan | None:
        """:func:`sluice.protocol.plan_epoch` with these options."""
        from sluice.protocol.plan import plan_epoch

        return plan_epoch(
            rt,
            max_units=max_units,
            max_records=self.max_records,
            start=self.start,
            restored_from=self.restored_from,
            allow_state_drop=self.allow_state_drop,
            rewind_to=self.rewind_to,
            on_missing_offsets=self.on_missing_offsets,
            lookup_versions=self.lookup_versions,
        )


def resolve_request(request: RunRequest, rt: Runtime) -> PlanOptions:
    """Check ``request`` against the checkpoint store (read-only) and turn it into plan
    options. Raises :class:`InvalidRunRequest`."""
    options = _resolve(request, rt)
    return dataclasses.replace(
        options,
        on_missing_offsets=request.on_missing_offsets,
        lookup_versions=request.lookup_versions,
    )


def _resolve(request: RunRequest, rt: Runtime) -> PlanOptions:
    if request.expect_latest is not None and rt.repo.latest_epoch() != request.expect_latest:
        raise InvalidRunRequest(
            rt.name,
            [
                f"expect_latest: the latest committed epoch is now {rt.repo.latest_epoch()}, "
                f"not {request.expect_latest}: epochs committed (or were retired) after this "
                "request was made, so it would not do what was confirmed; look again and "
                "confirm anew"
            ],
        )
    if request.take_savepoint is not None and rt.repo.savepoint(request.take_savepoint):
        taken = rt.repo.savepoint(request.take_savepoint)
        raise InvalidRunRequest(
            rt.name,
            [
                f"take_savepoint: {request.take_savepoint!r} already exists (epoch "
                f"{taken.epoch if taken else '?'}); choose another name or delete it first "
                "(the monitor's delete button, or sluice savepoint SPEC NAME --delete)"
            ],
        )
    if request.restore_from == "checkpoint":
        assert request.epoch is not None
        return _restore(request, rt, request.epoch, f"checkpoint {request.epoch}")
    if request.restore_from == "savepoint":
        return _restore_savepoint(request, rt)
    if request.restore_from == "offsets":
        start, restored = _start_at_offsets(request, rt)
        return PlanOptions(request.max_records, start, restored, request.allow_state_drop)
    return PlanOptions(request.max_records, allow_state_drop=request.allow_state_drop)


def _restore(
    request: RunRequest,
    rt: Runtime,
    epoch: int,
    what: str,
    field: str = "epoch",
    savepoint: str | None = None,
) -> PlanOptions:
    """Continue from committed ``epoch``: plainly when it is the latest, else a rewind."""
    latest = _check_checkpoint(rt, epoch, field)
    plain = PlanOptions(request.max_records, allow_state_drop=request.allow_state_drop)
    if epoch == latest:
        return plain
    pending = rt.repo.plan(latest + 1)
    if pending is not None:
        replaying = pending.retract_after == epoch and pending.replays is not None
        if replaying and request.lookup_versions != "pinned":  # another request, no retry
            raise InvalidRunRequest(
                rt.name,
                [
                    f"lookup_versions: epoch {latest + 1} is already planned as this rewind "
                    "joining the lookup tables' versions the rewound epochs joined "
                    "(lookup_versions: pinned); let it commit (trigger the same rewind again) "
                    "before rewinding with the tables as they are now"
                ],
            )
        if pending.retract_after == epoch:  # a retry
            return PlanOptions(
                request.max_records, None, pending.restored_from, request.allow_state_drop, epoch
            )
        raise InvalidRunRequest(
            rt.name,
            [
                f"{field}: epoch {latest + 1} is already planned and not committed; let it "
                "commit (trigger with restore_from=latest) before rewinding"
            ],
        )
    dead = rt.repo.rewound(since=epoch)
    if epoch in dead:
        raise InvalidRunRequest(
            rt.name,
            [
                f"{field}: the output of epoch {epoch} was retracted by the rewind that "
                f"epoch {dead[epoch]} started; it is no longer part of the pipeline's "
                "history (rewind to an epoch before it, or after it)"
            ],
        )
    live = [e for e in rt.repo.committed_epochs() if epoch < e <= latest and e not in dead]
    problems = [
        f"{field}: restoring {what} retracts the output of epochs {epoch_ranges(live)}, but "
        f"{problem}"
        for role in rt.sinks
        if (problem := role.sink.retraction_problem(epoch)) is not None
    ]
    missing = _missing_input(rt, live)
    if missing and request.on_missing_offsets == "fail":
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        shown = ", ".join(missing[:5]) + more
        problems.append(
            f"on_missing_offsets: the source no longer has input that epochs "
            f"{epoch_ranges(live)} read ({shown}); replaying without it would change "
            "the output silently. Put it back, or set on_missing_offsets=earliest to "
            "replay what is still there (the gap is recorded in the plan)"
        )
    if problems:
        raise InvalidRunRequest(rt.name, problems)
    restored = Restore(
        "savepoint" if savepoint else "checkpoint",
        epoch,
        retract_after=epoch,
        rewound=tuple(live),
        savepoint=savepoint,
        missing_input=tuple(missing),
    )
    return PlanOptions(request.max_records, None, restored, request.allow_state_drop, epoch)


def _missing_input(rt: Runtime, epochs: list[int]) -> list[str]:
    missing: list[str] = []
    for epoch in epochs:
        plan = rt.repo.plan(epoch)
        if plan is not None:
            missing += rt.source.missing_units(rt.source.decode_range(plan.source_range))
    return missing


def _check_checkpoint(rt: Runtime, epoch: int, field: str = "epoch") -> int:
    """The latest epoch; raises unless ``epoch`` is a retained committed checkpoint."""
    latest = rt.repo.latest_epoch()
    if rt.repo.is_retired(epoch) or rt.repo.checkpoint(epoch) is None:
        raise InvalidRunRequest(
            rt.name,
            [f"{field}: no committed checkpoint {epoch}; " + _restorable(rt)],
        )
    return latest


def _restore_savepoint(request: RunRequest, rt: Runtime) -> PlanOptions:
    assert request.savepoint is not None
    found = rt.repo.savepoint(request.savepoint)
    if found is None:
        names = ", ".join(s.name for s in rt.repo.savepoints()) or "none"
        raise InvalidRunRequest(
            rt.name, [f"savepoint: no savepoint {request.savepoint!r} (savepoints: {names})"]
        )
    what = f"savepoint {found.name!r} (epoch {found.epoch})"
    return _restore(request, rt, found.epoch, what, "savepoint", found.name)


def _start_at_offsets(request: RunRequest, rt: Runtime) -> tuple[Offset, Restore]:
    assert request.offsets is not None
    try:
        start = rt.source.offset_from_user(request.offsets)
    except (ValueError, TypeError) as exc:
        raise InvalidRunRequest(rt.name, [f"offsets: {exc}"]) from exc
    latest = rt.repo.latest_checkpoint()
    committed = rt.source.decode_offset(latest.end_offset) if latest else None
    pending = rt.repo.plan((latest.epoch if latest else 0) + 1)
    problems = []
    if pending is not None:
        problems.append(
            f"offsets: epoch {pending.epoch} is already planned and not committed; let it "
            "commit (trigger with restore_from=latest) before moving the start"
        )
    if committed is not None and rt.source.is_before(start, committed):
        at = [
            e
            for e in rt.repo.committed_epochs()
            if (c := rt.repo.checkpoint(e)) is not None
            and not rt.source.is_before(start, rt.source.decode_offset(c.end_offset))
            and not rt.source.is_before(rt.source.decode_offset(c.end_offset), start)
        ]
        hint = (
            f"restore_from=checkpoint with epoch={at[-1]}, which ends at these offsets"
            if at
            else "restore_from=checkpoint with the epoch to go back to"
        )
        problems.append(
            f"offsets: {start.describe()} is behind the committed offsets "
            f"{committed.describe()}; re-reading committed input on top of the committed "
            f"state and output would count it twice. To replay it, rewind instead ({hint}): "
            "that restores the state of that point and retracts the output after it"
        )
    if problems:
        raise InvalidRunRequest(rt.name, problems)
    skipped = committed.to_dict() if committed is not None else None
    return start, Restore("offsets", requested=dict(request.offsets), skipped_from=skipped)


def _restorable(rt: Runtime) -> str:
    """Which committed epochs a run can restore: the retained ones, less those a rewind
    retracted (named apart, so "1..6" never hides two that would be refused)."""
    kept = rt.repo.committed_epochs()
    if not kept:
        return "nothing is committed yet"
    dead = rt.repo.rewound()
    live = [e for e in kept if e not in dead]
    text = f"restorable committed epochs are {epoch_ranges(live)}"
    gone = [e for e in kept if e in dead]
    if gone:
        text += f" ({epoch_ranges(gone)} retracted by a rewind: not restorable)"
    return text


def epoch_ranges(epochs: list[int]) -> str:
    """[1, 2, 3, 7] -> '1..3, 7'."""
    parts: list[str] = []
    for e in epochs:
        if parts and parts[-1].split("..")[-1] == str(e - 1):
            parts[-1] = f"{parts[-1].split('..')[0]}..{e}"
        else:
            parts.append(str(e))
    return ", ".join(parts)
