"""Errors of the operators: the stateless one here, windows (:mod:`sluice.windows`) and keyed
process functions (:mod:`sluice.keyed.exceptions`) derive from :class:`OperatorError` too."""

from __future__ import annotations

from sluice.exceptions import SluiceError

__all__ = [
    "ExpressionGuardUnavailable",
    "InvalidExpression",
    "LookupTableError",
    "OperatorError",
]


class OperatorError(SluiceError):
    """An operator cannot compute an epoch; the message names the pipeline (and the epoch
    where one is running), as do ``pipeline`` and ``epoch`` (None where not known)."""

    def __init__(
        self, message: str, *, pipeline: str | None = None, epoch: int | None = None
    ) -> None:
        super().__init__(message)
        self.pipeline, self.epoch = pipeline, epoch


class InvalidExpression(OperatorError):
    """A ``select:`` or ``filter:`` expression Spark cannot analyse."""

    def __init__(self, pipeline: str, field: str, expression: str, reason: str) -> None:
        first = reason.strip().splitlines()[0] if reason.strip() else reason
        super().__init__(
            f"pipeline {pipeline}: {field}: Spark cannot evaluate {expression!r}: {first}. "
            "Fix the expression (Spark SQL syntax) in the spec.",
            pipeline=pipeline,
        )
        self.field, self.expression, self.reason = field, expression, reason


class ExpressionGuardUnavailable(OperatorError):
    """The session cannot build a guarded expression (not a classic Spark session)."""

    def __init__(self, pipeline: str, reason: str) -> None:
        super().__init__(
            f"pipeline {pipeline}: select/filter expressions need a classic Spark session "
            f"(py4j gateway) to send failing records to dead letters: {reason}",
            pipeline=pipeline,
        )
        self.reason = reason


class LookupTableError(OperatorError):
    """A lookup table cannot be joined as the epoch's plan pinned it: a pinned file changed
    or is gone, a column is missing or of another type, a key is in two rows."""

    def __init__(self, pipeline: str, epoch: int, lookup: str, uri: str, problem: str,
                 fix: str) -> None:  # fmt: skip
        super().__init__(
            f"pipeline {pipeline}, epoch {epoch}: lookup {lookup} ({uri}): {problem}. {fix}",
            pipeline=pipeline,
            epoch=epoch,
        )
        self.lookup, self.uri, self.problem, self.fix = lookup, uri, problem, fix
