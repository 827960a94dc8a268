"""Errors raised while reading a pipeline spec."""

from __future__ import annotations

from sluice.exceptions import Problem, SluiceError

__all__ = ["InvalidType", "SpecError", "SpecProblem"]

SpecProblem = Problem  # one thing wrong with a spec: where, what, and how to fix it


class SpecError(SluiceError):
    """A spec failed validation; carries every problem found, not just the first."""

    def __init__(self, source: str, problems: list[SpecProblem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        lines = [p.render(source) for p in problems]
        head = f"invalid pipeline spec ({len(lines)} problem{'s' if len(lines) != 1 else ''})"
        super().__init__(head + ":\n  " + "\n  ".join(lines))


class InvalidType(SluiceError, ValueError):
    """Not a type this syntax describes (:mod:`sluice.spec.types`); the message says where,
    ``text`` is the whole type as written."""

    def __init__(self, message: str, *, text: str) -> None:
        super().__init__(message)
        self.text = text
