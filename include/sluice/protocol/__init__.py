"""The epoch protocol: plan -> process -> commit, with recovery (DESIGN.md §2)."""

from sluice.protocol.commit import commit_epoch
from sluice.protocol.exceptions import (
    AttemptStateError,
    EpochAlreadyCommitted,
    EpochRetired,
    NoPlan,
    NoPreparedAttempt,
    ProtocolError,
    SpecChanged,
)
from sluice.protocol.faults import ALL_FAULT_POINTS, FAULT_POINTS, RETENTION_FAULT_POINTS, Faults
from sluice.protocol.model import (
    AttemptRecord,
    AttemptStatus,
    Checkpoint,
    EpochResult,
    EpochStats,
    OutputFate,
    Plan,
    Restore,
    RetiredMark,
    Savepoint,
    SinksCommitted,
    StateRef,
    Void,
)
from sluice.protocol.plan import plan_epoch
from sluice.protocol.process import process_epoch
from sluice.protocol.recovery import recover
from sluice.protocol.repository import Repository
from sluice.protocol.request import InvalidRunRequest, PlanOptions, RunRequest
from sluice.protocol.retention import (
    RetentionReport,
    SavepointError,
    apply_retention,
    delete_savepoint,
    take_savepoint,
)
from sluice.protocol.runner import EpochOutcome, run_epoch, run_until_drained
from sluice.protocol.runtime import Runtime

__all__ = [
    "ALL_FAULT_POINTS",
    "FAULT_POINTS",
    "RETENTION_FAULT_POINTS",
    "AttemptRecord",
    "AttemptStateError",
    "AttemptStatus",
    "Checkpoint",
    "EpochAlreadyCommitted",
    "EpochOutcome",
    "EpochResult",
    "EpochRetired",
    "EpochStats",
    "Faults",
    "InvalidRunRequest",
    "NoPlan",
    "NoPreparedAttempt",
    "OutputFate",
    "Plan",
    "PlanOptions",
    "ProtocolError",
    "Repository",
    "Restore",
    "RetentionReport",
    "RetiredMark",
    "RunRequest",
    "Runtime",
    "Savepoint",
    "SavepointError",
    "SinksCommitted",
    "SpecChanged",
    "StateRef",
    "Void",
    "apply_retention",
    "commit_epoch",
    "delete_savepoint",
    "plan_epoch",
    "process_epoch",
    "recover",
    "run_epoch",
    "run_until_drained",
    "take_savepoint",
]
