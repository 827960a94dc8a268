"""Errors of keyed process functions: a function that cannot be found, one that raised."""

from __future__ import annotations

from typing import Any

from sluice.operators.exceptions import OperatorError

__all__ = ["ERROR_MARK", "FunctionNotFound", "KeyedFunctionError", "ProcessFunctionFailed"]

# Prefixes a KeyedFunctionError's message: the driver finds that line in a Spark executor's
# error text (the exception object itself does not cross back).
ERROR_MARK = "sluice-keyed-function-failed: "


class FunctionNotFound(OperatorError):
    """A spec's function reference names nothing importable or registered."""

    def __init__(self, pipeline: str, field: str, reference: str, reason: str) -> None:
        super().__init__(
            f"pipeline {pipeline}: {field}: cannot find function {reference!r}: {reason}",
            pipeline=pipeline,
        )
        self.field, self.reference, self.reason = field, reference, reason


class KeyedFunctionError(OperatorError):
    """A user function raised (or returned rows that do not fit the declared output)."""

    def __init__(self, pipeline: str, epoch: int, key: Any, function: str, problem: str) -> None:
        super().__init__(
            f"{ERROR_MARK}pipeline {pipeline}, epoch {epoch}, key {key!r}: {function}: {problem}",
            pipeline=pipeline,
            epoch=epoch,
        )
        self.key, self.function, self.problem = key, function, problem


class ProcessFunctionFailed(OperatorError):
    """The epoch stopped because a process function raised: the driver's copy of an executor's
    :class:`KeyedFunctionError` (the message, taken from Spark's error, names the key)."""
