"""Named fault points: a test can make the process die (SIGKILL) at any protocol step.

Set ``SLUICE_FAULT=<point>`` (and optionally ``SLUICE_FAULT_EPOCH=<n>``) in the environment of
a ``sluice`` process; :meth:`Faults.from_env` reads it once at start-up, so the engine itself
never consults the environment. With ``SLUICE_FAULT_ONCE=<path>`` the fault fires only in the
first process that gets there (it creates ``path``): an orchestrator's retry then runs clean.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "ALL_FAULT_POINTS",
    "COMPACTION_FAULT_POINTS",
    "FAULT_POINTS",
    "RELEASE_FAULT_POINTS",
    "RETENTION_FAULT_POINTS",
    "Faults",
]

FAULT_POINTS = (
    "plan.before_write",  # range chosen, plan not yet stored
    "plan.after_write",  # plan stored
    "process.after_start",  # attempt record STARTED written
    "process.after_state",  # new state snapshot written
    "process.after_prepare",  # every sink staged
    "process.after_attempt",  # attempt record PREPARED written
    "commit.before_checkpoint",  # about to write the commit point
    "commit.after_checkpoint",  # checkpoint written, sinks not yet committed
    "commit.mid_sinks",  # first sink committed, others not
    "commit.after_sinks",  # all sinks committed, marker not written
    "commit.after_marker",  # sinks-committed written, cleanup not done
)
# Reached only when a commit retires old epochs (more than ``checkpoint.retained`` committed).
RETENTION_FAULT_POINTS = (
    "retention.after_mark",  # retention mark written, nothing deleted yet
    "retention.mid_delete",  # the first retired epoch deleted, the others not
)
# Reached only when retention hands read input back to a source that cleans it (a files
# source's clean_source: sluice.protocol.release).
RELEASE_FAULT_POINTS = (
    "release.after_record",  # the epoch's release recorded, no file moved yet
    "release.after_move",  # its files moved (or deleted), the record not yet marked done
)
# Reached only when an epoch writes its state as a new base (sluice.state: compaction).
COMPACTION_FAULT_POINTS = (
    "state.after_compaction",  # the new base's files written, the attempt not yet PREPARED
)
ALL_FAULT_POINTS = (
    FAULT_POINTS + RETENTION_FAULT_POINTS + RELEASE_FAULT_POINTS + COMPACTION_FAULT_POINTS
)


@dataclass(frozen=True)
class Faults:
    point: str | None = None
    epoch: int | None = None
    once_marker: str | None = None

    def __post_init__(self) -> None:
        if self.point is not None and self.point not in ALL_FAULT_POINTS:
            raise ValueError(f"unknown fault point {self.point!r}; known: {list(ALL_FAULT_POINTS)}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Faults:
        epoch = env.get("SLUICE_FAULT_EPOCH")
        return cls(
            env.get("SLUICE_FAULT") or None,
            int(epoch) if epoch else None,
            env.get("SLUICE_FAULT_ONCE") or None,
        )

    def hit(self, point: str, epoch: int) -> None:
        """Die here, abruptly, if this is the configured point (no cleanup, no flush)."""
        assert point in ALL_FAULT_POINTS, point
        if point == self.point and self.epoch in (None, epoch) and self._first_hit():
            os.kill(os.getpid(), signal.SIGKILL)

    def _first_hit(self) -> bool:
        if self.once_marker is None:
            return True
        try:
            os.close(os.open(self.once_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True
