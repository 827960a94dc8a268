"""Releasing read input: what no restorable checkpoint can replay goes back to the source.

A files source with ``clean_source`` archives or deletes the files it has read, once no
retained checkpoint or savepoint can replay them (Spark's ``cleanSource``). An epoch's input
can be replayed by a rewind to any restorable checkpoint before it, so epoch ``e``'s input is
released once ``e <= R``, with ``R`` the oldest restorable checkpoint kept: the oldest
retained one, or the oldest savepoint, whichever is older. Only live epochs release: a
rewound epoch's input was read again by the epochs of the replay, which release it in their
turn (a file the replay did not read again, one older than ``max_file_age`` by then, stays
where it is). Retention calls :func:`release_input` before it deletes plans; per epoch:

1. the epoch's input is recorded, ``released/<epoch>.json``, state ``waiting`` — only when the
   epoch's plan is about to be deleted while a savepoint may still replay it;
2. once ``e <= R``: the record is written (or rewritten) with state ``releasing`` — fault
   point ``release.after_record``;
3. the source releases the units (moves or deletes files; idempotent, a file already moved
   counts) — fault point ``release.after_move``;
4. the record says ``released``, with how many files went.

A crash anywhere is finished by the next commit's retention: a ``releasing`` record is
released again (the moves are idempotent), a ``waiting`` one waits for ``R``. Once its plan is
gone, a ``released`` record is folded into ``released/summary.json`` (how many files, which
epochs, as ranges) and deleted, so the folder holds what is still pending plus one summary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.contracts.layout import RELEASED
from sluice.protocol.runtime import Runtime
from sluice.storage import ObjectNotFound
from sluice.storage.manifest import read_manifest, write_manifest

__all__ = ["Released", "release_input", "released_summary"]

SUMMARY = RELEASED + "summary.json"


@dataclass(frozen=True)
class Released:
    """What a pass released: epochs done, files released, epochs still waiting."""

    epochs: tuple[int, ...] = ()
    files: int = 0
    waiting: tuple[int, ...] = ()


def released_summary(rt: Runtime) -> dict[str, Any]:
    """``{"files", "epochs": [[first, last], ...], "pending": [...]}`` for the history: every
    release so far (folded or not) and the epochs whose input still waits."""
    summary = _summary(rt)
    files, ranges = summary["files"], [tuple(r) for r in summary["epochs"]]
    pending = []
    for epoch, record in sorted(_records(rt).items()):
        if record["state"] in _PENDING:
            pending.append(epoch)
        elif record["state"] == "released" and not _within(ranges, epoch):
            files += int(record["released"])
            ranges = _add(ranges, epoch)
    return {"files": files, "epochs": [list(r) for r in ranges], "pending": pending}


def release_input(
    rt: Runtime, listed: Mapping[int, set[str]], below: int, kept: set[int], latest: int
) -> Released:
    """Release the input of every epoch at or before the oldest restorable checkpoint
    (module docstring). ``listed``: every epoch's stored documents; ``below``: the retention
    mark; ``kept``: the savepoints' epochs."""
    if not rt.source.releases_input:
        return Released()
    dead = rt.repo.rewound()
    oldest = _oldest_restorable(rt, listed, below, kept, dead)
    records = _records(rt)
    for epoch in sorted(e for e, r in records.items() if e in dead and r["state"] == "waiting"):
        records[epoch] = _write(rt, epoch, "rewound", records[epoch]["units"], 0)
    doomed = [e for e in listed if e < below and e not in kept and e not in dead]
    for epoch in sorted(doomed):  # their plans go now: keep their input while it waits
        if epoch not in records and (oldest is None or epoch > oldest):
            units = _units(rt, epoch)
            if units is not None:
                records[epoch] = _write(rt, epoch, "waiting", units)
    latest_offset = _latest_offset(rt, latest)
    done, files = [], 0
    candidates = set(records) | {e for e, names in listed.items() if "plan.json" in names}
    for epoch in sorted(e for e in candidates - set(dead) if oldest is not None and e <= oldest):
        record = records.get(epoch)
        if record is not None and record["state"] in ("released", "rewound"):
            continue
        units = record["units"] if record is not None else _units(rt, epoch)
        if units is None:
            continue
        _write(rt, epoch, "releasing", units)
        rt.faults.hit("release.after_record", latest)
        count = rt.source.release(list(units), latest_offset)
        rt.faults.hit("release.after_move", latest)
        records[epoch] = _write(rt, epoch, "released", units, count)
        done.append(epoch)
        files += count
    _fold(rt, records, listed)
    waiting = tuple(sorted(e for e, r in records.items() if r["state"] in _PENDING))
    return Released(tuple(done), files, waiting)


