"""Step 1 — plan: fix the exact input of the next epoch.

1. recover (finish a committed epoch whose sinks were not committed, drop dead attempts);
2. reuse ``plan(k+1)`` verbatim if it exists, so a retry replays exactly the same input;
3. otherwise ask the source for the next range from ``O_k`` (capped per epoch);
4. store ``plan(k+1)`` with put-if-absent (a concurrent planner's plan wins and is reused).

A rewind (``rewind_to=j``, j < k; see :mod:`sluice.protocol.resolve` and docs/rewind.md) plans
epoch k+1 from checkpoint j instead — its end offsets, watermark and state — and marks the
plan ``restored_from.retract_after = j``; writing that plan is the rewind's one atomic step.
Epoch numbers never go back, so every fence (checkpoint keys, sink transaction ids) stays
monotonic; the epochs j+1..k are "rewound" from then on. A replay of a rewound epoch joins
the lookup table versions that epoch joined (docs/rewind.md), checked before its plan is
written: a rewind refused for a version gone leaves nothing planned.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sluice.contracts.records import (
    Checkpoint,
    Plan,
    Restore,
    StateMigration,
    StateRef,
    StateShape,
    WatermarkState,
)
from sluice.contracts.sources import Offset
from sluice.exceptions import SourceError
from sluice.protocol.exceptions import ProtocolError, SpecChanged
from sluice.protocol.lookups import check_pins, table_pins
from sluice.protocol.recovery import recover
from sluice.protocol.runtime import Runtime
from sluice.protocol.upgrade import compare_shapes
from sluice.storage import ObjectAlreadyExists

__all__ = ["plan_epoch"]


def plan_epoch(
    rt: Runtime,
    *,
    max_units: int | None = None,
    max_records: int | None = None,
    start: Offset | None = None,
    restored_from: Restore | None = None,
    allow_state_drop: bool = False,
    rewind_to: int | None = None,
    on_missing_offsets: str = "fail",
    lookup_versions: str = "pinned",
) -> Plan | None:
    """The plan of the next epoch, or None when the source has nothing new.

    ``max_units`` / ``max_records`` cap a new plan's input; ``start`` replaces the committed
    end offset as the start of a new plan (checked by :mod:`sluice.protocol.resolve`). None of
    them changes a plan that is already stored: a retry replays it verbatim.
    ``allow_state_drop`` lets a new plan continue under a spec change that drops state
    (:mod:`sluice.protocol.upgrade`); compatible changes never need it. ``rewind_to`` starts
    a new plan from that older checkpoint (with ``restored_from`` from the run request).
    ``on_missing_offsets="earliest"`` lets a new plan start past input the source no longer
    has (:meth:`Source.skipping_missing_input`), whatever the spec says.
    ``lookup_versions="current"``: a replay joins the lookup tables as they are now, not the
    versions the epochs it replays joined (docs/joins.md).
    """
    started = rt.clock()
    latest = recover(rt)
    epoch = (latest.epoch if latest else 0) + 1
    existing = rt.repo.plan(epoch)
    if existing is not None:
        _migration(rt, existing.state_shape, epoch - 1, allow=False)
        return existing
    if latest is not None and latest.void is not None and rewind_to is None:
        raise ProtocolError(
            f"pipeline {rt.name}: epoch {latest.epoch} was voided by `sluice restore`, which "
            "had not yet planned its rewind; run it again to finish: sluice restore SPEC "
            f"--epoch {latest.void.restore_to}"
        )
    base = latest
    if rewind_to is not None and latest is not None and rewind_to != latest.epoch:
        base = rt.repo.checkpoint(rewind_to)
        if base is None:
            raise ProtocolError(f"pipeline {rt.name}: no checkpoint {rewind_to} to rewind to")
    migration = StateMigration()
    if base is not None:
        migration = _migration(rt, base.plan.state_shape, base.epoch, allow_state_drop)
    caps = _Caps(max_units, max_records, on_missing_offsets == "earliest")
    plan = _new_plan(rt, base, epoch, caps, start, restored_from, started, migration)
    if plan is not None and rt.spec.lookup:
        replay = _replaying(rt, base, plan) if lookup_versions == "pinned" else None
        if replay is not None:  # refused before it is written: nothing left to retry
            check_pins(rt, epoch, replay.tables)
        plan = replay or replace(plan, tables=table_pins(rt, epoch, base))
    if plan is None and base is not latest:
        assert base is not None
        raise ProtocolError(
            f"pipeline {rt.name}: the source has nothing left to replay after epoch "
            f"{base.epoch} ({restored_from}); a rewind needs input to replay"
        )
    if plan is None:
        return None
    rt.faults.hit("plan.before_write", epoch)
    try:
        rt.repo.put_plan_if_absent(plan)
    except ObjectAlreadyExists:
        stored = rt.repo.plan(epoch)
        assert stored is not None
        if restored_from is not None and stored.restored_from != plan.restored_from:
            raise ProtocolError(
                f"pipeline {rt.name}: epoch {epoch} was planned by another run "
                f"({stored.run_id}) at the same time, without this request's restore "
                f"{restored_from}; nothing of this request was written. Trigger it again once "
                f"epoch {epoch} has committed."
            ) from None
        plan = stored
    rt.faults.hit("plan.after_write", epoch)
    return plan


@dataclass(frozen=True)
class _Caps:
    units: int | None
    records: int | None
    skip_missing: bool = False


def _new_plan(
    rt: Runtime,
    latest: Checkpoint | None,
    epoch: int,
    caps: _Caps,
    start: Offset | None,
    restored_from: Restore | None,
    started: float,
    migration: StateMigration,
) -> Plan | None:
    if start is None:
        start = rt.source.decode_offset(latest.end_offset) if latest else rt.source.initial_offset()
    source = rt.source.skipping_missing_input() if caps.skip_missing else rt.source
    source = source.planning(epoch)
    try:
        rng = source.plan_range(start, caps.units, caps.records)
    except SourceError as exc:
        named = exc.in_epoch(rt.name, epoch)
        if named is None:
            raise
        raise named from None
    if rng is None:
        return None
    now = rt.clock()
    return Plan(
        pipeline=rt.name,
        epoch=epoch,
        source_range=rng.to_dict(),
        start_offset=start.to_dict(),
        end_offset=rng.end.to_dict(),
        watermark=latest.result.watermark if latest else WatermarkState(),
        state=latest.result.state if latest and not migration.reset_all else StateRef(),
        fingerprint=rt.spec.fingerprint(),
        state_shape=rt.spec.state_shape(),
        created_at=now,
        plan_seconds=round(now - started, 6),
        run_id=rt.run_id,
        restored_from=restored_from,
        state_migration=migration if migration.changed else None,
    )


def _replaying(rt: Runtime, base: Checkpoint | None, plan: Plan) -> Plan | None:
    """``plan`` joining the table versions of the rewound epoch it replays, if it replays
    one (else None: it pins the tables as they are now). A rewind's first plan may replay
    the first epoch it rewinds, the plan after a replay the rewound epoch after the replayed
    one; it replays it when it starts where that one started (a replay cut as the first run
    was). The rewound epochs are those the rewind retracts (``restored_from.rewound``), never
    epochs an earlier rewind retracted already: a pinned replay joins what the epochs it
    rewinds joined."""
    candidate = _replayed(rt, base, plan)
    original = rt.repo.plan(candidate) if candidate is not None and candidate < plan.epoch else None
    if original is None or not _same_position(rt, original.start_offset, plan.start_offset):
        return None
    pinned = dict(original.tables)
    if any(lookup.name not in pinned for lookup in rt.spec.lookup):
        return None  # the replayed epoch had no such lookup
    tables = tuple((lk.name, pinned[lk.name]) for lk in rt.spec.lookup)
    return replace(plan, tables=tables, replays=original.epoch)


def _replayed(rt: Runtime, base: Checkpoint | None, plan: Plan) -> int | None:
    """The rewound epoch ``plan`` would replay: the first the rewind retracts, or the one after
    the epoch its base replayed (stored without ``rewound``: the epoch after that one)."""
    restored = plan.restored_from
    if restored is not None and restored.retract_after is not None:  # a rewind
        return min(restored.rewound, default=restored.retract_after + 1)
    if base is None or base.plan.replays is None:
        return None
    replayed = base.plan.replays
    rewind = base.plan  # the rewind's first plan: the replays that follow it come after it
    while rewind.restored_from is None or rewind.restored_from.retract_after is None:
        before = rt.repo.plan(rewind.epoch - 1)
        if before is None or before.replays is None:
            return replayed + 1
        rewind = before
    later = [e for e in rewind.restored_from.rewound if e > replayed]
    return min(later, default=None if rewind.restored_from.rewound else replayed + 1)


def _same_position(rt: Runtime, a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two stored offsets mark the same input read, as the source sees it (a files
    source's sets of files read may be equal in objects written by different plans)."""
    if a == b:
        return True
    first, second = rt.source.decode_offset(a), rt.source.decode_offset(b)
    return not rt.source.is_before(first, second) and not rt.source.is_before(second, first)


def _migration(rt: Runtime, stored: StateShape, epoch: int, allow: bool) -> StateMigration:
    """What the spec change since checkpoint ``epoch`` does to its state; raises SpecChanged
    when it drops state and ``allow`` is false."""
    migration = compare_shapes(stored, rt.spec.state_shape())
    if migration.drops_state and not allow:
        raise SpecChanged(rt.name, epoch, list(migration.dropped))
    return migration
