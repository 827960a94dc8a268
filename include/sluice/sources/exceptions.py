"""Errors raised by sources."""

from __future__ import annotations

from sluice.exceptions import SourceError
from sluice.words import count

__all__ = [
    "ChangedFiles",
    "KafkaOffsetsGone",
    "KafkaSourceError",
    "PlannedFilesGone",
    "SourceError",
    "UnreadableFileNames",
]


class ChangedFiles(SourceError):
    """Files read before have changed since (same name, other size or content) and the
    source says ``changed_files: fail``: the epoch is not planned. ``changes`` say how, one
    per file (``was ..., now ...``)."""

    def __init__(self, source: str, files: list[str], changes: list[str]) -> None:
        self.files, self.changes = files, changes
        shown = "; ".join(
            f"{shown_key(f)} ({c})" for f, c in list(zip(files, changes, strict=True))[:5]
        )
        more = f" and {len(files) - 5} more" if len(files) > 5 else ""
        super().__init__(
            f"{source}: {len(files)} file(s) changed after they were read: {shown}{more}. "
            "A file is read once; with changed_files: fail the next epoch is not planned "
            "until they are put back or removed (changed_files: report reports each as a "
            "dead letter and goes on)",
            source=source,
        )


class UnreadableFileNames(SourceError):
    """Files the next epoch would read whose names no reader can open (a local name that is
    not valid UTF-8): that epoch is not planned, rather than the files skipped silently.
    ``reasons`` say why, one per file. The plan step gives ``pipeline`` and ``epoch``
    (:meth:`in_epoch`); the source alone does not know them."""

    def __init__(
        self,
        source: str,
        files: list[str],
        reasons: list[str],
        pipeline: str | None = None,
        epoch: int | None = None,
    ) -> None:
        self.files, self.reasons = files, reasons
        self.pipeline, self.epoch = pipeline, epoch
        listed = "; ".join(f"{shown_key(f)} ({r})" for f, r in zip(files, reasons, strict=True))
        where = f"pipeline {pipeline}: epoch {epoch} cannot be planned: " if pipeline else ""
        super().__init__(
            f"{where}{source}: {len(files)} file name(s) cannot be read: {listed}. They are "
            "not skipped: rename them (or move them out of the source path), then run again",
            source=source,
        )

    def in_epoch(self, pipeline: str, epoch: int) -> UnreadableFileNames:  # the plan step's
        """The same error, naming the pipeline and the epoch it stops."""
        assert self.source is not None
        return UnreadableFileNames(self.source, self.files, self.reasons, pipeline, epoch)


class PlannedFilesGone(SourceError):
    """Files an epoch's plan names are gone (deleted, replaced by a folder) before the epoch
    read them: the epoch cannot read what its plan says, and reading less would lose records
    silently. The process step gives ``pipeline`` and ``epoch`` (:meth:`in_epoch`)."""

    def __init__(
        self, source: str, files: list[str], pipeline: str | None = None, epoch: int | None = None
    ) -> None:
        self.files, self.pipeline, self.epoch = files, pipeline, epoch
        listed = ", ".join(shown_key(f) for f in files[:5])
        more = f" and {len(files) - 5} more" if len(files) > 5 else ""
        where = f"pipeline {pipeline}: epoch {epoch}: " if pipeline else ""
        super().__init__(
            f"{where}{source}: the planned input {listed}{more} is gone (the plan fixed the "
            "files this epoch reads, and they are read exactly). Nothing was written. Put the "
            "file(s) back to run the epoch as planned, or skip them with a run request that "
            "restores from offsets after them (docs/rewind.md)",
            source=source,
        )

    def in_epoch(self, pipeline: str, epoch: int) -> PlannedFilesGone:  # the process step's
        """The same error, naming the pipeline and the epoch it stops."""
        assert self.source is not None
        return PlannedFilesGone(self.source, self.files, pipeline, epoch)


def shown_key(key: str) -> str:
    """``key`` quoted, a name's bytes that are not UTF-8 shown as ``\\xNN`` (printable)."""
    raw = key.encode("utf-8", "surrogateescape")
    return "'" + raw.decode("utf-8", "backslashreplace") + "'"


class KafkaSourceError(SourceError):
    """The broker cannot give what the plan needs (a topic or partition is gone...)."""


class KafkaOffsetsGone(KafkaSourceError):
    """Offsets the pipeline must read are no longer retained by the broker. ``missing`` holds
    ``(topic, partition, first missing, end)`` per partition."""

    def __init__(self, source: str, missing: list[tuple[str, int, int, int]], what: str) -> None:
        self.missing = missing
        self.what = what
        listed = "; ".join(
            f"topic {t} partition {p}: offsets {lo}..{hi - 1} ({count(hi - lo, 'records')})"
            for t, p, lo, hi in missing
        )
        super().__init__(
            f"kafka source {source}: {what} needs offsets the broker no longer has ({listed}); "
            "they were deleted by retention or deleteRecords. Nothing was read. Set "
            "source.on_missing_offsets: earliest to continue from the earliest offsets still "
            "there (the gap is recorded in the plan)",
            source=source,
        )
