"""A files source's offsets and ranges: what it has read, and what one epoch reads.

An offset names the set of files read (:class:`~sluice.sources.files_read.ReadSet`, stored
beside the checkpoints) plus the rules that need no list: every key that sorts at or before
``after_key`` counts as read (an offset a person typed, or one stored before files were
tracked as a set), and what bounds the next listing (the newest modification time and layout
time read). Offsets written before sets (``{"after_key", "files_consumed",
"consumed_digest"}``) read as ``after_key`` alone: exactly the files they had read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sluice.contracts.sources import Offset, SourceRange
from sluice.sources.files_read import FileEntry, ReadSet

__all__ = ["ChangedFile", "FilesOffset", "FilesRange"]


@dataclass(frozen=True)
class FilesOffset(Offset):
    """Everything a files source has read up to an epoch's end."""

    read: ReadSet = field(default_factory=ReadSet)
    after_key: str | None = None  # every key at or before it (in the source's name order)
    newest_modified_ns: int | None = None  # of the files read (max_file_age's reference)
    newest_time: int | None = None  # the newest layout time read, s (the lookback's)
    # the notifications topic: the next offset of each partition, and plans since a listing
    events: tuple[tuple[int, int], ...] | None = None
    since_listing: int = 0

    @property
    def event_offsets(self) -> dict[int, int] | None:
        return None if self.events is None else dict(self.events)

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"type": "files", "read": self.read.to_dict()}
        optional = {
            "after_key": self.after_key,
            "newest_modified_ns": self.newest_modified_ns,
            "newest_time": self.newest_time,
            "events": None if self.events is None else {str(p): o for p, o in self.events},
            "since_listing": self.since_listing or None,
        }
        return found | {k: v for k, v in optional.items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FilesOffset:
        if data.get("type") != "files":
            raise ValueError(f"not a files offset: {data!r}")
        if "read" not in data:  # stored before sets: the key order alone
            return cls(after_key=data.get("after_key"))
        events = data.get("events")
        return cls(
            ReadSet.from_dict(data["read"]),
            data.get("after_key"),
            _int(data.get("newest_modified_ns")),
            _int(data.get("newest_time")),
            None if events is None else tuple(sorted((int(p), int(o)) for p, o in events.items())),
            int(data.get("since_listing") or 0),
        )

    def describe(self) -> str:
        parts = []
        if self.read.files or not self.after_key:
            parts.append(f"{self.read.files} file{'' if self.read.files == 1 else 's'} read")
        if self.after_key:
            parts.append(f"all up to {self.after_key}")
        return ", ".join(parts)


@dataclass(frozen=True)
class ChangedFile:
    """A file found changed since it was read: its name, as read, as listed now."""

    key: str
    was: FileEntry
    now: FileEntry

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "was": list(self.was), "now": list(self.now)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChangedFile:
        return cls(data["key"], _entry(data["was"]), _entry(data["now"]))

    def reason(self) -> str:
        """The dead-letter reason a changed file is reported with."""
        return (
            f"changed_file: the file changed after it was read (was {self.was.describe()}, "
            f"now {self.now.describe()}); it is not read again"
        )


@dataclass(frozen=True)
class FilesRange(SourceRange):
    """The files one epoch reads, in read order, from ``start``; ``end_offset`` names the set
    of files read once they are (written when the range was planned). ``changed``: files read
    before that have changed since (reported, not read); ``waiting``: partitions with files
    left for a later epoch."""

    start: FilesOffset
    files: tuple[str, ...]
    end_offset: FilesOffset | None = None  # None: a range stored before sets
    changed: tuple[ChangedFile, ...] = ()
    waiting: tuple[str, ...] = ()

    @property
    def end(self) -> FilesOffset:
        if self.end_offset is not None:
            return self.end_offset
        return FilesOffset(after_key=self.files[-1] if self.files else self.start.after_key)

    @property
    def units(self) -> int:
        return len(self.files)

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "type": "files",
            "start": self.start.to_dict(),
            "files": list(self.files),
        }
        if self.end_offset is not None:
            found["end"] = self.end_offset.to_dict()
        if self.changed:
            found["changed"] = [c.to_dict() for c in self.changed]
        if self.waiting:
            found["waiting"] = list(self.waiting)
        return found

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FilesRange:
        end = data.get("end")
        return cls(
            FilesOffset.from_dict(data["start"]),
            tuple(data["files"]),
            FilesOffset.from_dict(end) if end is not None else None,
            tuple(ChangedFile.from_dict(c) for c in data.get("changed", ())),
            tuple(str(p) for p in data.get("waiting", ())),
        )


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _entry(value: list[Any]) -> FileEntry:
    size, modified, etag = value
    return FileEntry(int(size), int(modified), str(etag))
