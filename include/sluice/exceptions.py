"""Root of every error Sluice raises on purpose.

Each subpackage defines its errors in its own ``exceptions.py``, every class deriving from
:class:`SluiceError`; this module holds the root and the errors of top-level modules. Sources',
sinks' and operators' errors derive from ``SourceError`` (here: the protocol catches it),
``SinkError`` (:mod:`sluice.sinks.exceptions`) and ``OperatorError``
(:mod:`sluice.operators.exceptions`). Messages name the pipeline, epoch and object key wherever
they are known, and the error carries them as attributes too.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem", "SluiceError", "SourceError", "StateViewError", "TableUnavailable"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with what a user wrote (a spec, a run request): where (``field``, in
    the dotted form the user wrote it: ``sinks[0].path``), what (``message``) and how to fix it.
    """

    field: str
    message: str
    fix: str = ""

    @property
    def problem(self) -> str:
        """The message (the name spec problems have always used)."""
        return self.message

    def render(self, source: str) -> str:
        fix = f" Fix: {self.fix}" if self.fix else ""
        return f"{source}: {self.field}: {self.message}.{fix}"

    def __str__(self) -> str:
        """``field: message`` (and the fix), one line; a problem of no field (``-``) is its
        message."""
        fix = f" Fix: {self.fix}" if self.fix else ""
        where = "" if self.field == "-" else f"{self.field}: "
        return f"{where}{self.message}{fix}"

    @classmethod
    def parse(cls, line: str | Problem) -> Problem:
        """A problem from its one-line form ``field: message`` (a line without a field is
        the message of the field ``-``)."""
        if isinstance(line, Problem):
            return line
        field, sep, message = line.partition(": ")
        return cls(field, message) if sep and " " not in field else cls("-", line)


class SluiceError(Exception):
    """Base class of all Sluice errors."""


class SourceError(SluiceError):
    """A source cannot produce the requested range. ``source`` is the location the message
    names (a URI, ``topic@servers``...; None where it names none).

    Defined here, under every floor, because the protocol catches it by this class alone: it
    never knows which source raised it (the sources' errors derive from it in
    :mod:`sluice.sources.exceptions`). A source does not know the pipeline or the epoch it
    stops, so the plan and process steps ask :meth:`in_epoch` for the error naming them."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        super().__init__(message)
        self.source = source

    def in_epoch(self, pipeline: str, epoch: int) -> SourceError | None:
        """The same error naming ``pipeline`` and ``epoch``; None (the default): raised as
        it is."""
        return None


class StateViewError(SluiceError):
    """``sluice state``: the requested checkpoint or key filter cannot be shown; nothing was
    read. ``pipeline``, ``epoch`` and ``savepoint`` are those the message names (or None)."""

    def __init__(
        self,
        message: str,
        *,
        pipeline: str | None = None,
        epoch: int | None = None,
        savepoint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.pipeline, self.epoch, self.savepoint = pipeline, epoch, savepoint


class TableUnavailable(SluiceError):
    """A lookup table has no version to pin (an empty folder, no Delta log, an unreachable
    database): the plan is refused with ``problem`` and ``fix``; ``where`` describes the table
    when ``problem`` does not name it. Defined here, under every floor, because the protocol
    catches it from every lookup kind (:mod:`sluice.lookups`) without knowing which."""

    def __init__(self, problem: str, fix: str, where: str | None = None) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem, self.fix, self.where = problem, fix, where
