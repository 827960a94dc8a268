"""Two-phase-commit sinks."""

from sluice.contracts.records import Prepared, StagedFile
from sluice.contracts.sinks import Sink
from sluice.sinks.files import FilesSink

__all__ = ["FilesSink", "Prepared", "Sink", "StagedFile"]
