"""Root of every error Sluice raises on purpose.

Subpackages define their own ``exceptions.py`` whose classes derive from :class:`SluiceError`.
Messages name the pipeline, epoch and object key wherever they are known.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem", "SluiceError"]


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
        """``field: message`` (and the fix), one line."""
        fix = f" Fix: {self.fix}" if self.fix else ""
        return f"{self.field}: {self.message}{fix}"

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
