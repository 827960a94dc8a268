"""Rewindable sources."""

from sluice.sources.base import RECORD_COLUMNS, Offset, Source, SourceRange
from sluice.sources.exceptions import FileBehindOffset, SourceError
from sluice.sources.files import FilesOffset, FilesRange, FilesSource
from sluice.sources.nexmark import NexmarkOffset, NexmarkRange, NexmarkSource

__all__ = [
    "RECORD_COLUMNS",
    "FileBehindOffset",
    "FilesOffset",
    "FilesRange",
    "FilesSource",
    "NexmarkOffset",
    "NexmarkRange",
    "NexmarkSource",
    "Offset",
    "Source",
    "SourceError",
    "SourceRange",
]
