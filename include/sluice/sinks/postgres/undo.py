"""What a rewind (docs/rewind.md) needs of a postgres sink's target, and the retraction itself.

Append targets have a ``_sluice_epoch`` column (the epoch that wrote the row), so retracting
epochs is one ``DELETE``. Upsert targets have an undo table ``sluice.undo_<hash>``: each commit
first records, for every key it touches, the row as it was before (or that the key was
absent). Retracting the epochs after ``k`` puts back, per key, the image recorded by the
earliest of them, and deletes their undo rows. Inside a commit this runs in the fence's
transaction, so the rewound output disappears exactly when the replacement appears.
Retention forgets undo rows no retained checkpoint can need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg2 import sql

from sluice.sinks.postgres.catalog import DDL_LOCK, column_names, exists
from sluice.sinks.postgres.names import EPOCH_COLUMN, FENCE_SCHEMA, undo_name

__all__ = ["UndoLog"]

_EXISTED = "_sluice_existed"  # undo tables: whether the key had a row before the epoch


@dataclass(frozen=True)
class UndoLog:
    """The retraction bookkeeping of one sink's target ``schema.table``: an append target's
    epoch column, an upsert target's undo table. Every method runs on the caller's cursor,
    inside the caller's transaction."""

    pipeline: str
    sink: str
    schema: str
    table: str
    mode: str  # "append" or "upsert"
    keys: tuple[str, ...]  # an upsert's primary key

    @property
    def name(self) -> str:
        """The undo table's name, in the fence's schema."""
        return undo_name(self.pipeline, self.sink)

    @property
    def _target(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table)

    @property
    def _undo(self) -> sql.Identifier:
        return sql.Identifier(FENCE_SCHEMA, self.name)

    def ensure(self, cur: Any) -> None:
        """What retraction needs: an append target's epoch column, an upsert's undo table."""
        if self.mode == "append":
            if EPOCH_COLUMN not in column_names(cur, self.schema, self.table):
                cur.execute(
                    sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} bigint").format(
                        self._target, sql.Identifier(EPOCH_COLUMN)
                    )
                )
            return
        if exists(cur, FENCE_SCHEMA, self.name):
            return
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (DDL_LOCK,))
        cur.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {u} (LIKE {t}); "
                "ALTER TABLE {u} ADD COLUMN IF NOT EXISTS {e} bigint NOT NULL DEFAULT 0, "
                "ADD COLUMN IF NOT EXISTS {x} boolean NOT NULL DEFAULT true; "
                "CREATE INDEX IF NOT EXISTS {i} ON {u} ({e})"
            ).format(
                u=self._undo, t=self._target, e=sql.Identifier(EPOCH_COLUMN),
                x=sql.Identifier(_EXISTED),
                i=sql.Identifier(self.name + "_epoch"),
            )
        )  # fmt: skip
        comment = f"sluice undo log (rewinds): pipeline {self.pipeline}, sink {self.sink}"
        cur.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(self._undo, sql.Literal(comment)))

    def record(self, cur: Any, epoch: int, source: sql.Identifier, match: sql.Composable) -> None:
        """Before an upsert epoch changes the target: the rows it touches as they are, and the
        keys it touches that have no row."""
        self.ensure(cur)
        target_cols = column_names(cur, self.schema, self.table)
        cols = sql.SQL(", ").join(map(sql.Identifier, target_cols))
        t_cols = _prefixed("t", target_cols)
        keys = sql.SQL(", ").join(map(sql.Identifier, self.keys))
        s_keys = _prefixed("s", self.keys)
        marks = sql.SQL("{}, {}").format(sql.Identifier(EPOCH_COLUMN), sql.Identifier(_EXISTED))
        cur.execute(
            sql.SQL(
                "INSERT INTO {u} ({cols}, {marks}) SELECT {t_cols}, %s, true FROM {t} t "
                "WHERE EXISTS (SELECT 1 FROM {s} s WHERE {m})"
            ).format(u=self._undo, cols=cols, marks=marks, t_cols=t_cols, t=self._target,
                     s=source, m=match),
            (epoch,),
        )  # fmt: skip
        cur.execute(
            sql.SQL(
                "INSERT INTO {u} ({keys}, {marks}) SELECT DISTINCT {s_keys}, %s, false FROM {s} s "
                "WHERE NOT EXISTS (SELECT 1 FROM {t} t WHERE {m})"
            ).format(u=self._undo, keys=keys, marks=marks, s_keys=s_keys, s=source,
                     t=self._target, m=match),
            (epoch,),
        )  # fmt: skip

    def retract(self, cur: Any, after: int, before: int) -> None:
        """The target as it was when ``after`` was the last epoch published, as far as the
        epochs between ``after`` and ``before`` changed it."""
        epoch = sql.Identifier(EPOCH_COLUMN)
        if not exists(cur, self.schema, self.table):
            return
        self.ensure(cur)
        if self.mode == "append":
            cur.execute(
                sql.SQL("DELETE FROM {} WHERE {e} > %s AND {e} < %s").format(self._target, e=epoch),
                (after, before),
            )
            return
        keys = sql.SQL(", ").join(map(sql.Identifier, self.keys))
        match = sql.SQL(" AND ").join(
            sql.SQL("t.{k} = u.{k}").format(k=sql.Identifier(k)) for k in self.keys
        )
        target_cols = column_names(cur, self.schema, self.table)
        cols = sql.SQL(", ").join(map(sql.Identifier, target_cols))
        first = sql.SQL(
            "(SELECT DISTINCT ON ({keys}) * FROM {u} WHERE {e} > %s AND {e} < %s "
            "ORDER BY {keys}, {e})"
        ).format(keys=keys, u=self._undo, e=epoch)
        cur.execute(
            sql.SQL("DELETE FROM {t} t USING {first} u WHERE {m}").format(
                t=self._target, first=first, m=match
            ),
            (after, before),
        )
        cur.execute(
            sql.SQL("INSERT INTO {t} ({cols}) SELECT {cols} FROM {first} u WHERE u.{x}").format(
                t=self._target, cols=cols, first=first, x=sql.Identifier(_EXISTED)
            ),
            (after, before),
        )
        cur.execute(
            sql.SQL("DELETE FROM {} WHERE {e} > %s AND {e} < %s").format(self._undo, e=epoch),
            (after, before),
        )

    def forget_through(self, cur: Any, epoch: int) -> None:
        """No rewind will go below ``epoch`` any more: drop the undo rows it cannot need."""
        if self.mode != "upsert":
            return
        if exists(cur, FENCE_SCHEMA, self.name):
            cur.execute(
                sql.SQL("DELETE FROM {} WHERE {} <= %s").format(
                    self._undo, sql.Identifier(EPOCH_COLUMN)
                ),
                (epoch,),
            )


def _prefixed(alias: str, names: Sequence[str]) -> sql.Composed:
    """``alias.c1, alias.c2, ...``"""
    return sql.SQL(", ").join(
        sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(c)) for c in names
    )
