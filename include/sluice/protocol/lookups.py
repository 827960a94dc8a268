"""The lookup tables' versions in the plans (docs/joins.md, "Table types"): a new plan pins the
version of each lookup's table it joins, now; a replay joins the versions the epoch it replays
joined, checked before its plan is written; retention keeps the copies a kept plan pins.

What a version is, how it is read and checked, is each table kind's
(:class:`~sluice.contracts.lookups.LookupTable`, registered by type in
:data:`sluice.pipeline.LOOKUP_KINDS` and given to the runtime). A table without a version (an
empty folder, no Delta log, no such database table) is refused: a wrong path would otherwise
join every record to nothing. Copies no kept plan pins are deleted by retention
(:func:`stale_copies`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.contracts import layout
from sluice.contracts.lookups import PinRequest
from sluice.exceptions import TableUnavailable
from sluice.protocol.exceptions import ProtocolError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sluice.contracts.records import Checkpoint, Plan, TablePin
    from sluice.protocol.runtime import Runtime

__all__ = ["check_pins", "keeps_copies", "stale_copies", "table_pins"]


def table_pins(
    rt: Runtime, epoch: int, base: Checkpoint | None
) -> tuple[tuple[str, TablePin], ...]:
    """Each lookup's pin for the new plan of ``epoch`` (``base``: the checkpoint it starts
    from, whose copies an unchanged database table reuses)."""
    before = dict(base.plan.tables) if base is not None else {}
    record_types = rt.spec.record_types()
    pins = []
    for lookup in rt.spec.lookup:
        request = PinRequest(
            rt.name, epoch, lookup, record_types, rt.spec.s3, rt.connections,
            rt.repo.store.child(layout.lookup_copies(lookup.name)), before.get(lookup.name),
        )  # fmt: skip
        try:
            pin = rt.lookup_kinds[lookup.table_type].pin(request)
        except TableUnavailable as exc:
            where = f" ({exc.where})" if exc.where else ""
            raise ProtocolError(
                f"pipeline {rt.name}: epoch {epoch}: lookup {lookup.name}{where}: "
                f"{exc.problem}; {exc.fix}"
            ) from None
        pins.append((lookup.name, pin))
    return tuple(pins)


def check_pins(rt: Runtime, epoch: int, tables: Iterable[tuple[str, TablePin]]) -> None:
    """Refuse (:class:`~sluice.operators.exceptions.LookupTableError`) a plan of ``epoch``
    joining a pinned version whose files changed or are gone, before it is written: a replay
    that cannot run must leave no plan for the next request to be taken as its retry."""
    from sluice.operators.lookup import check_pin  # Spark's: imported when a replay is planned

    for lookup in rt.spec.lookup:
        pin = dict(tables).get(lookup.name)
        if pin is not None:
            check_pin(rt.spec, lookup, pin, epoch, rt.lookup_kinds)


def keeps_copies(rt: Runtime) -> bool:
    """Whether any lookup's table kind pins copies in the checkpoint store."""
    return any(rt.lookup_kinds[lookup.table_type].copies for lookup in rt.spec.lookup)


def stale_copies(rt: Runtime, below: int, plans: Iterable[Plan]) -> list[str]:
    """The table copies (keys under the checkpoint store) taken by plans below ``below`` that
    none of ``plans`` (every plan that may still run or be replayed) pins."""
    pinned: set[str] = set()
    for plan in plans:
        for name, pin in plan.tables:
            kind = rt.lookup_kinds.get(pin.kind)
            held = kind.retained(pin) if kind else tuple(k for k, _ in pin.files)  # unknown: kept
            pinned.update(layout.lookup_copies(name) + key for key in held)
    return [
        info.key
        for info in rt.repo.store.list(layout.LOOKUPS)
        if (owner := layout.lookup_copy_epoch(info.key)) is not None
        and owner < below
        and info.key not in pinned
    ]
