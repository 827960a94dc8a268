"""Errors raised by sinks (and by compacting a files sink's output)."""

from __future__ import annotations

from typing import Any, Self, TypedDict

from sluice.exceptions import SluiceError

__all__ = [
    "CompactionConflict",
    "CompactionError",
    "DeltaSinkError",
    "IcebergSinkError",
    "KafkaFenced",
    "KafkaPublishError",
    "KafkaSinkError",
    "PostgresSinkError",
    "SinkError",
    "StagingMissing",
    "StagingTableMissing",
    "Where",
]


class Where(TypedDict):
    """The epoch attempt of one sink an error names (a :class:`SinkError`'s attributes)."""

    pipeline: str
    sink: str
    epoch: int
    attempt: str


class SinkError(SluiceError):
    """A sink cannot stage, publish or retract an epoch's output. ``pipeline``, ``sink``,
    ``epoch`` and ``attempt`` are the ones the message names (None where it names none, e.g. a
    connection URI refused before any pipeline is known)."""

    def __init__(
        self,
        message: str,
        *,
        pipeline: str | None = None,
        sink: str | None = None,
        epoch: int | None = None,
        attempt: str | None = None,
    ) -> None:
        super().__init__(message)
        self.pipeline, self.sink, self.epoch, self.attempt = pipeline, sink, epoch, attempt

    @classmethod
    def without_keys(cls, pipeline: str, sink: str, **where: Any) -> Self:
        """An upsert sink built without keys: the spec fills them in from the pipeline, a sink
        built by hand may lack them. ``where``: what else the sink's errors name."""
        message = f"pipeline {pipeline}, sink {sink}: upsert needs keys"
        return cls(message, pipeline=pipeline, sink=sink, **where)


class PostgresSinkError(SinkError):
    """A postgres sink cannot do what was asked; the message never holds the password."""


class StagingTableMissing(PostgresSinkError):
    """The epoch is not committed and its staged rows are gone: committing now would lose them."""

    def __init__(self, pipeline: str, sink: str, epoch: int, attempt: str, staging: str) -> None:
        super().__init__(
            f"pipeline {pipeline}, sink {sink}: epoch {epoch} (attempt {attempt}) is not "
            f"committed and its staging table {staging} is missing; its rows would be lost",
            pipeline=pipeline,
            sink=sink,
            epoch=epoch,
            attempt=attempt,
        )
        self.staging = staging


class DeltaSinkError(SinkError):
    """A delta sink cannot do what was asked."""


class StagingMissing(DeltaSinkError):
    """The epoch is not in the table and its staged rows are gone: committing would lose them."""

    def __init__(self, pipeline: str, sink: str, epoch: int, attempt: str, staging: str) -> None:
        super().__init__(
            f"pipeline {pipeline}, sink {sink}: epoch {epoch} (attempt {attempt}) is not "
            f"committed to the Delta table and its staged rows at {staging} are gone; its rows "
            "would be lost",
            pipeline=pipeline,
            sink=sink,
            epoch=epoch,
            attempt=attempt,
        )
        self.staging = staging


class IcebergSinkError(SinkError):
    """An iceberg sink cannot do what was asked; the message names the table and never a
    catalog credential."""

    def __init__(
        self,
        message: str,
        *,
        pipeline: str | None = None,
        sink: str | None = None,
        epoch: int | None = None,
        attempt: str | None = None,
        table: str | None = None,
    ) -> None:
        super().__init__(message, pipeline=pipeline, sink=sink, epoch=epoch, attempt=attempt)
        self.table = table


class KafkaSinkError(SinkError):
    """A kafka sink cannot stage or publish an epoch; the message names pipeline, sink,
    epoch, attempt and topic."""

    def __init__(
        self,
        message: str,
        *,
        pipeline: str | None = None,
        sink: str | None = None,
        epoch: int | None = None,
        attempt: str | None = None,
        topic: str | None = None,
    ) -> None:
        super().__init__(message, pipeline=pipeline, sink=sink, epoch=epoch, attempt=attempt)
        self.topic = topic


class KafkaPublishError(KafkaSinkError):
    """The broker refused or lost a publish (a delivery failed, a transaction did not commit)."""


class KafkaFenced(KafkaSinkError):
    """Internal to the kafka sink: another producer with our transactional.id took over (a
    racing commit of the same sink), or ours hit a fatal error; the sink waits for the markers
    and takes the id back. Never escapes the sink."""

    def __init__(self, message: str = "fenced by another producer of the transactional id") -> None:
        super().__init__(message)


class CompactionError(SinkError):
    """Compaction of a files sink could not proceed; names the sink URI."""

    def __init__(self, uri: str, message: str) -> None:
        super().__init__(f"compaction of {uri}: {message}")
        self.uri, self.problem = uri, message


class CompactionConflict(CompactionError):
    """A compacted name is taken, or another compaction with the same id stored a different
    manifest: another compactor is running, or files were changed by hand."""
