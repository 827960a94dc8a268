"""Typed reads and writes of the protocol's documents in checkpoint storage."""

from __future__ import annotations

import contextlib
from typing import Any

from sluice.contracts import layout
from sluice.contracts.records import (
    AttemptRecord,
    AttemptStatus,
    Checkpoint,
    Plan,
    RetiredMark,
    Savepoint,
    SinksCommitted,
)
from sluice.protocol.exceptions import AttemptStateError
from sluice.storage import ObjectAlreadyExists, ObjectNotFound, ObjectStore
from sluice.storage.manifest import read_manifest, write_manifest

__all__ = ["Repository", "advance"]


def advance(
    record: AttemptRecord, status: AttemptStatus, at: float, **changes: Any
) -> AttemptRecord:
    """``record`` moved to ``status`` at ``at``; an attempt's status only moves forward
    (:class:`AttemptStateError` otherwise)."""
    if not record.can_become(status):
        raise AttemptStateError(
            record.pipeline, record.epoch, record.attempt, record.status, status
        )
    return record.moved_to(status, at, **changes)


class Repository:
    """The checkpoint store of one pipeline (rooted at ``<storage>/<pipeline>/``)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    # -- plans -----------------------------------------------------------------------------

    def plan(self, epoch: int) -> Plan | None:
        body = self._read(layout.plan_key(epoch), "plan")
        return Plan.from_dict(body) if body is not None else None

    def put_plan_if_absent(self, plan: Plan) -> None:
        write_manifest(
            self.store, layout.plan_key(plan.epoch), "plan", plan.to_dict(), if_absent=True
        )

    # -- attempts --------------------------------------------------------------------------

    def attempt(self, epoch: int, attempt: str) -> AttemptRecord | None:
        body = self._read(layout.attempt_key(epoch, attempt), "attempt")
        return AttemptRecord.from_dict(body) if body is not None else None

    def attempts(self, epoch: int) -> list[AttemptRecord]:
        keys = [i.key for i in self.store.list(layout.attempts_prefix(epoch))]
        found = (self._read(k, "attempt") for k in keys if k.endswith(".json"))
        return [AttemptRecord.from_dict(b) for b in found if b is not None]

    def start_attempt(self, record: AttemptRecord) -> None:
        write_manifest(
            self.store,
            layout.attempt_key(record.epoch, record.attempt),
            "attempt",
            record.to_dict(),
            if_absent=True,
        )

    def update_attempt(self, record: AttemptRecord) -> None:
        """An attempt's record belongs to that attempt alone, so a plain put is safe."""
        write_manifest(
            self.store,
            layout.attempt_key(record.epoch, record.attempt),
            "attempt",
            record.to_dict(),
            if_absent=False,
        )

    # -- checkpoints -----------------------------------------------------------------------

    def checkpoint(self, epoch: int) -> Checkpoint | None:
        body = self._read(layout.checkpoint_key(epoch), "checkpoint")
        return Checkpoint.from_dict(body) if body is not None else None

    def put_checkpoint_if_absent(self, checkpoint: Checkpoint) -> None:
        """The commit point: raises ObjectAlreadyExists when another attempt won."""
        write_manifest(
            self.store,
            layout.checkpoint_key(checkpoint.epoch),
            "checkpoint",
            checkpoint.to_dict(),
            if_absent=True,
        )

    def sinks_committed(self, epoch: int) -> SinksCommitted | None:
        body = self._read(layout.sinks_committed_key(epoch), "sinks-committed")
        return SinksCommitted.from_dict(body) if body is not None else None

    def mark_sinks_committed(self, marker: SinksCommitted) -> None:
        key = layout.sinks_committed_key(marker.epoch)
        if not self.store.exists(key):
            write_manifest(self.store, key, "sinks-committed", marker.to_dict(), if_absent=False)

    # -- savepoints ------------------------------------------------------------------------

    def savepoint(self, name: str) -> Savepoint | None:
        body = self._read(layout.savepoint_key(name), "savepoint")
        return Savepoint.from_dict(body) if body is not None else None

    def savepoints(self) -> list[Savepoint]:
        """Every savepoint, oldest epoch first."""
        found = []
        for info in self.store.list(layout.SAVEPOINTS):
            if info.key.endswith(".json"):
                body = self._read(info.key, "savepoint")
                if body is not None:
                    found.append(Savepoint.from_dict(body))
        return sorted(found, key=lambda s: (s.epoch, s.name))

    def put_savepoint_if_absent(self, savepoint: Savepoint) -> None:
        """Raises ObjectAlreadyExists when the name is taken."""
        write_manifest(
            self.store,
            layout.savepoint_key(savepoint.name),
            "savepoint",
            savepoint.to_dict(),
            if_absent=True,
        )

    def delete_savepoint(self, name: str) -> None:
        self.store.delete(layout.savepoint_key(name))

    # -- refusals --------------------------------------------------------------------------

    def record_refusal(self, run_id: str | None, message: str, at_us: int) -> None:
        """Keep the last refused run request (replaces the one before): what was asked by which
        run, and why it was refused. Never read by the protocol; operators see it."""
        body = {"run_id": run_id, "message": message, "at_us": int(at_us)}
        write_manifest(self.store, layout.LAST_REFUSAL, "refusal", body, if_absent=False)

    def last_refusal(self) -> dict[str, Any] | None:
        """``{"run_id", "message", "at_us"}`` of the last refused run request, or None."""
        return self._read(layout.LAST_REFUSAL, "refusal")

    # -- retention marks -------------------------------------------------------------------

    def retired_marks(self) -> list[int]:
        """The ``below`` of every stored retention mark, ascending."""
        found = (layout.retired_of(i.key) for i in self.store.list(layout.RETIRED))
        return sorted(b for b in found if b is not None)

    def retired_mark(self, below: int | None = None) -> RetiredMark | None:
        """The mark ``below`` (default: the highest one), or None."""
        if below is None:
            marks = self.retired_marks()
            if not marks:
                return None
            below = marks[-1]
        body = self._read(layout.retired_key(below), "retired")
        return RetiredMark.from_dict(body) if body is not None else None

    def retired_below(self) -> int:
        """Epochs below this are retired (unless a savepoint points to them); 0: none."""
        return max(self.retired_marks(), default=0)

    def put_retired_mark(self, mark: RetiredMark) -> None:
        """Marks are write-once; the highest one counts, so concurrent writers cannot lower
        it (an existing mark with the same ``below`` is left as it is)."""
        with contextlib.suppress(ObjectAlreadyExists):
            write_manifest(
                self.store,
                layout.retired_key(mark.below),
                "retired",
                mark.to_dict(),
                if_absent=True,
            )

    def delete_retired_mark(self, below: int) -> None:
        self.store.delete(layout.retired_key(below))

    def is_retired(self, epoch: int) -> bool:
        """Below the retention mark and no savepoint points to it: no attempt may commit it."""
        if epoch >= self.retired_below():
            return False
        return epoch not in {s.epoch for s in self.savepoints()}

    # -- listing ---------------------------------------------------------------------------

    def epochs(self, *, include_retired: bool = False) -> dict[int, set[str]]:
        """Epoch number -> names of the documents stored for it. Retired epochs whose
        documents are still there (retention is deleting them) are left out unless asked."""
        found: dict[int, set[str]] = {}
        for info in self.store.list(layout.EPOCHS):
            epoch = layout.epoch_of(info.key)
            if epoch is not None:
                found.setdefault(epoch, set()).add(info.key.split("/", 2)[2])
        below = self.retired_below()
        if include_retired or not any(e < below for e in found):
            return found
        kept = {s.epoch for s in self.savepoints()}
        return {e: names for e, names in found.items() if e >= below or e in kept}

    def committed_epochs(self) -> list[int]:
        """The retained committed epochs, ascending."""
        return sorted(e for e, names in self.epochs().items() if "checkpoint.json" in names)

    def latest_epoch(self) -> int:
        """The highest committed epoch, 0 when none."""
        return max(self.committed_epochs(), default=0)

    def rewinds(self, since: int = 0) -> dict[int, int]:
        """The first epoch of every stored rewind above ``since`` -> the epoch it rewound to
        (read from the plans: a rewind's plan says ``restored_from.retract_after``)."""
        found = {}
        for epoch in sorted(e for e in self.epochs() if e > since):
            plan = self.plan(epoch)
            after = plan.retract_after if plan else None
            if after is not None:
                found[epoch] = int(after)
        return found

    def rewound(self, since: int = 0) -> dict[int, int]:
        """Epochs whose output a rewind retracted -> the rewind's first epoch (only rewinds
        above ``since`` are read)."""
        dead: dict[int, int] = {}
        for first, after in self.rewinds(since).items():
            for epoch in range(after + 1, first):
                dead.setdefault(epoch, first)
        return dead

    def latest_checkpoint(self) -> Checkpoint | None:
        epoch = self.latest_epoch()
        return self.checkpoint(epoch) if epoch else None

    def _read(self, key: str, kind: str) -> dict[str, Any] | None:
        try:
            return read_manifest(self.store, key, kind)
        except ObjectNotFound:
            return None
