"""Errors of the epoch protocol."""

from __future__ import annotations

from collections.abc import Sequence

from sluice.exceptions import Problem, SluiceError

__all__ = [
    "AttemptStateError",
    "EpochAlreadyCommitted",
    "EpochBeyondNext",
    "EpochRetired",
    "InvalidRunRequest",
    "MissingConnection",
    "NoPlan",
    "NoPreparedAttempt",
    "PluginError",
    "ProtocolError",
    "SavepointError",
    "SpecChanged",
]


class ProtocolError(SluiceError):
    """The stored protocol state does not allow the requested step."""


class NoPlan(ProtocolError):
    def __init__(self, pipeline: str, epoch: int) -> None:
        super().__init__(f"pipeline {pipeline}: epoch {epoch} has no plan; run the plan step first")
        self.pipeline, self.epoch = pipeline, epoch


class NoPreparedAttempt(ProtocolError):
    def __init__(self, pipeline: str, epoch: int) -> None:
        super().__init__(
            f"pipeline {pipeline}: epoch {epoch} has no prepared attempt; run the process step"
        )
        self.pipeline, self.epoch = pipeline, epoch


class EpochAlreadyCommitted(ProtocolError):
    """Another attempt won the commit race; this attempt's output was aborted."""

    def __init__(self, pipeline: str, epoch: int, winner: str, loser: str) -> None:
        super().__init__(
            f"pipeline {pipeline}: epoch {epoch} was committed by attempt {winner}; "
            f"attempt {loser} lost the race and its staged output was removed"
        )
        self.pipeline, self.epoch, self.winner, self.loser = pipeline, epoch, winner, loser


class EpochBeyondNext(ProtocolError):
    """An epoch after the next one was asked for: epochs run one after another, each from the
    checkpoint before it, so it cannot be processed (nor would the next one be instead)."""

    def __init__(self, pipeline: str, epoch: int, next_epoch: int) -> None:
        super().__init__(
            f"pipeline {pipeline}: epoch {epoch} cannot be processed: the next epoch is "
            f"{next_epoch} (epochs run in order, each from the checkpoint before it). Process "
            f"epoch {next_epoch} first (sluice process SPEC without --epoch takes the next one; "
            "sluice plan SPEC plans it if it has no plan); nothing was read or written"
        )
        self.pipeline, self.epoch, self.next_epoch = pipeline, epoch, next_epoch


class EpochRetired(ProtocolError):
    """A stale attempt reached the commit of an epoch that retention has retired: its
    checkpoint may be gone, so committing now could publish that epoch's output twice."""

    def __init__(self, pipeline: str, epoch: int, attempt: str, below: int) -> None:
        super().__init__(
            f"pipeline {pipeline}: epoch {epoch} is retired (every epoch below {below} is, "
            f"checkpoint.retained); attempt {attempt} is stale and its staged output was removed"
        )
        self.pipeline, self.epoch, self.attempt, self.below = pipeline, epoch, attempt, below


class AttemptStateError(ProtocolError):
    def __init__(self, pipeline: str, epoch: int, attempt: str, current: str, wanted: str) -> None:
        super().__init__(
            f"pipeline {pipeline}: epoch {epoch} attempt {attempt} is {current}; "
            f"it cannot become {wanted}"
        )
        self.pipeline, self.epoch, self.attempt = pipeline, epoch, attempt
        self.current, self.wanted = current, wanted


class SpecChanged(ProtocolError):
    """The spec changed in a way that drops stored state, and the run did not allow it."""

    def __init__(self, pipeline: str, epoch: int, differences: list[str]) -> None:
        listed = "\n".join(f"  - {d}" for d in differences)
        super().__init__(
            f"pipeline {pipeline}: the spec no longer matches the state of checkpoint {epoch}; "
            f"continuing would drop state:\n{listed}\n"
            "Restore the old spec; or allow dropping that state for this run (trigger with "
            "allow_state_drop=true, or sluice run --allow-state-drop); or start the pipeline "
            "under a new name. Added aggregates and states, sinks and limits need none of "
            "this (docs/savepoints-and-retention.md)."
        )
        self.pipeline, self.epoch, self.differences = pipeline, epoch, differences


class MissingConnection(ProtocolError):
    """A sink (or a source's part, ``what``) names a connection id that no environment
    variable or Airflow connection gives."""

    def __init__(
        self,
        pipeline: str,
        sink: str,
        connection: str,
        example: str = "postgresql://user:password@host:5432/db",
        what: str = "sink",
    ) -> None:
        env = connection.upper()
        super().__init__(
            f"pipeline {pipeline}: {what} {sink!r} uses connection {connection!r}, which is not "
            f"defined; create the Airflow connection {connection!r} or set SLUICE_CONN_{env} "
            f"(or AIRFLOW_CONN_{env}) to its URI, e.g. {example}"
        )
        self.pipeline, self.sink, self.connection = pipeline, sink, connection
        self.example, self.what = example, what


class PluginError(ProtocolError):
    """A user-defined source or sink (``type: module:Class``) cannot be imported or built:
    the module or class is missing, the class is not a Source / Sink, or its constructor
    raised."""

    def __init__(self, pipeline: str, field: str, reference: str, reason: str) -> None:
        super().__init__(f"pipeline {pipeline}: {field}: cannot use {reference!r}: {reason}")
        self.pipeline, self.field, self.reference, self.reason = pipeline, field, reference, reason


class InvalidRunRequest(ProtocolError):
    """A trigger's conf cannot be honoured; nothing was written."""

    def __init__(self, pipeline: str, problems: Sequence[str | Problem]) -> None:
        self.pipeline = pipeline
        self.details = tuple(Problem.parse(p) for p in problems)  # field, message, fix
        self.problems = [str(p) for p in self.details]  # one line each: "field: message"
        listed = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"pipeline {pipeline!r}: the run request was rejected, nothing was written:\n{listed}"
        )


class SavepointError(ProtocolError):
    """A savepoint cannot be taken, found or deleted; nothing was changed."""

    def __init__(self, pipeline: str, name: str, reason: str) -> None:
        super().__init__(f"pipeline {pipeline}: savepoint {name!r}: {reason}")
        self.pipeline, self.name, self.reason = pipeline, name, reason
