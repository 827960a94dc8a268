"""Rewindable sources."""

from typing import TYPE_CHECKING, Any

from sluice.contracts.sources import RECORD_COLUMNS, Offset, Source, SourceRange
from sluice.sources.exceptions import ChangedFiles, SourceError, UnreadableFileNames
from sluice.sources.files import FilesOffset, FilesRange, FilesSource

if TYPE_CHECKING:
    from sluice.sources.nexmark import NexmarkOffset, NexmarkRange, NexmarkSource

__all__ = [
    "RECORD_COLUMNS",
    "ChangedFiles",
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
    "UnreadableFileNames",
]

_NEXMARK = ("NexmarkOffset", "NexmarkRange", "NexmarkSource")


def __getattr__(name: str) -> Any:
    """The Nexmark source on first use: its generator loads numpy and pyarrow, which planning
    a files source (and parsing the DAG file) never needs."""
    if name in _NEXMARK:
        from sluice.sources import nexmark

        return getattr(nexmark, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
