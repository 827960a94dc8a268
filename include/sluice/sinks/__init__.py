"""Two-phase-commit sinks."""

from sluice.sinks.base import Prepared, Sink, StagedFile
from sluice.sinks.files import FilesSink

__all__ = ["FilesSink", "Prepared", "Sink", "StagedFile"]