_PENDING = ("waiting", "releasing")


def _oldest_restorable(
    rt: Runtime, listed: Mapping[int, set[str]], below: int, kept: set[int], dead: Mapping[int, int]
) -> int | None:
    """The oldest committed epoch a rewind may still go back to."""
    committed = {e for e, names in listed.items() if "checkpoint.json" in names}
    restorable = [e for e in committed if (e >= below or e in kept) and e not in dead]
    return min(restorable, default=None)


def _units(rt: Runtime, epoch: int) -> list[str] | None:
    plan = rt.repo.plan(epoch)
    return None if plan is None else list(rt.source.units_of(plan.source_range))


def _latest_offset(rt: Runtime, latest: int) -> dict[str, Any] | None:
    checkpoint = rt.repo.checkpoint(latest)
    return None if checkpoint is None else checkpoint.end_offset


def _key(epoch: int) -> str:
    return f"{RELEASED}{epoch:012d}.json"


def _write(
    rt: Runtime, epoch: int, state: str, units: list[str], count: int | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"epoch": epoch, "state": state, "units": list(units)}
    if count is not None:
        body |= {"released": count, "at": rt.clock()}
    write_manifest(rt.repo.store, _key(epoch), "released", body, if_absent=False)
    return body


def _records(rt: Runtime) -> dict[int, dict[str, Any]]:
    found = {}
    for info in rt.repo.store.list(RELEASED):
        name = info.key[len(RELEASED) :]
        if name[:12].isdigit() and name.endswith(".json"):
            body = _read(rt, info.key)
            if body is not None:
                found[int(name[:12])] = body
    return found


def _fold(rt: Runtime, records: dict[int, dict[str, Any]], listed: Mapping[int, set[str]]) -> None:
    """Fold the released records of epochs whose plans are gone into the summary."""
    foldable = sorted(
        e
        for e, r in records.items()
        if r["state"] in ("released", "rewound") and "plan.json" not in listed.get(e, set())
    )
    if not foldable:
        return
    summary = _summary(rt)
    files, ranges = summary["files"], [tuple(r) for r in summary["epochs"]]
    for epoch in foldable:
        if records[epoch]["state"] == "released" and not _within(ranges, epoch):
            files += int(records[epoch]["released"])
            ranges = _add(ranges, epoch)
    body = {"files": files, "epochs": [list(r) for r in ranges]}
    write_manifest(rt.repo.store, SUMMARY, "released-summary", body, if_absent=False)
    for epoch in foldable:
        rt.repo.store.delete(_key(epoch))
        del records[epoch]


def _summary(rt: Runtime) -> dict[str, Any]:
    return _read(rt, SUMMARY, "released-summary") or {"files": 0, "epochs": []}


def _within(ranges: list[tuple[int, int]], epoch: int) -> bool:
    return any(first <= epoch <= last for first, last in ranges)


def _add(ranges: list[tuple[int, int]], epoch: int) -> list[tuple[int, int]]:
    """``ranges`` (sorted, disjoint) with ``epoch``, neighbours merged."""
    merged: list[tuple[int, int]] = []
    for first, last in sorted([*ranges, (epoch, epoch)]):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(last, merged[-1][1]))
        else:
            merged.append((first, last))
    return merged


def _read(rt: Runtime, key: str, kind: str = "released") -> dict[str, Any] | None:
    try:
        return read_manifest(rt.repo.store, key, kind)
    except ObjectNotFound:
        return None
