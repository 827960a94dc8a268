"""The epoch protocol: plan -> process -> commit, with recovery (docs/epoch-protocol.md).
The documents it stores are :mod:`sluice.contracts.records`.

``process_epoch`` and the runner (``run_epoch``, ``run_until_drained``, ``EpochOutcome``) load
on first use: they bring in the operators and PySpark, which plan and commit (Airflow's light
tasks) and DAG parsing never need.
"""

import importlib
from typing import TYPE_CHECKING, Any

from sluice.protocol.commit import commit_epoch
from sluice.protocol.exceptions import (
    AttemptStateError,
    EpochAlreadyCommitted,
    EpochBeyondNext,
    EpochRetired,
    NoPlan,
    NoPreparedAttempt,
    ProtocolError,
    SpecChanged,
)
from sluice.protocol.faults import ALL_FAULT_POINTS, FAULT_POINTS, RETENTION_FAULT_POINTS, Faults
from sluice.protocol.plan import plan_epoch
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
from sluice.protocol.runtime import Runtime

if TYPE_CHECKING:
    from sluice.protocol.process import process_epoch
    from sluice.protocol.runner import EpochOutcome, run_epoch, run_until_drained

__all__ = [
    "ALL_FAULT_POINTS",
    "FAULT_POINTS",
    "RETENTION_FAULT_POINTS",
    "AttemptStateError",
    "EpochAlreadyCommitted",
    "EpochBeyondNext",
    "EpochOutcome",
    "EpochRetired",
    "Faults",
    "InvalidRunRequest",
    "NoPlan",
    "NoPreparedAttempt",
    "PlanOptions",
    "ProtocolError",
    "Repository",
    "RetentionReport",
    "RunRequest",
    "Runtime",
    "SavepointError",
    "SpecChanged",
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

_SPARK_SIDE = {
    "process_epoch": "sluice.protocol.process",
    "EpochOutcome": "sluice.protocol.runner",
    "run_epoch": "sluice.protocol.runner",
    "run_until_drained": "sluice.protocol.runner",
}


def __getattr__(name: str) -> Any:
    if name in _SPARK_SIDE:
        return getattr(importlib.import_module(_SPARK_SIDE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
