"""The epoch protocol: plan -> process -> commit, with recovery (DESIGN.md §2)."""

from sluice.protocol.commit import commit_epoch
from sluice.protocol.exceptions import (
    AttemptStateError,
    EpochAlreadyCommitted,
    NoPlan,
    NoPreparedAttempt,
    ProtocolError,
    SpecChanged,
)
from sluice.protocol.faults import FAULT_POINTS, Faults
from sluice.protocol.model import (
    AttemptRecord,
    AttemptStatus,
    Checkpoint,
    EpochResult,
    EpochStats,
    Plan,
    SinksCommitted,
    StateRef,
)
from sluice.protocol.plan import plan_epoch
from sluice.protocol.process import process_epoch
from sluice.protocol.recovery import recover
from sluice.protocol.repository import Repository
from sluice.protocol.request import InvalidRunRequest, PlanOptions, RunRequest
from sluice.protocol.runner import EpochOutcome, run_epoch, run_until_drained
from sluice.protocol.runtime import Runtime

__all__ = [
    "FAULT_POINTS",
    "AttemptRecord",
    "AttemptStateError",
    "AttemptStatus",
    "Checkpoint",
    "EpochAlreadyCommitted",
    "EpochOutcome",
    "EpochResult",
    "EpochStats",
    "Faults",
    "InvalidRunRequest",
    "NoPlan",
    "NoPreparedAttempt",
    "Plan",
    "PlanOptions",
    "ProtocolError",
    "Repository",
    "RunRequest",
    "Runtime",
    "SinksCommitted",
    "SpecChanged",
    "StateRef",
    "commit_epoch",
    "plan_epoch",
    "process_epoch",
    "recover",
    "run_epoch",
    "run_until_drained",
]
