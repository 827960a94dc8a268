"""Worked examples of the extension points (docs/extending.md), runnable as they are:

* :class:`SqliteSource` — a user-defined rewindable source (offset = next row id);
* :class:`SqliteSink` — a user-defined two-phase-commit sink (staging table + commit fence).

A spec names them like any class of your own: ``type: sluice.examples:SqliteSource``.
"""

from sluice.examples.sqlite_sink import SqliteSink
from sluice.examples.sqlite_source import SqliteOffset, SqliteRange, SqliteSource

__all__ = ["SqliteOffset", "SqliteRange", "SqliteSink", "SqliteSource"]
