"""What the SQLite source and sink share: options, identifiers, connections."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from sluice.examples.exceptions import InvalidOptions

__all__ = ["Options", "quote", "read_only", "transaction"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
BUSY_TIMEOUT_S = 60.0  # how long a writer waits for another's transaction (racing commits)


class Options:
    """A plugin's ``options``, checked one setting at a time; unknown names are refused."""

    def __init__(self, owner: str, options: Mapping[str, Any], known: set[str]) -> None:
        self.owner, self.options = owner, dict(options)
        unknown = sorted(set(self.options) - known)
        if unknown:
            raise InvalidOptions(owner, unknown[0], f"unknown setting; known: {sorted(known)}")

    def text(self, name: str) -> str:
        value = self.options.get(name)
        if not isinstance(value, str) or not value:
            raise InvalidOptions(self.owner, name, f"{value!r} is not a non-empty string")
        return value

    def identifier(self, name: str, default: str | None = None) -> str:
        value = self.options.get(name, default)
        if not isinstance(value, str) or not _IDENTIFIER.match(value):
            raise InvalidOptions(self.owner, name, f"{value!r} is not a name like clicks_1")
        return value

    def positive_int(self, name: str, default: int) -> int:
        value = self.options.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidOptions(self.owner, name, f"{value!r} is not a whole number >= 1")
        return value


def quote(name: str) -> str:
    """``name`` as an SQL identifier (double quotes, doubled inside)."""
    return '"' + name.replace('"', '""') + '"'


@contextmanager
def read_only(path: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection; a missing file is an error, never a new empty database."""
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    with closing(sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)) as conn:
        yield conn


@contextmanager
def transaction(path: str) -> Iterator[sqlite3.Connection]:
    """One write transaction (``BEGIN IMMEDIATE``: SQLite lets one writer in at a time, the
    others wait), committed on exit, rolled back on an exception."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
