"""``sluice state``: the keyed state of a retained checkpoint or savepoint, as people read it.

The snapshot a checkpoint points to is read with Spark and turned into one row per piece of
state:

* **windows** — one row per open window of a key: the key columns, ``window_start``,
  ``window_end`` (count windows: also ``window_index`` and ``records`` so far) and every
  aggregate *so far*, finalised by the same expressions that produce the output rows; count
  windows add one ``counter`` row per key (records seen, which decides the next window);
  sessions with ``max_duration`` show their fragments (``stub`` marks a closed piece's stub);
* **process functions** — one row per key: each declared state (value, list or map; JSON for
  lists and maps), its TTL stamps when it has a TTL, and the pending timers (event times);
* **stream-stream joins** — one row per record waiting for a match: its ``side`` (the
  source), the join's key columns (named as the left side names them), ``window_start`` (a
  window join), its ``event_time``, ``kept_until`` (the watermark past which no row of the
  other side can match it), ``matched`` (``how: left``) and the columns the state keeps
  (``record``, JSON);
* **stateless pipelines** keep no state: nothing to show (their checkpoints hold offsets and
  the watermark only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.contracts.records import Checkpoint
from sluice.exceptions import StateViewError
from sluice.protocol.runtime import Runtime

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["StateViewError", "parse_key_filters", "resolve_checkpoint", "rows_of", "state_view"]


def resolve_checkpoint(
    rt: Runtime, epoch: int | None = None, savepoint: str | None = None
) -> Checkpoint:
    """The checkpoint of ``epoch``, of ``savepoint``, or the latest one."""
    if epoch is not None and savepoint is not None:
        raise StateViewError(
            f"pipeline {rt.name}: give --epoch or --savepoint, not both", pipeline=rt.name
        )
    if savepoint is not None:
        found = rt.repo.savepoint(savepoint)
        if found is None:
            names = ", ".join(s.name for s in rt.repo.savepoints()) or "none"
            raise StateViewError(
                f"pipeline {rt.name}: no savepoint {savepoint!r} (savepoints: {names})",
                pipeline=rt.name,
                savepoint=savepoint,
            )
        epoch = found.epoch
    epoch = epoch if epoch is not None else rt.repo.latest_epoch()
    checkpoint = rt.repo.checkpoint(epoch) if epoch and not rt.repo.is_retired(epoch) else None
    if checkpoint is None:
        kept = rt.repo.committed_epochs()
        have = ", ".join(map(str, kept)) or "none"
        raise StateViewError(
            f"pipeline {rt.name}: no committed checkpoint {epoch} (retained: {have})",
            pipeline=rt.name,
            epoch=epoch,
            savepoint=savepoint,
        )
    return checkpoint


def state_view(
    spark: SparkSession, rt: Runtime, checkpoint: Checkpoint, keys: dict[str, str] | None = None
) -> DataFrame | None:
    """The readable state of ``checkpoint`` (None when it holds no state), optionally only
    the rows whose key columns equal ``keys`` (compared as text)."""

    from sluice.pipeline import operator_for
    from sluice.protocol.process import read_state

    spec = rt.spec
    operator = operator_for(spec)
    key_columns = operator.key_columns()
    unknown = sorted(set(keys or {}) - set(key_columns))
    if unknown:
        raise StateViewError(
            f"pipeline {rt.name}: --key {', '.join(unknown)}: not a key column "
            f"(key columns: {', '.join(key_columns) or 'none'})",
            pipeline=rt.name,
        )
    if spec.stateless:
        return None
    frame = operator.current_state(read_state(spark, rt, checkpoint.result.state))
    return None if frame is None else operator.view(frame, keys)


def parse_key_filters(pipeline: str, pairs: list[str]) -> dict[str, str]:
    """``["user=alice", "region=eu"]`` -> ``{"user": "alice", "region": "eu"}``."""
    found: dict[str, str] = {}
    for pair in pairs:
        column, sep, value = pair.partition("=")
        if not sep or not column:
            raise StateViewError(
                f"pipeline {pipeline}: --key {pair!r}: expected COLUMN=VALUE", pipeline=pipeline
            )
        found[column] = value
    return found


def rows_of(frame: DataFrame, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows as dicts (timestamps stay datetimes)."""
    taken = frame.limit(limit) if limit is not None else frame
    return [row.asDict(recursive=True) for row in taken.collect()]
