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
    key_columns = _key_columns(rt)
    unknown = sorted(set(keys or {}) - set(key_columns))
    if unknown:
        raise StateViewError(
            f"pipeline {rt.name}: --key {', '.join(unknown)}: not a key column "
            f"(key columns: {', '.join(key_columns) or 'none'})",
            pipeline=rt.name,
        )
    if spec.stateless:
        return None
    frame = operator_for(spec).current_state(read_state(spark, rt, checkpoint.result.state))
    if frame is None:
        return None
    if spec.join is not None:  # the view names its key columns: filter the view
        return _where_keys(_join_view(frame, rt), keys)
    frame = _where_keys(frame, keys)
    if spec.process is not None:
        return _keyed_view(frame, key_columns)
    return _window_view(frame, rt)


def _where_keys(frame: DataFrame, keys: dict[str, str] | None) -> DataFrame:
    """The rows whose columns equal ``keys`` (compared as text)."""
    from pyspark.sql import functions as F

    for column, value in (keys or {}).items():
        frame = frame.where(F.col(f"`{column}`").cast("string") == F.lit(value))
    return frame


def _key_columns(rt: Runtime) -> list[str]:
    if rt.spec.join is not None:
        return [left for left, _ in rt.spec.join.on]
    if rt.spec.process is not None:
        from sluice.keyed.operator import key_columns

        return key_columns(rt.spec)
    return list(rt.spec.key_by)


def _join_view(frame: DataFrame, rt: Runtime) -> DataFrame:
    from pyspark.sql import functions as F

    join = rt.spec.join
    assert join is not None
    left, right = (side.name for side in join.sides)
    columns = [
        F.when(F.col("_side") == 0, F.lit(left)).otherwise(F.lit(right)).alias("side"),
        *[F.col(f"_k{i}").alias(name) for i, (name, _) in enumerate(join.on)],
    ]
    if join.window is not None:
        columns.append(F.timestamp_micros("_ws").alias("window_start"))
    columns += [
        F.timestamp_micros("_ts").alias("event_time"),
        F.timestamp_micros("_exp").alias("kept_until"),
        F.col("_matched").alias("matched"),
        F.when(F.col("_side") == 0, F.to_json("_l")).otherwise(F.to_json("_r")).alias("record"),
    ]
    order = ["side", *[name for name, _ in join.on], "event_time"]
    return frame.select(*columns).orderBy(*[F.col(f"`{c}`") for c in order])


def _keyed_view(frame: DataFrame, key_columns: list[str]) -> DataFrame:
    from pyspark.sql import functions as F

    from sluice.keyed.runner import TIMERS

    columns = [F.col(f"`{k}`") for k in key_columns]
    for name, dtype in frame.dtypes:
        if name in key_columns:
            continue
        if name == TIMERS:
            continue
        label = name[3:] if name.startswith(("_s_", "_t_")) else name
        if name.startswith("_t_"):
            label = f"{label} (ttl stamp)"
        value = F.col(f"`{name}`")
        complex_type = dtype.startswith(("array", "map", "struct"))
        columns.append((F.to_json(value) if complex_type else value).alias(label))
    timers = F.transform(F.col(TIMERS), lambda t: F.timestamp_micros(t).cast("string"))
    pending = F.when(F.col(TIMERS).isNull(), F.lit("[]")).otherwise(F.to_json(timers))
    columns.append(pending.alias("timers"))
    return frame.select(*columns).orderBy(*key_columns)


def _window_view(frame: DataFrame, rt: Runtime) -> DataFrame:
    from sluice.windows.aggregates import finalize_columns
    from sluice.windows.kinds import kind_of

    spec = rt.spec
    dtypes = dict(frame.dtypes)
    # a sum is integral exactly when its partial is (that is how the partial was chosen)
    types = {
        a.column: ("bigint" if dtypes.get(f"_p_{a.name}_s") == "bigint" else "double")
        for a in spec.aggregates
        if a.column is not None
    }
    return kind_of(spec).view(frame, finalize_columns(spec.aggregates, types))


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
