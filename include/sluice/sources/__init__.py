"""Rewindable sources."""

from sluice.sources.base import RECORD_COLUMNS, Offset, Source, SourceRange
from sluice.sources.exceptions import FileBehindOffset, SourceError
from sluice.sources.files import FilesOffset, FilesRange, FilesSource

__all__ = [
    "RECORD_COLUMNS",
    "FileBehindOffset",
    "FilesOffset",
    "FilesRange",
    "FilesSource",
    "Offset",
    "Source",
    "SourceError",
    "SourceRange",
]
