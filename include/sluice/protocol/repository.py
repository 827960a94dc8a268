"""Typed reads and writes of the protocol's documents in checkpoint storage."""

from __future__ import annotations

from typing import Any

from sluice.protocol import layout
from sluice.protocol.model import AttemptRecord, Checkpoint, Plan, SinksCommitted
from sluice.storage import ObjectNotFound, ObjectStore
from sluice.storage.manifest import read_manifest, write_manifest

__all__ = ["Repository"]


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

    # -- listing ---------------------------------------------------------------------------

    def epochs(self) -> dict[int, set[str]]:
        """Epoch number -> names of the documents stored for it."""
        found: dict[int, set[str]] = {}
        for info in self.store.list(layout.EPOCHS):
            epoch = layout.epoch_of(info.key)
            if epoch is not None:
                found.setdefault(epoch, set()).add(info.key.split("/", 2)[2])
        return found

    def latest_epoch(self) -> int:
        """The highest committed epoch, 0 when none."""
        committed = [e for e, names in self.epochs().items() if "checkpoint.json" in names]
        return max(committed, default=0)

    def latest_checkpoint(self) -> Checkpoint | None:
        epoch = self.latest_epoch()
        return self.checkpoint(epoch) if epoch else None

    def planned_files(self) -> set[str]:
        """Every input unit any stored plan covers (used to name files behind the offset)."""
        seen: set[str] = set()
        for epoch in self.epochs():
            plan = self.plan(epoch)
            if plan is not None:
                seen.update(plan.source_range.get("files", []))
        return seen

    def _read(self, key: str, kind: str) -> dict[str, Any] | None:
        try:
            return read_manifest(self.store, key, kind)
        except ObjectNotFound:
            return None
