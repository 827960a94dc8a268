"""Errors of the Nexmark generator."""

from __future__ import annotations

from sluice.exceptions import SluiceError

__all__ = ["InvalidEventRange", "InvalidFilesRequest", "InvalidNexmarkConfig", "NexmarkError"]


class NexmarkError(SluiceError):
    """Base class of the Nexmark generator's errors."""


class InvalidNexmarkConfig(NexmarkError, ValueError):
    """A :class:`~sluice.nexmark.model.NexmarkConfig` with one or more bad fields.

    ``problems`` holds one ``"field: reason"`` line per bad field, all found at once.
    """

    def __init__(self, problems: tuple[str, ...]) -> None:
        super().__init__("invalid Nexmark config:\n  " + "\n  ".join(problems))
        self.problems = problems


class InvalidEventRange(NexmarkError, ValueError):
    """An event-number range ``[start, stop)`` the generator cannot produce."""

    def __init__(self, start: int, stop: int, reason: str) -> None:
        super().__init__(f"event range [{start}, {stop}): {reason}")
        self.start = start
        self.stop = stop
        self.reason = reason


class InvalidFilesRequest(NexmarkError, ValueError):
    """A ``write_files`` argument (other than the range) that cannot be honoured."""

    def __init__(self, argument: str, value: object, reason: str) -> None:
        super().__init__(f"write_files {argument}={value!r}: {reason}")
        self.argument = argument
        self.value = value
        self.reason = reason
