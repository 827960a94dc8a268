"""A rewindable source over a SQLite table: the worked example of a user-defined source
(docs/extending.md).

```yaml
source:
  type: sluice.examples:SqliteSource
  schema: {user: string, ts: timestamp, amount: double}
  options: {path: data/clicks.db, table: clicks, id_column: id, rows_per_epoch: 1000}
```

The offset is the next id to read (``next_id``); an epoch reads the ids ``[start, stop)``.
What makes a replay exact is the table's discipline: ids increase in commit order (an
``INTEGER PRIMARY KEY AUTOINCREMENT`` column with inserts that do not set it) and rows are
never updated or deleted. ``read`` also checks that the range still holds as many rows as
when it was planned and stops the epoch (:class:`RangeChanged`) if not.

Each row is one record at position ``(_partition "0", _major 0, _line id)``; ``_file`` is the
table name and ``_raw`` the row as JSON. Values are turned into text and typed by the rules of
the files source (:mod:`sluice.sources.parsing`), so a value that does not fit its column (SQLite
stores anything anywhere) or a missing event time makes the row a dead letter. Timestamps are
ISO-8601 text (``2026-01-01T00:00:05Z``, ``2026-01-01 00:00:05``; no zone means UTC); booleans
are 0/1 or ``true``/``false``. Rows are read on the driver (``sqlite3``) and handed to Spark:
fine for the example's sizes, not for millions of rows per epoch.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.contracts.sources import Offset, Source, SourceRange
from sluice.examples._sqlite import Options, quote, read_only
from sluice.examples.exceptions import RangeChanged, SqliteSourceError
from sluice.sources.parsing import _typed
from sluice.spec.components.base import SourceConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SqliteOffset", "SqliteRange", "SqliteSource"]

DEFAULT_ROWS_PER_EPOCH = 1_000


@dataclass(frozen=True)
class SqliteOffset(Offset):
    """Every row whose id is below ``next_id`` has been read."""

    next_id: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"type": "sqlite", "next_id": self.next_id}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SqliteOffset:
        if data.get("type") != "sqlite":
            raise ValueError(f"not a sqlite offset: {data!r}")
        return cls(int(data["next_id"]))

    def describe(self) -> str:
        return f"id {self.next_id}"


@dataclass(frozen=True)
class SqliteRange(SourceRange):
    """The ids ``[start.next_id, stop)``, which held ``rows`` rows when planned."""

    start: SqliteOffset
    stop: int
    rows: int

    @property
    def end(self) -> SqliteOffset:
        return SqliteOffset(self.stop)

    @property
    def units(self) -> int:
        return self.rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "sqlite",
            "start": self.start.to_dict(),
            "stop": self.stop,
            "rows": self.rows,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SqliteRange:
        if data.get("type") != "sqlite":
            raise ValueError(f"not a sqlite range: {data!r}")
        return cls(SqliteOffset.from_dict(data["start"]), int(data["stop"]), int(data["rows"]))


class SqliteSource(Source[SqliteOffset, SqliteRange]):
    """Rows of ``options.table`` in ``options.path``, in id order, at most
    ``options.rows_per_epoch`` per epoch. Built by the engine as
    ``SqliteSource(config, options, event_time_column)``, for ``type: sqlite`` (its config's
    settings as options) and ``type: sluice.examples:SqliteSource``."""

    offset_type = SqliteOffset
    range_type = SqliteRange

    unit_name = "rows"

    def __init__(self, config: SourceConfig, options: dict[str, Any], event_time: str) -> None:
        opts = Options("sqlite source", options, {"path", "table", "id_column", "rows_per_epoch"})
        self.config = config
        self.path = opts.text("path")
        self.table = opts.identifier("table")
        self.id_column = opts.identifier("id_column", "id")
        self.rows_per_epoch = opts.positive_int("rows_per_epoch", DEFAULT_ROWS_PER_EPOCH)
        self.required = (event_time,)  # a row without an event time is a dead letter

    @property
    def location(self) -> str:
        return f"sqlite://{Path(self.path).resolve()}#{self.table}"

    def initial_offset(self) -> SqliteOffset:
        return SqliteOffset(0)

    # -- planning ---------------------------------------------------------------------------

    def plan_range(
        self, start: Offset, max_units: int | None, max_records: int | None = None
    ) -> SqliteRange | None:
        """The next ids from ``start``: at most ``rows_per_epoch`` rows, fewer if a cap says
        so (a row is a unit and a record), at least one."""
        assert isinstance(start, SqliteOffset)
        caps = [c for c in (self.rows_per_epoch, max_units, max_records) if c is not None]
        query = (
            f"SELECT {self._id} FROM {quote(self.table)} WHERE {self._id} >= ? ORDER BY 1 LIMIT ?"
        )
        ids = [row[0] for row in self._query(query, (start.next_id, max(1, min(caps))))]
        if not ids:
            return None
        for value in ids:
            if isinstance(value, bool) or not isinstance(value, int):
                raise SqliteSourceError(
                    f"{self.location}: column {self.id_column} holds {value!r}, not an integer id",
                    source=self.location,
                )
        return SqliteRange(start, ids[-1] + 1, len(ids))

    def pending_units(self, start: Offset) -> int | None:
        assert isinstance(start, SqliteOffset)
        query = f"SELECT count(*) FROM {quote(self.table)} WHERE {self._id} >= ?"
        return int(self._query(query, (start.next_id,))[0][0])

    def offset_from_user(self, data: dict[str, Any]) -> SqliteOffset:
        """``{"next_id": N}``: read the rows with ids ``>= N``."""
        unknown = sorted(set(data) - {"type", "next_id"})
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}; a sqlite offset is {{'next_id': N}}")
        if data.get("type", "sqlite") != "sqlite":
            raise ValueError(f"type {data['type']!r} is not 'sqlite' (this pipeline reads sqlite)")
        value = data.get("next_id")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"next_id must be a row id >= 0, not {value!r}")
        return SqliteOffset(value)

    def is_before(self, a: Offset, b: Offset) -> bool:
        assert isinstance(a, SqliteOffset) and isinstance(b, SqliteOffset)
        return a.next_id < b.next_id

    # -- reading ----------------------------------------------------------------------------

    def read(self, spark: SparkSession, rng: SourceRange) -> DataFrame:
        """Exactly the rows with ids in ``[start, stop)``, typed; the same rows every call."""
        assert isinstance(rng, SqliteRange)
        columns = [c for c, _ in self.config.schema]
        selected = ", ".join([self._id, *map(quote, columns)])
        rows = self._query(
            f"SELECT {selected} FROM {quote(self.table)} "
            f"WHERE {self._id} >= ? AND {self._id} < ? ORDER BY 1",
            (rng.start.next_id, rng.stop),
        )
        if len(rows) != rng.rows:
            raise RangeChanged(self.location, rng.start.next_id, rng.stop, rng.rows, len(rows))
        frame = spark.createDataFrame([self._record(row) for row in rows], self._text_schema())
        return _typed(frame, self.config.schema, self.required, [])  # never malformed

    def _record(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        """``(_file, _major, _line, _raw, _j)``; ``_j`` holds every value as text."""
        row_id, values = row[0], dict(zip(self.config.schema, row[1:], strict=True))
        raw = {self.id_column: row_id, **{c: _jsonable(v) for (c, _), v in values.items()}}
        texts = tuple(_text(v, kind) for (_, kind), v in values.items())
        return (self.table, 0, row_id, json.dumps(raw), texts)

    def _text_schema(self) -> str:
        texts = ", ".join(f"`{c}`: string" for c, _ in self.config.schema)
        return f"_file string, _major int, _line bigint, _raw string, _j struct<{texts}>"

    @property
    def _id(self) -> str:
        return quote(self.id_column)

    def _query(self, query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        try:
            with read_only(self.path) as conn:
                return conn.execute(query, params).fetchall()
        except sqlite3.Error as exc:
            raise SqliteSourceError(
                f"{self.location}: {type(exc).__name__}: {exc}", source=self.location
            ) from exc


def _text(value: Any, kind: str) -> str | None:
    """A SQLite value as the text the typing rules expect (None stays None)."""
    if value is None:
        return None
    if kind == "boolean" and value in (0, 1) and not isinstance(value, str):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _jsonable(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
