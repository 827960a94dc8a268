"""Errors of the worked examples (the SQLite source and sink)."""

from __future__ import annotations

from sluice.exceptions import SluiceError
from sluice.sinks.exceptions import SinkError
from sluice.sources.exceptions import SourceError

__all__ = [
    "InvalidOptions",
    "RangeChanged",
    "SqliteSinkError",
    "SqliteSourceError",
    "StagingTableMissing",
]


class InvalidOptions(SluiceError):
    """A plugin's ``options`` are missing a setting or hold a wrong one."""

    def __init__(self, owner: str, option: str, problem: str) -> None:
        super().__init__(f"{owner}: options.{option}: {problem}")
        self.owner, self.option, self.problem = owner, option, problem


class SqliteSourceError(SourceError):
    """The SQLite source cannot plan or read a range."""


class RangeChanged(SqliteSourceError):
    """A planned range no longer holds the rows it held when it was planned: replaying it
    would not give the same records, so the epoch stops instead."""

    def __init__(self, source: str, start: int, stop: int, planned: int, found: int) -> None:
        super().__init__(
            f"{source}: ids [{start}, {stop}) held {planned} row(s) when planned and hold "
            f"{found} now; rows inside a planned range were inserted or deleted. Only append "
            "rows with ids above every id read so far.",
            source=source,
        )
        self.start, self.stop, self.planned, self.found = start, stop, planned, found


class SqliteSinkError(SinkError):
    """The SQLite sink cannot do what was asked."""


class StagingTableMissing(SqliteSinkError):
    """The epoch is not committed and its staged rows are gone: committing now would lose them."""

    def __init__(self, where: str, staging: str) -> None:
        super().__init__(
            f"{where}: not committed yet and its staging table {staging} is missing; "
            "its rows would be lost"
        )
        self.where, self.staging = where, staging
