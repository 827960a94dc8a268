"""``type: sqlite``: the rows of a SQLite table in id order (the worked example of a source,
:mod:`sluice.examples.sqlite_source`, as a registered type: ``module:Class`` without options).

```yaml
source:
  type: sqlite
  path: data/clicks.db
  table: clicks
  rows_per_epoch: 1000            # optional; id_column: id is the default
  schema: {user: string, ts: timestamp, amount: double}
```
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from sluice.spec.components.base import (
    PositiveInt,
    Schema,
    SourceConfig,
    Text,
    problem,
)

if TYPE_CHECKING:
    pass

__all__ = ["SqliteSourceConfig"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def _identifier(value: Any) -> Any:
    if not isinstance(value, str) or not _IDENTIFIER.match(value):
        raise problem(f"{value!r} is not a name like clicks_1", "letters, digits and '_'")
    return value


Identifier = Annotated[str, BeforeValidator(_identifier)]


class SqliteSourceConfig(SourceConfig):
    type: Literal["sqlite"] = "sqlite"
    path: Text  # the database file
    table: Identifier
    id_column: Identifier = "id"  # increases in commit order; rows never change
    rows_per_epoch: PositiveInt = 1_000
    columns: Schema = Field(alias="schema")

    def describe(self) -> str:
        return f"sqlite table {self.table} in {self.path}, {self.rows_per_epoch} rows/epoch"
