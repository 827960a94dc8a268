"""Errors raised by sources."""

from __future__ import annotations

from sluice.exceptions import SluiceError

__all__ = ["FileBehindOffset", "SourceError"]


class SourceError(SluiceError):
    """A source cannot produce the requested range."""


class FileBehindOffset(SourceError):
    """New input files sort at or before the committed offset: reading them would break the
    key order that offsets rely on, and skipping them would lose data."""

    def __init__(self, source: str, files: list[str], after_key: str) -> None:
        self.files = files
        self.after_key = after_key
        shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        super().__init__(
            f"{source}: new file(s) {shown} sort at or before the committed offset "
            f"{after_key!r}; they were never read and will not be skipped silently. Give them "
            "keys that sort after it (e.g. a later timestamp prefix), or remove them."
        )
